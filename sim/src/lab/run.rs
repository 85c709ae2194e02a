//! One run: a seeded workload replayed over a fleet of simulated vLLM pods, under one policy, as
//! a Deployment in a cluster would see it.
//!
//! Requests reach a router that sends each to a Ready pod (the pod already holding its prefix
//! when that pod is not much busier than the least busy one, otherwise the least busy); with no
//! Ready pod they wait at the router. The policy decides every period from what its own metric
//! pipeline scraped; new pods become Ready after the start-up delay (with jitter) and are scraped
//! from then on; a removed pod stops taking requests and keeps serving what it holds for the
//! drain grace, and what is left then is lost.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::lab::engine::{Arrival, Engine, Event, PodProfile};
use crate::lab::metrics::{PodSample, Scrapes};
use crate::lab::policy::{PodState, Policy, Victims, View};
use crate::lab::workload::Request;

/// How the fleet behaves, the same for every policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetSetup {
    pub profile: PodProfile,
    /// Mean seconds from a pod's creation to Ready: Pending (scheduling, a node, the image), then
    /// Running while it loads its model ([`PodProfile::model_load`] of it).
    pub startup: f64,
    /// Each pod's start-up is `startup × (1 ± jitter)`, uniformly.
    pub startup_jitter: f64,
    /// Seconds a removed pod keeps serving the requests it holds (0: they are lost at once).
    pub drain: f64,
    /// A first token later than this is a miss.
    pub slo_ttft: f64,
    /// A stream slower than this per output token, after its first, is a miss too (goodput:
    /// MLPerf's server scenario for Llama-3.1-8B asks TTFT ≤ 2 s and TPOT ≤ 100 ms).
    pub slo_tpot: f64,
    /// Simulation step, seconds.
    pub tick: f64,
    /// Pods Ready at the start of the run (every policy starts from the same fleet).
    pub initial_pods: u32,
    /// Record a timeline point every this many seconds (0: none).
    pub timeline_every: f64,
}

impl Default for FleetSetup {
    fn default() -> Self {
        Self {
            profile: PodProfile::default(),
            startup: 180.0,
            startup_jitter: 0.2,
            drain: 30.0,
            slo_ttft: 2.0,
            slo_tpot: 0.1,
            tick: 0.25,
            initial_pods: 1,
            timeline_every: 0.0,
        }
    }
}

/// A timeline point for the plots of one seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moment {
    pub at: f64,
    /// Arrivals per second over the last interval.
    pub load: f64,
    /// Requests waiting on pods or at the router.
    pub queued: u32,
    /// Replicas requested.
    pub spec: u32,
    /// Ready pods.
    pub ready: u32,
}

/// What one run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Requests that arrived during the run.
    pub arrived: u64,
    /// Requests whose last token came during the run.
    pub finished: u64,
    /// Requests still at the router or on a pod when the run ended.
    pub in_flight: u64,
    /// Requests judged: arrived, less those still within the SLO when the run ended.
    pub judged: u64,
    /// First token within the TTFT SLO, every later token within the TPOT SLO (as far as the
    /// run saw the stream), and never lost.
    pub met: u64,
    /// Judged requests whose first token was in time but whose stream was too slow.
    pub slow_streams: u64,
    pub lost: u64,
    /// Still without a first token at the end, already past the SLO.
    pub censored: u64,
    pub ttft_p50: f64,
    pub ttft_p95: f64,
    pub ttft_p99: f64,
    pub tpot_p95: f64,
    /// Pod-seconds of every pod that existed (starting, serving, draining).
    pub replica_seconds: f64,
    pub scale_actions: u32,
    /// Changes of direction less than 600 s after the previous change.
    pub oscillations: u32,
    /// Pods removed before, or within 600 s of, becoming Ready.
    pub wasted_cold_starts: u32,
    /// Ready pods removed while a colder Ready pod stayed.
    pub warm_evictions: u32,
    pub preemptions: u64,
    /// After a step: from the step to the arrival of the last request that missed.
    pub recovery: Option<f64>,
    pub peak: u32,
    pub timeline: Vec<Moment>,
}

