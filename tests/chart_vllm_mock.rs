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
        r#"avg(vllm:kv_cache_usage_perc{namespace="ml", app="t-vllm"})"#
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
