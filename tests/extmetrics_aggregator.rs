//! End to end through the real aggregator: the operator registers its APIService, the
//! kube-apiserver routes `GET /apis/external.metrics.k8s.io/...` to it (an ExternalName Service
//! pointing at localhost; the local control plane runs with aggregator routing off for this), and
//! the answer is the value the controller last evaluated from the real Prometheus. A stock HPA
//! (kube-controller-manager, full profile) then scales on the operator's recommendation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::env::{Env, WAIT};
use k8s_openapi::ByteString;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

const APISERVICE: &str = "v1beta1.external.metrics.k8s.io";

/// The APIService is cluster-wide: the tests that change it take turns.
static APISERVICE_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The operator binary, scoped to the test's namespace, serving the API on `port` behind the
/// Service `llmscaleoperator` there, and asked to register it.
fn spawn_registering_operator(
    env: &Env,
    health: u16,
    port: u16,
    extra: &[&str],
) -> common::Spawned {
    let kubeconfig = common::kubeconfig_path();
    let child = Command::new(env!("CARGO_BIN_EXE_llmscaleoperator"))
        .args([
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--namespace",
            &env.ns,
        ])
        .args(["--health-address", &format!("127.0.0.1:{health}")])
        .args(["--extmetrics-address", &format!("127.0.0.1:{port}")])
        .args([
            "--register-apiservice",
            "--extmetrics-service",
            "llmscaleoperator",
        ])
        .args([
            "--extmetrics-service-namespace",
            &env.ns,
            "--extmetrics-service-port",
            &port.to_string(),
        ])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::Spawned::new(child)
}

#[tokio::test]
async fn kubectl_get_raw_returns_what_the_controller_measured() {
    let _turn = APISERVICE_LOCK.lock().await;
    let env = Env::new("aggregator").await;
    let apiservices: Api<APIService> = Api::all(env.client.clone());
    common::remove_apiservice(&apiservices).await;
    env.deployment("vllm", 1).await;
    env.set("kv", 0.5).await;

    let port = common::free_port();
    let health = common::free_port();
    external_name_service(&env, port).await;

    let mut operator = spawn_registering_operator(&env, health, port, &[]);
    env.scaler(
        "agg",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "name": "kv", "query": env.query("kv"), "target": "1" }]
        }),
    )
    .await;

    wait_available(&apiservices).await;
    let path = format!(
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/{}/kv?labelSelector=llmscaler%3Dagg",
        env.ns
    );
    let answer: Value = common::eventually("the metric through the aggregator", WAIT, || async {
        let request = http::Request::get(&path).body(Vec::new()).unwrap();
        let text = env.client.request_text(request).await.ok()?;
        serde_json::from_str(&text).ok()
    })
    .await;
    assert_eq!(answer["kind"], "ExternalMetricValueList", "{answer}");
    assert_eq!(answer["items"][0]["value"], "500m", "{answer}");
    assert_eq!(answer["items"][0]["metricLabels"]["llmscaler"], "agg");

    // Reading the API asks nothing upstream: over 100 reads Prometheus answers only the
    // controller's own syncs (one query each; a sync may straddle either end of the window).
    let queries_before = prometheus_queries(&env).await;
    let syncs_before = operator_syncs(health).await;
    assert!(
        queries_before > 0.0 && syncs_before > 0.0,
        "both counters are read"
    );
    for _ in 0..100 {
        let request = http::Request::get(&path).body(Vec::new()).unwrap();
        env.client.request_text(request).await.unwrap();
    }
    let syncs = operator_syncs(health).await - syncs_before;
    let queries = prometheus_queries(&env).await - queries_before;
    assert!(
        queries <= syncs + 2.0,
        "{queries} PromQL queries during 100 reads and {syncs} syncs"
    );

    // What the controller acted on is what the API shows: the recommendation too.
    let desired = format!(
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/{}/desired-replicas",
        env.ns
    );
    let request = http::Request::get(&desired).body(Vec::new()).unwrap();
    let answer: Value =
        serde_json::from_str(&env.client.request_text(request).await.unwrap()).unwrap();
    assert_eq!(answer["items"][0]["value"], "1");

    // Advisory mode: a dry-run scaler recommends, a stock HPA on desired-replicas acts.
    env.deployment("advised", 1).await;
    env.set("load", 3.0).await;
    let advisor: llmscaleoperator::api::LLMScaler = serde_json::from_value(json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": { "name": "advisor", "annotations": { "autoscaling.modelsphere.dev/dry-run": "true" } },
        "spec": {
            "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "advised" },
            "serverAddress": env.prometheus().url, "syncPeriodSeconds": 1,
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "name": "load", "query": env.query("load"), "target": "1" }]
        }
    }))
    .unwrap();
    env.scalers()
        .create(&PostParams::default(), &advisor)
        .await
        .unwrap();
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": { "name": "advised" },
        "spec": {
            "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "advised" },
            "minReplicas": 1, "maxReplicas": 5,
            "metrics": [{
                "type": "External",
                "external": {
                    "metric": { "name": "desired-replicas", "selector": { "matchLabels": { "llmscaler": "advisor" } } },
                    "target": { "type": "AverageValue", "averageValue": "1" }
                }
            }]
        }
    }))
    .unwrap();
    Api::<HorizontalPodAutoscaler>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &hpa)
        .await
        .unwrap();
    // The real HPA controller reads our metric through the aggregator (as its own ServiceAccount,
    // authorized by our SubjectAccessReview) and scales to the operator's recommendation.
    common::eventually(
        "the HPA to follow the advisor to 3",
        Duration::from_secs(120),
        || async {
            let d = env.deployments().get("advised").await.ok()?;
            (d.spec?.replicas? == 3).then_some(())
        },
    )
    .await;
    let d = env.deployments().get("advised").await.unwrap();
    assert!(
        d.metadata
            .managed_fields
            .iter()
            .flatten()
            .all(|m| m.manager.as_deref() != Some("llmscaleoperator")),
        "the operator wrote nothing to the advised Deployment"
    );

    common::interrupt(&mut operator, Duration::from_secs(20)).await;
    let _ = apiservices
        .delete(APISERVICE, &DeleteParams::default())
        .await;
    env.done().await;
}

