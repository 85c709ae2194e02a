//! `make bench`, scaling quality: each built-in trace replayed over the simulated fleet (sim/)
//! under three policies, side by side, in simulated time (deterministic, seconds of real time):
//!
//! - this operator with its defaults (the real decision core, `scaling::decide`; cache-aware
//!   scale-down removes the coldest pods),
//! - the same with cache-aware scale-down off (the newest pods go, as a ReplicaSet chooses),
//! - an HPA-equivalent policy: the ratio with a 10% tolerance, 300 s scale-down stabilization,
//!   and the default scale-up limit (double, or +4 pods, per 15 s).
//!
//! Reported: requests whose first token missed the SLO, replica-hours, warm-cache evictions (a pod
//! removed while a colder one lived), lost requests and scale actions. The table is printed and
//! written to target/bench/policies.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use llmscaleoperator::scaling::{
    Bounds, Candidate, Entry, Input, MetricReading, Ranking, ScaleDownPolicy, Signal, TargetState,
    decide, pick,
};
use llmscaleoperator_sim::fleet::{Fleet, FleetConfig, Totals};
use llmscaleoperator_sim::trace::Trace;

const TRACE_SECONDS: f64 = 3600.0;
const SYNC: u64 = 15;
/// Requests in flight or waiting per replica.
const TARGET: f64 = 20.0;
const MIN: i32 = 1;
const MAX: i32 = 40;

#[derive(Clone, Copy, PartialEq)]
enum Policy {
    Operator { cache_aware: bool },
    Hpa,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::Operator { cache_aware: true } => "llmscaleoperator (defaults)",
            Policy::Operator { cache_aware: false } => "llmscaleoperator, cache-aware off",
            Policy::Hpa => "HPA-equivalent",
        }
    }
}

struct Outcome {
    totals: Totals,
    scale_actions: u32,
    peak: i32,
}

/// The pods of a Deployment: names and creation order.
struct Pods {
    next: u64,
    live: Vec<(String, u64)>,
}

impl Pods {
    fn resize(&mut self, to: i32, fleet: &Fleet, ranking: Ranking) {
        let to = usize::try_from(to).unwrap();
        while self.live.len() < to {
            self.next += 1;
            self.live.push((format!("pod-{}", self.next), self.next));
        }
        if self.live.len() > to {
            let candidates: Vec<Candidate> = self
                .live
                .iter()
                .map(|(name, order)| Candidate {
                    name: name.clone(),
                    created: Timestamp::from_second(i64::try_from(*order).unwrap()).ok(),
                    warmth: fleet.pods().find(|p| p.name == name).map(|p| p.kv_usage),
                })
                .collect();
            let victims = pick(&candidates, self.live.len() - to, ranking);
            self.live.retain(|(name, _)| !victims.contains(name));
        }
    }
}

/// Simulated seconds before the trace starts, at its first rate: long enough for the cold start's
/// backlog to drain, so every policy starts from the same steady fleet.
const WARM_UP: u64 = 900;

