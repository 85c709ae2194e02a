//! Servers that demand TLS from a private CA, a client certificate and credentials, reached
//! through serverTLS and serverAuth whose material lives in Secrets: a real Prometheus started
//! with --web.config.file (basic auth), and a decision server on rustls that verifies client
//! certificates (a bearer token). The scaler scales on each; a missing Secret or a malformed
//! certificate is a clear condition and no write; a mended CA, a rotated client certificate and a
//! rotated password are picked up.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::Operator;
use common::env::{Env, WAIT};
use common::prometheus::{Exporter, Prometheus};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use serde_json::json;

const USER: &str = "scaler";
const PASSWORD: &str = "correct horse battery staple";

/// A private CA, a server certificate for localhost and a client certificate, all PEM.
struct Pki {
    ca: String,
    server: (String, String),
    client: (String, String),
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, "private-prometheus-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, "leaf");
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        ca: ca_pem,
        server: leaf(
            vec!["localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
        client: leaf(
            vec!["llmscaleoperator".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
        ),
    }
}

/// Prometheus demanding all three, and a test client that has them.
async fn secured_prometheus(exporter: &Exporter, pki: &Pki, ns: &str) -> Prometheus {
    let dir = std::env::temp_dir().join(format!("llmscaler-pki-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let web = format!(
        "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\nbasic_auth_users:\n  {USER}: '{hash}'\n",
        file("server.crt", &pki.server.0),
        file("server.key", &pki.server.1),
        file("ca.crt", &pki.ca),
    );
    let identity =
        reqwest::Identity::from_pem(format!("{}{}", pki.client.0, pki.client.1).as_bytes())
            .unwrap();
    let http = reqwest::Client::builder()
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(pki.ca.as_bytes()).unwrap())
        .identity(identity)
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                format!(
                    "Basic {}",
                    base64::Engine::encode(
                        &base64::engine::general_purpose::STANDARD,
                        format!("{USER}:{PASSWORD}")
                    )
                )
                .parse()
                .unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .unwrap();
    Prometheus::secured(exporter, &web, http).await
}

async fn secret(env: &Env, name: &str, type_: Option<&str>, data: serde_json::Value) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": name }, "type": type_, "stringData": data
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

#[tokio::test]
async fn scales_on_a_prometheus_behind_a_private_ca_client_certificates_and_basic_auth() {
    llmscaleoperator::tls::install_crypto_provider().ok();
    let env = Env::without_prometheus("secured-prom").await;
    let exporter = Exporter::start().await;
    exporter.set(&env.series("kv"), 2.0);
    let pki = pki();
    let prometheus = secured_prometheus(&exporter, &pki, &env.ns).await;
    prometheus.wait_for_value(&env.query("kv"), 2.0).await;
    let server = prometheus.url.clone();

    secret(&env, "prom-ca", None, json!({ "ca.crt": pki.ca })).await;
    secret(
        &env,
        "prom-client",
        Some("kubernetes.io/tls"),
        json!({ "tls.crt": pki.client.0, "tls.key": pki.client.1 }),
    )
    .await;
    secret(
        &env,
        "prom-basic",
        None,
        json!({ "username": USER, "password": format!("{PASSWORD}\n") }),
    )
    .await;
    env.deployment("vllm", 1).await;
    env.deployment("plain", 1).await;
    env.deployment("broken", 1).await;
    let _operator = Operator::start(&env.client, &env.ns);
    let spec = |tls: serde_json::Value| {
        json!({
            "serverAddress": server,
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "name": "kv", "query": env.query("kv"), "target": "0.8" }],
            "serverTLS": tls,
            "serverAuth": { "basic": { "secretName": "prom-basic" } }
        })
    };
    let full = json!({
        "ca": { "secretName": "prom-ca" },
        "clientCertificate": { "secretName": "prom-client" }
    });
    env.scaler("secure", "vllm", spec(full.clone())).await;
    // ceil(1 × 2.0 / 0.8) = 3
    env.wait_ready("vllm", 3).await;
    let (active, reason, _) = env.condition("secure", "ScalingActive").await.unwrap();
    assert_eq!((active.as_str(), reason.as_str()), ("True", "ValidMetric"));

