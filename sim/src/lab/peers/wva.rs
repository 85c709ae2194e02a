//! The llm-d workload-variant-autoscaler (WVA) in its V1 saturation mode, with the HPA it
//! drives.

use std::collections::BTreeMap;

use crate::lab::metrics::{Gauge, OverTime};
use crate::lab::policy::{Bounds, Policy, View};

use super::hpa::{
    Behavior, DOWNSCALE_STABILIZATION, HpaController, PolicyKind, SYNC_PERIOD, ScalingPolicy,
    ScalingRules, SelectPolicy, Tolerances, external_per_pod_replicas,
};
use super::{count_i64, floor_i64, label, num, pod_ids};

/// The saturation thresholds (`saturation-scaling-config` ConfigMap, `default` entry) and the
/// rest of a [`Wva`] deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct WvaConfig {
    /// The HPA's `minReplicas` / `maxReplicas` (the chart's defaults are 1 and 10).
    pub bounds: Bounds,
    /// `kvCacheThreshold`: a replica is saturated at this KV use or more.
    pub kv_cache_threshold: f64,
    /// `queueLengthThreshold`: a replica is saturated at this many waiting requests or more.
    pub queue_length_threshold: f64,
    /// `kvSpareTrigger`: scale up when the unsaturated replicas' average spare KV is below it.
    pub kv_spare_trigger: f64,
    /// `queueSpareTrigger`: scale up when their average spare queue is below it.
    pub queue_spare_trigger: f64,
    /// Seconds between two analyses (the saturation engine's polling executor).
    pub analysis_interval: f64,
    /// The range of the `max_over_time` queries.
    pub metric_window: f64,
    /// The HPA's `spec.behavior`; `None` applies the WVA's target directly (no HPA).
    pub hpa: Option<Behavior>,
    pub hpa_tolerances: Tolerances,
    pub hpa_sync_period: f64,
    /// Prometheus' scrape interval for the vLLM pods (the chart's ServiceMonitor: 15 s).
    pub scrape_interval: f64,
}

impl WvaConfig {
    /// The defaults of the shipped ConfigMap and Helm chart.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            kv_cache_threshold: 0.80,
            queue_length_threshold: 5.0,
            kv_spare_trigger: 0.1,
            queue_spare_trigger: 3.0,
            analysis_interval: 30.0,
            metric_window: 60.0,
            hpa: Some(chart_hpa_behavior()),
            hpa_tolerances: Tolerances::DEFAULT,
            hpa_sync_period: SYNC_PERIOD,
            scrape_interval: 15.0,
        }
    }

    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if self.kv_cache_threshold != 0.80
            || self.queue_length_threshold != 5.0
            || self.kv_spare_trigger != 0.1
            || self.queue_spare_trigger != 3.0
        {
            parts.push(format!(
                "kv {}/{}, queue {}/{}",
                num(self.kv_cache_threshold),
                num(self.kv_spare_trigger),
                num(self.queue_length_threshold),
                num(self.queue_spare_trigger)
            ));
        }
        if self.analysis_interval != 30.0 {
            parts.push(format!("every {} s", num(self.analysis_interval)));
        }
        if self.metric_window != 60.0 {
            parts.push(format!("window {} s", num(self.metric_window)));
        }
        match &self.hpa {
            None => parts.push("no HPA".into()),
            Some(behavior) => {
                let reference = chart_hpa_behavior();
                let windows_only = behavior.scale_up.policies == reference.scale_up.policies
                    && behavior.scale_down.policies == reference.scale_down.policies
                    && behavior.scale_up.select == reference.scale_up.select
                    && behavior.scale_down.select == reference.scale_down.select;
                if !windows_only {
                    parts.push("custom HPA".into());
                } else if behavior != &reference {
                    parts.push(format!(
                        "HPA windows {}/{} s",
                        num(behavior.scale_up.stabilization_window),
                        num(behavior.scale_down.stabilization_window)
                    ));
                }
            }
        }
        if self.hpa_tolerances != Tolerances::DEFAULT {
            parts.push(format!(
                "tolerance -{}/+{}",
                num(self.hpa_tolerances.down),
                num(self.hpa_tolerances.up)
            ));
        }
        if self.hpa_sync_period != SYNC_PERIOD {
            parts.push(format!("sync {} s", num(self.hpa_sync_period)));
        }
        if self.scrape_interval != 15.0 {
            parts.push(format!("scrape {} s", num(self.scrape_interval)));
        }
        label("WVA", &parts)
    }
}

