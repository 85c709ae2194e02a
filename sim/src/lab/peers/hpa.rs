//! The Kubernetes HorizontalPodAutoscaler (autoscaling/v2) on a per-pod custom metric, and the
//! HPA's behaviour core that KEDA and the WVA reuse.
//!
//! Upstream: kubernetes/kubernetes
//! - `pkg/controller/podautoscaler/replica_calculator.go`: `calcPlainMetricReplicas` (Pods
//!   metric), `groupPods`, `GetExternalPerPodMetricReplicas` (External AverageValue),
//!   `Tolerances.isWithin`;
//! - `pkg/controller/podautoscaler/horizontal.go`: `reconcileAutoscaler`,
//!   `recordInitialRecommendation`, `stabilizeRecommendation` (no `spec.behavior`),
//!   `stabilizeRecommendationWithBehaviors`, `convertDesiredReplicasWithBehaviorRate`,
//!   `calculateScaleUpLimitWithScalingRules`, `calculateScaleDownLimitWithBehaviors`,
//!   `getReplicasChangePerPeriod`, `storeScaleEvent`, `markScaleEventsOutdated`,
//!   `convertDesiredReplicasWithRules`, `calculateScaleUpLimit`;
//! - `pkg/apis/autoscaling/v2/defaults.go`: `SetDefaults_HorizontalPodAutoscalerBehavior`,
//!   `GenerateHPAScaleUpRules`, `GenerateHPAScaleDownRules`.
//!
//! One subtlety the notes did not mention: `defaults.go` fills the scaling rules only when the
//! object has a `spec.behavior`. Without one the controller takes an older path: the scale-down
//! window is the controller flag (`--horizontal-pod-autoscaler-downscale-stabilization`, 5 min)
//! and the only rate limit is `max(2 × current, 4)` replicas per sync, with no scale-down limit.
//! [`Behavior`] models the first path, `None` the second (what a KEDA ScaledObject without
//! `advanced.horizontalPodAutoscalerConfig.behavior` gets).

use crate::lab::policy::{Bounds, Policy, View};

use super::{
    REFERENCE_TARGET, Signal, ceil_i64, elapsed, label, num, pod_ids, trunc_i64, within_window,
};

/// The controller's `--horizontal-pod-autoscaler-sync-period` default.
pub const SYNC_PERIOD: f64 = 15.0;
/// The controller's `--horizontal-pod-autoscaler-downscale-stabilization` default.
pub const DOWNSCALE_STABILIZATION: f64 = 300.0;

/// How an `HPAScalingPolicy` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// `type: Pods`: at most `value` pods per period.
    Pods,
    /// `type: Percent`: at most `value` % of the replicas at the start of the period.
    Percent,
}

/// One `HPAScalingPolicy`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalingPolicy {
    pub kind: PolicyKind,
    pub value: u32,
    /// `periodSeconds`.
    pub period: f64,
}

/// `selectPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectPolicy {
    /// The policy allowing the largest change (the default).
    Max,
    /// The policy allowing the smallest change.
    Min,
    /// No scaling in this direction.
    Disabled,
}

/// One direction of `spec.behavior` (`HPAScalingRules`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingRules {
    /// `stabilizationWindowSeconds`.
    pub stabilization_window: f64,
    pub select: SelectPolicy,
    pub policies: Vec<ScalingPolicy>,
}

impl ScalingRules {
    fn longest_period(&self) -> f64 {
        self.policies.iter().map(|p| p.period).fold(0.0, f64::max)
    }
}

/// `spec.behavior` with every field filled.
#[derive(Debug, Clone, PartialEq)]
pub struct Behavior {
    pub scale_up: ScalingRules,
    pub scale_down: ScalingRules,
}

impl Behavior {
    /// What `defaults.go` fills in for a `spec.behavior` that sets nothing else: scale-up window
    /// 0, `Max` of 4 pods or 100 % per 15 s; scale-down `Max` of 100 % per 15 s, with the window
    /// left nil by the defaulter and taken from the controller flag (300 s) by
    /// `maybeInitScaleDownStabilizationWindow`.
    pub fn upstream() -> Self {
        Self {
            scale_up: ScalingRules {
                stabilization_window: 0.0,
                select: SelectPolicy::Max,
                policies: vec![
                    ScalingPolicy {
                        kind: PolicyKind::Pods,
                        value: 4,
                        period: 15.0,
                    },
                    ScalingPolicy {
                        kind: PolicyKind::Percent,
                        value: 100,
                        period: 15.0,
                    },
                ],
            },
            scale_down: ScalingRules {
                stabilization_window: DOWNSCALE_STABILIZATION,
                select: SelectPolicy::Max,
                policies: vec![ScalingPolicy {
                    kind: PolicyKind::Percent,
                    value: 100,
                    period: 15.0,
                }],
            },
        }
    }

