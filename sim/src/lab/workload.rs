//! Seeded request workloads: when each request arrives, how long its prompt and output are, and
//! which shared prefix (a system prompt, a conversation's earlier turns) it starts with.
//!
//! Arrivals are a renewal process on a time-varying envelope: gaps are Gamma-distributed with
//! shape `k` and mean 1 in *operational time* (the integral of the rate), then mapped back to
//! wall time. `k = 1` is a Poisson process; `k < 1` is burstier at the same mean rate, as vLLM's
//! benchmark `--burstiness` draws it. One seed gives one exact list of requests, so every policy
//! is judged on the same requests (common random numbers).
//!
//! The shapes are synthesized from published statistics, nothing is downloaded:
//! - `conversation`: Azure LLM inference trace 2023, conversation: ≈5.5 req/s over an hour,
//!   prompts ≈100–1,100 tokens, outputs ≈16–470;
//! - `code`: the same trace's code requests: ≈2.6 req/s, long prompts (up to ≈7k), short outputs;
//! - `burstgpt`: BurstGPT: Gamma arrivals with k < 1 on a diurnal envelope (a day compressed into
//!   the run), Zipf-like lengths;
//! - `step`: a steady load that jumps 5× for 20 minutes;
//! - `threshold`: a load hovering at a scaling threshold;
//! - `idle`: long silences between short sessions, for scale-to-zero;
//! - `steady` and `diurnal`: the live simulator's built-in traces, with Poisson noise.
//!
//! Rates are multiplied so that fleets span roughly 5–40 pods of the lab's pod profile.

use std::f64::consts::TAU;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma, LogNormal, Zipf};
use rand_pcg::Pcg64Mcg;

use crate::trace::Trace;

/// A shared prompt prefix: requests with the same id start with the same `tokens` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub id: u32,
    pub tokens: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// Seconds since the start of the run.
    pub at: f64,
    pub prompt: u32,
    pub output: u32,
    pub prefix: Option<Prefix>,
}

/// The named workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shape {
    Conversation,
    Code,
    BurstGpt,
    Step,
    Threshold,
    Idle,
    Steady,
    Diurnal,
}

impl Shape {
    pub const ALL: [Shape; 8] = [
        Shape::Conversation,
        Shape::Code,
        Shape::BurstGpt,
        Shape::Step,
        Shape::Threshold,
        Shape::Idle,
        Shape::Steady,
        Shape::Diurnal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Shape::Conversation => "conversation",
            Shape::Code => "code",
            Shape::BurstGpt => "burstgpt",
            Shape::Step => "step",
            Shape::Threshold => "threshold",
            Shape::Idle => "idle",
            Shape::Steady => "steady",
            Shape::Diurnal => "diurnal",
        }
    }

    pub fn parse(name: &str) -> Option<Shape> {
        Shape::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Seconds of load in a run.
    pub fn duration(self) -> f64 {
        3600.0
    }

    /// Gamma shape of the inter-arrival gaps (1 = Poisson).
    pub fn burstiness(self) -> f64 {
        match self {
            Shape::Conversation | Shape::Code => 0.5,
            Shape::BurstGpt => 0.25,
            Shape::Step | Shape::Threshold | Shape::Idle | Shape::Steady | Shape::Diurnal => 1.0,
        }
    }

    /// When a step trace jumps, for the recovery time.
    pub fn step_at(self) -> Option<f64> {
        (self == Shape::Step).then_some(STEP_START)
    }

    /// Whether the scalers run with minReplicas 0 on this trace.
    pub fn scales_to_zero(self) -> bool {
        self == Shape::Idle
    }
}

const STEP_START: f64 = 1200.0;
const STEP_END: f64 = 2400.0;

