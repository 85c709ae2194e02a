//! `make lab` (and `make bench`): the scaling-quality lab. Every trace of `sim/src/lab/workload.rs`
//! is replayed, for many seeds and three start-up delays, over the simulated vLLM fleet under
//! this operator's real decision core (`scaling::decide`) and under every peer's control law
//! (`sim/src/lab/peers/`), each at its defaults and over a small grid of settings, plus an oracle
//! that knows the future. One seed is one exact workload for every policy, so the operator's
//! difference to each peer is paired, with a bootstrap 95% interval.
//!
//! Writes target/bench/lab/README.md (the tables), a Pareto plot per (trace, start-up delay) and
//! a timeline per trace (one seed, 180 s start-up) as SVG beside it.
//!
//! Arguments (after `--`): `--quick` (one trace, one delay, 5 seeds), `--seeds N`,
//! `--traces azure-code,conversation,step` (by name, from the default roster),
//! `--log FILE` (a request log of one's own, repeatable; see `sim/src/lab/request_log.rs`),
//! `--delays 90,180,300` (the default), `--threads N`,
//! `--only operator,HPA` (those families of the roster only), `--print-timelines`,
//! `--priors 8,24` (the objective also from those starting estimates, as the prior of 16 is),
//! `--timeline-seed N` (the seed the timelines draw; 0 without it),
//! `--what-if` (with `--log`: lead with the operator on the objective beside the HPA and KEDA at
//! their defaults and cheapest at 99%, and the spec it runs; `make what-if LOG=FILE`),
//! `--ttft S --tpot S --percentile P` (the objective goodput is judged by and the objective
//! entrants state: TTFT ≤ 2 s and TPOT ≤ 0.1 s for 99% of requests without them).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod lab;

use std::time::Instant;

use std::path::PathBuf;

use lab::{Lab, run_lab};
use llmscaleoperator_sim::lab::engine::PodProfile;
use llmscaleoperator_sim::lab::traces::Trace;
use llmscaleoperator_sim::lab::workload::Shape;

fn main() {
    let started = Instant::now();
    let lab = parse_args();
    let md = run_lab(&lab);
    print!("{md}");
    println!(
        "\nwritten to {} in {} s",
        lab.out.display(),
        started.elapsed().as_secs()
    );
}

fn parse_args() -> Lab {
    let mut lab = Lab::full();
    let mut named: Option<String> = None;
    let mut logs: Vec<Trace> = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => {
                lab.seeds = 5;
                named = Some("conversation".to_owned());
                lab.delays = vec![180.0];
            }
            "--seeds" => lab.seeds = it.next().and_then(|v| v.parse().ok()).unwrap(),
            "--threads" => lab.threads = it.next().and_then(|v| v.parse().ok()).unwrap(),
            "--traces" => named = Some(it.next().unwrap()),
            "--log" => {
                let path = PathBuf::from(it.next().unwrap());
                let trace = Trace::log(&path, None)
                    .unwrap_or_else(|e| panic!("{}", llmscaleoperator::error_chain::Chain(&e)));
                logs.push(trace);
            }
            "--delays" => lab.delays = numbers(&it.next().unwrap()),
            "--only" => {
                lab.families = Some(outside_parentheses(&it.next().unwrap()));
            }
            "--print-timelines" => lab.print_timelines = true,
            "--timeline-seed" => {
                lab.timeline_seed = it.next().and_then(|v| v.parse().ok()).unwrap();
            }
            "--priors" => lab.priors = numbers(&it.next().unwrap()),
            "--peers-from" => lab.peers_from = Some(PathBuf::from(it.next().unwrap())),
            "--what-if" => {
                lab.what_if = true;
                lab.families = Some(
                    ["operator", "HPA", "KEDA", "oracle"]
                        .map(str::to_owned)
                        .to_vec(),
                );
            }
            // The objective `--what-if` states and judges by (the spec's defaults without them).
            "--ttft" => lab.objective.ttft = it.next().and_then(|v| v.parse().ok()).unwrap(),
            "--tpot" => lab.objective.tpot = it.next().and_then(|v| v.parse().ok()).unwrap(),
            "--percentile" => {
                lab.objective.percentile = it.next().and_then(|v| v.parse().ok()).unwrap();
            }
            "--profile" => {
                let name = it.next().unwrap();
                lab.profile = PodProfile::parse(&name).unwrap_or_else(|| {
                    panic!(
                        "unknown pod profile {name}: one of {}",
                        PodProfile::ALL.map(|p| p.name).join(", ")
                    )
                });
            }
            // cargo bench passes --bench to every bench binary.
            _ => {}
        }
    }
    // A log of one's own is the trace (with the named ones beside it, if any); `--traces`
    // alone picks from the default roster by name.
    let roster = std::mem::take(&mut lab.traces);
    let logs_given: Vec<String> = logs.iter().map(|t| t.name().to_owned()).collect();
    let mut traces = logs;
    if let Some(named) = named {
        for name in named.split(',') {
            let trace = roster
                .iter()
                .find(|t| t.name() == name)
                .cloned()
                .or_else(|| Shape::parse(name).map(Trace::Synthetic))
                .unwrap_or_else(|| panic!("unknown trace {name}"));
            traces.push(trace);
        }
    }
    assert!(
        !lab.what_if || !logs_given.is_empty(),
        "--what-if needs a request log: --log FILE (see sim/src/lab/request_log.rs)"
    );
    lab.traces = if traces.is_empty() { roster } else { traces };
    lab
}

/// A comma-separated list of numbers.
fn numbers(list: &str) -> Vec<f64> {
    list.split(',').map(|n| n.parse().unwrap()).collect()
}

/// `list` split at its commas outside parentheses: an entrant's label may hold one
/// (`llmscaleoperator (objective, prior 24)`).
fn outside_parentheses(list: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut depth = 0usize;
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}
