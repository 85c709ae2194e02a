//! The peers' control laws, each behind [`crate::lab::policy::Policy`].
//!
//! Every peer here follows its upstream source (each struct's doc comment names the repository,
//! files and functions): the same rules, the same defaults, the same cadence, and the same metric
//! pipeline as far as the lab can show it. Where a peer's shipped code and its documented intent
//! differ, both are offered (a `shipped` flag). Where the lab's notes and the source disagree, the
//! source wins and a comment says so.
//!
//! - [`hpa`]: the Kubernetes HPA v2 on a Pods metric, and the HPA's behaviour core
//!   (tolerance, stabilization, rate limits) that KEDA and the WVA reuse.
//! - [`keda`]: a KEDA ScaledObject with a Prometheus trigger (its own activation loop on top of
//!   an HPA with an External AverageValue metric).
//! - [`knative`]: the Knative Pod Autoscaler (stable and panic windows, scale to zero).
//! - [`aibrix`]: the AIBrix APA and KPA, as documented and as shipped.
//! - [`wva`]: the llm-d workload-variant-autoscaler's V1 saturation analyzer driving its HPA.
//!
//! Common conventions: time is seconds since the run started; the per-pod signal is selected by
//! [`Signal`] (default: concurrency = running + waiting); configs are plain structs whose
//! `new(bounds)` gives the upstream defaults, with every field public so a runner can sweep it.

use std::collections::{BTreeMap, BTreeSet};

use crate::lab::metrics::{Gauge, OverTime, Scrapes};
use crate::lab::policy::View;

pub mod aibrix;
pub mod hpa;
pub mod keda;
pub mod knative;
pub mod wva;

pub use aibrix::{AibrixApa, AibrixConfig, AibrixKpa};
pub use hpa::{
    Behavior, Hpa, HpaConfig, HpaController, PolicyKind, ScalingPolicy, ScalingRules, SelectPolicy,
    Tolerances,
};
pub use keda::{Keda, KedaConfig};
pub use knative::{Knative, KnativeConfig};
pub use wva::{Wva, WvaConfig};

/// The per-pod target the lab uses when a config does not say otherwise (requests in flight per
/// pod). Upstream has no default for a custom-metric target (Knative's generic 100 concurrent
/// requests is meant for HTTP apps, not vLLM); labels omit the target when it is this one.
pub const REFERENCE_TARGET: f64 = 16.0;

/// Slack when comparing a time span with a period or a window. Real controllers never run at
/// exact multiples of their period (each sync lands a few milliseconds late), so a record made
/// exactly one period or one window ago has always expired by the time it is looked at; the lab
/// runs on exact float times and reproduces that with this slack.
pub(crate) const EPS: f64 = 1e-3;

/// `duration` has passed since `since` (see [`EPS`]).
pub(crate) fn elapsed(now: f64, since: f64, duration: f64) -> bool {
    now - since >= duration - EPS
}

/// A record made at `at` is still inside a window of `window` seconds ending at `now` (the
/// upstream `timestamp.After(now - window)`, see [`EPS`]).
pub(crate) fn within_window(now: f64, at: f64, window: f64) -> bool {
    now - at < window - EPS
}

/// The per-pod signal a ratio peer scales on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Signal {
    /// Requests in flight on the pod: `vllm:num_requests_running + vllm:num_requests_waiting`
    /// (the two gauges of the same scrape summed). The lab's documented setup.
    #[default]
    Concurrency,
    /// `vllm:kv_cache_usage_perc` (0 to 1).
    KvUsage,
    /// `vllm:num_requests_waiting`.
    Waiting,
}

impl Signal {
    /// A short name for labels.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Concurrency => "concurrency",
            Signal::KvUsage => "KV",
            Signal::Waiting => "waiting",
        }
    }

    /// Whether requests held at the gateway (no pod could take them) add to a fleet-wide sum of
    /// this signal: they are waiting requests, so yes for concurrency and waiting, not for KV.
    pub fn counts_gateway(self) -> bool {
        !matches!(self, Signal::KvUsage)
    }

    /// The instant vector of the signal at `now` (each series' newest scrape in the look-back).
    pub fn latest(self, metrics: &Scrapes, now: f64) -> Vec<(u64, f64)> {
        match self {
            Signal::Concurrency => sum_series(
                metrics.latest(now, Gauge::Running),
                metrics.latest(now, Gauge::Waiting),
            ),
            Signal::KvUsage => metrics.latest(now, Gauge::KvUsage),
            Signal::Waiting => metrics.latest(now, Gauge::Waiting),
        }
    }

    /// `avg_over_time(signal[window])` at `now`, per pod with a sample in the range (the average
    /// is linear, so running + waiting averages to the sum of the two averages).
    pub fn avg_over(self, metrics: &Scrapes, now: f64, window: f64) -> Vec<(u64, f64)> {
        let fold = |gauge| metrics.over_time(now, gauge, window, OverTime::Avg);
        match self {
            Signal::Concurrency => sum_series(fold(Gauge::Running), fold(Gauge::Waiting)),
            Signal::KvUsage => fold(Gauge::KvUsage),
            Signal::Waiting => fold(Gauge::Waiting),
        }
    }
}

/// Two per-pod vectors added pod by pod (pods present in both; both come from the same scrapes).
fn sum_series(a: Vec<(u64, f64)>, b: Vec<(u64, f64)>) -> Vec<(u64, f64)> {
    let b: BTreeMap<u64, f64> = b.into_iter().collect();
    a.into_iter()
        .filter_map(|(pod, x)| b.get(&pod).map(|y| (pod, x + y)))
        .collect()
}

