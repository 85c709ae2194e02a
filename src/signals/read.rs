//! The one read of a signal source. Every query of a sync — each metric, the scale-to-zero
//! activation query, the decision server, the deletion-cost query — goes through a [`Server`]:
//! the query is timed, its outcome classified (whether the control law can use it) and its error
//! rendered whole with the request's credentials redacted, here and nowhere else. The caller
//! records the [`Read`] under the name the query serves (the controller: the operator's query
//! metrics) and hands its value on.

use std::future::Future;
use std::time::{Duration, Instant};

use reqwest::Url;
use reqwest::header::HeaderMap;

use thiserror::Error;

use super::decision_server;
use super::http::Redacted;
use super::no_series::{self, Diagnosis};
use super::prometheus::{self, QueryError, Series};

/// What an answer with no series is worth to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenEmpty {
    /// A problem to explain: Prometheus is asked which of the query's matchers no series carries
    /// (a few more queries, on this path only), so the error says what to check.
    Explain,
    /// Expected (no pod is Ready, so per-pod series are gone): the empty answer as it is,
    /// without asking more of Prometheus at every sync of a fleet at zero.
    Expected,
}

/// Why a PromQL query gave no value.
#[derive(Debug, Error)]
pub enum PromqlError {
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error("the query returned no series: {0}")]
    NoSeries(Diagnosis),
}

/// A signal server as a sync reaches it: serverAddress, the client for it and the request
/// headers (credentials among them, so every error it returns is redacted of them).
#[derive(Clone, Copy)]
pub struct Server<'a> {
    pub client: &'a reqwest::Client,
    pub address: &'a str,
    pub headers: &'a HeaderMap,
}

/// One query's outcome, as it is recorded and handed on.
#[derive(Debug)]
pub struct Read<T> {
    pub value: Result<T, Redacted>,
    pub took: Duration,
    /// Whether the law can use what came back: an answer of NaN was read, yet is no value.
    pub usable: bool,
}

impl Server<'_> {
    /// The single value of a PromQL query.
    pub async fn value(&self, query: &str, when_empty: WhenEmpty) -> Read<f64> {
        let answer = async {
            match prometheus::query_value(self.client, self.address, self.headers, query).await {
                Err(QueryError::Empty) if when_empty == WhenEmpty::Explain => {
                    Err(self.no_series(query).await)
                }
                other => Ok(other?),
            }
        };
        self.read(answer, |v| v.is_finite()).await
    }

    /// Every series of a PromQL query (a per-pod query); an answer with no series is an error
    /// that says which matcher no series carries.
    pub async fn series(&self, query: &str) -> Read<Vec<Series>> {
        let answer = async {
            match prometheus::query_vector(self.client, self.address, self.headers, query).await? {
                series if series.is_empty() => Err(self.no_series(query).await),
                series => Ok(series),
            }
        };
        self.read(answer, |series| series.iter().all(|s| s.value.is_finite()))
            .await
    }

    /// An answer with no series, explained: which matcher of the query no series carries.
    async fn no_series(&self, query: &str) -> PromqlError {
        PromqlError::NoSeries(
            no_series::diagnose(self.client, self.address, self.headers, query).await,
        )
    }

    /// The replica count the decision server at `url` gives `service_id`.
    pub async fn decision(
        &self,
        url: &Url,
        service_id: &str,
        namespace: Option<&str>,
    ) -> Read<i32> {
        let answer =
            decision_server::fetch_decision(self.client, url, self.headers, service_id, namespace);
        self.read(answer, |_| true).await
    }

    async fn read<T, E>(
        &self,
        answer: impl Future<Output = Result<T, E>>,
        usable: impl Fn(&T) -> bool,
    ) -> Read<T>
    where
        E: std::error::Error + 'static,
    {
        let started = Instant::now();
        let value = answer.await;
        let took = started.elapsed();
        Read {
            usable: value.as_ref().is_ok_and(usable),
            value: value.map_err(|e| Redacted::new(&e, self.headers)),
            took,
        }
    }
}
