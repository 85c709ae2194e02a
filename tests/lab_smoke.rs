//! The scaling-quality lab end to end, small enough for `make test`: two traces, two seeds, the
//! first half hour, every policy of the roster (this operator's real decision core and every
//! peer), the report and its pictures. The lab's numbers are judged by `make lab`, not here;
//! this shows that the instrument works and says what it should.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../benches/lab/mod.rs"]
mod lab;

use lab::{Lab, Objective, Operator, run_lab};
use llmscaleoperator_sim::lab::metrics::Scrapes;
use llmscaleoperator_sim::lab::policy::{Bounds, PodState, Policy, View};
use llmscaleoperator_sim::lab::traces::{AZURE_DIR, Trace};
use llmscaleoperator_sim::lab::workload::Shape;

/// The real code log beside the project, as `make lab` replays it by default.
fn code_log() -> Trace {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(AZURE_DIR)
        .join("AzureLLMInferenceTrace_code.csv");
    Trace::log(&path, Some("azure-code")).unwrap()
}
use serde_json::json;

#[test]
fn the_lab_runs_every_policy_and_writes_its_report() {
    let out = std::env::temp_dir().join(format!("lab-smoke-{}", std::process::id()));
    let lab = Lab {
        seeds: 2,
        traces: vec![
            code_log(),
            Trace::Synthetic(Shape::Step),
            Trace::Synthetic(Shape::Idle),
        ],
        delays: vec![60.0],
        duration: Some(1800.0),
        out: out.clone(),
        ..Lab::full()
    };
    let md = run_lab(&lab);
    let written = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert_eq!(md, written);
    for family in [
        "llmscaleoperator",
        "llmscaleoperator (before: plain ratio)",
        "llmscaleoperator (no look-ahead)",
        "HPA",
        "KEDA",
        "Knative KPA",
        "AIBrix APA",
        "AIBrix KPA",
        "WVA",
        "oracle (knows the future)",
    ] {
        assert!(
            md.contains(&format!("| {family} |")),
            "{family} missing from the summary:\n{md}"
        );
    }
    assert!(
        md.contains("| AIBrix KPA (documented intent) |"),
        "AIBrix runs as shipped, with the docs' intent as a variant: {md}"
    );
    assert!(
        md.contains("| KEDA (min 1) |"),
        "idle runs scale-to-zero peers at min 1 too"
    );
    // The oracle knows the future: it is the reference, and it must be a good one.
    let oracle_line = md
        .lines()
        .find(|l| l.starts_with("| oracle (knows the future) |"))
        .unwrap();
    let step_column = md
        .lines()
        .find(|l| l.starts_with("| policy |"))
        .and_then(|header| header.split('|').position(|c| c.trim() == "step"))
        .unwrap();
    let step_attained: f64 = oracle_line
        .split('|')
        .nth(step_column)
        .and_then(|cell| cell.split('%').next())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(step_attained >= 95.0, "{oracle_line}");
    // The judge of a change to the control law, one row per cell.
    assert!(
        md.contains(
            "### GPU-hours at 99% goodput: the operator's defaults against every peer's cheapest way there"
        ),
        "{md}"
    );
    assert!(
        md.contains("| trace | start-up | 95% | 99% | 99.9% |"),
        "{md}"
    );
    // Beside the cost bound, the room a policy without the future has: the reactive bound's
    // cheapest headroom to the level, where a peer and a headroom reach it.
    let header = md
        .lines()
        .find(|l| l.starts_with("| trace | start-up | operator: attained, replica-h |"))
        .unwrap();
    let reactive_column = header
        .split('|')
        .position(|c| c.trim() == "reactive ÷ cheapest")
        .unwrap_or_else(|| panic!("{header}"));
    let reactive: Vec<f64> = md
        .lines()
        .filter(|l| {
            l.split('|')
                .nth(2)
                .is_some_and(|c| c.trim().ends_with(" s"))
        })
        .filter_map(|l| l.split('|').nth(reactive_column)?.trim().parse().ok())
        .collect();
    assert!(
        !reactive.is_empty() && reactive.iter().all(|r| *r > 0.0),
        "{reactive:?} {md}"
    );
    assert!(
        md.contains("| step | 60 s |")
            && md.contains("| idle | 60 s |")
            && md.contains("| azure-code | 60 s |"),
        "{md}"
    );
    // The log's replay is stated: its size, the fleet it is scaled to, what was clipped.
    assert!(
        md.contains("Real request logs: azure-code (8819 requests over"),
        "{md}"
    );
    assert!(md.contains("requests clipped to a pod's KV cache"), "{md}");
    // One setting everywhere: the defaults, then each peer kept at one setting for every trace.
    assert!(
        md.contains("**One setting everywhere**, 60 s start-up"),
        "{md}"
    );
    assert!(
        md.lines()
            .any(|l| l.starts_with("| operator | llmscaleoperator | ") && l.contains(" of ")),
        "{md}"
    );
    // … and the reactive bound kept at one headroom, beside the peers.
    assert!(
        md.lines()
            .any(|l| l.starts_with("| reactive bound | reactive bound ×") && l.contains(" of ")),
        "{md}"
    );
    // The reactive bound at the headroom it measures from the rises it has seen runs in every
    // cell (the one setting it reaches the level in none of here is left out of that table).
    assert_eq!(
        md.lines()
            .filter(|l| l.starts_with("| measured-headroom bound | ") && l.contains('%'))
            .count(),
        3,
        "{md}"
    );
    // Every cell states its cost bound, and the oracle spends more than it.
    assert_eq!(md.matches("Cost bound: ").count(), 3, "{md}");
    let oracle_over_bound: f64 = md
        .lines()
        .find(|l| l.starts_with("| **oracle (knows the future) | "))
        .and_then(|l| l.split('|').nth(7))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(oracle_over_bound >= 1.0, "{oracle_over_bound}");
    // The machine-readable result: a row per (trace, delay, setting, seed).
    let csv = std::fs::read_to_string(out.join(lab::RESULTS_CSV)).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    let settings = md
        .lines()
        .filter(|l| {
            // A cell table's row: its second column is the attainment, as "99.95%".
            l.split('|').nth(2).is_some_and(|c| {
                c.trim()
                    .strip_suffix('%')
                    .is_some_and(|v| v.parse::<f64>().is_ok())
            })
        })
        .count();
    assert_eq!(
        rows.len(),
        settings * 2,
        "two seeds of every setting of every cell"
    );
    assert!(
        rows.iter()
            .any(|r| r.starts_with("azure-code,60,operator,llmscaleoperator,true,1,")),
        "{csv}"
    );
    // Paired intervals against every peer, and the recovery after the step.
    assert!(
        md.contains("| HPA (defaults) |") && md.contains("| WVA (defaults) |"),
        "{md}"
    );
    for svg in [
        "pareto-step-60s.svg",
        "pareto-idle-60s.svg",
        "timeline-step.svg",
    ] {
        let picture = std::fs::read_to_string(out.join(svg)).unwrap();
        assert!(picture.contains("llmscaleoperator"), "{svg}");
    }
    // The operator alone, judged against this run's results file (`--only operator
    // --peers-from`): the summary and the verdict are the full run's, since the operator is
    // deterministic and every peer and the oracle come from the file, seed for seed.
    let rerun_out = out.with_extension("rerun");
    let rerun = run_lab(&Lab {
        families: Some(vec!["operator".to_owned()]),
        peers_from: Some(out.join(lab::RESULTS_CSV)),
        out: rerun_out.clone(),
        ..lab
    });
    let judged = |md: &str| -> String {
        let from = md.find("### 60 s start-up: SLO attained").unwrap();
        let to = md[from..].find("\n## ").map_or(md.len(), |i| from + i);
        md[from..to].to_owned()
    };
    // A per-cell table lists only what ran: the full run's has the peers' settings, the
    // rerun's the operator's alone.
    let peer_row = |md: &str| md.lines().any(|l| l.starts_with("| HPA (target 8) | "));
    assert!(peer_row(&md), "{md}");
    assert!(
        !peer_row(&rerun) && rerun.contains("also take the peers"),
        "only the operator ran again: {rerun}"
    );
    assert_eq!(judged(&rerun), judged(&md));
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::remove_dir_all(&rerun_out).unwrap();
}

