//! The kubectl view, as the real apiserver renders it: `kubectl get llms` (short name, category)
//! shows what `kubectl get hpa` shows — the workload, Ready, the first metric's value against
//! its target, the bounds, desired and current replicas — and `-o wide` adds the kind, the
//! metric's name, the ScalingActive/ScalingLimited reasons and the last scale.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::Operator;
use common::env::{Env, WAIT};
use serde_json::{Value, json};

/// The apiserver's Table rendering of the scalers in `ns` (what kubectl prints).
async fn table(env: &Env) -> Value {
    let request = http::Request::get(format!(
        "/apis/autoscaling.modelsphere.dev/v1alpha1/namespaces/{}/llmscalers",
        env.ns
    ))
    .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .unwrap();
    let text = env.client.request_text(request).await.unwrap();
    serde_json::from_str(&text).unwrap()
}

fn kubectl(args: &[&str]) -> String {
    let out = common::kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn kubectl_get_llms_shows_what_kubectl_get_hpa_shows() {
    let env = Env::new("kubectl-view").await;
    env.deployment("vllm", 1).await;
    env.set("kv", 2.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "llama",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "name": "kv-cache", "query": env.query("kv"), "target": "0.8" }]
        }),
    )
    .await;
    // ceil(1 × 2.0 / 0.8) = 3: wait until the status says so.
    env.wait_ready("vllm", 3).await;
    common::eventually("status 3/3", WAIT, || async {
        let s = env.scalers().get("llama").await.ok()?.status?;
        (s.current_replicas == 3 && s.desired_replicas == 3).then_some(())
    })
    .await;

    let table = table(&env).await;
    let columns: Vec<(String, i64)> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let names = |priority: i64| -> Vec<&str> {
        columns
            .iter()
            .filter(|(_, p)| *p == priority)
            .map(|(n, _)| n.as_str())
            .collect()
    };
    assert_eq!(
        names(0),
        [
            "Name",
            "Reference",
            "Ready",
            "Value",
            "Target",
            "MinReplicas",
            "MaxReplicas",
            "Desired",
            "Current",
            "Age"
        ]
    );
    assert_eq!(
        names(1),
        [
            "Kind",
            "Metric",
            "Active",
            "Limited",
            "LastScale",
            "TTFT",
            "Objective",
            "Attained",
            "PerPod"
        ]
    );
    let cells = &table["rows"][0]["cells"];
    let cell = |name: &str| {
        let i = columns.iter().position(|(n, _)| n == name).unwrap();
        cells[i].clone()
    };
    assert_eq!(cell("Name"), "llama");
    assert_eq!(cell("Reference"), "vllm");
    assert_eq!(cell("Ready"), "True");
    assert_eq!(cell("Value"), "2");
    assert_eq!(cell("Target"), "0.8");
    assert_eq!(
        (cell("MinReplicas"), cell("MaxReplicas")),
        (json!(1), json!(3))
    );
    assert_eq!((cell("Desired"), cell("Current")), (json!(3), json!(3)));
    assert_eq!(cell("Kind"), "Deployment");
    assert_eq!(cell("Metric"), "kv-cache");
    assert_eq!(cell("Active"), "ValidMetric");
    // 3 is the maximum: the HPA's TooManyReplicas would say the same.
    assert!(
        ["TooManyReplicas", "DesiredWithinRange"].contains(&cell("Limited").as_str().unwrap()),
        "{}",
        cell("Limited")
    );
    assert!(cell("LastScale").as_str().is_some_and(|t| !t.is_empty()));

    // The same through kubectl, by short name and by category.
    let plain = kubectl(&["get", "llms", "-n", &env.ns]);
    let header: Vec<&str> = plain.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "REFERENCE",
            "READY",
            "VALUE",
            "TARGET",
            "MINREPLICAS",
            "MAXREPLICAS",
            "DESIRED",
            "CURRENT",
            "AGE"
        ]
    );
    assert!(plain.contains("llama"), "{plain}");
    let wide = kubectl(&["get", "llms", "-n", &env.ns, "-o", "wide"]);
    assert!(
        wide.lines().next().unwrap().contains("LASTSCALE") && wide.contains("ValidMetric"),
        "{wide}"
    );
    let category = kubectl(&["get", "autoscaling", "-n", &env.ns]);
    assert!(category.contains("llama"), "{category}");
    env.done().await;
}

/// `kubectl explain` (the real kubectl, on the OpenAPI the apiserver publishes for the CRD)
/// documents scale-to-zero, the fallback and the access to a secured server down to their
/// leaves, and the status they add.
#[tokio::test]
async fn kubectl_explain_documents_scale_to_zero_fallback_and_server_access() {
    let client = common::client().await;
    common::ensure_crd(&client).await;
    let explain = |path: &str| {
        let out = common::kubectl(&["explain", path]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // The document is published a moment after the CRD is established.
    common::eventually(
        "kubectl explain llmscalers.spec.scaleToZero",
        std::time::Duration::from_secs(60),
        || async {
            explain("llmscalers.spec.scaleToZero").filter(|t| t.contains("activationQuery"))
        },
    )
    .await;
    for (path, says) in [
        ("llmscalers.spec.scaleToZero", "cannot wake"),
        ("llmscalers.spec.scaleToZero.activationQuery", "router"),
        ("llmscalers.spec.scaleToZero.activationThreshold", "wakes"),
        ("llmscalers.spec.scaleToZero.idleSeconds", "Default 300"),
        ("llmscalers.spec.scaleToZero.minAwakeSeconds", "cold start"),
        (
            "llmscalers.spec.fallback.failureThreshold",
            "Consecutive syncs",
        ),
        ("llmscalers.spec.fallback.replicas", "maxReplicas"),
        (
            "llmscalers.spec.serverTLS.ca.secretName",
            "Name of the Secret",
        ),
        ("llmscalers.spec.serverTLS.ca.key", "ca.crt"),
        ("llmscalers.spec.serverTLS.clientCertificate", "tls.key"),
        ("llmscalers.spec.serverAuth.basic", "username and password"),
        ("llmscalers.spec.serverAuth.bearer.key", "token"),
        ("llmscalers.status.scaleToZero.phase", "Waking"),
        ("llmscalers.status.syncsWithoutSignal", "failureThreshold"),
    ] {
        let text = explain(path).unwrap_or_else(|| panic!("kubectl explain {path} failed"));
        // kubectl wraps descriptions at its own width.
        let flowing = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flowing.contains(says), "kubectl explain {path}: {text}");
    }
}
