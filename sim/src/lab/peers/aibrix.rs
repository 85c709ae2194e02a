//! AIBrix's PodAutoscaler: the APA and KPA strategies, as documented and as shipped.
//!
//! Upstream: vllm-project/aibrix, `pkg/controller/podautoscaler/`:
//! - `podautoscaler_controller.go`: every PodAutoscaler is re-enqueued every 10 s
//!   (`DefaultResyncInterval`); `computeScaleDecision` (disabled at 0 with min > 0, out-of-bounds
//!   counts corrected first, then the algorithm, `stabilizeRecommendation`, and the min/max
//!   clamp); current replicas = the scale subresource's spec.replicas.
//! - `autoscaler.go` `executeScalingPipeline`, `metrics/collector.go` `collectFromPods`,
//!   `metrics/client.go` `UpdateMetrics` / `GetMetricValue`, `types/metrics.go` `TimeWindow`:
//!   each reconcile fetches the metric from every pod directly (pods that do not answer, such as
//!   one loading its model, are skipped; none answering is an error and nothing changes),
//!   records the *mean over pods* once in a stable window (`observeWindowSeconds`, 180 s) and a
//!   panic window (`panicWindowSeconds`, 60 s), 1 s buckets, and uses the windows' plain
//!   averages S and P.
//! - `context/context.go` `NewBaseScalingContext`: max scale-up rate 2, max scale-down rate 2,
//!   up/down fluctuation tolerance 0.1, scale-up cooldown 0 s, scale-down cooldown 300 s, panic
//!   threshold 2.0, no scale to zero (the annotations `autoscaling.aibrix.ai/...` override them;
//!   the docs' table in `docs/source/features/autoscaling/metric-based-autoscaling.rst` lists the
//!   same defaults).
//! - `algorithm/apa.go` `computeTargetReplicas` and `algorithm/kpa.go` `computeTargetReplicas`,
//!   `shouldEnterPanicMode`.
//!
//! What the notes claimed, checked against the source (snapshot of 2026-08):
//! - The KPA divides the per-pod mean by the per-pod target without multiplying by the pod
//!   count: confirmed (`dspc = ceil(observedStableValue / targetValue)` where the observed value
//!   is the mean over pods recorded by `UpdateMetrics`). The APA does multiply (`ceil(N × S / t)`).
//! - The scale-down cooldown takes the minimum recommendation of the window, so it never delays
//!   a scale-down (it can only deepen one): confirmed (`stabilizeRecommendation` selects the min
//!   when the recommendation is below the current count and the max when above), while the docs
//!   call it a "stabilization window for scale-down recommendations" like the HPA's.
//! - Also found: the KPA's panic state does not persist (the scaling context is rebuilt at every
//!   reconcile and `GetMaxPanicPods` always returns 0, `SetMaxPanicPods` does nothing), so the
//!   "we do not scale down while in panic mode" of its own comments never holds; panic is simply
//!   `P / S > 2` (or S ≤ 0) at each reconcile, and then the count is max(stable, panic).
//! - The windows are 180 s stable / 60 s panic (not 60 s stable): `metrics/client.go`
//!   `DefaultStableWindowDuration`, `DefaultPanicWindowDuration`, and the docs agree.
//!
//! With `shipped: false` the lab models the documented intent: the KPA scales the per-pod mean
//! by the current count (as the APA does), the scale-down cooldown holds the highest
//! recommendation of its window and the scale-up one the lowest (the HPA's rule, which the docs
//! compare it to), and the KPA's panic holds its highest count until a stable window has passed
//! without the condition (Knative's rule, which its comments describe). For that held panic the
//! condition is P / S > 2 with 0 / 0 counting as no panic (the shipped S ≤ 0 test would, with
//! a held count, pin an idle fleet where it stands).

use crate::lab::policy::{Bounds, Policy, View};

use super::hpa::Stabilizer;
use super::{
    REFERENCE_TARGET, Signal, ceil_i64, elapsed, floor_i64, label, num, ready_ids, within_window,
};

