//! Logging and the health endpoints that kubelet probes.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::{Router, extract::State, http::StatusCode, routing::get};
use thiserror::Error;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

#[derive(Debug, Error)]
pub enum TelemetryError {
    #[error("invalid log filter {filter:?}: {source}")]
    Filter {
        filter: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("cannot install the log subscriber: {0}")]
    Install(#[from] tracing_subscriber::util::TryInitError),
    #[error("cannot listen for health probes on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("health server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the global tracing subscriber. `RUST_LOG`, when set, overrides `level`.
pub fn init_logging(format: LogFormat, level: &str) -> Result<(), TelemetryError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.is_empty() => env,
        _ => level.to_owned(),
    };
    let filter = EnvFilter::try_new(&filter).map_err(|source| TelemetryError::Filter {
        filter: filter.clone(),
        source,
    })?;
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(fmt::layer().with_ansi(std::io::stdout().is_terminal()))
            .try_init()?,
        LogFormat::Json => registry
            .with(fmt::layer().json().flatten_event(true))
            .try_init()?,
    }
    Ok(())
}

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

/// Binds the health listener. Separate from serving so a taken port fails start-up loudly.
pub async fn bind_health(addr: SocketAddr) -> Result<tokio::net::TcpListener, TelemetryError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| TelemetryError::Bind { addr, source })
}

/// Serves /healthz and /readyz until `shutdown` fires.
pub async fn serve_health(
    listener: tokio::net::TcpListener,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), TelemetryError> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(TelemetryError::Serve)
}

async fn readyz(State(health): State<Health>) -> (StatusCode, &'static str) {
    if health.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