    /// [`Behavior::upstream`] with another scale-down stabilization window.
    pub fn with_down_window(mut self, seconds: f64) -> Self {
        self.scale_down.stabilization_window = seconds;
        self
    }

    /// Label parts for what differs from [`Behavior::upstream`].
    pub(crate) fn label_parts(&self, reference: &Behavior) -> Vec<String> {
        let mut parts = Vec::new();
        if self.scale_up.stabilization_window != reference.scale_up.stabilization_window {
            parts.push(format!("up {} s", num(self.scale_up.stabilization_window)));
        }
        if self.scale_down.stabilization_window != reference.scale_down.stabilization_window {
            parts.push(format!(
                "down {} s",
                num(self.scale_down.stabilization_window)
            ));
        }
        if self.scale_up.policies != reference.scale_up.policies
            || self.scale_up.select != reference.scale_up.select
        {
            parts.push("custom up policies".into());
        }
        if self.scale_down.policies != reference.scale_down.policies
            || self.scale_down.select != reference.scale_down.select
        {
            parts.push("custom down policies".into());
        }
        parts
    }
}

/// The usage-ratio band in which the HPA keeps the current count (`Tolerances`, per direction
/// since Kubernetes 1.33; both 0.1 by default, `--horizontal-pod-autoscaler-tolerance`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerances {
    pub down: f64,
    pub up: f64,
}

impl Tolerances {
    pub const DEFAULT: Tolerances = Tolerances { down: 0.1, up: 0.1 };

    /// `isWithin`: `1 - down <= ratio <= 1 + up` (so NaN is never within).
    pub fn within(self, ratio: f64) -> bool {
        1.0 - self.down <= ratio && ratio <= 1.0 + self.up
    }

    fn label_parts(self) -> Vec<String> {
        if self == Self::DEFAULT {
            Vec::new()
        } else if self.down == self.up {
            vec![format!("tolerance {}", num(self.up))]
        } else {
            vec![format!("tolerance -{}/+{}", num(self.down), num(self.up))]
        }
    }
}

/// The target's pods as `groupPods` sorts them for a non-CPU Pods metric.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodGroups {
    /// The metric of each pod that has one (they make `readyPodCount`; readiness is not checked
    /// for non-CPU metrics).
    pub values: Vec<f64>,
    /// Running pods with no metric (in the lab: pods loading their model, whose metrics endpoint
    /// does not answer yet, and Ready pods not scraped yet).
    pub missing: usize,
    /// Pending pods (`unreadyPods`): waiting for a node or pulling their image.
    pub unready: usize,
}

/// `calcPlainMetricReplicas`: the replica count a Pods metric with an AverageValue `target`
/// proposes, given `current` (the target's spec.replicas). `None` is the controller's error
/// (no pods, or no pod with a metric): the HPA then leaves the count alone.
pub fn pods_metric_replicas(
    current: i64,
    target: f64,
    tolerances: Tolerances,
    pods: &PodGroups,
) -> Option<i64> {
    if pods.values.is_empty() || target <= 0.0 {
        return None;
    }
    let ready = pods.values.len() as f64;
    let total: f64 = pods.values.iter().sum();
    let ratio = total / ready / target;
    let scale_up_with_unready = pods.unready > 0 && ratio > 1.0;
    if !scale_up_with_unready && pods.missing == 0 {
        if tolerances.within(ratio) {
            return Some(current);
        }
        return Some(ceil_i64(ratio * ready));
    }
    // Fill in the pods that have no say yet, against the direction of the change: a missing
    // pod counts as the target on a scale-down and as 0 on a scale-up (at exactly 1 it is left
    // out); Pending pods count as 0 on a scale-up and are left out otherwise.
    let mut sum = total;
    let mut n = ready;
    let missing = pods.missing as f64;
    if pods.missing > 0 {
        if ratio < 1.0 {
            sum += target * missing;
            n += missing;
        } else if ratio > 1.0 {
            n += missing;
        }
    }
    if scale_up_with_unready {
        n += pods.unready as f64;
    }
    let new_ratio = sum / n / target;
    // The veto: no change when the filled-in ratio is within tolerance or points the other way.
    if tolerances.within(new_ratio)
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return Some(current);
    }
    let proposal = ceil_i64(new_ratio * n);
    // Counting more pods may also flip the direction against the current count.
    if (new_ratio < 1.0 && proposal > current) || (new_ratio > 1.0 && proposal < current) {
        return Some(current);
    }
    Some(proposal)
}

