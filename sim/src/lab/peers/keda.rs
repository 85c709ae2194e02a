//! KEDA: a ScaledObject with a Prometheus trigger on a Deployment.

use crate::lab::policy::{Bounds, Policy, View};

use super::hpa::{
    Behavior, DOWNSCALE_STABILIZATION, HpaController, SYNC_PERIOD, Tolerances,
    external_per_pod_replicas,
};
use super::{REFERENCE_TARGET, Signal, elapsed, label, num};

/// The settings of a [`Keda`] ScaledObject.
#[derive(Debug, Clone, PartialEq)]
pub struct KedaConfig {
    /// `minReplicaCount` (KEDA's default is 0) and `maxReplicaCount`. The HPA KEDA creates gets
    /// `minReplicas = max(minReplicaCount, 1)` (`GetHPAMinReplicas`).
    pub bounds: Bounds,
    /// The trigger's `threshold`: the HPA's External metric `target.averageValue`.
    pub threshold: f64,
    /// `activationThreshold`: the trigger is active when the value is strictly above it.
    pub activation_threshold: f64,
    /// `pollingInterval`: KEDA's own loop (activation, scale to and from zero).
    pub polling_interval: f64,
    /// `cooldownPeriod`: seconds inactive before scaling to zero.
    pub cooldown_period: f64,
    /// `initialCooldownPeriod`: after the ScaledObject's creation (the run's start).
    pub initial_cooldown_period: f64,
    /// What the Prometheus query sums over the fleet.
    pub signal: Signal,
    /// The HPA's tolerances.
    pub tolerances: Tolerances,
    /// `advanced.horizontalPodAutoscalerConfig.behavior`; KEDA leaves it out by default, so the
    /// HPA takes its path without `spec.behavior` (300 s scale-down window, scale-up at most
    /// max(2 × current, 4) per sync).
    pub behavior: Option<Behavior>,
    /// The HPA controller's `--horizontal-pod-autoscaler-downscale-stabilization`.
    pub downscale_stabilization: f64,
    /// The HPA controller's sync period.
    pub hpa_sync_period: f64,
    /// Prometheus' scrape interval.
    pub scrape_interval: f64,
}

impl KedaConfig {
    /// KEDA's and the HPA's defaults with the lab's reference threshold.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            threshold: REFERENCE_TARGET,
            activation_threshold: 0.0,
            polling_interval: 30.0,
            cooldown_period: 300.0,
            initial_cooldown_period: 0.0,
            signal: Signal::Concurrency,
            tolerances: Tolerances::DEFAULT,
            behavior: None,
            downscale_stabilization: DOWNSCALE_STABILIZATION,
            hpa_sync_period: SYNC_PERIOD,
            scrape_interval: 15.0,
        }
    }

    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if self.threshold != REFERENCE_TARGET {
            parts.push(format!("target {}", num(self.threshold)));
        }
        if self.activation_threshold != 0.0 {
            parts.push(format!("activation {}", num(self.activation_threshold)));
        }
        if self.polling_interval != 30.0 {
            parts.push(format!("polling {} s", num(self.polling_interval)));
        }
        if self.cooldown_period != 300.0 {
            parts.push(format!("cooldown {} s", num(self.cooldown_period)));
        }
        if self.initial_cooldown_period != 0.0 {
            parts.push(format!(
                "initial cooldown {} s",
                num(self.initial_cooldown_period)
            ));
        }
        match &self.behavior {
            None => {
                if self.downscale_stabilization != DOWNSCALE_STABILIZATION {
                    parts.push(format!("down {} s", num(self.downscale_stabilization)));
                }
            }
            Some(behavior) => {
                let own = behavior.label_parts(&Behavior::upstream());
                if own.is_empty() {
                    parts.push("HPA behavior".into());
                } else {
                    parts.extend(own.into_iter().map(|p| format!("HPA {p}")));
                }
            }
        }
        if self.tolerances != Tolerances::DEFAULT {
            parts.push(format!(
                "tolerance -{}/+{}",
                num(self.tolerances.down),
                num(self.tolerances.up)
            ));
        }
        if self.signal != Signal::Concurrency {
            parts.push(self.signal.name().into());
        }
        if self.hpa_sync_period != SYNC_PERIOD {
            parts.push(format!("sync {} s", num(self.hpa_sync_period)));
        }
        if self.scrape_interval != 15.0 {
            parts.push(format!("scrape {} s", num(self.scrape_interval)));
        }
        label("KEDA", &parts)
    }
}

