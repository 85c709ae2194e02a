//! The lower bound: a policy that knows every arrival in advance and what one pod can serve.
//!
//! At each decision it asks for the pods the busiest minute will need from now until a pod it
//! asks for now would be Ready (the slowest start-up): a pod removed now cannot be back sooner,
//! and a pod added now serves nobody before then. No real autoscaler can know this; the gap
//! between a policy and the oracle is what better control could still win.

use std::collections::VecDeque;

use crate::lab::policy::{Bounds, Policy, Victims, View};
use crate::lab::run::{FleetSetup, run};
use crate::lab::traces::Trace;
use crate::lab::workload::Request;

/// Every arrival time of a workload, in order: what the oracle and the reactive bound know.
struct Arrivals(Vec<f64>);

impl Arrivals {
    fn of(requests: &[Request]) -> Self {
        Self(requests.iter().map(|r| r.at).collect())
    }

    /// The highest rate (requests/s) of the minutes starting at `starts`.
    fn busiest(&self, starts: impl Iterator<Item = f64>) -> f64 {
        starts
            .map(|from| {
                let start = self.0.partition_point(|t| *t < from);
                let end = self.0.partition_point(|t| *t < from + MINUTE);
                (end - start) as f64 / MINUTE
            })
            .fold(0.0, f64::max)
    }

    /// The highest rate of the minutes ending at `last`, a period before it, … back to `span`
    /// before it (none starting before the run).
    fn busiest_ending(&self, last: f64, span: f64) -> f64 {
        self.busiest(every_period(0.0, span).map(|back| (last - back - MINUTE).max(0.0)))
    }
}

/// `from`, `from + PERIOD`, … up to `to`.
fn every_period(from: f64, to: f64) -> impl Iterator<Item = f64> {
    (0..)
        .map(move |i| from + PERIOD * f64::from(i))
        .take_while(move |t| *t <= to)
}

pub struct Oracle {
    arrivals: Arrivals,
    /// Requests per second one pod serves within the SLO.
    per_pod: f64,
    /// How far ahead it looks: the slowest start-up.
    lead: f64,
    /// When the workload ends: no window reaches past it.
    end: f64,
    bounds: Bounds,
}

impl Oracle {
    pub fn new(requests: &[Request], end: f64, per_pod: f64, lead: f64, bounds: Bounds) -> Self {
        Self {
            arrivals: Arrivals::of(requests),
            per_pod: per_pod.max(1e-6),
            lead,
            end,
            bounds,
        }
    }
}

/// The oracle decides this often.
const PERIOD: f64 = 15.0;
const MINUTE: f64 = 60.0;

impl Policy for Oracle {
    fn label(&self) -> String {
        "oracle (knows the future)".to_owned()
    }

    fn period(&self) -> f64 {
        PERIOD
    }

    fn victims(&self) -> Victims {
        Victims::Coldest
    }

    fn decide(&mut self, view: &View<'_>) -> u32 {
        let horizon = view.now + self.lead + PERIOD;
        let last_start = (self.end - MINUTE).max(0.0);
        let busiest = self
            .arrivals
            .busiest(every_period(view.now, horizon).map(|start| start.min(last_start)));
        self.bounds.clamp((busiest / self.per_pod).ceil() as i64)
    }
}

/// The replica-hours below which no policy could attain the SLO on `requests`: a fleet that
/// knows every arrival and whose pods start at once, sized minute by minute for that minute's
/// arrivals at `per_pod` requests/s each (and never below `min` pods). A policy's replica-hours
/// over this are what it spent on waiting for pods, headroom and mistakes.
pub fn cost_bound(requests: &[Request], duration: f64, per_pod: f64, min: u32) -> f64 {
    if duration <= 0.0 {
        return 0.0;
    }
    let minutes = (duration / MINUTE).ceil() as usize;
    let mut arrivals = vec![0_u64; minutes];
    for r in requests.iter().filter(|r| (0.0..duration).contains(&r.at)) {
        if let Some(count) = arrivals.get_mut((r.at / MINUTE) as usize) {
            *count += 1;
        }
    }
    let per_pod = per_pod.max(1e-6);
    let pod_seconds: f64 = arrivals
        .iter()
        .enumerate()
        .map(|(i, &count)| {
            let length = (duration - MINUTE * i as f64).min(MINUTE);
            let pods = (count as f64 / length / per_pod).ceil().max(f64::from(min));
            pods * length
        })
        .sum();
    pod_seconds / 3600.0
}