/// The entrant runs the law that ships, every stage of it: with a fallback in its spec, a
/// signal lost for `failureThreshold` syncs raises the fleet to the fallback's count, as the
/// controller does (a lab that called `decide` alone would hold at 2 for ever).
#[test]
fn the_operator_entrant_runs_the_whole_law_fallback_included() {
    let bounds = Bounds { min: 1, max: 10 };
    let fallback = json!({ "fallback": { "failureThreshold": 3, "replicas": 6 } });
    let pods: Vec<PodState> = (0..2)
        .map(|id| PodState {
            id,
            created: 0.0,
            running_at: Some(0.0),
            ready_at: Some(1.0),
        })
        .collect();
    // Nothing scraped: no series, so no usable signal.
    let nothing = Scrapes::new();
    let mut with = Operator::with(bounds, fallback);
    let mut without = Operator::new(bounds);
    let mut counts = Vec::new();
    for sync in 1..=4 {
        let view = View {
            now: 600.0 + 15.0 * f64::from(sync),
            spec: 2,
            pods: &pods,
            metrics: &nothing,
        };
        counts.push((with.decide(&view), without.decide(&view)));
    }
    assert_eq!(counts, [(2, 2), (2, 2), (6, 2), (6, 2)]);
}

/// The objective entrant learns its target from what the pods export: from a prior of 16 in
/// flight per pod (far too many for an L4 at a 100 ms TPOT), the TPOT and queue-time histograms
/// it scrapes bring the estimate down within half an hour of conversation traffic.
#[test]
fn the_objective_entrant_learns_its_target_from_the_pods_histograms() {
    use llmscaleoperator_sim::lab::run::{FleetSetup, run};
    use llmscaleoperator_sim::lab::workload::generate_at_rate;

    let bounds = Bounds { min: 1, max: 40 };
    let mut operator = Operator::objective(bounds, 16.0, Objective::default());
    assert_eq!(operator.learned().map(|c| c.per_pod), Some(16.0));
    let requests = generate_at_rate(Shape::Conversation, 1, 4.0, 1800.0);
    let setup = FleetSetup {
        startup: 60.0,
        initial_pods: 4,
        ..FleetSetup::default()
    };
    run(&requests, 1800.0, None, &mut operator, &setup, 1);
    let learned = operator.learned().unwrap();
    assert!(learned.per_pod < 16.0, "{learned:?}");
    assert!(learned.missed_at.is_some(), "a miss was seen: {learned:?}");
}

