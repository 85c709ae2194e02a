//! Every scaler's series on /metrics, kept as one small record per scaler and written out when
//! /metrics is scraped (a prometheus_client `Collector`), instead of a labelled family per
//! metric. Twenty-odd series a scaler, each an entry of its own in one of a dozen hash maps with
//! its labels and an atomic behind an `Arc`, were about 3 KiB a scaler, the largest part of the
//! operator's memory on a big fleet after the watch caches; the record is a tenth of that.
//!
//! What is exposed is what the families exposed: a gauge once set, a counter once counted, a
//! metric's value only while it can be read, and nothing of a scaler once it is forgotten.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::labels::{
    CONDITIONS, ConditionLabels, FailureLabels, MetricLabels, Name, ScaleLabels, ScalerLabels,
    SyncLabels, SyncResult, scaler_labels,
};
use super::sync_report::{Reported, SyncReport};
use crate::failure::FailureReason;

/// The series of every scaler this replica reports, by scaler.
#[derive(Debug, Default)]
pub struct ScalerSeries {
    scalers: Mutex<HashMap<ScalerLabels, Record>>,
}

/// One scaler's series.
#[derive(Clone, Debug, Default)]
struct Record {
    /// Syncs by outcome, in the order of `SyncResult::ALL`.
    syncs: [u64; SyncResult::ALL.len()],
    /// Failed syncs by reason; most scalers never fail, and those that do for one reason or two.
    failures: Vec<(FailureReason, u64)>,
    /// Each of `CONDITIONS` as last reported, in that order.
    conditions: [Option<bool>; CONDITIONS.len()],
    /// The gauges of the last sync that decided.
    decided: Option<Gauges>,
    attainment: Option<f64>,
    headroom: Option<f64>,
    /// Replica count changes written: up, down.
    scale_events: [u64; 2],
    /// One entry per metric name read: one or two for most scalers.
    metrics: Vec<MetricSeries>,
}

#[derive(Clone, Copy, Debug)]
struct Gauges {
    desired: i32,
    ready: i32,
    paused: bool,
    min: i32,
    max: i32,
    syncs_without_signal: u32,
}

#[derive(Clone, Debug)]
struct MetricSeries {
    name: Box<str>,
    /// Absent while it cannot be read.
    value: Option<f64>,
    target: Option<f64>,
    /// Queries under this name that gave nothing usable.
    errors: u64,
}

impl MetricSeries {
    fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            value: None,
            target: None,
            errors: 0,
        }
    }
}

impl Record {
    fn metric(&mut self, name: &str) -> &mut MetricSeries {
        let at = match self.metrics.iter().position(|m| &*m.name == name) {
            Some(at) => at,
            None => {
                // One or two a scaler: exactly as many as read (a push would make room for four).
                self.metrics.reserve_exact(1);
                self.metrics.push(MetricSeries::new(name));
                self.metrics.len() - 1
            }
        };
        &mut self.metrics[at]
    }

    /// What one sync changes.
    fn apply(&mut self, report: &SyncReport<'_>) {
        let result = match &report.outcome {
            Reported::Failed(reason) => {
                match self.failures.iter_mut().find(|(r, _)| r == reason) {
                    Some((_, count)) => *count += 1,
                    None => self.failures.push((*reason, 1)),
                }
                SyncResult::Failed
            }
            Reported::Decided(decided) => decided.result,
        };
        if let Some(at) = SyncResult::ALL.iter().position(|r| *r == result) {
            self.syncs[at] += 1;
        }
        for (condition, ok) in &report.conditions {
            if let Some(at) = CONDITIONS.iter().position(|c| c == condition) {
                self.conditions[at] = Some(*ok);
            }
        }
        let Reported::Decided(decided) = &report.outcome else {
            // No value stands while it cannot be read (targets and error counts stay).
            for metric in &mut self.metrics {
                metric.value = None;
            }
            return;
        };
        for (name, value, target) in &decided.metrics {
            let metric = self.metric(name);
            metric.value = *value;
            if target.is_some() {
                metric.target = *target;
            }
        }
        // A metric renamed or removed from the spec goes with all its series.
        self.metrics.retain(|m| {
            decided.metrics.iter().any(|(name, _, _)| *name == &*m.name)
                || decided.also_in_use.contains(&&*m.name)
        });
        self.decided = Some(Gauges {
            desired: decided.desired,
            ready: decided.ready,
            paused: decided.paused,
            min: decided.min,
            max: decided.max,
            syncs_without_signal: decided.syncs_without_signal,
        });
        self.attainment = decided.attainment;
        self.headroom = decided.headroom;
        // What was written, not what was decided: a standby and a dry run decide every sync too.
        if let Some((written, before)) = decided.written {
            self.scale_events[usize::from(written <= before)] += 1;
        }
    }
}

