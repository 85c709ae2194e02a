//! What a lab pod exports besides its gauges, as vLLM does: the TTFT, inter-token-latency,
//! queue-time and per-request time-per-output-token histograms (vLLM 0.33's buckets,
//! `crate::fleet`) and the prompt and generation token counters. Scraped with the gauges (same
//! phase, same delay), so a policy can read latency the way it would in a cluster:
//! `histogram_quantile` over the increase of the buckets.

use crate::fleet::{ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS};

/// The most bounds a histogram has (vLLM's TTFT histogram: 22).
const MAX_BOUNDS: usize = 22;

/// A histogram kept as counts per bucket (the last is +Inf), cheap to observe into on every
/// scheduler step and to copy at every scrape (no allocation); [`Buckets::cumulative`] is what a
/// scrape would read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Buckets {
    pub bounds: &'static [f64],
    /// `counts[i]` observations fell in `(bounds[i-1], bounds[i]]`; `counts[bounds.len()]` above
    /// the last bound; the rest unused.
    counts: [u64; MAX_BOUNDS + 1],
    pub sum: f64,
}

impl Buckets {
    /// A histogram over `bounds` (at most 22 of them; more are left out).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds: &bounds[..bounds.len().min(MAX_BOUNDS)],
            counts: [0; MAX_BOUNDS + 1],
            sum: 0.0,
        }
    }

    fn used(&self) -> &[u64] {
        &self.counts[..=self.bounds.len()]
    }

    /// `n` observations of `value`.
    pub fn observe_n(&mut self, value: f64, n: u64) {
        if n == 0 {
            return;
        }
        let i = self.bounds.partition_point(|le| *le < value);
        self.counts[i] += n;
        self.sum += value * n as f64;
    }

    pub fn count(&self) -> u64 {
        self.used().iter().sum()
    }

    /// `(le, observations <= le)` for each bound, then `(+Inf, count)`.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut total = 0;
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.used())
            .map(|(le, c)| {
                total += c;
                (le, total)
            })
            .collect()
    }

    /// What was observed since `earlier` (a counter's increase; a reset reads as all of it).
    pub fn since(&self, earlier: &Buckets) -> Buckets {
        let reset = self.count() < earlier.count();
        let mut counts = self.counts;
        if !reset {
            for (now, then) in counts.iter_mut().zip(&earlier.counts) {
                *now = now.saturating_sub(*then);
            }
        }
        Buckets {
            bounds: self.bounds,
            counts,
            sum: if reset {
                self.sum
            } else {
                self.sum - earlier.sum
            },
        }
    }

    /// Adds `other`'s observations (the `sum by (le)` over pods).
    pub fn add(&mut self, other: &Buckets) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.sum += other.sum;
    }

    /// Prometheus's `histogram_quantile(q, ...)`: linear within the bucket the rank falls in,
    /// from 0 for the first; the last finite bound when it falls in +Inf. `None` with no
    /// observation.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let cumulative = self.cumulative();
        let total = cumulative.last().map_or(0, |(_, c)| *c);
        if total == 0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * total as f64;
        let i = cumulative
            .iter()
            .position(|(_, c)| *c as f64 >= rank)
            .unwrap_or(cumulative.len() - 1);
        let (le, count) = cumulative[i];
        if le.is_infinite() {
            return self.bounds.last().copied();
        }
        let (start, below) = match i.checked_sub(1) {
            Some(j) => cumulative[j],
            None => (0.0, 0),
        };
        let in_bucket = (count - below) as f64;
        if in_bucket == 0.0 {
            return Some(le);
        }
        Some(start + (le - start) * (rank - below as f64) / in_bucket)
    }
}

/// One pod's exported histograms and counters, as of a moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exported {
    /// `vllm:time_to_first_token_seconds`, from the request's arrival at the pod.
    pub ttft: Buckets,
    /// `vllm:inter_token_latency_seconds`, one observation per token after the first.
    pub itl: Buckets,
    /// `vllm:request_queue_time_seconds`, from arrival to first being scheduled.
    pub queue: Buckets,
    /// `vllm:request_time_per_output_token_seconds`, one observation per finished request of
    /// more than one token: its mean time per output token after the first (vLLM 0.33 exports
    /// it with the inter-token buckets; `sim/tests/vllm_exposition.rs` holds them against the
    /// fixture).
    pub tpot: Buckets,
    /// `vllm:prompt_tokens_total`.
    pub prompt_tokens: u64,
    /// `vllm:generation_tokens_total`.
    pub generation_tokens: u64,
}

