//! The full control-plane profile really runs workloads: a Deployment gets a ReplicaSet and Ready
//! pods (kwok), and scaling it down deletes pods through the real ReplicaSet controller.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn deployment_gets_ready_pods_and_scales_down_through_the_replicaset_controller() {
    assert_eq!(
        common::cluster_profile(),
        "full",
        "this test needs the full control plane: CLUSTER_PROFILE=full make cluster-up (make test does)"
    );
    let client = common::client().await;
    let ns = common::namespace(&client, "full-profile").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);

    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "vllm", "labels": { "app": "vllm" } },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "app": "vllm" } },
            "template": {
                "metadata": { "labels": { "app": "vllm" } },
                "spec": { "containers": [{ "name": "server", "image": "registry.k8s.io/pause:3.10" }] }
            }
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    common::eventually("3 ready replicas", Duration::from_secs(90), || async {
        let d = deployments.get("vllm").await.ok()?;
        (d.status?.ready_replicas? == 3).then_some(())
    })
    .await;
    let before: Vec<String> = pods
        .list(&ListParams::default().labels("app=vllm"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(before.len(), 3, "pods: {before:?}");
    let rs = replicasets
        .list(&ListParams::default().labels("app=vllm"))
        .await
        .unwrap();
    assert_eq!(rs.items.len(), 1, "one ReplicaSet owns the pods");

    deployments
        .patch(
            "vllm",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 1 } })),
        )
        .await
        .unwrap();

    let remaining = common::eventually(
        "the ReplicaSet controller to delete 2 pods",
        Duration::from_secs(90),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=vllm"))
                .await
                .ok()?;
            (list.items.len() == 1).then_some(list.items)
        },
    )
    .await;
    let survivor = remaining[0].metadata.name.clone().unwrap();
    assert!(
        before.contains(&survivor),
        "the survivor {survivor} is one of the original pods"
    );
    let rs = replicasets
        .list(&ListParams::default().labels("app=vllm"))
        .await
        .unwrap();
    assert_eq!(
        rs.items[0].spec.as_ref().unwrap().replicas,
        Some(1),
        "the ReplicaSet was scaled to 1"
    );

    common::delete_namespace(&client, &ns).await;
}
