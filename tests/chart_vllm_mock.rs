//! tests/charts/vllm-mock: the chart renders (and refuses to) as documented, its scaler passes
//! admission, and its preStop drain script behaves against a real /metrics server on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use llmscaleoperator::api::LLMScaler;

const CHART: &str = "tests/charts/vllm-mock";

fn template(sets: &[&str]) -> Result<String, String> {
    let mut args = vec!["template", "t", CHART, "--namespace", "ml"];
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = common::helm(&args);
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn the_chart_lints() {
    let out = common::helm(&["lint", CHART]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_drain_steps_are_wired_into_the_pod() {
    let rendered = template(&[]).unwrap();
    assert!(rendered.contains("- --shutdown-timeout=30"), "{rendered}");
    assert!(rendered.contains("- /drain/drain.py"));
    assert!(rendered.contains("- --endpoint-sync-seconds=5"));
    assert!(rendered.contains("- --drain-seconds=60"));
    assert!(rendered.contains("terminationGracePeriodSeconds: 120"));
    let without = template(&["shutdownTimeout=0"]).unwrap();
    assert!(
        !without.contains("- --shutdown-timeout"),
        "0 leaves the flag out"
    );
}

/// The rendered documents of one kind, as JSON.
fn documents(rendered: &str, kind: &str) -> Vec<serde_json::Value> {
    rendered
        .split("\n---")
        .filter_map(|doc| serde_norway::from_str::<serde_json::Value>(doc).ok())
        .filter(|doc| doc["kind"] == kind)
        .collect()
}

/// The vLLM Deployment's pod template and its vLLM container.
fn vllm_pod(rendered: &str) -> (serde_json::Value, serde_json::Value) {
    let deployment = documents(rendered, "Deployment")
        .into_iter()
        .find(|d| d["metadata"]["name"] == "t-vllm")
        .expect("the vLLM Deployment is rendered");
    let template = deployment["spec"]["template"].clone();
    let container = template["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "vllm")
        .expect("a container named vllm")
        .clone();
    (template, container)
}

fn args(container: &serde_json::Value) -> Vec<String> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

fn passes_shutdown_timeout(container: &serde_json::Value) -> bool {
    args(container)
        .iter()
        .any(|a| a.starts_with("--shutdown-timeout"))
}

/// The first three numbers of a vLLM image tag ("v0.33.0" -> (0, 33, 0)).
fn version(tag: &str) -> Option<(u64, u64, u64)> {
    let mut parts = tag.strip_prefix('v').unwrap_or(tag).split('.');
    let mut next = || parts.next()?.parse::<u64>().ok();
    Some((next()?, next()?, next()?))
}

/// vLLM accepts --shutdown-timeout from 0.18.0 on and refuses to start on a flag it does not
/// know: the default image and the default flags must agree.
#[test]
fn the_default_image_accepts_the_flags_it_is_given() {
    let values: serde_json::Value = common::read_yaml(&format!("{CHART}/values.yaml"));
    let tag = values["image"]["tag"]
        .as_str()
        .expect("image.tag is a string");
    let parsed =
        version(tag).unwrap_or_else(|| panic!("the default tag {tag:?} is a vLLM version"));
    assert!(
        parsed >= (0, 18, 0),
        "the default image {tag} predates vLLM 0.18.0, which added --shutdown-timeout"
    );
    assert!(
        values["shutdownTimeout"].as_u64().unwrap() > 0,
        "the default passes --shutdown-timeout"
    );
    let chart: serde_json::Value = common::read_yaml(&format!("{CHART}/Chart.yaml"));
    assert_eq!(
        chart["appVersion"], tag,
        "appVersion names the default image's vLLM"
    );

    let (_, container) = vllm_pod(&template(&[]).unwrap());
    assert_eq!(container["image"], format!("vllm/vllm-openai:{tag}"));
    assert!(
        args(&container).contains(&"--shutdown-timeout=30".to_owned()),
        "{:?}",
        args(&container)
    );
}

#[test]
fn shutdown_timeout_is_passed_only_to_a_vllm_that_accepts_it() {
    for (tag, expected) in [
        ("v0.11.0", false),
        ("0.11.0", false),
        ("v0.17.1", false),
        ("v0.10.1.1", false),
        ("v0.18.0", true),
        ("0.18.0", true),
        ("v0.33.0", true),
        ("v1.0.0", true),
        // Not a version: assumed recent.
        ("latest", true),
        ("nightly", true),
    ] {
        let (_, container) = vllm_pod(&template(&[&format!("image.tag={tag}")]).unwrap());
        assert_eq!(container["image"], format!("vllm/vllm-openai:{tag}"));
        assert_eq!(
            passes_shutdown_timeout(&container),
            expected,
            "tag {tag}: {:?}",
            args(&container)
        );
    }
    // A digest wins over the tag, and its version cannot be read: the flag is passed.
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let (_, container) =
        vllm_pod(&template(&["image.tag=v0.11.0", &format!("image.digest={digest}")]).unwrap());
    assert_eq!(container["image"], format!("vllm/vllm-openai@{digest}"));
    assert!(passes_shutdown_timeout(&container));
    // Turned off, it is never passed.
    let (_, container) = vllm_pod(&template(&["image.tag=v0.33.0", "shutdownTimeout=0"]).unwrap());
    assert!(!passes_shutdown_timeout(&container));
}

/// The chart's pods are scraped by the documented scrape (config/prometheus/) with the labels
/// its scaler's queries filter on.
#[test]
fn the_pods_are_selected_by_the_documented_scrape() {
    let (pod, container) = vllm_pod(&template(&[]).unwrap());
    let labels = &pod["metadata"]["labels"];
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(labels["app"], "t-vllm", "the label the queries filter on");

    let monitor: serde_json::Value = common::read_yaml("config/prometheus/podmonitor.yaml");
    assert_eq!(monitor["kind"], "PodMonitor");
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&labels[key], value, "PodMonitor selector {key}");
    }
    assert_eq!(
        monitor["spec"]["podTargetLabels"],
        serde_json::json!(["app"])
    );
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let ports = container["ports"].as_array().unwrap();
    let port = ports
        .iter()
        .find(|p| p["name"] == endpoint["port"])
        .unwrap_or_else(|| panic!("no container port named {}", endpoint["port"]));
    assert_eq!(port["containerPort"], 8000);

    // The plain scrape keeps pods annotated prometheus.io/scrape "true" and scrapes the
    // annotated port.
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "8000");
    let scrape: serde_json::Value = common::read_yaml("config/prometheus/scrape-config.yaml");
    let job = &scrape["scrape_configs"][0];
    assert_eq!(job["metrics_path"], "/metrics");
    let relabel = job["relabel_configs"].as_array().unwrap();
    assert!(relabel.iter().any(|r| r["action"] == "keep"
        && r["source_labels"]
            == serde_json::json!(["__meta_kubernetes_pod_annotation_prometheus_io_scrape"])
        && r["regex"] == "true"));
    for (source, target) in [
        ("__meta_kubernetes_namespace", "namespace"),
        ("__meta_kubernetes_pod_name", "pod"),
        ("__meta_kubernetes_pod_label_app", "app"),
    ] {
        assert!(
            relabel
                .iter()
                .any(|r| r["source_labels"] == serde_json::json!([source])
                    && r["target_label"] == target),
            "{source} -> {target}"
        );
    }
}

#[test]
fn a_drain_budget_over_the_grace_period_refuses_to_render() {
    let err = template(&[
        "endpointSyncSeconds=10",
        "drainSeconds=30",
        "shutdownTimeout=30",
        "terminationGracePeriodSeconds=60",
    ])
    .unwrap_err();
    for fragment in [
        "endpointSyncSeconds (10)",
        "drainSeconds (30)",
        "shutdownTimeout (30)",
        "= 70 exceeds terminationGracePeriodSeconds (60)",
    ] {
        assert!(err.contains(fragment), "{fragment:?} missing from: {err}");
    }
    // Exactly the grace period is fine.
    template(&[
        "endpointSyncSeconds=10",
        "drainSeconds=20",
        "shutdownTimeout=30",
        "terminationGracePeriodSeconds=60",
    ])
    .unwrap();
}

#[tokio::test]
async fn the_metrics_mock_scaler_is_scoped_and_admitted() {
    let rendered = template(&["metricsMock.enabled=true"]).unwrap();
    let scaler: DynamicObject = rendered
        .split("\n---")
        .filter_map(|doc| serde_norway::from_str::<DynamicObject>(doc).ok())
        .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "LLMScaler"))
        .expect("an LLMScaler is rendered");
    let query = scaler.data["spec"]["metrics"][0]["query"].as_str().unwrap();
    assert_eq!(
        query,
        r#"avg(avg by (namespace, pod) (vllm:kv_cache_usage_perc{namespace="ml", app="t-vllm"}))"#
    );
    assert_eq!(
        scaler.data["spec"]["scaleDown"]["deletionCostQuery"],
        r#"avg by (namespace, pod) (vllm:kv_cache_usage_perc{namespace="ml", app="t-vllm"}) * 100"#,
        "one series per pod"
    );
    assert_eq!(
        scaler.data["spec"]["serverAddress"],
        "http://t-metrics-mock.ml.svc:9090"
    );

    let client = common::client().await;
    common::ensure_crd(&client).await;
    let ns = common::namespace(&client, "chart").await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<LLMScaler>(&()));
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&dry_run, &scaler)
        .await
        .unwrap_or_else(|e| panic!("the chart's LLMScaler is rejected: {e}"));
    common::delete_namespace(&client, &ns).await;
}

