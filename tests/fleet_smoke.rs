//! A short run of the simulated fleet (sim/) under the real operator: the fleet's vLLM metrics are
//! scraped by a real Prometheus, the operator scales the Deployment on them, kwok makes the new
//! pods Ready and the simulator routes requests to them. Under a burst the fleet grows; after it
//! the fleet shrinks back.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::Operator;
use common::env::Env;
use common::prometheus::Prometheus;
use llmscaleoperator_sim::fleet::FleetConfig;
use llmscaleoperator_sim::live::{self, LiveOptions};
use llmscaleoperator_sim::trace::Trace;
use serde_json::json;

#[tokio::test]
async fn the_operator_grows_the_fleet_under_a_burst_and_shrinks_it_after() {
    let env = Env::without_prometheus("fleet-smoke").await;
    env.deployment("vllm-sim", 1).await;

    // Simulated seconds: quiet, a burst of ten times the load, quiet again; run at 2x.
    let trace = Trace::parse("0 2\n8 2\n9 30\n40 30\n41 2\n").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim_addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let options = LiveOptions {
        namespace: env.ns.clone(),
        selector: "app=vllm-sim".to_owned(),
        trace,
        speed: 2.0,
        fleet: FleetConfig {
            startup_delay: Duration::from_secs(2),
            ..FleetConfig::default()
        },
        progress: false,
        deployment: Some("vllm-sim".to_owned()),
        scaler: Some("vllm-sim".to_owned()),
    };
    let sim = tokio::spawn(live::run(
        env.client.clone(),
        listener,
        options,
        async move { stopped.cancelled().await },
    ));
    let prometheus = Prometheus::scraping(&[sim_addr]).await;

    let _operator = Operator::start(&env.client, &env.ns);
    // Requests in flight or waiting per replica, 20 each.
    let busy = format!(
        "avg(vllm:num_requests_running{{namespace=\"{ns}\"}} + vllm:num_requests_waiting{{namespace=\"{ns}\"}})",
        ns = env.ns
    );
    let mut spec = json!({
        "minReplicas": 1, "maxReplicas": 5,
        "metrics": [{ "name": "busy", "query": busy, "target": "20" }]
    });
    spec["serverAddress"] = json!(prometheus.url);
    env.scaler("vllm-sim", "vllm-sim", spec).await;

    let replicas = || async {
        env.deployments()
            .get("vllm-sim")
            .await
            .ok()
            .and_then(|d| d.spec?.replicas)
    };
    common::eventually(
        "the fleet to grow to 3 or more under the burst",
        Duration::from_secs(90),
        || async { replicas().await.filter(|r| *r >= 3) },
    )
    .await;
    common::eventually(
        "the fleet to shrink back to 1 after the burst",
        Duration::from_secs(120),
        || async { replicas().await.filter(|r| *r == 1) },
    )
    .await;

    stop.cancel();
    let report = sim.await.unwrap().unwrap();
    assert!(report.totals.finished > 100, "{:?}", report.totals);
    // The run was sampled with what the operator decided next to what the fleet had.
    assert!(
        report
            .samples
            .iter()
            .any(|s| s.desired.is_some_and(|d| d >= 3.0))
    );
    assert!(
        report
            .samples
            .iter()
            .any(|s| s.spec.is_some_and(|r| r >= 3.0))
    );
    env.done().await;
}
