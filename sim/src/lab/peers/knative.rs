//! The Knative Pod Autoscaler (KPA).

use std::collections::BTreeSet;

use crate::lab::policy::{Bounds, Policy, View};

use super::{
    REFERENCE_TARGET, Signal, ceil_i64, count_i64, elapsed, floor_i64, label, num, ready_ids,
};

/// The settings of a [`Knative`] autoscaler (`config-autoscaler` and the revision's
/// annotations).
#[derive(Debug, Clone, PartialEq)]
pub struct KnativeConfig {
    /// `min-scale` / `max-scale`; a min of 0 allows scale to zero.
    pub bounds: Bounds,
    /// `autoscaling.knative.dev/target`: concurrency per pod (`container-concurrency-target-
    /// default` is 100 upstream, meant for generic HTTP apps; the lab uses its reference target).
    pub target: f64,
    /// `container-concurrency-target-percentage`: the autoscaler aims at target × this.
    pub target_utilization: f64,
    /// `stable-window`.
    pub stable_window: f64,
    /// `panic-window-percentage`: the panic window as a percentage of the stable window.
    pub panic_window_percentage: f64,
    /// `panic-threshold-percentage`.
    pub panic_threshold_percentage: f64,
    /// `max-scale-up-rate`.
    pub max_scale_up_rate: f64,
    /// `max-scale-down-rate`.
    pub max_scale_down_rate: f64,
    /// `enable-scale-to-zero`.
    pub enable_scale_to_zero: bool,
    /// `scale-to-zero-grace-period`.
    pub scale_to_zero_grace_period: f64,
    /// `scale-to-zero-pod-retention-period`.
    pub scale_to_zero_pod_retention: f64,
    /// The per-pod signal the queue-proxy would report (concurrency by default).
    pub signal: Signal,
}

impl KnativeConfig {
    /// `config-autoscaler` defaults (`pkg/autoscaler/config/config.go` `defaultConfig`) with the
    /// lab's reference target.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            target: REFERENCE_TARGET,
            target_utilization: 0.7,
            stable_window: 60.0,
            panic_window_percentage: 10.0,
            panic_threshold_percentage: 200.0,
            max_scale_up_rate: 1000.0,
            max_scale_down_rate: 2.0,
            enable_scale_to_zero: true,
            scale_to_zero_grace_period: 30.0,
            scale_to_zero_pod_retention: 0.0,
            signal: Signal::Concurrency,
        }
    }

    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if self.target != REFERENCE_TARGET {
            parts.push(format!("target {}", num(self.target)));
        }
        if self.target_utilization != 0.7 {
            parts.push(format!("utilization {}", num(self.target_utilization)));
        }
        if self.stable_window != 60.0 {
            parts.push(format!("stable {} s", num(self.stable_window)));
        }
        if self.panic_window_percentage != 10.0 {
            parts.push(format!(
                "panic window {}%",
                num(self.panic_window_percentage)
            ));
        }
        if self.panic_threshold_percentage != 200.0 {
            parts.push(format!(
                "panic at {}%",
                num(self.panic_threshold_percentage)
            ));
        }
        if self.max_scale_up_rate != 1000.0 {
            parts.push(format!("up ×{}", num(self.max_scale_up_rate)));
        }
        if self.max_scale_down_rate != 2.0 {
            parts.push(format!("down ÷{}", num(self.max_scale_down_rate)));
        }
        if !self.enable_scale_to_zero {
            parts.push("no scale to zero".into());
        }
        if self.scale_to_zero_grace_period != 30.0 {
            parts.push(format!("grace {} s", num(self.scale_to_zero_grace_period)));
        }
        if self.scale_to_zero_pod_retention != 0.0 {
            parts.push(format!(
                "retention {} s",
                num(self.scale_to_zero_pod_retention)
            ));
        }
        if self.signal != Signal::Concurrency {
            parts.push(self.signal.name().into());
        }
        label("Knative KPA", &parts)
    }

    fn panic_window(&self) -> f64 {
        self.stable_window * self.panic_window_percentage / 100.0
    }
}

/// Knative's linear window average (`pkg/autoscaler/aggregation/bucketing.go`
/// `TimedFloat64Buckets`, the default `linear` aggregation algorithm; the `weighted-exponential`
/// one is opt-in per revision), with 1 s buckets (`config.BucketSize`). Each bucket sums what
/// was recorded in its second; the average is over the buckets since the first write (at most a
/// window), and a window without writes empties it.
#[derive(Debug, Clone)]
struct WindowBuckets {
    buckets: Vec<f64>,
    first_write: Option<i64>,
    last_write: Option<i64>,
    total: f64,
}