/// `GetExternalPerPodMetricReplicas`: an External metric with an AverageValue target. The
/// tolerance is judged against `status_replicas` (status.replicas: every pod that exists,
/// starting ones included), and within it the proposal *is* status.replicas (not spec).
pub fn external_per_pod_replicas(
    status_replicas: i64,
    usage: f64,
    target_per_pod: f64,
    tolerances: Tolerances,
) -> i64 {
    // Go divides floats here: 0 pods give +Inf (or NaN for 0/0), never within the tolerance.
    let ratio = usage / (target_per_pod * status_replicas as f64);
    if tolerances.within(ratio) {
        status_replicas
    } else {
        ceil_i64(usage / target_per_pod).min(i64::from(i32::MAX))
    }
}

#[derive(Debug, Clone, Copy)]
struct Recommendation {
    at: f64,
    replicas: i64,
}

/// The HPA's record of unstabilized recommendations and its two stabilization rules.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stabilizer {
    recommendations: Vec<Recommendation>,
}

impl Stabilizer {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Records a recommendation without stabilizing (`recordInitialRecommendation`).
    pub(crate) fn push(&mut self, now: f64, replicas: i64) {
        self.recommendations
            .push(Recommendation { at: now, replicas });
    }

    /// `stabilizeRecommendation` (no `spec.behavior`): the highest recommendation of the last
    /// `window`, the new one included; the new one is recorded unclamped.
    pub(crate) fn highest(&mut self, now: f64, window: f64, proposal: i64) -> i64 {
        let mut highest = proposal;
        let mut old = None;
        for (i, rec) in self.recommendations.iter().enumerate() {
            if within_window(now, rec.at, window) {
                highest = highest.max(rec.replicas);
            } else {
                old = Some(i);
            }
        }
        self.record(old, now, proposal);
        highest
    }

    /// `stabilizeRecommendationWithBehaviors`: the count moves from `current` no further up than
    /// the lowest recommendation of the scale-up window and no further down than the highest of
    /// the scale-down window (both include the new one, which is recorded unclamped).
    pub(crate) fn between(
        &mut self,
        now: f64,
        current: i64,
        proposal: i64,
        up_window: f64,
        down_window: f64,
    ) -> i64 {
        let mut up = proposal;
        let mut down = proposal;
        let mut old = None;
        for (i, rec) in self.recommendations.iter().enumerate() {
            let in_up = within_window(now, rec.at, up_window);
            let in_down = within_window(now, rec.at, down_window);
            if in_up {
                up = up.min(rec.replicas);
            }
            if in_down {
                down = down.max(rec.replicas);
            }
            if !in_up && !in_down {
                old = Some(i);
            }
        }
        self.record(old, now, proposal);
        let mut recommendation = current;
        if recommendation < up {
            recommendation = up;
        }
        if recommendation > down {
            recommendation = down;
        }
        recommendation
    }

