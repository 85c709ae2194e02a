//! `make what-if LOG=…`: what this operator, scaling to the objective, would have done on a
//! request log of one's own, beside the HPA and KEDA at their defaults and at their cheapest
//! setting that reaches the objective, each cell replayed by the lab as it replays the real logs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use llmscaleoperator_sim::lab::policy::Bounds;
use llmscaleoperator_sim::lab::report::{Runs, summarize};
use llmscaleoperator_sim::lab::traces::Trace;

use llmscaleoperator::api::objective::DEFAULT_PRIOR;

use super::{Objective, Operator};

/// The lab entrant that is the spec printed: the operator's defaults, the objective alone.
const ENTRANT: &str = "llmscaleoperator";

/// The spec a user would apply for this fleet (the bounds the lab gives every policy).
fn spec(bounds: Bounds, objective: Objective) -> String {
    let operator = Operator::objective(bounds, DEFAULT_PRIOR, objective);
    let mut spec = serde_json::to_value(operator.spec()).unwrap_or_default();
    spec["targetRef"]["name"] = "my-model".into();
    spec["serverAddress"] = "http://prometheus-operated.monitoring.svc:9090".into();
    spec["objective"]["selector"] = "namespace=\"prod\", app=\"my-model\"".into();
    let object = serde_json::json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
        "kind": "LLMScaler",
        "metadata": { "name": "my-model" },
        "spec": spec,
    });
    serde_norway::to_string(&object).unwrap_or_default()
}

/// A row: attained and replica-hours, mean over seeds.
fn row(md: &mut String, what: &str, runs: &Runs) {
    let s = summarize(&runs.outcomes);
    let _ = writeln!(
        md,
        "| {what} | {} | {:.2}% | {:.1} |",
        runs.label,
        100.0 * s.attainment,
        s.replica_hours
    );
}

/// One section per (log, start-up delay).
pub fn render(
    grouped: &BTreeMap<(Trace, u64), Vec<Runs>>,
    bounds: Bounds,
    objective: Objective,
) -> String {
    let Objective {
        ttft,
        tpot,
        percentile,
    } = objective;
    // The share of requests the objective promises: a peer setting reaches it at this goodput.
    let promised = percentile / 100.0;
    let mut md = String::from("## What if\n\n");
    let _ = writeln!(
        md,
        "The spec the operator runs for this objective (TTFT ≤ {ttft} s and TPOT ≤ {tpot} s for \
         {percentile}% of requests), names and selector to adjust:\n\n```yaml\n{}```\n",
        spec(bounds, objective)
    );
    for ((trace, delay), runs) in grouped {
        let _ = writeln!(md, "### {}, {delay} s start-up\n", trace.name());
        let _ = writeln!(md, "| policy | setting | attained | replica-hours |");
        let _ = writeln!(md, "| --- | --- | ---: | ---: |");
        if let Some(ours) = runs.iter().find(|r| r.label == ENTRANT) {
            row(&mut md, "llmscaleoperator (objective)", ours);
        }
        for family in ["HPA", "KEDA"] {
            let settings: Vec<&Runs> = runs.iter().filter(|r| r.family == family).collect();
            if let Some(default) = settings.iter().find(|r| r.default) {
                row(&mut md, &format!("{family} (defaults)"), default);
            }
            let cheapest = settings
                .iter()
                .map(|r| (r, summarize(&r.outcomes)))
                .filter(|(_, s)| s.attainment >= promised)
                .min_by(|a, b| a.1.replica_hours.total_cmp(&b.1.replica_hours));
            match cheapest {
                Some((r, _)) => row(&mut md, &format!("{family} (cheapest at {percentile}%)"), r),
                None => {
                    let _ = writeln!(
                        md,
                        "| {family} (cheapest at {percentile}%) | none reaches {percentile}% | - | - |"
                    );
                }
            }
        }
        if let Some(oracle) = runs.iter().find(|r| r.family == "oracle" && r.default) {
            row(&mut md, "oracle (knows the future)", oracle);
        }
        md.push('\n');
    }
    md
}