impl WindowBuckets {
    fn new(window: f64) -> Self {
        let n = usize::try_from(ceil_i64(window).max(1)).unwrap_or(1);
        Self {
            buckets: vec![0.0; n],
            first_write: None,
            last_write: None,
            total: 0.0,
        }
    }

    fn len(&self) -> i64 {
        count_i64(self.buckets.len())
    }

    fn slot(&mut self, second: i64) -> Option<&mut f64> {
        let n = self.len();
        usize::try_from(second.rem_euclid(n))
            .ok()
            .and_then(|i| self.buckets.get_mut(i))
    }

    fn bucket(&self, second: i64) -> f64 {
        usize::try_from(second.rem_euclid(self.len()))
            .ok()
            .and_then(|i| self.buckets.get(i).copied())
            .unwrap_or(0.0)
    }

    /// `Record`.
    fn record(&mut self, second: i64, value: f64) {
        let n = self.len();
        if self.last_write != Some(second) {
            if let Some(last) = self.last_write
                && second + n <= last
            {
                // More than a window older than the last write: ignored.
                return;
            }
            if self.first_write.is_none_or(|first| first > second) {
                self.first_write = Some(second);
            }
            match self.last_write {
                Some(last) if second <= last => {}
                Some(last) if second - last < n => {
                    // Clear the buckets of the seconds skipped since the last write.
                    for s in last + 1..=second {
                        let old = self.bucket(s);
                        self.total -= old;
                        if let Some(b) = self.slot(s) {
                            *b = 0.0;
                        }
                    }
                    self.last_write = Some(second);
                }
                _ => {
                    // First write, or a whole window without writes: start over.
                    self.first_write = Some(second);
                    self.buckets.iter_mut().for_each(|b| *b = 0.0);
                    self.total = 0.0;
                    self.last_write = Some(second);
                }
            }
        }
        if let Some(b) = self.slot(second) {
            *b += value;
        }
        self.total += value;
    }

    /// `IsEmpty`: nothing recorded for more than a window.
    fn is_empty(&self, now: i64) -> bool {
        self.last_write.is_none_or(|last| now - last > self.len())
    }

    /// `WindowAverage` (rounded to 6 digits as upstream).
    fn average(&self, now: i64) -> f64 {
        let Some(last) = self.last_write else {
            return 0.0;
        };
        let first = self.first_write.unwrap_or(last);
        let n = self.len();
        let d = now - last;
        let (sum, buckets) = if d <= 0 {
            (self.total, (last - first + 1).min(n))
        } else if d < n {
            // Seconds after the last write are empty, and their slots still hold values from a
            // window ago: leave them out.
            let stale: f64 = (last + 1..=now).map(|s| self.bucket(s)).sum();
            (self.total - stale, (last - first + 1).min(n - d))
        } else {
            return 0.0;
        };
        let average = sum / buckets.max(1) as f64;
        (average * 1e6).round() / 1e6
    }
}

/// The PodAutoscaler's Active condition (`computeActiveCondition`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Activity {
    /// Active=Unknown: waiting for Ready pods.
    Activating,
    Active {
        since: f64,
    },
    Inactive {
        since: f64,
    },
}