impl Outcome {
    /// Share of judged requests that missed the SLO (late, lost or censored).
    pub fn miss_rate(&self) -> f64 {
        if self.judged == 0 {
            0.0
        } else {
            1.0 - self.met as f64 / self.judged as f64
        }
    }

    pub fn replica_hours(&self) -> f64 {
        self.replica_seconds / 3600.0
    }
}

/// What the run knows of the request it is judging.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Verdict {
    Open,
    FirstToken(f64),
    Lost,
}

struct Pod {
    state: PodState,
    /// When it leaves Pending ([`PodProfile::model_load`] before Ready).
    running_due: f64,
    ready_due: f64,
    draining_until: Option<f64>,
    engine: Engine,
    next_scrape: f64,
}

/// A pod is a routable server when it is Ready and not being removed.
fn routable(pod: &Pod) -> bool {
    pod.state.is_ready() && pod.draining_until.is_none()
}

/// Pods not Ready are never sent requests; a prefix's owner wins unless it is this much busier.
const PREFIX_SLACK: usize = 4;
/// Direction reversals and cold starts are judged over this window.
const FLAP_WINDOW: f64 = 600.0;

/// Replays `requests` (sorted by arrival) for `duration` seconds under `policy`.
pub fn run(
    requests: &[Request],
    duration: f64,
    step_at: Option<f64>,
    policy: &mut dyn Policy,
    setup: &FleetSetup,
    seed: u64,
) -> Outcome {
    let mut rng = Pcg64Mcg::seed_from_u64(seed ^ 0x5EED_F1EE7);
    let mut sim = Sim {
        setup: *setup,
        pods: Vec::new(),
        next_id: 0,
        gateway: std::collections::VecDeque::new(),
        scrapes: Scrapes::new(),
        scrape_interval: policy.scrape_interval().max(setup.tick),
        verdicts: vec![Verdict::Open; requests.len()],
        stream_tpot: vec![None; requests.len()],
        tpots: Vec::new(),
        outcome: Outcome::default(),
    };
    for _ in 0..setup.initial_pods {
        sim.add_pod(0.0, &mut rng, true);
    }
    let mut spec = setup.initial_pods;
    sim.outcome.peak = spec;
    let period = policy.period().max(setup.tick);
    let mut next_decision = period * rng.random::<f64>();
    let mut next_gateway_scrape = sim.scrape_interval * rng.random::<f64>();
    let mut next_moment = 0.0;
    let mut arrivals_since_moment = 0_u32;
    let mut changes: Vec<(f64, bool)> = Vec::new();
    let mut events = Vec::new();
    let mut next_request = 0;
    let dt = setup.tick;
    let steps = (duration / dt).round() as u64;
    for step in 0..steps {
        let now = step as f64 * dt;
        // Arrivals up to the end of this step wait at the router, then go to pods.
        while requests.get(next_request).is_some_and(|r| r.at < now + dt) {
            sim.gateway.push_back(next_request);
            next_request += 1;
            arrivals_since_moment += 1;
        }
        sim.route(requests, now);
        for pod in sim.pods.iter_mut().filter(|p| p.state.is_ready()) {
            pod.engine.tick(now, dt, &mut events);
        }
        sim.record(&events);
        events.clear();
        let end = now + dt;
        sim.outcome.replica_seconds += sim.pods.len() as f64 * dt;
        sim.settle(end);
        sim.scrape(end, &mut next_gateway_scrape);
        if end >= next_decision {
            next_decision += period;
            let states: Vec<PodState> = sim
                .pods
                .iter()
                .filter(|p| p.draining_until.is_none())
                .map(|p| p.state)
                .collect();
            let view = View {
                now: end,
                spec,
                pods: &states,
                metrics: &sim.scrapes,
            };
            let wanted = policy.decide(&view);
            if wanted != spec {
                let up = wanted > spec;
                if let Some((at, was_up)) = changes.last()
                    && *was_up != up
                    && end - at < FLAP_WINDOW
                {
                    sim.outcome.oscillations += 1;
                }
                changes.push((end, up));
                sim.outcome.scale_actions += 1;
                sim.resize(wanted, end, policy.victims(), &mut rng);
                spec = wanted;
                sim.outcome.peak = sim.outcome.peak.max(spec);
            }
        }
        if setup.timeline_every > 0.0 && end >= next_moment {
            let queued =
                sim.gateway.len() + sim.pods.iter().map(|p| p.engine.waiting()).sum::<usize>();
            sim.outcome.timeline.push(Moment {
                at: end,
                load: f64::from(arrivals_since_moment) / setup.timeline_every,
                queued: u32::try_from(queued).unwrap_or(u32::MAX),
                spec,
                ready: u32::try_from(sim.pods.iter().filter(|p| routable(p)).count())
                    .unwrap_or(u32::MAX),
            });
            arrivals_since_moment = 0;
            next_moment += setup.timeline_every;
        }
    }
    sim.outcome.preemptions += sim.pods.iter().map(|p| p.engine.preemptions).sum::<u64>();
    sim.outcome.arrived = next_request as u64;
    sim.outcome.in_flight = (sim.gateway.len()
        + sim
            .pods
            .iter()
            .map(|p| p.engine.running() + p.engine.waiting())
            .sum::<usize>()) as u64;
    sim.judge(requests, duration, step_at)
}

