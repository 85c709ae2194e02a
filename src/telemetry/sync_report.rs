//! One sync as the operator's metrics see it, recorded by the metrics themselves (the shape of
//! controller-rs's `ReconcileMetrics`): the controller fills a [`SyncReport`] and spends one
//! line on metrics (`Metrics::record`); which series gets which number is decided in
//! `scaler_series`, and nothing here imports the controller.

use std::time::Duration;

use super::labels::SyncResult;
use crate::failure::FailureReason;

/// What one sync of one scaler did.
pub struct SyncReport<'a> {
    pub namespace: &'a str,
    pub scaler: &'a str,
    pub elapsed: Duration,
    /// How late after its instant of the period the sync had read its signal; none for a sync
    /// that was not due (brought forward by a change, the first after a start).
    pub lateness: Option<Duration>,
    /// Each condition the sync sets, by name, and whether it is True.
    pub conditions: Vec<(&'static str, bool)>,
    pub outcome: Reported<'a>,
}

/// How the sync ended.
pub enum Reported<'a> {
    Failed(FailureReason),
    Decided(Decided<'a>),
}

/// A sync that reached a decision.
pub struct Decided<'a> {
    pub result: SyncResult,
    /// Each metric read: its name, its value (none when it could not be read) and its target.
    pub metrics: Vec<(&'a str, Option<f64>, Option<f64>)>,
    /// Other metric names whose series stay (the activation query, read apart).
    pub also_in_use: Vec<&'a str>,
    pub desired: i32,
    pub ready: i32,
    pub paused: bool,
    pub min: i32,
    pub max: i32,
    pub syncs_without_signal: u32,
    /// Under an objective: the share of the last minute's requests that met it, at least (none
    /// when none finished).
    pub attainment: Option<f64>,
    /// Under an objective: the share of the learned capacity the Ready pods have spare (none
    /// when in-flight was not read).
    pub headroom: Option<f64>,
    /// The count written, when this sync wrote spec.replicas, and the count it had before.
    pub written: Option<(i32, i32)>,
}