/// The Knative Pod Autoscaler with the default `concurrency` metric.
///
/// Upstream: knative/serving
/// - `pkg/autoscaler/scaling/autoscaler.go` `Scale` (and `newAutoscaler`): every tick (2 s,
///   `multiscaler.go` `tickInterval`) desired stable = ceil(S / TV) and desired panic =
///   ceil(P / TV), each kept within [floor(ready / max-scale-down-rate), ceil(ready ×
///   max-scale-up-rate)] with ready = max(1, Ready pods); panic starts when desired panic /
///   ready ≥ panic threshold (200 %), is extended at every tick over the threshold, and ends
///   once a stable window has passed since the last such tick; in panic the count is the
///   highest seen (never lower). An autoscaler created over a revision with more than one pod
///   starts in panic (so a fresh KPA never scales down for its first stable window).
/// - `pkg/autoscaler/metrics/collector.go` (`collection.record`, `StableAndPanicConcurrency`)
///   and `stats_scraper.go`: every second the scraper reads the pods' average concurrency over
///   that second (queue-proxy: requests in the pod, running or queued), takes the mean over the
///   scraped Ready pods × the Ready pod count, and records it in both windows (60 s and 6 s);
///   the activator's stats (the requests it buffers when no pod can take them) are recorded in
///   the same seconds. S and P are the windows' linear averages of these per-second totals.
///   No data for a whole stable window: no decision.
/// - `pkg/reconciler/autoscaling/resources/target.go` `ResolveMetricTarget`: TV = max(0.01,
///   target × 0.7).
/// - `pkg/reconciler/autoscaling/kpa/scaler.go` `scale`, `applyBounds`, `handleScaleToZero`, and
///   `kpa.go` `computeActiveCondition`: the count is bounded by min/max scale; a desired 0 is
///   only applied once the PA was Active for a stable window (before that the count is held
///   at 1), is then marked Inactive, and after the grace period (30 s) the target goes to 0.
///
/// Simplifications: every Ready pod is scraped each second (upstream samples a subset when
/// there are many pods and scales the mean the same way); the activator is always assumed to be
/// in the path when scaling to zero (its probe succeeds); the activation timeout (progress
/// deadline + 30 s) is not modelled; a revision at zero is re-evaluated at the next 2 s tick
/// rather than poked at once by the activator's first stat.
#[derive(Debug, Clone)]
pub struct Knative {
    pub config: KnativeConfig,
    stable: WindowBuckets,
    panic: WindowBuckets,
    last_second: Option<i64>,
    started: bool,
    panic_time: Option<f64>,
    max_panic_pods: i64,
    activity: Activity,
}

impl Knative {
    pub fn new(config: KnativeConfig) -> Self {
        let stable = WindowBuckets::new(config.stable_window);
        let panic = WindowBuckets::new(config.panic_window());
        Self {
            config,
            stable,
            panic,
            last_second: None,
            started: false,
            panic_time: None,
            max_panic_pods: 0,
            activity: Activity::Activating,
        }
    }

    /// Whether the autoscaler is in panic mode.
    pub fn panicking(&self) -> bool {
        self.panic_time.is_some()
    }

    /// The revision's total for second `second`: the mean of the Ready pods scraped in that
    /// second × the Ready count, plus the activator's buffered requests. `None`: nothing to
    /// record (no pod scraped, nothing buffered).
    fn total_at(&self, view: &View<'_>, second: f64, ready: &BTreeSet<u64>) -> Option<f64> {
        let values: Vec<f64> = self
            .config
            .signal
            .avg_over(view.metrics, second, 1.0)
            .into_iter()
            .filter(|(pod, _)| ready.contains(pod))
            .map(|(_, v)| v)
            .collect();
        let pods = (!values.is_empty())
            .then(|| values.iter().sum::<f64>() / values.len() as f64 * ready.len() as f64);
        let buffered = if self.config.signal.counts_gateway() {
            view.metrics.gateway_pending(second).unwrap_or(0.0)
        } else {
            0.0
        };
        match pods {
            Some(pods) => Some(pods + buffered),
            None => (buffered > 0.0).then_some(buffered),
        }
    }

    /// The collector's per-second scrapes up to `second`.
    fn collect(&mut self, view: &View<'_>, second: i64) {
        let ready = ready_ids(view);
        let start = match self.last_second {
            Some(last) => last + 1,
            // The collector has been running since the revision was created.
            None => (second - self.stable.len() + 1).max(1),
        };
        for s in start..=second {
            if let Some(total) = self.total_at(view, s as f64, &ready) {
                self.stable.record(s, total);
                self.panic.record(s, total);
            }
        }
        if self.last_second.is_none_or(|last| second > last) {
            self.last_second = Some(second);
        }
    }

