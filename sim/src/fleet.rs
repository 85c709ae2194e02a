//! The fleet: pods with a KV-cache capacity and a token throughput, requests routed to the least
//! busy useful pod, queued where the cache or the batch is full.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::trace::{Shape, Trace};

/// vLLM 0.33's buckets for `vllm:time_to_first_token_seconds` (`vllm/v1/metrics/buckets.py`),
/// so a quantile over the simulator interpolates between the same bounds as over vLLM.
pub const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// vLLM 0.33's buckets for `vllm:inter_token_latency_seconds`.
pub const ITL_BUCKETS: [f64; 19] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];

/// vLLM 0.33's buckets for its per-request phase histograms: `vllm:e2e_request_latency_seconds`
/// and `vllm:request_queue_time_seconds` (and prefill, decode, inference time, which the
/// simulator does not export).
pub const REQUEST_LATENCY_BUCKETS: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// The model a pod serves unless told otherwise: the one the vLLM fixture was scraped from.
pub const DEFAULT_MODEL_NAME: &str = "meta-llama/Llama-3.1-8B-Instruct";

#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    /// Tokens of KV cache each pod holds.
    pub kv_capacity_tokens: u64,
    /// Output tokens per second a pod produces in all, shared by its running requests.
    pub decode_tokens_per_second: f64,
    /// The most one request can get of that.
    pub max_tokens_per_request_second: f64,
    /// Requests a pod runs at once.
    pub max_batch: usize,
    /// From admission to the first token.
    pub prefill: Duration,
    /// From a pod's appearance (Ready) to its first request: model load, warm-up.
    pub startup_delay: Duration,
    /// Requests whose time to first token exceeds this are SLO violations.
    pub ttft_slo: Duration,
    /// What the pods serve (vLLM's `--served-model-name`): the `model_name` label of their
    /// metrics. Here rather than in the live options so that callers building a config with
    /// `..FleetConfig::default()` keep compiling.
    pub model_name: String,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            kv_capacity_tokens: 64 * 1024,
            decode_tokens_per_second: 1500.0,
            max_tokens_per_request_second: 60.0,
            max_batch: 64,
            prefill: Duration::from_millis(150),
            startup_delay: Duration::from_secs(20),
            ttft_slo: Duration::from_secs(2),
            model_name: DEFAULT_MODEL_NAME.to_owned(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Request {
    arrived: Duration,
    shape: Shape,
}

#[derive(Debug, Clone, Copy)]
struct Running {
    remaining_output: f64,
    kv: u64,
    output: u32,
    /// Whole tokens streamed so far: the model decodes fractions of a token per step, a client
    /// only ever sees whole ones.
    streamed: u32,
    /// From arrival to admission (vLLM: queued to scheduled), seconds.
    queued: f64,
    /// Time spent in decode steps so far, seconds.
    decoding: f64,
}

/// A cumulative histogram, as Prometheus exports one.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    pub bounds: &'static [f64],
    /// `buckets[i]` counts the observations `<= bounds[i]`; the +Inf bucket is `count`.
    pub buckets: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        self.observe_n(value, 1);
    }

    /// `n` observations of the same value: the model's tokens within a step are evenly spaced.
    pub fn observe_n(&mut self, value: f64, n: u64) {
        if n == 0 {
            return;
        }
        for (bucket, le) in self.buckets.iter_mut().zip(self.bounds) {
            if value <= *le {
                *bucket += n;
            }
        }
        self.sum += value * n as f64;
        self.count += n;
    }
}

/// What a pod has exported so far (counters only grow).
#[derive(Debug, Clone, PartialEq)]
pub struct PodCounters {
    pub prompt_tokens: u64,
    /// Whole tokens streamed.
    pub generation_tokens: u64,
    /// Requests that ran to their end (vLLM's `finished_reason="stop"`).
    pub finished: u64,
    /// Observed at admission, when the model's first token is due.
    pub ttft: Histogram,
    /// Each gap between two streamed tokens of a request (not the first token: that is TTFT).
    pub itl: Histogram,
    /// Arrival to admission, observed when the request finishes, as vLLM does.
    pub queue: Histogram,
    /// Arrival to the last token, observed when the request finishes.
    pub e2e: Histogram,
}

