//! Where the numbers come from: Prometheus queries and the shared HTTP plumbing under them.

pub mod allow;
pub mod decision_server;
pub mod gate;
pub mod http;
pub mod no_series;
pub mod prometheus;