struct Sim {
    setup: FleetSetup,
    pods: Vec<Pod>,
    next_id: u64,
    gateway: std::collections::VecDeque<usize>,
    scrapes: Scrapes,
    scrape_interval: f64,
    verdicts: Vec<Verdict>,
    /// Each finished request's time per output token.
    stream_tpot: Vec<Option<f64>>,
    tpots: Vec<f64>,
    outcome: Outcome,
}

impl Sim {
    fn add_pod(&mut self, now: f64, rng: &mut Pcg64Mcg, ready: bool) {
        let j = self.setup.startup_jitter;
        let delay = self.setup.startup * (1.0 + j * (2.0 * rng.random::<f64>() - 1.0));
        let id = self.next_id;
        self.next_id += 1;
        let ready_due = if ready { now } else { now + delay };
        // The last part of the start-up is the model loading in a Running container.
        let running_due = ready_due - self.setup.profile.model_load.min(delay);
        self.pods.push(Pod {
            state: PodState {
                id,
                created: now,
                running_at: ready.then_some(now),
                ready_at: ready.then_some(now),
            },
            ready_due,
            running_due,
            draining_until: None,
            engine: Engine::new(self.setup.profile),
            next_scrape: ready_due + self.scrape_interval * rng.random::<f64>(),
        });
    }

