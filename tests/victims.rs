//! Cache-aware scale-down end to end: the operator marks the coldest pods, and the real
//! ReplicaSet controller (kube-controller-manager, full profile) deletes exactly those.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::Operator;
use common::env::{Env, WAIT};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const COST: &str = "controller.kubernetes.io/pod-deletion-cost";

async fn pods(env: &Env, app: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    let mut pods = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items;
    pods.sort_by_key(|p| p.name_any());
    pods
}

async fn pod_names(env: &Env, app: &str) -> BTreeSet<String> {
    pods(env, app)
        .await
        .into_iter()
        .map(|p| p.name_any())
        .collect()
}

/// Waits until exactly `want` pods remain (the ReplicaSet controller has deleted the rest).
async fn wait_pods(env: &Env, app: &str, want: &BTreeSet<String>) {
    common::eventually(&format!("pods {want:?}"), WAIT, || async {
        (pod_names(env, app).await == *want).then_some(())
    })
    .await;
}

/// Waits one full sync of the scaler after now (its ScalingActive message is refreshed).
async fn assert_no_marks(env: &Env, app: &str) {
    common::eventually("no pod to carry a deletion-cost mark", WAIT, || async {
        pods(env, app)
            .await
            .iter()
            .all(|p| !p.annotations().contains_key(COST))
            .then_some(())
    })
    .await;
}

/// On the first pod of `app`, a deletion-cost mark exactly as the operator writes it (its field
/// manager, by server-side apply); on the second, someone else's cost of 7, which is not ours to
/// remove. Returns the pod API and the pod names.
async fn plant_marks(env: &Env, app: &str) -> (Api<Pod>, Vec<String>) {
    let names: Vec<String> = pod_names(env, app).await.into_iter().collect();
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    let ours = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": names[0], "annotations": { COST: "-1" } } });
    api.patch(
        &names[0],
        &PatchParams::apply("llmscaleoperator-victims"),
        &Patch::Apply(ours),
    )
    .await
    .unwrap();
    let theirs = json!({ "metadata": { "annotations": { COST: "7" } } });
    api.patch(&names[1], &PatchParams::default(), &Patch::Merge(theirs))
        .await
        .unwrap();
    (api, names)
}

