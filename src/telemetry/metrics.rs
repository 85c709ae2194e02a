//! The operator's own metrics: how syncs and queries go, and what each scaler decided.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::failure::FailureReason;

/// A scaler's namespace or name in a label set. Shared: the series a sync makes point at the
/// same two strings instead of each owning copies (a scaler has twenty-odd series).
pub type Name = Arc<str>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScalerLabels {
    pub namespace: Name,
    pub scaler: Name,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    pub namespace: Name,
    pub scaler: Name,
    pub result: SyncResult,
}

/// How a sync ended, the `result` label of `llmscaleoperator_syncs_total`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum SyncResult {
    /// spec.replicas was written.
    Scaled,
    /// The signal could not be used; the target stays where it is.
    Held,
    /// A change waits (a rollout, replicas not yet ready).
    Deferred,
    /// Nothing to do.
    Unchanged,
    /// The sync stopped before deciding, or its write was refused.
    Failed,
}

impl SyncResult {
    pub const ALL: [SyncResult; 5] = [
        Self::Scaled,
        Self::Held,
        Self::Deferred,
        Self::Unchanged,
        Self::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scaled => "scaled",
            Self::Held => "held",
            Self::Deferred => "deferred",
            Self::Unchanged => "unchanged",
            Self::Failed => "failed",
        }
    }
}