    /// Records a recommendation in place of an expired one (the controller's reuse), or appends.
    fn record(&mut self, old: Option<usize>, now: f64, replicas: i64) {
        let rec = Recommendation { at: now, replicas };
        match old.and_then(|i| self.recommendations.get_mut(i)) {
            Some(slot) => *slot = rec,
            None => self.recommendations.push(rec),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct ScaleEvent {
    at: f64,
    /// Absolute change.
    change: i64,
    outdated: bool,
}

/// The HPA controller's state for one HorizontalPodAutoscaler and its reconcile step: the
/// unstabilized recommendations and the scale events it keeps, then stabilization, rate limits
/// and the min/max clamp around whatever replica count the metrics propose.
#[derive(Debug, Clone)]
pub struct HpaController {
    /// `spec.behavior`, or `None` for the controller's older path.
    behavior: Option<Behavior>,
    /// The controller flag's scale-down window, used when there is no `spec.behavior`.
    downscale_stabilization: f64,
    recommendations: Stabilizer,
    initialized: bool,
    scale_up_events: Vec<ScaleEvent>,
    scale_down_events: Vec<ScaleEvent>,
}

impl HpaController {
    pub fn new(behavior: Option<Behavior>, downscale_stabilization: f64) -> Self {
        Self {
            behavior,
            downscale_stabilization,
            recommendations: Stabilizer::new(),
            initialized: false,
            scale_up_events: Vec::new(),
            scale_down_events: Vec::new(),
        }
    }

    /// `reconcileAutoscaler` with `current` = the target's spec.replicas and `proposal` = what
    /// the metrics propose (`None`: the metrics failed, nothing changes and nothing is recorded).
    /// Returns the replica count to set.
    pub fn reconcile(
        &mut self,
        now: f64,
        current: i64,
        min: i64,
        max: i64,
        proposal: Option<i64>,
    ) -> i64 {
        if !self.initialized {
            // recordInitialRecommendation: the count found at the first sync is a recommendation.
            self.initialized = true;
            self.recommendations.push(now, current);
        }
        let desired = if current == 0 && min != 0 {
            // "ScalingDisabled": a target scaled to zero is left alone.
            return current;
        } else if current > max {
            max
        } else if current < min {
            min
        } else {
            let Some(proposal) = proposal else {
                return current;
            };
            self.normalize(now, current, proposal, min, max)
        };
        if desired != current {
            self.store_scale_event(now, current, desired);
        }
        desired
    }

    /// `normalizeDesiredReplicas` / `normalizeDesiredReplicasWithBehaviors`.
    fn normalize(&mut self, now: f64, current: i64, proposal: i64, min: i64, max: i64) -> i64 {
        match self.behavior.clone() {
            None => {
                let stabilized =
                    self.recommendations
                        .highest(now, self.downscale_stabilization, proposal);
                // convertDesiredReplicasWithRules: scale up to at most max(2 × current, 4).
                let scale_up_limit = (2 * current).max(4);
                let maximum = max.min(scale_up_limit);
                if stabilized < min {
                    min
                } else if stabilized > maximum {
                    maximum
                } else {
                    stabilized
                }
            }
            Some(behavior) => {
                let stabilized = self.recommendations.between(
                    now,
                    current,
                    proposal,
                    behavior.scale_up.stabilization_window,
                    behavior.scale_down.stabilization_window,
                );
                self.rate_limit(now, current, stabilized, min, max, &behavior)
            }
        }
    }

    /// `convertDesiredReplicasWithBehaviorRate`, which also clamps to min/max.
    fn rate_limit(
        &self,
        now: f64,
        current: i64,
        desired: i64,
        min: i64,
        max: i64,
        behavior: &Behavior,
    ) -> i64 {
        if desired > current {
            let limit = self
                .scale_up_limit(now, current, &behavior.scale_up)
                .max(current);
            let maximum = max.min(limit);
            desired.min(maximum)
        } else if desired < current {
            let limit = self
                .scale_down_limit(now, current, &behavior.scale_down)
                .min(current);
            let minimum = min.max(limit);
            desired.max(minimum)
        } else {
            desired
        }
    }

    /// The replicas at the start of a policy's period: the current count minus what was added
    /// and plus what was removed by the scale events inside the period (both directions).
    fn period_start(&self, now: f64, current: i64, period: f64) -> i64 {
        let added = changes_within(&self.scale_up_events, now, period);
        let removed = changes_within(&self.scale_down_events, now, period);
        current - added + removed
    }

    /// `calculateScaleUpLimitWithScalingRules`.
    fn scale_up_limit(&self, now: f64, current: i64, rules: &ScalingRules) -> i64 {
        let (mut result, pick): (i64, fn(i64, i64) -> i64) = match rules.select {
            SelectPolicy::Disabled => return current,
            SelectPolicy::Min => (i64::MAX, i64::min),
            SelectPolicy::Max => (i64::MIN, i64::max),
        };
        for policy in &rules.policies {
            let start = self.period_start(now, current, policy.period);
            let proposed = match policy.kind {
                PolicyKind::Pods => start + i64::from(policy.value),
                // Rounded up so that a small percentage can still add a pod.
                PolicyKind::Percent => {
                    ceil_i64(start as f64 * (1.0 + f64::from(policy.value) / 100.0))
                }
            };
            result = pick(result, proposed);
        }
        result
    }

    /// `calculateScaleDownLimitWithBehaviors`.
    fn scale_down_limit(&self, now: f64, current: i64, rules: &ScalingRules) -> i64 {
        let (mut result, pick): (i64, fn(i64, i64) -> i64) = match rules.select {
            SelectPolicy::Disabled => return current,
            SelectPolicy::Min => (i64::MIN, i64::max),
            SelectPolicy::Max => (i64::MAX, i64::min),
        };
        for policy in &rules.policies {
            let start = self.period_start(now, current, policy.period);
            let proposed = match policy.kind {
                PolicyKind::Pods => start - i64::from(policy.value),
                PolicyKind::Percent => {
                    trunc_i64(start as f64 * (1.0 - f64::from(policy.value) / 100.0))
                }
            };
            result = pick(result, proposed);
        }
        result
    }

    /// `storeScaleEvent`: only kept with a `spec.behavior`; an event older than the direction's
    /// longest policy period is marked outdated and its slot reused.
    fn store_scale_event(&mut self, now: f64, previous: i64, new: i64) {
        let Some(behavior) = &self.behavior else {
            return;
        };
        let (events, longest, change) = if new > previous {
            (
                &mut self.scale_up_events,
                behavior.scale_up.longest_period(),
                new - previous,
            )
        } else {
            (
                &mut self.scale_down_events,
                behavior.scale_down.longest_period(),
                previous - new,
            )
        };
        let mut slot = None;
        for (i, event) in events.iter_mut().enumerate() {
            // markScaleEventsOutdated: timestamp before now - longest period.
            if elapsed(now, event.at, longest) {
                event.outdated = true;
            }
            if event.outdated {
                slot = Some(i);
            }
        }
        let event = ScaleEvent {
            at: now,
            change,
            outdated: false,
        };
        match slot.and_then(|i| events.get_mut(i)) {
            Some(old) => *old = event,
            None => events.push(event),
        }
    }
}

/// `getReplicasChangePerPeriod`: the changes of the events inside the period (outdated or not:
/// the controller does not look at the flag here).
fn changes_within(events: &[ScaleEvent], now: f64, period: f64) -> i64 {
    events
        .iter()
        .filter(|e| within_window(now, e.at, period))
        .map(|e| e.change)
        .sum()
}

/// The settings of an [`Hpa`].
#[derive(Debug, Clone, PartialEq)]
pub struct HpaConfig {
    /// minReplicas / maxReplicas.
    pub bounds: Bounds,
    /// The Pods metric's `target.averageValue` per pod.
    pub target: f64,
    pub signal: Signal,
    pub tolerances: Tolerances,
    /// `spec.behavior` (default: set, with upstream defaults); `None` takes the controller's
    /// older path (see the module doc).
    pub behavior: Option<Behavior>,
    /// `--horizontal-pod-autoscaler-downscale-stabilization` (used without `spec.behavior`).
    pub downscale_stabilization: f64,
    /// `--horizontal-pod-autoscaler-sync-period`.
    pub sync_period: f64,
    /// Prometheus' scrape interval behind prometheus-adapter.
    pub scrape_interval: f64,
}

impl HpaConfig {
    /// Upstream defaults, the lab's reference target, and a `spec.behavior` (so the scale-down
    /// window can be set per object).
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            target: REFERENCE_TARGET,
            signal: Signal::Concurrency,
            tolerances: Tolerances::DEFAULT,
            behavior: Some(Behavior::upstream()),
            downscale_stabilization: DOWNSCALE_STABILIZATION,
            sync_period: SYNC_PERIOD,
            scrape_interval: 15.0,
        }
    }

    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        match &self.behavior {
            Some(behavior) => parts.extend(behavior.label_parts(&Behavior::upstream())),
            None => {
                parts.push("no behavior".into());
                if self.downscale_stabilization != DOWNSCALE_STABILIZATION {
                    parts.push(format!("down {} s", num(self.downscale_stabilization)));
                }
            }
        }
        parts.extend(self.tolerances.label_parts());
        if self.target != REFERENCE_TARGET {
            parts.push(format!("target {}", num(self.target)));
        }
        if self.signal != Signal::Concurrency {
            parts.push(self.signal.name().into());
        }
        if self.sync_period != SYNC_PERIOD {
            parts.push(format!("sync {} s", num(self.sync_period)));
        }
        if self.scrape_interval != 15.0 {
            parts.push(format!("scrape {} s", num(self.scrape_interval)));
        }
        label("HPA", &parts)
    }
}