    /// Sends what waits at the router to Ready pods. A request reaches its pod at `now` if it
    /// waited at the router (vLLM's own latency histograms start there, as they do in a cluster,
    /// where the engine never sees a gateway's queue); the run judges it from its arrival.
    fn route(&mut self, requests: &[Request], now: f64) {
        while let Some(&index) = self.gateway.front() {
            let load = |p: &Pod| p.engine.running() + p.engine.waiting();
            let Some(least) = self.pods.iter().filter(|p| routable(p)).map(load).min() else {
                return;
            };
            let request = requests[index];
            let owner = request.prefix.and_then(|prefix| {
                self.pods
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| routable(p) && p.engine.has_prefix(prefix.id))
                    .filter(|(_, p)| load(p) <= least + PREFIX_SLACK)
                    .min_by_key(|(_, p)| load(p))
                    .map(|(i, _)| i)
            });
            let chosen = owner.or_else(|| {
                self.pods
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| routable(p))
                    .min_by_key(|(_, p)| load(p))
                    .map(|(i, _)| i)
            });
            let Some(i) = chosen else {
                return;
            };
            self.gateway.pop_front();
            self.pods[i].engine.push(Arrival {
                request: index,
                arrived: request.at.max(now),
                prompt: request.prompt,
                output: request.output,
                prefix: request.prefix,
            });
        }
    }

    fn record(&mut self, events: &[Event]) {
        for event in events {
            match *event {
                Event::FirstToken { request, at } => {
                    if let Some(v @ Verdict::Open) = self.verdicts.get_mut(request) {
                        *v = Verdict::FirstToken(at);
                    }
                }
                Event::Finished { request, tpot, .. } => {
                    self.outcome.finished += 1;
                    if let Some(tpot) = tpot {
                        self.tpots.push(tpot);
                        if let Some(slot) = self.stream_tpot.get_mut(request) {
                            *slot = Some(tpot);
                        }
                    }
                }
            }
        }
    }

    /// Pods whose start-up is over become Ready; drained pods go, with what they still hold.
    fn settle(&mut self, now: f64) {
        for pod in &mut self.pods {
            if pod.state.running_at.is_none() && pod.running_due <= now {
                pod.state.running_at = Some(pod.running_due);
            }
            if pod.state.ready_at.is_none() && pod.ready_due <= now {
                pod.state.ready_at = Some(pod.ready_due);
            }
        }
        let mut i = 0;
        while i < self.pods.len() {
            let pod = &mut self.pods[i];
            let done = pod
                .draining_until
                .is_some_and(|until| until <= now || pod.engine.is_idle());
            if done {
                for request in pod.engine.drain_all() {
                    if let Some(v) = self.verdicts.get_mut(request) {
                        *v = Verdict::Lost;
                        self.outcome.lost += 1;
                    }
                }
                self.outcome.preemptions += pod.engine.preemptions;
                self.scrapes.forget(pod.state.id);
                self.pods.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    fn scrape(&mut self, now: f64, next_gateway: &mut f64) {
        for pod in self.pods.iter_mut().filter(|p| p.state.is_ready()) {
            while pod.next_scrape <= now {
                self.scrapes.record(
                    pod.state.id,
                    pod.next_scrape,
                    PodSample {
                        running: pod.engine.running() as f64,
                        waiting: pod.engine.waiting() as f64,
                        kv_usage: pod.engine.kv_usage(),
                    },
                );
                self.scrapes
                    .record_exported(pod.state.id, pod.next_scrape, *pod.engine.exported());
                pod.next_scrape += self.scrape_interval;
            }
        }
        while *next_gateway <= now {
            self.scrapes
                .record_gateway(*next_gateway, self.gateway.len() as f64);
            *next_gateway += self.scrape_interval;
        }
    }

    /// Brings the pods that are not being removed to `wanted`.
    fn resize(&mut self, wanted: u32, now: f64, victims: Victims, rng: &mut Pcg64Mcg) {
        let active = self
            .pods
            .iter()
            .filter(|p| p.draining_until.is_none())
            .count();
        let wanted = wanted as usize;
        for _ in active..wanted {
            self.add_pod(now, rng, false);
        }
        if active <= wanted {
            return;
        }
        // The ReplicaSet removes pods not yet Ready first, newest first; then Ready pods in the
        // policy's order.
        let mut order: Vec<usize> = (0..self.pods.len())
            .filter(|i| self.pods[*i].draining_until.is_none())
            .collect();
        order.sort_by(|a, b| {
            let (pa, pb) = (&self.pods[*a], &self.pods[*b]);
            let ready = pa.state.is_ready().cmp(&pb.state.is_ready());
            let rank = match victims {
                Victims::ReplicaSet => pb
                    .state
                    .ready_at
                    .unwrap_or(f64::MAX)
                    .total_cmp(&pa.state.ready_at.unwrap_or(f64::MAX)),
                Victims::Coldest => pa.engine.warmth().total_cmp(&pb.engine.warmth()),
            };
            ready.then(rank).then(pb.state.id.cmp(&pa.state.id))
        });
        let chosen: Vec<usize> = order.iter().copied().take(active - wanted).collect();
        let coldest_staying = order
            .iter()
            .skip(active - wanted)
            .filter(|i| self.pods[**i].state.is_ready())
            .map(|i| self.pods[*i].engine.warmth())
            .fold(f64::INFINITY, f64::min);
        for i in chosen {
            let pod = &mut self.pods[i];
            let useful_for = pod.state.ready_at.map(|at| now - at);
            if useful_for.is_none_or(|d| d < FLAP_WINDOW) {
                self.outcome.wasted_cold_starts += 1;
            }
            if pod.state.is_ready() && pod.engine.warmth() > coldest_staying + 1.0 {
                self.outcome.warm_evictions += 1;
            }
            // A pod not yet Ready holds no requests: it goes at once.
            let grace = if pod.state.is_ready() {
                self.setup.drain
            } else {
                0.0
            };
            pod.draining_until = Some(now + grace);
        }
        self.settle(now);
    }

    fn judge(mut self, requests: &[Request], end: f64, step_at: Option<f64>) -> Outcome {
        let slo = self.setup.slo_ttft;
        let mut ttfts: Vec<f64> = Vec::with_capacity(requests.len());
        let mut last_miss_after_step: Option<f64> = None;
        for ((request, verdict), tpot) in requests.iter().zip(&self.verdicts).zip(&self.stream_tpot)
        {
            if request.at >= end {
                break;
            }
            let ttft = match *verdict {
                Verdict::FirstToken(at) => at - request.at,
                Verdict::Lost => f64::INFINITY,
                Verdict::Open if end - request.at > slo => {
                    self.outcome.censored += 1;
                    f64::INFINITY
                }
                // Still within its SLO when the run ended: not judged.
                Verdict::Open => continue,
            };
            self.outcome.judged += 1;
            // A stream still running at the end is judged on what was seen: its first token.
            let slow = ttft <= slo && tpot.is_some_and(|t| t > self.setup.slo_tpot);
            self.outcome.slow_streams += u64::from(slow);
            if ttft <= slo && !slow {
                self.outcome.met += 1;
            } else if let Some(step) = step_at
                && request.at >= step
                && request.at < step + 1800.0
            {
                last_miss_after_step = Some(request.at - step);
            }
            ttfts.push(ttft);
        }
        self.outcome.recovery = step_at.map(|_| last_miss_after_step.unwrap_or(0.0));
        ttfts.sort_unstable_by(f64::total_cmp);
        self.outcome.ttft_p50 = quantile(&ttfts, 0.50);
        self.outcome.ttft_p95 = quantile(&ttfts, 0.95);
        self.outcome.ttft_p99 = quantile(&ttfts, 0.99);
        self.tpots.sort_unstable_by(f64::total_cmp);
        self.outcome.tpot_p95 = quantile(&self.tpots, 0.95);
        self.outcome
    }
}

/// The `q` quantile of sorted values (nearest rank), 0 when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::oracle::Fixed;
    use crate::lab::workload::{Shape, generate, generate_at_rate};

    /// Switches between two sizes every five minutes, so pods start, drain and go.
    struct Seesaw {
        sizes: (u32, u32),
        victims: Victims,
    }

    impl Policy for Seesaw {
        fn label(&self) -> String {
            "seesaw".into()
        }
        fn period(&self) -> f64 {
            15.0
        }
        fn victims(&self) -> Victims {
            self.victims
        }
        fn decide(&mut self, view: &View<'_>) -> u32 {
            if ((view.now / 300.0) as u64).is_multiple_of(2) {
                self.sizes.0
            } else {
                self.sizes.1
            }
        }
    }

    fn setup(pods: u32) -> FleetSetup {
        FleetSetup {
            startup: 60.0,
            initial_pods: pods,
            ..FleetSetup::default()
        }
    }

    #[test]
    fn every_arrival_is_finished_lost_or_in_flight() {
        let requests = generate(Shape::Conversation, 3);
        for drain in [0.0, 30.0] {
            let mut policy = Seesaw {
                sizes: (12, 5),
                victims: Victims::ReplicaSet,
            };
            let o = run(
                &requests,
                1800.0,
                None,
                &mut policy,
                &FleetSetup { drain, ..setup(12) },
                3,
            );
            assert!(o.arrived > 10_000, "{}", o.arrived);
            assert_eq!(
                o.arrived,
                o.finished + o.lost + o.in_flight,
                "drain {drain}: {o:?}"
            );
            assert!(o.scale_actions >= 5 && o.wasted_cold_starts > 0, "{o:?}");
            if drain == 0.0 {
                assert!(o.lost > 0, "pods removed at once lose what they hold");
            }
        }
    }

    /// Attainment is goodput: a first token in time is not enough when the stream after it is
    /// slower than the TPOT objective.
    #[test]
    fn a_slow_stream_misses_even_with_its_first_token_in_time() {
        // Light load on plenty of pods: first tokens come at once, and each step (a token of
        // every running stream) takes 150 ms.
        let requests = generate_at_rate(Shape::Conversation, 1, 1.0, 600.0);
        let slow = PodProfile {
            step_base: 0.15,
            ..PodProfile::default()
        };
        let judge = |slo_tpot: f64| {
            let setup = FleetSetup {
                profile: slow,
                slo_tpot,
                ..setup(8)
            };
            run(&requests, 600.0, None, &mut Fixed(8), &setup, 1)
        };
        let strict = judge(0.1);
        let lenient = judge(1.0);
        assert!(lenient.miss_rate() < 0.01, "{lenient:?}");
        assert_eq!(lenient.slow_streams, 0);
        // Every stream of more than one token is too slow at 100 ms.
        assert!(
            strict.slow_streams > 0 && strict.miss_rate() > 0.5,
            "{strict:?}"
        );
        assert_eq!(strict.judged, lenient.judged);
        assert_eq!(strict.met + strict.slow_streams, lenient.met);
    }

    /// Reads the fleet's latency from the scraped histograms, as a policy would in a cluster.
    struct LatencyReader {
        pods: u32,
        /// (p99 TTFT, median ITL, generation tokens) over the last minute, at each decision.
        seen: Vec<(Option<f64>, Option<f64>, u64)>,
    }

    impl Policy for LatencyReader {
        fn label(&self) -> String {
            "latency reader".into()
        }
        fn period(&self) -> f64 {
            60.0
        }
        fn decide(&mut self, view: &View<'_>) -> u32 {
            let minute = view.metrics.increase(view.now, 60.0);
            self.seen.push((
                minute.ttft.quantile(0.5),
                minute.itl.quantile(0.5),
                minute.generation_tokens,
            ));
            self.pods
        }
    }

    /// The scrapes carry vLLM's histograms and counters: the latency a policy reads from them
    /// is the latency the requests had.
    #[test]
    fn the_scraped_histograms_tell_the_latency_the_requests_had() {
        let requests = generate_at_rate(Shape::Conversation, 1, 4.0, 900.0);
        let read = |pods: u32| {
            let mut reader = LatencyReader {
                pods,
                seen: Vec::new(),
            };
            let outcome = run(&requests, 900.0, None, &mut reader, &setup(pods), 1);
            (reader.seen, outcome)
        };
        // Plenty of pods: the median first token within a second (the longest prompts take
        // seconds to prefill on any pod), tokens a step (about 65 ms) apart.
        let (calm, calm_outcome) = read(16);
        let late: Vec<_> = calm[2..].iter().collect();
        assert!(
            late.iter().all(|(p50, _, _)| p50.is_some_and(|v| v < 1.0)),
            "{calm:?}"
        );
        assert!(
            late.iter()
                .all(|(_, itl, _)| itl.is_some_and(|v| (0.025..=0.1).contains(&v))),
            "{calm:?}"
        );
        // A minute's tokens at 4 requests/s of ~140-token answers: thousands.
        assert!(
            late.iter().all(|(_, _, tokens)| *tokens > 5_000),
            "{calm:?}"
        );
        assert!(calm_outcome.ttft_p50 < 1.0, "{calm_outcome:?}");
        // One pod for the same load: the queue grows and the histograms say so.
        let (swamped, swamped_outcome) = read(1);
        assert!(swamped_outcome.ttft_p99 > 2.0, "{swamped_outcome:?}");
        assert!(
            swamped[2..]
                .iter()
                .any(|(p50, _, _)| p50.is_some_and(|v| v > 2.0)),
            "{swamped:?}"
        );
    }

    /// vLLM's histograms start when a request reaches the engine: the time a request waited
    /// at the router for a first pod is in the run's judgement, not in what the pod exports.
    #[test]
    fn the_pods_histograms_do_not_see_the_routers_wait() {
        let requests = generate_at_rate(Shape::Conversation, 1, 0.5, 600.0);
        let mut reader = LatencyReader {
            pods: 2,
            seen: Vec::new(),
        };
        // No pod at first: the first requests wait ≈60 s for the pods asked for at once.
        let outcome = run(&requests, 600.0, None, &mut reader, &setup(0), 1);
        assert!(outcome.ttft_p95 > 40.0, "{outcome:?}");
        // The backlog reaches the two pods at once and queues there for seconds, not the
        // minute it waited before.
        let medians: Vec<f64> = reader.seen.iter().filter_map(|(p50, _, _)| *p50).collect();
        assert!(!medians.is_empty());
        assert!(medians.iter().all(|m| *m < 20.0), "{:?}", reader.seen);
    }

    /// Grows the fleet at its first decision and records what it is shown.
    struct Watcher {
        seen: Vec<(f64, Vec<PodState>, Vec<u64>)>,
    }

    impl Policy for Watcher {
        fn label(&self) -> String {
            "watcher".into()
        }
        fn period(&self) -> f64 {
            5.0
        }
        fn decide(&mut self, view: &View<'_>) -> u32 {
            let scraped = view
                .metrics
                .latest(view.now, crate::lab::metrics::Gauge::Running)
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            self.seen.push((view.now, view.pods.to_vec(), scraped));
            8
        }
    }

    #[test]
    fn new_pods_are_ready_after_a_jittered_start_up_and_never_scraped_before() {
        let requests = generate_at_rate(Shape::Conversation, 1, 4.0, 600.0);
        let mut watcher = Watcher { seen: Vec::new() };
        run(&requests, 600.0, None, &mut watcher, &setup(1), 1);
        let (_, last, _) = watcher.seen.last().unwrap();
        assert_eq!(last.len(), 8);
        let delays: Vec<f64> = last
            .iter()
            .filter(|p| p.created > 0.0)
            .map(|p| p.ready_at.unwrap() - p.created)
            .collect();
        assert_eq!(delays.len(), 7);
        // 60 s ± 20%, and not all alike.
        assert!(
            delays.iter().all(|d| (48.0..=72.0).contains(d)),
            "{delays:?}"
        );
        assert!(
            delays.iter().any(|d| (d - delays[0]).abs() > 1.0),
            "{delays:?}"
        );
        for (now, pods, scraped) in &watcher.seen {
            for id in scraped {
                let pod = pods.iter().find(|p| p.id == *id).unwrap();
                assert!(
                    pod.ready_at.is_some_and(|at| at <= *now),
                    "{id} scraped at {now}"
                );
            }
        }
        // Every Ready pod is scraped within one interval (15 s) of becoming Ready.
        let (now, pods, scraped) = watcher.seen.last().unwrap();
        assert!(
            pods.iter()
                .all(|p| p.ready_at.is_some_and(|at| at + 15.0 <= *now))
        );
        assert_eq!(scraped.len(), 8);
    }

    /// A new pod is Pending (a node, its image), then Running for the profile's model load,
    /// then Ready: the phases `groupPods` tells apart.
    #[test]
    fn a_new_pod_is_pending_then_loads_its_model_then_is_ready() {
        let requests = generate_at_rate(Shape::Conversation, 1, 4.0, 600.0);
        let mut watcher = Watcher { seen: Vec::new() };
        let slow = FleetSetup {
            startup: 180.0,
            ..setup(1)
        };
        run(&requests, 600.0, None, &mut watcher, &slow, 1);
        let load = slow.profile.model_load;
        let (_, last, _) = watcher.seen.last().unwrap();
        let new: Vec<&PodState> = last.iter().filter(|p| p.created > 0.0).collect();
        assert_eq!(new.len(), 7);
        for pod in &new {
            let (running, ready) = (pod.running_at.unwrap(), pod.ready_at.unwrap());
            assert!((ready - running - load).abs() < 1e-9, "{pod:?}");
            assert!(running - pod.created > 60.0, "{pod:?}");
        }
        // Seen in each phase along the way.
        let phases = |p: &PodState| (p.is_pending(), p.is_ready());
        let seen: Vec<(bool, bool)> = watcher
            .seen
            .iter()
            .flat_map(|(_, pods, _)| pods.iter().filter(|p| p.created > 0.0).map(phases))
            .collect();
        for phase in [(true, false), (false, false), (false, true)] {
            assert!(seen.contains(&phase), "{phase:?} never seen");
        }
    }

    #[test]
    fn time_to_first_token_grows_with_load() {
        let p95 = |rate: f64| {
            let requests = generate_at_rate(Shape::Conversation, 1, rate, 900.0);
            run(&requests, 900.0, None, &mut Fixed(4), &setup(4), 1).ttft_p95
        };
        let (light, busy, over) = (p95(1.0), p95(3.0), p95(4.0));
        assert!(light < busy && busy < over, "{light} {busy} {over}");
    }

    #[test]
    fn shared_prefixes_lower_time_to_first_token_across_the_fleet() {
        let requests = generate_at_rate(Shape::Code, 1, 6.0, 900.0);
        let cold: Vec<Request> = requests
            .iter()
            .map(|r| Request { prefix: None, ..*r })
            .collect();
        let p50 = |rs: &[Request]| run(rs, 900.0, None, &mut Fixed(4), &setup(4), 1).ttft_p50;
        let (warm, cold) = (p50(&requests), p50(&cold));
        assert!(warm < 0.8 * cold, "warm {warm} cold {cold}");
    }

    #[test]
    fn the_same_seed_gives_the_same_run() {
        let requests = generate(Shape::BurstGpt, 5);
        let go = || {
            let mut policy = Seesaw {
                sizes: (8, 3),
                victims: Victims::Coldest,
            };
            let setup = FleetSetup {
                timeline_every: 10.0,
                ..setup(4)
            };
            format!("{:?}", run(&requests, 1200.0, None, &mut policy, &setup, 5))
        };
        assert_eq!(go(), go());
    }

    #[test]
    fn the_coldest_pods_go_first_when_asked() {
        let requests = generate(Shape::Conversation, 4);
        let evictions = |victims| {
            let mut policy = Seesaw {
                sizes: (12, 6),
                victims,
            };
            run(&requests, 1800.0, None, &mut policy, &setup(12), 4).warm_evictions
        };
        let (replicaset, coldest) = (evictions(Victims::ReplicaSet), evictions(Victims::Coldest));
        assert_eq!(coldest, 0);
        assert!(replicaset > 0, "{replicaset}");
    }

    #[test]
    fn requests_left_waiting_past_the_slo_are_misses() {
        let requests = generate_at_rate(Shape::Conversation, 2, 2.0, 300.0);
        let o = run(&requests, 300.0, None, &mut Fixed(0), &setup(0), 2);
        assert_eq!(o.met, 0);
        assert!(o.censored > 500 && o.judged == o.censored, "{o:?}");
        assert_eq!(o.in_flight, o.arrived);
        assert!(o.ttft_p50.is_infinite());
    }

    #[test]
    fn recovery_is_measured_from_the_step() {
        let requests = generate(Shape::Step, 1);
        let o = run(
            &requests,
            Shape::Step.duration(),
            Shape::Step.step_at(),
            &mut Fixed(4),
            &setup(4),
            1,
        );
        // Four pods cannot carry the step: misses continue until the load falls back.
        let recovery = o.recovery.unwrap();
        assert!(recovery > 1000.0, "{recovery}");
    }
}