fn run(trace: &Trace, policy: Policy) -> Outcome {
    let trace = &trace.delayed(Duration::from_secs(WARM_UP));
    let mut fleet = Fleet::new(FleetConfig {
        startup_delay: Duration::from_secs(90),
        ..FleetConfig::default()
    });
    let mut pods = Pods {
        next: 0,
        live: Vec::new(),
    };
    let ranking = match policy {
        Policy::Operator { cache_aware: true } => Ranking::Measured,
        _ => Ranking::NewestFirst,
    };
    pods.resize(2, &fleet, ranking);
    fleet.set_pods(pods.live.iter().map(|(n, _)| n.clone()));
    for _ in 0..WARM_UP {
        fleet.step(Duration::from_secs(1), trace);
    }
    let mut spec = 2;
    let mut history: Vec<Entry> = Vec::new();
    let mut hpa_window: VecDeque<(u64, i32)> = VecDeque::new();
    let mut scale_actions = 0;
    let mut peak = spec;
    let start = Timestamp::from_second(1_800_000_000).unwrap();
    let ticks = TRACE_SECONDS as u64;
    // Only the trace counts, not the warm-up.
    let warm = fleet.totals().clone();
    for second in 0..ticks {
        fleet.step(Duration::from_secs(1), trace);
        if second % SYNC != 0 {
            continue;
        }
        let useful: Vec<_> = fleet.pods().filter(|p| p.useful).collect();
        let ready = i32::try_from(useful.len()).unwrap();
        let value = if useful.is_empty() {
            f64::NAN
        } else {
            useful
                .iter()
                .map(|p| (p.running + p.waiting) as f64)
                .sum::<f64>()
                / useful.len() as f64
                + fleet.pending() as f64 / useful.len() as f64
        };
        let now = start + SignedDuration::from_secs(i64::try_from(second).unwrap());
        let next = match policy {
            Policy::Operator { .. } => {
                let decision = decide(&Input {
                    signal: Signal::Ratio(vec![MetricReading {
                        name: "busy".into(),
                        value: if value.is_finite() {
                            Ok(value)
                        } else {
                            Err(llmscaleoperator::scaling::SkipReason::NotFinite(value))
                        },
                        target: TARGET,
                    }]),
                    target: TargetState {
                        spec_replicas: spec,
                        ready_replicas: ready,
                        rollout: None,
                    },
                    bounds: Bounds { min: MIN, max: MAX },
                    scale_down: ScaleDownPolicy {
                        window_seconds: 0,
                        max_step: 0,
                    },
                    history: history.clone(),
                    now,
                });
                history = decision.history.clone();
                decision.write.unwrap_or(spec)
            }
            Policy::Hpa => hpa(spec, ready, value, second, &mut hpa_window),
        };
        if next != spec {
            scale_actions += 1;
            spec = next;
            peak = peak.max(spec);
            pods.resize(spec, &fleet, ranking);
            fleet.set_pods(pods.live.iter().map(|(n, _)| n.clone()));
        }
    }
    let end = fleet.totals();
    Outcome {
        totals: Totals {
            arrived: end.arrived - warm.arrived,
            finished: end.finished - warm.finished,
            lost: end.lost - warm.lost,
            slo_violations: end.slo_violations - warm.slo_violations,
            warm_evictions: end.warm_evictions - warm.warm_evictions,
            pod_seconds: end.pod_seconds - warm.pod_seconds,
        },
        scale_actions,
        peak,
    }
}

/// The HPA's algorithm with its default behaviour, for one sync.
fn hpa(spec: i32, ready: i32, value: f64, second: u64, window: &mut VecDeque<(u64, i32)>) -> i32 {
    let ratio = if value.is_finite() {
        value / TARGET
    } else {
        1.0
    };
    let raw = if (ratio - 1.0).abs() <= 0.1 {
        spec
    } else {
        (f64::from(ready.max(1)) * ratio).ceil() as i32
    };
    let raw = raw.clamp(MIN, MAX);
    // Scale-down: the highest recommendation of the last 300 s.
    window.push_back((second, raw));
    while window.front().is_some_and(|(at, _)| second - at > 300) {
        window.pop_front();
    }
    let stabilized = if raw < spec {
        window
            .iter()
            .map(|(_, r)| *r)
            .max()
            .unwrap_or(raw)
            .min(spec)
    } else {
        raw
    };
    // Scale-up: at most double, or +4 pods, per 15 s.
    let up_limit = (spec * 2).max(spec + 4);
    stabilized.min(up_limit).clamp(MIN, MAX)
}

fn main() {
    let policies = [
        Policy::Operator { cache_aware: true },
        Policy::Operator { cache_aware: false },
        Policy::Hpa,
    ];
    let mut table = String::new();
    let _ = writeln!(
        table,
        "Scaling quality, simulated fleet (sim/), {} s per trace, sync {SYNC} s, target {TARGET} requests per replica, 90 s start-up, TTFT SLO 2 s\n",
        TRACE_SECONDS
    );
    let _ = writeln!(
        table,
        "| trace | policy | SLO missed | replica-hours | warm evictions | lost | scale actions | peak |"
    );
    let _ = writeln!(
        table,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for name in Trace::BUILTINS {
        let trace = Trace::builtin(name, TRACE_SECONDS).unwrap();
        for policy in policies {
            let o = run(&trace, policy);
            let missed = 100.0 * o.totals.slo_violations as f64 / o.totals.arrived.max(1) as f64;
            let _ = writeln!(
                table,
                "| {name} | {} | {missed:.1}% of {} | {:.1} | {} | {} | {} | {} |",
                policy.name(),
                o.totals.arrived,
                o.totals.pod_seconds / 3600.0,
                o.totals.warm_evictions,
                o.totals.lost,
                o.scale_actions,
                o.peak
            );
        }
    }
    print!("{table}");
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("policies.md"), &table).unwrap();
    println!("\nwritten to {}", dir.join("policies.md").display());
}
