//! The external.metrics.k8s.io API, served from the controller's metric cache.

pub mod quantity;
pub mod selector;
pub mod status;
pub mod values;
