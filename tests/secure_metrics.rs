//! `--metrics-secure-address`: the operator's /metrics on its own HTTPS port, for callers the real
//! API server vouches for (TokenReview) and lets `get /metrics` (SubjectAccessReview), as
//! kube-rbac-proxy does; the probes stay open on the health address, which no longer serves the
//! metrics. A real Prometheus scrapes it the way the chart's ServiceMonitor does.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use common::prometheus::Prometheus;

const BIN: &str = env!("CARGO_BIN_EXE_llmscaleoperator");

/// Prometheus's scrape job for the secure port with `token`, as the chart's ServiceMonitor
/// configures it (https, the serving certificate not verified, a bearer token).
fn job(name: &str, port: u16, token: &str) -> String {
    format!(
        "  - job_name: {name}\n    scheme: https\n    tls_config:\n      insecure_skip_verify: true\n    authorization:\n      credentials: '{token}'\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
}

#[tokio::test]
async fn metrics_on_the_authenticated_port_need_an_accepted_token_and_the_right() {
    let client = common::client().await;
    common::ensure_crd(&client).await;
    let ns = common::namespace(&client, "secure-metrics").await;

    // The reader's right, as the chart's <release>-metrics-reader ClusterRole grants it.
    let role_name = format!("{ns}-metrics-reader");
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": { "name": role_name },
        "rules": [{ "nonResourceURLs": ["/metrics"], "verbs": ["get"] }]
    }))
    .unwrap();
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles.create(&PostParams::default(), &role).await.unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": role_name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name },
        "subjects": [{ "kind": "ServiceAccount", "name": "prometheus", "namespace": ns }]
    }))
    .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let reader = common::token_for(&client, &ns, "prometheus").await;
    let nobody = common::token_for(&client, &ns, "nobody").await;

    let health = common::free_port();
    let secure = common::free_port();
    let operator = Command::new(BIN)
        .args([
            "run",
            "--kubeconfig",
            common::kubeconfig_path().to_str().unwrap(),
            "--namespace",
            &ns,
            "--health-address",
            &format!("127.0.0.1:{health}"),
            "--metrics-secure-address",
            &format!("127.0.0.1:{secure}"),
            "--disable-extmetrics",
        ])
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _operator = common::Spawned::new(operator);

    // The probes stay open; the metrics are gone from the health address.
    let plain = reqwest::Client::new();
    common::eventually("/readyz to answer 200", Duration::from_secs(30), || async {
        let r = plain
            .get(format!("http://127.0.0.1:{health}/readyz"))
            .send()
            .await
            .ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    let healthz = plain
        .get(format!("http://127.0.0.1:{health}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(healthz.status(), 200);
    let open = plain
        .get(format!("http://127.0.0.1:{health}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(open.status(), 404, "the metrics moved to the secure port");

    let https = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{secure}/metrics");
    let get = |token: Option<&str>| {
        let mut request = https.get(&url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let (status, body) = get(None).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("bearer token is required"), "{body}");
    let (status, body) = get(Some("not-a-token")).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("did not accept"), "{body}");
    let (status, body) = get(Some(&nobody)).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:nobody")) && body.contains("/metrics"),
        "{body}"
    );
    assert!(!body.contains(&nobody), "a token never comes back: {body}");
    let (status, body) = get(Some(&reader)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("llmscaleoperator_build_info{"), "{body}");

    // A real Prometheus, configured like the chart's ServiceMonitor: the reader's scrapes
    // succeed, nobody's fail.
    let prometheus = Prometheus::with_scrape_configs(&format!(
        "{}{}",
        job("reader", secure, &reader),
        job("nobody", secure, &nobody)
    ))
    .await;
    prometheus.wait_for_value(r#"up{job="reader"}"#, 1.0).await;
    prometheus.wait_for_value(r#"up{job="nobody"}"#, 0.0).await;
    prometheus
        .wait_for_value(r#"llmscaleoperator_leader{job="reader"}"#, 1.0)
        .await;

    bindings
        .delete(&role_name, &DeleteParams::default())
        .await
        .unwrap();
    roles
        .delete(&role_name, &DeleteParams::default())
        .await
        .unwrap();
    common::delete_namespace(&client, &ns).await;
}
