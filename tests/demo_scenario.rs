//! `make demo`'s scenario in simulated time: the trace, speed and pods' start-up of
//! `config/demo/scenario.env`, the scaler of `config/demo/vllm-demo.yaml`, the simulated fleet
//! the demo runs (sim/), and the law the controller runs (`scaling::law`) at the scaler's sync
//! period, reading what Prometheus scraped at the demo's interval. Seconds instead of minutes,
//! and no cluster: the live demo adds the real apiserver, Prometheus and operator around the same
//! numbers.
//!
//! It fails if the demo stops telling its story: the fleet must grow on the burst (not ride it on
//! pods left over from a cold start), keep its misses to the burst, and shrink after it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use llmscaleoperator::api::LLMScalerSpec;
use llmscaleoperator::api::behavior::{behavior, stages, target_type};
use llmscaleoperator::api::validation::parse_target;
use llmscaleoperator::scaling::{
    Bounds, Input, Memory, MetricReading, Signal, SkipReason, Stored, TargetState, Unreadable,
    effective_startup, law,
};
use llmscaleoperator::signals::prometheus::QueryError;
use llmscaleoperator_sim::fleet::{Fleet, FleetConfig};
use llmscaleoperator_sim::trace::Trace;
use serde::Deserialize;
use serde_json::Value;

/// The demo's Prometheus scrapes every 2 s (scripts/demo.sh's prometheus.yml).
const SCRAPE_SECONDS: f64 = 2.0;

/// `config/demo/scenario.env`'s defaults: `KEY=${KEY:-value}` lines.
fn scenario() -> BTreeMap<String, String> {
    let text =
        std::fs::read_to_string(common::repo_root().join("config/demo/scenario.env")).unwrap();
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#') && l.contains('='))
        .map(|l| {
            let (key, rest) = l.split_once('=').unwrap();
            let value = rest
                .split_once(":-")
                .map(|(_, v)| v.trim_end_matches('}'))
                .unwrap_or(rest);
            (key.trim().to_owned(), value.trim().to_owned())
        })
        .collect()
}

/// The LLMScaler of `config/demo/vllm-demo.yaml`.
fn demo_spec() -> LLMScalerSpec {
    let text =
        std::fs::read_to_string(common::repo_root().join("config/demo/vllm-demo.yaml")).unwrap();
    let scaler = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "LLMScaler")
        .expect("the demo's LLMScaler");
    serde_json::from_value(scaler["spec"].clone()).unwrap()
}

/// The demo at one step of simulated time.
struct Row {
    /// Requests per second arriving.
    rate: f64,
    /// Pods of the Deployment (`spec.replicas`; kwok makes them Ready at once).
    pods: usize,
    /// Requests that missed the TTFT objective so far.
    misses: u64,
}

/// One run of the demo, a row per step, and the requests that arrived in all.
struct Run {
    rows: Vec<Row>,
    arrived: u64,
}

