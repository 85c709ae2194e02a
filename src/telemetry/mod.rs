//! Logging, the operator's own Prometheus metrics, and the HTTP endpoints serving them with the
//! health probes.

mod endpoints;
mod logging;
pub mod metrics;

pub use endpoints::{Health, bind_health, serve_health};
pub use logging::{LogFormat, init_logging};

use thiserror::Error;

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
    #[error("cannot listen for health probes and metrics on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("health server failed: {0}")]
    Serve(#[source] std::io::Error),
}
