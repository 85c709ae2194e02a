//! The kubectl view, as the real apiserver renders it: `kubectl get llms` (short name, category)
//! shows what `kubectl get hpa` shows — the workload, Ready, the first metric's value against
//! its target, the bounds, the desired, written and Ready replicas — and `-o wide` adds the kind, the
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
            "Replicas",
            "ReadyReplicas",
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
    assert_eq!(
        (cell("Desired"), cell("Replicas"), cell("ReadyReplicas")),
        (json!(3), json!(3), json!(3))
    );
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
            "REPLICAS",
            "READYREPLICAS",
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

/// During a scale-up whose pods load slowly, the view reads like the workload's: the count
/// written runs ahead of the Ready pods (DESIRED 3, REPLICAS 3, READYREPLICAS 1), not like a stuck
/// autoscaler that wants 3 and has 1.
#[tokio::test]
async fn during_a_scale_up_the_written_replicas_run_ahead_of_the_ready_ones() {
    const READY_AFTER: u64 = 8;
    let env = Env::new("kubectl-scale-up").await;
    env.create_slow_deployment("slow", 1, std::time::Duration::from_secs(READY_AFTER))
        .await;
    env.wait_ready("slow", 1).await;
    env.set("inflight", 8.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "slow",
        "slow",
        json!({
            "minReplicas": 1, "maxReplicas": 5,
            "metrics": [{ "name": "in-flight", "query": env.query("inflight"), "target": "8",
                          "targetType": "AverageValue" }]
        }),
    )
    .await;
    common::eventually("status at 1 written, 1 Ready", WAIT, || async {
        let s = env.scalers().get("slow").await.ok()?.status?;
        (s.replicas == Some(1) && s.current_replicas == 1).then_some(())
    })
    .await;
    // 24 in flight at 8 a pod: 3, and the two new pods take READY_AFTER seconds to load.
    env.set("inflight", 24.0).await;
    let cells = |table: &Value| -> Option<(i64, i64, i64)> {
        let columns = table["columnDefinitions"].as_array()?;
        let at = |name: &str| columns.iter().position(|c| c["name"] == name);
        let row = &table["rows"][0]["cells"];
        Some((
            row[at("Desired")?].as_i64()?,
            row[at("Replicas")?].as_i64()?,
            row[at("ReadyReplicas")?].as_i64()?,
        ))
    };
    common::eventually("the view during the scale-up", WAIT, || async {
        let seen = cells(&table(&env).await)?;
        (seen == (3, 3, 1)).then_some(())
    })
    .await;
    let plain = kubectl(&["get", "llms", "-n", &env.ns]);
    let row: Vec<&str> = plain.lines().nth(1).unwrap().split_whitespace().collect();
    let header: Vec<&str> = plain.lines().next().unwrap().split_whitespace().collect();
    let at = |name: &str| header.iter().position(|h| *h == name).unwrap();
    // Read on the same sync or the next: Ready may have caught up by now, never passed 3.
    assert_eq!(
        (row[at("DESIRED")], row[at("REPLICAS")]),
        ("3", "3"),
        "{plain}"
    );
    assert!(
        ["1", "2", "3"].contains(&row[at("READYREPLICAS")]),
        "{plain}"
    );
    common::eventually("the view once the pods are Ready", WAIT, || async {
        let seen = cells(&table(&env).await)?;
        (seen == (3, 3, 3)).then_some(())
    })
    .await;
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
        ("llmscalers.spec.recurrence", "one start-up delay ahead"),
        ("llmscalers.spec.recurrence.periodSeconds", "Default 86400"),
        ("llmscalers.spec.recurrence.periods", "Default 1"),
        ("llmscalers.status.recurrence.current", "mean/syncs"),
    ] {
        let text = explain(path).unwrap_or_else(|| panic!("kubectl explain {path} failed"));
        // kubectl wraps descriptions at its own width.
        let flowing = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flowing.contains(says), "kubectl explain {path}: {text}");
    }
}
