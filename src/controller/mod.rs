//! Everything that talks to the cluster on behalf of an LLMScaler.

mod preflight;
mod reconcile;
pub mod scale;
pub mod status;
pub mod target;
pub mod targets;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::api::LLMScaler;

pub use preflight::{PreflightError, preflight};
pub use reconcile::ReconcileError;

/// What every reconcile needs, built once at start-up.
pub struct Context {
    pub client: Client,
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

/// Runs the LLMScaler controller until `shutdown` fires.
pub async fn run(client: Client, scope: Scope, shutdown: CancellationToken) {
    let scalers = scope.scalers(client.clone());
    let ctx = Arc::new(Context { client });
    Controller::new(scalers, watcher::Config::default().any_semantic())
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile did not complete");
            }
        })
        .await;
}

/// Upper bound on any single start-up call to the API server.
pub(crate) const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
