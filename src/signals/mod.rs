//! Where the numbers come from: Prometheus queries, the decision server and the shared HTTP
//! plumbing under them; `read` is the one path every query of a sync takes.

pub mod allow;
pub mod decision_server;
pub mod gate;
pub mod histogram;
pub mod http;
pub mod no_series;
pub mod prometheus;
pub mod read;