#[tokio::test]
async fn an_apiservice_held_by_someone_else_is_left_alone() {
    let _turn = APISERVICE_LOCK.lock().await;
    use kube::api::{Patch, PatchParams};
    let env = Env::without_prometheus("foreign-apiservice").await;
    let apiservices: Api<APIService> = Api::all(env.client.clone());
    common::remove_apiservice(&apiservices).await;
    // Another adapter (KEDA, prometheus-adapter) got there first.
    let foreign = json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": { "name": APISERVICE },
        "spec": {
            "group": "external.metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100, "insecureSkipTLSVerify": true,
            "service": { "namespace": env.ns, "name": "keda-metrics-apiserver", "port": 443 }
        }
    });
    apiservices
        .patch(
            APISERVICE,
            &PatchParams::apply("keda"),
            &Patch::Apply(foreign),
        )
        .await
        .unwrap();
    let before = apiservices.get(APISERVICE).await.unwrap();

    let health = common::free_port();
    let mut operator = spawn_registering_operator(&env, health, common::free_port(), &[]);
    // Registration happens before the operator reports ready.
    common::eventually("the operator to be ready", WAIT, || async {
        let r = reqwest::get(format!("http://127.0.0.1:{health}/readyz"))
            .await
            .ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    // ...and says so in an event on that APIService.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(env.client.clone());
    common::eventually("an event about the foreign APIService", WAIT, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("APIServiceHeldByAnother")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(APISERVICE)
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("keda-metrics-apiserver"))
            })
            .map(|_| ())
    })
    .await;
    let after = apiservices.get(APISERVICE).await.unwrap();
    // Its status may move (the aggregator checks availability); its spec and labels must not.
    assert_eq!(after.spec, before.spec, "not rewritten");
    assert_eq!(after.metadata.labels, before.metadata.labels);
    assert_eq!(
        after.spec.unwrap().service.unwrap().name.as_deref(),
        Some("keda-metrics-apiserver")
    );

    common::interrupt(&mut operator, Duration::from_secs(20)).await;
    let _ = apiservices
        .delete(APISERVICE, &DeleteParams::default())
        .await;
    env.done().await;
}

