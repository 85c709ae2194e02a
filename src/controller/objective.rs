//! Reading a scaler's objective through the one signal read: the requests in flight per engine
//! it scales on, and one window of the pods' latency histograms and load it learns from. The
//! queries are the ones `api::objective` composes from the spec's selector.

use futures::future::join4;
use thiserror::Error;

use super::Context;
use super::reads::recorded;
use super::server_access::ServerAccess;
use crate::api::LLMScaler;
use crate::api::objective::Queries;
use crate::names::{
    OBJECTIVE_ADMITTED_QUERY, OBJECTIVE_LOAD_QUERY, OBJECTIVE_QUEUE_QUERY, OBJECTIVE_TPOT_QUERY,
};
use crate::scaling::{Latency, Unreadable};
use crate::signals::histogram::{self, BucketsError};
use crate::signals::http::Redacted;
use crate::signals::prometheus::Series;
use crate::signals::read::{Read, WhenEmpty};

/// Why the latency window could not be read.
#[derive(Debug, Error)]
pub enum LatencyError {
    #[error("{query}: {error}")]
    Read {
        query: &'static str,
        #[source]
        error: Redacted,
    },
    #[error("{query}: {error}")]
    Buckets {
        query: &'static str,
        #[source]
        error: BucketsError,
    },
}

/// One window of what the pods exported: both histograms, the mean requests running per engine
/// and the requests admitted a second, read concurrently. A histogram or the load missing is an
/// error (a gap is never read as idle); the admission rate missing is carried in the window, whose
/// other reads still count.
pub(super) async fn latency(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    access: &ServerAccess,
    queries: &Queries,
) -> Result<Latency, Unreadable> {
    let server = access.at(&scaler.spec.server_address);
    let name = scaler.metadata.name.as_deref().unwrap_or_default();
    let record = |query: &'static str, read: Read<Vec<Series>>| {
        recorded(&ctx.metrics, namespace, name, query, read)
            .map_err(|error| LatencyError::Read { query, error })
            .and_then(|series| {
                histogram::cumulative(&series)
                    .map_err(|error| LatencyError::Buckets { query, error })
            })
    };
    let value = |query: &'static str, read: Read<f64>| {
        recorded(&ctx.metrics, namespace, name, query, read)
            .map_err(|error| LatencyError::Read { query, error })
    };
    let (queue, tpot, load, admitted) = join4(
        server.series(&queries.queue),
        server.series(&queries.tpot),
        server.value(&queries.load, WhenEmpty::Explain),
        server.value(&queries.admitted, WhenEmpty::Explain),
    )
    .await;
    // Each read is recorded, whether or not another failed.
    let queue = record(OBJECTIVE_QUEUE_QUERY, queue);
    let tpot = record(OBJECTIVE_TPOT_QUERY, tpot);
    let load = value(OBJECTIVE_LOAD_QUERY, load);
    // The admissions only steady the trend's hold: without them the window still counts.
    let admitted = value(OBJECTIVE_ADMITTED_QUERY, admitted).map_err(Unreadable::new);
    queue
        .and_then(|queue| Ok((queue, tpot?, load?)))
        .map(|(queue, tpot, load)| Latency {
            queue,
            tpot,
            load,
            admitted,
        })
        .map_err(Unreadable::new)
}
