//! The metric pipeline between the fleet and a policy, as Prometheus gives it: each pod is
//! scraped every interval at its own phase, only once its metrics endpoint answers (vLLM serves
//! `/metrics` from the same server as the API, so not while the model loads), and its series
//! go stale when the pod goes. Queries see the samples scraped so far, never the live value.

use std::collections::{BTreeMap, VecDeque};

use crate::lab::exported::Exported;

/// Prometheus' default look-back for an instant query.
pub const LOOKBACK: f64 = 300.0;
/// Samples older than this are dropped: no query in the lab looks further back.
const RETENTION: f64 = 900.0;

/// The per-pod gauges vLLM exports that the policies read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gauge {
    /// `vllm:num_requests_running`
    Running,
    /// `vllm:num_requests_waiting`
    Waiting,
    /// `vllm:kv_cache_usage_perc` (0 to 1)
    KvUsage,
}

impl Gauge {
    const COUNT: usize = 3;

    fn index(self) -> usize {
        match self {
            Gauge::Running => 0,
            Gauge::Waiting => 1,
            Gauge::KvUsage => 2,
        }
    }
}

/// One scrape of one pod.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodSample {
    pub running: f64,
    pub waiting: f64,
    pub kv_usage: f64,
}

impl PodSample {
    fn values(self) -> [f64; Gauge::COUNT] {
        [self.running, self.waiting, self.kv_usage]
    }
}

/// How samples over a range are folded into one value per series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverTime {
    /// `avg_over_time`
    Avg,
    /// `max_over_time`
    Max,
}

/// Everything one policy's pipeline has scraped.
#[derive(Debug, Clone, Default)]
pub struct Scrapes {
    pods: BTreeMap<u64, VecDeque<(f64, [f64; Gauge::COUNT])>>,
    /// Requests the router holds because no pod could take them (a gateway's queue, or an
    /// activator's buffer while a fleet is at zero).
    gateway: VecDeque<(f64, f64)>,
    /// Each pod's histograms and token counters, scraped with its gauges.
    exported: BTreeMap<u64, VecDeque<(f64, Exported)>>,
}

impl Scrapes {
    pub fn new() -> Self {
        Self::default()
    }

    /// A scrape of `pod` at `at`.
    pub fn record(&mut self, pod: u64, at: f64, sample: PodSample) {
        let series = self.pods.entry(pod).or_default();
        series.push_back((at, sample.values()));
        while series.front().is_some_and(|(t, _)| *t < at - RETENTION) {
            series.pop_front();
        }
    }

    /// A scrape of the gateway's queue at `at`.
    pub fn record_gateway(&mut self, at: f64, pending: f64) {
        self.gateway.push_back((at, pending));
        while self
            .gateway
            .front()
            .is_some_and(|(t, _)| *t < at - RETENTION)
        {
            self.gateway.pop_front();
        }
    }

    /// The pod went away: its series are stale from now on (Prometheus writes a staleness marker
    /// at the first failed scrape; the lab drops the series at once).
    pub fn forget(&mut self, pod: u64) {
        self.pods.remove(&pod);
        self.exported.remove(&pod);
    }

    /// The histograms and counters of `pod` scraped at `at`.
    pub fn record_exported(&mut self, pod: u64, at: f64, exported: Exported) {
        let series = self.exported.entry(pod).or_default();
        series.push_back((at, exported));
        while series.front().is_some_and(|(t, _)| *t < at - RETENTION) {
            series.pop_front();
        }
    }

    /// What every live pod exported over `window` at `now`, summed over pods: per pod, its
    /// newest scrape in the window less its oldest (`sum(increase(...[window]))` without
    /// Prometheus's extrapolation to the window's edges; a pod with one scrape in it adds
    /// nothing). Latency quantiles are read from it as `histogram_quantile` reads them.
    pub fn increase(&self, now: f64, window: f64) -> Exported {
        let mut total = Exported::default();
        for series in self.exported.values() {
            // Scrapes are in time order: the first after the window opens, the last before now.
            let from = series.partition_point(|(t, _)| *t <= now - window);
            let to = series.partition_point(|(t, _)| *t <= now);
            if to > from + 1 {
                total.add(&series[to - 1].1.since(&series[from].1));
            }
        }
        total
    }

    /// The instant vector of `gauge` at `now`: each live pod's newest sample within the look-back.
    pub fn latest(&self, now: f64, gauge: Gauge) -> Vec<(u64, f64)> {
        let i = gauge.index();
        self.pods
            .iter()
            .filter_map(|(pod, series)| {
                series
                    .iter()
                    .rev()
                    .find(|(t, _)| *t <= now)
                    .filter(|(t, _)| *t > now - LOOKBACK)
                    .map(|(_, v)| (*pod, v[i]))
            })
            .collect()
    }

