//! The scaling-quality lab's driver, shared by `benches/policies.rs` (`make lab`) and the smoke
//! test (`tests/lab_smoke.rs`): this operator as a lab policy (`operator.rs`), the roster of
//! peers and grid settings, the seeded runs on every core, and the report (tables, paired
//! intervals, SVG plots).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

mod operator;
mod what_if;

use llmscaleoperator::api::objective::DEFAULT_PRIOR;
use llmscaleoperator_sim::lab::chart::{self, ParetoPoint, Timeline};
use llmscaleoperator_sim::lab::engine::PodProfile;
use llmscaleoperator_sim::lab::oracle::{Oracle, Reactive, cost_bound, per_pod_capacity};
use llmscaleoperator_sim::lab::peers::{
    AibrixApa, AibrixConfig, AibrixKpa, Hpa, HpaConfig, Keda, KedaConfig, Knative, KnativeConfig,
    Signal, Tolerances, Wva, WvaConfig,
};
use llmscaleoperator_sim::lab::policy::{Bounds, Policy};
use llmscaleoperator_sim::lab::report::{
    Runs, best_of, miss_percent, paired_difference, replica_hours, summarize,
};
use llmscaleoperator_sim::lab::run::{FleetSetup, Outcome, run};
use llmscaleoperator_sim::lab::traces::Trace;
use llmscaleoperator_sim::lab::workload::{Request, Shape};
use llmscaleoperator_sim::lab::{results_csv, verdict};
pub use operator::{Objective, Operator, TARGET};
use serde_json::json;

/// One policy of a cell's roster.
struct Entrant {
    family: &'static str,
    default: bool,
    /// Instead of the policy's own label, for a setting it does not name (its bounds).
    label: Option<String>,
    policy: Box<dyn Policy>,
}

impl Entrant {
    fn label(&self) -> String {
        self.label.clone().unwrap_or_else(|| self.policy.label())
    }

    fn named(mut self, label: &str) -> Self {
        self.label = Some(label.into());
        self
    }
}

fn entrant(family: &'static str, default: bool, policy: impl Policy + 'static) -> Entrant {
    Entrant {
        family,
        default,
        label: None,
        policy: Box::new(policy),
    }
}

/// Per-pod targets every ratio peer is also run at.
const GRID_TARGETS: [f64; 6] = [1.0, 2.0, 4.0, 8.0, 24.0, 32.0];
/// Mean KV-cache use (0 to 1) every ratio policy also runs at: a signal whose right target moves
/// less with the request mix than requests in flight do.
const KV_TARGETS: [f64; 3] = [0.3, 0.45, 0.6];

/// The reactive bound's headroom settings: its fleet is this many times what the busiest minute
/// of the last start-up needed.
const REACTIVE_HEADROOM: [f64; 6] = [1.0, 1.25, 1.5, 2.0, 3.0, 5.0];

/// The prior the roster always also runs the objective from: a user's guess of 16 in flight.
const GUESSED_PRIOR: f64 = 16.0;

/// The oracle's headroom settings: its fleet is this many times what the future needs.
const ORACLE_HEADROOM: [f64; 4] = [1.5, 2.0, 3.0, 4.0];

