//! The alert rules (chart/files/alerts.yaml): valid for Prometheus (`promtool check rules`), firing
//! when and only when they should (`promtool test rules` on tests/alerts/alerts_test.yaml), on
//! metrics the operator really serves, and installed unchanged by the chart's PrometheusRule.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

const RULES: &str = "chart/files/alerts.yaml";

fn promtool(args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(common::repo_root())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}); `make test` installs Debian's prometheus package")
        });
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_rules_are_valid_and_fire_when_they_should() {
    promtool(&["check", "rules", RULES]);
    promtool(&["test", "rules", "tests/alerts/alerts_test.yaml"]);
}

#[test]
fn every_metric_the_rules_read_is_served_by_the_operator() {
    let rules = std::fs::read_to_string(common::repo_root().join(RULES)).unwrap();
    let named: BTreeSet<String> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("llmscaleoperator_"))
        .map(str::to_owned)
        .collect();
    assert!(named.len() >= 6, "{named:?}");
    // One scaler's series in every family (an empty family is not exposed at all).
    use llmscaleoperator::controller::FailureReason;
    use llmscaleoperator::telemetry::metrics::{Metrics, SyncResult};
    use llmscaleoperator::telemetry::sync_report::{Decided, Reported, SyncReport};
    let metrics = Metrics::default();
    let decided = || SyncReport {
        namespace: "prod",
        scaler: "llama",
        elapsed: std::time::Duration::from_millis(2),
        lateness: Some(std::time::Duration::from_millis(1)),
        conditions: vec![("Ready", true), ("ObjectiveMet", false)],
        outcome: Reported::Decided(Decided {
            result: SyncResult::Held,
            metrics: vec![("kv", Some(0.5), Some(0.8))],
            also_in_use: Vec::new(),
            desired: 1,
            ready: 1,
            paused: false,
            min: 1,
            max: 1,
            syncs_without_signal: 1,
            attainment: Some(0.5),
            headroom: Some(0.1),
            written: Some((1, 2)),
        }),
    };
    metrics.record(&decided());
    metrics.record(&SyncReport {
        outcome: Reported::Failed(FailureReason::TargetNotFound),
        ..decided()
    });
    metrics.record(&decided());
    metrics.observe_query(
        "prod",
        "llama",
        "kv",
        std::time::Duration::from_millis(3),
        false,
    );
    let exposition = metrics.encode().unwrap();
    let served: BTreeSet<String> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    for metric in &named {
        let family = metric
            .strip_suffix("_total")
            .or_else(|| metric.strip_suffix("_count"))
            .or_else(|| metric.strip_suffix("_bucket"))
            .unwrap_or(metric);
        assert!(
            served.contains(family),
            "{metric} is not served (served: {served:?})"
        );
    }
}

#[test]
fn the_chart_installs_the_same_rules() {
    let out = common::helm(&[
        "template",
        "r",
        "chart",
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.labels.release=kube-prometheus",
        "--show-only",
        "templates/prometheusrule.yaml",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered: Value = serde_norway::from_slice(&out.stdout).unwrap();
    assert_eq!(rendered["kind"], "PrometheusRule");
    assert_eq!(rendered["metadata"]["labels"]["release"], "kube-prometheus");
    let file: Value = Value::deserialize(serde_norway::Deserializer::from_str(
        &std::fs::read_to_string(common::repo_root().join(RULES)).unwrap(),
    ))
    .unwrap();
    assert_eq!(rendered["spec"]["groups"], file["groups"]);

    // Off by default.
    let out = common::helm(&["template", "r", "chart"]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("kind: PrometheusRule"));
}

/// Every alert links its runbook: a section of docs/runbooks.md named after the alert, which
/// says what the alert means, what to check first and how to fix it.
#[test]
fn every_alert_links_its_runbook_section() {
    let file: Value = Value::deserialize(serde_norway::Deserializer::from_str(
        &std::fs::read_to_string(common::repo_root().join(RULES)).unwrap(),
    ))
    .unwrap();
    let runbooks = std::fs::read_to_string(common::repo_root().join("docs/runbooks.md")).unwrap();
    let headings: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| h.trim().to_lowercase())
        .collect();
    let mut alerts = 0;
    for rule in file["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
    {
        let name = rule["alert"].as_str().unwrap();
        alerts += 1;
        let url = rule["annotations"]["runbook_url"].as_str().unwrap_or("");
        let anchor = name.to_lowercase();
        assert_eq!(
            url,
            format!(
                "https://github.com/modelsphere/llmscaleoperator/blob/main/docs/runbooks.md#{anchor}"
            ),
            "{name}"
        );
        assert!(
            headings.contains(&anchor),
            "docs/runbooks.md has no `## {name}`"
        );
        // The section says what to check and what to do, not only what the alert is.
        let section = runbooks
            .split("\n## ")
            .find(|s| s.trim_start().to_lowercase().starts_with(&anchor))
            .unwrap();
        for part in ["**Meaning.**", "**Check.**", "**Fix.**"] {
            assert!(section.contains(part), "{name}: no {part}");
        }
    }
    assert_eq!(
        headings.len(),
        alerts,
        "one section per alert: {headings:?}"
    );
}
