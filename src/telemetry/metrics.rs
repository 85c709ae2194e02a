//! The operator's own metrics: how syncs and queries go, and what each scaler decided.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use super::labels::SyncResult;
use super::scaler_series::ScalerSeries;
use super::sync_report::SyncReport;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
}

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Every metric the operator exports, cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    /// Durations are one histogram for the process, not one per scaler: per-scaler buckets would
    /// be most of the operator's memory and of its series on a big fleet.
    pub sync_duration: Histogram,
    /// How long after its instant on the scaler's grid (controller/schedule.rs) a sync that was
    /// due then had read its signal: whether the fleet keeps its period.
    pub sync_lateness: Histogram,
    pub query_duration: Histogram,
    /// 1 while this replica may write (always 1 without leader election).
    pub leader: Gauge,
    /// The shards this replica leads (with `--shards`; else 1 while it leads).
    pub shards_led: Gauge,
    /// The shard count this replica runs with (`--shards`; 1 without it).
    pub shards: Gauge,
    /// Every series named after a scaler: what its syncs decided and how its queries went.
    scalers: Arc<ScalerSeries>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("llmscaleoperator");
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
        let sync_duration = duration_histogram();
        registry.register(
            "sync_duration_seconds",
            "Time one sync took, all scalers together",
            sync_duration.clone(),
        );
        let sync_lateness = duration_histogram();
        registry.register(
            "sync_lateness_seconds",
            "How long after its instant of the sync period a due sync had read its signal, all scalers together",
            sync_lateness.clone(),
        );
        let query_duration = duration_histogram();
        registry.register(
            "query_duration_seconds",
            "Time one query of a signal source took, all scalers together",
            query_duration.clone(),
        );
        let scalers = Arc::new(ScalerSeries::default());
        registry.register_collector(Box::new(scalers.clone()));
        Self {
            registry: Arc::new(Mutex::new(registry)),
            sync_duration,
            sync_lateness,
            query_duration,
            leader,
            shards_led,
            shards,
            scalers,
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

    /// One query of the scaler `namespace/scaler`'s `metric` (a metric's name, the activation
    /// query's, the decision's, the deletion-cost query's): timed, and counted when it gave
    /// nothing usable.
    pub fn observe_query(
        &self,
        namespace: &str,
        scaler: &str,
        metric: &str,
        took: Duration,
        ok: bool,
    ) {
        self.query_duration.observe(took.as_secs_f64());
        if !ok {
            self.scalers.query_failed(namespace, scaler, metric);
        }
    }

    /// Records one sync in every series it touches.
    pub fn record(&self, report: &SyncReport<'_>) {
        self.sync_duration.observe(report.elapsed.as_secs_f64());
        if let Some(lateness) = report.lateness {
            self.sync_lateness.observe(lateness.as_secs_f64());
        }
        self.scalers.record(report);
    }

    /// Drops every series of a scaler that no longer exists here (deleted, or reported by the
    /// replica that leads its shard now), so it neither lingers on /metrics nor holds memory.
    pub fn forget(&self, namespace: &str, scaler: &str) {
        self.scalers.forget(namespace, scaler);
    }

    /// Drops the series of every scaler but those (namespace, name) `keep` says to.
    pub fn retain_scalers(&self, keep: impl Fn(&str, &str) -> bool) {
        self.scalers.retain(keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureReason;
    use crate::telemetry::sync_report::{Decided, Reported};

    /// A sync of `ns/s` that decided, with `metrics` read.
    fn decided<'a>(metrics: Vec<(&'a str, Option<f64>, Option<f64>)>) -> SyncReport<'a> {
        SyncReport {
            namespace: "ns",
            scaler: "s",
            elapsed: Duration::from_millis(2),
            lateness: Some(Duration::from_millis(1)),
            conditions: vec![
                ("Ready", true),
                ("ScalingActive", true),
                ("ObjectiveMet", false),
            ],
            outcome: Reported::Decided(Decided {
                result: SyncResult::Scaled,
                metrics,
                also_in_use: Vec::new(),
                desired: 4,
                ready: 3,
                paused: false,
                min: 1,
                max: 8,
                syncs_without_signal: 0,
                attainment: Some(0.5),
                headroom: Some(0.25),
                written: Some((4, 3)),
            }),
        }
    }

    #[test]
    fn exposes_what_was_recorded() {
        let m = Metrics::default();
        m.record(&decided(vec![("kv", Some(0.5), Some(0.8))]));
        m.record(&SyncReport {
            conditions: Vec::new(),
            outcome: Reported::Failed(FailureReason::TargetNotFound),
            ..decided(Vec::new())
        });
        m.observe_query("ns", "s", "kv", Duration::from_millis(3), false);
        let text = m.encode().unwrap();
        for line in [
            r#"llmscaleoperator_desired_replicas{namespace="ns",scaler="s"} 4"#,
            r#"llmscaleoperator_syncs_total{namespace="ns",scaler="s",result="scaled"} 1"#,
            r#"llmscaleoperator_syncs_total{namespace="ns",scaler="s",result="failed"} 1"#,
            r#"llmscaleoperator_sync_failures_total{namespace="ns",scaler="s",reason="TargetNotFound"} 1"#,
            r#"llmscaleoperator_query_errors_total{namespace="ns",scaler="s",metric="kv"} 1"#,
            r#"llmscaleoperator_metric_target{namespace="ns",scaler="s",metric="kv"} 0.8"#,
            r#"llmscaleoperator_scale_events_total{namespace="ns",scaler="s",direction="up"} 1"#,
            r#"llmscaleoperator_condition{namespace="ns",scaler="s",condition="ObjectiveMet",status="false"} 1"#,
            r#"llmscaleoperator_condition{namespace="ns",scaler="s",condition="ObjectiveMet",status="true"} 0"#,
            "llmscaleoperator_query_duration_seconds_count 1",
            "llmscaleoperator_sync_duration_seconds_count 2",
            "# TYPE llmscaleoperator_syncs counter",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        // The failed sync left no value standing (the target stays).
        assert!(!text.contains("llmscaleoperator_metric_value{"), "{text}");
        m.forget("ns", "s");
        let text = m.encode().unwrap();
        assert!(
            !text.contains(r#"scaler="s""#),
            "every series of s is gone: {text}"
        );
        // An empty family is not exposed at all, as a registered one without series.
        assert!(!text.contains("llmscaleoperator_syncs "), "{text}");
    }

    /// The metrics table of docs/operations.md names exactly the families the operator exposes,
    /// under the operator's own prefix: a metric added or renamed without its documentation fails
    /// here.
    #[test]
    fn readme_documents_every_metric() {
        // A family without a series has no TYPE line: give each one.
        let m = Metrics::default();
        m.record(&SyncReport {
            outcome: Reported::Failed(FailureReason::TargetNotFound),
            ..decided(Vec::new())
        });
        m.record(&decided(vec![("kv", Some(0.5), Some(0.8))]));
        m.observe_query("ns", "s", "kv", Duration::from_millis(1), false);
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
}
