//! Where the numbers come from: Prometheus queries and the shared HTTP plumbing under them.

pub mod allow;
pub mod cache;
pub mod decision;
pub mod http;
pub mod prometheus;
