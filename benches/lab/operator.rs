//! This operator's control law as a lab policy: the spec a user would write, read through the
//! functions the controller uses, and decided by the one law the controller runs
//! (`scaling::law`). The fast tier's cross-path test (`src/controller/fast_tier.rs`) runs this
//! same file beside the controller and asserts the two decide alike.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use llmscaleoperator::api::behavior::{behavior, stages, target_type, zero_rules};
use llmscaleoperator::api::objective::{DEFAULT_PRIOR, rules as objective_rules};
use llmscaleoperator::api::validation::parse_target;
use llmscaleoperator::api::{LLMScalerSpec, Recurrence, ScaleDownBehavior};
use llmscaleoperator::scaling::{
    Bounds as OpBounds, Capacity, Input, Latency, Learned, LoadCurve, Memory, MetricReading,
    OBJECTIVE_METRIC, ObjectiveReading, Pause, Signal as OpSignal, SkipReason, Stored, TargetState,
    TargetType, Unreadable, WINDOW_SECONDS, ZeroMemory, ZeroRules, effective_startup, law,
    learn_startup,
};
use llmscaleoperator_sim::lab::exported::Buckets;
use llmscaleoperator_sim::lab::metrics::{Gauge, OverTime};
use llmscaleoperator_sim::lab::policy::{Bounds, Policy, Victims, View};
use serde_json::json;

/// The operator as a user would set it up for vLLM: one Prometheus query, the mean requests in
/// flight per scraped pod, with requests held at the gateway added (so a fleet at zero wakes):
///
/// ```text
/// (sum(vllm:num_requests_running + vllm:num_requests_waiting) + sum(gateway_pending))
///   / clamp_min(count(vllm:num_requests_running), 1)
/// ```
///
/// Everything else comes from an LLMScaler spec read through the same functions the controller
/// uses: the spec's defaults (or the fields a variant sets), its behavior, and the start-up delay
/// learned from the target's pods.
///
/// Where the fleet may go to zero, the spec is the one docs/concepts.md's "Scale to zero" asks for: the
/// metric above (the router's queue in it, so a wake is sized for what waits instead of one
/// pod), and a `scaleToZero` block whose activation query reads what the router in front of the
/// model holds (requests at the gateway plus those the pods have in flight; it exists at zero),
/// every other field at its default:
///
/// ```text
/// (sum(vllm:num_requests_running + vllm:num_requests_waiting) or vector(0)) + sum(gateway_pending)
/// ```
///
/// (The per-pod metric without the router's queue, which has no series until a pod is Ready,
/// was measured too: it waits one whole start-up with a single pod before sizing the fleet, and
/// attained 8% on `idle` at 180 s against 39% with the queue in the metric.)
pub struct Operator {
    label: String,
    spec: LLMScalerSpec,
    target: f64,
    kind: TargetType,
    memory: Memory,
    zero: Option<ZeroRules>,
    zero_memory: ZeroMemory,
    /// Consecutive syncs without a usable signal (the fallback's count).
    syncs_without_signal: u32,
    learned: Option<Learned>,
    /// The newest Ready time counted into `learned`.
    learned_until: f64,
    /// What a pause annotation would ask for (a lab run has none; the cross-path test does).
    pause: Option<Pause>,
    /// The metric is the mean KV-cache use of the scraped pods (`avg(vllm:kv_cache_usage_perc)`)
    /// instead of the requests in flight per pod.
    reads_kv_cache: bool,
    /// The capacity learned for the objective (the law's stored estimate), under one.
    capacity: Option<Capacity>,
    /// The objective's load curve, kept between syncs as the controller keeps it.
    curve: LoadCurve,
}

fn cumulative(b: &Buckets) -> Vec<(f64, f64)> {
    b.cumulative()
        .into_iter()
        .map(|(le, c)| (le, c as f64))
        .collect()
}

/// What the composed queries of an objective read from the lab's pods: both histograms' increase,
/// the mean requests running per Ready pod and the first tokens served a second over the last
/// minute.
pub fn latency(view: &View<'_>) -> Result<Latency, Unreadable> {
    let e = view.metrics.increase(view.now, WINDOW_SECONDS);
    let running = view
        .metrics
        .over_time(view.now, Gauge::Running, WINDOW_SECONDS, OverTime::Avg);
    if running.is_empty() {
        return Err(Unreadable::new(NoSeries));
    }
    Ok(Latency {
        queue: cumulative(&e.queue),
        tpot: cumulative(&e.tpot),
        load: running.iter().map(|(_, v)| v).sum::<f64>() / running.len() as f64,
        admitted: Ok(e.ttft.count() as f64 / WINDOW_SECONDS),
    })
}