/// The Kubernetes HPA v2 scaling a Deployment on a Pods metric (`type: Pods`,
/// `target.type: AverageValue`) served by prometheus-adapter from Prometheus.
///
/// Follows kubernetes/kubernetes `replica_calculator.go` `calcPlainMetricReplicas` and
/// `groupPods`, and `horizontal.go` `reconcileAutoscaler` (see the module doc for the rest).
/// Every sync (15 s) the adapter answers with each pod's newest scraped value (an instant query);
/// pods without one are "missing" (a pod loading its model has no metrics endpoint, and Ready
/// pods may not have been scraped yet). The gateway's queue is not a pod's metric, so the HPA
/// cannot see it: at zero Ready pods it has no metric at all and does nothing.
#[derive(Debug, Clone)]
pub struct Hpa {
    pub config: HpaConfig,
    controller: HpaController,
}

impl Hpa {
    pub fn new(config: HpaConfig) -> Self {
        let controller =
            HpaController::new(config.behavior.clone(), config.downscale_stabilization);
        Self { config, controller }
    }

    /// How `groupPods` sorts the view's pods for the configured signal.
    pub fn pod_groups(&self, view: &View<'_>) -> PodGroups {
        let ids = pod_ids(view);
        let values: Vec<f64> = self
            .config
            .signal
            .latest(view.metrics, view.now)
            .into_iter()
            .filter(|(pod, _)| ids.contains(pod))
            .map(|(_, v)| v)
            .collect();
        // A Pending pod has never run, so it has no metric either.
        let unready = view.pods.iter().filter(|p| p.is_pending()).count();
        let missing = view.pods.len().saturating_sub(values.len() + unready);
        PodGroups {
            values,
            missing,
            unready,
        }
    }
}