/// The oracle's mirror image, what control without a forecast can do at best: a fleet that
/// knows what one pod serves and every arrival so far, and nothing of what comes next. It asks
/// for a headroom times what the busiest minute needed over the last `lead` seconds (the oracle
/// looks as far ahead), so it holds a fleet through a start-up as the oracle does, without
/// churning on every minute's noise. A policy that reads only the present (requests in flight,
/// a latency histogram, a queue) knows less than this, so the headroom this fleet needs to
/// reach a goodput on a trace is about what any such policy must hold there. Its verdict is
/// the price of not knowing the future, apart from the price of learning the capacity: on a
/// step, where nothing in the minutes before tells the rise is coming, the headroom that rides
/// it is paid through every flat stretch that looks the same.
pub struct Reactive {
    arrivals: Arrivals,
    /// Requests per second one pod serves within the SLO.
    per_pod: f64,
    headroom: Headroom,
    /// How far back it looks: the slowest start-up.
    lead: f64,
    bounds: Bounds,
}

/// The reactive bound's headroom: one given, or the one it measures.
enum Headroom {
    Given(f64),
    Measured(Rises),
}

/// The rises over one start-up the measured-headroom bound has seen.
#[derive(Default)]
struct Rises {
    /// Each decision's time and the busiest minute it sized for, until a start-up has passed.
    pending: VecDeque<(f64, f64)>,
    /// The decision's time and the busiest minute of the start-up after it over the one it
    /// sized for (at least 1), for the last [`MEASURED_MEMORY`] seconds.
    seen: VecDeque<(f64, f64)>,
}

/// How every reactive bound's label begins: its settings are told from the oracle's (the same
/// family in the results) by it.
pub const REACTIVE: &str = "reactive bound";

/// Whether a setting's label is one of the reactive bound's given headrooms.
pub fn is_reactive(label: &str) -> bool {
    label.starts_with(REACTIVE)
}

/// The measured-headroom bound's label (not one of the reactive bound's given headrooms: the
/// verdict judges it apart).
pub const MEASURED: &str = "measured-headroom bound";
/// Its headroom before it has measured [`MEASURED_WARM`] rises.
pub const MEASURED_INITIAL: f64 = 1.5;
pub const MEASURED_WARM: usize = 4;
/// Seconds a measured rise counts for.
pub const MEASURED_MEMORY: f64 = 1200.0;

impl Reactive {
    pub fn new(
        requests: &[Request],
        per_pod: f64,
        headroom: f64,
        lead: f64,
        bounds: Bounds,
    ) -> Self {
        Self::with(requests, per_pod, Headroom::Given(headroom), lead, bounds)
    }

    /// The measured-headroom bound: the headroom it holds is the largest rise over one start-up
    /// it has seen in the last [`MEASURED_MEMORY`] seconds (for each decision a start-up old,
    /// the busiest minute that start-up brought over the busiest it sized for then), and
    /// [`MEASURED_INITIAL`] until it has seen [`MEASURED_WARM`]. It sizes its margin from the
    /// traffic's own variability, as scaling to an objective is asked to: what that buys a
    /// policy that knows each pod's capacity and cannot see the future, with nothing tuned per
    /// trace.
    pub fn measured(requests: &[Request], per_pod: f64, lead: f64, bounds: Bounds) -> Self {
        let headroom = Headroom::Measured(Rises::default());
        Self::with(requests, per_pod, headroom, lead, bounds)
    }

    fn with(
        requests: &[Request],
        per_pod: f64,
        headroom: Headroom,
        lead: f64,
        bounds: Bounds,
    ) -> Self {
        Self {
            arrivals: Arrivals::of(requests),
            per_pod: per_pod.max(1e-6),
            headroom,
            lead,
            bounds,
        }
    }
}