    // Without the client certificate the handshake is refused: the signal is lost, the fleet held.
    env.scaler(
        "no-client-cert",
        "plain",
        spec(json!({ "ca": { "secretName": "prom-ca" } })),
    )
    .await;
    common::eventually("a held sync without a client certificate", WAIT, || async {
        let (_, reason, _) = env.condition("no-client-cert", "ScalingActive").await?;
        (reason == "NoUsableMetric").then_some(())
    })
    .await;
    env.stays("plain", 1, Duration::from_secs(2)).await;

    // A missing Secret, then a malformed certificate: Ready=False naming it, nothing written.
    env.scaler(
        "bad-ca",
        "broken",
        spec(json!({
            "ca": { "secretName": "not-there" },
            "clientCertificate": { "secretName": "prom-client" }
        })),
    )
    .await;
    common::eventually("SecretUnavailable", WAIT, || async {
        let (ready, reason, message) = env.condition("bad-ca", "Ready").await?;
        (ready == "False" && reason == "SecretUnavailable" && message.contains("not-there"))
            .then_some(())
    })
    .await;
    secret(
        &env,
        "not-there",
        None,
        json!({ "ca.crt": "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n" }),
    )
    .await;
    let message = common::eventually("InvalidSecret", Duration::from_secs(60), || async {
        let (ready, reason, message) = env.condition("bad-ca", "Ready").await?;
        (ready == "False" && reason == "InvalidSecret").then_some(message)
    })
    .await;
    assert!(
        message.contains("serverTLS.ca") && message.contains("not-there"),
        "{message}"
    );
    env.stays("broken", 1, Duration::from_secs(2)).await;

    // The CA is mended in the Secret: re-read within the refresh period, a new client, it scales.
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let set = |name: &'static str, data: serde_json::Value| {
        let secrets = secrets.clone();
        async move {
            secrets
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "stringData": data })),
                )
                .await
                .unwrap();
        }
    };
    set("not-there", json!({ "ca.crt": pki.ca })).await;
    common::eventually(
        "the mended CA to be used",
        Duration::from_secs(60),
        || async { (env.spec_replicas("broken").await == 3).then_some(()) },
    )
    .await;

    // The client certificate is rotated to one the server does not trust: refused, held; and
    // back to the trusted one: scaling again.
    let stranger = self::pki();
    set(
        "prom-client",
        json!({ "tls.crt": stranger.client.0, "tls.key": stranger.client.1 }),
    )
    .await;
    common::eventually(
        "the untrusted client certificate to be used",
        Duration::from_secs(60),
        || async {
            let (_, reason, _) = env.condition("secure", "ScalingActive").await?;
            (reason == "NoUsableMetric").then_some(())
        },
    )
    .await;
    set(
        "prom-client",
        json!({ "tls.crt": pki.client.0, "tls.key": pki.client.1 }),
    )
    .await;
    common::eventually(
        "the trusted client certificate again",
        Duration::from_secs(60),
        || async {
            let (_, reason, _) = env.condition("secure", "ScalingActive").await?;
            (reason == "ValidMetric").then_some(())
        },
    )
    .await;

    // A client key that is not a key: Ready=False naming the Secret, never its content; mended,
    // it syncs again.
    set(
        "prom-client",
        json!({ "tls.crt": pki.client.0, "tls.key": "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n" }),
    )
    .await;
    let message = common::eventually(
        "InvalidSecret for a malformed client key",
        Duration::from_secs(60),
        || async {
            let (ready, reason, message) = env.condition("secure", "Ready").await?;
            (ready == "False" && reason == "InvalidSecret").then_some(message)
        },
    )
    .await;
    assert!(
        message.contains("serverTLS")
            && message.contains("prom-client")
            && !message.contains("bm90IGEga2V5"),
        "{message}"
    );
    set(
        "prom-client",
        json!({ "tls.crt": pki.client.0, "tls.key": pki.client.1 }),
    )
    .await;
    common::eventually("the mended client key", Duration::from_secs(60), || async {
        let (ready, _, _) = env.condition("secure", "Ready").await?;
        let (_, reason, _) = env.condition("secure", "ScalingActive").await?;
        (ready == "True" && reason == "ValidMetric").then_some(())
    })
    .await;

    // Rotation: a wrong password in the Secret is used within the refresh period, and the
    // right one again after it.
    let set_password = |password: &'static str| set("prom-basic", json!({ "password": password }));
    set_password("wrong").await;
    common::eventually(
        "the rotated password to be used",
        Duration::from_secs(60),
        || async {
            let (_, reason, message) = env.condition("secure", "ScalingActive").await?;
            (reason == "NoUsableMetric" && message.contains("HTTP 401")).then_some(())
        },
    )
    .await;
    set_password(PASSWORD).await;
    common::eventually(
        "the right password again",
        Duration::from_secs(60),
        || async {
            let (_, reason, _) = env.condition("secure", "ScalingActive").await?;
            (reason == "ValidMetric").then_some(())
        },
    )
    .await;
    let status = env.scalers().get("secure").await.unwrap().status.unwrap();
    assert!(
        !serde_json::to_string(&status).unwrap().contains(PASSWORD),
        "no credential in the status"
    );
    env.done().await;
}

