//! The external metrics API called directly over TLS, with real credentials from the local
//! control plane: ServiceAccount tokens (TokenReview), RBAC (SubjectAccessReview), and the
//! cluster's real front-proxy client certificate.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;
use llmscaleoperator::extmetrics::certs::fixed;
use llmscaleoperator::extmetrics::server::{ApiState, serve, watch_request_header};
use llmscaleoperator::metric_cache::{CachedMetric, MetricCache, ScalerKey, ScalerSnapshot};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn https(identity: Option<reqwest::Identity>, ca_pem: &str) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()]);
    if let Some(identity) = identity {
        builder = builder.identity(identity);
    }
    builder.build().unwrap()
}

fn identity(name: &str) -> reqwest::Identity {
    let pki = common::repo_root().join("target/cluster/pki");
    let mut pem = std::fs::read(pki.join(format!("{name}.crt"))).unwrap();
    pem.extend(std::fs::read(pki.join(format!("{name}.key"))).unwrap());
    reqwest::Identity::from_pem(&pem).unwrap()
}

async fn get(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut request = client
        .get(url)
        .header("accept", "application/vnd.kubernetes.protobuf, */*");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.text().await.unwrap();
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    if status != 200 || body.is_object() {
        assert!(
            content_type
                .unwrap_or_default()
                .starts_with("application/json"),
            "always JSON"
        );
    }
    (status, body)
}

/// The API on a free loopback port, with a certificate for localhost.
async fn start_server(
    client: &Client,
    cache: MetricCache,
) -> (
    String,
    llmscaleoperator::tls::CertifiedPem,
    CancellationToken,
) {
    let shutdown = CancellationToken::new();
    let state = ApiState::new(client.clone(), cache);
    tokio::spawn(watch_request_header(
        client.clone(),
        state.clone(),
        shutdown.clone(),
    ));
    let cert = llmscaleoperator::tls::self_signed(&["localhost".to_owned()]).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let served = fixed(cert.clone());
    let stop = shutdown.clone();
    tokio::spawn(async move { serve(listener, served, state, stop).await.unwrap() });
    let plain = https(None, &cert.cert_pem);
    common::eventually("the server to answer", Duration::from_secs(30), || async {
        plain
            .get(format!("{base}/healthz"))
            .send()
            .await
            .ok()
            .filter(|r| r.status() == 200)
            .map(|_| ())
    })
    .await;
    (base, cert, shutdown)
}

#[tokio::test]
async fn a_rotated_front_proxy_ca_is_honoured_without_a_restart() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams};
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };

    let client = common::client().await;
    let (base, cert, _stop) = start_server(&client, MetricCache::default()).await;
    // A new front-proxy CA, and a proxy certificate only it signed.
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, "rotated-front-proxy-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(Vec::new()).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "front-proxy-client");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let leaf = leaf.signed_by(&key, &issuer).unwrap();
    let rotated = https(
        Some(
            reqwest::Identity::from_pem(
                format!("{}{}", leaf.pem(), key.serialize_pem()).as_bytes(),
            )
            .unwrap(),
        ),
        &cert.cert_pem,
    );
    let discovery = format!("{base}/apis/external.metrics.k8s.io/v1beta1");
    let as_admin = [
        ("X-Remote-User", "ops"),
        ("X-Remote-Group", "system:masters"),
    ];
    let (code, _) = get(&rotated, &discovery, None, &as_admin).await;
    assert_eq!(code, 401, "not trusted before the rotation");

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let name = "extension-apiserver-authentication";
    let original = config_maps.get(name).await.unwrap();
    let old = original.data.as_ref().unwrap()["requestheader-client-ca-file"].clone();
    let bundle = format!("{}\n{ca_pem}", old.trim_end());
    let patch = json!({ "data": { "requestheader-client-ca-file": bundle } });
    config_maps
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    common::eventually(
        "the rotated CA to be trusted",
        Duration::from_secs(30),
        || async {
            let (code, _) = get(&rotated, &discovery, None, &as_admin).await;
            (code == 200).then_some(())
        },
    )
    .await;
    let restore = json!({ "data": { "requestheader-client-ca-file": old } });
    config_maps
        .patch(name, &PatchParams::default(), &Patch::Merge(restore))
        .await
        .unwrap();
}