impl ScalerSeries {
    fn scalers(&self) -> MutexGuard<'_, HashMap<ScalerLabels, Record>> {
        self.scalers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn with(&self, namespace: &str, scaler: &str, change: impl FnOnce(&mut Record)) {
        let mut scalers = self.scalers();
        // Looked up by the borrowed strings' labels; shared strings are made for a new scaler.
        let id = scaler_labels(namespace, scaler);
        change(scalers.entry(id).or_default());
    }

    /// Records one sync of the scaler the report names.
    pub fn record(&self, report: &SyncReport<'_>) {
        self.with(report.namespace, report.scaler, |r| r.apply(report));
    }

    /// Counts a query under `metric` that gave nothing usable.
    pub fn query_failed(&self, namespace: &str, scaler: &str, metric: &str) {
        self.with(namespace, scaler, |r| r.metric(metric).errors += 1);
    }

    /// Drops every series of a scaler (deleted, or reported by another replica now).
    pub fn forget(&self, namespace: &str, scaler: &str) {
        self.scalers().remove(&scaler_labels(namespace, scaler));
    }

    /// Keeps only the scalers (namespace, name) `keep` says to.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        self.scalers()
            .retain(|id, _| keep(&id.namespace, &id.scaler));
    }

    /// The scalers' records as of now, sorted by namespace and name, so that a scrape holds the
    /// lock only while they are copied and the exposition comes in a stable order.
    fn snapshot(&self) -> Vec<(ScalerLabels, Record)> {
        let mut all: Vec<(ScalerLabels, Record)> = self
            .scalers()
            .iter()
            .map(|(id, record)| (id.clone(), record.clone()))
            .collect();
        all.sort_unstable_by(|(a, _), (b, _)| {
            (&a.namespace, &a.scaler).cmp(&(&b.namespace, &b.scaler))
        });
        all
    }
}

/// One sample of a family.
enum Sample {
    Gauge(i64),
    Ratio(f64),
    Count(u64),
}

/// Writes one family, or nothing when it has no sample (as an empty registered family).
fn family<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: Vec<(L, Sample)>,
) -> fmt::Result {
    if samples.is_empty() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, sample) in &samples {
        let mut metric = family.encode_family(labels)?;
        match sample {
            Sample::Gauge(v) => metric.encode_gauge(v)?,
            Sample::Ratio(v) => metric.encode_gauge(v)?,
            Sample::Count(v) => metric.encode_counter::<NoLabelSet, _, u64>(v, None)?,
        }
    }
    Ok(())
}

fn names(id: &ScalerLabels) -> (Name, Name) {
    (id.namespace.clone(), id.scaler.clone())
}

/// One gauge per scaler from its last decided sync.
fn decided_gauge(
    all: &[(ScalerLabels, Record)],
    value: impl Fn(&Gauges) -> i64,
) -> Vec<(ScalerLabels, Sample)> {
    all.iter()
        .filter_map(|(id, r)| Some((id.clone(), Sample::Gauge(value(r.decided.as_ref()?)))))
        .collect()
}

fn ratio(
    all: &[(ScalerLabels, Record)],
    value: impl Fn(&Record) -> Option<f64>,
) -> Vec<(ScalerLabels, Sample)> {
    all.iter()
        .filter_map(|(id, r)| Some((id.clone(), Sample::Ratio(value(r)?))))
        .collect()
}

