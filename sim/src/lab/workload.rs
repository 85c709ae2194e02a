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
//! - `conversation`: Azure LLM inference trace 2023, conversation: its prompt and output lengths
//!   (their quantiles, [`AZURE_CONVERSATION_PROMPT`]) on a smooth, bursty envelope;
//! - `code`: the same trace's code requests' lengths, long prompts (up to ≈7.4k) and short
//!   outputs, arriving in on/off bursts as the real log does;
//! - `burstgpt`: BurstGPT's arrivals: Gamma gaps with k < 1 on a diurnal envelope (a day
//!   compressed into the run, its night at 5% of the peak). Its lengths are the Azure
//!   conversation log's: BurstGPT publishes its length statistics only as figures, and the Zipf
//!   its own generator draws is ≈10× shorter at the median than its requests;
//! - `step`: a steady load that jumps 5× for 20 minutes;
//! - `threshold`: a load hovering at a scaling threshold;
//! - `idle`: long silences between short sessions, for scale-to-zero;
//! - `steady` and `diurnal`: the live simulator's built-in traces, with Poisson noise;
//! - `diurnal-days`, `burstgpt-days`: four of the lab's days of an hour, for a policy that
//!   remembers the days before; `diurnal-24h`, `burstgpt-24h`: two days of 24 hours, whose ramps
//!   are as slow as a real day's (the lab's day of an hour makes them 24 times as steep).
//!
//! Rates are multiplied so that fleets span roughly 5–40 pods of the lab's pod profile.