/// The Service `llmscaleoperator` in the test namespace: an ExternalName to localhost, so the
/// aggregator (routing off) reaches the operator listening on `port` there.
async fn external_name_service(env: &Env, port: u16) {
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "llmscaleoperator" },
        "spec": { "type": "ExternalName", "externalName": "localhost", "ports": [{ "name": "https", "port": port }] }
    }))
    .unwrap();
    Api::<Service>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
}

/// Waits until the APIService reports Available=True.
async fn wait_available(apiservices: &Api<APIService>) {
    common::eventually("the APIService to be Available", WAIT, || async {
        let apiservice = apiservices.get(APISERVICE).await.ok()?;
        let available = apiservice
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Available")?;
        (available.status == "True").then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_new_ca_reaches_the_apiservice_and_the_aggregator_keeps_trusting_the_operator() {
    let _turn = APISERVICE_LOCK.lock().await;
    let env = Env::without_prometheus("aggregator-ca").await;
    let apiservices: Api<APIService> = Api::all(env.client.clone());
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    common::remove_apiservice(&apiservices).await;
    let port = common::free_port();
    external_name_service(&env, port).await;
    let mut operator = spawn_registering_operator(
        &env,
        common::free_port(),
        port,
        &["--extmetrics-tls-secret", "serving"],
    );
    wait_available(&apiservices).await;
    let bundle_of = |apiservice: APIService| {
        String::from_utf8(apiservice.spec.unwrap().ca_bundle.unwrap().0).unwrap()
    };
    let secret_ca =
        |secret: Secret| String::from_utf8(secret.data.unwrap()["ca.crt"].0.clone()).unwrap();
    let first = secret_ca(secrets.get("serving").await.unwrap());
    assert_eq!(bundle_of(apiservices.get(APISERVICE).await.unwrap()), first);

    // The CA's key is damaged: the operator makes a new CA and serves a certificate only it
    // signed, so the aggregator can only go on talking to it if the APIService's caBundle
    // follows.
    let mut secret = secrets.get("serving").await.unwrap();
    secret
        .data
        .as_mut()
        .unwrap()
        .insert("ca.key".into(), ByteString(b"garbage".to_vec()));
    secrets
        .replace("serving", &PostParams::default(), &secret)
        .await
        .unwrap();
    let rotated = common::eventually(
        "a new CA in the Secret and the APIService",
        WAIT,
        || async {
            let now = secret_ca(secrets.get("serving").await.ok()?);
            let registered = bundle_of(apiservices.get(APISERVICE).await.ok()?);
            (now != first && registered == now).then_some(now)
        },
    )
    .await;
    let cas = llmscaleoperator::tls::inspect_all(&rotated).unwrap();
    assert_eq!(cas.len(), 2, "the old CA stays trusted while it is valid");
    assert_eq!(cas[1], llmscaleoperator::tls::inspect(&first).unwrap());
    let discovery = common::eventually("discovery through the aggregator", WAIT, || async {
        let request = http::Request::get("/apis/external.metrics.k8s.io/v1beta1")
            .body(Vec::new())
            .unwrap();
        let text = env.client.request_text(request).await.ok()?;
        serde_json::from_str::<Value>(&text).ok()
    })
    .await;
    assert_eq!(discovery["kind"], "APIResourceList", "{discovery}");
    wait_available(&apiservices).await;
    assert!(operator.try_wait().unwrap().is_none(), "no restart");

    common::interrupt(&mut operator, Duration::from_secs(20)).await;
    common::remove_apiservice(&apiservices).await;
    env.done().await;
}

/// Instant queries Prometheus has answered, from its own metrics.
async fn prometheus_queries(env: &Env) -> f64 {
    sum_of(
        &format!("{}/metrics", env.prometheus().url),
        "prometheus_http_requests_total{",
        r#"handler="/api/v1/query""#,
    )
    .await
}

/// Syncs the operator process has run, from its /metrics.
async fn operator_syncs(health: u16) -> f64 {
    sum_of(
        &format!("http://127.0.0.1:{health}/metrics"),
        "llmscaleoperator_syncs_total{",
        "",
    )
    .await
}

async fn sum_of(url: &str, prefix: &str, containing: &str) -> f64 {
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(prefix) && l.contains(containing))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