impl EncodeLabelValue for SyncResult {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub namespace: Name,
    pub scaler: Name,
    pub reason: FailureReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MetricLabels {
    pub namespace: Name,
    pub scaler: Name,
    pub metric: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub namespace: Name,
    pub scaler: Name,
    /// Ready, ScalingActive, ScalingLimited or (under an objective) ObjectiveMet.
    pub condition: &'static str,
    /// "true" or "false": the series of the condition's current status is 1, the other 0.
    pub status: &'static str,
}

/// The conditions exposed as `llmscaleoperator_condition`.
pub const CONDITIONS: [&str; 4] = ["Ready", "ScalingActive", "ScalingLimited", "ObjectiveMet"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScaleLabels {
    pub namespace: Name,
    pub scaler: Name,
    /// up or down.
    pub direction: String,
}

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Every metric the operator exports, cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    pub syncs: Family<SyncLabels, Counter>,
    pub sync_failures: Family<FailureLabels, Counter>,
    /// Durations are one histogram for the process, not one per scaler: per-scaler buckets would
    /// be most of the operator's memory and of its series on a big fleet.
    pub sync_duration: Histogram,
    /// How long after its instant on the scaler's grid (controller/schedule.rs) a sync that was
    /// due then had read its signal: whether the fleet keeps its period.
    pub sync_lateness: Histogram,
    pub query_duration: Histogram,
    pub query_errors: Family<MetricLabels, Counter>,
    pub desired_replicas: Family<ScalerLabels, Gauge>,
    pub current_replicas: Family<ScalerLabels, Gauge>,
    /// 1 while the scaler is paused by annotation.
    pub paused: Family<ScalerLabels, Gauge>,
    /// The spec's bounds, so a dashboard or an alert can tell a fleet pinned at its maximum.
    pub min_replicas: Family<ScalerLabels, Gauge>,
    pub max_replicas: Family<ScalerLabels, Gauge>,
    /// Consecutive syncs without a usable signal (0 while the signal is fine).
    pub syncs_without_signal: Family<ScalerLabels, Gauge>,
    /// Each metric's value at the last sync (absent while it cannot be read) and its target.
    pub metric_value: Family<MetricLabels, Gauge<f64, AtomicU64>>,
    pub metric_target: Family<MetricLabels, Gauge<f64, AtomicU64>>,
    /// Ready, ScalingActive and ScalingLimited, kube-state-metrics style: 1 on the series of
    /// the current status.
    pub condition: Family<ConditionLabels, Gauge>,
    /// Under an objective: the share of the last minute's requests that met it, at least.
    pub objective_attainment: Family<ScalerLabels, Gauge<f64, AtomicU64>>,
    /// Under an objective: the share of the learned capacity the Ready pods have spare.
    pub objective_headroom: Family<ScalerLabels, Gauge<f64, AtomicU64>>,
    pub scale_events: Family<ScaleLabels, Counter>,
    /// 1 while this replica may write (always 1 without leader election).
    pub leader: Gauge,
    /// The shards this replica leads (with `--shards`; else 1 while it leads).
    pub shards_led: Gauge,
    /// The shard count this replica runs with (`--shards`; 1 without it).
    pub shards: Gauge,
    /// The metric names each scaler's per-metric series were recorded under. A family cannot be
    /// listed, and without this a metric renamed or removed from a spec, or an activation
    /// query's errors, would stay on /metrics for the life of the process. A list per scaler
    /// (one or two names) costs less than a set.
    metric_names: Arc<Mutex<HashMap<ScalerLabels, Vec<String>>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("llmscaleoperator");
        let syncs = Family::<SyncLabels, Counter>::default();
        let sync_failures = Family::<FailureLabels, Counter>::default();
        let sync_duration = duration_histogram();
        let sync_lateness = duration_histogram();
        let query_duration = duration_histogram();
        let query_errors = Family::<MetricLabels, Counter>::default();
        let desired_replicas = Family::<ScalerLabels, Gauge>::default();
        let current_replicas = Family::<ScalerLabels, Gauge>::default();
        let paused = Family::<ScalerLabels, Gauge>::default();
        let min_replicas = Family::<ScalerLabels, Gauge>::default();
        let max_replicas = Family::<ScalerLabels, Gauge>::default();
        let syncs_without_signal = Family::<ScalerLabels, Gauge>::default();
        let metric_value = Family::<MetricLabels, Gauge<f64, AtomicU64>>::default();
        let metric_target = Family::<MetricLabels, Gauge<f64, AtomicU64>>::default();
        let condition = Family::<ConditionLabels, Gauge>::default();
        let objective_attainment = Family::<ScalerLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "objective_attainment_ratio",
            "Under an objective: the share (0-1) of the last minute's requests that met it, at least (absent when none finished)",
            objective_attainment.clone(),
        );
        let objective_headroom = Family::<ScalerLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "objective_headroom_ratio",
            "Under an objective: the share of the learned per-pod capacity the Ready pods have spare (negative while they carry more; absent when in-flight was not read)",
            objective_headroom.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
        registry.register(
            "build_info",
            "Always 1; the version label says which build runs",
            build_info,
        );
        registry.register(
            "metric_value",
            "Each metric's value at the last sync (absent while it cannot be read)",
            metric_value.clone(),
        );
        registry.register(
            "metric_target",
            "Each metric's target: what one replica should carry",
            metric_target.clone(),
        );
        registry.register(
            "condition",
            "The scaler's Ready, ScalingActive and ScalingLimited conditions: 1 on the series of the current status",
            condition.clone(),
        );
        let scale_events = Family::<ScaleLabels, Counter>::default();
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease, or with --shards leads at least one shard (or runs without election)",
            leader.clone(),
        );
        let shards_led = Gauge::default();
        registry.register(
            "shards_led",
            "Shards whose scalers this replica evaluates and writes (--shards; without it 1 while it leads)",
            shards_led.clone(),
        );
        let shards = Gauge::default();
        registry.register(
            "shards",
            "The shard count this replica divides the scalers into (--shards; 1 without it)",
            shards.clone(),
        );
        registry.register("syncs", "Syncs by outcome", syncs.clone());
        registry.register(
            "sync_failures",
            "Failed syncs by reason (the reason of the scaler's Ready condition)",
            sync_failures.clone(),
        );
        registry.register(
            "sync_duration_seconds",
            "Time one sync took, all scalers together",
            sync_duration.clone(),
        );
        registry.register(
            "sync_lateness_seconds",
            "How long after its instant of the sync period a due sync had read its signal, all scalers together",
            sync_lateness.clone(),
        );
        registry.register(
            "query_duration_seconds",
            "Time one query of a signal source took, all scalers together",
            query_duration.clone(),
        );
        registry.register(
            "query_errors",
            "Metric queries that produced no usable value",
            query_errors.clone(),
        );
        registry.register(
            "desired_replicas",
            "Replicas the scaler wants (after clamp and stabilization)",
            desired_replicas.clone(),
        );
        registry.register(
            "current_replicas",
            "Ready replicas of the target at the last sync",
            current_replicas.clone(),
        );
        registry.register(
            "paused",
            "1 while the scaler is paused by annotation (paused-replicas or paused)",
            paused.clone(),
        );
        registry.register(
            "min_replicas",
            "The scaler's minReplicas",
            min_replicas.clone(),
        );
        registry.register(
            "max_replicas",
            "The scaler's maxReplicas",
            max_replicas.clone(),
        );
        registry.register(
            "syncs_without_signal",
            "Consecutive syncs without a usable signal (what fallback.failureThreshold counts)",
            syncs_without_signal.clone(),
        );
        registry.register(
            "scale_events",
            "Replica count changes written",
            scale_events.clone(),
        );
        Self {
            registry: Arc::new(Mutex::new(registry)),
            syncs,
            sync_failures,
            sync_duration,
            sync_lateness,
            query_duration,
            query_errors,
            desired_replicas,
            current_replicas,
            paused,
            min_replicas,
            max_replicas,
            syncs_without_signal,
            metric_value,
            metric_target,
            condition,
            objective_attainment,
            objective_headroom,
            scale_events,
            leader,
            shards_led,
            shards,
            metric_names: Arc::default(),
        }
    }
}