fn per_metric(
    all: &[(ScalerLabels, Record)],
    sample: impl Fn(&MetricSeries) -> Option<Sample>,
) -> Vec<(MetricLabels, Sample)> {
    let sample = &sample;
    all.iter()
        .flat_map(|(id, r)| {
            r.metrics.iter().filter_map(move |m| {
                let (namespace, scaler) = names(id);
                Some((
                    MetricLabels {
                        namespace,
                        scaler,
                        metric: m.name.to_string(),
                    },
                    sample(m)?,
                ))
            })
        })
        .collect()
}

/// A gauge of the last sync that decided: its name, its help and its value.
type GaugeFamily = (&'static str, &'static str, fn(&Gauges) -> i64);

const GAUGES: [GaugeFamily; 6] = [
    (
        "desired_replicas",
        "Replicas the scaler wants (after clamp and stabilization)",
        |g| i64::from(g.desired),
    ),
    (
        "current_replicas",
        "Ready replicas of the target at the last sync",
        |g| i64::from(g.ready),
    ),
    (
        "paused",
        "1 while the scaler is paused by annotation (paused-replicas or paused)",
        |g| i64::from(g.paused),
    ),
    ("min_replicas", "The scaler's minReplicas", |g| {
        i64::from(g.min)
    }),
    ("max_replicas", "The scaler's maxReplicas", |g| {
        i64::from(g.max)
    }),
    (
        "syncs_without_signal",
        "Consecutive syncs without a usable signal (what fallback.failureThreshold counts)",
        |g| i64::from(g.syncs_without_signal),
    ),
];

impl Collector for ScalerSeries {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let all = self.snapshot();
        let e = &mut encoder;
        let syncs = all
            .iter()
            .flat_map(|(id, r)| {
                SyncResult::ALL
                    .iter()
                    .zip(r.syncs)
                    .filter(|(_, n)| *n > 0)
                    .map(move |(result, n)| {
                        let (namespace, scaler) = names(id);
                        let labels = SyncLabels {
                            namespace,
                            scaler,
                            result: *result,
                        };
                        (labels, Sample::Count(n))
                    })
            })
            .collect();
        family(e, "syncs", "Syncs by outcome", MetricType::Counter, syncs)?;
        let failures = all
            .iter()
            .flat_map(|(id, r)| {
                r.failures.iter().map(move |(reason, n)| {
                    let (namespace, scaler) = names(id);
                    let labels = FailureLabels {
                        namespace,
                        scaler,
                        reason: *reason,
                    };
                    (labels, Sample::Count(*n))
                })
            })
            .collect();
        family(
            e,
            "sync_failures",
            "Failed syncs by reason (the reason of the scaler's Ready condition)",
            MetricType::Counter,
            failures,
        )?;
        family(
            e,
            "query_errors",
            "Metric queries that produced no usable value",
            MetricType::Counter,
            per_metric(&all, |m| (m.errors > 0).then_some(Sample::Count(m.errors))),
        )?;
        for (name, help, value) in GAUGES {
            family(e, name, help, MetricType::Gauge, decided_gauge(&all, value))?;
        }
        family(
            e,
            "metric_value",
            "Each metric's value at the last sync (absent while it cannot be read)",
            MetricType::Gauge,
            per_metric(&all, |m| m.value.map(Sample::Ratio)),
        )?;
        family(
            e,
            "metric_target",
            "Each metric's target: what one replica should carry",
            MetricType::Gauge,
            per_metric(&all, |m| m.target.map(Sample::Ratio)),
        )?;
        let conditions = all
            .iter()
            .flat_map(|(id, r)| {
                CONDITIONS
                    .iter()
                    .zip(r.conditions)
                    .filter_map(|(condition, ok)| Some((*condition, ok?)))
                    .flat_map(move |(condition, ok)| {
                        [("true", ok), ("false", !ok)].map(|(status, on)| {
                            let (namespace, scaler) = names(id);
                            let labels = ConditionLabels {
                                namespace,
                                scaler,
                                condition,
                                status,
                            };
                            (labels, Sample::Gauge(i64::from(on)))
                        })
                    })
            })
            .collect();
        family(
            e,
            "condition",
            "The scaler's Ready, ScalingActive, ScalingLimited and (under an objective) ObjectiveMet conditions: 1 on the series of the current status",
            MetricType::Gauge,
            conditions,
        )?;
        family(
            e,
            "objective_attainment_ratio",
            "Under an objective: the share (0-1) of the last minute's requests that met it, at least (absent when none finished)",
            MetricType::Gauge,
            ratio(&all, |r| r.attainment),
        )?;
        family(
            e,
            "objective_headroom_ratio",
            "Under an objective: the share of the learned per-pod capacity the Ready pods have spare (negative while they carry more; absent when in-flight was not read)",
            MetricType::Gauge,
            ratio(&all, |r| r.headroom),
        )?;
        let scale_events = all
            .iter()
            .flat_map(|(id, r)| {
                ["up", "down"]
                    .into_iter()
                    .zip(r.scale_events)
                    .filter(|(_, n)| *n > 0)
                    .map(move |(direction, n)| {
                        let (namespace, scaler) = names(id);
                        let labels = ScaleLabels {
                            namespace,
                            scaler,
                            direction,
                        };
                        (labels, Sample::Count(n))
                    })
            })
            .collect();
        family(
            e,
            "scale_events",
            "Replica count changes written",
            MetricType::Counter,
            scale_events,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::telemetry::sync_report::Decided;

    fn sync<'a>(
        metrics: Vec<(&'a str, Option<f64>, Option<f64>)>,
        also_in_use: Vec<&'a str>,
    ) -> SyncReport<'a> {
        SyncReport {
            namespace: "ns",
            scaler: "s",
            elapsed: Duration::ZERO,
            lateness: None,
            conditions: vec![("Ready", true)],
            outcome: Reported::Decided(Decided {
                result: SyncResult::Unchanged,
                metrics,
                also_in_use,
                desired: 2,
                ready: 2,
                paused: false,
                min: 1,
                max: 4,
                syncs_without_signal: 0,
                attainment: None,
                headroom: None,
                written: None,
            }),
        }
    }

