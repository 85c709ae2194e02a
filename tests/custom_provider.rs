//! metricProvider: Custom against a real decision server on loopback that the test controls,
//! on the same rails as the Prometheus path.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::Operator;
use common::env::{Env, WAIT};
use serde_json::{Value, json};

/// What the decision server answers next.
#[derive(Clone)]
enum Answer {
    Active(i64),
    Garbage,
}

#[derive(Default)]
struct Seen {
    authorization: Option<String>,
    service_id: Option<String>,
}

#[derive(Clone)]
struct DecisionServer {
    answer: Arc<Mutex<Answer>>,
    seen: Arc<Mutex<Seen>>,
    url: String,
    stop: tokio_util::sync::CancellationToken,
}

impl DecisionServer {
    /// Serves from a runtime of its own, so that stopping it really closes every connection
    /// (a graceful shutdown would keep answering on the client's pooled keep-alive connection).
    async fn start(service_id: &'static str, active: i64) -> Self {
        let answer = Arc::new(Mutex::new(Answer::Active(active)));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let state = (answer.clone(), seen.clone(), service_id);
        let app = axum::Router::new()
            .route("/v2/decisions", axum::routing::get(decide))
            .with_state(state);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let stop = tokio_util::sync::CancellationToken::new();
        let token = stop.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                tokio::select! {
                    result = axum::serve(listener, app) => result.unwrap(),
                    () = token.cancelled() => {}
                }
            });
            // Dropping the runtime ends every connection task with it.
            drop(runtime);
        });
        Self {
            answer,
            seen,
            url,
            stop,
        }
    }

    fn answer(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }
}