impl Rises {
    /// The headroom for a decision at `now` that sizes for `busiest`, having measured what
    /// followed every decision a start-up old; the decision is kept to be measured in turn.
    fn headroom(&mut self, arrivals: &Arrivals, lead: f64, now: f64, busiest: f64) -> f64 {
        while let Some(&(at, held)) = self.pending.front() {
            if at + lead > now {
                break;
            }
            self.pending.pop_front();
            if held <= 0.0 || at < MINUTE {
                // Nothing held, or a first minute not yet whole: no ratio to measure.
                continue;
            }
            // The minutes ending within the start-up after `at`, all of them over by now.
            let ahead = arrivals.busiest_ending(at + lead, lead);
            self.seen.push_back((at, (ahead / held).max(1.0)));
        }
        while self
            .seen
            .front()
            .is_some_and(|(at, _)| *at < now - MEASURED_MEMORY)
        {
            self.seen.pop_front();
        }
        self.pending.push_back((now, busiest));
        if self.seen.len() < MEASURED_WARM {
            return MEASURED_INITIAL;
        }
        self.seen.iter().map(|(_, r)| *r).fold(1.0, f64::max)
    }
}

impl Policy for Reactive {
    fn label(&self) -> String {
        match self.headroom {
            Headroom::Given(headroom) => format!("{REACTIVE} ×{headroom} headroom"),
            Headroom::Measured(_) => MEASURED.to_owned(),
        }
    }

    fn period(&self) -> f64 {
        PERIOD
    }

    fn victims(&self) -> Victims {
        Victims::Coldest
    }

    fn decide(&mut self, view: &View<'_>) -> u32 {
        // The minutes ending between `lead` (and a period) ago and now, as the oracle's start
        // between now and `lead` ahead.
        let busiest = self.arrivals.busiest_ending(view.now, self.lead + PERIOD);
        let headroom = match &mut self.headroom {
            Headroom::Given(headroom) => *headroom,
            Headroom::Measured(rises) => {
                rises.headroom(&self.arrivals, self.lead, view.now, busiest)
            }
        };
        self.bounds
            .clamp((busiest * headroom / self.per_pod).ceil() as i64)
    }
}

/// A fleet held at a fixed size (for calibration and tests).
pub struct Fixed(pub u32);

impl Policy for Fixed {
    fn label(&self) -> String {
        format!("fixed {}", self.0)
    }

    fn period(&self) -> f64 {
        PERIOD
    }

    fn decide(&mut self, _: &View<'_>) -> u32 {
        self.0
    }
}