    fn exposition(series: ScalerSeries) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(series));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encodes");
        out
    }

    #[test]
    fn a_metric_gone_from_the_spec_goes_with_its_series_and_a_failed_sync_leaves_no_value() {
        let series = ScalerSeries::default();
        series.record(&sync(vec![("old", Some(1.0), Some(2.0))], Vec::new()));
        series.query_failed("ns", "s", "activation");
        series.query_failed("ns", "s", "stray");
        // Renamed: "old" goes; the activation query's errors stay, as it is still queried.
        series.record(&sync(
            vec![("new", Some(3.0), Some(4.0))],
            vec!["activation"],
        ));
        series.record(&SyncReport {
            outcome: Reported::Failed(FailureReason::ScaleFailed),
            conditions: vec![("Ready", false)],
            ..sync(Vec::new(), Vec::new())
        });
        let text = exposition(series);
        assert!(!text.contains(r#"metric="old""#), "{text}");
        assert!(!text.contains(r#"metric="stray""#), "{text}");
        assert!(
            text.contains(r#"query_errors_total{namespace="ns",scaler="s",metric="activation"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"metric_target{namespace="ns",scaler="s",metric="new"} 4.0"#),
            "{text}"
        );
        assert!(!text.contains("metric_value{"), "{text}");
        assert!(
            text.contains(
                r#"condition{namespace="ns",scaler="s",condition="Ready",status="false"} 1"#
            ),
            "{text}"
        );
        // The gauges of the last sync that decided stay through a failure.
        assert!(
            text.contains(r#"desired_replicas{namespace="ns",scaler="s"} 2"#),
            "{text}"
        );
        assert!(!text.contains("objective_attainment_ratio"), "{text}");
    }

    #[test]
    fn scalers_come_out_in_order_and_a_forgotten_one_not_at_all() {
        let series = ScalerSeries::default();
        for (namespace, scaler) in [("b", "x"), ("a", "z"), ("a", "y"), ("c", "gone")] {
            series.record(&SyncReport {
                namespace,
                scaler,
                ..sync(Vec::new(), Vec::new())
            });
        }
        series.forget("c", "gone");
        let text = exposition(series);
        let order: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("desired_replicas{"))
            .collect();
        assert_eq!(
            order,
            [
                r#"desired_replicas{namespace="a",scaler="y"} 2"#,
                r#"desired_replicas{namespace="a",scaler="z"} 2"#,
                r#"desired_replicas{namespace="b",scaler="x"} 2"#,
            ]
        );
    }
}
