//! /healthz, /readyz and (unless it is served on its own authenticated port) /metrics on one
//! listener.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::{Router, extract::State, routing::get};
use tokio_util::sync::CancellationToken;

use super::TelemetryError;
use super::metrics::Metrics;

/// Readiness as seen by the probes: live as soon as the process serves, ready once the
/// controller has started.
#[derive(Clone, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AppState {
    health: Health,
    metrics: Metrics,
}

/// Binds the listener. Separate from serving so a taken port fails start-up loudly.
pub async fn bind_health(addr: SocketAddr) -> Result<tokio::net::TcpListener, TelemetryError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| TelemetryError::Bind { addr, source })
}

/// Serves the probes, and /metrics when `with_metrics`, until `shutdown` fires.
pub async fn serve_health(
    listener: tokio::net::TcpListener,
    health: Health,
    metrics: Metrics,
    with_metrics: bool,
    shutdown: CancellationToken,
) -> Result<(), TelemetryError> {
    let mut app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz));
    if with_metrics {
        app = app.route(
            "/metrics",
            get(|State(state): State<AppState>| async move { metrics_text(&state.metrics) }),
        );
    }
    let app = app.with_state(AppState { health, metrics });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(TelemetryError::Serve)
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.health.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// The OpenMetrics exposition, or 500 if it cannot be encoded.
pub(super) fn metrics_text(metrics: &Metrics) -> axum::response::Response {
    match metrics.encode() {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(error) => {
            tracing::warn!(error = %crate::error_chain::Chain(&error), "cannot encode metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
