//! From many seeded runs to what a reader can trust: means over seeds, and the operator's paired
//! difference to each peer with a bootstrap 95% interval (the same seeds, so the workload's own
//! noise cancels out of the difference).

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::lab::run::Outcome;

/// One policy's runs over the seeds of one (trace, start-up delay) cell, in seed order.
#[derive(Debug, Clone)]
pub struct Runs {
    pub label: String,
    /// The peer (or "operator", "oracle"): a family's grid settings are compared with each other.
    pub family: String,
    /// The family's default setting (not a grid point).
    pub default: bool,
    pub outcomes: Vec<Outcome>,
}

/// Means over seeds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    pub seeds: usize,
    pub attainment: f64,
    pub ttft_p50: f64,
    pub ttft_p95: f64,
    pub ttft_p99: f64,
    pub tpot_p95: f64,
    pub replica_hours: f64,
    pub scale_actions: f64,
    pub oscillations: f64,
    pub wasted_cold_starts: f64,
    pub warm_evictions: f64,
    pub lost: f64,
    pub recovery: Option<f64>,
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0_u32), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / f64::from(n) }
}

/// A percentile that is infinite (requests lost) stays infinite in the mean; the table prints it
/// as such rather than hiding it.
pub fn summarize(outcomes: &[Outcome]) -> Summary {
    let m = |f: fn(&Outcome) -> f64| mean(outcomes.iter().map(f));
    let recoveries: Vec<f64> = outcomes.iter().filter_map(|o| o.recovery).collect();
    Summary {
        seeds: outcomes.len(),
        attainment: m(|o| 1.0 - o.miss_rate()),
        ttft_p50: m(|o| o.ttft_p50),
        ttft_p95: m(|o| o.ttft_p95),
        ttft_p99: m(|o| o.ttft_p99),
        tpot_p95: m(|o| o.tpot_p95),
        replica_hours: m(Outcome::replica_hours),
        scale_actions: m(|o| f64::from(o.scale_actions)),
        oscillations: m(|o| f64::from(o.oscillations)),
        wasted_cold_starts: m(|o| f64::from(o.wasted_cold_starts)),
        warm_evictions: m(|o| f64::from(o.warm_evictions)),
        lost: m(|o| o.lost as f64),
        recovery: (!recoveries.is_empty()).then(|| mean(recoveries.into_iter())),
    }
}

/// A mean paired difference with its bootstrap 95% interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    /// The interval lies entirely on one side of zero.
    pub fn excludes_zero(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }
}

/// The mean of `a[i] - b[i]` and its percentile-bootstrap 95% interval (resampling seeds).
pub fn paired_difference(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Option<Interval> {
    let diffs: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    if diffs.is_empty() {
        return None;
    }
    let n = diffs.len();
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let mut means: Vec<f64> = (0..resamples.max(1))
        .map(|_| (0..n).map(|_| diffs[rng.random_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_unstable_by(f64::total_cmp);
    let at = |q: f64| means[((q * means.len() as f64) as usize).min(means.len() - 1)];
    Some(Interval {
        mean: diffs.iter().sum::<f64>() / n as f64,
        low: at(0.025),
        high: at(0.975),
    })
}

/// Per-seed SLO miss rates in percent.
pub fn miss_percent(runs: &Runs) -> Vec<f64> {
    runs.outcomes
        .iter()
        .map(|o| 100.0 * o.miss_rate())
        .collect()
}

/// Per-seed direction changes.
pub fn oscillations(runs: &Runs) -> Vec<f64> {
    runs.outcomes
        .iter()
        .map(|o| f64::from(o.oscillations))
        .collect()
}

/// Per-seed replica-hours.
pub fn replica_hours(runs: &Runs) -> Vec<f64> {
    runs.outcomes.iter().map(Outcome::replica_hours).collect()
}

/// The family's strongest setting at a budget: the most SLO attained among its settings that use
/// no more replica-hours than `budget` (the operator's), or, when every setting costs more, the
/// cheapest. "Best" by attainment alone would always be the most over-provisioned setting.
pub fn best_of<'a>(runs: &'a [Runs], family: &str, budget: f64) -> Option<&'a Runs> {
    let members: Vec<(&Runs, Summary)> = runs
        .iter()
        .filter(|r| r.family == family)
        .map(|r| (r, summarize(&r.outcomes)))
        .collect();
    let affordable = members
        .iter()
        .filter(|(_, s)| s.replica_hours <= budget)
        .max_by(|(_, a), (_, b)| {
            a.attainment
                .total_cmp(&b.attainment)
                .then(b.replica_hours.total_cmp(&a.replica_hours))
        });
    affordable
        .or_else(|| {
            members
                .iter()
                .min_by(|(_, a), (_, b)| a.replica_hours.total_cmp(&b.replica_hours))
        })
        .map(|(r, _)| *r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constant_difference_has_a_tight_interval_and_noise_a_wide_one() {
        let a = [5.0, 6.0, 7.0, 8.0];
        let b = [4.0, 5.0, 6.0, 7.0];
        let i = paired_difference(&a, &b, 1000, 1).unwrap();
        assert_eq!((i.mean, i.low, i.high), (1.0, 1.0, 1.0));
        assert!(i.excludes_zero());
        let noisy = [3.0, 7.0, 4.0, 9.0];
        let j = paired_difference(&noisy, &b, 1000, 1).unwrap();
        assert!(j.low < 0.0 && j.high > 0.0 && !j.excludes_zero(), "{j:?}");
        assert!(paired_difference(&[], &[], 10, 1).is_none());
    }

    #[test]
    fn summaries_average_over_seeds() {
        let o = |met: u64, hours: f64| Outcome {
            judged: 100,
            met,
            replica_seconds: hours * 3600.0,
            ..Outcome::default()
        };
        let s = summarize(&[o(90, 2.0), o(100, 4.0)]);
        assert!((s.attainment - 0.95).abs() < 1e-12);
        assert!((s.replica_hours - 3.0).abs() < 1e-12);
        assert_eq!(s.recovery, None);
    }

    #[test]
    fn the_best_setting_is_the_strongest_within_the_budget() {
        let o = |met: u64, hours: f64| Outcome {
            judged: 100,
            met,
            replica_seconds: hours * 3600.0,
            ..Outcome::default()
        };
        let runs = |label: &str, met, hours| Runs {
            label: label.into(),
            family: "HPA".into(),
            default: false,
            outcomes: vec![o(met, hours)],
        };
        let all = [
            runs("lavish", 100, 20.0),
            runs("lean", 90, 8.0),
            runs("fit", 95, 10.0),
        ];
        assert_eq!(best_of(&all, "HPA", 10.0).unwrap().label, "fit");
        assert_eq!(best_of(&all, "HPA", 50.0).unwrap().label, "lavish");
        assert_eq!(best_of(&all, "HPA", 5.0).unwrap().label, "lean");
        assert!(best_of(&all, "KEDA", 50.0).is_none());
    }
}