impl Default for PodCounters {
    fn default() -> Self {
        Self {
            prompt_tokens: 0,
            generation_tokens: 0,
            finished: 0,
            ttft: Histogram::new(&TTFT_BUCKETS),
            itl: Histogram::new(&ITL_BUCKETS),
            queue: Histogram::new(&REQUEST_LATENCY_BUCKETS),
            e2e: Histogram::new(&REQUEST_LATENCY_BUCKETS),
        }
    }
}

#[derive(Debug, Clone)]
struct Pod {
    useful_at: Duration,
    running: Vec<Running>,
    waiting: VecDeque<Request>,
    kv_used: u64,
    counters: PodCounters,
}

impl Pod {
    /// An empty pod, cold cache, that takes requests from `useful_at`.
    fn useful_from(useful_at: Duration) -> Self {
        Self {
            useful_at,
            running: Vec::new(),
            waiting: VecDeque::new(),
            kv_used: 0,
            counters: PodCounters::default(),
        }
    }
}

/// One pod as its metrics show it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView<'a> {
    pub name: &'a str,
    pub running: usize,
    pub waiting: usize,
    /// 0 to 1, as `vllm:kv_cache_usage_perc`.
    pub kv_usage: f64,
    /// Past its start-up delay.
    pub useful: bool,
    pub counters: &'a PodCounters,
}

/// The run so far, for judging a policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub arrived: u64,
    pub finished: u64,
    /// In flight or queued on a pod when it went away.
    pub lost: u64,
    /// Requests whose first token came later than the SLO.
    pub slo_violations: u64,
    /// Pods removed while a pod with a colder cache lived on.
    pub warm_evictions: u64,
    /// Sum over time of the pods that existed: what the fleet cost.
    pub pod_seconds: f64,
}

#[derive(Debug, Clone)]
pub struct Fleet {
    config: FleetConfig,
    now: Duration,
    pods: BTreeMap<String, Pod>,
    /// Requests that arrived while no pod was useful.
    pending: VecDeque<Request>,
    /// Fractional arrivals carried to the next step, so a rate of 0.5/s is one request every 2 s.
    carry: f64,
    totals: Totals,
}

impl Fleet {
    pub fn new(config: FleetConfig) -> Self {
        Self {
            config,
            now: Duration::ZERO,
            pods: BTreeMap::new(),
            pending: VecDeque::new(),
            carry: 0.0,
            totals: Totals::default(),
        }
    }

    pub fn now(&self) -> Duration {
        self.now
    }

    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// Requests waiting anywhere, on a pod or for one.
    pub fn queued(&self) -> usize {
        self.pending.len() + self.pods.values().map(|p| p.waiting.len()).sum::<usize>()
    }