/// `make what-if` on a log of one's own and an objective of one's own: the spec the operator runs
/// (that objective, no target to guess) and a row for it, the HPA and KEDA at their defaults and
/// cheapest at the objective's percentile, and the oracle, for each start-up delay; goodput is
/// judged by that objective.
#[test]
fn what_if_prints_the_spec_and_the_peers_on_ones_own_log() {
    // Twenty minutes of a chat-like log: a request every 0.25 s, prompts and answers that vary.
    let dir = std::env::temp_dir().join(format!("llmsc-what-if-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mine.csv");
    let mut csv = String::from("TIMESTAMP,ContextTokens,GeneratedTokens\n");
    for i in 0..4800u32 {
        let at = f64::from(i) * 0.25;
        csv.push_str(&format!(
            "{at},{},{}\n",
            200 + (i * 37) % 1800,
            40 + (i * 13) % 400
        ));
    }
    std::fs::write(&path, csv).unwrap();
    let lab = Lab {
        seeds: 2,
        traces: vec![Trace::log(&path, Some("mine")).unwrap()],
        delays: vec![180.0],
        families: Some(
            ["operator", "HPA", "KEDA", "oracle"]
                .map(str::to_owned)
                .to_vec(),
        ),
        what_if: true,
        objective: Objective {
            ttft: 3.0,
            tpot: 0.15,
            percentile: 95.0,
        },
        out: dir.join("out"),
        ..Lab::full()
    };
    let md = run_lab(&lab);
    assert!(
        md.contains("SLO (goodput): TTFT ≤ 3 s and TPOT ≤ 0.15 s"),
        "goodput is judged by the objective given: {}",
        &md[..md.len().min(2000)]
    );
    let what_if = &md[md.find("## What if").expect("a what-if section")..];
    assert!(
        what_if.contains("TTFT ≤ 3 s and TPOT ≤ 0.15 s for 95% of requests"),
        "{what_if}"
    );
    let spec = &what_if[what_if.find("```yaml").unwrap()..];
    let spec = &spec[..spec.find("```\n").unwrap()];
    for field in [
        "kind: LLMScaler",
        "objective:",
        "selector:",
        "maxReplicas: 64",
        "ttftSeconds: '3'",
        "tpotSeconds: '0.15'",
        "percentile: '95'",
    ] {
        assert!(spec.contains(field), "{field} in {spec}");
    }
    assert!(
        !spec.contains("target:"),
        "no per-replica target to guess: {spec}"
    );
    let cell = &what_if[what_if.find("### mine, 180 s start-up").unwrap()..];
    for row in [
        "| llmscaleoperator (objective) |",
        "| HPA (defaults) |",
        "| HPA (cheapest at 95%) |",
        "| KEDA (defaults) |",
        "| KEDA (cheapest at 95%) |",
        "| oracle (knows the future) |",
    ] {
        assert!(cell.contains(row), "{row} in {cell}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
