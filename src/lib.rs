//! llmscaleoperator: autoscales LLM inference workloads on token-serving signals.
//!
//! - `api`: the LLMScaler resource, its validation and its conversion to the control law's terms.
//! - `scaling`: the control law, pure (the clock is passed in).
//! - `signals`: where the numbers come from (Prometheus, a decision server) over one HTTP client.
//! - `controller`: one sync per scaler, observe then write (see `controller::reconcile`).
//! - `metric_cache`: what the controller hands to the external metrics API (`extmetrics`).
//! - `leader`, `supervisor`, `telemetry`, `tls`, `names`, `failure`, `error_chain`: the process
//!   around them.

// The crate's own name inside it too, so code written against it from outside (the lab's
// operator entrant, benches/lab/operator.rs) also builds within it, in the fast tier's tests.
extern crate self as llmscaleoperator;

pub mod api;
pub mod controller;
pub mod error_chain;
pub mod extmetrics;
pub mod failure;
pub mod leader;
pub mod metric_cache;
pub mod names;
pub mod scaling;
pub mod signals;
pub mod supervisor;
pub mod telemetry;
pub mod tls;