/// A KEDA ScaledObject with a `prometheus` trigger whose query sums the signal over the fleet
/// (`sum(vllm:num_requests_running + vllm:num_requests_waiting)`) plus the gateway's queue.
///
/// Two control loops act on the Deployment:
/// - the HPA KEDA generates (kedacore/keda `controllers/keda/hpa.go`): an External metric with
///   `target.type: AverageValue` (`pkg/scalers/scaler.go` `GetMetricTargetType` defaults to it)
///   and no `spec.behavior` unless the ScaledObject sets one. The Kubernetes HPA reads it through
///   `GetExternalPerPodMetricReplicas` (kubernetes `replica_calculator.go`): desired =
///   ceil(value / threshold), with the tolerance judged against status.replicas (starting pods
///   included). It syncs every 15 s and does nothing while the Deployment is at 0 (its
///   `minReplicas` is at least 1: "ScalingDisabled").
/// - KEDA's executor (`pkg/scaling/scale_handler.go` `startScaleLoop` / `checkScalers`, and
///   `pkg/scaling/executor/scale_scaledobjects.go` `RequestScale`, `scaleFromZeroOrIdle`,
///   `scaleToZeroOrIdle`): every `pollingInterval` (30 s, first poll at start) the trigger is
///   active when the value > `activationThreshold` (`prometheus_scaler.go`
///   `GetMetricsAndActivity`). Active: `lastActiveTime` = now, and a Deployment at 0 is set to
///   max(minReplicaCount, 1). Inactive with minReplicaCount 0 and replicas > 0: scaled to 0 once
///   `lastActiveTime + cooldownPeriod` has passed (or, never active,
///   `creation + initialCooldownPeriod`, default 0 s: at once).
///
/// The lab calls [`Policy::decide`] every 15 s (the HPA's sync); KEDA's loop runs when its
/// polling interval is due (every second call with the defaults). When KEDA rescales at a tick,
/// the HPA sync of that tick is skipped (it would read the Deployment before or after KEDA's
/// write; either way it cannot undo it). `useCachedMetrics` defaults to false (`scale_handler.go`
/// `GetScaledObjectMetrics` only reads the cache when the trigger sets it), so every HPA read is a
/// fresh Prometheus query: the lab evaluates the query at each sync. An empty result counts as 0
/// (`ignoreNullValues` defaults to true).
#[derive(Debug, Clone)]
pub struct Keda {
    pub config: KedaConfig,
    hpa: HpaController,
    next_poll: Option<f64>,
    last_active: Option<f64>,
}

impl Keda {
    pub fn new(config: KedaConfig) -> Self {
        let hpa = HpaController::new(config.behavior.clone(), config.downscale_stabilization);
        Self {
            config,
            hpa,
            next_poll: None,
            last_active: None,
        }
    }

    /// The Prometheus query's value at `now`: every scraped series (Prometheus does not know
    /// which pods the Deployment has) plus the requests the gateway holds.
    pub fn query(&self, view: &View<'_>) -> f64 {
        let pods: f64 = self
            .config
            .signal
            .latest(view.metrics, view.now)
            .iter()
            .map(|(_, v)| v)
            .sum();
        let gateway = if self.config.signal.counts_gateway() {
            view.metrics.gateway_pending(view.now).unwrap_or(0.0)
        } else {
            0.0
        };
        pods + gateway
    }

    /// `RequestScale` for one poll: the replica count KEDA sets, if it sets one.
    fn executor(&mut self, now: f64, current: i64, active: bool) -> Option<i64> {
        let min = i64::from(self.config.bounds.min);
        if active {
            self.last_active = Some(now);
            return (current == 0).then_some(min.max(1));
        }
        if current > 0 && min == 0 {
            let cooled = match self.last_active {
                // The ScaledObject was created at the start of the run.
                None => elapsed(now, 0.0, self.config.initial_cooldown_period),
                Some(at) => elapsed(now, at, self.config.cooldown_period),
            };
            return cooled.then_some(0);
        }
        (current < min).then_some(min)
    }
}