/// The ids of the view's pods (starting and Ready).
pub(crate) fn pod_ids(view: &View<'_>) -> BTreeSet<u64> {
    view.pods.iter().map(|p| p.id).collect()
}

/// The ids of the view's Ready pods.
pub(crate) fn ready_ids(view: &View<'_>) -> BTreeSet<u64> {
    view.pods
        .iter()
        .filter(|p| p.is_ready())
        .map(|p| p.id)
        .collect()
}

/// `ceil(x)` as an integer, saturating (NaN gives 0), as Go's `int32(math.Ceil(x))` is meant.
pub(crate) fn ceil_i64(x: f64) -> i64 {
    // `as` from f64 to i64 saturates at the bounds and maps NaN to 0.
    x.ceil() as i64
}

/// `floor(x)` as an integer, saturating (NaN gives 0).
pub(crate) fn floor_i64(x: f64) -> i64 {
    x.floor() as i64
}

/// Go's `int32(x)` for a non-negative float: truncation toward zero, saturating.
pub(crate) fn trunc_i64(x: f64) -> i64 {
    x.trunc() as i64
}

/// A count as an integer.
pub(crate) fn count_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A number for a label: integers without a decimal point.
pub(crate) fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e9 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// `name` alone, or `name (part, part)` when some setting differs from the default.
pub(crate) fn label(name: &str, parts: &[String]) -> String {
    if parts.is_empty() {
        name.to_string()
    } else {
        format!("{name} ({})", parts.join(", "))
    }
}

/// Builds views and scrapes for the peers' unit tests.
#[cfg(test)]
pub(crate) mod testkit {
    use crate::lab::metrics::{PodSample, Scrapes};
    use crate::lab::policy::{PodState, View};

    /// A fleet as a policy would see it.
    #[derive(Debug, Default)]
    pub struct Fleet {
        pub pods: Vec<PodState>,
        pub scrapes: Scrapes,
    }

    impl Fleet {
        pub fn new() -> Self {
            Self::default()
        }

        /// `n` Ready pods with ids 1..=n.
        pub fn with_ready(n: u64) -> Self {
            let mut fleet = Self::new();
            for id in 1..=n {
                fleet.ready(id);
            }
            fleet
        }

        /// A Ready pod (Ready since t = 0).
        pub fn ready(&mut self, id: u64) {
            self.pods.push(PodState {
                id,
                created: 0.0,
                running_at: Some(0.0),
                ready_at: Some(0.0),
            });
        }

        /// A pod still loading its model (Running, no metrics endpoint yet).
        pub fn starting(&mut self, id: u64) {
            self.pods.push(PodState {
                id,
                created: 0.0,
                running_at: Some(0.0),
                ready_at: None,
            });
        }

        /// A Pending pod (waiting for a node or pulling its image).
        pub fn pending(&mut self, id: u64) {
            self.pods.push(PodState {
                id,
                created: 0.0,
                running_at: None,
                ready_at: None,
            });
        }

        /// Removes a pod (scaled down) and its series.
        pub fn remove(&mut self, id: u64) {
            self.pods.retain(|p| p.id != id);
            self.scrapes.forget(id);
        }

        /// One scrape of pod `id` at `at`.
        pub fn sample(&mut self, id: u64, at: f64, running: f64, waiting: f64, kv: f64) {
            self.scrapes.record(
                id,
                at,
                PodSample {
                    running,
                    waiting,
                    kv_usage: kv,
                },
            );
        }

        /// Every Ready pod scraped at `at` with the same concurrency (all running) and KV use.
        pub fn sample_all(&mut self, at: f64, running: f64, kv: f64) {
            let ids: Vec<u64> = self
                .pods
                .iter()
                .filter(|p| p.is_ready())
                .map(|p| p.id)
                .collect();
            for id in ids {
                self.sample(id, at, running, 0.0, kv);
            }
        }

        pub fn gateway(&mut self, at: f64, pending: f64) {
            self.scrapes.record_gateway(at, pending);
        }

        pub fn view(&self, now: f64, spec: u32) -> View<'_> {
            View {
                now,
                spec,
                pods: &self.pods,
                metrics: &self.scrapes,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::Fleet;
    use super::*;

    #[test]
    fn concurrency_sums_running_and_waiting_of_the_same_scrape() {
        let mut fleet = Fleet::with_ready(2);
        fleet.sample(1, 10.0, 3.0, 2.0, 0.4);
        fleet.sample(2, 12.0, 1.0, 0.0, 0.1);
        assert_eq!(
            Signal::Concurrency.latest(&fleet.scrapes, 15.0),
            vec![(1, 5.0), (2, 1.0)]
        );
        assert_eq!(
            Signal::Waiting.latest(&fleet.scrapes, 15.0),
            vec![(1, 2.0), (2, 0.0)]
        );
        assert_eq!(
            Signal::Concurrency.avg_over(&fleet.scrapes, 15.0, 4.0),
            vec![(2, 1.0)]
        );
    }

    #[test]
    fn helpers_saturate_and_format() {
        assert_eq!(ceil_i64(f64::NAN), 0);
        assert_eq!(ceil_i64(f64::INFINITY), i64::MAX);
        assert_eq!(ceil_i64(2.0001), 3);
        assert_eq!(trunc_i64(2.9), 2);
        assert_eq!(num(16.0), "16");
        assert_eq!(num(0.7), "0.7");
        assert_eq!(label("HPA", &[]), "HPA");
        assert_eq!(label("HPA", &["down 60 s".into()]), "HPA (down 60 s)");
        assert!(elapsed(315.0, 15.0, 300.0));
        assert!(!within_window(315.0, 15.0, 300.0));
        assert!(within_window(315.0, 15.1, 300.0));
    }
}