/// The HPA behavior of the WVA Helm chart's `values.yaml` (`hpa.behavior`, "production
/// default" in `docs/integrations/hpa-integration.md`): both directions stabilized over 240 s,
/// at most 10 pods per 150 s.
pub fn chart_hpa_behavior() -> Behavior {
    let rules = ScalingRules {
        stabilization_window: 240.0,
        select: SelectPolicy::Max,
        policies: vec![ScalingPolicy {
            kind: PolicyKind::Pods,
            value: 10,
            period: 150.0,
        }],
    };
    Behavior {
        scale_up: rules.clone(),
        scale_down: rules,
    }
}

/// One replica as the analyzer sees it (`interfaces.ReplicaMetrics`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplicaMetrics {
    /// `max_over_time(vllm:kv_cache_usage_perc[1m])`.
    pub kv_usage: f64,
    /// `int(max_over_time(vllm:num_requests_waiting[1m]))`.
    pub queue_length: i64,
}

/// `ModelSaturationAnalysis` for one model with one variant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Saturation {
    /// Replicas with metrics.
    pub replicas: i64,
    pub non_saturated: i64,
    /// Average spare KV over the non-saturated replicas (0 when none).
    pub avg_spare_kv: f64,
    pub avg_spare_queue: f64,
    pub scale_up: bool,
    pub scale_down_safe: bool,
}

/// `AnalyzeModelSaturation` / `analyzeVariant` / `shouldScaleUp` / `isScaleDownSafe`.
pub fn analyze(replicas: &[ReplicaMetrics], config: &WvaConfig) -> Saturation {
    let mut spare_kv = 0.0;
    let mut spare_queue = 0.0;
    let mut non_saturated = 0_i64;
    for r in replicas {
        let queue = r.queue_length as f64;
        let saturated =
            r.kv_usage >= config.kv_cache_threshold || queue >= config.queue_length_threshold;
        if !saturated {
            spare_kv += config.kv_cache_threshold - r.kv_usage;
            spare_queue += config.queue_length_threshold - queue;
            non_saturated += 1;
        }
    }
    let (avg_spare_kv, avg_spare_queue) = if non_saturated > 0 {
        let n = non_saturated as f64;
        (spare_kv / n, spare_queue / n)
    } else {
        // No headroom anywhere: both averages stay 0, below both triggers.
        (0.0, 0.0)
    };
    let scale_up =
        avg_spare_kv < config.kv_spare_trigger || avg_spare_queue < config.queue_spare_trigger;
    // Scale-down: with at least 2 non-saturated replicas, spread their average load over one
    // replica fewer (load × N / (N − 1)) and require the spares to stay at the triggers.
    let scale_down_safe = non_saturated >= 2 && {
        let factor = non_saturated as f64 / (non_saturated - 1) as f64;
        let kv_load = (config.kv_cache_threshold - avg_spare_kv) * factor;
        let queue_load = (config.queue_length_threshold - avg_spare_queue) * factor;
        config.kv_cache_threshold - kv_load >= config.kv_spare_trigger
            && config.queue_length_threshold - queue_load >= config.queue_spare_trigger
    };
    Saturation {
        replicas: count_i64(replicas.len()),
        non_saturated,
        avg_spare_kv,
        avg_spare_queue,
        scale_up,
        scale_down_safe,
    }
}

/// `CalculateSaturationTargets` for one variant, then `ensureMinimumReplicas` (scale to zero
/// disabled): `current` is the Deployment's status.replicas, `pending` the pods not Ready,
/// `desired` the WVA's previous target (0 before the first).
pub fn saturation_target(analysis: &Saturation, current: i64, pending: i64, desired: i64) -> i64 {
    // In transition: a previous target not reached yet, or pods without metrics. No decision.
    let target = if (desired != 0 && desired != current) || analysis.replicas != current {
        if desired != 0 && desired != current {
            desired
        } else {
            current
        }
    } else if analysis.scale_up {
        // +1 on the replicas with metrics, unless pods are pending.
        if pending > 0 {
            analysis.replicas
        } else {
            analysis.replicas + 1
        }
    } else if analysis.scale_down_safe && analysis.replicas > 1 {
        analysis.replicas - 1
    } else {
        analysis.replicas
    };
    target.max(1)
}