/// The settings shared by [`AibrixApa`] and [`AibrixKpa`].
#[derive(Debug, Clone, PartialEq)]
pub struct AibrixConfig {
    /// `spec.minReplicas` / `spec.maxReplicas`.
    pub bounds: Bounds,
    /// The metric source's `targetValue` (per pod).
    pub target: f64,
    pub signal: Signal,
    /// `max-scale-up-rate`.
    pub max_scale_up_rate: f64,
    /// `max-scale-down-rate`.
    pub max_scale_down_rate: f64,
    /// `scale-up-tolerance`.
    pub up_fluctuation_tolerance: f64,
    /// `scale-down-tolerance`.
    pub down_fluctuation_tolerance: f64,
    /// `scale-up-cooldown-window`.
    pub scale_up_cooldown_window: f64,
    /// `scale-down-cooldown-window`.
    pub scale_down_cooldown_window: f64,
    /// `panic-threshold` (KPA).
    pub panic_threshold: f64,
    /// `spec.observeWindowSeconds`.
    pub stable_window: f64,
    /// `spec.panicWindowSeconds`.
    pub panic_window: f64,
    /// The controller's resync interval.
    pub sync_period: f64,
    /// The shipped code (`true`) or the documented intent (`false`, the default).
    pub shipped: bool,
}

impl AibrixConfig {
    /// AIBrix's defaults with the lab's reference target, as documented.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            target: REFERENCE_TARGET,
            signal: Signal::Concurrency,
            max_scale_up_rate: 2.0,
            max_scale_down_rate: 2.0,
            up_fluctuation_tolerance: 0.1,
            down_fluctuation_tolerance: 0.1,
            scale_up_cooldown_window: 0.0,
            scale_down_cooldown_window: 300.0,
            panic_threshold: 2.0,
            stable_window: 180.0,
            panic_window: 60.0,
            sync_period: 10.0,
            shipped: false,
        }
    }

    /// The same as shipped.
    pub fn shipped(bounds: Bounds) -> Self {
        Self {
            shipped: true,
            ..Self::new(bounds)
        }
    }

    fn label(&self, name: &str, kpa: bool) -> String {
        let mut parts = Vec::new();
        // The code as shipped is what users run: it is the plain name; the docs' intent, where
        // the code differs from them, is the variant.
        if !self.shipped {
            parts.push("documented intent".to_string());
        }
        if self.target != REFERENCE_TARGET {
            parts.push(format!("target {}", num(self.target)));
        }
        if self.up_fluctuation_tolerance != 0.1 || self.down_fluctuation_tolerance != 0.1 {
            parts.push(format!(
                "tolerance -{}/+{}",
                num(self.down_fluctuation_tolerance),
                num(self.up_fluctuation_tolerance)
            ));
        }
        if self.max_scale_up_rate != 2.0 {
            parts.push(format!("up ×{}", num(self.max_scale_up_rate)));
        }
        if self.max_scale_down_rate != 2.0 {
            parts.push(format!("down ÷{}", num(self.max_scale_down_rate)));
        }
        if self.scale_up_cooldown_window != 0.0 {
            parts.push(format!(
                "up cooldown {} s",
                num(self.scale_up_cooldown_window)
            ));
        }
        if self.scale_down_cooldown_window != 300.0 {
            parts.push(format!(
                "down cooldown {} s",
                num(self.scale_down_cooldown_window)
            ));
        }
        if self.stable_window != 180.0 {
            parts.push(format!("window {} s", num(self.stable_window)));
        }
        if kpa && self.panic_window != 60.0 {
            parts.push(format!("panic window {} s", num(self.panic_window)));
        }
        if kpa && self.panic_threshold != 2.0 {
            parts.push(format!("panic ×{}", num(self.panic_threshold)));
        }
        if self.signal != Signal::Concurrency {
            parts.push(self.signal.name().into());
        }
        if self.sync_period != 10.0 {
            parts.push(format!("sync {} s", num(self.sync_period)));
        }
        label(name, &parts)
    }
}