/// The envelope (requests/s at `t`), with its slow random wobble fixed by `phases`.
fn rate(shape: Shape, t: f64, phases: [f64; 3]) -> f64 {
    let wobble = |amp: f64, period: f64, phase: f64| 1.0 + amp * (TAU * t / period + phase).sin();
    match shape {
        // 5.5 req/s, drifting ±25% over the hour and ±10% over ten minutes; ×5 to reach the
        // lab's fleet size.
        Shape::Conversation => {
            5.5 * 5.0 * wobble(0.25, 3600.0, phases[0]) * wobble(0.10, 600.0, phases[1])
        }
        // 2.6 req/s, ×4.
        Shape::Code => 2.6 * 4.0 * wobble(0.20, 3600.0, phases[0]) * wobble(0.10, 900.0, phases[1]),
        // A day in an hour: a night trough at a fifth of the peak, a morning rise, an afternoon
        // peak; and a shorter ripple.
        Shape::BurstGpt => {
            let day = 0.5 - 0.5 * (TAU * t / 3600.0).cos(); // 0 at the ends, 1 mid-run
            40.0 * (0.2 + 0.8 * day) * wobble(0.15, 400.0, phases[2])
        }
        Shape::Step => {
            if (STEP_START..STEP_END).contains(&t) {
                30.0
            } else {
                6.0
            }
        }
        Shape::Threshold => 15.0 * wobble(0.05, 300.0, phases[0]),
        // The live simulator's built-in traces (`crate::trace`), ×2.5 for the lab's pods, now
        // with Poisson noise: the same load throughout, and a night, a morning ramp, a plateau
        // and an evening fall. (Its `burst` is the step above, its `idle` the sessions below.)
        Shape::Steady | Shape::Diurnal => {
            let name = if shape == Shape::Steady {
                "steady"
            } else {
                "diurnal"
            };
            2.5 * Trace::builtin(name, 3600.0)
                .map_or(0.0, |trace| trace.rate(Duration::from_secs_f64(t.max(0.0))))
        }
        // Five-minute sessions at 2 req/s separated by silences of 10 to 15 minutes.
        Shape::Idle => {
            let cycle = 1000.0 + 200.0 * phases[1].sin().abs();
            let into = (t + phases[0] * 100.0) % cycle;
            if into < 300.0 { 2.0 } else { 0.0 }
        }
    }
}

/// A prompt and output length, and the share of the prompt that is a reusable prefix.
fn lengths(shape: Shape, rng: &mut Pcg64Mcg, dists: &Dists) -> (u32, u32) {
    let clamp = |v: f64, lo: f64, hi: f64| v.clamp(lo, hi).round() as u32;
    match shape {
        Shape::Code => (
            clamp(dists.code_prompt.sample(rng), 64.0, 7500.0),
            clamp(dists.code_output.sample(rng), 3.0, 60.0),
        ),
        Shape::BurstGpt => (
            clamp(dists.zipf_prompt.sample(rng), 1.0, 4096.0),
            clamp(dists.zipf_output.sample(rng), 1.0, 1024.0),
        ),
        _ => (
            clamp(dists.chat_prompt.sample(rng), 40.0, 4000.0),
            clamp(dists.chat_output.sample(rng), 4.0, 1200.0),
        ),
    }
}

struct Dists {
    chat_prompt: LogNormal<f64>,
    chat_output: LogNormal<f64>,
    code_prompt: LogNormal<f64>,
    code_output: LogNormal<f64>,
    zipf_prompt: Zipf<f64>,
    zipf_output: Zipf<f64>,
    gap: Gamma<f64>,
}

impl Dists {
    fn new(k: f64) -> Option<Self> {
        Some(Self {
            // Medians 600 and 140 tokens: most prompts within 100–1,100 and outputs within 16–470.
            chat_prompt: LogNormal::new(600_f64.ln(), 0.55).ok()?,
            chat_output: LogNormal::new(140_f64.ln(), 0.75).ok()?,
            // Medians 2,000 and 14 tokens.
            code_prompt: LogNormal::new(2000_f64.ln(), 0.7).ok()?,
            code_output: LogNormal::new(14_f64.ln(), 0.5).ok()?,
            zipf_prompt: Zipf::new(4096.0, 1.0).ok()?,
            zipf_output: Zipf::new(1024.0, 1.0).ok()?,
            gap: Gamma::new(k, 1.0 / k).ok()?,
        })
    }
}

/// Prefix reuse per shape: (share of requests that reuse a prefix, prefixes in the pool, share
/// of the prompt the prefix covers).
fn prefix_reuse(shape: Shape) -> (f64, u32, f64) {
    match shape {
        // Follow-up turns of a conversation carry the earlier turns.
        Shape::Conversation
        | Shape::Step
        | Shape::Threshold
        | Shape::Idle
        | Shape::Steady
        | Shape::Diurnal => (0.6, 400, 0.7),
        // A repository's context, shared by the requests of one session.
        Shape::Code => (0.7, 150, 0.8),
        Shape::BurstGpt => (0.4, 800, 0.5),
    }
}