/// Every policy judged on one workload: the operator and each peer at its defaults, each over
/// its grid, the oracle and its mirror image, the reactive bound.
fn roster(
    bounds: Bounds,
    requests: &[Request],
    duration: f64,
    capacity: f64,
    startup: f64,
    objective: Objective,
    priors: &[f64],
) -> Vec<Entrant> {
    let mut all = vec![
        // The operator's defaults: a spec that states only the latency objective, at the spec's
        // defaults (and the lab's objective, for `make what-if`).
        entrant(
            "operator",
            true,
            Operator::objective(bounds, DEFAULT_PRIOR, objective),
        ),
        // What a spec with a guessed per-replica target does: 16 requests in flight per pod, the
        // operator's default before the objective.
        entrant("operator", false, Operator::new(bounds)),
        entrant(
            "operator",
            false,
            Operator::with(bounds, json!({"scaleDown": {"behavior": "None"}}))
                .named("llmscaleoperator (cache-aware off)"),
        ),
        // The control law before start-up awareness and behavior: the ratio with no tolerance,
        // no window, no rate limit, no look-ahead and no scaleToZero (what a spec from before them
        // reads as).
        entrant(
            "operator",
            false,
            Operator::with(
                bounds,
                json!({
                    "scaleUp": {"tolerance": "0", "policies": []},
                    "scaleDown": {"stabilizationWindowSeconds": 0, "tolerance": "0", "policies": []},
                    "startupSeconds": 0,
                    "scaleToZero": null,
                }),
            )
            .named("llmscaleoperator (before: plain ratio)"),
        ),
        entrant(
            "operator",
            false,
            Operator::with(
                bounds,
                json!({"metrics": [{"name": "in-flight", "query": "…", "target": TARGET.to_string(), "targetType": "AverageValue"}]}),
            )
            .named("llmscaleoperator (sum, AverageValue)"),
        ),
        entrant(
            "operator",
            false,
            Operator::with(bounds, json!({"startupSeconds": 0}))
                .named("llmscaleoperator (no look-ahead)"),
        ),
        entrant(
            "oracle",
            true,
            Oracle::new(requests, duration, capacity, startup * 1.2, bounds),
        ),
    ];
    // The objective from a prior four times too high (a user's guess of 16 in flight), and from
    // the starting estimates `--priors` asks for: what the prior costs, against the defaults.
    let mut starts = vec![GUESSED_PRIOR];
    for prior in priors {
        if *prior != DEFAULT_PRIOR && !starts.contains(prior) {
            starts.push(*prior);
        }
    }
    for prior in starts {
        all.push(entrant(
            "operator",
            false,
            Operator::objective(bounds, prior, objective),
        ));
    }
    // The oracle sized with headroom: what knowing the future buys at a given cost, so a reader
    // can tell the misses any sizing could still remove from those only spare capacity absorbs
    // (bursts shorter than a start-up).
    for headroom in ORACLE_HEADROOM {
        all.push(
            entrant(
                "oracle",
                false,
                Oracle::new(
                    requests,
                    duration,
                    capacity / headroom,
                    startup * 1.2,
                    bounds,
                ),
            )
            .named(&format!("oracle (knows the future) ×{headroom} headroom")),
        );
    }
    // The reactive bound: the capacity and every arrival so far known, the future not.
    for headroom in REACTIVE_HEADROOM {
        all.push(entrant(
            "oracle",
            false,
            Reactive::new(requests, capacity, headroom, startup * 1.2, bounds),
        ));
    }
    // … and with the headroom it measures from the traffic's rises instead of one given.
    all.push(entrant(
        "oracle",
        false,
        Reactive::measured(requests, capacity, startup * 1.2, bounds),
    ));
    for target in GRID_TARGETS {
        all.push(entrant(
            "operator",
            false,
            Operator::with(
                bounds,
                json!({"metrics": [{"name": "in-flight", "query": "…", "target": target.to_string()}]}),
            )
            .named(&format!("llmscaleoperator (target {target})")),
        ));
    }
    for target in KV_TARGETS {
        all.push(entrant(
            "operator",
            false,
            Operator::on_kv_cache(bounds, target),
        ));
    }

    // HPA: defaults, the scale-down window over 0/60 s, the targets.
    // Scale to zero is the operator's, KEDA's and Knative's; the HPA (without the alpha
    // HPAScaleToZero gate), AIBrix and the WVA keep at least one replica.
    let at_least_one = Bounds {
        min: bounds.min.max(1),
        ..bounds
    };
    if bounds.min == 0 {
        all.push(entrant(
            "operator",
            false,
            Operator::new(at_least_one).named("llmscaleoperator (min 1)"),
        ));
        // minReplicas 0 without scaleToZero: the ratio alone, woken only because the lab's query
        // counts the gateway's queue over at least one pod (what earlier releases offered).
        all.push(entrant(
            "operator",
            false,
            Operator::with(bounds, json!({"scaleToZero": null}))
                .named("llmscaleoperator (to zero without scaleToZero)"),
        ));
        all.push(
            entrant("KEDA", false, Keda::new(KedaConfig::new(at_least_one))).named("KEDA (min 1)"),
        );
        all.push(
            entrant(
                "Knative KPA",
                false,
                Knative::new(KnativeConfig::new(at_least_one)),
            )
            .named("Knative KPA (min 1)"),
        );
    }
    let hpa = HpaConfig::new(at_least_one);
    all.push(entrant("HPA", true, Hpa::new(hpa.clone())));
    for window in [0.0, 60.0] {
        let mut c = hpa.clone();
        c.behavior = c.behavior.map(|b| b.with_down_window(window));
        all.push(entrant("HPA", false, Hpa::new(c)));
    }
    for target in GRID_TARGETS {
        all.push(entrant(
            "HPA",
            false,
            Hpa::new(HpaConfig {
                target,
                ..hpa.clone()
            }),
        ));
    }
    for target in KV_TARGETS {
        all.push(entrant(
            "HPA",
            false,
            Hpa::new(HpaConfig {
                target,
                signal: Signal::KvUsage,
                ..hpa.clone()
            }),
        ));
    }

    // KEDA: defaults and the thresholds.
    let keda = KedaConfig::new(bounds);
    all.push(entrant("KEDA", true, Keda::new(keda.clone())));
    for target in GRID_TARGETS {
        all.push(entrant(
            "KEDA",
            false,
            Keda::new(KedaConfig {
                threshold: target,
                ..keda.clone()
            }),
        ));
    }
    for target in KV_TARGETS {
        all.push(entrant(
            "KEDA",
            false,
            Keda::new(KedaConfig {
                threshold: target,
                signal: Signal::KvUsage,
                ..keda.clone()
            }),
        ));
    }

    // Knative KPA: defaults and the targets.
    let kpa = KnativeConfig::new(bounds);
    all.push(entrant("Knative KPA", true, Knative::new(kpa.clone())));
    for target in GRID_TARGETS {
        all.push(entrant(
            "Knative KPA",
            false,
            Knative::new(KnativeConfig {
                target,
                ..kpa.clone()
            }),
        ));
    }
    for target in KV_TARGETS {
        all.push(entrant(
            "Knative KPA",
            false,
            Knative::new(KnativeConfig {
                target,
                signal: Signal::KvUsage,
                ..kpa.clone()
            }),
        ));
    }

    // AIBrix: APA and KPA as shipped (what users run), as documented where the code differs,
    // and the targets.
    let aibrix = AibrixConfig::shipped(at_least_one);
    all.push(entrant("AIBrix APA", true, AibrixApa::new(aibrix.clone())));
    all.push(entrant("AIBrix KPA", true, AibrixKpa::new(aibrix.clone())));
    let documented = AibrixConfig::new(at_least_one);
    all.push(entrant(
        "AIBrix APA",
        false,
        AibrixApa::new(documented.clone()),
    ));
    all.push(entrant("AIBrix KPA", false, AibrixKpa::new(documented)));
    let kv = KV_TARGETS.map(|target| (target, Signal::KvUsage));
    for (target, signal) in GRID_TARGETS
        .map(|t| (t, Signal::Concurrency))
        .into_iter()
        .chain(kv)
    {
        let c = AibrixConfig {
            target,
            signal,
            ..aibrix.clone()
        };
        all.push(entrant("AIBrix APA", false, AibrixApa::new(c.clone())));
        all.push(entrant("AIBrix KPA", false, AibrixKpa::new(c)));
    }

    // llm-d WVA: with the HPA its chart ships, with that HPA's tolerance at 0 (Kubernetes 1.33's
    // configurable tolerance), and driving the replicas directly.
    let wva = WvaConfig::new(at_least_one);
    all.push(entrant("WVA", true, Wva::new(wva.clone())));
    all.push(entrant(
        "WVA",
        false,
        Wva::new(WvaConfig {
            hpa_tolerances: Tolerances { down: 0.0, up: 0.0 },
            ..wva.clone()
        }),
    ));
    all.push(entrant(
        "WVA",
        false,
        Wva::new(WvaConfig { hpa: None, ..wva }),
    ));
    all
}