/// AIBrix's `TimeWindow`: one value per 1 s bucket, buckets older than the window dropped at
/// each record, and the plain average of what is left.
#[derive(Debug, Clone)]
struct SampleWindow {
    duration: f64,
    points: std::collections::BTreeMap<i64, f64>,
}

impl SampleWindow {
    fn new(duration: f64) -> Self {
        Self {
            duration,
            points: std::collections::BTreeMap::new(),
        }
    }

    fn record(&mut self, now: f64, value: f64) {
        self.points.insert(floor_i64(now), value);
        let cutoff = floor_i64(now - self.duration);
        self.points.retain(|bucket, _| *bucket >= cutoff);
    }

    fn average(&self) -> f64 {
        if self.points.is_empty() {
            0.0
        } else {
            self.points.values().sum::<f64>() / self.points.len() as f64
        }
    }
}

/// The scale cooldown (`stabilizeRecommendation` of the PodAutoscaler controller).
#[derive(Debug, Clone)]
enum Cooldown {
    /// As shipped: the history of recommendations, the highest of the scale-up window when
    /// scaling up and the *lowest* of the scale-down window when scaling down.
    Shipped(Vec<(f64, i64)>),
    /// As documented: the HPA's stabilization.
    Intent(Stabilizer),
}

impl Cooldown {
    fn new(shipped: bool) -> Self {
        if shipped {
            Cooldown::Shipped(Vec::new())
        } else {
            Cooldown::Intent(Stabilizer::new())
        }
    }

    fn stabilize(
        &mut self,
        now: f64,
        recommendation: i64,
        current: i64,
        up_window: f64,
        down_window: f64,
    ) -> i64 {
        match self {
            Cooldown::Intent(stabilizer) => {
                stabilizer.between(now, current, recommendation, up_window, down_window)
            }
            Cooldown::Shipped(history) => {
                history.push((now, recommendation));
                let longest = up_window.max(down_window);
                history.retain(|(at, _)| within_window(now, *at, longest));
                if recommendation == current {
                    return current;
                }
                let (window, highest) = if recommendation > current {
                    (up_window, true)
                } else {
                    (down_window, false)
                };
                let inside = history
                    .iter()
                    .filter(|(at, _)| within_window(now, *at, window))
                    .map(|(_, r)| *r);
                let picked = if highest { inside.max() } else { inside.min() };
                picked.unwrap_or(recommendation)
            }
        }
    }
}

/// What the two strategies share: the metric windows, the cooldown and the reconcile.
#[derive(Debug, Clone)]
struct Reconciler {
    stable: SampleWindow,
    panic: SampleWindow,
    cooldown: Cooldown,
}

/// The observed stable and panic values at a reconcile.
#[derive(Debug, Clone, Copy)]
struct Observed {
    stable: f64,
    panic: f64,
}

impl Reconciler {
    fn new(config: &AibrixConfig) -> Self {
        Self {
            stable: SampleWindow::new(config.stable_window),
            panic: SampleWindow::new(config.panic_window),
            cooldown: Cooldown::new(config.shipped),
        }
    }

    /// `computeScaleDecision` around an algorithm that maps (current, observed) to a count.
    fn decide(
        &mut self,
        config: &AibrixConfig,
        view: &View<'_>,
        algorithm: impl FnOnce(i64, Observed) -> i64,
    ) -> u32 {
        let now = view.now;
        let bounds = config.bounds;
        let current = i64::from(view.spec);
        let min = i64::from(bounds.min);
        let max = i64::from(bounds.max);
        if current == 0 && min != 0 {
            return view.spec;
        }
        if current > max || current < min {
            return bounds.clamp(current);
        }
        // Fetch from every pod; only Ready pods answer.
        let ready = ready_ids(view);
        let values: Vec<f64> = config
            .signal
            .latest(view.metrics, now)
            .into_iter()
            .filter(|(pod, _)| ready.contains(pod))
            .map(|(_, v)| v)
            .collect();
        if values.is_empty() {
            if !view.pods.is_empty() {
                // "failed to collect metrics from all pods": no decision.
                return view.spec;
            }
        } else {
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            self.stable.record(now, mean);
            self.panic.record(now, mean);
        }
        let observed = Observed {
            stable: self.stable.average(),
            panic: self.panic.average(),
        };
        // applyConstraints, then the cooldown, then the bounds again.
        let recommendation = algorithm(current, observed).clamp(min, max);
        let stabilized = self.cooldown.stabilize(
            now,
            recommendation,
            current,
            config.scale_up_cooldown_window,
            config.scale_down_cooldown_window,
        );
        bounds.clamp(stabilized)
    }
}

