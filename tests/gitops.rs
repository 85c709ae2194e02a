//! What GitOps tools and Helm upgrades of a workload do to a fleet the operator scales, on the
//! real control plane with the real helm and kubectl (docs/gitops.md says the same in words):
//!
//! - a workload chart that renders `replicas:` resets the fleet at every `helm upgrade`, until the
//!   operator's next sync writes its count back (warm pods lost meanwhile);
//! - the upgrade that stops rendering it resets it once more (Helm deletes what the old manifest
//!   set), and after that upgrades leave the count alone;
//! - a server-side apply (Argo CD with `ServerSideApply=true`, Flux) of a manifest without
//!   `spec.replicas` leaves the count alone; one that still sets it is refused with a conflict
//!   naming the operator, unless forced.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::Operator;
use common::env::Env;
use serde_json::json;

/// A workload chart as many are written: `replicas` rendered unless `autoscaling.enabled`.
fn workload_chart(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: workload\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("values.yaml"),
        "replicaCount: 1\nautoscaling:\n  enabled: false\nrevision: \"1\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/deployment.yaml"),
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm
  annotations: { revision: {{ .Values.revision | quote }} }
spec:
  {{- if not .Values.autoscaling.enabled }}
  replicas: {{ .Values.replicaCount }}
  {{- end }}
  selector: { matchLabels: { app: vllm } }
  template:
    metadata: { labels: { app: vllm } }
    spec: { containers: [{ name: vllm, image: "registry.k8s.io/pause:3.10" }] }
"#,
    )
    .unwrap();
}

fn ok(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn helm_upgrades_and_server_side_applies_meet_the_operators_replicas_as_documented() {
    let env = Env::new("gitops").await;
    let chart = std::env::temp_dir().join(format!("gitops-chart-{}", env.ns));
    workload_chart(&chart);
    let chart = chart.to_str().unwrap().to_owned();
    let kubeconfig = common::kubeconfig_path();
    let helm = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--namespace", &env.ns]);
        common::helm(&all)
    };
    ok(helm(&["install", "w", &chart]), "helm install");
    env.wait_ready("vllm", 1).await;

    // The operator scales it to 3: ceil(1 × 2.0 / 0.8).
    env.set("kv", 2.0).await;
    let operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "vllm",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "name": "kv-cache", "query": env.query("kv"), "target": "0.8" }]
        }),
    )
    .await;
    env.wait_ready("vllm", 3).await;

    // With the operator stopped, each step shows what the tool alone does to spec.replicas.
    drop(operator);
    // A `helm upgrade` that changes the pods' annotation, rendering `replicas` or not.
    let upgrade = |revision: u32, autoscaled: bool| {
        let revision = format!("revision={revision}");
        let autoscaled = format!("autoscaling.enabled={autoscaled}");
        ok(
            helm(&[
                "upgrade",
                "w",
                &chart,
                "--set",
                &revision,
                "--set",
                &autoscaled,
            ]),
            &format!("helm upgrade {revision} {autoscaled}"),
        );
    };
    // 1. An upgrade of a chart that renders `replicas: 1` resets the fleet to 1 ...
    upgrade(2, false);
    assert_eq!(env.spec_replicas("vllm").await, 1, "the upgrade resets it");
    // ... until the operator's next sync writes its count back.
    let operator = Operator::start(&env.client, &env.ns);
    env.wait_ready("vllm", 3).await;
    drop(operator);

    // 2. The upgrade that stops rendering it: Helm deletes the field the old manifest set, so the
    //    Deployment defaults to 1 once more.
    upgrade(3, true);
    assert_eq!(
        env.spec_replicas("vllm").await,
        1,
        "dropping it resets once"
    );
    let operator = Operator::start(&env.client, &env.ns);
    env.wait_ready("vllm", 3).await;
    drop(operator);
    // 3. After that, upgrades leave the operator's count alone.
    upgrade(4, true);
    assert_eq!(env.spec_replicas("vllm").await, 3, "later upgrades keep it");

    // 4. Server-side apply, as Argo CD (ServerSideApply=true) and Flux apply: without
    //    spec.replicas the count stays; with it, a conflict names the operator's field manager.
    let manifest = |replicas: Option<i32>| {
        let mut spec = json!({
            "selector": { "matchLabels": { "app": "vllm" } },
            "template": {
                "metadata": { "labels": { "app": "vllm" } },
                "spec": { "containers": [{ "name": "vllm", "image": "registry.k8s.io/pause:3.10" }] }
            }
        });
        if let Some(r) = replicas {
            spec["replicas"] = json!(r);
        }
        let file = std::env::temp_dir().join(format!("gitops-{}-{replicas:?}.json", env.ns));
        let doc = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "vllm", "namespace": env.ns, "annotations": { "argocd.argoproj.io/tracking-id": "w:apps/Deployment:ns/vllm" } },
            "spec": spec
        });
        std::fs::write(&file, doc.to_string()).unwrap();
        file
    };
    let without = manifest(None);
    ok(
        common::kubectl(&[
            "apply",
            "--server-side",
            "--field-manager=argocd-controller",
            "-f",
            without.to_str().unwrap(),
        ]),
        "server-side apply without replicas",
    );
    assert_eq!(
        env.spec_replicas("vllm").await,
        3,
        "an apply without it keeps it"
    );
    let with = manifest(Some(1));
    let refused = common::kubectl(&[
        "apply",
        "--server-side",
        "--field-manager=argocd-controller",
        "-f",
        with.to_str().unwrap(),
    ]);
    assert!(!refused.status.success(), "an apply that sets it conflicts");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("conflict")
            && said.contains(".spec.replicas")
            && said.contains("llmscaleoperator"),
        "{said}"
    );
    assert_eq!(env.spec_replicas("vllm").await, 3, "and changes nothing");

    let _ = std::fs::remove_dir_all(&chart);
    let _ = std::fs::remove_file(&without);
    let _ = std::fs::remove_file(&with);
    ok(helm(&["uninstall", "w"]), "helm uninstall");
    env.done().await;
}
