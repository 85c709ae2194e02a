//! The global tracing subscriber.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use super::TelemetryError;

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