/// APA `computeTargetReplicas`: outside the tolerance band, ceil(N × S / target), at most
/// ceil(N × up rate) and at least floor(N / down rate); inside it, N.
pub fn apa_replicas(current: i64, stable: f64, config: &AibrixConfig) -> i64 {
    if config.target <= 0.0 {
        return current;
    }
    let n = current as f64;
    let ratio = stable / config.target;
    if ratio > 1.0 + config.up_fluctuation_tolerance {
        let max_up = ceil_i64(config.max_scale_up_rate * n);
        ceil_i64(n * ratio).min(max_up)
    } else if ratio < 1.0 - config.down_fluctuation_tolerance {
        let max_down = floor_i64(n / config.max_scale_down_rate);
        ceil_i64(n * ratio).max(max_down)
    } else {
        current
    }
}

/// AIBrix's Advanced Pod Autoscaler (APA): a tolerance band around the target and per-step
/// rate limits on the stable window's per-pod mean.
///
/// Follows vllm-project/aibrix `pkg/controller/podautoscaler/algorithm/apa.go`
/// `ComputeRecommendation` / `computeTargetReplicas` (see the module doc for the controller and
/// metric pipeline). The shipped and documented variants differ only in the scale-down cooldown.
#[derive(Debug, Clone)]
pub struct AibrixApa {
    pub config: AibrixConfig,
    reconciler: Reconciler,
}

impl AibrixApa {
    pub fn new(config: AibrixConfig) -> Self {
        let reconciler = Reconciler::new(&config);
        Self { config, reconciler }
    }
}

impl Policy for AibrixApa {
    fn label(&self) -> String {
        self.config.label("AIBrix APA", false)
    }

    fn period(&self) -> f64 {
        self.config.sync_period
    }

    fn scrape_interval(&self) -> f64 {
        // AIBrix reads each pod's /metrics at the reconcile: the freshest value there is.
        1.0
    }

    fn decide(&mut self, view: &View<'_>) -> u32 {
        let config = &self.config;
        self.reconciler.decide(config, view, |current, observed| {
            apa_replicas(current, observed.stable, config)
        })
    }
}

/// The KPA's stable and panic counts for `current` pods, before the panic decision.
pub fn kpa_counts(current: i64, stable: f64, panic: f64, config: &AibrixConfig) -> (i64, i64) {
    let n = (current as f64).max(0.0);
    if config.target <= 0.0 {
        return (current, current);
    }
    let max_up = (config.max_scale_up_rate * n).ceil().max(1.0);
    let max_down = (n / config.max_scale_down_rate).floor();
    let up = config.target * (1.0 + config.up_fluctuation_tolerance);
    let down = config.target * (1.0 - config.down_fluctuation_tolerance);
    // As shipped the per-pod mean is compared with the per-pod target and divided by it as if
    // it were the fleet's total; the intent scales it by the pod count, as the APA does.
    let scale = if config.shipped { 1.0 } else { n };
    let desired = |value: f64| {
        if value > up || value < down {
            (value * scale / config.target).ceil()
        } else {
            n
        }
    };
    let bounded = |count: f64| ceil_i64(count.max(max_down).min(max_up));
    (bounded(desired(stable)), bounded(desired(panic)))
}

/// AIBrix's KPA: Knative-style stable and panic windows on the per-pod mean.
///
/// Follows vllm-project/aibrix `pkg/controller/podautoscaler/algorithm/kpa.go`
/// `ComputeRecommendation`, `shouldEnterPanicMode`, `computeTargetReplicas` (see the module doc
/// for the controller, the metric pipeline, and the shipped / intended differences).
#[derive(Debug, Clone)]
pub struct AibrixKpa {
    pub config: AibrixConfig,
    reconciler: Reconciler,
    panic: PanicMode,
}

