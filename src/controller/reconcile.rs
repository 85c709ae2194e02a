//! One reconcile of one LLMScaler.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use thiserror::Error;

use super::Context;
use crate::api::LLMScaler;

#[derive(Debug, Error)]
pub enum ReconcileError {
    #[error("LLMScaler has no namespace")]
    NoNamespace,
}

/// Observes the scaler and schedules its next sync. The scaling decision itself is made by the
/// pure core once it exists; until then a sync only records that the scaler was seen.
pub async fn reconcile(
    scaler: Arc<LLMScaler>,
    _ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let namespace = scaler.namespace().ok_or(ReconcileError::NoNamespace)?;
    let spec = &scaler.spec;
    tracing::info!(
        scaler = %scaler.name_any(),
        namespace = %namespace,
        target.kind = %spec.target_ref.kind,
        target.name = %spec.target_ref.name,
        provider = ?spec.metric_provider,
        min = spec.min_replicas,
        max = spec.max_replicas,
        "observed LLMScaler"
    );
    Ok(Action::requeue(period(spec.sync_period_seconds)))
}

pub fn error_policy(scaler: Arc<LLMScaler>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(scaler = %scaler.name_any(), %error, "sync failed, retrying");
    Action::requeue(period(scaler.spec.retry_period_seconds))
}

/// A period from the spec; admission guarantees >= 1, but an object stored before that rule must
/// not spin the controller.
fn period(seconds: i32) -> Duration {
    Duration::from_secs(u64::try_from(seconds.max(1)).unwrap_or(1))
}