type CellKey = (Trace, u64);

/// What to run and where to write the report.
pub struct Lab {
    pub seeds: u64,
    pub traces: Vec<Trace>,
    /// What the report should say about the roster (a default log that could not be read).
    pub notes: Vec<String>,
    pub delays: Vec<f64>,
    pub threads: usize,
    /// Seconds of each trace to replay (`None`: the whole trace).
    pub duration: Option<f64>,
    /// Only these families of the roster, or entrants by their label (`None`: all); for
    /// iterating on one policy (`llmscaleoperator` alone is the operator's defaults).
    pub families: Option<Vec<String>>,
    /// Also print the timelines as text (one line per minute).
    pub print_timelines: bool,
    /// The seed whose timelines are drawn (at the middle start-up delay of the lab).
    pub timeline_seed: u64,
    /// The pod every fleet is made of.
    pub profile: PodProfile,
    /// Lead the report with what the operator, scaling to the objective, and the HPA and KEDA
    /// would have done (`make what-if`).
    pub what_if: bool,
    /// The objective goodput is judged by and the objective entrants state.
    pub objective: Objective,
    /// A results file of an earlier run: its peer families join the verdict of the cells that
    /// ran none of their own (`--only operator` judged against every peer in under a minute).
    pub peers_from: Option<PathBuf>,
    /// Starting estimates (requests in flight per pod) the objective is also run from, beside
    /// the default and 16 (`--priors`).
    pub priors: Vec<f64>,
    pub out: PathBuf,
}

impl Lab {
    /// Every trace (the real Azure logs beside the project, when they are there, and every
    /// synthetic shape), every start-up delay, 8 seeds (about 8 minutes on 2 cores; 20 give
    /// tighter intervals in 2.5 times as long), every core; the report in
    /// target/bench/lab.
    pub fn full() -> Self {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut traces = Vec::new();
        let mut notes = Vec::new();
        for log in Trace::azure(repo) {
            match log {
                Ok(trace) => traces.push(trace),
                Err(error) => notes.push(format!(
                    "Not replayed: {} (the Azure LLM inference trace 2023 is public: put its two CSV files in {}, or replay any log with `--log FILE`).",
                    llmscaleoperator::error_chain::Chain(&error),
                    llmscaleoperator_sim::lab::traces::AZURE_DIR
                )),
            }
        }
        traces.extend(Shape::ALL.map(Trace::Synthetic));
        Self {
            seeds: 8,
            traces,
            notes,
            delays: vec![90.0, 180.0, 300.0],
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            duration: None,
            families: None,
            print_timelines: false,
            timeline_seed: 0,
            profile: PodProfile::default(),
            what_if: false,
            objective: Objective::default(),
            peers_from: None,
            priors: Vec::new(),
            out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench/lab"),
        }
    }
}