/// The seed's random stream for `shape`, and the phases of its envelope's wobble (drawn first).
fn seeded(shape: Shape, seed: u64) -> (Pcg64Mcg, [f64; 3]) {
    let mut rng =
        Pcg64Mcg::seed_from_u64(seed ^ (shape as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let phases = [
        rng.random::<f64>() * TAU,
        rng.random::<f64>() * TAU,
        rng.random::<f64>() * TAU,
    ];
    (rng, phases)
}

/// One seed's requests, in arrival order.
pub fn generate(shape: Shape, seed: u64) -> Vec<Request> {
    let (_, phases) = seeded(shape, seed);
    generate_with(shape, seed, shape.duration(), |t| rate(shape, t, phases))
}

/// The requests of `shape` (its lengths, prefixes and burstiness) at a constant `rate` instead of
/// its envelope: for measuring what one pod can serve.
pub fn generate_at_rate(shape: Shape, seed: u64, rate: f64, duration: f64) -> Vec<Request> {
    generate_with(shape, seed, duration, |_| rate)
}

fn generate_with(
    shape: Shape,
    seed: u64,
    duration: f64,
    envelope: impl Fn(f64) -> f64,
) -> Vec<Request> {
    let (mut rng, _) = seeded(shape, seed);
    let Some(dists) = Dists::new(shape.burstiness()) else {
        return Vec::new();
    };
    let (share, pool, covers) = prefix_reuse(shape);
    // Popular prefixes are reused more (Zipf over the pool).
    let popularity = Zipf::new(f64::from(pool), 1.1).ok();
    let mut requests = Vec::new();
    // Operational time: the next arrival happens when the integral of the rate reaches `due`.
    let mut due = dists.gap.sample(&mut rng);
    let mut integral = 0.0;
    let mut t = 0.0;
    const DT: f64 = 0.25;
    while t < duration {
        let mass = envelope(t) * DT;
        while integral + mass >= due {
            // Interpolate inside the slice so arrivals are not aligned to it.
            let at = t + DT * ((due - integral) / mass).clamp(0.0, 1.0);
            let (prompt, output) = lengths(shape, &mut rng, &dists);
            let prefix = match &popularity {
                Some(pop) if rng.random::<f64>() < share => {
                    let id = pop.sample(&mut rng) as u32;
                    Some(Prefix {
                        id,
                        tokens: ((f64::from(prompt) * covers) as u32).max(1),
                    })
                }
                _ => None,
            };
            requests.push(Request {
                at,
                prompt,
                output,
                prefix,
            });
            due += dists.gap.sample(&mut rng);
        }
        integral += mass;
        t += DT;
    }
    requests
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_is_one_exact_workload() {
        assert_eq!(
            generate(Shape::Conversation, 7),
            generate(Shape::Conversation, 7)
        );
        assert_ne!(
            generate(Shape::Conversation, 7),
            generate(Shape::Conversation, 8)
        );
    }

    #[test]
    fn the_conversation_trace_keeps_its_published_statistics() {
        let requests = generate(Shape::Conversation, 1);
        let per_second = requests.len() as f64 / Shape::Conversation.duration();
        // 5.5 req/s × 5.
        assert!((per_second - 27.5).abs() < 4.0, "{per_second}");
        let mut prompts: Vec<u32> = requests.iter().map(|r| r.prompt).collect();
        prompts.sort_unstable();
        let within = prompts.iter().filter(|p| (100..=1100).contains(*p)).count();
        assert!(within as f64 > 0.8 * prompts.len() as f64, "{within}");
        assert!(requests.windows(2).all(|w| w[0].at <= w[1].at));
    }

    #[test]
    fn a_smaller_gamma_shape_is_burstier_at_the_same_rate() {
        // The coefficient of variation of 1 s counts on a constant envelope.
        let cv = |k: f64| {
            let gap = Gamma::new(k, 1.0 / k).unwrap();
            let mut rng = Pcg64Mcg::seed_from_u64(3);
            let mut counts = vec![0_u32; 2000];
            let mut t = 0.0;
            loop {
                t += gap.sample(&mut rng) / 10.0; // 10 req/s
                if t >= 2000.0 {
                    break;
                }
                counts[t as usize] += 1;
            }
            let mean = counts.iter().map(|c| f64::from(*c)).sum::<f64>() / 2000.0;
            let var = counts
                .iter()
                .map(|c| (f64::from(*c) - mean).powi(2))
                .sum::<f64>()
                / 2000.0;
            (mean, var.sqrt() / mean)
        };
        let (m1, cv1) = cv(1.0);
        let (m4, cv4) = cv(0.25);
        assert!(
            (m1 - 10.0).abs() < 0.5 && (m4 - 10.0).abs() < 1.0,
            "{m1} {m4}"
        );
        assert!(cv4 > 1.5 * cv1, "{cv1} {cv4}");
    }

    #[test]
    fn the_step_jumps_five_fold() {
        let requests = generate(Shape::Step, 2);
        let count = |from: f64, to: f64| {
            requests
                .iter()
                .filter(|r| r.at >= from && r.at < to)
                .count() as f64
                / (to - from)
        };
        let before = count(200.0, 1200.0);
        let during = count(1300.0, 2300.0);
        assert!((during / before - 5.0).abs() < 0.8, "{before} {during}");
    }
}