    /// Requests that arrived while no pod could take them.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The pods that exist now (e.g. the Ready pods of the Deployment). New names start cold,
    /// useful after the start-up delay; names no longer listed are gone, with their cache and
    /// every request they held.
    pub fn set_pods<I, S>(&mut self, names: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let wanted: std::collections::BTreeSet<String> =
            names.into_iter().map(Into::into).collect();
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|name| !wanted.contains(*name))
            .cloned()
            .collect();
        // Judged against the pods that stay, not against others leaving in the same change.
        let coldest_survivor = self
            .pods
            .iter()
            .filter(|(name, _)| wanted.contains(*name))
            .map(|(_, p)| p.kv_used)
            .min();
        for name in gone {
            if let Some(pod) = self.pods.remove(&name) {
                self.totals.lost += (pod.running.len() + pod.waiting.len()) as u64;
                if coldest_survivor.is_some_and(|coldest| coldest < pod.kv_used) {
                    self.totals.warm_evictions += 1;
                }
            }
        }
        let useful_at = self.now + self.config.startup_delay;
        for name in wanted {
            self.pods
                .entry(name)
                .or_insert_with(|| Pod::useful_from(useful_at));
        }
    }

    /// Pods that were loaded before the run began (the Deployment's pods when a live run
    /// starts): useful at once. Counted as cold, the first pod of a demo would queue its first
    /// start-up delay of requests and the fleet would open on a scale-up nobody asked for.
    pub fn warm_pods<I, S>(&mut self, names: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let now = self.now;
        for name in names {
            self.pods
                .entry(name.into())
                .or_insert_with(|| Pod::useful_from(now));
        }
    }

    pub fn pods(&self) -> impl Iterator<Item = PodView<'_>> {
        let capacity = self.config.kv_capacity_tokens.max(1) as f64;
        self.pods.iter().map(move |(name, pod)| PodView {
            name,
            running: pod.running.len(),
            waiting: pod.waiting.len(),
            kv_usage: pod.kv_used as f64 / capacity,
            useful: pod.useful_at <= self.now,
            counters: &pod.counters,
        })
    }

    /// Moves time on by `dt` under the load `trace` describes, in steps of at most 100 ms so a
    /// coarse caller (a fast replay, a benchmark) does not add its step to every first token.
    pub fn step(&mut self, dt: Duration, trace: &Trace) {
        const FINEST: Duration = Duration::from_millis(100);
        let mut left = dt;
        while !left.is_zero() {
            let d = left.min(FINEST);
            self.step_once(d, trace);
            left -= d;
        }
    }

    fn step_once(&mut self, dt: Duration, trace: &Trace) {
        let dt_s = dt.as_secs_f64();
        self.totals.pod_seconds += self.pods.len() as f64 * dt_s;
        // Arrivals over the step, spread as if they came at its start.
        self.carry += trace.rate(self.now) * dt_s;
        let shape = trace.shape(self.now);
        // The epsilon keeps 10 steps of 0.1 requests from summing to 0.999... and losing one.
        while self.carry >= 1.0 - 1e-9 {
            self.carry -= 1.0;
            self.totals.arrived += 1;
            self.pending.push_back(Request {
                arrived: self.now,
                shape,
            });
        }
        self.now += dt;
        self.route();
        // Borrowed, not cloned: the config holds a String and this runs ten times a second.
        let config = &self.config;
        let now = self.now;
        let mut slo_violations = 0;
        let mut finished = 0;
        for pod in self.pods.values_mut().filter(|p| p.useful_at <= now) {
            admit(pod, config, now, &mut slo_violations);
            finished += decode(pod, config, dt_s);
        }
        self.totals.slo_violations += slo_violations;
        self.totals.finished += finished;
    }

    /// Hands pending requests to the least busy useful pods.
    fn route(&mut self) {
        let now = self.now;
        while let Some(request) = self.pending.front().copied() {
            let target = self
                .pods
                .iter_mut()
                .filter(|(_, p)| p.useful_at <= now)
                .min_by_key(|(_, p)| p.running.len() + p.waiting.len());
            let Some((_, pod)) = target else {
                return;
            };
            pod.waiting.push_back(request);
            self.pending.pop_front();
        }
    }
}

/// Starts waiting requests while the batch and the cache have room.
fn admit(pod: &mut Pod, config: &FleetConfig, now: Duration, violations: &mut u64) {
    while let Some(request) = pod.waiting.front().copied() {
        let kv = u64::from(request.shape.prompt_tokens) + u64::from(request.shape.output_tokens);
        let fits = pod.running.len() < config.max_batch
            && (pod.kv_used + kv <= config.kv_capacity_tokens || pod.running.is_empty());
        if !fits {
            return;
        }
        pod.waiting.pop_front();
        pod.kv_used += kv;
        let queued = now.saturating_sub(request.arrived);
        pod.running.push(Running {
            remaining_output: f64::from(request.shape.output_tokens),
            kv,
            output: request.shape.output_tokens,
            streamed: 0,
            queued: queued.as_secs_f64(),
            decoding: 0.0,
        });
        let ttft = queued + config.prefill;
        if ttft > config.ttft_slo {
            *violations += 1;
        }
        let c = &mut pod.counters;
        c.prompt_tokens += u64::from(request.shape.prompt_tokens);
        c.ttft.observe(ttft.as_secs_f64());
    }
}

