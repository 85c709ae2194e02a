//! Logging, the operator's own Prometheus metrics, and the HTTP endpoints serving them with the
//! health probes.

mod endpoints;
mod labels;
mod logging;
pub mod metrics;
mod scaler_series;
mod secure_metrics;
pub mod sync_report;

pub use endpoints::{Health, bind_health, serve_health};
pub use logging::{LogFormat, init_logging};
pub use secure_metrics::{METRICS_PATH, serve_secure_metrics};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TelemetryError {
    #[error("invalid log filter {filter:?}")]
    Filter {
        filter: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("cannot install the log subscriber")]
    Install(#[from] tracing_subscriber::util::TryInitError),
    #[error("cannot listen for health probes and metrics on {addr}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("health server failed")]
    Serve(#[source] std::io::Error),
    #[error("cannot serve the authenticated metrics on {addr}")]
    SecureServe {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot make the metrics port's certificate")]
    Certificate(#[source] crate::tls::TlsError),
    #[error("cannot serve the metrics port's certificate")]
    CertificateConfig(#[source] crate::extmetrics::server::ServeError),
}