/// The KPA's panic mode. As shipped it is recomputed at every reconcile; as intended it holds.
#[derive(Debug, Clone, Default)]
struct PanicMode {
    /// The last reconcile in panic (intent: over the panic condition).
    since: Option<f64>,
    /// Intent only: the count held in panic.
    max_pods: i64,
}

impl PanicMode {
    fn recommend(
        &mut self,
        config: &AibrixConfig,
        now: f64,
        current: i64,
        observed: Observed,
    ) -> i64 {
        let (stable_count, panic_count) =
            kpa_counts(current, observed.stable, observed.panic, config);
        if config.shipped {
            // shouldEnterPanicMode, afresh at every reconcile.
            let panic =
                observed.stable <= 0.0 || observed.panic / observed.stable > config.panic_threshold;
            self.since = panic.then_some(now);
            // GetMaxPanicPods is always 0: in panic the count is just the larger of the two.
            return if panic {
                stable_count.max(panic_count)
            } else {
                stable_count
            };
        }
        let over = if observed.stable > 0.0 {
            observed.panic / observed.stable > config.panic_threshold
        } else {
            observed.panic > 0.0
        };
        if over {
            self.since = Some(now);
        } else if self
            .since
            .is_some_and(|since| elapsed(now, since, config.stable_window))
        {
            self.since = None;
            self.max_pods = 0;
        }
        if self.since.is_none() {
            return stable_count;
        }
        // No scale-down in panic: the highest count seen holds.
        self.max_pods = self.max_pods.max(stable_count.max(panic_count));
        self.max_pods
    }
}

impl AibrixKpa {
    pub fn new(config: AibrixConfig) -> Self {
        let reconciler = Reconciler::new(&config);
        Self {
            config,
            reconciler,
            panic: PanicMode::default(),
        }
    }

    /// Whether the last reconcile was in panic mode.
    pub fn panicking(&self) -> bool {
        self.panic.since.is_some()
    }

    #[cfg(test)]
    fn recommend(&mut self, now: f64, current: i64, observed: Observed) -> i64 {
        self.panic.recommend(&self.config, now, current, observed)
    }
}

impl Policy for AibrixKpa {
    fn label(&self) -> String {
        self.config.label("AIBrix KPA", true)
    }

    fn period(&self) -> f64 {
        self.config.sync_period
    }

    fn scrape_interval(&self) -> f64 {
        1.0
    }