/// The llm-d workload-variant-autoscaler's V1 (percentage-based) saturation analyzer, whose
/// target drives an HPA.
///
/// Upstream: llm-d/llm-d-workload-variant-autoscaler (snapshot of 2026-02; the repository
/// moved from llm-d-incubation):
/// - `internal/saturation/analyzer.go` `AnalyzeModelSaturation`, `analyzeVariant`,
///   `shouldScaleUp`, `isScaleDownSafe`, `CalculateSaturationTargets`, and
///   `internal/saturation/constants.go` (`MinNonSaturatedReplicasForScaleDown` = 2);
/// - `internal/collector/registration/saturation.go`: per pod
///   `max by (pod) (max_over_time(vllm:kv_cache_usage_perc[1m]))` and the same for
///   `vllm:num_requests_waiting` (converted to an integer in `collector/replica_metrics.go`);
/// - `config/manager/configmap-saturation-scaling.yaml`: thresholds 0.80 / 5, triggers 0.1 / 3;
/// - `internal/engines/saturation/engine.go` `BuildVariantStates` (current = status.replicas,
///   pending = current − ready, desired = the VA's previous target) and the polling executor:
///   its interval is hard-coded to 30 s (`NewPollingExecutor(... Interval: 30 * time.Second)`;
///   the ConfigMap's `GLOBAL_OPT_INTERVAL: 60s` is read but not applied), so the analysis runs
///   every 30 s here, not every 60 s as the notes said;
/// - `internal/engines/pipeline/enforcer.go` `ensureMinimumReplicas`: at least 1 replica when
///   scale to zero is off (its default).
///
/// Rules: a replica is saturated at KV ≥ 0.80 or queue ≥ 5; over the unsaturated ones the
/// average spare KV (0.80 − kv) and queue (5 − q) are taken (0 when all are saturated). Scale
/// up (+1 on the replicas with metrics) when spare KV < 0.1 or spare queue < 3, unless pods are
/// pending; scale down (−1, never below 1) only with ≥ 2 unsaturated replicas whose average
/// load × N / (N − 1) still leaves both spares at the triggers. No decision at all (the target
/// stays the previous one, or the current count) while the previous target is not reached or
/// some pods have no metrics: the analyzer's "model in transition" rule. A consequence the lab
/// reproduces: when the HPA does not reach the target (max replicas, or a +1 swallowed by its
/// 10 % tolerance at 10 or more replicas), the WVA stays "in transition" and decides nothing more.
///
/// The HPA layer: the WVA exports the target as `wva_desired_replicas`, which the chart's HPA
/// (`charts/workload-variant-autoscaler/templates/hpa.yaml`) reads as an External metric with
/// `target.averageValue: 1` through prometheus-adapter. Its default deployment uses the chart's
/// behavior (240 s stabilization both ways, 10 pods per 150 s; [`chart_hpa_behavior`]), so that
/// is the default here; `config/samples/hpa-integration.yaml` (0 s windows) can be set through
/// `hpa`. The HPA proposes ceil(target / 1) unless target / status.replicas is within its 10 %
/// tolerance. The exported value reaches the HPA without the Prometheus scrape and adapter
/// delay (a simplification).
#[derive(Debug, Clone)]
pub struct Wva {
    pub config: WvaConfig,
    hpa: HpaController,
    /// The WVA's last target (the VA's `desiredOptimizedAlloc.numReplicas`, the exported metric).
    target: Option<i64>,
    next_analysis: Option<f64>,
}

impl Wva {
    pub fn new(config: WvaConfig) -> Self {
        let hpa = HpaController::new(config.hpa.clone(), DOWNSCALE_STABILIZATION);
        Self {
            config,
            hpa,
            target: None,
            next_analysis: None,
        }
    }

