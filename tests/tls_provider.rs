//! One rustls provider (ring) serves every TLS user in the process: a TLS server (axum-server),
//! and TLS clients (reqwest, and the kube client) are all built and used in one process without
//! a panic about a missing or ambiguous crypto provider.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;

use axum::{Router, routing::get};
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;

#[tokio::test]
async fn tls_server_and_clients_share_one_provider() {
    llmscaleoperator::tls::install_crypto_provider().unwrap();
    // Idempotent: a second call (a test harness, a restart path) is not an error.
    llmscaleoperator::tls::install_crypto_provider().unwrap();
    assert!(rustls::crypto::CryptoProvider::get_default().is_some());

    let pem = llmscaleoperator::tls::self_signed(&["localhost".to_owned()]).unwrap();
    assert!(
        !format!("{pem:?}").contains("PRIVATE KEY"),
        "Debug must not print the key"
    );
    let config = RustlsConfig::from_pem(
        pem.cert_pem.clone().into_bytes(),
        pem.key_pem.clone().into_bytes(),
    )
    .await
    .unwrap();
    let app = Router::new().route("/hello", get(|| async { "hello over tls" }));
    let handle = Handle::new();
    let server = tokio::spawn(
        axum_server::bind_rustls("127.0.0.1:0".parse::<SocketAddr>().unwrap(), config)
            .handle(handle.clone())
            .serve(app.into_make_service()),
    );
    let addr = handle.listening().await.expect("server listening");
    let url = format!("https://localhost:{}/hello", addr.port());

    // reqwest on rustls, trusting only our certificate.
    let http = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(pem.cert_pem.as_bytes()).unwrap()])
        .build()
        .unwrap();
    let body = http
        .get(&url)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "hello over tls");

    // reqwest refuses the same server without the certificate: TLS verification is really on.
    let strict = reqwest::Client::builder()
        .tls_certs_only(Vec::<reqwest::Certificate>::new())
        .build()
        .unwrap();
    assert!(
        strict.get(&url).send().await.is_err(),
        "an untrusted certificate must be refused"
    );

    // The kube client's own rustls stack, trusting the same certificate.
    let mut kube_config = kube::Config::new(
        format!("https://localhost:{}", addr.port())
            .parse()
            .unwrap(),
    );
    kube_config.root_cert = Some(vec![pem_to_der(&pem.cert_pem)]);
    let kube_client = kube::Client::try_from(kube_config).unwrap();
    let request = http::Request::get("/hello").body(Vec::new()).unwrap();
    assert_eq!(
        kube_client.request_text(request).await.unwrap(),
        "hello over tls"
    );

    handle.shutdown();
    server.await.unwrap().unwrap();
}

fn pem_to_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}
