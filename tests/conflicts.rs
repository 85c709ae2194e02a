//! Two autoscalers on one target, against the real control plane: a real HPA (run by the real
//! kube-controller-manager), a KEDA ScaledObject (its CRD served, no KEDA running) and a second
//! LLMScaler. The scaler that would fight writes nothing, says who it would fight, and takes over
//! when the other goes; an observer (dry run) fights nobody.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::Operator;
use common::env::{Env, WAIT};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

fn hpa(name: &str, target: &str, metrics: serde_json::Value) -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": target },
            "minReplicas": 1, "maxReplicas": 8,
            "metrics": metrics
        }
    }))
    .unwrap()
}

async fn wait_reason(env: &Env, scaler: &str, reason: &str, fragment: &str) -> String {
    common::eventually(
        &format!("{scaler} Ready with reason {reason} saying {fragment:?}"),
        WAIT,
        || async {
            let (_, got, message) = env.condition(scaler, "Ready").await?;
            (got == reason && message.contains(fragment)).then_some(message)
        },
    )
    .await
}

#[tokio::test]
async fn an_hpa_or_an_older_scaler_on_the_target_stops_every_write_until_it_goes() {
    let env = Env::new("conflict-hpa").await;
    env.deployment("vllm", 2).await;
    env.set("kv", 3.0).await;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(env.client.clone(), &env.ns);
    hpas.create(
        &PostParams::default(),
        &hpa(
            "vllm",
            "vllm",
            json!([{ "type": "Resource", "resource": { "name": "cpu",
                     "target": { "type": "Utilization", "averageUtilization": 80 } } }]),
        ),
    )
    .await
    .unwrap();
    let _operator = Operator::start(&env.client, &env.ns);
    let spec = json!({
        "minReplicas": 1, "maxReplicas": 6,
        "metrics": [{ "name": "kv", "query": env.query("kv"), "target": "1" }]
    });
    env.scaler("first", "vllm", spec.clone()).await;

    let message = wait_reason(
        &env,
        "first",
        "ConflictingAutoscaler",
        "HorizontalPodAutoscaler vllm",
    )
    .await;
    assert!(
        message.contains("also scales Deployment/vllm") && message.contains("dry-run"),
        "{message}"
    );
    // The signal asks for 6: nothing is written while the HPA is there.
    env.stays("vllm", 2, Duration::from_secs(4)).await;
    env.wait_event(
        "first",
        "ConflictingAutoscaler",
        "HorizontalPodAutoscaler vllm",
    )
    .await;
    let told = env.assert_told_once("first", "ConflictingAutoscaler").await;
    assert_eq!(told.type_.as_deref(), Some("Warning"), "{told:?}");

    // The HPA goes: the scaler takes over.
    hpas.delete("vllm", &DeleteParams::default()).await.unwrap();
    env.wait_ready("vllm", 6).await;
    let (ready, reason, _) = env.condition("first", "Ready").await.unwrap();
    assert_eq!((ready.as_str(), reason.as_str()), ("True", "Synced"));

    // A second scaler on the same target, whose bounds alone would take the fleet to 4: the
    // younger one stands aside and writes nothing, the older keeps it.
    let mut second = spec;
    second["maxReplicas"] = json!(4);
    env.scaler("second", "vllm", second).await;
    wait_reason(&env, "second", "ConflictingAutoscaler", "LLMScaler first").await;
    env.stays("vllm", 6, Duration::from_secs(4)).await;
    let told = env
        .assert_told_once("second", "ConflictingAutoscaler")
        .await;
    assert_eq!(told.type_.as_deref(), Some("Warning"), "{told:?}");
    let (ready, _, _) = env.condition("first", "Ready").await.unwrap();
    assert_eq!(ready, "True", "the first scaler is not disturbed");
    env.done().await;
}

#[tokio::test]
async fn a_scaled_object_is_a_conflict_and_an_advisory_hpa_of_an_observer_is_not() {
    let client = common::client().await;
    common::install_scaledobject_crd(&client).await;
    let env = Env::new("conflict-keda").await;
    env.deployment("vllm", 2).await;
    env.deployment("advised", 2).await;
    env.set("kv", 3.0).await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
        "scaledobjects",
    );
    let scaled_objects: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.ns, &resource);
    let so: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": { "name": "vllm-so" },
        // KEDA's default target kind is an apps/v1 Deployment.
        "spec": { "scaleTargetRef": { "name": "vllm" } }
    }))
    .unwrap();
    scaled_objects
        .create(&PostParams::default(), &so)
        .await
        .unwrap();
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "keda",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 6,
            "metrics": [{ "name": "kv", "query": env.query("kv"), "target": "1" }]
        }),
    )
    .await;
    wait_reason(
        &env,
        "keda",
        "ConflictingAutoscaler",
        "ScaledObject vllm-so",
    )
    .await;
    env.stays("vllm", 2, Duration::from_secs(3)).await;
    // Told once as a warning, though every sync in those 3 s found the ScaledObject again.
    let told = env.assert_told_once("keda", "ConflictingAutoscaler").await;
    assert_eq!(told.type_.as_deref(), Some("Warning"), "{told:?}");

    // The advisory mode: an HPA follows an observer's desired-replicas; the observer writes
    // nothing, so there is nothing to fight over.
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(env.client.clone(), &env.ns);
    hpas.create(
        &PostParams::default(),
        &hpa(
            "advised",
            "advised",
            json!([{ "type": "External", "external": {
                "metric": { "name": "desired-replicas",
                            "selector": { "matchLabels": { "scaler": "observer" } } },
                "target": { "type": "Value", "value": "1" } } }]),
        ),
    )
    .await
    .unwrap();
    env.scaler_annotated(
        "observer",
        "advised",
        json!({ "autoscaling.modelsphere.dev/dry-run": "true" }),
        json!({
            "minReplicas": 1, "maxReplicas": 6,
            "metrics": [{ "name": "kv", "query": env.query("kv"), "target": "1" }]
        }),
    )
    .await;
    env.wait_event(
        "observer",
        "WouldScaleUp",
        "would scale Deployment/advised from 2 to 6",
    )
    .await;
    let (ready, reason, _) = env.condition("observer", "Ready").await.unwrap();
    assert_eq!((ready.as_str(), reason.as_str()), ("True", "Synced"));
    env.done().await;
}