/// A decision server on HTTPS that accepts only clients with a certificate from `pki.ca` and the
/// bearer token `token`; it asks for `active` replicas.
async fn secured_decision_server(pki: &Pki, token: &'static str, active: i64) -> String {
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::IntoResponse;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder(std::sync::Arc::new(roots))
        .build()
        .unwrap();
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pki.server.0.as_bytes())
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_slice(pki.server.1.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(std::sync::Arc::new(config));
    let app = axum::Router::new().route(
        "/decisions",
        axum::routing::get(move |headers: HeaderMap| async move {
            let expected = format!("Bearer {token}");
            if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&expected) {
                return StatusCode::UNAUTHORIZED.into_response();
            }
            axum::Json(json!({
                "apiVersion": "llmscaling.inference.x-k8s.io/v1alpha1",
                "decisions": [{ "serviceId": "llama", "replicas": { "active": active } }]
            }))
            .into_response()
        }),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        axum_server::from_tcp_rustls(listener, tls)
            .unwrap()
            .serve(app.into_make_service())
            .await
    });
    format!("https://localhost:{port}")
}

#[tokio::test]
async fn follows_a_decision_server_behind_client_certificates_and_a_bearer_token() {
    llmscaleoperator::tls::install_crypto_provider().ok();
    let env = Env::without_prometheus("secured-decision").await;
    let pki = pki();
    let server = secured_decision_server(&pki, "s3cret-token", 3).await;
    secret(&env, "ca", None, json!({ "ca.crt": pki.ca })).await;
    secret(
        &env,
        "client",
        Some("kubernetes.io/tls"),
        json!({ "tls.crt": pki.client.0, "tls.key": pki.client.1 }),
    )
    .await;
    secret(&env, "token", None, json!({ "bearer": "s3cret-token\n" })).await;
    env.deployment("planned", 1).await;
    env.deployment("unknown-ca", 1).await;
    let _operator = Operator::start(&env.client, &env.ns);
    let spec = |tls: serde_json::Value| {
        json!({
            "metricProvider": "Custom",
            "serverAddress": server,
            "customProvider": { "serviceId": "llama" },
            "minReplicas": 1, "maxReplicas": 5,
            "serverTLS": tls,
            "serverAuth": { "bearer": { "secretName": "token", "key": "bearer" } }
        })
    };
    env.scaler(
        "planned",
        "planned",
        spec(json!({ "ca": { "secretName": "ca" }, "clientCertificate": { "secretName": "client" } })),
    )
    .await;
    env.wait_ready("planned", 3).await;

    // The system roots do not know the private CA: the server is not trusted, the fleet held.
    env.scaler(
        "unknown-ca",
        "unknown-ca",
        spec(json!({ "clientCertificate": { "secretName": "client" } })),
    )
    .await;
    let message = common::eventually("a held sync on an untrusted server", WAIT, || async {
        let (_, reason, message) = env.condition("unknown-ca", "ScalingActive").await?;
        (reason == "SignalUnavailable").then_some(message)
    })
    .await;
    assert!(!message.contains("s3cret-token"), "{message}");
    env.stays("unknown-ca", 1, Duration::from_secs(2)).await;
    env.done().await;
}