    /// The WVA's current target, if it has made one.
    pub fn target(&self) -> Option<i64> {
        self.target
    }

    /// The replicas' metrics from the two `max_over_time` queries (pods of the Deployment with
    /// at least one of the two series).
    pub fn replica_metrics(&self, view: &View<'_>) -> Vec<ReplicaMetrics> {
        let ids = pod_ids(view);
        let window = self.config.metric_window;
        let query = |gauge| -> BTreeMap<u64, f64> {
            view.metrics
                .over_time(view.now, gauge, window, OverTime::Max)
                .into_iter()
                .filter(|(pod, _)| ids.contains(pod))
                .collect()
        };
        let kv = query(Gauge::KvUsage);
        let queue = query(Gauge::Waiting);
        let mut pods: Vec<u64> = kv.keys().chain(queue.keys()).copied().collect();
        pods.sort_unstable();
        pods.dedup();
        pods.into_iter()
            .map(|pod| ReplicaMetrics {
                kv_usage: kv.get(&pod).copied().unwrap_or(0.0),
                queue_length: floor_i64(queue.get(&pod).copied().unwrap_or(0.0)),
            })
            .collect()
    }

    /// One analysis: the new target, or `None` without metrics (no update).
    fn analyze_view(&self, view: &View<'_>) -> Option<i64> {
        let replicas = self.replica_metrics(view);
        if replicas.is_empty() {
            return None;
        }
        let analysis = analyze(&replicas, &self.config);
        let mut current = i64::from(view.current());
        if current == 0 {
            current = i64::from(view.spec);
        }
        let pending = (current - i64::from(view.ready())).max(0);
        let desired = self.target.unwrap_or(0);
        Some(saturation_target(&analysis, current, pending, desired))
    }
}

impl Policy for Wva {
    fn label(&self) -> String {
        self.config.label()
    }

    fn period(&self) -> f64 {
        self.config.hpa_sync_period
    }

    fn scrape_interval(&self) -> f64 {
        self.config.scrape_interval
    }

