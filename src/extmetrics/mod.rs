//! The external.metrics.k8s.io API, served from the controller's metric cache.

pub mod authn;
pub mod certs;
pub mod quantity;
pub mod registration;
pub mod review;
pub mod selector;
pub mod server;
pub mod status_response;
pub mod values;
