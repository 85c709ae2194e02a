//! llmscaleoperator: autoscales LLM inference workloads on token-serving signals.
//!
//! `api` defines the LLMScaler resource, `controller` reconciles it against the cluster,
//! `telemetry` sets up logging and health endpoints and `tls` holds the process-wide TLS setup.

pub mod api;
pub mod controller;
pub mod extmetrics;
pub mod leader;
pub mod scaling;
pub mod signals;
pub mod supervisor;
pub mod telemetry;
pub mod tls;
