//! The Grafana dashboard (chart/files/dashboard.json) against the real thing: the operator binary
//! runs against the control plane, a real Prometheus scrapes its /metrics, and every query of
//! every panel returns data once one scaler has scaled and another has failed. The chart ships
//! the same JSON in a ConfigMap for Grafana's sidecar.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::env::Env;
use common::prometheus::{Exporter, Prometheus};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_llmscaleoperator");

fn dashboard() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(common::repo_root().join("chart/files/dashboard.json")).unwrap(),
    )
    .unwrap()
}

/// Every panel's queries, with the dashboard's variables filled in for namespace `ns`.
fn queries(dashboard: &Value, ns: &str) -> Vec<(String, String)> {
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| {
            let title = panel["title"].as_str().unwrap().to_owned();
            panel["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |t| {
                    let expr = t["expr"]
                        .as_str()
                        .unwrap()
                        .replace("$namespace", ns)
                        .replace("$scaler", ".*")
                        .replace("$__rate_interval", "1m");
                    (title.clone(), expr)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test]
async fn every_panel_of_the_dashboard_has_data_from_a_running_operator() {
    let env = Env::without_prometheus("dashboard").await;
    let exporter = Exporter::start().await;
    exporter.set(&env.series("kv"), 2.0);
    let health = common::free_port();
    let operator = Command::new(BIN)
        .args([
            "run",
            "--kubeconfig",
            common::kubeconfig_path().to_str().unwrap(),
            "--namespace",
            &env.ns,
            "--health-address",
            &format!("127.0.0.1:{health}"),
            "--extmetrics-address",
            &format!("127.0.0.1:{}", common::free_port()),
        ])
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _operator = common::Spawned::new(operator);
    let prometheus = Prometheus::scraping_with_rules(
        &[
            exporter.addr.unwrap(),
            format!("127.0.0.1:{health}").parse().unwrap(),
        ],
        &[common::repo_root().join("chart/files/alerts.yaml")],
    )
    .await;
    prometheus.wait_for_value(&env.query("kv"), 2.0).await;

    env.deployment("vllm", 1).await;
    let spec = |target: &str| {
        json!({
            "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": target },
            "serverAddress": prometheus.url,
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "name": "kv-cache", "query": env.query("kv"), "target": "0.8" }],
            "scaleUp": { "policies": [] }
        })
    };
    env.scaler("llama", "vllm", spec("vllm")).await;
    // A scaler whose target is missing and one whose query is broken: the failure and query
    // error panels have something to show.
    env.scaler("orphan", "gone", spec("gone")).await;
    env.deployment("other", 1).await;
    let mut broken = spec("other");
    broken["metrics"][0]["query"] = json!("avg(kv{");
    env.scaler("broken", "other", broken).await;
    // A scaler on a latency objective, its pods' histograms growing every second: the objective
    // panel has an attainment, a capacity and a condition to show.
    env.deployment("served", 1).await;
    let pod = format!("test=\"{}\", pod=\"p0\"", env.ns);
    exporter.set(&format!("vllm:num_requests_running{{{pod}}}"), 2.0);
    exporter.set(&format!("vllm:num_requests_waiting{{{pod}}}"), 0.0);
    let histograms = {
        let exporter = exporter.clone();
        let test = format!("test=\"{}\"", env.ns);
        tokio::spawn(async move {
            let mut finished = 0.0;
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                finished += 10.0;
                for (name, le) in [
                    ("vllm:request_queue_time_seconds", "1.0"),
                    ("vllm:request_queue_time_seconds", "+Inf"),
                    ("vllm:request_time_per_output_token_seconds", "0.1"),
                    ("vllm:request_time_per_output_token_seconds", "+Inf"),
                ] {
                    exporter.set(&format!("{name}_bucket{{{test}, le=\"{le}\"}}"), finished);
                }
                // Every finished request had its first token: the admissions the objective reads.
                exporter.set(
                    &format!("vllm:time_to_first_token_seconds_count{{{test}}}"),
                    finished,
                );
            }
        })
    };
    let mut objective = spec("served");
    objective["metrics"] = Value::Null;
    objective["objective"] = json!({ "selector": format!("test=\"{}\"", env.ns) });
    env.scaler("served", "served", objective).await;
    env.wait_ready("vllm", 3).await;

    let http = reqwest::Client::new();
    let dashboard = dashboard();
    let queries = queries(&dashboard, &env.ns);
    assert!(queries.len() >= 15, "{queries:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let mut empty = Vec::new();
        for (panel, expr) in &queries {
            let body: Value = http
                .get(format!("{}/api/v1/query", prometheus.url))
                .query(&[("query", expr)])
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(body["status"], "success", "{panel}: {expr}: {body}");
            if body["data"]["result"].as_array().is_none_or(Vec::is_empty) {
                empty.push(format!("{panel}: {expr}"));
            }
        }
        if empty.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "panel queries without data after 90 s: {empty:#?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // The variables' queries find this namespace and scaler.
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        let Some(query) = variable["query"].as_str() else {
            continue;
        };
        let Some(inner) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
        else {
            continue;
        };
        let (selector, label) = inner.rsplit_once(", ").unwrap();
        let selector = selector.replace("$namespace", &env.ns);
        let body: Value = http
            .get(format!("{}/api/v1/series", prometheus.url))
            .query(&[("match[]", selector.as_str())])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let values: Vec<&str> = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s[label].as_str())
            .collect();
        let want = if label == "namespace" {
            env.ns.as_str()
        } else {
            "llama"
        };
        assert!(values.contains(&want), "{query}: {values:?}");
    }

    // The alert rules, evaluated by the same Prometheus on the same exposition: each evaluates
    // without error, and those whose condition holds here are pending for the scaler they are
    // about (their `for` has not passed) and for no other.
    let body: Value = http
        .get(format!("{}/api/v1/rules", prometheus.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rules: Vec<&Value> = body["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    // Every rule of the file is loaded (a rule Prometheus refused would be missing).
    let file: Value = serde_norway::from_str(
        &std::fs::read_to_string(common::repo_root().join("chart/files/alerts.yaml")).unwrap(),
    )
    .unwrap();
    let defined: usize = file["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["rules"].as_array().unwrap().len())
        .sum();
    assert!(defined > 0, "{file}");
    assert_eq!(rules.len(), defined, "{body}");
    for rule in &rules {
        assert_eq!(rule["health"], "ok", "{rule}");
    }
    let expected = [
        ("LLMScalerAtMaxReplicas", "llama"),
        ("LLMScalerTargetMissing", "orphan"),
        ("LLMScalerQueryErrors", "broken"),
        ("LLMScalerSignalLost", "broken"),
    ];
    let pending = || async {
        let body: Value = http
            .get(format!("{}/api/v1/query", prometheus.url))
            .query(&[(
                "query",
                format!(
                    "ALERTS{{namespace=\"{}\"}} or ALERTS{{namespace=\"\"}}",
                    env.ns
                ),
            )])
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let mut alerts: Vec<(String, String)> = body["data"]["result"]
            .as_array()?
            .iter()
            .map(|a| {
                let label = |k: &str| a["metric"][k].as_str().unwrap_or("").to_owned();
                (label("alertname"), label("scaler"))
            })
            .collect();
        alerts.sort();
        Some(alerts)
    };
    let mut want: Vec<(String, String)> = expected
        .iter()
        .map(|(a, s)| (a.to_string(), s.to_string()))
        .collect();
    want.sort();
    let got = common::eventually(
        "the alerts this fleet deserves",
        Duration::from_secs(60),
        || async { pending().await.filter(|got| *got == want) },
    )
    .await;
    assert_eq!(got, want);
    histograms.abort();
    env.done().await;
}

#[test]
fn the_chart_ships_the_dashboard_for_the_grafana_sidecar() {
    let out = common::helm(&[
        "template",
        "r",
        "chart",
        "--set",
        "dashboard.enabled=true",
        "--set",
        "dashboard.namespace=monitoring",
        "--show-only",
        "templates/dashboard.yaml",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let map: Value = serde_norway::from_slice(&out.stdout).unwrap();
    assert_eq!(map["kind"], "ConfigMap");
    assert_eq!(map["metadata"]["namespace"], "monitoring");
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value =
        serde_json::from_str(map["data"]["llmscaleoperator.json"].as_str().unwrap()).unwrap();
    assert_eq!(shipped, dashboard());
    // Off by default.
    let out = common::helm(&["template", "r", "chart"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("llmscaleoperator.json"));
}

/// Every replica of the operator (the leader and each standby) exports the same per-scaler
/// gauges: a panel that showed them unaggregated would draw each scaler once per replica.
#[test]
fn per_scaler_gauges_are_shown_once_whatever_the_operator_replicas() {
    let per_scaler = [
        "current_replicas",
        "desired_replicas",
        "min_replicas",
        "max_replicas",
        "metric_value",
        "metric_target",
        "condition",
        "syncs_without_signal",
        "paused",
        "objective_attainment_ratio",
        "objective_headroom_ratio",
    ];
    let dashboard = dashboard();
    let mut seen = 0;
    for (panel, expr) in queries(&dashboard, "ns") {
        if per_scaler
            .iter()
            .any(|m| expr.contains(&format!("llmscaleoperator_{m}{{")))
        {
            seen += 1;
            assert!(
                expr.starts_with("max by (namespace, scaler"),
                "{panel}: {expr}"
            );
        }
    }
    assert!(seen >= per_scaler.len(), "{seen} per-scaler queries");
}

/// Whether the fleet keeps its period is on the dashboard: the lateness of due syncs, p50 and
/// p99, per operator replica (each runs its own timers), drawn in seconds.
#[test]
fn the_dashboard_shows_whether_syncs_keep_their_period() {
    let dashboard = dashboard();
    let lateness: Vec<(String, String)> = queries(&dashboard, "ns")
        .into_iter()
        .filter(|(_, expr)| expr.contains("llmscaleoperator_sync_lateness_seconds_bucket"))
        .collect();
    for quantile in ["histogram_quantile(0.5,", "histogram_quantile(0.99,"] {
        assert!(
            lateness
                .iter()
                .any(|(_, e)| e.starts_with(quantile) && e.contains("by (instance, le)")),
            "no {quantile} of the lateness per replica: {lateness:?}"
        );
    }
    let panel = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == lateness[0].0.as_str())
        .unwrap();
    assert_eq!(panel["fieldConfig"]["defaults"]["unit"], "s");
}

/// Every panel says what it shows and in what unit, as KEDA's dashboard does: a reader on call
/// should not have to open the query to know whether 0.9 is a share, a count or seconds.
#[test]
fn every_panel_has_a_unit_and_a_description() {
    let dashboard = dashboard();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 10, "{} panels", panels.len());
    for panel in panels {
        let title = panel["title"].as_str().unwrap();
        let unit = panel["fieldConfig"]["defaults"]["unit"]
            .as_str()
            .unwrap_or("");
        assert!(!unit.is_empty(), "{title}: no unit");
        let description = panel["description"].as_str().unwrap_or("");
        assert!(
            description.len() >= 40,
            "{title}: description {description:?}"
        );
        // A share is drawn as a percentage, not as a count near zero.
        let ratio = panel["targets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["expr"].as_str().unwrap().contains("_ratio{"));
        if ratio {
            assert_eq!(unit, "percentunit", "{title}");
        }
    }
    let ids: std::collections::BTreeSet<i64> =
        panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
}
