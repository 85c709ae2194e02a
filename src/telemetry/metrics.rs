//! The operator's own metrics: how syncs and queries go, and what each scaler decided.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScalerLabels {
    pub namespace: String,
    pub scaler: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    pub namespace: String,
    pub scaler: String,
    /// scaled, unchanged, held, deferred or failed.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MetricLabels {
    pub namespace: String,
    pub scaler: String,
    pub metric: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScaleLabels {
    pub namespace: String,
    pub scaler: String,
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
    pub sync_duration: Family<ScalerLabels, Histogram, fn() -> Histogram>,
    pub query_duration: Family<MetricLabels, Histogram, fn() -> Histogram>,
    pub query_errors: Family<MetricLabels, Counter>,
    pub desired_replicas: Family<ScalerLabels, Gauge>,
    pub current_replicas: Family<ScalerLabels, Gauge>,
    pub scale_events: Family<ScaleLabels, Counter>,
    /// 1 while this replica may write (always 1 without leader election).
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("llmscaler");
        let syncs = Family::<SyncLabels, Counter>::default();
        let sync_duration =
            Family::<ScalerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                duration_histogram,
            );
        let query_duration =
            Family::<MetricLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                duration_histogram,
            );
        let query_errors = Family::<MetricLabels, Counter>::default();
        let desired_replicas = Family::<ScalerLabels, Gauge>::default();
        let current_replicas = Family::<ScalerLabels, Gauge>::default();
        let scale_events = Family::<ScaleLabels, Counter>::default();
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease (or runs without election)",
            leader.clone(),
        );
        registry.register("syncs", "Syncs by outcome", syncs.clone());
        registry.register(
            "sync_duration_seconds",
            "Time one sync took",
            sync_duration.clone(),
        );
        registry.register(
            "query_duration_seconds",
            "Time one metric query took",
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
            "scale_events",
            "Replica count changes written",
            scale_events.clone(),
        );
        Self {
            registry: Arc::new(Mutex::new(registry)),
            syncs,
            sync_duration,
            query_duration,
            query_errors,
            desired_replicas,
            current_replicas,
            scale_events,
            leader,
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
        self.query_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if !ok {
            self.query_errors.get_or_create(&labels).inc();
        }
    }

    /// Drops the per-scaler gauges of a scaler that no longer exists.
    pub fn forget(&self, namespace: &str, scaler: &str) {
        let labels = ScalerLabels {
            namespace: namespace.to_owned(),
            scaler: scaler.to_owned(),
        };
        self.desired_replicas.remove(&labels);
        self.current_replicas.remove(&labels);
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
                result: "scaled".into(),
            })
            .inc();
        let text = m.encode().unwrap();
        assert!(
            text.contains(r#"llmscaler_desired_replicas{namespace="ns",scaler="s"} 4"#),
            "{text}"
        );
        assert!(
            text.contains(r#"llmscaler_syncs_total{namespace="ns",scaler="s",result="scaled"} 1"#),
            "{text}"
        );
        m.forget("ns", "s");
        assert!(
            !m.encode().unwrap().contains("llmscaler_desired_replicas{"),
            "forgotten"
        );
    }
}
