//! One sync as the operator's metrics see it, recorded by the metrics themselves (the shape of
//! controller-rs's `ReconcileMetrics`): the controller fills a [`SyncReport`] and spends one
//! line on metrics; which family gets which number is decided here, and nothing here imports
//! the controller.

use std::collections::BTreeSet;
use std::time::Duration;

use super::metrics::{
    FailureLabels, MetricLabels, Metrics, ScaleLabels, SyncLabels, SyncResult, scaler_labels,
};
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

impl Metrics {
    /// Records one sync in every family it touches.
    pub fn record(&self, report: &SyncReport<'_>) {
        // Made once: every series this sync makes shares its two strings.
        let id = scaler_labels(report.namespace, report.scaler);
        let result = match &report.outcome {
            Reported::Failed(reason) => {
                self.sync_failures
                    .get_or_create(&FailureLabels {
                        namespace: id.namespace.clone(),
                        scaler: id.scaler.clone(),
                        reason: *reason,
                    })
                    .inc();
                SyncResult::Failed
            }
            Reported::Decided(decided) => decided.result,
        };
        self.syncs
            .get_or_create(&SyncLabels {
                namespace: id.namespace.clone(),
                scaler: id.scaler.clone(),
                result,
            })
            .inc();
        self.sync_duration.observe(report.elapsed.as_secs_f64());
        if let Some(lateness) = report.lateness {
            self.sync_lateness.observe(lateness.as_secs_f64());
        }
        for (condition, ok) in &report.conditions {
            self.set_condition(&id, condition, *ok);
        }
        let Reported::Decided(decided) = &report.outcome else {
            // No value stands while it cannot be read.
            self.clear_metric_values(&id);
            return;
        };
        for (metric, value, target) in &decided.metrics {
            let labels = MetricLabels {
                namespace: id.namespace.clone(),
                scaler: id.scaler.clone(),
                metric: (*metric).to_owned(),
            };
            self.set_metric(&labels, *value, *target);
        }
        let in_use: BTreeSet<&str> = decided
            .metrics
            .iter()
            .map(|(name, _, _)| *name)
            .chain(decided.also_in_use.iter().copied())
            .collect();
        self.retain_metrics(&id, &in_use);
        for (family, value) in [
            (&self.desired_replicas, i64::from(decided.desired)),
            (&self.current_replicas, i64::from(decided.ready)),
            (&self.paused, i64::from(decided.paused)),
            (&self.min_replicas, i64::from(decided.min)),
            (&self.max_replicas, i64::from(decided.max)),
            (
                &self.syncs_without_signal,
                i64::from(decided.syncs_without_signal),
            ),
        ] {
            family.get_or_create(&id).set(value);
        }
        for (family, value) in [
            (&self.objective_attainment, decided.attainment),
            (&self.objective_headroom, decided.headroom),
        ] {
            match value {
                Some(share) => {
                    family.get_or_create(&id).set(share);
                }
                None => {
                    family.remove(&id);
                }
            }
        }
        // What was written, not what was decided: a standby and a dry run decide every sync too.
        if let Some((written, before)) = decided.written {
            let direction = if written > before { "up" } else { "down" };
            self.scale_events
                .get_or_create(&ScaleLabels {
                    namespace: id.namespace.clone(),
                    scaler: id.scaler.clone(),
                    direction: direction.to_owned(),
                })
                .inc();
        }
    }
}