impl Operator {
    pub fn new(bounds: Bounds) -> Self {
        Self::with(bounds, json!({}))
    }

    /// The spec a user would write, with `overrides` merged over its top level (a null removes
    /// a field).
    pub fn with(bounds: Bounds, overrides: serde_json::Value) -> Self {
        let mut spec = json!({
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
            "serverAddress": "http://prometheus:9090",
            "minReplicas": bounds.min,
            "maxReplicas": bounds.max,
            "metrics": [{"name": "in-flight", "query": "…", "target": TARGET.to_string()}],
        });
        if bounds.min == 0 {
            spec["scaleToZero"] = json!({"activationQuery": "…"});
        }
        // An override of null removes the field.
        if let (Some(base), Some(extra)) = (spec.as_object_mut(), overrides.as_object()) {
            for (k, v) in extra {
                if v.is_null() {
                    base.remove(k);
                } else {
                    base.insert(k.clone(), v.clone());
                }
            }
        }
        let spec: LLMScalerSpec = serde_json::from_value(spec).unwrap();
        // Under an objective without metrics, the one reading is the objective's.
        let (target, kind) = match spec.metrics.as_deref() {
            Some([metric, ..]) => (
                parse_target(&metric.target).unwrap(),
                target_type(metric.target_type),
            ),
            _ => (f64::NAN, TargetType::Value),
        };
        let zero = zero_rules(&spec).unwrap();
        Self {
            label: format!("llmscaleoperator (target {TARGET})"),
            spec,
            target,
            kind,
            memory: Memory::default(),
            zero,
            zero_memory: ZeroMemory::default(),
            syncs_without_signal: 0,
            learned: None,
            learned_until: 0.0,
            pause: None,
            reads_kv_cache: false,
            capacity: None,
            curve: LoadCurve::default(),
        }
    }

    /// Scaling to the latency `objective` (the lab's default is the spec's: TTFT ≤ 2 s, TPOT ≤
    /// 100 ms for 99% of requests), no metric, starting from `prior` requests in flight per pod:
    /// the spec issue 30 asks for, read through the functions the controller uses.
    pub fn objective(bounds: Bounds, prior: f64, objective: Objective) -> Self {
        let mut stated = json!({"selector": "model_name=\"m\""});
        // Only what differs from the spec's defaults is written, as a user would.
        if prior != DEFAULT_PRIOR {
            stated["initialRequestsPerPod"] = prior.to_string().into();
        }
        let defaults = Objective::default();
        for (field, value, default) in [
            ("ttftSeconds", objective.ttft, defaults.ttft),
            ("tpotSeconds", objective.tpot, defaults.tpot),
            ("percentile", objective.percentile, defaults.percentile),
        ] {
            if value != default {
                stated[field] = value.to_string().into();
            }
        }
        // Where the fleet may go to zero, the router's queue is named as the objective's
        // pending requests, as docs/concepts.md's "Scale to zero" advises.
        if bounds.min == 0 {
            stated["pendingQuery"] = "sum(gateway_pending)".into();
        }
        let spec = json!({"metrics": null, "objective": stated});
        let mut operator = Self::with(bounds, spec);
        operator.label = if prior == DEFAULT_PRIOR {
            "llmscaleoperator".into()
        } else {
            format!("llmscaleoperator (objective, prior {prior})")
        };
        operator
    }

    /// With the spec's `recurrence` at its defaults but for the period: the lab's traces with a
    /// daily cycle fit a day into `period_seconds` (an hour).
    pub fn remembering(mut self, period_seconds: i32) -> Self {
        self.spec.recurrence = Some(Recurrence {
            period_seconds,
            ..Recurrence::default()
        });
        self.label = format!("{} (recurrence)", self.label);
        self
    }

    /// The capacity learned so far, when scaling to the objective.
    #[allow(dead_code)]
    pub fn learned(&self) -> Option<Capacity> {
        let prior = || {
            let objective = self.spec.objective.as_ref()?;
            Some(Capacity::prior(objective_rules(objective).ok()?.prior))
        };
        self.capacity.or_else(prior)
    }

