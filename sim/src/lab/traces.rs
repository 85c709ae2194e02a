//! What the lab replays: a synthetic shape (`workload`), or a real request log (`request_log`)
//! scaled to a stated mean fleet. One seed is one exact list of requests for every policy.

use std::path::Path;
use std::sync::Arc;

use super::engine::PodProfile;
use super::request_log::{self, LogError, RequestLog};
use super::workload::{Request, Shape, generate_at_rate, generate_scaled};

/// The mean fleet a replayed log is scaled to: the log's rate times the copies a seed
/// superposes is what this many pods serve within the SLO (the measurement ran real
/// logs at fleets of 15–25 pods).
pub const LOG_FLEET: f64 = 20.0;

/// Where the project's reference logs are, beside the repository (`../shared/data/...` from its
/// root), and the names the lab gives them.
pub const AZURE_DIR: &str = "../shared/data/azure-llm-inference-2023";
pub const AZURE_LOGS: [(&str, &str); 2] = [
    ("azure-conversation", "AzureLLMInferenceTrace_conv.csv"),
    ("azure-code", "AzureLLMInferenceTrace_code.csv"),
];

/// One workload of the lab.
#[derive(Debug, Clone)]
pub enum Trace {
    Synthetic(Shape),
    Log(Arc<RequestLog>),
}

impl Trace {
    /// A log read from `path`, under `name`.
    pub fn log(path: &Path, name: Option<&str>) -> Result<Self, LogError> {
        let mut log = request_log::read(path)?;
        if let Some(name) = name {
            name.clone_into(&mut log.name);
        }
        Ok(Self::Log(Arc::new(log)))
    }

    /// The Azure 2023 logs under `repo` (the project's root), the ones that are there.
    pub fn azure(repo: &Path) -> Vec<Result<Self, LogError>> {
        AZURE_LOGS
            .iter()
            .map(|(name, file)| Self::log(&repo.join(AZURE_DIR).join(file), Some(name)))
            .collect()
    }

    pub fn name(&self) -> &str {
        match self {
            Trace::Synthetic(shape) => shape.name(),
            Trace::Log(log) => &log.name,
        }
    }

    /// Seconds of load in a run.
    pub fn duration(&self) -> f64 {
        match self {
            Trace::Synthetic(shape) => shape.duration(),
            Trace::Log(log) => log.span,
        }
    }

    /// Seconds in one of the trace's days (a log is one day of its own length).
    pub fn day(&self) -> f64 {
        match self {
            Trace::Synthetic(shape) => shape.day(),
            Trace::Log(log) => log.span,
        }
    }

    /// When a step trace jumps, for the recovery time.
    pub fn step_at(&self) -> Option<f64> {
        match self {
            Trace::Synthetic(shape) => shape.step_at(),
            Trace::Log(_) => None,
        }
    }

    /// Whether the scalers run with minReplicas 0 on this trace.
    pub fn scales_to_zero(&self) -> bool {
        matches!(self, Trace::Synthetic(shape) if shape.scales_to_zero())
    }

    /// One seed's requests, with how many a pod of `profile` could not hold whole (clipped).
    /// A log is scaled so that pods serving `per_pod` requests/s each number [`LOG_FLEET`] on
    /// average; a shape's rates (set for the default pod) are multiplied by `traffic`, what this
    /// pod serves of the shape over what the default pod does, so its fleet spans the same pods.
    pub fn requests(
        &self,
        seed: u64,
        per_pod: f64,
        traffic: f64,
        profile: &PodProfile,
    ) -> (Vec<Request>, usize) {
        match self {
            Trace::Synthetic(shape) => (generate_scaled(*shape, seed, traffic), 0),
            Trace::Log(log) => {
                let scale = LOG_FLEET * per_pod / log.rate();
                let replayed = request_log::replay(log, scale, seed, log.span, profile.kv_tokens);
                (replayed.requests, replayed.clipped)
            }
        }
    }

    /// The trace's request mix at a constant `rate` (its burstiness kept for a shape; Poisson
    /// arrivals for a log): for measuring what one pod can serve of it.
    pub fn at_rate(
        &self,
        seed: u64,
        rate: f64,
        duration: f64,
        profile: &PodProfile,
    ) -> Vec<Request> {
        match self {
            Trace::Synthetic(shape) => generate_at_rate(*shape, seed, rate, duration),
            Trace::Log(log) => {
                request_log::mix_at_rate(log, seed, rate, duration, profile.kv_tokens)
            }
        }
    }

    /// How traces are ordered in a report: the real logs first, then the shapes in their order.
    fn rank(&self) -> (u8, usize, &str) {
        match self {
            Trace::Log(log) => (0, 0, &log.name),
            // Every shape its own rank, those run only when named included (the same rank
            // would make two of them one cell).
            Trace::Synthetic(shape) => (
                1,
                Shape::ALL
                    .iter()
                    .chain(&Shape::MORE)
                    .position(|s| s == shape)
                    .unwrap_or(usize::MAX),
                shape.name(),
            ),
        }
    }
}

impl PartialEq for Trace {
    fn eq(&self, other: &Self) -> bool {
        self.rank() == other.rank()
    }
}

impl Eq for Trace {}

impl PartialOrd for Trace {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Trace {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::workload::Prefix;

    fn log(name: &str, n: usize) -> Trace {
        let requests = (0..n)
            .map(|i| Request {
                at: i as f64,
                prompt: 40_000,
                output: 10,
                prefix: Some(Prefix { id: 0, tokens: 100 }),
            })
            .collect();
        Trace::Log(Arc::new(RequestLog {
            name: name.into(),
            requests,
            span: n as f64,
        }))
    }

    #[test]
    fn a_log_is_scaled_to_the_stated_fleet_and_clipped_to_a_pod() {
        // 1 request/s, pods that serve 0.5 each: 20 pods carry 10 requests/s, ten copies.
        let trace = log("one-a-second", 600);
        let profile = PodProfile::default();
        let (requests, clipped) = trace.requests(1, 0.5, 1.0, &profile);
        assert_eq!(requests.len(), 6000);
        assert_eq!(
            clipped, 6000,
            "every prompt is longer than a pod's KV cache"
        );
        assert!(
            requests
                .iter()
                .all(|r| r.prompt + r.output <= profile.kv_tokens)
        );
        assert_eq!(trace.duration(), 600.0);
        assert!(!trace.scales_to_zero() && trace.step_at().is_none());
    }

    #[test]
    fn logs_come_first_then_the_shapes_in_order() {
        let mut traces = [
            Trace::Synthetic(Shape::Step),
            log("b", 1),
            Trace::Synthetic(Shape::Conversation),
            log("a", 1),
        ];
        traces.sort();
        let names: Vec<&str> = traces.iter().map(Trace::name).collect();
        assert_eq!(names, ["a", "b", "conversation", "step"]);
        // The shapes run only when named are cells of their own too, after the others.
        let mut more: Vec<Trace> = Shape::MORE
            .iter()
            .rev()
            .chain([&Shape::Diurnal])
            .map(|s| Trace::Synthetic(*s))
            .collect();
        more.sort();
        more.dedup();
        let names: Vec<&str> = more.iter().map(Trace::name).collect();
        assert_eq!(
            names,
            [
                "diurnal",
                "diurnal-days",
                "burstgpt-days",
                "diurnal-24h",
                "burstgpt-24h"
            ]
        );
    }
}
