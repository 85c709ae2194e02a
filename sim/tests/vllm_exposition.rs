//! The simulator's exposition held against a real vLLM 0.33.0 scrape (tests/fixtures, see its
//! README): every vllm family the simulator serves must be one vLLM serves, with the same type,
//! help text, label names (plus the pod/namespace/app the scrape adds) and buckets. A renamed
//! family, a changed bucket or a new label fails here rather than in a dashboard.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use llmscaleoperator_sim::exposition::{Labels, render};
use llmscaleoperator_sim::fleet::{DEFAULT_MODEL_NAME, Fleet, FleetConfig};
use llmscaleoperator_sim::trace::Trace;

const FIXTURE: &str = include_str!("fixtures/vllm-0.33.0-metrics.txt");

/// The families the simulator models; removing one from the exposition fails.
const MODELLED: [(&str, &str); 10] = [
    ("vllm:num_requests_running", "gauge"),
    ("vllm:num_requests_waiting", "gauge"),
    ("vllm:kv_cache_usage_perc", "gauge"),
    ("vllm:prompt_tokens_total", "counter"),
    ("vllm:generation_tokens_total", "counter"),
    ("vllm:request_success_total", "counter"),
    ("vllm:time_to_first_token_seconds", "histogram"),
    ("vllm:inter_token_latency_seconds", "histogram"),
    ("vllm:e2e_request_latency_seconds", "histogram"),
    ("vllm:request_queue_time_seconds", "histogram"),
];

/// The labels the simulator sets in place of the scrape (podTargetLabels).
const TARGET_LABELS: [&str; 3] = ["app", "namespace", "pod"];

const PODS: [&str; 2] = ["vllm-a", "vllm-b"];

// ---------------------------------------------------------------------------------------------
// A small parser of the classic Prometheus text format (0.0.4), as Prometheus reads it: a sample
// belongs to the family its name fits (`name` itself, `name_bucket`/`_sum`/`_count` of a
// histogram, `_sum`/`_count` of a summary); a sample that fits no declared family starts an
// untyped family of its own.