impl Policy for Hpa {
    fn label(&self) -> String {
        self.config.label()
    }

    fn period(&self) -> f64 {
        self.config.sync_period
    }

    fn scrape_interval(&self) -> f64 {
        self.config.scrape_interval
    }

    fn decide(&mut self, view: &View<'_>) -> u32 {
        let current = i64::from(view.spec);
        let groups = self.pod_groups(view);
        // The selector lists no pod at all: the controller errors out and changes nothing.
        let proposal = if view.pods.is_empty() {
            None
        } else {
            pods_metric_replicas(current, self.config.target, self.config.tolerances, &groups)
        };
        let bounds = self.config.bounds;
        let desired = self.controller.reconcile(
            view.now,
            current,
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

    const TOL: Tolerances = Tolerances::DEFAULT;

    fn groups(values: &[f64], missing: usize) -> PodGroups {
        PodGroups {
            values: values.to_vec(),
            missing,
            unready: 0,
        }
    }

    fn bounds(min: u32, max: u32) -> Bounds {
        Bounds { min, max }
    }

    #[test]
    fn a_ratio_within_ten_percent_keeps_the_count() {
        // 4 pods at 17.6 per pod on a target of 16: ratio 1.1, inclusive bound.
        assert_eq!(
            pods_metric_replicas(4, 16.0, TOL, &groups(&[17.6; 4], 0)),
            Some(4)
        );
        // 14.4 per pod: ratio 0.9, kept too.
        assert_eq!(
            pods_metric_replicas(4, 16.0, TOL, &groups(&[14.4; 4], 0)),
            Some(4)
        );
        // 18 per pod: ratio 1.125, ceil(1.125 × 4) = 5.
        assert_eq!(
            pods_metric_replicas(4, 16.0, TOL, &groups(&[18.0; 4], 0)),
            Some(5)
        );
        // Down: 8 per pod, ratio 0.5 → 2.
        assert_eq!(
            pods_metric_replicas(4, 16.0, TOL, &groups(&[8.0; 4], 0)),
            Some(2)
        );
        // Within tolerance the answer is the current (spec) count, whatever the pods say.
        assert_eq!(
            pods_metric_replicas(6, 16.0, TOL, &groups(&[16.0; 4], 0)),
            Some(6)
        );
    }

    #[test]
    fn missing_pods_count_against_the_direction_and_can_veto() {
        // Scale-up: 2 pods at 32 and 2 missing pods (counted as 0): ratio 2 → 1, within
        // tolerance → keep 4.
        assert_eq!(
            pods_metric_replicas(4, 16.0, TOL, &groups(&[32.0, 32.0], 2)),
            Some(4)
        );
        // 2 pods at 48 and 2 missing: 96 / 4 / 16 = 1.5 → ceil(1.5 × 4) = 6 (not 6 from 2 pods).
        assert_eq!(
            pods_metric_replicas(4, 16.0, TOL, &groups(&[48.0, 48.0], 2)),
            Some(6)
        );
        // Scale-down: 2 pods at 4 and 2 missing (counted as the target 16): 40 / 4 / 16 = 0.625
        // → ceil(0.625 × 4) = 3, not ceil(0.25 × 2) = 1.
        assert_eq!(
            pods_metric_replicas(4, 16.0, TOL, &groups(&[4.0, 4.0], 2)),
            Some(3)
        );
        // The veto: 1 pod at 20 (ratio 1.25) with 3 missing pods counted as 0: 20 / 4 / 16 =
        // 0.3125, the other direction → keep the count.
        assert_eq!(
            pods_metric_replicas(4, 16.0, TOL, &groups(&[20.0], 3)),
            Some(4)
        );
        // Scale-down veto: 1 pod at 12 (0.75) with 1 missing pod as the target: 28 / 2 / 16 =
        // 0.875, within tolerance → keep.
        assert_eq!(
            pods_metric_replicas(2, 16.0, TOL, &groups(&[12.0], 1)),
            Some(2)
        );
        // The second veto: counting the missing pods would scale up against a falling ratio.
        // spec 2, 1 pod at 4 (0.25) with 3 missing at the target: 52 / 4 / 16 = 0.8125 →
        // ceil(3.25) = 4 > 2 → keep 2.
        assert_eq!(
            pods_metric_replicas(2, 16.0, TOL, &groups(&[4.0], 3)),
            Some(2)
        );
        // No pod with a metric: the controller errors out.
        assert_eq!(pods_metric_replicas(2, 16.0, TOL, &groups(&[], 2)), None);
    }

    #[test]
    fn starting_pods_are_missing_for_the_pods_metric() {
        let mut fleet = Fleet::with_ready(2);
        fleet.starting(3);
        fleet.sample(1, 10.0, 40.0, 8.0, 0.5);
        fleet.sample(2, 11.0, 30.0, 18.0, 0.5);
        let hpa = Hpa::new(HpaConfig::new(bounds(1, 20)));
        let groups = hpa.pod_groups(&fleet.view(15.0, 3));
        assert_eq!(groups.values, vec![48.0, 48.0]);
        assert_eq!(groups.missing, 1);
        assert_eq!(groups.unready, 0);
    }

    /// `groupPods` puts a Pending pod among the unready ones (counted as 0 on a scale-up, left
    /// out otherwise), and a Running pod without a metric among the missing.
    #[test]
    fn pending_pods_are_unready_and_loading_pods_are_missing() {
        let mut fleet = Fleet::with_ready(2);
        fleet.starting(3);
        fleet.pending(4);
        fleet.pending(5);
        fleet.sample(1, 10.0, 40.0, 8.0, 0.5);
        fleet.sample(2, 11.0, 30.0, 18.0, 0.5);
        let hpa = Hpa::new(HpaConfig::new(bounds(1, 20)));
        let groups = hpa.pod_groups(&fleet.view(15.0, 5));
        assert_eq!(groups.missing, 1);
        assert_eq!(groups.unready, 2);
        // Scale-up (48 / 16 = 3): the missing and the Pending pods count as 0, so the ratio is
        // 96 / 5 / 16 = 1.2 → ceil(1.2 × 5) = 6; on a scale-down Pending pods are left out.
        assert_eq!(pods_metric_replicas(5, 16.0, TOL, &groups), Some(6));
    }

    #[test]
    fn scale_up_is_limited_to_the_larger_of_four_pods_and_double_per_period() {
        let mut hpa = HpaController::new(Some(Behavior::upstream()), DOWNSCALE_STABILIZATION);
        // From 2: max(2 + 4, 2 × 2) = 6.
        assert_eq!(hpa.reconcile(15.0, 2, 1, 100, Some(50)), 6);
        // 15 s later the period has rolled over: from 6, max(10, 12) = 12.
        assert_eq!(hpa.reconcile(30.0, 6, 1, 100, Some(50)), 12);
        assert_eq!(hpa.reconcile(45.0, 12, 1, 100, Some(50)), 24);
        assert_eq!(hpa.reconcile(60.0, 24, 1, 100, Some(50)), 48);
        assert_eq!(hpa.reconcile(75.0, 48, 1, 100, Some(50)), 50);
        // Max clamps.
        let mut hpa = HpaController::new(Some(Behavior::upstream()), DOWNSCALE_STABILIZATION);
        assert_eq!(hpa.reconcile(15.0, 8, 1, 10, Some(40)), 10);
    }

    #[test]
    fn the_scale_up_limit_counts_the_events_inside_the_period() {
        // A policy period longer than the sync: 4 pods per 60 s.
        let mut behavior = Behavior::upstream();
        behavior.scale_up.policies = vec![ScalingPolicy {
            kind: PolicyKind::Pods,
            value: 4,
            period: 60.0,
        }];
        let mut hpa = HpaController::new(Some(behavior), DOWNSCALE_STABILIZATION);
        assert_eq!(hpa.reconcile(15.0, 1, 1, 100, Some(20)), 5);
        // The 4 added 15 s ago still count: the period started at 1 → at most 5.
        assert_eq!(hpa.reconcile(30.0, 5, 1, 100, Some(20)), 5);
        assert_eq!(hpa.reconcile(60.0, 5, 1, 100, Some(20)), 5);
        // 60 s after the event the period has rolled over.
        assert_eq!(hpa.reconcile(75.0, 5, 1, 100, Some(20)), 9);
    }

    #[test]
    fn the_scale_down_window_holds_the_highest_recent_recommendation() {
        let mut hpa = HpaController::new(Some(Behavior::upstream()), DOWNSCALE_STABILIZATION);
        assert_eq!(hpa.reconcile(15.0, 4, 1, 100, Some(8)), 8);
        // The load falls: recommendations of 2 are held at 8 for the 300 s window.
        let mut t = 30.0;
        while t < 315.0 {
            assert_eq!(hpa.reconcile(t, 8, 1, 100, Some(2)), 8, "at {t}");
            t += 15.0;
        }
        // The recommendation of 8 was made at 15 s: at 315 s it has left the window.
        assert_eq!(hpa.reconcile(315.0, 8, 1, 100, Some(2)), 2);
    }

    #[test]
    fn the_recommendation_is_recorded_unclamped() {
        let mut hpa = HpaController::new(Some(Behavior::upstream()), DOWNSCALE_STABILIZATION);
        // 40 is proposed, the max of 10 applies, but 40 is what the window remembers.
        assert_eq!(hpa.reconcile(15.0, 10, 1, 10, Some(40)), 10);
        assert_eq!(hpa.reconcile(30.0, 10, 1, 10, Some(3)), 10);
        // The first sync also recorded the count it found (10) as a recommendation.
        let mut hpa = HpaController::new(Some(Behavior::upstream()), DOWNSCALE_STABILIZATION);
        assert_eq!(hpa.reconcile(15.0, 10, 1, 20, Some(3)), 10);
    }

    #[test]
    fn no_behavior_takes_the_older_path() {
        let mut hpa = HpaController::new(None, DOWNSCALE_STABILIZATION);
        // max(2 × 1, 4) = 4, not 5.
        assert_eq!(hpa.reconcile(15.0, 1, 1, 100, Some(30)), 4);
        assert_eq!(hpa.reconcile(30.0, 4, 1, 100, Some(30)), 8);
        // The load falls, but the window's highest recommendation (30) is what counts, and
        // on this path it even keeps scaling *up* towards it (the behavior path never moves
        // against the new recommendation).
        assert_eq!(hpa.reconcile(45.0, 8, 1, 100, Some(1)), 16);
        // No scale-down rate limit: once 30 has left the window, straight down.
        assert_eq!(hpa.reconcile(330.0, 16, 1, 100, Some(1)), 1);
    }

    #[test]
    fn scaling_is_disabled_at_zero_and_out_of_bounds_counts_are_corrected() {
        let mut hpa = HpaController::new(Some(Behavior::upstream()), DOWNSCALE_STABILIZATION);
        assert_eq!(hpa.reconcile(15.0, 0, 1, 10, Some(5)), 0);
        assert_eq!(hpa.reconcile(30.0, 12, 1, 10, Some(12)), 10);
        assert_eq!(hpa.reconcile(45.0, 1, 2, 10, None), 2);
        // Metrics failing: nothing changes.
        assert_eq!(hpa.reconcile(60.0, 5, 1, 10, None), 5);
    }

    #[test]
    fn external_average_value_judges_the_tolerance_against_status_replicas() {
        // 100 in flight, 16 per pod, 6 pods exist (some starting): 100 / 96 = 1.04 → keep 6.
        assert_eq!(external_per_pod_replicas(6, 100.0, 16.0, TOL), 6);
        // 5 pods: 100 / 80 = 1.25 → ceil(100 / 16) = 7.
        assert_eq!(external_per_pod_replicas(5, 100.0, 16.0, TOL), 7);
        // No pod: any load scales to ceil(sum / target); none gives 0.
        assert_eq!(external_per_pod_replicas(0, 20.0, 16.0, TOL), 2);
        assert_eq!(external_per_pod_replicas(0, 0.0, 16.0, TOL), 0);
    }

    #[test]
    fn the_hpa_policy_scales_on_what_was_scraped() {
        let mut fleet = Fleet::with_ready(2);
        fleet.sample_all(10.0, 40.0, 0.5);
        let mut hpa = Hpa::new(HpaConfig::new(bounds(1, 20)));
        assert_eq!(hpa.label(), "HPA");
        assert_eq!(hpa.period(), 15.0);
        // 40 per pod on 16: ratio 2.5 → 5 (limit from 2 is 6).
        assert_eq!(hpa.decide(&fleet.view(15.0, 2)), 5);
        let mut config = HpaConfig::new(bounds(1, 20));
        config.behavior = Some(Behavior::upstream().with_down_window(60.0));
        config.target = 24.0;
        assert_eq!(config.label(), "HPA (down 60 s, target 24)");
    }
}