    /// `avg_over_time(gauge[window])` or `max_over_time(gauge[window])` at `now`, per live pod
    /// with at least one sample in the range.
    pub fn over_time(
        &self,
        now: f64,
        gauge: Gauge,
        window: f64,
        fold: OverTime,
    ) -> Vec<(u64, f64)> {
        let i = gauge.index();
        self.pods
            .iter()
            .filter_map(|(pod, series)| {
                // Samples are in time order: find the range's ends by bisection.
                let from = series.partition_point(|(t, _)| *t <= now - window);
                let to = series.partition_point(|(t, _)| *t <= now);
                let values = series.range(from..to.max(from)).map(|(_, v)| v[i]);
                fold_values(values, fold).map(|v| (*pod, v))
            })
            .collect()
    }

    /// The gateway's newest scraped queue length within the look-back.
    pub fn gateway_pending(&self, now: f64) -> Option<f64> {
        self.gateway
            .iter()
            .rev()
            .find(|(t, _)| *t <= now)
            .filter(|(t, _)| *t > now - LOOKBACK)
            .map(|(_, v)| *v)
    }

    /// The gateway's queue folded over `window` at `now`.
    pub fn gateway_over_time(&self, now: f64, window: f64, fold: OverTime) -> Option<f64> {
        let from = self.gateway.partition_point(|(t, _)| *t <= now - window);
        let to = self.gateway.partition_point(|(t, _)| *t <= now);
        let values = self.gateway.range(from..to.max(from)).map(|(_, v)| *v);
        fold_values(values, fold)
    }
}

fn fold_values(values: impl Iterator<Item = f64>, fold: OverTime) -> Option<f64> {
    let mut n = 0_u32;
    let mut acc = match fold {
        OverTime::Avg => 0.0,
        OverTime::Max => f64::NEG_INFINITY,
    };
    for v in values {
        n += 1;
        acc = match fold {
            OverTime::Avg => acc + v,
            OverTime::Max => acc.max(v),
        };
    }
    match (n, fold) {
        (0, _) => None,
        (_, OverTime::Avg) => Some(acc / f64::from(n)),
        (_, OverTime::Max) => Some(acc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(running: f64) -> PodSample {
        PodSample {
            running,
            waiting: 0.0,
            kv_usage: running / 100.0,
        }
    }

    #[test]
    fn an_instant_query_sees_the_newest_scrape_not_the_future() {
        let mut s = Scrapes::new();
        s.record(1, 10.0, sample(3.0));
        s.record(1, 25.0, sample(7.0));
        assert_eq!(s.latest(24.0, Gauge::Running), vec![(1, 3.0)]);
        assert_eq!(s.latest(30.0, Gauge::Running), vec![(1, 7.0)]);
        assert_eq!(s.latest(30.0, Gauge::KvUsage), vec![(1, 0.07)]);
        assert!(s.latest(5.0, Gauge::Running).is_empty());
        // Past the look-back the series is gone from instant queries.
        assert!(s.latest(25.0 + LOOKBACK + 1.0, Gauge::Running).is_empty());
    }

    #[test]
    fn ranges_fold_the_samples_inside_them() {
        let mut s = Scrapes::new();
        for (t, v) in [(0.0, 1.0), (15.0, 5.0), (30.0, 3.0), (45.0, 2.0)] {
            s.record(9, t, sample(v));
        }
        // (0, 60]: the sample at exactly 0 is outside, as in PromQL's left-open range.
        assert_eq!(
            s.over_time(60.0, Gauge::Running, 60.0, OverTime::Avg),
            vec![(9, 10.0 / 3.0)]
        );
        assert_eq!(
            s.over_time(60.0, Gauge::Running, 60.0, OverTime::Max),
            vec![(9, 5.0)]
        );
        assert!(
            s.over_time(200.0, Gauge::Running, 60.0, OverTime::Max)
                .is_empty()
        );
    }

    #[test]
    fn a_forgotten_pod_and_the_gateway() {
        let mut s = Scrapes::new();
        s.record(1, 0.0, sample(1.0));
        s.record(2, 0.0, sample(2.0));
        s.forget(1);
        assert_eq!(s.latest(1.0, Gauge::Running), vec![(2, 2.0)]);
        s.record_gateway(0.0, 4.0);
        s.record_gateway(10.0, 6.0);
        assert_eq!(s.gateway_pending(9.0), Some(4.0));
        assert_eq!(s.gateway_over_time(10.0, 20.0, OverTime::Avg), Some(5.0));
    }
}
