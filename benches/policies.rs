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
//! `--traces conversation,step`, `--delays 60,180,300`, `--threads N`,
//! `--only operator,HPA` (those families of the roster only), `--print-timelines`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod lab;

use std::time::Instant;

use lab::{Lab, run_lab};
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
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => {
                lab.seeds = 5;
                lab.traces = vec![Shape::Conversation];
                lab.delays = vec![180.0];
            }
            "--seeds" => lab.seeds = it.next().and_then(|v| v.parse().ok()).unwrap(),
            "--threads" => lab.threads = it.next().and_then(|v| v.parse().ok()).unwrap(),
            "--traces" => {
                lab.traces = it
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|n| Shape::parse(n).unwrap_or_else(|| panic!("unknown trace {n}")))
                    .collect();
            }
            "--delays" => {
                lab.delays = it
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|d| d.parse().unwrap())
                    .collect();
            }
            "--only" => {
                lab.families = Some(it.next().unwrap().split(',').map(str::to_owned).collect());
            }
            "--print-timelines" => lab.print_timelines = true,
            // cargo bench passes --bench to every bench binary.
            _ => {}
        }
    }
    lab
}
