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
    let _operator = Operator::start_allowing(&env.client, &env.ns, &["localhost"]);
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