    /// Scaling on the mean KV-cache use of the pods, `avg(vllm:kv_cache_usage_perc)`, against
    /// `target` (0 to 1).
    pub fn on_kv_cache(bounds: Bounds, target: f64) -> Self {
        let metric =
            json!({"metrics": [{"name": "kv-cache", "query": "…", "target": target.to_string()}]});
        let mut operator = Self::with(bounds, metric);
        operator.reads_kv_cache = true;
        operator.label = format!("llmscaleoperator (target {target}, KV)");
        operator
    }

    /// The spec this entrant runs, as a user would have written it.
    #[allow(dead_code)]
    pub fn spec(&self) -> &LLMScalerSpec {
        &self.spec
    }

    /// With the spec's `startupSeconds`: the look-ahead's horizon, learned from the pods without.
    #[allow(dead_code)]
    pub fn starting_in(mut self, seconds: i32) -> Self {
        self.spec.startup_seconds = Some(seconds);
        self
    }

    /// Paused as the annotations would pause the scaler.
    #[allow(dead_code)]
    pub fn paused(mut self, pause: Pause) -> Self {
        self.pause = Some(pause);
        self
    }

    pub fn named(mut self, label: &str) -> Self {
        self.label = label.into();
        self
    }
}

/// The latency objective: what the lab counts as goodput, and what the operator's objective
/// entrants state in their spec (`make what-if` takes it from `--ttft`, `--tpot` and
/// `--percentile`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Objective {
    /// Seconds to the first token.
    pub ttft: f64,
    /// Seconds per output token after it.
    pub tpot: f64,
    /// The share of requests, in %, that must meet both.
    pub percentile: f64,
}

impl Default for Objective {
    /// The spec's defaults: TTFT ≤ 2 s and TPOT ≤ 100 ms for 99% of requests.
    fn default() -> Self {
        Self {
            ttft: 2.0,
            tpot: 0.1,
            percentile: 99.0,
        }
    }
}

/// What a query over series that do not exist answers (a fleet at zero has no pod to scrape).
#[derive(Debug, thiserror::Error)]
#[error("no series")]
struct NoSeries;

/// Requests in flight per pod: every ratio policy's reference target.
pub const TARGET: f64 = 16.0;
/// The wall-clock second a lab run starts at (the law's clock is a timestamp).
pub const EPOCH: i64 = 1_800_000_000;

impl Policy for Operator {
    fn label(&self) -> String {
        self.label.clone()
    }

    fn period(&self) -> f64 {
        f64::from(self.spec.sync_period_seconds)
    }

    fn victims(&self) -> Victims {
        match self.spec.scale_down.behavior {
            ScaleDownBehavior::CacheAware => Victims::Coldest,
            ScaleDownBehavior::None => Victims::ReplicaSet,
        }
    }