/// Grows the Deployment from the pods it has to `replicas`, making sure the new pods are
/// strictly newer (creationTimestamp has one-second resolution). Returns the old pods' names.
async fn grow_with_newer_pods(env: &Env, app: &str, replicas: i32) -> BTreeSet<String> {
    let old = pod_names(env, app).await;
    let newest_old = pods(env, app)
        .await
        .iter()
        .filter_map(|p| p.creation_timestamp())
        .max()
        .unwrap();
    common::eventually("the clock to pass the old pods' second", WAIT, || async {
        (k8s_openapi::jiff::Timestamp::now().as_second() > newest_old.0.as_second()).then_some(())
    })
    .await;
    env.deployments()
        .patch(
            app,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await
        .unwrap();
    env.wait_ready(app, replicas).await;
    old
}

#[tokio::test]
async fn the_coldest_caches_are_the_pods_deleted() {
    let env = Env::new("victims-measured").await;
    env.deployment("vllm", 4).await;
    let names: Vec<String> = pod_names(&env, "vllm").await.into_iter().collect();
    // Per-pod KV-cache use, as vLLM pods export it.
    let usage = [0.9, 0.2, 0.7, 0.5];
    for (pod, value) in names.iter().zip(usage) {
        env.exporter().set(
            &format!(
                "kv_usage{{test=\"{}\",namespace=\"{}\",pod=\"{pod}\"}}",
                env.ns, env.ns
            ),
            value,
        );
    }
    env.prometheus()
        .wait_for_value(&format!("count(kv_usage{{test=\"{}\"}})", env.ns), 4.0)
        .await;
    env.set("load", 1.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "cache-aware",
        "vllm",
        json!({
            "minReplicas": 2, "maxReplicas": 4,
            "metrics": [{ "name": "load", "query": env.query("load"), "target": "1" }],
            "scaleDown": { "deletionCostQuery": format!("kv_usage{{test=\"{}\"}} * 100", env.ns) }
        }),
    )
    .await;
    common::eventually("a steady sync at 4", WAIT, || async {
        let (_, _, message) = env.condition("cache-aware", "ScalingActive").await?;
        message.contains("recommends 4").then_some(())
    })
    .await;
    assert_no_marks(&env, "vllm").await;

    // The load halves: 4 -> 2, and the 0.2 and 0.5 pods are the ones to go.
    env.set("load", 0.5).await;
    let keep: BTreeSet<String> = [names[0].clone(), names[2].clone()].into();
    wait_pods(&env, "vllm", &keep).await;
    env.wait_event("cache-aware", "VictimsSelected", &names[1])
        .await;
    assert_no_marks(&env, "vllm").await;
    env.done().await;
}

/// A data-parallel pod exports one series per engine: the deletion-cost query then has two
/// series for one pod. Neither is picked (the first had 46.7, the other 57.0): the warning names
/// the pod and the label that differs, once across two scale-downs, and the newest pods go.
#[tokio::test]
async fn several_series_of_one_pod_are_named_once_and_never_picked_from() {
    let env = Env::new("victims-engines").await;
    env.deployment("vllm", 2).await;
    let old = grow_with_newer_pods(&env, "vllm", 4).await;
    let names: Vec<String> = pod_names(&env, "vllm").await.into_iter().collect();
    for (i, pod) in names.iter().enumerate() {
        for (engine, value) in [("0", 46.7 - i as f64), ("1", 57.0 + i as f64)] {
            env.exporter().set(
                &format!(
                    "kv_usage{{test=\"{}\",namespace=\"{}\",pod=\"{pod}\",engine=\"{engine}\"}}",
                    env.ns, env.ns
                ),
                value,
            );
        }
    }
    env.prometheus()
        .wait_for_value(&format!("count(kv_usage{{test=\"{}\"}})", env.ns), 8.0)
        .await;
    env.set("load", 1.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "engines",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 4,
            "metrics": [{ "name": "load", "query": env.query("load"), "target": "1" }],
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "deletionCostQuery": format!("kv_usage{{test=\"{}\"}}", env.ns)
            }
        }),
    )
    .await;
    common::eventually("a steady sync at 4", WAIT, || async {
        let (_, _, message) = env.condition("engines", "ScalingActive").await?;
        message.contains("recommends 4").then_some(())
    })
    .await;

    // 4 -> 2: the two newer pods go, as without a query.
    env.set("load", 0.5).await;
    wait_pods(&env, "vllm", &old).await;
    let warning = env
        .wait_event("engines", "DeletionCostQueryFailed", "differ in engine")
        .await;
    assert!(
        warning.contains(&format!(
            "pod {} has 2 series, which differ in engine (\"0\", \"1\")",
            names[0]
        )),
        "{warning}"
    );
    env.wait_event("engines", "VictimsSelected", "newest first")
        .await;

    // 2 -> 1: the query is as broken as before, so nothing new is told.
    env.set("load", 0.25).await;
    common::eventually("one pod left", WAIT, || async {
        (pod_names(&env, "vllm").await.len() == 1).then_some(())
    })
    .await;
    common::eventually("the second scale-down's victims", WAIT, || async {
        (env.events("engines", "VictimsSelected").await.len() == 2).then_some(())
    })
    .await;
    env.assert_told_once("engines", "DeletionCostQueryFailed")
        .await;
    env.done().await;
}

#[tokio::test]
async fn without_a_query_the_newest_pods_are_deleted() {
    let env = Env::new("victims-newest").await;
    env.deployment("vllm", 2).await;
    let old = grow_with_newer_pods(&env, "vllm", 4).await;

    env.set("load", 0.5).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "newest",
        "vllm",
        json!({
            "minReplicas": 2, "maxReplicas": 4,
            "metrics": [{ "query": env.query("load"), "target": "1" }]
        }),
    )
    .await;
    let new: Vec<String> = pod_names(&env, "vllm")
        .await
        .difference(&old)
        .cloned()
        .collect();
    wait_pods(&env, "vllm", &old).await;
    let note = env
        .wait_event("newest", "VictimsSelected", "newest first")
        .await;
    assert!(
        new.iter().all(|pod| note.contains(pod.as_str())),
        "the new pods were the ones marked: {note}"
    );
    assert_no_marks(&env, "vllm").await;
    env.done().await;
}