    /// `autoscaler.Scale`: the decider's desired pod count, `None` without data.
    fn scale(&mut self, now: f64, second: i64, ready: i64) -> Option<i64> {
        if self.stable.is_empty(second) {
            return None;
        }
        let config = &self.config;
        let ready = (ready as f64).max(1.0);
        let observed_stable = self.stable.average(second);
        let observed_panic = self.panic.average(second);
        let target = (config.target * config.target_utilization).max(0.01);
        let max_up = (config.max_scale_up_rate * ready).ceil();
        let max_down = (ready / config.max_scale_down_rate).floor();
        let dspc = (observed_stable / target).ceil();
        let dppc = (observed_panic / target).ceil();
        let stable_count = ceil_i64(dspc.max(max_down).min(max_up));
        let panic_count = ceil_i64(dppc.max(max_down).min(max_up));
        let over = dppc / ready >= config.panic_threshold_percentage / 100.0;
        if over {
            // Enter panic, or extend it.
            self.panic_time = Some(now);
        } else if self
            .panic_time
            .is_some_and(|since| elapsed(now, since, config.stable_window))
        {
            self.panic_time = None;
            self.max_panic_pods = 0;
        }
        let mut desired = stable_count;
        if self.panic_time.is_some() {
            desired = desired.max(panic_count);
            // No scale-down in panic: the highest count seen holds.
            if desired > self.max_panic_pods {
                self.max_panic_pods = desired;
            }
            desired = self.max_panic_pods;
        }
        Some(desired)
    }

    /// `scaler.scale` + `handleScaleToZero` + `computeActiveCondition`: the count to apply, if
    /// any.
    fn reconcile(&mut self, now: f64, desired: Option<i64>, ready: i64) -> Option<i64> {
        let Some(desired) = desired else {
            self.update_activity(now, -1, ready);
            return None;
        };
        let min = i64::from(self.config.bounds.min);
        let max = i64::from(self.config.bounds.max);
        let mut desired = desired.max(min);
        if max != 0 {
            desired = desired.min(max);
        }
        let (want, apply) = self.scale_to_zero(now, desired);
        self.update_activity(now, want, ready);
        apply.then_some(want)
    }

    /// `handleScaleToZero`: (want, apply).
    fn scale_to_zero(&self, now: f64, desired: i64) -> (i64, bool) {
        if desired != 0 {
            return (desired, true);
        }
        if !self.config.enable_scale_to_zero {
            return (1, true);
        }
        match self.activity {
            // Activation timeout not modelled: wait.
            Activity::Activating => (-1, false),
            Activity::Active { since } => {
                if elapsed(now, since, self.config.stable_window) {
                    // Mark the PA inactive; the target keeps its count for now.
                    (0, false)
                } else {
                    // Scale down to at most 1 for the rest of the stable window.
                    (1, true)
                }
            }
            Activity::Inactive { since } => {
                let wait = self
                    .config
                    .scale_to_zero_grace_period
                    .max(self.config.scale_to_zero_pod_retention);
                (0, elapsed(now, since, wait))
            }
        }
    }

    fn update_activity(&mut self, now: f64, want: i64, ready: i64) {
        let min_ready = i64::from(self.config.bounds.min).max(1);
        let inactive = matches!(self.activity, Activity::Inactive { .. });
        if want == 0 {
            if !inactive {
                self.activity = Activity::Inactive { since: now };
            }
        } else if ready < min_ready {
            if want > 0 || !inactive {
                self.activity = Activity::Activating;
            }
        } else if (want > 0 || !inactive) && !matches!(self.activity, Activity::Active { .. }) {
            self.activity = Activity::Active { since: now };
        }
    }
}

impl Policy for Knative {
    fn label(&self) -> String {
        self.config.label()
    }

    fn period(&self) -> f64 {
        2.0
    }

    fn scrape_interval(&self) -> f64 {
        1.0
    }