    fn decide(&mut self, view: &View<'_>) -> u32 {
        let Self {
            config,
            reconciler,
            panic,
        } = self;
        let now = view.now;
        reconciler.decide(config, view, |current, observed| {
            panic.recommend(config, now, current, observed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::peers::testkit::Fleet;

    fn bounds() -> Bounds {
        Bounds { min: 1, max: 100 }
    }

    #[test]
    fn apa_keeps_the_count_inside_the_band_and_limits_each_step() {
        let config = AibrixConfig::new(bounds());
        // 4 pods, target 16: 17.6 is exactly +10 % → kept (the band is strict outside).
        assert_eq!(apa_replicas(4, 17.6, &config), 4);
        assert_eq!(apa_replicas(4, 14.4, &config), 4);
        // 18: ratio 1.125 → ceil(4.5) = 5.
        assert_eq!(apa_replicas(4, 18.0, &config), 5);
        // 64: ratio 4 → 16, limited to ×2 = 8.
        assert_eq!(apa_replicas(4, 64.0, &config), 8);
        // 8: ratio 0.5 → 2 = 4 ÷ 2.
        assert_eq!(apa_replicas(4, 8.0, &config), 2);
        // 2: ratio 0.125 → 1, limited to ÷2 = 2.
        assert_eq!(apa_replicas(4, 2.0, &config), 2);
        // The policy: 2 Ready pods at 64 each → 4.
        let mut fleet = Fleet::with_ready(2);
        fleet.sample_all(9.5, 64.0, 0.5);
        let mut apa = AibrixApa::new(config);
        assert_eq!(apa.label(), "AIBrix APA (documented intent)");
        assert_eq!(apa.decide(&fleet.view(10.0, 2)), 4);
    }

    #[test]
    fn the_shipped_scale_down_cooldown_takes_the_lowest_recommendation() {
        let mut intent = Cooldown::new(false);
        let mut shipped = Cooldown::new(true);
        // At 8 pods: a recommendation of 8, then the load falls and 4 is recommended.
        assert_eq!(intent.stabilize(10.0, 8, 8, 0.0, 300.0), 8);
        assert_eq!(shipped.stabilize(10.0, 8, 8, 0.0, 300.0), 8);
        // Intent: the window's highest (8) holds the count. Shipped: the lowest → 4 at once.
        assert_eq!(intent.stabilize(20.0, 4, 8, 0.0, 300.0), 8);
        assert_eq!(shipped.stabilize(20.0, 4, 8, 0.0, 300.0), 4);
        // Shipped, now at 4: a rise to 6 goes through (no scale-up window) ...
        assert_eq!(shipped.stabilize(30.0, 6, 4, 0.0, 300.0), 6);
        // ... and a slight fall to 5 drops to the window's lowest, 4, below the recommendation.
        assert_eq!(shipped.stabilize(40.0, 5, 6, 0.0, 300.0), 4);
        // Intent: the 8 leaves the window after 300 s.
        assert_eq!(intent.stabilize(300.0, 4, 8, 0.0, 300.0), 8);
        assert_eq!(intent.stabilize(320.0, 4, 8, 0.0, 300.0), 4);
    }

    #[test]
    fn the_shipped_kpa_forgets_the_pod_count() {
        let intent = AibrixConfig::new(bounds());
        let shipped = AibrixConfig::shipped(bounds());
        // 4 pods at 32 per pod on a target of 16: twice the target.
        assert_eq!(kpa_counts(4, 32.0, 32.0, &intent), (8, 8));
        // As shipped: ceil(32 / 16) = 2, a scale-down under a 2× overload.
        assert_eq!(kpa_counts(4, 32.0, 32.0, &shipped), (2, 2));
        // Inside the band both keep the count.
        assert_eq!(kpa_counts(4, 17.0, 17.0, &intent), (4, 4));
        assert_eq!(kpa_counts(4, 17.0, 17.0, &shipped), (4, 4));
        let kpa = AibrixKpa::new(shipped);
        assert_eq!(kpa.label(), "AIBrix KPA");
    }

    #[test]
    fn the_intended_kpa_holds_its_panic_count_and_the_shipped_one_does_not() {
        let mut intent = AibrixKpa::new(AibrixConfig::new(bounds()));
        let mut shipped = AibrixKpa::new(AibrixConfig::shipped(bounds()));
        let calm = Observed {
            stable: 16.0,
            panic: 16.0,
        };
        let burst = Observed {
            stable: 16.0,
            panic: 40.0,
        };
        let after = Observed {
            stable: 10.0,
            panic: 10.0,
        };
        assert_eq!(intent.recommend(10.0, 4, calm), 4);
        // P / S = 2.5 > 2: panic; ceil(40 × 4 / 16) = 10 → limited to ×2 = 8.
        assert_eq!(intent.recommend(20.0, 4, burst), 8);
        assert!(intent.panicking());
        // Calm again, below target: intent holds 8 for the stable window (180 s).
        assert_eq!(intent.recommend(30.0, 8, after), 8);
        assert_eq!(intent.recommend(190.0, 8, after), 8);
        assert_eq!(intent.recommend(200.0, 8, after), 5);
        assert!(!intent.panicking());
        // Shipped: P / S = 2.5 → panic, but ceil(40 / 16) = 3 (not × 4) is below the stable
        // count (S in the band: keep 4), so the burst changes nothing.
        assert_eq!(shipped.recommend(20.0, 4, burst), 4);
        // Right after, no panic and no hold: ceil(10 / 16) = 1, limited to ÷2 = 4.
        assert_eq!(shipped.recommend(30.0, 8, after), 4);
    }
}
