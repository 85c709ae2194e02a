//! Where the operator's requests may go: `--allowed-server-address` keeps a scaler from making
//! the operator call an address outside the list (the SSRF risk of a namespaced custom resource
//! that names a URL).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use common::Operator;
use common::env::{Env, WAIT};
use serde_json::json;

/// A Prometheus stand-in on loopback that records the Host header of every request.
async fn recording_prometheus(value: f64) -> (u16, Arc<Mutex<Vec<String>>>) {
    let hosts = Arc::new(Mutex::new(Vec::new()));
    let seen = hosts.clone();
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::get(move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                let host = headers
                    .get("host")
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                seen.lock().unwrap().push(host);
                axum::Json(json!({ "status": "success", "data": { "resultType": "vector",
                    "result": [ { "metric": {}, "value": [1_700_000_000.0, value.to_string()] } ] } }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, hosts)
}

#[tokio::test]
async fn a_server_address_outside_the_allow_list_is_never_called() {
    let env = Env::without_prometheus("allow-list").await;
    env.deployment("allowed", 1).await;
    env.deployment("refused", 1).await;
    // 2.0 per replica against a target of 1: a scaler that may call it goes to 2.
    let (port, hosts) = recording_prometheus(2.0).await;
    let _operator = Operator::builder(&env.client)
        .namespace(&env.ns)
        .allowing(&["localhost"])
        .start();
    let spec = |host: &str| {
        json!({
            "serverAddress": format!("http://{host}:{port}"),
            "minReplicas": 1, "maxReplicas": 2,
            "metrics": [{ "name": "load", "query": "avg(load)", "target": "1" }]
        })
    };
    env.scaler("allowed", "allowed", spec("localhost")).await;
    env.scaler("refused", "refused", spec("127.0.0.1")).await;

    env.wait_ready("allowed", 2).await;
    let (status, reason, message) = common::eventually("the refusal in Ready", WAIT, || async {
        let c = env.condition("refused", "Ready").await?;
        (c.0 == "False").then_some(c)
    })
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ServerAddressNotAllowed")
    );
    assert!(
        message.contains(&format!("http://127.0.0.1:{port}"))
            && message.contains("--allowed-server-address (localhost)"),
        "names the address and the list: {message}"
    );
    env.wait_event("refused", "ServerAddressNotAllowed", "is not allowed")
        .await;
    env.stays("refused", 1, Duration::from_secs(2)).await;
    let hosts = hosts.lock().unwrap().clone();
    assert!(!hosts.is_empty(), "the allowed scaler queried");
    assert!(
        hosts.iter().all(|h| h.starts_with("localhost")),
        "nothing reached the refused address: {hosts:?}"
    );
    env.done().await;
}

/// A Prometheus stand-in that checks for one credential and, when it gets it, answers with an
/// error that echoes the credential back (a hostile or careless server).
async fn echoing_prometheus(expected: String) -> String {
    use axum::http::StatusCode;
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::get(move |headers: HeaderMap| {
            let expected = expected.clone();
            async move {
                let got = headers
                    .get("authorization")
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                if got != expected {
                    return (StatusCode::UNAUTHORIZED, "no credential".to_owned());
                }
                let body = json!({ "status": "error", "errorType": "bad_data",
                    "error": format!("credential {got} is not allowed to run this query") });
                (StatusCode::BAD_REQUEST, body.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test]
async fn credentials_from_the_spec_or_a_secret_are_sent_and_never_shown() {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::api::events::v1::Event;
    use kube::api::{Api, ListParams, PostParams};
    const IN_SPEC: &str = "spec-token-4f9c2a7e";
    const IN_SECRET: &str = "secret-token-b81d60c3";

    let env = Env::without_prometheus("credentials").await;
    env.deployment("from-spec", 1).await;
    env.deployment("from-secret", 1).await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "prom-auth" },
        // As `kubectl create secret --from-file` leaves it: with a trailing newline.
        "stringData": { "Authorization": format!("Bearer {IN_SECRET}\n") }
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let spec_server = echoing_prometheus(format!("Bearer {IN_SPEC}")).await;
    let secret_server = echoing_prometheus(format!("Bearer {IN_SECRET}")).await;

    // The operator binary, logging at debug, all output kept for the grep below.
    let log_path = common::repo_root().join(format!("target/tmp/{}-operator.log", env.ns));
    std::fs::create_dir_all(log_path.parent().unwrap()).unwrap();
    let log = std::fs::File::create(&log_path).unwrap();
    let health = format!("127.0.0.1:{}", common::free_port());
    let _operator = common::Spawned::new(
        std::process::Command::new(env!("CARGO_BIN_EXE_llmscaleoperator"))
            .arg("--kubeconfig")
            .arg(common::kubeconfig_path())
            .args(["--namespace", &env.ns, "--health-address", &health])
            .args(["--disable-extmetrics", "--log-level", "debug"])
            .env_remove("RUST_LOG")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let spec = |server: &str| {
        json!({
            "serverAddress": server,
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "name": "load", "query": "avg(load)", "target": "1" }]
        })
    };
    let mut from_spec = spec(&spec_server);
    from_spec["serverHeaders"] = json!({ "Authorization": format!("Bearer {IN_SPEC}") });
    let mut from_secret = spec(&secret_server);
    from_secret["serverHeadersFrom"] = json!({ "secretName": "prom-auth" });
    env.scaler("from-spec", "from-spec", from_spec).await;
    env.scaler("from-secret", "from-secret", from_secret).await;

    // The servers echo only when the credential arrived, so these messages prove it was sent,
    // and that the echo was scrubbed before it reached the status.
    for name in ["from-spec", "from-secret"] {
        let message = common::eventually(&format!("{name}: the echo, redacted"), WAIT, || async {
            let (status, _, message) = env.condition(name, "ScalingActive").await?;
            (status == "False" && message.contains("is not allowed to run this query"))
                .then_some(message)
        })
        .await;
        assert!(
            message.contains("credential [redacted] is not allowed"),
            "{name}: {message}"
        );
        env.wait_event(name, "MetricSkipped", "[redacted]").await;
        env.stays(name, 1, Duration::from_secs(1)).await;
    }

    // A Secret that is gone is a reason on the scaler, not a crash or a silent zero.
    secrets
        .delete("prom-auth", &Default::default())
        .await
        .unwrap();
    let mut missing = spec(&secret_server);
    missing["serverHeadersFrom"] = json!({ "secretName": "prom-auth" });
    env.deployment("no-secret", 1).await;
    env.scaler("no-secret", "no-secret", missing).await;
    let (_, reason, message) = common::eventually("SecretUnavailable", WAIT, || async {
        let c = env.condition("no-secret", "Ready").await?;
        (c.0 == "False").then_some(c)
    })
    .await;
    assert_eq!(reason, "SecretUnavailable");
    assert!(message.contains("prom-auth"), "{message}");

    // Neither credential is in any event, any status, or any log line.
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let events =
        serde_json::to_string(&events.list(&ListParams::default()).await.unwrap().items).unwrap();
    let statuses = serde_json::to_string(
        &env.scalers()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|s| s.status.clone())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let logs = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        logs.contains("SecretUnavailable"),
        "the log was captured: it holds the failing sync of no-secret"
    );
    for secret in [IN_SPEC, IN_SECRET] {
        assert!(!events.contains(secret), "an event leaks {secret}");
        assert!(!statuses.contains(secret), "a status leaks {secret}");
        assert!(
            !logs.contains(secret),
            "the log leaks {secret} (see {})",
            log_path.display()
        );
    }
    env.done().await;
}