    fn decide(&mut self, view: &View<'_>) -> u32 {
        let running = view.metrics.latest(view.now, Gauge::Running);
        let waiting: f64 = view
            .metrics
            .latest(view.now, Gauge::Waiting)
            .iter()
            .map(|(_, v)| v)
            .sum();
        let gateway = view.metrics.gateway_pending(view.now);
        let in_flight = running.iter().map(|(_, v)| v).sum::<f64>() + waiting;
        let activation = gateway
            .map(|g| g + in_flight)
            .ok_or_else(|| SkipReason::Unavailable(Unreadable::new(NoSeries)));
        let kv = view.metrics.latest(view.now, Gauge::KvUsage);
        let value = match gateway {
            _ if self.reads_kv_cache => {
                if kv.is_empty() {
                    Err(SkipReason::Unavailable(Unreadable::new(NoSeries)))
                } else {
                    Ok(kv.iter().map(|(_, v)| v).sum::<f64>() / kv.len() as f64)
                }
            }
            None if running.is_empty() => Err(SkipReason::Unavailable(Unreadable::new(NoSeries))),
            _ => {
                let total = in_flight + gateway.unwrap_or(0.0);
                Ok(match self.kind {
                    TargetType::Value => total / running.len().max(1) as f64,
                    TargetType::AverageValue => total,
                })
            }
        };
        // What the controller learns from the pods' creation and Ready times.
        let mut became_ready: Vec<(f64, f64)> = view
            .pods
            .iter()
            .filter_map(|p| p.ready_at.map(|r| (r, r - p.created)))
            .filter(|(r, _)| *r > self.learned_until)
            .collect();
        became_ready.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((last, _)) = became_ready.last() {
            self.learned_until = *last;
            let samples: Vec<f64> = became_ready.iter().map(|(_, s)| *s).collect();
            self.learned = learn_startup(self.learned, &samples);
        }
        let now = Timestamp::from_second(EPOCH).unwrap()
            + SignedDuration::from_millis((view.now * 1000.0) as i64);
        // Under an objective, its composed in-flight query, (sum(running) + sum(waiting)) /
        // count(running), against the capacity learned so far (the law replaces the target).
        // With a pendingQuery (the router's queue), it adds to the engines' count, and while no
        // pod is Ready it is the whole reading.
        let pending = self
            .spec
            .objective
            .as_ref()
            .and_then(|o| o.pending_query.as_ref())
            .map(|_| gateway.ok_or_else(|| SkipReason::Unavailable(Unreadable::new(NoSeries))));
        let objective = self.spec.objective.is_some().then(|| MetricReading {
            name: OBJECTIVE_METRIC.into(),
            value: match pending {
                Some(pending) if view.ready() == 0 => pending,
                _ if running.is_empty() => Err(SkipReason::Unavailable(Unreadable::new(NoSeries))),
                Some(pending) => pending.map(|p| (in_flight + p) / running.len() as f64),
                None => Ok(in_flight / running.len() as f64),
            },
            target: f64::NAN,
            kind: TargetType::Value,
        });
        // The reading the fleet is sized on this sync, for the trace below.
        let sized_on = objective
            .as_ref()
            .and_then(|o| o.value.as_ref().ok().copied());
        let metrics = self.spec.metrics.is_some().then(|| MetricReading {
            name: "in-flight".into(),
            value,
            target: self.target,
            kind: self.kind,
        });
        let input = Input {
            signal: OpSignal::Ratio(metrics.into_iter().chain(objective).collect()),
            target: TargetState {
                spec_replicas: i32::try_from(view.spec).unwrap(),
                ready_replicas: i32::try_from(view.ready()).unwrap(),
                rollout: None,
            },
            bounds: OpBounds {
                min: self.spec.min_replicas,
                max: self.spec.max_replicas,
            },
            behavior: behavior(&self.spec).unwrap(),
            startup_seconds: effective_startup(self.spec.startup_seconds, self.learned),
            memory: std::mem::take(&mut self.memory),
            now,
            down_waits: None,
            admitted: None,
            down_share: None,
        };
        // The law that ships, every stage the spec sets.
        let stages = stages(&self.spec, self.pause).unwrap();
        let stored = Stored {
            zero: self.zero_memory,
            syncs_without_signal: self.syncs_without_signal,
            capacity: self.capacity,
            curve: std::mem::take(&mut self.curve),
        };
        // What the controller reads for the objective: the composed queries, and the newest Ready
        // time among the pods (status.startup.lastReadyTime).
        let reading = stages.objective.map(|_| ObjectiveReading {
            latency: latency(view),
            newest_ready: view
                .pods
                .iter()
                .filter_map(|p| p.ready_at)
                .reduce(f64::max)
                .map(|r| {
                    Timestamp::from_second(EPOCH).unwrap()
                        + SignedDuration::from_millis((r * 1000.0) as i64)
                }),
        });
        let step = law(
            &input,
            &stages,
            self.zero.map(|_| activation),
            reading.as_ref(),
            stored,
        );
        if let Some(learnt) = &step.objective {
            self.capacity = Some(learnt.capacity);
            self.curve = learnt.curve.clone();
            // OBJECTIVE_TRACE=1 prints what each sync learned (for studying the estimator).
            if std::env::var_os("OBJECTIVE_TRACE").is_some() {
                eprintln!(
                    "{} t={:.0} spec={} ready={} now={:?} rec={:?} desired={} est={:.2} missed={:?} curve={:?} {:?} {:?} reasons={:?}",
                    self.label,
                    view.now,
                    view.spec,
                    view.ready(),
                    sized_on,
                    step.decision.recommendation,
                    step.decision.desired,
                    learnt.capacity.per_pod,
                    learnt.capacity.missed_at,
                    stages
                        .objective
                        .and_then(|r| learnt.curve.capacity(r.capacity.allowed_miss)),
                    learnt.lesson,
                    learnt.late,
                    step.decision.reasons
                );
            }
        }
        if let Some(zero) = step.zero {
            self.zero_memory = zero;
        }
        self.syncs_without_signal = step.syncs_without_signal;
        let decision = step.decision;
        self.memory = decision.memory;
        decision
            .write
            .map_or(view.spec, |w| u32::try_from(w).unwrap_or(0))
    }
}