#[derive(Debug, Default)]
struct Family {
    kind: Option<String>,
    help: Option<String>,
    samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

#[derive(Debug, Default)]
struct Exposition {
    families: BTreeMap<String, Family>,
}

impl Exposition {
    fn family(&self, name: &str) -> Option<&Family> {
        self.families.get(name)
    }
}

fn fits(family: &str, kind: Option<&str>, sample: &str) -> bool {
    let suffixes: &[&str] = match kind {
        Some("histogram") => &["_bucket", "_sum", "_count"],
        // A summary's quantiles are samples under the family's own name.
        Some("summary") => &["", "_sum", "_count"],
        _ => &[""],
    };
    sample
        .strip_prefix(family)
        .is_some_and(|suffix| suffixes.contains(&suffix))
}

fn parse(text: &str) -> Result<Exposition, String> {
    let mut exposition = Exposition::default();
    let mut current: Option<String> = None;
    let mut seen = BTreeSet::new();
    for (index, line) in text.lines().enumerate() {
        let at = |message: String| format!("line {}: {message}: {line}", index + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let rest = rest.trim_start();
            let (keyword, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            if keyword != "HELP" && keyword != "TYPE" {
                continue; // a comment
            }
            let (name, body) = rest.split_once(' ').unwrap_or((rest, ""));
            if current.as_deref() != Some(name) && exposition.families.contains_key(name) {
                return Err(at(format!("family {name} declared twice")));
            }
            current = Some(name.to_owned());
            let family = exposition.families.entry(name.to_owned()).or_default();
            let slot = if keyword == "HELP" {
                &mut family.help
            } else {
                &mut family.kind
            };
            if slot.is_some() {
                return Err(at(format!("a second {keyword} for {name}")));
            }
            *slot = Some(if keyword == "HELP" {
                unescape_help(body)
            } else {
                body.to_owned()
            });
            continue;
        }
        let sample = parse_sample(line).map_err(at)?;
        if !seen.insert((sample.name.clone(), sample.labels.clone())) {
            return Err(at("a duplicate series".to_owned()));
        }
        let owner = match &current {
            Some(name)
                if fits(
                    name,
                    exposition.families[name].kind.as_deref(),
                    &sample.name,
                ) =>
            {
                name.clone()
            }
            _ => {
                // Untyped, as Prometheus stores a sample no TYPE line covers.
                if exposition.families.contains_key(&sample.name) {
                    return Err(at(format!(
                        "{} interleaved with another family",
                        sample.name
                    )));
                }
                current = Some(sample.name.clone());
                sample.name.clone()
            }
        };
        exposition
            .families
            .entry(owner)
            .or_default()
            .samples
            .push(sample);
    }
    Ok(exposition)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = &line[..name_end];
    if name.is_empty() {
        return Err("no metric name".into());
    }
    let (labels, rest) = match line[name_end..].strip_prefix('{') {
        Some(inside) => parse_labels(inside)?,
        None => (BTreeMap::new(), &line[name_end..]),
    };
    let mut fields = rest.split_whitespace();
    let raw = fields.next().ok_or("no value")?;
    let value = match raw {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => raw.parse().map_err(|_| format!("bad value {raw:?}"))?,
    };
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| format!("bad timestamp {timestamp:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// `text` starts after the `{`; returns the labels and what follows the `}`.
fn parse_labels(text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (name, after) = rest.split_once('=').ok_or("a label without =")?;
        let name = name.trim();
        let after = after
            .strip_prefix('"')
            .ok_or_else(|| format!("label {name}: value not quoted"))?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i + 1,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => return Err(format!("label {name}: bad escape {other:?}")),
                },
                Some((_, c)) => value.push(c),
                None => return Err(format!("label {name}: unterminated value")),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = after[end..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err(format!("after label {name}: neither , nor }}"));
        }
    }
}

fn unescape_help(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The comparison, as a list of differences so the mutation test below can show it fails.

/// For each sample name of a family, the label names its samples carry (all the same).
fn label_names(family: &Family) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for sample in &family.samples {
        let these: BTreeSet<String> = sample.labels.keys().cloned().collect();
        match names.get(&sample.name) {
            Some(before) if *before != these => {
                return Err(format!(
                    "{}: samples with label names {before:?} and {these:?}",
                    sample.name
                ));
            }
            _ => {
                names.insert(sample.name.clone(), these);
            }
        }
    }
    Ok(names)
}

/// A histogram's `le` values, in order, per series (its labels without `le`); every series of
/// the family must have the same.
fn bucket_bounds(family: &Family) -> Result<Vec<String>, String> {
    let mut per_series: BTreeMap<Vec<(String, String)>, Vec<String>> = BTreeMap::new();
    for sample in family
        .samples
        .iter()
        .filter(|s| s.name.ends_with("_bucket"))
    {
        let le = sample
            .labels
            .get("le")
            .ok_or_else(|| format!("{}: a bucket without le", sample.name))?;
        let series = sample
            .labels
            .iter()
            .filter(|(k, _)| *k != "le")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        per_series.entry(series).or_default().push(le.clone());
    }
    let mut lists = per_series.into_values();
    let first = lists.next().ok_or("no buckets")?;
    if let Some(other) = lists.find(|list| *list != first) {
        return Err(format!("series with buckets {first:?} and {other:?}"));
    }
    Ok(first)
}

/// What keeps `sim` from being a vLLM 0.33 exposition, per the fixture `vllm`.
fn differences(vllm: &Exposition, sim: &Exposition) -> Vec<String> {
    let target: BTreeSet<String> = TARGET_LABELS.iter().map(|l| (*l).to_owned()).collect();
    let mut problems = Vec::new();
    for (name, ours) in sim.families.iter().filter(|(n, _)| n.starts_with("vllm:")) {
        let mut problem = |what: String| problems.push(format!("{name}: {what}"));
        let Some(theirs) = vllm.family(name) else {
            problem("no such family in vLLM 0.33".into());
            continue;
        };
        if ours.kind != theirs.kind {
            problem(format!("type {:?}, vLLM's is {:?}", ours.kind, theirs.kind));
        }
        if ours.help != theirs.help {
            problem(format!("help {:?}, vLLM's is {:?}", ours.help, theirs.help));
        }
        if ours.samples.is_empty() {
            problem("no samples".into());
            continue;
        }
        if ours.kind.as_deref() == Some("counter") {
            for sample in ours.samples.iter().filter(|s| !s.name.ends_with("_total")) {
                problem(format!("counter sample {} without _total", sample.name));
            }
        }
        let (ours_names, theirs_names) = match (label_names(ours), label_names(theirs)) {
            (Ok(o), Ok(t)) => (o, t),
            (o, t) => {
                problem(format!("label names: {o:?} / vLLM {t:?}"));
                continue;
            }
        };
        if ours_names.keys().ne(theirs_names.keys()) {
            problem(format!(
                "sample names {:?}, vLLM's are {:?}",
                ours_names.keys().collect::<Vec<_>>(),
                theirs_names.keys().collect::<Vec<_>>()
            ));
        }
        for (sample, labels) in &ours_names {
            let Some(expected) = theirs_names.get(sample) else {
                continue;
            };
            if !expected.is_subset(labels) {
                problem(format!(
                    "{sample} lacks {:?}",
                    expected.difference(labels).collect::<Vec<_>>()
                ));
            }
            let added: BTreeSet<String> = labels.difference(expected).cloned().collect();
            if added != target {
                problem(format!(
                    "{sample} adds {added:?} to vLLM's labels, not exactly {target:?}"
                ));
            }
            if !expected.is_disjoint(&target) {
                problem(format!("vLLM's {sample} already has a target label"));
            }
        }
        // Label values vLLM would never write (a misspelt finished_reason, another engine).
        for sample in &ours.samples {
            for (label, value) in &sample.labels {
                if label == "le" || target.contains(label) {
                    continue;
                }
                let known = theirs
                    .samples
                    .iter()
                    .any(|s| s.labels.get(label) == Some(value));
                if !known {
                    problem(format!(
                        "{}: {label}={value:?} is not in vLLM's",
                        sample.name
                    ));
                }
            }
        }
        if ours.kind.as_deref() == Some("histogram") {
            match (bucket_bounds(ours), bucket_bounds(theirs)) {
                (Ok(o), Ok(t)) if o == t => {}
                (o, t) => problem(format!("buckets {o:?}, vLLM's are {t:?}")),
            }
        }
    }
    problems
}

// ---------------------------------------------------------------------------------------------

fn simulated() -> String {
    let mut fleet = Fleet::new(FleetConfig {
        startup_delay: Duration::ZERO,
        ..FleetConfig::default()
    });
    fleet.set_pods(PODS);
    // Enough load for every histogram to have observations, finished requests included.
    let trace = Trace::parse("0 30 512 128\n").unwrap();
    fleet.step(Duration::from_secs(30), &trace);
    render(
        &fleet,
        &Labels {
            namespace: "ml".into(),
            app: "vllm-sim".into(),
            model_name: DEFAULT_MODEL_NAME.into(),
        },
    )
}

fn fixture() -> Exposition {
    parse(FIXTURE).expect("the fixture parses")
}

fn floats(list: &[f64]) -> Vec<String> {
    list.iter()
        .map(|v| format!("{v:?}"))
        .chain(["+Inf".into()])
        .collect()
}

#[test]
fn the_fixture_reads_as_the_vllm_0_33_scrape_its_readme_describes() {
    let vllm = fixture();
    assert!(vllm.families.len() > 50, "{}", vllm.families.len());
    for (name, kind) in MODELLED {
        let family = vllm.family(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(family.kind.as_deref(), Some(kind), "{name}");
        assert!(family.help.is_some(), "{name}");
        for sample in &family.samples {
            assert!(sample.labels.contains_key("engine"), "{sample:?}");
            assert_eq!(sample.labels["model_name"], DEFAULT_MODEL_NAME);
        }
    }
    // The README's bucket lists (vllm/v1/metrics/buckets.py), as prometheus_client writes them:
    // so the parser reads the file right and the file is the one described.
    let ttft = floats(&[
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    ]);
    let itl = floats(&[
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0,
    ]);
    let request = floats(&[
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
        240.0, 480.0, 960.0, 1920.0, 7680.0,
    ]);
    for (name, expected) in [
        ("vllm:time_to_first_token_seconds", &ttft),
        ("vllm:inter_token_latency_seconds", &itl),
        // Per request (the lab's pods export it; the objective reads its 0.1 s bound).
        ("vllm:request_time_per_output_token_seconds", &itl),
        ("vllm:e2e_request_latency_seconds", &request),
        ("vllm:request_queue_time_seconds", &request),
        ("vllm:request_prefill_time_seconds", &request),
        ("vllm:request_decode_time_seconds", &request),
        ("vllm:request_inference_time_seconds", &request),
    ] {
        let family = vllm.family(name).unwrap();
        assert_eq!(&bucket_bounds(family).unwrap(), expected, "{name}");
    }
    // Counters' metadata names the _total sample; _created is a gauge family of its own.
    let prompt = vllm.family("vllm:prompt_tokens_total").unwrap();
    assert!(
        prompt
            .samples
            .iter()
            .all(|s| s.name == "vllm:prompt_tokens_total")
    );
    let created = vllm.family("vllm:prompt_tokens_created").unwrap();
    assert_eq!(created.kind.as_deref(), Some("gauge"));
    assert!(vllm.family("vllm:prompt_tokens").is_none());
}

#[test]
fn every_vllm_family_the_simulator_serves_is_vllm_0_33s() {
    let sim = parse(&simulated()).expect("the simulator's exposition parses");
    let problems = differences(&fixture(), &sim);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_simulator_serves_every_family_it_models_for_every_pod() {
    let sim = parse(&simulated()).unwrap();
    for (name, kind) in MODELLED {
        let family = sim
            .family(name)
            .unwrap_or_else(|| panic!("the simulator no longer serves {name}"));
        assert_eq!(family.kind.as_deref(), Some(kind), "{name}");
        for pod in PODS {
            assert!(
                family.samples.iter().any(|s| s.labels["pod"] == pod),
                "{name} for {pod}"
            );
        }
    }
    // vLLM's children per finished_reason exist from the start, so the simulator's do too.
    let reasons = |e: &Exposition| -> BTreeSet<String> {
        e.family("vllm:request_success_total")
            .unwrap()
            .samples
            .iter()
            .map(|s| s.labels["finished_reason"].clone())
            .collect()
    };
    assert_eq!(reasons(&sim), reasons(&fixture()));
    // The gateway's queue is the simulator's own, under its own prefix.
    let others: Vec<&String> = sim
        .families
        .keys()
        .filter(|n| !n.starts_with("vllm:"))
        .collect();
    assert_eq!(others, ["llmsim:pending_requests"]);
}

#[test]
fn the_simulators_histograms_are_cumulative_and_observed() {
    let sim = parse(&simulated()).unwrap();
    for (name, _) in MODELLED.iter().filter(|(_, kind)| *kind == "histogram") {
        let family = sim.family(name).unwrap();
        for pod in PODS {
            let of_pod: Vec<&Sample> = family
                .samples
                .iter()
                .filter(|s| s.labels["pod"] == pod)
                .collect();
            let buckets: Vec<f64> = of_pod
                .iter()
                .filter(|s| s.name.ends_with("_bucket"))
                .map(|s| s.value)
                .collect();
            let count = of_pod
                .iter()
                .find(|s| s.name.ends_with("_count"))
                .unwrap()
                .value;
            let sum = of_pod
                .iter()
                .find(|s| s.name.ends_with("_sum"))
                .unwrap()
                .value;
            assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{name} {pod}");
            assert_eq!(buckets.last().copied(), Some(count), "{name} {pod}: +Inf");
            assert!(count > 0.0 && sum > 0.0, "{name} {pod}: {count} {sum}");
        }
    }
}

#[test]
fn the_comparison_catches_a_changed_bucket_name_help_type_or_label() {
    let vllm = fixture();
    let text = simulated();
    let noticed = |what: &str, mutated: String| {
        let problems = differences(&vllm, &parse(&mutated).unwrap());
        assert!(!problems.is_empty(), "{what} went unnoticed");
    };
    let changed = |pairs: &[(&str, &str)]| {
        let mut mutated = text.clone();
        for (from, to) in pairs {
            assert!(mutated.contains(from), "{from}");
            mutated = mutated.replace(from, to);
        }
        noticed(&format!("{pairs:?}"), mutated);
    };
    // A bucket moved, a bucket dropped.
    changed(&[("le=\"2560.0\"", "le=\"2500.0\"")]);
    noticed(
        "queue time without le=0.3",
        text.lines()
            .filter(|l| !(l.starts_with("vllm:request_queue_time") && l.contains("le=\"0.3\"")))
            .map(|l| format!("{l}\n"))
            .collect(),
    );
    // A family renamed: vLLM 0.33 has no such family.
    changed(&[(
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
    )]);
    // Counter metadata under the name without _total (the simulator's old exposition): the
    // samples then belong to no declared family and Prometheus stores them untyped.
    changed(&[
        (
            "# HELP vllm:prompt_tokens_total ",
            "# HELP vllm:prompt_tokens ",
        ),
        (
            "# TYPE vllm:prompt_tokens_total ",
            "# TYPE vllm:prompt_tokens ",
        ),
    ]);
    changed(&[(
        "Histogram of e2e request latency in seconds.",
        "Histogram of e2e latency in seconds.",
    )]);
    changed(&[(
        "# TYPE vllm:kv_cache_usage_perc gauge",
        "# TYPE vllm:kv_cache_usage_perc untyped",
    )]);
    // A label vLLM does not have, one of vLLM's missing, a value vLLM never writes.
    changed(&[(",namespace=", ",zone=\"a\",namespace=")]);
    changed(&[("engine=\"0\",", "")]);
    changed(&[("finished_reason=\"stop\"", "finished_reason=\"done\"")]);
    // The simulator's own labels are part of the contract too.
    changed(&[(",app=\"vllm-sim\"", "")]);
}
