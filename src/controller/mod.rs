//! Everything that talks to the cluster on behalf of an LLMScaler.

pub mod events;
mod preflight;
mod reconcile;
pub mod scale;
pub mod status;
pub mod target;
pub mod targets;
pub mod victims;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{Controller, WatchStreamExt, predicates, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::api::LLMScaler;
use crate::signals::cache::{MetricCache, ScalerKey};
use crate::telemetry::metrics::Metrics;

pub use preflight::{PreflightError, preflight};
pub use reconcile::ReconcileError;

/// What every sync needs, built once at start-up.
pub struct Context {
    pub client: Client,
    /// One pool for every signal source.
    pub http: reqwest::Client,
    pub targets: targets::TargetWatches,
    pub cache: MetricCache,
    pub recorder: Recorder,
    pub metrics: Metrics,
    /// (topic, scaler uid) pairs already told once.
    told: std::sync::Mutex<std::collections::HashSet<(&'static str, String)>>,
    /// Scaler uids known to have left no deletion-cost marks behind. Unknown (e.g. after a
    /// restart) counts as "may have marks", so the first sync checks.
    unmarked: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Context {
    /// True the first time it is asked about this topic for this scaler incarnation.
    pub fn first_time(&self, topic: &'static str, uid: &str) -> bool {
        let mut told = self
            .told
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        told.insert((topic, uid.to_owned()))
    }

    pub fn may_have_marks(&self, uid: &str) -> bool {
        let unmarked = self
            .unmarked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        !unmarked.contains(uid)
    }

    pub fn set_may_have_marks(&self, uid: &str, may: bool) {
        let mut unmarked = self
            .unmarked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if may {
            unmarked.remove(uid);
        } else {
            unmarked.insert(uid.to_owned());
        }
    }
}

/// Which LLMScalers this process is responsible for.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Only this namespace, or every namespace when `None`.
    pub namespace: Option<String>,
}

impl Scope {
    pub fn scalers(&self, client: Client) -> Api<LLMScaler> {
        match &self.namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        }
    }
}

/// The pieces shared with the rest of the process.
pub struct Shared {
    pub cache: MetricCache,
    pub metrics: Metrics,
    pub http: reqwest::Client,
    /// Reported as the instance of every event (the pod name in a cluster).
    pub instance: Option<String>,
}

/// Runs the LLMScaler controller until `shutdown` fires.
pub async fn run(client: Client, scope: Scope, shared: Shared, shutdown: CancellationToken) {
    let scalers = scope.scalers(client.clone());
    let reporter = Reporter {
        controller: "llmscaleoperator".to_owned(),
        instance: shared.instance,
    };
    let ctx = Arc::new(Context {
        targets: targets::TargetWatches::new(
            client.clone(),
            scope.namespace.clone(),
            shutdown.clone(),
        ),
        recorder: Recorder::new(client.clone(), reporter),
        http: shared.http,
        cache: shared.cache,
        metrics: shared.metrics,
        told: Default::default(),
        unmarked: Default::default(),
        client,
    });

    let (reader, writer) = reflector::store();
    let forget = ctx.clone();
    let stream = reflector::reflector(
        writer,
        watcher(scalers, watcher::Config::default().any_semantic()),
    )
    .default_backoff()
    .inspect(move |event| {
        if let Ok(watcher::Event::Delete(scaler)) = event {
            forget_scaler(&forget, scaler);
        }
    })
    .applied_objects()
    // Our own status writes do not change the generation, so they do not trigger a sync.
    .predicate_filter(predicates::generation, Default::default());

    let stopping = shutdown.clone();
    let controller = Controller::for_stream(stream, reader)
        .graceful_shutdown_on(async move { stopping.cancelled().await })
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile did not complete");
            }
        });
    // kube-runtime holds its runner until the LLMScaler store is ready; a shutdown that lands
    // before the first list completes would otherwise wait forever. Syncs in flight get a grace.
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        () = controller => {}
        () = deadline => tracing::warn!(grace = ?SHUTDOWN_GRACE, "the controller did not stop in time; exiting anyway"),
    }
}

/// How long syncs in flight may take to finish once shutdown is asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

fn forget_scaler(ctx: &Context, scaler: &LLMScaler) {
    let namespace = scaler.namespace().unwrap_or_default();
    let name = scaler.name_any();
    ctx.cache.remove(&ScalerKey {
        namespace: namespace.clone(),
        name: name.clone(),
    });
    ctx.metrics.forget(&namespace, &name);
    tracing::info!(scaler = %name, namespace = %namespace, "LLMScaler deleted");
}

/// Upper bound on any single start-up call to the API server.
pub(crate) const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