impl Metrics {
    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
        Ok(out)
    }

    pub fn observe_query(&self, labels: MetricLabels, took: Duration, ok: bool) {
        self.query_duration.observe(took.as_secs_f64());
        if !ok {
            self.remember(&labels);
            self.query_errors.get_or_create(&labels).inc();
        }
    }

    /// A metric's reading of this sync: its value (the series goes while it cannot be read) and
    /// its target (none for a decision server's count).
    pub fn set_metric(&self, labels: &MetricLabels, value: Option<f64>, target: Option<f64>) {
        self.remember(labels);
        match value {
            Some(value) => {
                self.metric_value.get_or_create(labels).set(value);
            }
            None => {
                self.metric_value.remove(labels);
            }
        }
        if let Some(target) = target {
            self.metric_target.get_or_create(labels).set(target);
        }
    }

    /// Drops the per-metric series of a scaler's metrics that are not `in_use` (renamed or
    /// removed from its spec).
    pub fn retain_metrics(&self, id: &ScalerLabels, in_use: &BTreeSet<&str>) {
        let gone: Vec<String> = {
            let mut names = self.names();
            let Some(recorded) = names.get_mut(id) else {
                return;
            };
            let gone = recorded
                .iter()
                .filter(|n| !in_use.contains(n.as_str()))
                .cloned()
                .collect();
            recorded.retain(|n| in_use.contains(n.as_str()));
            gone
        };
        for metric in gone {
            self.remove_metric(id, metric);
        }
    }

    /// A sync that read nothing: no value stands for the scaler's metrics until one is read
    /// again (targets and error counts stay).
    pub fn clear_metric_values(&self, id: &ScalerLabels) {
        let recorded = self.names().get(id).cloned().unwrap_or_default();
        for metric in recorded {
            self.metric_value.remove(&MetricLabels {
                namespace: id.namespace.clone(),
                scaler: id.scaler.clone(),
                metric,
            });
        }
    }

    fn remember(&self, labels: &MetricLabels) {
        let mut names = self.names();
        let recorded = names
            .entry(ScalerLabels {
                namespace: labels.namespace.clone(),
                scaler: labels.scaler.clone(),
            })
            .or_default();
        if !recorded.contains(&labels.metric) {
            recorded.push(labels.metric.clone());
        }
    }

    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<ScalerLabels, Vec<String>>> {
        self.metric_names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn remove_metric(&self, id: &ScalerLabels, metric: String) {
        let labels = MetricLabels {
            namespace: id.namespace.clone(),
            scaler: id.scaler.clone(),
            metric,
        };
        self.query_errors.remove(&labels);
        self.metric_value.remove(&labels);
        self.metric_target.remove(&labels);
    }

    /// Sets `condition` of a scaler to `ok`: its series of that status 1, the other 0.
    pub fn set_condition(&self, id: &ScalerLabels, condition: &'static str, ok: bool) {
        for (status, on) in [("true", ok), ("false", !ok)] {
            self.condition
                .get_or_create(&ConditionLabels {
                    namespace: id.namespace.clone(),
                    scaler: id.scaler.clone(),
                    condition,
                    status,
                })
                .set(i64::from(on));
        }
    }

    /// Drops every series of a scaler that no longer exists (`metrics`: the names its queries
    /// were recorded under), so deleted scalers neither linger on /metrics nor hold memory.
    pub fn forget<'a>(
        &self,
        namespace: &str,
        scaler: &str,
        metrics: impl IntoIterator<Item = &'a str>,
    ) {
        let id = scaler_labels(namespace, scaler);
        for family in [
            &self.desired_replicas,
            &self.current_replicas,
            &self.paused,
            &self.min_replicas,
            &self.max_replicas,
            &self.syncs_without_signal,
        ] {
            family.remove(&id);
        }
        self.objective_attainment.remove(&id);
        self.objective_headroom.remove(&id);
        for result in SyncResult::ALL {
            self.syncs.remove(&SyncLabels {
                namespace: id.namespace.clone(),
                scaler: id.scaler.clone(),
                result,
            });
        }
        for reason in FailureReason::ALL {
            self.sync_failures.remove(&FailureLabels {
                namespace: id.namespace.clone(),
                scaler: id.scaler.clone(),
                reason,
            });
        }
        for direction in ["up", "down"] {
            self.scale_events.remove(&ScaleLabels {
                namespace: id.namespace.clone(),
                scaler: id.scaler.clone(),
                direction: direction.to_owned(),
            });
        }
        let recorded = self.names().remove(&id).unwrap_or_default();
        let named = metrics.into_iter().map(str::to_owned);
        for metric in recorded.into_iter().chain(named) {
            self.remove_metric(&id, metric);
        }
        for condition in CONDITIONS {
            for status in ["true", "false"] {
                self.condition.remove(&ConditionLabels {
                    namespace: id.namespace.clone(),
                    scaler: id.scaler.clone(),
                    condition,
                    status,
                });
            }
        }
    }
}