impl Default for Exported {
    fn default() -> Self {
        Self {
            ttft: Buckets::new(&TTFT_BUCKETS),
            itl: Buckets::new(&ITL_BUCKETS),
            queue: Buckets::new(&REQUEST_LATENCY_BUCKETS),
            tpot: Buckets::new(&ITL_BUCKETS),
            prompt_tokens: 0,
            generation_tokens: 0,
        }
    }
}

impl Exported {
    /// What was exported since `earlier` (`increase(...)` of every series).
    pub fn since(&self, earlier: &Exported) -> Exported {
        Exported {
            ttft: self.ttft.since(&earlier.ttft),
            itl: self.itl.since(&earlier.itl),
            queue: self.queue.since(&earlier.queue),
            tpot: self.tpot.since(&earlier.tpot),
            prompt_tokens: self.prompt_tokens.saturating_sub(earlier.prompt_tokens),
            generation_tokens: self
                .generation_tokens
                .saturating_sub(earlier.generation_tokens),
        }
    }

    /// Adds `other`'s observations and tokens (a sum over pods).
    pub fn add(&mut self, other: &Exported) {
        self.ttft.add(&other.ttft);
        self.itl.add(&other.itl);
        self.queue.add(&other.queue);
        self.tpot.add(&other.tpot);
        self.prompt_tokens += other.prompt_tokens;
        self.generation_tokens += other.generation_tokens;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantile_interpolates_as_prometheus_does() {
        let mut h = Buckets::new(&[1.0, 2.0, 4.0]);
        // 10 at 0.5, 10 at 1.5, 20 at 3.
        h.observe_n(0.5, 10);
        h.observe_n(1.5, 10);
        h.observe_n(3.0, 20);
        assert_eq!(h.count(), 40);
        assert_eq!(
            h.cumulative(),
            [(1.0, 10), (2.0, 20), (4.0, 40), (f64::INFINITY, 40)]
        );
        // Rank 20 of 40 is the top of the (1, 2] bucket.
        assert_eq!(h.quantile(0.5), Some(2.0));
        // Rank 30: half-way through (2, 4].
        assert_eq!(h.quantile(0.75), Some(3.0));
        // Rank 4: 0.4 of the way through (0, 1].
        assert!((h.quantile(0.1).unwrap() - 0.4).abs() < 1e-12);
        // A value on a bound belongs to that bound's bucket (le is inclusive).
        let mut on = Buckets::new(&[1.0, 2.0]);
        on.observe_n(1.0, 1);
        assert_eq!(on.cumulative()[0], (1.0, 1));
        // Past the last bound: the last finite bound.
        let mut over = Buckets::new(&[1.0]);
        over.observe_n(9.0, 3);
        assert_eq!(over.quantile(0.99), Some(1.0));
        assert_eq!(Buckets::new(&[1.0]).quantile(0.5), None);
    }

    #[test]
    fn an_increase_is_what_came_since_and_pods_add_up() {
        let mut pod = Exported::default();
        pod.ttft.observe_n(0.3, 5);
        pod.generation_tokens = 100;
        let earlier = pod;
        pod.ttft.observe_n(3.0, 2);
        pod.generation_tokens = 160;
        let increase = pod.since(&earlier);
        assert_eq!(increase.ttft.count(), 2);
        assert_eq!(increase.generation_tokens, 60);
        assert!((increase.ttft.sum - 6.0).abs() < 1e-12);
        // A restarted pod (fewer observations than before) counts all it has.
        let fresh = Exported::default();
        assert_eq!(fresh.since(&pod).ttft.count(), 0);
        let mut total = Exported::default();
        total.add(&increase);
        total.add(&increase);
        assert_eq!(total.ttft.count(), 4);
        assert_eq!(total.generation_tokens, 120);
    }
}
