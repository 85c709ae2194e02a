//! `/metrics` on its own HTTPS port, for callers the API server vouches for: a bearer token it
//! accepts (TokenReview) and the right to `get` the non-resource URL `/metrics`
//! (SubjectAccessReview), as kube-rbac-proxy and controller-runtime's secure metrics do. The
//! probes stay open on the health address; only the metrics move here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Router, routing::get};
use tokio_util::sync::CancellationToken;

use super::TelemetryError;
use super::endpoints::metrics_text;
use super::metrics::Metrics;
use crate::extmetrics::authn::bearer;
use crate::extmetrics::review::{Access, Reviewer};

/// The path a caller must be allowed to `get`: bind a ClusterRole with
/// `nonResourceURLs: ["/metrics"], verbs: ["get"]` to the scraper (the chart's
/// `<release>-metrics-reader`).
pub const METRICS_PATH: &str = "/metrics";

#[derive(Clone)]
struct SecureState {
    reviewer: Arc<Reviewer>,
    metrics: Metrics,
}

/// Serves `/metrics` over TLS (a self-signed certificate made at start, as kube-rbac-proxy does
/// by default: scrapers check who they talk to by the Service, not the certificate) until
/// `shutdown` fires.
pub async fn serve_secure_metrics(
    listener: std::net::TcpListener,
    reviewer: Arc<Reviewer>,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), TelemetryError> {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let certificate =
        crate::tls::self_signed(&["localhost".to_owned()]).map_err(TelemetryError::Certificate)?;
    let config = crate::extmetrics::server::server_config(&certificate)
        .map_err(TelemetryError::CertificateConfig)?;
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(config));
    let app = Router::new()
        .route(METRICS_PATH, get(guarded_metrics))
        .with_state(SecureState { reviewer, metrics });
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        stopper.graceful_shutdown(Some(Duration::from_secs(5)));
    });
    axum_server::tls_rustls::from_tcp_rustls(listener, tls)
        .map_err(|source| TelemetryError::SecureServe { addr, source })?
        .handle(handle)
        .serve(app.into_make_service())
        .await
        .map_err(|source| TelemetryError::SecureServe { addr, source })
}

/// Who is asking, then whether they may: 401 without an accepted token, 403 without the right,
/// 503 when the API server cannot be asked (the scrape fails loudly; it is retried next time).
async fn guarded_metrics(State(state): State<SecureState>, headers: HeaderMap) -> Response {
    let Some(token) = bearer(&headers) else {
        return (StatusCode::UNAUTHORIZED, "a bearer token is required\n").into_response();
    };
    let user = match state.reviewer.user_of(token).await {
        Ok(Some(user)) => user,
        Ok(None) => {
            return (
                StatusCode::UNAUTHORIZED,
                "the API server did not accept the bearer token\n",
            )
                .into_response();
        }
        Err(error) => {
            tracing::warn!(error = %crate::error_chain::Chain(&error), "cannot review a /metrics caller's token");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "cannot review the token now\n",
            )
                .into_response();
        }
    };
    match state
        .reviewer
        .allowed(&user, &Access::Path(METRICS_PATH.to_owned()))
        .await
    {
        Ok(true) => metrics_text(&state.metrics).into_response(),
        Ok(false) => (
            StatusCode::FORBIDDEN,
            format!("user {:?} may not get {METRICS_PATH}\n", user.name),
        )
            .into_response(),
        Err(error) => {
            tracing::warn!(error = %crate::error_chain::Chain(&error), user = %user.name, "cannot check a /metrics caller's access");
            (StatusCode::SERVICE_UNAVAILABLE, "cannot check access now\n").into_response()
        }
    }
}