/// Produces tokens for `dt_s` seconds; returns how many requests finished.
fn decode(pod: &mut Pod, config: &FleetConfig, dt_s: f64) -> u64 {
    if pod.running.is_empty() {
        return 0;
    }
    let per_request = (config.decode_tokens_per_second / pod.running.len() as f64)
        .min(config.max_tokens_per_request_second)
        * dt_s;
    // Within a step every running request gets tokens at the same even rate, so the gap between
    // two of its tokens is the step over the tokens it gets: what vLLM's ITL would observe. (A
    // pod that makes no tokens divides by zero here, but then no gap is ever observed.)
    let gap = dt_s / per_request;
    let prefill = config.prefill.as_secs_f64();
    let counters = &mut pod.counters;
    let mut finished = 0;
    pod.running.retain_mut(|r| {
        let step = per_request.min(r.remaining_output);
        r.remaining_output -= step;
        let done = r.remaining_output <= 1e-9;
        // A request that ends within the step decodes only for the part of it its tokens need.
        r.decoding += if per_request > 0.0 {
            dt_s * step / per_request
        } else {
            dt_s
        };
        let streamed = if done {
            r.output
        } else {
            // Truncating: a token is streamed once it is whole.
            ((f64::from(r.output) - r.remaining_output).max(0.0) as u32).min(r.output)
        };
        let new = streamed.saturating_sub(r.streamed);
        // The first token is the one TTFT stands for; each later one closes an inter-token gap.
        let gaps = if r.streamed == 0 {
            new.saturating_sub(1)
        } else {
            new
        };
        r.streamed = streamed;
        counters.generation_tokens += u64::from(new);
        counters.itl.observe_n(gap, u64::from(gaps));
        if done {
            finished += 1;
            counters.queue.observe(r.queued);
            // The first token came `prefill` after admission (as TTFT says), then the decode.
            counters.e2e.observe(r.queued + prefill + r.decoding);
            false
        } else {
            true
        }
    });
    let freed: u64 = pod.kv_used
        - pod
            .running
            .iter()
            .map(|r| r.kv)
            .sum::<u64>()
            .min(pod.kv_used);
    pod.kv_used -= freed;
    pod.counters.finished += finished;
    finished
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);

    fn run(fleet: &mut Fleet, trace: &Trace, seconds: u64) {
        for _ in 0..seconds * 10 {
            fleet.step(TICK, trace);
        }
    }

    fn constant(rate: f64) -> Trace {
        Trace::parse(&format!("0 {rate} 512 128\n")).unwrap()
    }

    fn quick() -> FleetConfig {
        FleetConfig {
            startup_delay: Duration::from_secs(5),
            ..FleetConfig::default()
        }
    }

    #[test]
    fn a_light_load_is_served_without_queueing() {
        let mut fleet = Fleet::new(FleetConfig {
            startup_delay: Duration::ZERO,
            ..FleetConfig::default()
        });
        fleet.set_pods(["a"]);
        run(&mut fleet, &constant(2.0), 60);
        let totals = fleet.totals().clone();
        assert!(totals.arrived >= 100, "{totals:?}");
        assert!(totals.finished + 10 >= totals.arrived, "{totals:?}");
        assert_eq!(totals.slo_violations, 0, "{totals:?}");
        assert_eq!(fleet.queued(), 0);
        let pod = fleet.pods().next().unwrap();
        assert!(pod.kv_usage > 0.0 && pod.kv_usage < 0.5, "{pod:?}");
        assert!((totals.pod_seconds - 60.0).abs() < 1e-6, "{totals:?}");
    }

    #[test]
    fn an_overload_queues_and_more_pods_drain_it_once_they_are_useful() {
        let mut fleet = Fleet::new(quick());
        fleet.set_pods(["a"]);
        let heavy = constant(40.0);
        run(&mut fleet, &heavy, 20);
        let queued = fleet.queued();
        assert!(queued > 100, "one pod cannot keep up: {queued}");
        assert!(fleet.totals().slo_violations > 0);
        let full = fleet.pods().next().unwrap();
        assert!(
            full.kv_usage > 0.9 || full.running == quick().max_batch,
            "{full:?}"
        );

        fleet.set_pods(["a", "b", "c", "d", "e", "f"]);
        // New pods take nothing while they start.
        run(&mut fleet, &heavy, 4);
        assert!(
            fleet
                .pods()
                .filter(|p| p.name != "a")
                .all(|p| p.running == 0 && p.waiting == 0)
        );
        // The backlog stays on the pod it was routed to (vLLM queues do not migrate), so it
        // drains at that pod's pace while the new pods take the new arrivals.
        run(&mut fleet, &heavy, 120);
        assert!(fleet.queued() < 20, "six pods keep up: {}", fleet.queued());
    }

    #[test]
    fn a_removed_pod_takes_its_requests_and_a_warm_cache_with_it() {
        let mut fleet = Fleet::new(FleetConfig {
            startup_delay: Duration::ZERO,
            ..FleetConfig::default()
        });
        fleet.set_pods(["a"]);
        run(&mut fleet, &constant(10.0), 10);
        fleet.set_pods(["a", "b"]); // b is cold
        fleet.set_pods(["b"]);
        let totals = fleet.totals();
        assert!(totals.lost > 0, "{totals:?}");
        assert_eq!(totals.warm_evictions, 1, "a was warmer than b");
        let before = totals.warm_evictions;
        fleet.set_pods(["b", "c"]);
        fleet.set_pods(["b"]); // c was cold: no warm cache lost
        assert_eq!(fleet.totals().warm_evictions, before);
        // Two leave at once, the coldest two: no warm cache lost, whatever their order.
        run(&mut fleet, &constant(10.0), 5);
        fleet.set_pods(["b", "x", "y"]);
        fleet.set_pods(["b"]);
        assert_eq!(
            fleet.totals().warm_evictions,
            before,
            "x and y were colder than b"
        );
    }

    #[test]
    fn requests_wait_for_the_first_pod_after_scale_to_zero() {
        let mut fleet = Fleet::new(quick());
        let trace = constant(1.0);
        run(&mut fleet, &trace, 10);
        assert_eq!(fleet.pending(), 10);
        fleet.set_pods(["a"]);
        run(&mut fleet, &trace, 10);
        assert_eq!(fleet.pending(), 0);
        assert!(
            fleet.totals().slo_violations >= 10,
            "they waited for a cold start"
        );
    }

    #[test]
    fn a_coarse_step_is_as_fine_as_many_small_ones() {
        let fine = {
            let mut fleet = Fleet::new(quick());
            fleet.set_pods(["a"]);
            run(&mut fleet, &constant(2.0), 30);
            fleet.totals().clone()
        };
        let mut coarse = Fleet::new(quick());
        coarse.set_pods(["a"]);
        for _ in 0..15 {
            coarse.step(Duration::from_secs(2), &constant(2.0));
        }
        assert_eq!(coarse.totals().arrived, fine.arrived);
        assert_eq!(coarse.totals().slo_violations, fine.slo_violations);
    }

    #[test]
    fn a_warm_pod_serves_at_once_and_a_new_one_after_its_start_up() {
        let trace = constant(4.0);
        let mut warm = Fleet::new(quick());
        warm.warm_pods(["a"]);
        let mut cold = Fleet::new(quick());
        cold.set_pods(["a"]);
        let startup = quick().startup_delay;
        // A request takes over 2 s; the cold pod is useful after 5.
        run(&mut warm, &trace, startup.as_secs() - 1);
        run(&mut cold, &trace, startup.as_secs() - 1);
        assert!(warm.totals().finished > 0, "{:?}", warm.totals());
        assert_eq!(warm.pending(), 0);
        assert_eq!(cold.totals().finished, 0);
        assert!(cold.pending() > 0);
        // A pod added later starts cold, warm or not the first.
        warm.set_pods(["a", "b"]);
        assert!(warm.pods().any(|p| p.name == "b" && !p.useful));
    }

    #[test]
    fn the_same_inputs_give_the_same_run() {
        let go = || {
            let mut fleet = Fleet::new(quick());
            fleet.set_pods(["a", "b"]);
            run(&mut fleet, &Trace::builtin("burst", 60.0).unwrap(), 60);
            fleet.totals().clone()
        };
        assert_eq!(go(), go());
    }

    #[test]
    fn histograms_are_cumulative_and_count_every_observation() {
        let mut fleet = Fleet::new(quick());
        fleet.set_pods(["a"]);
        run(&mut fleet, &constant(40.0), 30);
        let pod = fleet.pods().next().unwrap();
        let c = pod.counters;
        for h in [&c.ttft, &c.itl, &c.queue, &c.e2e] {
            assert_eq!(h.buckets.len(), h.bounds.len());
            assert!(h.buckets.windows(2).all(|w| w[0] <= w[1]), "{h:?}");
            assert!(h.buckets.last().is_some_and(|last| *last <= h.count));
            assert!(h.count > 0 && h.sum > 0.0, "{h:?}");
        }
        assert_eq!(c.queue.count, c.finished);
        assert_eq!(c.e2e.count, c.finished);
    }

    #[test]
    fn a_drained_pod_counted_each_token_once_as_vllm_does() {
        let mut fleet = Fleet::new(quick());
        fleet.set_pods(["a", "b"]);
        run(&mut fleet, &constant(8.0), 30);
        run(&mut fleet, &constant(0.0), 60);
        assert_eq!(fleet.queued(), 0);
        for pod in fleet.pods() {
            let c = pod.counters;
            assert_eq!(pod.running, 0, "{pod:?}");
            assert!(c.finished > 50, "{pod:?}");
            // vLLM: every generated token is either a request's first (TTFT) or closes a gap (ITL).
            assert_eq!(c.generation_tokens, c.ttft.count + c.itl.count, "{c:?}");
            assert_eq!(c.generation_tokens, c.finished * 128, "{c:?}");
            assert_eq!(c.ttft.count, c.finished);
            assert_eq!(c.queue.count, c.finished);
            assert_eq!(c.e2e.count, c.finished);
            // Each request's end-to-end time is its time to first token plus its decode.
            assert!(c.e2e.sum > c.ttft.sum + c.itl.sum * 0.99, "{c:?}");
        }
    }

    #[test]
    fn a_lone_request_streams_at_the_per_request_cap() {
        let mut fleet = Fleet::new(FleetConfig {
            startup_delay: Duration::ZERO,
            ..FleetConfig::default()
        });
        fleet.set_pods(["a"]);
        // Ten requests a second for the first step only: exactly one request.
        let one = Trace::parse("0 10 512 128\n0.1 0\n").unwrap();
        run(&mut fleet, &one, 10);
        assert_eq!(fleet.totals().arrived, 1);
        let pod = fleet.pods().next().unwrap();
        let c = pod.counters;
        // 60 tokens/s: every gap is 1/60 s, so in le=0.025 and not in le=0.01.
        assert_eq!(c.itl.count, 127);
        assert_eq!(c.itl.buckets[0], 0);
        assert_eq!(c.itl.buckets[1], 127);
        assert!((c.itl.sum - 127.0 / 60.0).abs() < 1e-9, "{c:?}");
        // It arrived at the start of the first step and was admitted at its end.
        assert!((c.queue.sum - 0.1).abs() < 1e-9, "{c:?}");
        let e2e = 0.1 + 0.15 + 128.0 / 60.0;
        assert!((c.e2e.sum - e2e).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn an_overload_shows_in_queue_time_and_in_wider_token_gaps() {
        let mut fleet = Fleet::new(quick());
        fleet.set_pods(["a"]);
        run(&mut fleet, &constant(40.0), 60);
        let pod = fleet.pods().next().unwrap();
        let c = pod.counters;
        assert!(c.queue.sum / c.queue.count as f64 > 1.0, "{c:?}");
        // A full batch shares the pod's 1500 tokens/s: gaps of 64/1500 s, past le=0.025.
        assert!(c.itl.sum / c.itl.count as f64 > 0.025, "{c:?}");
        assert!(c.e2e.sum / c.e2e.count as f64 > c.queue.sum / c.queue.count as f64);
    }
}
