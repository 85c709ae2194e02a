//! The scaling-quality lab: a request-level vLLM fleet, the metric pipeline each autoscaler
//! reads through, every peer's control law, and the runner that replays one seeded workload
//! under each of them (common random numbers: one seed is one exact run for every policy).

pub mod chart;
pub mod engine;
pub mod exported;
pub mod metrics;
pub mod oracle;
pub mod peers;
pub mod policy;
pub mod report;
pub mod request_log;
pub mod results_csv;
pub mod run;
pub mod traces;
pub mod verdict;
pub mod workload;
