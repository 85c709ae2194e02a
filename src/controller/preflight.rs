//! Start-up checks that turn a misconfigured environment into one clear sentence.

use kube::api::ListParams;
use kube::{Client, CustomResourceExt};
use thiserror::Error;

use super::{STARTUP_TIMEOUT, Scope};
use crate::api::LLMScaler;

#[derive(Debug, Error)]
pub enum PreflightError {
    #[error("cannot reach the Kubernetes API server at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error(
        "the LLMScaler CRD ({crd}) is not installed in this cluster: install it with `llmscaleoperator crd | kubectl apply --server-side -f -` or the Helm chart"
    )]
    CrdMissing { crd: String },
    #[error(
        "not allowed to list LLMScalers ({reason}): grant the operator's ServiceAccount list/watch on llmscalers.autoscaling.modelsphere.dev"
    )]
    Forbidden { reason: String },
    #[error("cannot list LLMScalers")]
    List(#[source] kube::Error),
}

/// Checks that the API server answers and serves the LLMScaler resource.
pub async fn preflight(client: &Client, url: &str, scope: &Scope) -> Result<(), PreflightError> {
    let unreachable = |reason: String| PreflightError::Unreachable {
        url: url.to_owned(),
        reason,
    };
    match tokio::time::timeout(STARTUP_TIMEOUT, client.apiserver_version()).await {
        Err(_) => {
            return Err(unreachable(format!(
                "no answer within {}s",
                STARTUP_TIMEOUT.as_secs()
            )));
        }
        Ok(Err(error)) => return Err(unreachable(crate::error_chain::render(&error))),
        Ok(Ok(_)) => {}
    }
    // Every watch must be allowed: a Role missing in one namespace is a start-up error, not a
    // namespace silently left alone.
    for namespace in scope.watches() {
        let scalers = super::scalers(client.clone(), namespace.as_deref());
        let listed = tokio::time::timeout(
            STARTUP_TIMEOUT,
            scalers.list_metadata(&ListParams::default().limit(1)),
        )
        .await
        .map_err(|_| unreachable(format!("no answer within {}s", STARTUP_TIMEOUT.as_secs())))?;
        match listed {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(PreflightError::CrdMissing {
                    crd: LLMScaler::crd_name().to_owned(),
                });
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {
                return Err(PreflightError::Forbidden {
                    reason: status.message.clone(),
                });
            }
            Err(error) => return Err(PreflightError::List(error)),
        }
    }
    Ok(())
}