#[tokio::test]
async fn a_mark_left_by_a_scale_down_that_did_not_happen_is_removed() {
    let env = Env::new("victims-cleanup").await;
    env.deployment("vllm", 3).await;
    // A mark left over from a scale-down that was deferred, and someone else's cost.
    let (api, names) = plant_marks(&env, "vllm").await;

    // A steady metric: nothing to scale down, so the old mark must go on the next sync.
    env.set("load", 1.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "tidy",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "query": env.query("load"), "target": "1" }]
        }),
    )
    .await;
    common::eventually("our old mark to be removed", WAIT, || async {
        let pod = api.get(&names[0]).await.ok()?;
        (!pod.annotations().contains_key(COST)).then_some(())
    })
    .await;
    env.stays("vllm", 3, Duration::from_secs(2)).await;
    let other = api.get(&names[1]).await.unwrap();
    assert_eq!(
        other.annotations().get(COST).map(String::as_str),
        Some("7"),
        "another writer's cost stays"
    );
    env.done().await;
}

#[tokio::test]
async fn behavior_none_marks_nothing_and_says_so_once() {
    let env = Env::new("victims-none").await;
    env.deployment("vllm", 3).await;
    env.set("load", 0.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "plain",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "query": env.query("load"), "target": "1" }],
            "scaleDown": { "behavior": "None", "maxStepReplicas": 1 }
        }),
    )
    .await;
    env.wait_ready("vllm", 1).await;
    env.wait_event("plain", "NoVictimSelection", "scaleDown.behavior is None")
        .await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), &env.ns);
    let told: Vec<_> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("NoVictimSelection"))
        .collect();
    assert_eq!(told.len(), 1);
    assert!(
        told[0].series.is_none(),
        "said once over two scale-downs, not repeated: {:?}",
        told[0].series
    );
    assert!(env.events("plain", "VictimsSelected").await.is_empty());
    env.done().await;
}

#[tokio::test]
async fn a_mark_that_cannot_be_written_warns_and_the_scale_down_goes_ahead() {
    let env = Env::new("victims-conflict").await;
    env.deployment("vllm", 1).await;
    let first = grow_with_newer_pods(&env, "vllm", 2).await;
    let newest = pod_names(&env, "vllm")
        .await
        .difference(&first)
        .next()
        .cloned()
        .unwrap();
    // Someone else owns the newest pod's deletion cost: our apply (without force) conflicts.
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    let theirs = json!({ "metadata": { "annotations": { COST: "100" } } });
    api.patch(&newest, &PatchParams::default(), &Patch::Merge(theirs))
        .await
        .unwrap();

    env.set("load", 0.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "conflicted",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 2,
            "metrics": [{ "query": env.query("load"), "target": "1" }]
        }),
    )
    .await;
    env.wait_event(
        "conflicted",
        "DeletionCostFailed",
        &format!("cannot mark pod {newest}"),
    )
    .await;
    env.wait_ready("vllm", 1).await;
    env.done().await;
}

#[tokio::test]
async fn deleting_a_scaler_removes_its_marks_and_only_its_marks() {
    let env = Env::new("victims-deleted").await;
    env.deployment("vllm", 3).await;
    // A dry-run scaler syncs without touching pods, so the mark of a scale-down that never
    // happened is still there when the scaler is deleted.
    let (api, names) = plant_marks(&env, "vllm").await;
    env.set("load", 1.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler_annotated(
        "gone",
        "vllm",
        json!({ "autoscaling.modelsphere.dev/dry-run": "true" }),
        json!({
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "query": env.query("load"), "target": "1" }]
        }),
    )
    .await;
    common::eventually("a dry-run sync", WAIT, || async {
        let (status, _, _) = env.condition("gone", "Ready").await?;
        (status == "True").then_some(())
    })
    .await;
    env.stays("vllm", 3, Duration::from_secs(2)).await;
    assert!(
        api.get(&names[0])
            .await
            .unwrap()
            .annotations()
            .contains_key(COST),
        "a dry run leaves the mark alone"
    );

    env.scalers()
        .delete("gone", &Default::default())
        .await
        .unwrap();
    common::eventually("the deleted scaler's mark to be removed", WAIT, || async {
        let pod = api.get(&names[0]).await.ok()?;
        (!pod.annotations().contains_key(COST)).then_some(())
    })
    .await;
    let other = api.get(&names[1]).await.unwrap();
    assert_eq!(
        other.annotations().get(COST).map(String::as_str),
        Some("7"),
        "another writer's cost stays"
    );
    env.done().await;
}