fn run_demo() -> Run {
    let scenario = scenario();
    let number = |key: &str| -> f64 { scenario[key].parse().unwrap() };
    let speed = number("DEMO_SPEED");
    let length = speed * number("DEMO_SECONDS");
    let trace = Trace::builtin(&scenario["DEMO_TRACE"], length).expect("a built-in trace");
    let spec = demo_spec();
    let metric = &spec.metrics.as_ref().unwrap()[0];
    let stages = stages(&spec, None).unwrap();
    let mut fleet = Fleet::new(FleetConfig {
        startup_delay: Duration::from_secs_f64(number("DEMO_STARTUP_DELAY")),
        ..FleetConfig::default()
    });
    // The Deployment's one pod was Ready before the demo began (fleet-sim counts it warm).
    let mut names: Vec<String> = vec!["pod-0".to_owned()];
    let mut created = 1;
    fleet.warm_pods(names.clone());
    let mut memory = Memory::default();
    let mut stored = Stored::default();
    let mut scraped: Option<f64> = None;
    let (mut next_scrape, mut next_sync) = (0.0, f64::from(spec.sync_period_seconds));
    let mut rows = Vec::new();
    let epoch = Timestamp::from_second(1_700_000_000).unwrap();
    // The live demo steps the fleet by 100 ms of real time, DEMO_SPEED times faster.
    let tick = Duration::from_secs_f64(0.1 * speed);
    while fleet.now().as_secs_f64() < length {
        fleet.step(tick, &trace);
        let real = fleet.now().as_secs_f64() / speed;
        if real >= next_scrape {
            next_scrape += SCRAPE_SECONDS;
            // The metric's query: avg over the pods' series of running + waiting.
            let pods: Vec<_> = fleet.pods().collect();
            scraped = (!pods.is_empty()).then(|| {
                pods.iter()
                    .map(|p| (p.running + p.waiting) as f64)
                    .sum::<f64>()
                    / pods.len() as f64
            });
        }
        if real >= next_sync {
            next_sync += f64::from(spec.sync_period_seconds);
            let replicas = i32::try_from(names.len()).unwrap();
            let input = Input {
                signal: Signal::Ratio(vec![MetricReading {
                    name: "busy".into(),
                    // What the controller reads for a query with no series yet.
                    value: scraped
                        .ok_or_else(|| SkipReason::Unavailable(Unreadable::new(QueryError::Empty))),
                    target: parse_target(&metric.target).unwrap(),
                    kind: target_type(metric.target_type),
                }]),
                // kwok makes a pod Ready as soon as it is created: every pod asked for is Ready.
                target: TargetState {
                    spec_replicas: replicas,
                    ready_replicas: replicas,
                    rollout: None,
                },
                bounds: Bounds {
                    min: spec.min_replicas,
                    max: spec.max_replicas,
                },
                behavior: behavior(&spec).unwrap(),
                // Ready at once, so what the operator learns of the start-up is nothing.
                startup_seconds: effective_startup(spec.startup_seconds, None),
                memory: std::mem::take(&mut memory),
                now: epoch + SignedDuration::from_secs_f64(real),
                down_waits: None,
                admitted: None,
                down_share: None,
            };
            let step = law(&input, &stages, None, None, stored.clone());
            stored.syncs_without_signal = step.syncs_without_signal;
            memory = step.decision.memory;
            if let Some(write) = step.decision.write {
                let write = usize::try_from(write).unwrap();
                while names.len() < write {
                    names.push(format!("pod-{created}"));
                    created += 1;
                }
                // The newest (coldest) pods go first.
                names.truncate(write);
                fleet.set_pods(names.clone());
            }
        }
        rows.push(Row {
            rate: trace.rate(fleet.now()),
            pods: names.len(),
            misses: fleet.totals().slo_violations,
        });
    }
    Run {
        rows,
        arrived: fleet.totals().arrived,
    }
}

#[test]
fn the_demo_scales_up_on_the_burst_and_down_after_it() {
    let run = run_demo();
    let base = run.rows[0].rate;
    let in_burst = |rate: f64| rate > 2.0 * base;
    let start = run.rows.iter().position(|r| in_burst(r.rate)).unwrap();
    let end = run.rows.iter().rposition(|r| in_burst(r.rate)).unwrap();
    let (before, burst, after) = (
        &run.rows[..start],
        &run.rows[start..=end],
        &run.rows[end + 1..],
    );
    let pods = |rows: &[Row]| rows.iter().map(|r| r.pods).max().unwrap();
    let summary = format!(
        "pods before {}, in the burst {}, at the end {}; misses before {}, to the end of the burst \
         {}, in all {} of {} requests",
        pods(before),
        pods(burst),
        run.rows.last().unwrap().pods,
        before.last().unwrap().misses,
        burst.last().unwrap().misses,
        run.rows.last().unwrap().misses,
        run.arrived
    );
    // The quiet start fits the one pod there: no cold-start scale-up before the burst.
    assert_eq!(pods(before), 1, "{summary}");
    assert_eq!(before.last().unwrap().misses, 0, "{summary}");
    // The burst needs more pods than the fleet has, and gets them.
    assert!(pods(burst) >= 3, "{summary}");
    // No scale-down while the burst lasts: the count never falls inside it.
    assert!(
        burst.windows(2).all(|w| w[1].pods >= w[0].pods),
        "a scale-down in the burst: {summary}"
    );
    // Misses come with the burst's first minutes, while the new pods load, and stop there.
    let misses = run.rows.last().unwrap().misses;
    assert!(misses > 0, "{summary}");
    assert_eq!(
        misses,
        burst.last().unwrap().misses,
        "misses after the burst: {summary}"
    );
    assert!(
        (misses as f64) < 0.25 * run.arrived as f64,
        "too many misses: {summary}"
    );
    // And the fleet comes back down after it.
    assert!(
        run.rows.last().unwrap().pods < pods(burst),
        "no scale-down after the burst: {summary}"
    );
    assert!(after.iter().any(|r| r.pods == 1), "{summary}");
}