use std::f64::consts::TAU;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma, Zipf};
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
    /// `diurnal`'s day four times over: for a policy that remembers the days before.
    DiurnalDays,
    /// `burstgpt`'s day four times over: its daily envelope recurs, its bursts do not (a
    /// policy that remembers the days before pays for any burst it takes for a rise).
    BurstGptDays,
    /// `diurnal`'s day at its real length, twice: a morning ramp of six hours, not fifteen
    /// minutes.
    Diurnal24h,
    /// `burstgpt`'s day at its real length, twice (its ripple and its gaps as they are).
    BurstGpt24h,
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

    /// Shapes run only when named (`--traces`).
    pub const MORE: [Shape; 4] = [
        Shape::DiurnalDays,
        Shape::BurstGptDays,
        Shape::Diurnal24h,
        Shape::BurstGpt24h,
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
            Shape::DiurnalDays => "diurnal-days",
            Shape::BurstGptDays => "burstgpt-days",
            Shape::Diurnal24h => "diurnal-24h",
            Shape::BurstGpt24h => "burstgpt-24h",
        }
    }

    pub fn parse(name: &str) -> Option<Shape> {
        Shape::ALL
            .into_iter()
            .chain(Shape::MORE)
            .find(|s| s.name() == name)
    }

    /// Seconds of load in a run: one of its days, or several.
    pub fn duration(self) -> f64 {
        let days = match self {
            Shape::DiurnalDays | Shape::BurstGptDays => 4.0,
            Shape::Diurnal24h | Shape::BurstGpt24h => 2.0,
            _ => 1.0,
        };
        days * self.day()
    }

    /// Seconds in one of the shape's days: the lab's hour, or a real day's 24 hours.
    pub fn day(self) -> f64 {
        match self {
            Shape::Diurnal24h | Shape::BurstGpt24h => REAL_DAY,
            _ => DAY,
        }
    }

    /// Gamma shape of the inter-arrival gaps (1 = Poisson).
    pub fn burstiness(self) -> f64 {
        match self {
            Shape::Conversation | Shape::Code => 0.5,
            Shape::BurstGpt | Shape::BurstGptDays | Shape::BurstGpt24h => 0.25,
            Shape::Step
            | Shape::Threshold
            | Shape::Idle
            | Shape::Steady
            | Shape::Diurnal
            | Shape::DiurnalDays
            | Shape::Diurnal24h => 1.0,
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

/// A lab run's day: the shapes with a daily cycle fit it into an hour.
pub const DAY: f64 = 3600.0;
/// A day at its real length, for the shapes that keep it.
pub const REAL_DAY: f64 = 86_400.0;

const STEP_START: f64 = 1200.0;
const STEP_END: f64 = 2400.0;

/// The envelope (requests/s at `t`), with its slow random wobble fixed by `phases`.
fn rate(shape: Shape, t: f64, phases: [f64; 3]) -> f64 {
    let wobble = |amp: f64, period: f64, phase: f64| 1.0 + amp * (TAU * t / period + phase).sin();
    match shape {
        // 5.5 req/s, drifting ±25% over the hour and ±10% over ten minutes; ×2 to reach the
        // lab's fleet size (≈30 pods).
        Shape::Conversation => {
            5.5 * 2.0 * wobble(0.25, 3600.0, phases[0]) * wobble(0.10, 600.0, phases[1])
        }
        // 2.6 req/s, ×0.8 (≈20 pods: a code request's long prompt fills a pod).
        Shape::Code => 2.6 * 0.8 * wobble(0.20, 3600.0, phases[0]) * wobble(0.10, 900.0, phases[1]),
        // A day in an hour: a night trough at 5% of the peak (BurstGPT's own daily figures show
        // 3–5%), a morning rise, an afternoon peak; and a shorter ripple.
        // (`cos` and the ripple repeat every lab day: the days of `burstgpt-days` share the
        // envelope, and only the Gamma gaps differ.)
        Shape::BurstGpt | Shape::BurstGptDays | Shape::BurstGpt24h => {
            let day = 0.5 - 0.5 * (TAU * t / shape.day()).cos(); // 0 at the ends, 1 mid-day
            5.0 * (0.05 + 0.95 * day) * wobble(0.15, 400.0, phases[2])
        }
        Shape::Step => {
            if (STEP_START..STEP_END).contains(&t) {
                12.0
            } else {
                2.4
            }
        }
        Shape::Threshold => 6.0 * wobble(0.05, 300.0, phases[0]),
        // The live simulator's built-in traces (`crate::trace`), as they are, now with Poisson
        // noise: the same load throughout, and a night, a morning ramp, a plateau
        // and an evening fall. (Its `burst` is the step above, its `idle` the sessions below.)
        Shape::Steady | Shape::Diurnal | Shape::DiurnalDays | Shape::Diurnal24h => {
            let name = if shape == Shape::Steady {
                "steady"
            } else {
                "diurnal"
            };
            let into_day = t.max(0.0) % shape.day();
            Trace::builtin(name, shape.day())
                .map_or(0.0, |trace| trace.rate(Duration::from_secs_f64(into_day)))
        }
        // Five-minute sessions at 0.8 req/s separated by silences of 10 to 15 minutes.
        Shape::Idle => {
            let cycle = 1000.0 + 200.0 * phases[1].sin().abs();
            let into = (t + phases[0] * 100.0) % cycle;
            if into < 300.0 { 0.8 } else { 0.0 }
        }
    }
}

/// A prompt and output length.
fn lengths(shape: Shape, rng: &mut Pcg64Mcg, dists: &Dists) -> (u32, u32) {
    match shape {
        Shape::Code => (
            dists.code_prompt.sample(rng).round() as u32,
            dists.code_output.sample(rng).round() as u32,
        ),
        _ => (
            dists.chat_prompt.sample(rng).round() as u32,
            dists.chat_output.sample(rng).round() as u32,
        ),
    }
}

/// A length distribution given by its quantiles, interpolated geometrically between them: the
/// lengths of a published log without the log.
#[derive(Debug, Clone, Copy)]
pub struct Quantiles(pub &'static [(f64, f64)]);

impl Distribution<f64> for Quantiles {
    fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let u: f64 = rng.random();
        let knots = self.0;
        let upper = knots
            .partition_point(|(q, _)| *q < u)
            .clamp(1, knots.len().max(2) - 1);
        match (knots.get(upper - 1), knots.get(upper)) {
            (Some(&(q0, v0)), Some(&(q1, v1))) => {
                let f = ((u - q0) / (q1 - q0).max(f64::EPSILON)).clamp(0.0, 1.0);
                v0 * (v1 / v0).powf(f)
            }
            (Some(&(_, v)), None) | (None, Some(&(_, v))) => v,
            (None, None) => 0.0,
        }
    }
}

/// Azure LLM inference trace 2023, conversation log (19,366 requests): prompt and output tokens
/// at the minimum, p1, p10, p25, p50, p75, p90, p99, p99.9 and the maximum.
pub const AZURE_CONVERSATION_PROMPT: Quantiles = Quantiles(&[
    (0.0, 2.0),
    (0.01, 29.0),
    (0.1, 207.0),
    (0.25, 396.0),
    (0.5, 1020.0),
    (0.75, 1189.0),
    (0.9, 2735.0),
    (0.99, 4142.0),
    (0.999, 6212.0),
    (1.0, 14050.0),
]);
pub const AZURE_CONVERSATION_OUTPUT: Quantiles = Quantiles(&[
    (0.0, 7.0),
    (0.01, 16.0),
    (0.1, 54.0),
    (0.25, 85.0),
    (0.5, 129.0),
    (0.75, 395.0),
    (0.9, 424.0),
    (0.99, 601.0),
    (0.999, 954.0),
    (1.0, 1000.0),
]);
/// The same trace's code log (8,819 requests).
pub const AZURE_CODE_PROMPT: Quantiles = Quantiles(&[
    (0.0, 3.0),
    (0.01, 17.0),
    (0.1, 147.0),
    (0.25, 578.0),
    (0.5, 1469.0),
    (0.75, 2745.0),
    (0.9, 5194.0),
    (0.99, 7436.0),
    (1.0, 7437.0),
]);
pub const AZURE_CODE_OUTPUT: Quantiles = Quantiles(&[
    (0.0, 6.0),
    (0.1, 7.0),
    (0.25, 9.0),
    (0.5, 13.0),
    (0.75, 24.0),
    (0.9, 55.0),
    (0.99, 252.0),
    (0.999, 831.0),
    (1.0, 1899.0),
]);

struct Dists {
    chat_prompt: Quantiles,
    chat_output: Quantiles,
    code_prompt: Quantiles,
    code_output: Quantiles,
    gap: Gamma<f64>,
}

impl Dists {
    fn new(k: f64) -> Option<Self> {
        Some(Self {
            chat_prompt: AZURE_CONVERSATION_PROMPT,
            chat_output: AZURE_CONVERSATION_OUTPUT,
            code_prompt: AZURE_CODE_PROMPT,
            code_output: AZURE_CODE_OUTPUT,
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
        | Shape::Diurnal
        | Shape::DiurnalDays
        | Shape::Diurnal24h => (0.6, 400, 0.7),
        // A repository's context, shared by the requests of one session.
        Shape::Code => (0.7, 150, 0.8),
        Shape::BurstGpt | Shape::BurstGptDays | Shape::BurstGpt24h => (0.4, 800, 0.5),
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
    generate_scaled(shape, seed, 1.0)
}

/// One seed's requests with the envelope's rate multiplied by `traffic` (for a pod stronger
/// or weaker than the one the rates are set for; the burstiness and lengths are kept).
pub fn generate_scaled(shape: Shape, seed: u64, traffic: f64) -> Vec<Request> {
    let (_, phases) = seeded(shape, seed);
    let bursts = (shape == Shape::Code).then(|| OnOff::new(seed, shape.duration()));
    generate_with(shape, seed, shape.duration(), |t| {
        let on_off = bursts.as_ref().map_or(1.0, |b| b.factor(t));
        traffic * on_off * rate(shape, t, phases)
    })
}

/// The real code log comes in bursts: busy stretches of a minute or so between longer silences,
/// each at its own level (its per-minute counts vary with a CV of 1.04, the busiest minute is
/// 4.2× the mean, 8 of its 57 minutes are empty). Busy and quiet stretches alternate with
/// exponential lengths of [`OnOff::MEAN_ON`] and [`OnOff::MEAN_OFF`] seconds, a busy one at a
/// level drawn uniformly from 0.4–1.6; the quiet ones keep a trickle.
struct OnOff {
    /// When each stretch starts, busy and quiet in turn from a busy one at 0.
    switches: Vec<f64>,
    /// Each stretch's multiplier, scaled so that the mean over the run is 1.
    levels: Vec<f64>,
}

impl OnOff {
    const MEAN_ON: f64 = 45.0;
    const MEAN_OFF: f64 = 90.0;
    /// A quiet stretch's rate, as a share of a busy one's mean.
    const TRICKLE: f64 = 0.03;

    fn new(seed: u64, duration: f64) -> Self {
        let mut rng = Pcg64Mcg::seed_from_u64(seed ^ 0x0FF0_0FF0_0FF0_0FF0);
        let (mut switches, mut levels) = (Vec::new(), Vec::new());
        let (mut t, mut mass) = (0.0, 0.0);
        let mut on = true;
        while t < duration {
            let mean = if on { Self::MEAN_ON } else { Self::MEAN_OFF };
            let length = -mean * (1.0 - rng.random::<f64>()).ln();
            let level = if on {
                0.4 + 1.2 * rng.random::<f64>()
            } else {
                Self::TRICKLE
            };
            mass += level * length.min(duration - t);
            switches.push(t);
            levels.push(level);
            t += length;
            on = !on;
        }
        let scale = duration / mass.max(f64::EPSILON);
        levels.iter_mut().for_each(|l| *l *= scale);
        Self { switches, levels }
    }

    fn factor(&self, t: f64) -> f64 {
        let stretch = self.switches.partition_point(|s| *s <= t).saturating_sub(1);
        self.levels.get(stretch).copied().unwrap_or(1.0)
    }
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
    fn burstgpt_days_repeats_the_day_but_not_its_bursts() {
        let requests = generate(Shape::BurstGptDays, 1);
        let day = |d: usize| -> Vec<f64> {
            requests
                .iter()
                .map(|r| r.at - d as f64 * DAY)
                .filter(|at| (0.0..DAY).contains(at))
                .collect()
        };
        let days: Vec<Vec<f64>> = (0..4).map(day).collect();
        let counts: Vec<usize> = days.iter().map(Vec::len).collect();
        let (least, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(
            *least > 1000 && (*most as f64) < 1.15 * *least as f64,
            "{counts:?}"
        );
        for (d, arrivals) in days.iter().enumerate() {
            // Each day has its night at the ends and its peak mid-day.
            let night = arrivals
                .iter()
                .filter(|t| **t < 300.0 || **t >= 3300.0)
                .count();
            let noon = arrivals
                .iter()
                .filter(|t| (1500.0..2100.0).contains(*t))
                .count();
            assert!(
                5 * night < noon,
                "day {d}: {night} at night, {noon} mid-day"
            );
        }
        // The envelope recurs, the arrivals on it do not.
        assert_ne!(days[0], days[1]);
        // And one day of it is burstgpt's day.
        let one = generate(Shape::BurstGpt, 1).len() as f64;
        assert!(
            (counts[0] as f64 - one).abs() < 0.15 * one,
            "{counts:?} against {one}"
        );
    }

    #[test]
    fn the_real_length_days_keep_the_shape_at_24_times_the_length() {
        // Requests a second over each hour of the two days, against the lab's day of an hour
        // over each 2.5 minutes (the same share of its day).
        let per_hour = |shape: Shape, seed: u64| -> Vec<f64> {
            let day = shape.day();
            let slot = day / 24.0;
            let mut counts = vec![0.0; (shape.duration() / slot) as usize];
            for r in generate(shape, seed) {
                if let Some(c) = counts.get_mut((r.at / slot) as usize) {
                    *c += 1.0 / slot;
                }
            }
            counts
        };
        for (real, lab) in [
            (Shape::Diurnal24h, Shape::Diurnal),
            (Shape::BurstGpt24h, Shape::BurstGpt),
        ] {
            assert_eq!(real.day(), 86_400.0);
            assert_eq!(real.duration(), 2.0 * real.day());
            let (long, short) = (per_hour(real, 3), per_hour(lab, 3));
            assert_eq!(long.len(), 48);
            for hour in 0..48 {
                let (got, want) = (long[hour], short[hour % 24]);
                // The same envelope (burstgpt's ripple of 400 s and its Gamma gaps average out
                // over an hour, not over the lab's 2.5 minutes).
                assert!(
                    (got - want).abs() < 0.2 * want + 0.3,
                    "{}: hour {hour} has {got:.2}/s where the lab's day has {want:.2}/s",
                    real.name()
                );
            }
            // The night is quiet, the middle of each day busy.
            assert!(
                4.0 * long[1] < long[12] && 4.0 * long[25] < long[36],
                "{long:?}"
            );
        }
    }

    #[test]
    fn the_conversation_trace_keeps_its_published_statistics() {
        let requests = generate(Shape::Conversation, 1);
        let per_second = requests.len() as f64 / Shape::Conversation.duration();
        // 5.5 req/s × 2.
        assert!((per_second - 11.0).abs() < 2.0, "{per_second}");
        let quantile = |mut v: Vec<u32>, q: f64| {
            v.sort_unstable();
            f64::from(v[(q * v.len() as f64) as usize])
        };
        let prompts: Vec<u32> = requests.iter().map(|r| r.prompt).collect();
        let outputs: Vec<u32> = requests.iter().map(|r| r.output).collect();
        // The log's p50 / p90: prompts 1,020 / 2,735, outputs 129 / 424.
        for (got, want) in [
            (quantile(prompts.clone(), 0.5), 1020.0),
            (quantile(prompts, 0.9), 2735.0),
            (quantile(outputs.clone(), 0.5), 129.0),
            (quantile(outputs, 0.9), 424.0),
        ] {
            assert!((got / want - 1.0).abs() < 0.05, "{got} for {want}");
        }
        assert!(requests.windows(2).all(|w| w[0].at <= w[1].at));
    }

    #[test]
    fn code_lengths_follow_the_code_log() {
        let requests = generate(Shape::Code, 1);
        let mut prompts: Vec<u32> = requests.iter().map(|r| r.prompt).collect();
        prompts.sort_unstable();
        let median = f64::from(prompts[prompts.len() / 2]);
        assert!((median / 1469.0 - 1.0).abs() < 0.08, "{median}");
        assert!(prompts.iter().all(|p| (3..=7437).contains(p)));
        let short = requests.iter().filter(|r| r.output <= 13).count();
        let share = short as f64 / requests.len() as f64;
        assert!((share - 0.5).abs() < 0.05, "{share}");
    }

    /// The code shape comes in bursts as the real code log does (per-minute CV 1.04, busiest
    /// minute 4.2× the mean), at the same mean rate.
    #[test]
    fn code_arrivals_come_in_bursts_like_the_code_log() {
        let (mut cvs, mut busiest_sum) = (Vec::new(), 0.0);
        for seed in 1..=4 {
            let requests = generate(Shape::Code, seed);
            let mut minutes = [0_u32; 60];
            for r in &requests {
                minutes[(r.at / 60.0) as usize % 60] += 1;
            }
            let mean = f64::from(minutes.iter().sum::<u32>()) / 60.0;
            let var = minutes
                .iter()
                .map(|m| (f64::from(*m) - mean).powi(2))
                .sum::<f64>()
                / 60.0;
            let busiest = f64::from(*minutes.iter().max().unwrap()) / mean;
            assert!((mean / 60.0 / 2.08 - 1.0).abs() < 0.25, "{mean}");
            busiest_sum += busiest;
            cvs.push(var.sqrt() / mean);
        }
        let cv = cvs.iter().sum::<f64>() / cvs.len() as f64;
        assert!((0.85..1.25).contains(&cv), "{cvs:?}");
        let busiest = busiest_sum / 4.0;
        assert!(
            (3.0..5.5).contains(&busiest),
            "busiest minute {busiest}× the mean"
        );
    }

    /// Another pod profile scales a shape's rate, keeping its lengths: twice the traffic is
    /// twice the requests of the same mix.
    #[test]
    fn traffic_scales_the_rate_and_keeps_the_mix() {
        for shape in [Shape::Conversation, Shape::Code, Shape::Step] {
            let one = generate(shape, 5);
            let two = generate_scaled(shape, 5, 2.0);
            let ratio = two.len() as f64 / one.len() as f64;
            assert!((ratio - 2.0).abs() < 0.15, "{shape:?}: {ratio}");
            let mean = |rs: &[Request]| {
                rs.iter().map(|r| f64::from(r.prompt)).sum::<f64>() / rs.len() as f64
            };
            let drift = mean(&two) / mean(&one) - 1.0;
            assert!(drift.abs() < 0.1, "{shape:?}: {drift}");
        }
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