#[tokio::test]
async fn credentials_rbac_and_the_front_proxy_decide_who_reads_what() {
    let client = common::client().await;
    let ns = common::namespace(&client, "extmetrics").await;
    let cache = MetricCache::default();
    cache.update(
        ScalerKey {
            namespace: ns.clone(),
            name: "hot".into(),
        },
        ScalerSnapshot {
            uid: "u".into(),
            metrics: vec![CachedMetric {
                name: "kv-cache".into(),
                value: Some(0.85),
                measured_at: Timestamp::now(),
                recommendation: Some(3),
                error: None,
            }],
            current_replicas: 2,
            desired_replicas: 3,
            synced_at: Timestamp::now(),
            sync_period_seconds: 3600,
            vouched: None,
        },
    );
    let (base, cert, _stop) = start_server(&client, cache).await;
    let metric = format!("{base}/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/kv-cache");
    let plain = https(None, &cert.cert_pem);

    // No credentials.
    let (code, body) = get(&plain, &metric, None, &[]).await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (401, Some("Unauthorized")),
        "{body}"
    );
    // A token the API server does not know.
    let (code, _) = get(&plain, &metric, Some("not-a-token"), &[]).await;
    assert_eq!(code, 401);
    // A real ServiceAccount without RBAC.
    let nobody = common::token_for(&client, &ns, "nobody").await;
    let (code, body) = get(&plain, &metric, Some(&nobody), &[]).await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (403, Some("Forbidden")),
        "{body}"
    );
    // With RBAC: the value the controller cached, as a quantity.
    let reader = common::token_for(&client, &ns, "reader").await;
    common::grant_metrics(&client, &ns, "reader").await;
    let (code, body) = common::eventually(
        "RBAC to allow the reader",
        Duration::from_secs(30),
        || async {
            let (code, body) = get(&plain, &metric, Some(&reader), &[]).await;
            (code == 200).then_some((code, body))
        },
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body["kind"], "ExternalMetricValueList");
    assert_eq!(body["items"][0]["value"], "850m");
    assert_eq!(body["items"][0]["metricLabels"]["llmscaler"], "hot");
    // The full selector grammar, form-encoded.
    let selected = format!("{metric}?labelSelector=llmscaler%20in%20%28hot%2Ccold%29%2C%21absent");
    assert_eq!(
        get(&plain, &selected, Some(&reader), &[]).await.1["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let (code, body) = get(
        &plain,
        &format!("{metric}?labelSelector=llmscaler%3Dcold"),
        Some(&reader),
        &[],
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")));
    // The review names the metric as the resource, with verb list: a Role for kv-cache alone
    // reads kv-cache and nothing else.
    let narrow = common::token_for(&client, &ns, "narrow").await;
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": { "name": "kv-cache-only" },
        "rules": [{ "apiGroups": ["external.metrics.k8s.io"], "resources": ["kv-cache"], "verbs": ["list"] }]
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &role)
        .await
        .unwrap();
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "kv-cache-only" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kv-cache-only" },
        "subjects": [{ "kind": "ServiceAccount", "name": "narrow", "namespace": ns }]
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &binding)
        .await
        .unwrap();
    common::eventually(
        "RBAC to allow kv-cache to the narrow reader",
        Duration::from_secs(30),
        || async { (get(&plain, &metric, Some(&narrow), &[]).await.0 == 200).then_some(()) },
    )
    .await;
    let other = metric.replace("/kv-cache", "/desired-replicas");
    let (code, body) = get(&plain, &other, Some(&narrow), &[]).await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (403, Some("Forbidden")),
        "{body}"
    );
    // Discovery is open to any authenticated user (system:discovery).
    let (code, body) = get(
        &plain,
        &format!("{base}/apis/external.metrics.k8s.io/v1beta1"),
        Some(&reader),
        &[],
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["resources"][0]["name"], "externalmetrics");
    let (code, _) = get(&plain, &format!("{base}/openapi/v2"), Some(&reader), &[]).await;
    assert_eq!(code, 404);

    // The real front proxy speaks for the user in its headers...
    let proxy = https(Some(identity("front-proxy-client")), &cert.cert_pem);
    let as_admin = [
        ("X-Remote-User", "ops"),
        ("X-Remote-Group", "system:masters"),
    ];
    let (code, body) = common::eventually(
        "the front-proxy settings to load",
        Duration::from_secs(30),
        || async {
            let (code, body) = get(&proxy, &metric, None, &as_admin).await;
            (code == 200).then_some((code, body))
        },
    )
    .await;
    assert_eq!(
        (code, body["items"][0]["value"].as_str()),
        (200, Some("850m"))
    );
    // ...and for a user RBAC does not allow.
    let (code, _) = get(&proxy, &metric, None, &[("X-Remote-User", "stranger")]).await;
    assert_eq!(code, 403);
    // A certificate from another CA does not make the headers count.
    let impostor = https(Some(identity("admin")), &cert.cert_pem);
    let (code, body) = get(&impostor, &metric, None, &as_admin).await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (401, Some("Unauthorized")),
        "{body}"
    );
    // A bearer token next to such a certificate still counts (the headers still do not).
    let (code, body) = get(&impostor, &metric, Some(&reader), &as_admin).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = get(&impostor, &metric, Some(&nobody), &as_admin).await;
    assert_eq!(code, 403, "{body}");

    common::delete_namespace(&client, &ns).await;
}