    fn decide(&mut self, view: &View<'_>) -> u32 {
        let now = view.now;
        let second = floor_i64(now);
        let ready = i64::from(view.ready());
        if !self.started {
            // newAutoscaler: over more than one pod, start in panic holding the current count.
            self.started = true;
            if ready > 1 {
                self.panic_time = Some(now);
                self.max_panic_pods = ready;
            }
        }
        self.collect(view, second);
        let desired = self.scale(now, second, ready);
        let applied = self.reconcile(now, desired, ready);
        self.config
            .bounds
            .clamp(applied.unwrap_or(i64::from(view.spec)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::peers::testkit::Fleet;

    /// Target 10 → TV 7 per pod.
    fn kpa(min: u32) -> Knative {
        let mut config = KnativeConfig::new(Bounds { min, max: 100 });
        config.target = 10.0;
        Knative::new(config)
    }

    /// Every Ready pod scraped each second in (from, to] with `load` in flight.
    fn load(fleet: &mut Fleet, from: u32, to: u32, load: f64) {
        for s in from + 1..=to {
            fleet.sample_all(f64::from(s) - 0.5, load, 0.0);
        }
    }

    #[test]
    fn the_linear_window_averages_per_second_totals() {
        let mut w = WindowBuckets::new(6.0);
        for s in 1..=6 {
            w.record(s, s as f64);
        }
        assert_eq!(w.average(6), 3.5);
        // Two seconds without writes: averaged over the 4 remaining buckets.
        assert_eq!(w.average(8), (3.0 + 4.0 + 5.0 + 6.0) / 4.0);
        assert!(w.is_empty(13));
        assert_eq!(w.average(13), 0.0);
        // A partial window averages over the seconds since the first write.
        let mut w = WindowBuckets::new(60.0);
        w.record(100, 10.0);
        w.record(101, 20.0);
        assert_eq!(w.average(101), 15.0);
    }

    #[test]
    fn panic_on_a_burst_holds_the_max_and_ends_a_stable_window_later() {
        let mut fleet = Fleet::with_ready(1);
        let mut kpa = kpa(1);
        assert_eq!(kpa.label(), "Knative KPA (target 10)");
        // 7 in flight on the one pod: exactly on target.
        load(&mut fleet, 0, 100, 7.0);
        for t in (2..=100).step_by(2) {
            assert_eq!(kpa.decide(&fleet.view(f64::from(t), 1)), 1, "at {t}");
            assert!(!kpa.panicking());
        }
        // A burst: 35 in flight (5 pods' worth) for 10 s.
        load(&mut fleet, 100, 110, 35.0);
        let mut highest = 0;
        for t in (102..=110).step_by(2) {
            highest = highest.max(kpa.decide(&fleet.view(f64::from(t), 1)));
        }
        assert!(kpa.panicking());
        assert_eq!(highest, 5);
        // The load is gone; the panic window stays over the threshold until 114 s (2 of its 6
        // seconds at 35: ceil(11.67 / 7) = 2 ≥ 2 × 1 Ready pod), and panic holds 5 until 60 s
        // after that, although the stable average alone would scale down.
        load(&mut fleet, 110, 200, 0.0);
        for t in (112..=172).step_by(2) {
            assert_eq!(kpa.decide(&fleet.view(f64::from(t), 1)), 5, "at {t}");
            assert!(kpa.panicking(), "at {t}");
        }
        let after = kpa.decide(&fleet.view(174.0, 1));
        assert!(!kpa.panicking());
        // Out of panic: the stable average of the last 60 s is 0; min 1.
        assert_eq!(after, 1);
    }

    #[test]
    fn starts_in_panic_over_several_pods_then_halves_at_most() {
        let mut fleet = Fleet::with_ready(10);
        let mut kpa = kpa(1);
        load(&mut fleet, 0, 200, 0.0);
        // A new autoscaler over 10 pods starts in panic holding 10: no scale-down for 60 s.
        for t in (2..=60).step_by(2) {
            assert_eq!(kpa.decide(&fleet.view(f64::from(t), 10)), 10, "at {t}");
        }
        // Then max-scale-down-rate 2: from 10 Ready pods to no fewer than 5 at once.
        assert_eq!(kpa.decide(&fleet.view(62.0, 10)), 5);
        assert!(!kpa.panicking());
    }

    #[test]
    fn scales_to_zero_after_a_stable_window_active_and_the_grace_period_then_wakes() {
        let mut fleet = Fleet::with_ready(1);
        let mut kpa = kpa(0);
        load(&mut fleet, 0, 120, 0.0);
        let mut zero_at = None;
        for t in (2..=120).step_by(2) {
            let replicas = kpa.decide(&fleet.view(f64::from(t), 1));
            if replicas == 0 {
                zero_at = Some(t);
                break;
            }
            // Held at 1 meanwhile.
            assert_eq!(replicas, 1, "at {t}");
        }
        // Active from the first tick (2 s); desired 0 from the start: marked inactive at 62 s
        // (a stable window active), scaled to 0 after the 30 s grace.
        assert_eq!(zero_at, Some(92));
        // At zero: requests buffered at the activator wake the revision.
        fleet.remove(1);
        fleet.gateway(95.0, 0.0);
        assert_eq!(kpa.decide(&fleet.view(96.0, 0)), 0);
        fleet.gateway(97.5, 3.0);
        assert_eq!(kpa.decide(&fleet.view(98.0, 0)), 1);
    }
}