impl Policy for Keda {
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
        let current = i64::from(view.spec);
        let value = self.query(view);
        let due = self.next_poll.is_none_or(|at| now >= at - super::EPS);
        if due {
            self.next_poll = Some(now + self.config.polling_interval);
            let active = value > self.config.activation_threshold;
            if let Some(replicas) = self.executor(now, current, active)
                && replicas != current
            {
                return bounds.clamp(replicas);
            }
        }
        let min = i64::from(bounds.min).max(1);
        let max = i64::from(bounds.max);
        let status = i64::from(view.current());
        let proposal =
            external_per_pod_replicas(status, value, self.config.threshold, self.config.tolerances);
        let desired = self.hpa.reconcile(now, current, min, max, Some(proposal));
        bounds.clamp(desired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::peers::testkit::Fleet;

    fn config() -> KedaConfig {
        KedaConfig::new(Bounds { min: 0, max: 50 })
    }

    #[test]
    fn desired_is_ceil_of_the_sum_over_the_threshold_judged_on_status_replicas() {
        // 4 Ready pods at 30 in flight each + 2 starting pods; the gateway holds nothing.
        let mut fleet = Fleet::with_ready(4);
        fleet.starting(5);
        fleet.starting(6);
        fleet.sample_all(10.0, 30.0, 0.5);
        let mut keda = Keda::new(config());
        assert_eq!(keda.label(), "KEDA");
        assert_eq!(keda.query(&fleet.view(15.0, 6)), 120.0);
        // Sum 120 on 16 per pod over 6 pods that exist: 120 / 96 = 1.25 → ceil(120 / 16) = 8.
        // (The first call is also KEDA's poll: active, the count is > 0, nothing to do.)
        assert_eq!(keda.decide(&fleet.view(15.0, 6)), 8);
        // 100 in flight on 6 existing pods: 100 / 96 is within the tolerance → status.replicas
        // (6), although ceil(100 / 16) would be 7.
        let mut fleet = Fleet::with_ready(4);
        fleet.starting(5);
        fleet.starting(6);
        fleet.sample_all(10.0, 25.0, 0.5);
        let mut keda = Keda::new(config());
        assert_eq!(keda.decide(&fleet.view(15.0, 6)), 6);
    }

    #[test]
    fn the_gateway_queue_counts_and_wakes_the_fleet_from_zero() {
        let mut fleet = Fleet::new();
        let mut keda = Keda::new(config());
        // Nothing anywhere: at 0, inactive, the HPA is disabled.
        fleet.gateway(14.0, 0.0);
        assert_eq!(keda.decide(&fleet.view(15.0, 0)), 0);
        // Requests arrive at the gateway; the next call is not a poll (30 s), the HPA does
        // nothing at 0.
        fleet.gateway(29.0, 40.0);
        assert_eq!(keda.decide(&fleet.view(30.0, 0)), 0);
        // The poll at 45 s sees 40 > 0: active → max(minReplicaCount, 1) = 1.
        fleet.gateway(44.0, 40.0);
        assert_eq!(keda.decide(&fleet.view(45.0, 0)), 1);
        // The HPA then takes over: the pod is starting (status 1), 40 / 16 → 3, within the
        // older path's limit max(2, 4).
        fleet.starting(1);
        fleet.gateway(59.0, 40.0);
        assert_eq!(keda.decide(&fleet.view(60.0, 1)), 3);
        // With minReplicaCount 2 the wake-up goes to 2.
        let mut keda = Keda::new(KedaConfig::new(Bounds { min: 2, max: 50 }));
        let mut fleet = Fleet::new();
        fleet.gateway(14.0, 5.0);
        assert_eq!(keda.decide(&fleet.view(15.0, 0)), 2);
    }

    #[test]
    fn cooldown_to_zero_after_300_s_inactive() {
        let mut fleet = Fleet::with_ready(1);
        let mut keda = Keda::new(config());
        fleet.sample_all(14.0, 3.0, 0.1);
        // Poll at 15 s: active.
        assert_eq!(keda.decide(&fleet.view(15.0, 1)), 1);
        // From then on nothing is in flight.
        let mut t = 30.0;
        while t < 315.0 {
            fleet.sample_all(t - 1.0, 0.0, 0.0);
            assert_eq!(keda.decide(&fleet.view(t, 1)), 1, "at {t}");
            t += 15.0;
        }
        // The poll at 315 s: last active at 15 s, 300 s ago → scale to 0.
        fleet.sample_all(314.0, 0.0, 0.0);
        assert_eq!(keda.decide(&fleet.view(315.0, 1)), 0);
    }

    #[test]
    fn never_active_scales_to_zero_at_the_first_poll() {
        // initialCooldownPeriod 0: a ScaledObject that never saw activity scales in at once.
        let mut fleet = Fleet::with_ready(2);
        fleet.sample_all(14.0, 0.0, 0.0);
        let mut keda = Keda::new(config());
        assert_eq!(keda.decide(&fleet.view(15.0, 2)), 0);
    }
}