type ServerState = (Arc<Mutex<Answer>>, Arc<Mutex<Seen>>, &'static str);

async fn decide(
    State((answer, seen, service_id)): State<ServerState>,
    headers: HeaderMap,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    {
        let mut seen = seen.lock().unwrap();
        seen.authorization = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        seen.service_id = query.get("serviceId").cloned();
    }
    let answer = answer.lock().unwrap().clone();
    match answer {
        Answer::Active(active) => axum::Json(json!({
            "apiVersion": "llmscaling.inference.x-k8s.io/v1alpha1",
            "decisions": [
                { "namespace": "elsewhere", "serviceId": "someone-else", "replicas": { "active": 99 } },
                { "namespace": "modelforge", "serviceId": service_id, "replicas": { "active": active } }
            ]
        }))
        .into_response(),
        Answer::Garbage => (StatusCode::OK, "<html>oops</html>").into_response(),
    }
}

fn custom(server: &DecisionServer, extra: Value) -> Value {
    let mut spec = json!({
        "metricProvider": "Custom",
        "serverAddress": server.url,
        "customProvider": { "serviceId": "fallback-modelforge-01", "namespace": "modelforge", "path": "v2/decisions" },
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    spec
}

#[tokio::test]
async fn scales_to_the_decision_and_forwards_headers() {
    let env = Env::without_prometheus("custom-up").await;
    env.deployment("vllm", 1).await;
    let server = DecisionServer::start("fallback-modelforge-01", 4).await;
    let operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "planner",
        "vllm",
        custom(
            &server,
            json!({
                "serverHeaders": { "Authorization": "Bearer planner-token" },
                "minReplicas": 1, "maxReplicas": 10,
                "scaleDown": { "deletionCostQuery": "avg(kv)" }
            }),
        ),
    )
    .await;
    // Absolute, not a ratio: 4 means 4, and stays 4 once 4 are ready.
    env.wait_ready("vllm", 4).await;
    env.stays("vllm", 4, Duration::from_secs(2)).await;
    {
        let seen = server.seen.lock().unwrap();
        assert_eq!(seen.authorization.as_deref(), Some("Bearer planner-token"));
        assert_eq!(seen.service_id.as_deref(), Some("fallback-modelforge-01"));
    }
    let status = env.scalers().get("planner").await.unwrap().status.unwrap();
    let decision = status
        .current_metrics
        .iter()
        .find(|m| m.name == "decision")
        .unwrap();
    assert_eq!(decision.value.as_deref(), Some("4"));
    assert!(decision.measured_at.is_some());
    let cached = operator
        .cache
        .get(&llmscaleoperator::metric_cache::ScalerKey {
            namespace: env.ns.clone(),
            name: "planner".into(),
        })
        .unwrap();
    assert_eq!(cached.metrics[0].name, "decision");
    assert_eq!(cached.metrics[0].value, Some(4.0));
    env.wait_event("planner", "ScaledUp", "from 1 to 4").await;
    env.wait_event(
        "planner",
        "DeletionCostQueryIgnored",
        "ignored under the Custom provider",
    )
    .await;
    assert!(
        env.events("planner", "DeletionCostQueryIgnored")
            .await
            .len()
            == 1,
        "said once"
    );

    // Clamped to maxReplicas.
    server.answer(Answer::Active(40));
    env.wait_ready("vllm", 10).await;
    let (_, reason, _) = env.condition("planner", "ScalingLimited").await.unwrap();
    assert_eq!(reason, "TooManyReplicas");
    operator.stop().await;
    env.done().await;
}

#[tokio::test]
async fn scales_to_zero_and_wakes_from_zero() {
    let env = Env::without_prometheus("custom-zero").await;
    env.deployment("vllm", 2).await;
    let server = DecisionServer::start("fallback-modelforge-01", 0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "planner",
        "vllm",
        custom(&server, json!({ "minReplicas": 0, "maxReplicas": 5 })),
    )
    .await;
    env.wait_ready("vllm", 0).await;
    server.answer(Answer::Active(3));
    env.wait_ready("vllm", 3).await;
    env.done().await;
}

#[tokio::test]
async fn a_failing_server_holds_the_fleet_and_says_why() {
    let env = Env::without_prometheus("custom-hold").await;
    env.deployment("vllm", 2).await;
    let server = DecisionServer::start("fallback-modelforge-01", 2).await;
    let operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "planner",
        "vllm",
        custom(&server, json!({ "minReplicas": 0, "maxReplicas": 5 })),
    )
    .await;
    common::eventually("a healthy first sync", WAIT, || async {
        let (status, _, _) = env.condition("planner", "ScalingActive").await?;
        (status == "True").then_some(())
    })
    .await;
    // What the external metrics API serves, read through the function its route calls.
    let served = |metric: &str| {
        let selector =
            llmscaleoperator::extmetrics::selector::LabelSelector::parse("llmscaler=planner")
                .unwrap();
        llmscaleoperator::extmetrics::values::metric_values(
            &operator.cache,
            &env.ns,
            metric,
            &selector,
            k8s_openapi::jiff::Timestamp::now(),
        )
        .map(|body| String::from_utf8(body).unwrap())
    };
    let decision = served("decision").unwrap();
    assert!(decision.contains(r#""value":"2""#), "{decision}");
    assert!(served("desired-replicas").is_ok());

    // Garbage: held, and the reason is on the scaler.
    server.answer(Answer::Garbage);
    common::eventually("ScalingActive=False with the reason", WAIT, || async {
        let (status, reason, message) = env.condition("planner", "ScalingActive").await?;
        (status == "False" && reason == "SignalUnavailable" && message.contains("not valid JSON"))
            .then_some(())
    })
    .await;
    env.wait_event("planner", "ScalingHeld", "not valid JSON")
        .await;
    env.stays("vllm", 2, Duration::from_secs(2)).await;
    // The decision could not be read: it is not served (not the value before it); the
    // recommendation is the hold.
    let answer = served("decision");
    assert!(answer.as_ref().is_err_and(|e| e.code == 404), "{answer:?}");
    let held = served("desired-replicas").unwrap();
    assert!(held.contains(r#""value":"2""#), "{held}");

    // A good answer again: the fleet follows it. Then the server goes away: held, never zero.
    server.answer(Answer::Active(1));
    env.wait_ready("vllm", 1).await;
    server.stop.cancel();
    env.wait_event("planner", "ScalingHeld", "request to").await;
    env.stays("vllm", 1, Duration::from_secs(3)).await;

    // A sync that fails as a whole (the target is gone) leaves nothing served for the scaler.
    env.deployments()
        .delete("vllm", &Default::default())
        .await
        .unwrap();
    common::eventually("Ready=False TargetNotFound", WAIT, || async {
        let (status, reason, _) = env.condition("planner", "Ready").await?;
        (status == "False" && reason == "TargetNotFound").then_some(())
    })
    .await;
    // At once, not three sync periods later when the last value would have gone stale.
    let answer = served("desired-replicas");
    assert!(answer.as_ref().is_err_and(|e| e.code == 404), "{answer:?}");
    env.done().await;
}

#[tokio::test]
async fn stabilization_and_the_step_cap_apply_to_decisions() {
    let env = Env::without_prometheus("custom-rails").await;
    env.deployment("vllm", 7).await;
    let server = DecisionServer::start("fallback-modelforge-01", 7).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "planner",
        "vllm",
        custom(
            &server,
            json!({
                "minReplicas": 1, "maxReplicas": 10,
                "scaleDown": { "stabilizationWindowSeconds": 3, "maxStepReplicas": 2 }
            }),
        ),
    )
    .await;
    common::eventually("a first sync at 7", WAIT, || async {
        let (_, _, message) = env.condition("planner", "ScalingActive").await?;
        message.contains("recommends 7").then_some(())
    })
    .await;
    server.answer(Answer::Active(1));
    let started = Instant::now();
    let mut seen = vec![7];
    while seen.last() != Some(&1) {
        assert!(started.elapsed() < WAIT, "did not reach 1: {seen:?}");
        let r = env.spec_replicas("vllm").await;
        if seen.last() != Some(&r) {
            seen.push(r);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen, [7, 5, 3, 1], "two replicas per step");
    env.wait_event("planner", "ScaleDownStabilized", "held at")
        .await;
    // Each step waited for the window (3 s) to pass after the previous one.
    assert!(
        started.elapsed() >= Duration::from_secs(6),
        "took {:?}",
        started.elapsed()
    );
    env.done().await;
}