/// The labels that name a scaler; every series made from them shares their two strings.
pub fn scaler_labels(namespace: &str, scaler: &str) -> ScalerLabels {
    ScalerLabels {
        namespace: namespace.into(),
        scaler: scaler.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_what_was_recorded() {
        let m = Metrics::default();
        let scaler = ScalerLabels {
            namespace: "ns".into(),
            scaler: "s".into(),
        };
        m.desired_replicas.get_or_create(&scaler).set(4);
        m.syncs
            .get_or_create(&SyncLabels {
                namespace: "ns".into(),
                scaler: "s".into(),
                result: SyncResult::Scaled,
            })
            .inc();
        m.sync_failures
            .get_or_create(&FailureLabels {
                namespace: "ns".into(),
                scaler: "s".into(),
                reason: FailureReason::TargetNotFound,
            })
            .inc();
        let text = m.encode().unwrap();
        assert!(
            text.contains(r#"llmscaleoperator_desired_replicas{namespace="ns",scaler="s"} 4"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"llmscaleoperator_syncs_total{namespace="ns",scaler="s",result="scaled"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"llmscaleoperator_sync_failures_total{namespace="ns",scaler="s",reason="TargetNotFound"} 1"#
            ),
            "{text}"
        );
        m.observe_query(
            MetricLabels {
                namespace: "ns".into(),
                scaler: "s".into(),
                metric: "kv".into(),
            },
            Duration::from_millis(3),
            false,
        );
        assert!(text_has(
            &m,
            r#"llmscaleoperator_query_errors_total{namespace="ns",scaler="s",metric="kv"} 1"#
        ));
        assert!(text_has(
            &m,
            "llmscaleoperator_query_duration_seconds_count 1"
        ));
        m.forget("ns", "s", ["kv"]);
        let text = m.encode().unwrap();
        assert!(
            !text.contains(r#"scaler="s""#),
            "every series of s is gone: {text}"
        );
    }

    /// The metrics table of docs/operations.md names exactly the families the operator exposes,
    /// under the operator's own prefix: a metric added or renamed without its documentation fails
    /// here.
    #[test]
    fn readme_documents_every_metric() {
        // A family without a series has no TYPE line: give each one.
        let m = Metrics::default();
        let scaler = ScalerLabels {
            namespace: "ns".into(),
            scaler: "s".into(),
        };
        let metric = MetricLabels {
            namespace: "ns".into(),
            scaler: "s".into(),
            metric: "kv".into(),
        };
        for gauge in [
            &m.desired_replicas,
            &m.current_replicas,
            &m.paused,
            &m.min_replicas,
            &m.max_replicas,
            &m.syncs_without_signal,
        ] {
            gauge.get_or_create(&scaler).set(1);
        }
        for ratio in [&m.objective_attainment, &m.objective_headroom] {
            ratio.get_or_create(&scaler).set(0.5);
        }
        m.metric_value.get_or_create(&metric).set(0.5);
        m.metric_target.get_or_create(&metric).set(0.8);
        m.observe_query(metric, Duration::from_millis(1), false);
        m.set_condition(&scaler_labels("ns", "s"), "Ready", true);
        m.syncs
            .get_or_create(&SyncLabels {
                namespace: "ns".into(),
                scaler: "s".into(),
                result: SyncResult::Scaled,
            })
            .inc();
        m.sync_failures
            .get_or_create(&FailureLabels {
                namespace: "ns".into(),
                scaler: "s".into(),
                reason: FailureReason::TargetNotFound,
            })
            .inc();
        m.scale_events
            .get_or_create(&ScaleLabels {
                namespace: "ns".into(),
                scaler: "s".into(),
                direction: "up".into(),
            })
            .inc();
        let text = m.encode().unwrap();
        let exposed: std::collections::BTreeSet<String> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|rest| {
                let (name, kind) = rest.split_once(' ')?;
                // A counter's family is named without the `_total` its samples carry.
                Some(match kind {
                    "counter" => format!("{name}_total"),
                    _ => name.to_owned(),
                })
            })
            .collect();
        assert!(
            exposed.iter().all(|n| n.starts_with("llmscaleoperator_")),
            "{exposed:?}"
        );
        let readme = include_str!("../../docs/operations.md");
        let start = readme
            .find("| `llmscaleoperator_")
            .expect("docs/operations.md has the metrics table");
        let documented: std::collections::BTreeSet<String> = readme[start..]
            .lines()
            .take_while(|line| line.starts_with('|'))
            .filter_map(|line| line.split('|').nth(1))
            .flat_map(|cell| {
                cell.split(',')
                    .map(|n| n.trim().trim_matches('`').to_owned())
            })
            .collect();
        assert_eq!(documented, exposed);
    }

    fn text_has(m: &Metrics, line: &str) -> bool {
        m.encode().unwrap().contains(line)
    }
}