/// What the fake vLLM /metrics serves.
#[derive(Clone, Copy)]
enum Load {
    Idle,
    Busy,
    /// Only metrics whose names merely start like vLLM's are non-zero.
    PrefixNoise,
    /// Never answers.
    Hang,
}

async fn fake_vllm(load: Arc<Mutex<Load>>) -> String {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let load = *load.lock().unwrap();
            async move {
                match load {
                    Load::Idle => "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 0.0\nvllm:num_requests_waiting{model_name=\"m\"} 0.0\n".to_owned(),
                    Load::Busy => "vllm:num_requests_running{model_name=\"m\"} 2.0\nvllm:num_requests_waiting{model_name=\"m\"} 0.0\n".to_owned(),
                    Load::PrefixNoise => "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:num_requests_running_total 5\nvllm:num_requests_waiting_time_seconds{le=\"1\"} 3\n".to_owned(),
                    Load::Hang => futures::future::pending().await,
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/metrics")
}

/// Runs the chart's drain script and returns how long it took.
async fn drain(url: &str, endpoint_sync: f64, drain_seconds: f64) -> Duration {
    let script = common::repo_root().join(CHART).join("files/drain.py");
    let started = Instant::now();
    let status = tokio::process::Command::new("python3")
        .arg(script)
        .arg(format!("--endpoint-sync-seconds={endpoint_sync}"))
        .arg(format!("--drain-seconds={drain_seconds}"))
        .arg(format!("--metrics-url={url}"))
        .args(["--interval=0.2", "--request-timeout=0.5"])
        .status()
        .await
        .expect("python3 runs the drain script");
    assert!(status.success());
    started.elapsed()
}

#[tokio::test]
async fn the_drain_script_waits_exactly_as_long_as_it_must() {
    let load = Arc::new(Mutex::new(Load::Idle));
    let url = fake_vllm(load.clone()).await;
    let budget = 3.0;

    // Idle: returns at once.
    assert!(drain(&url, 0.0, budget).await < Duration::from_millis(1500));
    // The endpoint-sync wait is always taken in full, even when idle.
    assert!(drain(&url, 1.0, budget).await >= Duration::from_secs(1));
    // Names that merely share the prefix do not count as load.
    *load.lock().unwrap() = Load::PrefixNoise;
    assert!(drain(&url, 0.0, budget).await < Duration::from_millis(1500));

    // Busy: waits out the budget, and not longer.
    *load.lock().unwrap() = Load::Busy;
    let took = drain(&url, 0.0, budget).await;
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_millis(4500),
        "{took:?}"
    );

    // A hanging endpoint counts as busy, and its timeouts are inside the budget.
    *load.lock().unwrap() = Load::Hang;
    let took = drain(&url, 0.0, budget).await;
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_millis(4500),
        "{took:?}"
    );

    // Unreachable counts as busy too.
    let took = drain("http://127.0.0.1:1/metrics", 0.0, budget).await;
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_millis(4500),
        "{took:?}"
    );

    // Busy, then the last request finishes: returns soon after, well before the budget.
    *load.lock().unwrap() = Load::Busy;
    let flip = load.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        *flip.lock().unwrap() = Load::Idle;
    });
    let took = drain(&url, 0.0, 10.0).await;
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(4),
        "{took:?}"
    );
}