    fn decide(&mut self, view: &View<'_>) -> u32 {
        let now = view.now;
        let bounds = self.config.bounds;
        let due = self.next_analysis.is_none_or(|at| now >= at - super::EPS);
        if due {
            self.next_analysis = Some(now + self.config.analysis_interval);
            if let Some(target) = self.analyze_view(view) {
                self.target = Some(target);
            }
        }
        if self.config.hpa.is_none() {
            return bounds.clamp(self.target.unwrap_or(i64::from(view.spec)));
        }
        // No target exported yet: the HPA's metric is missing and it changes nothing.
        let proposal = self.target.map(|target| {
            external_per_pod_replicas(
                i64::from(view.current()),
                target as f64,
                1.0,
                self.config.hpa_tolerances,
            )
        });
        let desired = self.hpa.reconcile(
            now,
            i64::from(view.spec),
            i64::from(bounds.min),
            i64::from(bounds.max),
            proposal,
        );
        bounds.clamp(desired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::peers::testkit::Fleet;

    fn config() -> WvaConfig {
        WvaConfig::new(Bounds { min: 1, max: 10 })
    }

    fn replicas(kv: &[f64]) -> Vec<ReplicaMetrics> {
        kv.iter()
            .map(|&kv_usage| ReplicaMetrics {
                kv_usage,
                queue_length: 0,
            })
            .collect()
    }

    #[test]
    fn plus_one_when_the_average_spare_is_below_a_trigger() {
        let config = config();
        // 3 replicas at 0.75 KV: unsaturated, spare 0.05 < 0.1.
        let a = analyze(&replicas(&[0.75; 3]), &config);
        assert!(a.scale_up);
        assert_eq!(saturation_target(&a, 3, 0, 0), 4);
        // Queue: 3 waiting each → spare 2 < 3.
        let queued = vec![
            ReplicaMetrics {
                kv_usage: 0.2,
                queue_length: 3,
            };
            3
        ];
        assert!(analyze(&queued, &config).scale_up);
        // Saturated replicas do not count in the average: one at 0.9 and one at 0.2 →
        // spare 0.6 over the one unsaturated replica, no scale-up.
        let a = analyze(&replicas(&[0.9, 0.2]), &config);
        assert!(!a.scale_up);
        assert_eq!(a.non_saturated, 1);
        // All saturated: no spare at all → scale up.
        assert!(analyze(&replicas(&[0.85, 0.95]), &config).scale_up);
    }

    #[test]
    fn no_change_while_pods_are_pending() {
        let config = config();
        let a = analyze(&replicas(&[0.75; 3]), &config);
        // 4 pods exist, 3 have metrics: in transition → the current count.
        assert_eq!(saturation_target(&a, 4, 1, 0), 4);
        // A previous target not reached: it is kept.
        assert_eq!(saturation_target(&a, 3, 0, 4), 4);
        // Pending pods alone also block the +1.
        assert_eq!(saturation_target(&a, 3, 1, 0), 3);
    }

    #[test]
    fn minus_one_only_when_the_spares_hold_with_one_replica_fewer() {
        let config = config();
        // 3 at 0.3: load 0.3 × 3/2 = 0.45 → spare 0.35 ≥ 0.1; queue spare 5 ≥ 3 → 2.
        let a = analyze(&replicas(&[0.3; 3]), &config);
        assert!(a.scale_down_safe);
        assert_eq!(saturation_target(&a, 3, 0, 0), 2);
        // 3 at 0.55: 0.825 after → spare −0.025 → stay at 3.
        let a = analyze(&replicas(&[0.55; 3]), &config);
        assert!(!a.scale_up && !a.scale_down_safe);
        assert_eq!(saturation_target(&a, 3, 0, 0), 3);
        // One waiting request each on 2 replicas: queue load 1 × 2 = 2 → spare 3 ≥ 3 → safe;
        // 2 each: 4 → spare 1 → not safe.
        let queued = |q| {
            vec![
                ReplicaMetrics {
                    kv_usage: 0.1,
                    queue_length: q,
                };
                2
            ]
        };
        assert!(analyze(&queued(1), &config).scale_down_safe);
        assert!(!analyze(&queued(2), &config).scale_down_safe);
        // Fewer than 2 unsaturated replicas: never.
        let a = analyze(&replicas(&[0.1]), &config);
        assert!(!a.scale_down_safe);
        assert_eq!(saturation_target(&a, 1, 0, 0), 1);
        let a = analyze(&replicas(&[0.1, 0.9]), &config);
        assert!(!a.scale_down_safe);
    }

    #[test]
    fn the_charts_hpa_holds_the_plus_one_for_its_240_s_window() {
        let mut fleet = Fleet::with_ready(3);
        let mut wva = Wva::new(config());
        assert_eq!(wva.label(), "WVA");
        let mut t = 15.0;
        while t < 255.0 {
            fleet.sample_all(t - 1.0, 2.0, 0.75);
            assert_eq!(wva.decide(&fleet.view(t, 3)), 3, "at {t}");
            assert_eq!(wva.target(), Some(4));
            t += 15.0;
        }
        fleet.sample_all(254.0, 2.0, 0.75);
        assert_eq!(wva.decide(&fleet.view(255.0, 3)), 4);
        // Without the HPA the target applies at the first analysis.
        let mut direct = config();
        direct.hpa = None;
        let mut wva = Wva::new(direct);
        assert_eq!(wva.label(), "WVA (no HPA)");
        assert_eq!(wva.decide(&fleet.view(255.0, 3)), 4);
    }

    #[test]
    fn reads_the_max_over_the_last_minute() {
        let mut fleet = Fleet::with_ready(2);
        fleet.starting(3);
        fleet.sample(1, 10.0, 3.0, 2.0, 0.9);
        fleet.sample(1, 40.0, 3.0, 0.0, 0.2);
        fleet.sample(2, 45.0, 1.0, 4.0, 0.3);
        let wva = Wva::new(config());
        let metrics = wva.replica_metrics(&fleet.view(60.0, 3));
        assert_eq!(
            metrics,
            vec![
                ReplicaMetrics {
                    kv_usage: 0.9,
                    queue_length: 2
                },
                ReplicaMetrics {
                    kv_usage: 0.3,
                    queue_length: 4
                }
            ]
        );
    }
}