/// The report's markdown (also written to `out/README.md`).
pub fn run_lab(lab: &Lab) -> String {
    let started = Instant::now();
    let profile = lab.profile;
    let setup = FleetSetup {
        profile,
        slo_ttft: lab.objective.ttft,
        slo_tpot: lab.objective.tpot,
        ..FleetSetup::default()
    };
    let capacities: Vec<f64> = lab
        .traces
        .iter()
        .map(|t| per_pod_capacity(t, &setup))
        .collect();
    // A shape's rates are set for the default pod: on another, they are multiplied by what this
    // pod serves of the shape over what the default one does, so fleets span the same pods.
    let reference = FleetSetup::default();
    let traffic: Vec<f64> = lab
        .traces
        .iter()
        .zip(&capacities)
        .map(|(t, capacity)| {
            if matches!(t, Trace::Log(_)) || reference.profile == profile {
                1.0
            } else {
                capacity / per_pod_capacity(t, &reference)
            }
        })
        .collect();
    // (trace index, delay, seed)
    let units: Vec<(usize, f64, u64)> = (0..lab.traces.len())
        .flat_map(|t| {
            lab.delays
                .iter()
                .flat_map(move |d| (0..lab.seeds).map(move |seed| (t, *d, seed)))
        })
        .collect();
    // Per trace: requests replayed and clipped to fit a pod, over every seed and delay.
    let clipped: Mutex<BTreeMap<usize, (usize, usize)>> = Mutex::new(BTreeMap::new());
    // Per cell: the cost bound of each seed's workload.
    let cost_bounds: Mutex<BTreeMap<CellKey, BTreeMap<u64, f64>>> = Mutex::new(BTreeMap::new());
    // (trace, delay) -> label -> (family, default, outcome per seed)
    type Cells = BTreeMap<CellKey, BTreeMap<String, (String, bool, Vec<(u64, Outcome)>)>>;
    let cells: Mutex<Cells> = Mutex::new(BTreeMap::new());
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..lab.threads.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(t, delay, seed)) = units.get(i) else {
                        return;
                    };
                    let trace = &lab.traces[t];
                    let unit = run_unit(lab, trace, delay, seed, &setup, capacities[t], traffic[t]);
                    {
                        let mut clipped = clipped.lock().unwrap();
                        let seen = clipped.entry(t).or_default();
                        seen.0 += unit.replayed;
                        seen.1 += unit.clipped;
                    }
                    cost_bounds
                        .lock()
                        .unwrap()
                        .entry((trace.clone(), delay as u64))
                        .or_default()
                        .insert(seed, unit.bound);
                    let mut cells = cells.lock().unwrap();
                    let cell = cells.entry((trace.clone(), delay as u64)).or_default();
                    for (label, family, default, outcome) in unit.results {
                        cell.entry(label)
                            .or_insert_with(|| (family, default, Vec::new()))
                            .2
                            .push((seed, outcome));
                    }
                }
            });
        }
    });
    let cells = cells.into_inner().unwrap();
    let dir = &lab.out;
    std::fs::create_dir_all(dir).unwrap();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Scaling quality (sim/src/lab), {} seeds, {} s of real time\n",
        lab.seeds,
        started.elapsed().as_secs()
    );
    let _ = writeln!(
        md,
        "Pod: {profile}. SLO (goodput): TTFT ≤ {} s and TPOT ≤ {} s; misses count late first \
         tokens, slow streams, lost and censored requests. Per-pod capacity used by the oracle \
         (requests/s): {}.\n",
        setup.slo_ttft,
        setup.slo_tpot,
        lab.traces
            .iter()
            .zip(&capacities)
            .map(|(t, c)| format!("{} {c:.2}", t.name()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let clipped = clipped.into_inner().unwrap();
    let logs: Vec<String> = lab
        .traces
        .iter()
        .enumerate()
        .filter_map(|(t, trace)| match trace {
            Trace::Log(log) => {
                let (replayed, cut) = clipped.get(&t).copied().unwrap_or_default();
                Some(format!(
                    "{} ({} requests over {:.0} s, {:.2}/s; replayed at a mean fleet of {} pods, \
                     {:.1}× its rate; {cut} of {replayed} requests clipped to a pod's KV cache)",
                    log.name,
                    log.requests.len(),
                    log.span,
                    log.rate(),
                    llmscaleoperator_sim::lab::traces::LOG_FLEET,
                    llmscaleoperator_sim::lab::traces::LOG_FLEET * capacities[t] / log.rate(),
                ))
            }
            Trace::Synthetic(_) => None,
        })
        .collect();
    if !logs.is_empty() {
        let _ = writeln!(md, "Real request logs: {}.\n", logs.join("; "));
    }
    for note in &lab.notes {
        let _ = writeln!(md, "{note}\n");
    }
    let timeline_delay = timeline_delay(lab);
    let mut timelines: BTreeMap<Trace, Vec<Timeline>> = BTreeMap::new();
    let mut grouped: BTreeMap<CellKey, Vec<Runs>> = BTreeMap::new();
    for ((trace, delay), by_label) in &cells {
        let runs: Vec<Runs> = by_label
            .iter()
            .map(|(label, (family, default, outcomes))| {
                let mut outcomes = outcomes.clone();
                outcomes.sort_by_key(|(seed, _)| *seed);
                if *delay as f64 == timeline_delay
                    && *default
                    && let Some((_, o)) = outcomes.iter().find(|(s, _)| *s == lab.timeline_seed)
                {
                    timelines.entry(trace.clone()).or_default().push(Timeline {
                        label: label.clone(),
                        family: family.clone(),
                        moments: o.timeline.clone(),
                    });
                }
                Runs {
                    label: label.clone(),
                    family: family.clone(),
                    default: *default,
                    outcomes: outcomes.into_iter().map(|(_, o)| o).collect(),
                }
            })
            .collect();
        grouped.insert((trace.clone(), *delay), runs);
    }
    let cost_bounds = cost_bounds.into_inner().unwrap();
    let mean_bounds: BTreeMap<CellKey, f64> = cost_bounds
        .iter()
        .map(|(key, b)| (key.clone(), b.values().sum::<f64>() / b.len().max(1) as f64))
        .collect();
    if lab.what_if {
        md.push_str(&what_if::render(
            &grouped,
            Bounds { min: 1, max: 64 },
            lab.objective,
        ));
    }
    // An operator-only run judged against an earlier run's peers: the summary and the verdict
    // read the cells joined, the per-cell tables below only what this run ran.
    let joined = lab.peers_from.as_ref().map(|path| {
        let _ = writeln!(
            md,
            "The summary and the verdict below also take the peers and the oracle of {} (an earlier run), in the cells where this run ran none of their family.\n",
            path.display()
        );
        with_peers_from(&grouped, path)
    });
    let judged = joined.as_ref().unwrap_or(&grouped);
    md.push_str(&render_summary(judged));
    md.push_str(&render_verdicts(judged, &mean_bounds));
    for (key, runs) in &grouped {
        let bound = mean_bounds.get(key).copied().unwrap_or(f64::NAN);
        render_cell(&mut md, dir, &key.0, key.1, runs, bound);
    }
    for (shape, lines) in &timelines {
        let file = format!("timeline-{}.svg", shape.name());
        chart::timeline(
            &dir.join(&file),
            &format!(
                "{}: seed {}, {timeline_delay} s start-up, every policy at its defaults",
                shape.name(),
                lab.timeline_seed
            ),
            lines,
        )
        .unwrap();
        let _ = writeln!(md, "![timeline {}]({file})\n", shape.name());
        if lab.print_timelines {
            for line in lines {
                let _ = writeln!(
                    md,
                    "timeline {} {}: (minute spec/ready queued load)",
                    shape.name(),
                    line.label
                );
                let minutes: Vec<String> = line
                    .moments
                    .iter()
                    .filter(|m| (m.at % 60.0) < 10.0)
                    .map(|m| {
                        format!(
                            "{:.0}:{}/{} q{} l{:.0}",
                            m.at / 60.0,
                            m.spec,
                            m.ready,
                            m.queued,
                            m.load
                        )
                    })
                    .collect();
                let _ = writeln!(md, "{}\n", minutes.join("  "));
            }
        }
    }
    let rows = cells.iter().flat_map(|((trace, delay), by_label)| {
        let bounds = cost_bounds.get(&(trace.clone(), *delay));
        by_label
            .iter()
            .flat_map(move |(label, (family, default, outcomes))| {
                outcomes
                    .iter()
                    .map(move |(seed, outcome)| results_csv::Row {
                        trace: trace.name(),
                        startup: *delay,
                        family,
                        setting: label,
                        defaults: *default,
                        seed: *seed,
                        outcome,
                        bound: bounds
                            .and_then(|b| b.get(seed))
                            .copied()
                            .unwrap_or(f64::NAN),
                    })
            })
    });
    let csv = std::fs::File::create(dir.join(RESULTS_CSV)).unwrap();
    results_csv::write(std::io::BufWriter::new(csv), rows).unwrap();
    let _ = writeln!(
        md,
        "Every run, one row per (trace, start-up, setting, seed): [{RESULTS_CSV}]({RESULTS_CSV}).\n"
    );
    std::fs::write(dir.join("README.md"), &md).unwrap();
    md
}

/// The machine-readable result beside the report.
pub const RESULTS_CSV: &str = "results.csv";

/// The start-up delay whose timelines are drawn: the middle one of the lab's.
fn timeline_delay(lab: &Lab) -> f64 {
    lab.delays.get(lab.delays.len() / 2).copied().unwrap_or(0.0)
}

/// One seed's workload under every policy of the roster.
struct Unit {
    /// Each policy's (label, family, whether at its defaults, outcome).
    results: Vec<(String, String, bool, Outcome)>,
    /// Requests replayed, and how many of them were clipped to fit a pod.
    replayed: usize,
    clipped: usize,
    /// The replica-hours below which no policy attains the SLO on this workload.
    bound: f64,
}

/// Runs every policy of the roster on one seed's workload; with the requests replayed and how
/// many of them were clipped to fit a pod.
fn run_unit(
    lab: &Lab,
    shape: &Trace,
    delay: f64,
    seed: u64,
    setup: &FleetSetup,
    capacity: f64,
    traffic: f64,
) -> Unit {
    let (requests, clipped) = shape.requests(seed, capacity, traffic, &setup.profile);
    let replayed = requests.len();
    let bounds = Bounds {
        min: u32::from(!shape.scales_to_zero()),
        max: 64,
    };
    // Every policy starts from the fleet the first two minutes need.
    let early = requests.iter().take_while(|r| r.at < 120.0).count() as f64 / 120.0;
    let initial = bounds.clamp((early / capacity).ceil() as i64).max(1);
    let duration = lab
        .duration
        .unwrap_or(shape.duration())
        .min(shape.duration());
    let timeline_delay = timeline_delay(lab);
    let mut entrants = roster(
        bounds,
        &requests,
        duration,
        capacity,
        delay,
        lab.objective,
        &lab.priors,
    );
    // Where a run spans more than one of its days, the defaults with a recurrence of that day,
    // as a user whose traffic repeats daily would set it.
    let day = shape.day();
    if duration > day {
        entrants.push(entrant(
            "operator",
            false,
            Operator::objective(bounds, DEFAULT_PRIOR, lab.objective).remembering(day as i32),
        ));
    }
    if let Some(families) = &lab.families {
        entrants.retain(|e| families.iter().any(|f| f == e.family || *f == e.label()));
    }
    let mut labels: Vec<String> = entrants.iter().map(Entrant::label).collect();
    labels.sort();
    labels.dedup();
    assert_eq!(
        labels.len(),
        entrants.len(),
        "every setting needs its own label"
    );
    let results = entrants
        .into_iter()
        .map(|mut e| {
            let timeline = seed == lab.timeline_seed && delay == timeline_delay && e.default;
            let cell_setup = FleetSetup {
                startup: delay,
                initial_pods: initial,
                timeline_every: if timeline { 10.0 } else { 0.0 },
                ..*setup
            };
            let outcome = run(
                &requests,
                duration,
                shape.step_at(),
                e.policy.as_mut(),
                &cell_setup,
                seed,
            );
            (e.label(), e.family.to_owned(), e.default, outcome)
        })
        .collect();
    Unit {
        results,
        replayed,
        clipped,
        bound: cost_bound(&requests, duration, capacity, bounds.min),
    }
}

fn fmt_seconds(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "∞".into()
    }
}

fn fmt_interval(i: Option<llmscaleoperator_sim::lab::report::Interval>) -> String {
    match i {
        Some(i) => format!(
            "{:+.2} [{:+.2}, {:+.2}]{}",
            i.mean,
            i.low,
            i.high,
            if i.excludes_zero() { "" } else { " ~" }
        ),
        None => "-".into(),
    }
}

/// One (trace, start-up delay): the full table, the paired comparison and the Pareto plot.
fn render_cell(md: &mut String, dir: &Path, shape: &Trace, delay: u64, runs: &[Runs], bound: f64) {
    let oracle_hours = runs
        .iter()
        .find(|r| r.family == "oracle" && r.default)
        .map_or(f64::NAN, |r| summarize(&r.outcomes).replica_hours);
    let _ = writeln!(md, "## {}, {delay} s start-up\n", shape.name());
    let _ = writeln!(
        md,
        "Cost bound: {bound:.1} replica-h, what a fleet that knew every arrival and started pods \
         at once would spend, sized minute by minute; `× bound` is a policy's replica-hours over \
         it.\n"
    );
    let _ = writeln!(
        md,
        "| policy | SLO attained | TTFT p50 / p95 / p99 (s) | TPOT p95 (s) | replica-h | × oracle | × bound | actions | oscillations | wasted cold starts | warm evictions | lost | recovery (s) |"
    );
    let _ = writeln!(
        md,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut sorted: Vec<&Runs> = runs.iter().collect();
    sorted.sort_by(|a, b| {
        family_rank(&a.family)
            .cmp(&family_rank(&b.family))
            .then(b.default.cmp(&a.default))
            .then(a.label.cmp(&b.label))
    });
    for r in &sorted {
        let s = summarize(&r.outcomes);
        let _ = writeln!(
            md,
            "| {}{} | {:.2}% | {} / {} / {} | {:.3} | {:.1} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            if r.default { "**" } else { "" },
            r.label,
            100.0 * s.attainment,
            fmt_seconds(s.ttft_p50),
            fmt_seconds(s.ttft_p95),
            fmt_seconds(s.ttft_p99),
            s.tpot_p95,
            s.replica_hours,
            s.replica_hours / oracle_hours,
            s.replica_hours / bound,
            s.scale_actions,
            s.oscillations,
            s.wasted_cold_starts,
            s.warm_evictions,
            s.lost,
            s.recovery.map_or("-".into(), |v| format!("{v:.0}")),
        );
    }
    // The operator's defaults against each peer's defaults and best grid setting.
    if let Some(op) = runs.iter().find(|r| r.family == "operator" && r.default) {
        let budget = summarize(&op.outcomes).replica_hours;
        let _ = writeln!(
            md,
            "\nThe operator's defaults minus each peer, paired by seed: mean [95% bootstrap interval]; `~` marks an interval that holds zero. Negative numbers favour the operator. A peer's *best* setting is its grid point with the most SLO attained at no more replica-hours than the operator's defaults (or its cheapest, when all cost more).\n"
        );
        let _ = writeln!(md, "| peer setting | Δ SLO misses (pp) | Δ replica-hours |");
        let _ = writeln!(md, "| --- | ---: | ---: |");
        let mut families = verdict::peer_families(runs);
        families.sort_by_key(|f| family_rank(f));
        for family in families {
            let default = runs.iter().find(|r| r.family == family && r.default);
            let best = best_of(runs, family, budget);
            let mut shown = Vec::new();
            for (which, peer) in [("defaults", default), ("best", best)] {
                let Some(peer) = peer else { continue };
                if shown.contains(&peer.label) {
                    continue;
                }
                shown.push(peer.label.clone());
                let misses = paired_difference(&miss_percent(op), &miss_percent(peer), 2000, 7);
                let hours = paired_difference(&replica_hours(op), &replica_hours(peer), 2000, 8);
                let _ = writeln!(
                    md,
                    "| {} ({which}) | {} | {} |",
                    peer.label,
                    fmt_interval(misses),
                    fmt_interval(hours)
                );
            }
        }
    }
    let file = format!("pareto-{}-{delay}s.svg", shape.name());
    let points: Vec<ParetoPoint> = runs
        .iter()
        .map(|r| {
            let s = summarize(&r.outcomes);
            ParetoPoint {
                label: r.label.clone(),
                family: r.family.clone(),
                default: r.default,
                replica_hours: s.replica_hours,
                attainment: 100.0 * s.attainment,
            }
        })
        .collect();
    chart::pareto(
        &dir.join(&file),
        &format!("{}, {delay} s start-up", shape.name()),
        &points,
    )
    .unwrap();
    let _ = writeln!(md, "\n![pareto {} {delay} s]({file})\n", shape.name());
}

/// The headline: per start-up delay, each policy at its defaults (and the operator with a
/// 300 s window) on every trace: SLO attained and replica-hours relative to the oracle.
/// Operator settings shown in the summary beside the defaults (the objective): the guessed target
/// of 16 in flight, the law before start-up awareness and behavior, that target without the
/// look-ahead, and (on a trace of several days) the objective with a recurrence.
const SUMMARY_VARIANTS: [&str; 4] = [
    RECURRENCE,
    "llmscaleoperator (target 16)",
    "llmscaleoperator (before: plain ratio)",
    "llmscaleoperator (no look-ahead)",
];

/// The objective with a recurrence: an opt-in setting a user turns on for traffic that repeats,
/// so its verdict is rendered beside the defaults' where it ran.
const RECURRENCE: &str = "llmscaleoperator (recurrence)";

fn render_summary(grouped: &BTreeMap<CellKey, Vec<Runs>>) -> String {
    let mut md = String::new();
    let delays: std::collections::BTreeSet<u64> = grouped.keys().map(|(_, d)| *d).collect();
    let traces: std::collections::BTreeSet<&Trace> = grouped.keys().map(|(s, _)| s).collect();
    for delay in delays {
        let _ = writeln!(
            md,
            "### {delay} s start-up: SLO attained (replica-hours ÷ the oracle's), mean over seeds\n"
        );
        let _ = write!(md, "| policy |");
        for t in &traces {
            let _ = write!(md, " {} |", t.name());
        }
        let _ = write!(md, "\n| --- |");
        for _ in &traces {
            let _ = write!(md, " ---: |");
        }
        md.push('\n');
        let mut labels: Vec<(String, String)> = grouped
            .iter()
            .filter(|((_, d), _)| *d == delay)
            .flat_map(|(_, runs)| runs.iter())
            .filter(|r| r.default || SUMMARY_VARIANTS.contains(&r.label.as_str()))
            .map(|r| (r.family.clone(), r.label.clone()))
            .collect();
        labels.sort_by(|a, b| {
            family_rank(&a.0)
                .cmp(&family_rank(&b.0))
                .then(a.1.len().cmp(&b.1.len()))
        });
        labels.dedup();
        for (_, label) in labels {
            let _ = write!(md, "| {label} |");
            for t in &traces {
                let cell = grouped.get(&((*t).clone(), delay)).and_then(|runs| {
                    let oracle = runs.iter().find(|r| r.family == "oracle" && r.default)?;
                    let run = runs.iter().find(|r| r.label == label)?;
                    let (s, o) = (summarize(&run.outcomes), summarize(&oracle.outcomes));
                    Some(format!(
                        "{:.1}% ({:.2})",
                        100.0 * s.attainment,
                        s.replica_hours / o.replica_hours
                    ))
                });
                let _ = write!(md, " {} |", cell.unwrap_or_else(|| "-".into()));
            }
            md.push('\n');
        }
        md.push('\n');
    }
    md
}

/// `grouped` with the peer families of an earlier run's results file added to each cell that ran
/// none of that family (the operator is never taken from it; the oracle's settings, the reactive
/// bound among them, are taken as a peer's are, so the summary has its reference and the
/// verdict the room a policy without the future has), for the seeds this run ran, in order, so
/// the paired intervals pair like seeds.
fn with_peers_from(
    grouped: &BTreeMap<CellKey, Vec<Runs>>,
    path: &Path,
) -> BTreeMap<CellKey, Vec<Runs>> {
    let file = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("--peers-from {}: {e}", path.display()));
    let rows = results_csv::read(file).unwrap_or_else(|e| {
        panic!(
            "--peers-from {}: {}",
            path.display(),
            llmscaleoperator::error_chain::Chain(&e)
        )
    });
    let mut judged = grouped.clone();
    for ((trace, delay), runs) in &mut judged {
        let ran: Vec<String> = runs.iter().map(|r| r.family.clone()).collect();
        // This run's seeds are 0..n: the earlier run's are taken for the same numbers only.
        let seeds = runs.first().map_or(0, |r| r.outcomes.len() as u64);
        let mut taken: BTreeMap<(String, String, bool), Vec<(u64, Outcome)>> = BTreeMap::new();
        for row in rows.iter().filter(|r| {
            r.trace == trace.name()
                && r.startup == *delay
                && r.family != "operator"
                && !ran.contains(&r.family)
                && r.seed < seeds
        }) {
            taken
                .entry((row.family.clone(), row.setting.clone(), row.defaults))
                .or_default()
                .push((row.seed, row.outcome.clone()));
        }
        for ((family, label, default), mut outcomes) in taken {
            outcomes.sort_by_key(|(seed, _)| *seed);
            runs.push(Runs {
                label,
                family,
                default,
                outcomes: outcomes.into_iter().map(|(_, o)| o).collect(),
            });
        }
    }
    judged
}

/// The judge of a change to the control law, per cell: GPU-hours at 99% goodput, the operator's
/// defaults against the cheapest way any peer family reaches it (`sim/src/lab/verdict.rs`);
/// then the same at 95% and 99.9%.
fn render_verdicts(
    grouped: &BTreeMap<CellKey, Vec<Runs>>,
    bounds: &BTreeMap<CellKey, f64>,
) -> String {
    let pct = |level: f64| {
        let text = format!("{:.1}", 100.0 * level);
        text.trim_end_matches(".0").to_owned()
    };
    let mut md = format!(
        "### GPU-hours at {level}% goodput: the operator's defaults against every peer's cheapest way there\n\n\
         Each peer family reaches the level with its cheapest setting that attains it, or with a point \
         between two settings of its frontier (interpolated seed by seed); the operator runs its \
         defaults, one spec for every cell. `operator ÷ cheapest` is their replica-hours with a \
         paired 95% bootstrap interval: on the tuned frontier at ≤ {frontier:.2}, a win at ≤ {win:.2}. \
         `bound ÷ cheapest` is how much room any policy has in the cell, with its pods started at \
         once; `reactive ÷ cheapest` is what a policy pays that waits a start-up for its pods, knows each \
         pod's capacity and every arrival so far but not the future, and holds a multiple of the \
         busiest recent minute's need (the reactive bound, its multiple chosen for the cell as a \
         peer's setting is): not a bound on every such policy, since bursts it holds for are \
         paid, but the price of the future it cannot see.\n\n\
         | trace | start-up | operator: attained, replica-h | cheapest peer at {level}% | its replica-h | operator ÷ cheapest | bound ÷ cheapest | reactive ÷ cheapest | oscillations (operator / HPA) | cannot reach {level}% | standing |\n\
         | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |\n",
        level = pct(verdict::LEVEL),
        frontier = verdict::ON_FRONTIER,
        win = verdict::WIN,
    );
    for (key, runs) in grouped {
        let bound = bounds.get(key).copied().unwrap_or(f64::NAN);
        let Some(v) = verdict::judge(runs, verdict::LEVEL, bound) else {
            continue;
        };
        let (trace, delay) = key;
        let cheapest = v.cheapest.as_ref();
        let _ = writeln!(
            md,
            "| {} | {delay} s | {:.2}%, {:.1} | {} | {} | {} | {} | {} | {:.1} / {:.1} | {} | {} |",
            trace.name(),
            100.0 * v.attained,
            v.hours,
            cheapest.map_or_else(|| "none".to_owned(), |c| c.setting.clone()),
            cheapest.map_or_else(|| "-".to_owned(), |c| format!("{:.1}", c.mean_hours())),
            ratio_cell(&v),
            v.bound_vs_cheapest
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}")),
            v.reactive_vs_cheapest
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}")),
            v.oscillations.0,
            v.oscillations.1,
            if v.unreachable.is_empty() {
                "-".to_owned()
            } else {
                v.unreachable.join(", ")
            },
            v.standing().describe(),
        );
    }
    let opted: Vec<(&CellKey, verdict::Verdict)> = grouped
        .iter()
        .filter_map(|(key, runs)| {
            let bound = bounds.get(key).copied().unwrap_or(f64::NAN);
            verdict::judge_entrant(runs, RECURRENCE, verdict::LEVEL, bound).map(|v| (key, v))
        })
        .collect();
    if !opted.is_empty() {
        let _ = writeln!(
            md,
            "\n**With a recurrence** (`{RECURRENCE}`, opt-in), judged the same way on the same seeds:\n\n\
             | trace | start-up | attained, replica-h | cheapest peer at {level}% | ÷ cheapest | oscillations (it / HPA) | standing |\n\
             | --- | ---: | ---: | --- | ---: | ---: | --- |",
            level = pct(verdict::LEVEL),
        );
        for ((trace, delay), v) in opted {
            let _ = writeln!(
                md,
                "| {} | {delay} s | {:.2}%, {:.1} | {} | {} | {:.1} / {:.1} | {} |",
                trace.name(),
                100.0 * v.attained,
                v.hours,
                v.cheapest.as_ref().map_or_else(
                    || "none".to_owned(),
                    |c| format!("{}: {:.1} h", c.setting, c.mean_hours())
                ),
                ratio_cell(&v),
                v.oscillations.0,
                v.oscillations.1,
                v.standing().describe(),
            );
        }
    }
    md.push_str(&render_everywhere(grouped));
    let _ = writeln!(
        md,
        "\n**At the other levels**: operator ÷ cheapest peer (standing); last, at the goodput the \
         operator's defaults attained themselves, where an overshoot of the level is not counted \
         as cost (a change that only trades goodput for GPU-hours along the peers' frontier \
         changes it little).\n"
    );
    let _ = write!(md, "| trace | start-up |");
    for level in verdict::LEVELS {
        let _ = write!(md, " {}% |", pct(level));
    }
    let _ = writeln!(
        md,
        " at its own goodput |\n| --- | ---: |{} ---: |",
        " ---: |".repeat(verdict::LEVELS.len())
    );
    for (key, runs) in grouped {
        let bound = bounds.get(key).copied().unwrap_or(f64::NAN);
        let _ = write!(md, "| {} | {} s |", key.0.name(), key.1);
        for level in verdict::LEVELS {
            let cell = verdict::judge(runs, level, bound).map_or_else(
                || "-".to_owned(),
                |v| match v.ratio {
                    Some(r) => format!("{r:.2} ({})", v.standing().describe()),
                    None => v.standing().describe().to_owned(),
                },
            );
            let _ = write!(md, " {cell} |");
        }
        let own = verdict::at_own_goodput(runs, bound).map_or_else(
            || "-".to_owned(),
            |v| match v.ratio {
                Some(r) => format!(
                    "{r:.2} at {:.2}% ({})",
                    100.0 * v.level,
                    v.standing().describe()
                ),
                None => format!("{:.2}%: {}", 100.0 * v.level, v.standing().describe()),
            },
        );
        let _ = write!(md, " {own} |");
        md.push('\n');
    }
    md.push('\n');
    md
}