/// Requests per second one pod serves within the SLO, for the request mix of `trace`: the
/// highest rate at which four warm pods miss at most one request in a hundred more than they do
/// when nearly idle (some prompts are too long to prefill within the SLO on any pod), over four.
pub fn per_pod_capacity(trace: &Trace, fleet: &FleetSetup) -> f64 {
    const PODS: u32 = 4;
    const SECONDS: f64 = 900.0;
    let setup = FleetSetup {
        initial_pods: PODS,
        timeline_every: 0.0,
        ..*fleet
    };
    let misses = |rate: f64| {
        let requests = trace.at_rate(1, rate, SECONDS, &setup.profile);
        run(&requests, SECONDS, None, &mut Fixed(PODS), &setup, 1).miss_rate()
    };
    let floor = misses(0.2);
    let within = |rate: f64| misses(rate) <= floor + 0.01;
    let (mut lo, mut hi) = (0.2, 1.0);
    while within(hi) && hi < 1000.0 {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..10 {
        let mid = 0.5 * (lo + hi);
        if within(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo / f64::from(PODS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short request arriving at `t`.
    fn at(t: f64) -> Request {
        Request {
            at: t,
            prompt: 100,
            output: 10,
            prefix: None,
        }
    }

    #[test]
    fn the_bound_sizes_each_minute_for_its_own_arrivals() {
        // Minute 0: 120 arrivals (2/s, two pods at 1/s each); minute 1: none; minute 2: 30
        // arrivals in its first half (one pod for the whole minute).
        let mut requests: Vec<Request> = (0..120).map(|i| at(f64::from(i) * 0.5)).collect();
        requests.extend((0..30).map(|i| at(120.0 + f64::from(i))));
        let hours = |min| cost_bound(&requests, 180.0, 1.0, min);
        assert!(
            (hours(0) - 3.0 * 60.0 / 3600.0).abs() < 1e-9,
            "{}",
            hours(0)
        );
        // With a floor of one pod, the empty minute costs one pod too.
        assert!(
            (hours(1) - 4.0 * 60.0 / 3600.0).abs() < 1e-9,
            "{}",
            hours(1)
        );
        // A last, partial minute is paid for what it lasts.
        let short = cost_bound(&requests, 150.0, 1.0, 0);
        assert!(
            (short - (2.0 * 60.0 + 30.0) / 3600.0).abs() < 1e-9,
            "{short}"
        );
        assert_eq!(cost_bound(&requests, 0.0, 1.0, 1), 0.0);
    }

    #[test]
    fn the_reactive_bound_holds_the_busiest_minute_it_has_seen_and_knows_nothing_ahead() {
        // 2 requests a second in the first minute, none for four minutes, then 4 a second.
        let mut requests: Vec<Request> = (0..120).map(|i| at(f64::from(i) * 0.5)).collect();
        requests.extend((0..240).map(|i| at(300.0 + f64::from(i) * 0.25)));
        let bounds = Bounds { min: 1, max: 64 };
        let mut reactive = Reactive::new(&requests, 1.0, 1.5, 120.0, bounds);
        let metrics = crate::lab::metrics::Scrapes::new();
        let mut ask = |now: f64| {
            reactive.decide(&View {
                now,
                spec: 1,
                pods: &[],
                metrics: &metrics,
            })
        };
        // The first minute needs 2 pods; with 1.5× headroom, 3.
        assert_eq!(ask(60.0), 3);
        // It holds them while that minute is within the last start-up (120 s, and a period)…
        assert_eq!(ask(180.0), 3);
        // …and then lets them go to the floor: nothing ahead is known.
        assert_eq!(ask(299.0), 1);
        // A minute into the rise, it asks for what that minute needed.
        assert_eq!(ask(360.0), 6);
    }

    #[test]
    fn the_measured_headroom_is_the_largest_rise_a_start_up_brought_lately() {
        // 1 request a second for ten minutes, then 3 a second for an hour.
        let mut requests: Vec<Request> = (0..600).map(|i| at(f64::from(i))).collect();
        requests.extend((0..10_800).map(|i| at(600.0 + f64::from(i) / 3.0)));
        let bounds = Bounds { min: 1, max: 64 };
        let mut measured = Reactive::measured(&requests, 1.0, 120.0, bounds);
        let metrics = crate::lab::metrics::Scrapes::new();
        let mut asked = std::collections::BTreeMap::new();
        let mut now = 0.0;
        while now <= 2400.0 {
            let pods = measured.decide(&View {
                now,
                spec: 1,
                pods: &[],
                metrics: &metrics,
            });
            asked.insert(now as u32, pods);
            now += PERIOD;
        }
        // Before four rises are measured, 1.5× the busiest minute (1 a second: 2 pods).
        assert_eq!(asked[&60], 2);
        // Flat traffic measures no rise: the fleet is what the busiest minute needs.
        assert_eq!(asked[&300], 1);
        // The rise is not foreseen…
        assert_eq!(asked[&600], 1);
        // …but once it is seen, the fleet holds for another as large (3×) on top of it.
        assert_eq!(asked[&660], 9);
        assert_eq!(asked[&1500], 9);
        // Twenty minutes on, that rise is forgotten.
        assert_eq!(asked[&1905], 3);
    }

    #[test]
    fn one_l4_pod_serves_a_fraction_of_a_conversation_request_a_second() {
        // Each request prefills ≈1,150 tokens (≈0.34 s of an L4) and streams ≈210 tokens, and
        // a 2,048-token prefill chunk stalls every stream for ≈0.6 s: the TPOT objective binds.
        let conversation = Trace::Synthetic(crate::lab::workload::Shape::Conversation);
        let c = per_pod_capacity(&conversation, &FleetSetup::default());
        assert!(c > 0.2 && c < 1.0, "{c}");
    }
}