/// Each family at one setting for every trace of a start-up delay, as a user keeps it, and the
/// reactive bound at one headroom or the one it measures, against each cell's cheapest peer
/// tuned for that cell (`verdict::everywhere`).
fn render_everywhere(grouped: &BTreeMap<CellKey, Vec<Runs>>) -> String {
    let mut md = String::new();
    let mut delays: Vec<u64> = grouped.keys().map(|(_, d)| *d).collect();
    delays.sort_unstable();
    delays.dedup();
    for delay in delays {
        let cells: Vec<(&Trace, &[Runs])> = grouped
            .iter()
            .filter(|((_, d), _)| *d == delay)
            .map(|((t, _), runs)| (t, runs.as_slice()))
            .collect();
        let runs: Vec<&[Runs]> = cells.iter().map(|(_, r)| *r).collect();
        let all = verdict::everywhere(&runs, verdict::LEVEL);
        let Some(reachable) = all.first().map(|e| e.reachable.len()) else {
            continue;
        };
        let _ = writeln!(
            md,
            "\n**One setting everywhere**, {delay} s start-up: each family kept at one setting for \
             every trace, as it is deployed, and the reactive bound at one headroom for every \
             trace, what a policy that knows each pod's capacity exactly pays for nothing tuned \
             per trace, or at the headroom it measures from the rises it has seen (the settings \
             no other of the family beats both on the traces, of the {reachable} where some peer \
             setting reaches {level}%, it reaches the level in and on its worst ratio there), its \
             replica-hours over each trace's cheapest peer setting tuned for that trace:\n\n\
             | family | setting | reaches {level}% in | worst ÷ cheapest (trace) | the others | misses |\n\
             | --- | --- | ---: | ---: | --- | --- |",
            level = 100.0 * verdict::LEVEL,
        );
        for e in all {
            let name = |i: usize| cells[i].0.name();
            let worst_cell = e.worst();
            let worst =
                worst_cell.map_or_else(|| "-".to_owned(), |(i, r)| format!("{r:.2} ({})", name(i)));
            let others: Vec<String> = e
                .reached
                .iter()
                .filter(|(i, _)| worst_cell.is_none_or(|(w, _)| w != *i))
                .map(|(i, r)| format!("{} {r:.2}", name(*i)))
                .collect();
            let misses: Vec<String> = e
                .reachable
                .iter()
                .filter(|i| !e.reached.iter().any(|(r, _)| r == *i))
                .map(|i| name(*i).to_owned())
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} of {} | {worst} | {} | {} |",
                e.family,
                e.setting,
                e.reached.len(),
                e.reachable.len(),
                others.join(", "),
                if misses.is_empty() {
                    "-".to_owned()
                } else {
                    misses.join(", ")
                },
            );
        }
    }
    md
}

/// Operator ÷ cheapest with its paired interval, `-` where there is no ratio.
fn ratio_cell(v: &verdict::Verdict) -> String {
    match (v.ratio, v.ratio_interval) {
        (Some(r), Some(i)) => format!("{r:.2} [{:.2}, {:.2}]", i.low, i.high),
        (Some(r), None) => format!("{r:.2}"),
        _ => "-".to_owned(),
    }
}

fn family_rank(family: &str) -> usize {
    [
        "operator",
        "HPA",
        "KEDA",
        "Knative KPA",
        "AIBrix APA",
        "AIBrix KPA",
        "WVA",
        "oracle",
    ]
    .iter()
    .position(|f| *f == family)
    .unwrap_or(usize::MAX)
}
