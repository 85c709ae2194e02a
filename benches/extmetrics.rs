//! `make bench`: the external metrics API under load, direct over loopback TLS with keep-alive,
//! 1,000 scalers in the cache. Reports requests per second and latency for a metric read, and the
//! same for /livez (TLS and HTTP alone) as the baseline the ratio is taken against.
//!
//! Client and server share the machine's cores, so absolute numbers understate the server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use llmscaleoperator::extmetrics::authn::RequestHeader;
use llmscaleoperator::extmetrics::certs::fixed;
use llmscaleoperator::extmetrics::server::{ApiState, serve};
use llmscaleoperator::signals::cache::{CachedMetric, MetricCache, ScalerKey, ScalerSnapshot};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use tokio_util::sync::CancellationToken;

const SCALERS: usize = 1000;
const NAMESPACES: usize = 10;
const CONNECTIONS: usize = 16;
const DURATION: Duration = Duration::from_secs(5);

struct Run {
    requests: usize,
    p50: Duration,
    p99: Duration,
    per_second: f64,
}

async fn load(
    url: String,
    clients: Vec<reqwest::Client>,
    headers: Vec<(&'static str, &'static str)>,
) -> Run {
    let deadline = Instant::now() + DURATION;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in clients {
        let url = url.clone();
        let headers = headers.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let mut request = client.get(&url);
                for (k, v) in &headers {
                    request = request.header(*k, *v);
                }
                let t = Instant::now();
                let response = request.send().await.unwrap();
                assert_eq!(response.status(), 200, "{url}");
                response.bytes().await.unwrap();
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Run {
        requests: all.len(),
        p50: at(0.50),
        p99: at(0.99),
        per_second: all.len() as f64 / elapsed.as_secs_f64(),
    }
}

fn main() {
    llmscaleoperator::tls::install_crypto_provider().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    // A front-proxy CA and client certificate of our own: authentication is the real code path,
    // and system:masters in the headers means no SubjectAccessReview is needed.
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "bench-front-proxy-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::new()).unwrap();
    client_params
        .distinguished_name
        .push(DnType::CommonName, "front-proxy-client");
    client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client_params.signed_by(&client_key, &issuer).unwrap();
    let identity_pem = format!("{}{}", client_cert.pem(), client_key.serialize_pem());

    let cache = MetricCache::default();
    for i in 0..SCALERS {
        cache.update(
            ScalerKey {
                namespace: format!("ns-{}", i % NAMESPACES),
                name: format!("scaler-{i}"),
            },
            ScalerSnapshot {
                uid: format!("uid-{i}"),
                metrics: vec![CachedMetric {
                    name: "kv-cache".into(),
                    value: Some(0.5 + i as f64 / 10_000.0),
                    measured_at: Timestamp::now(),
                    recommendation: Some(3),
                    error: None,
                }],
                current_replicas: 2,
                desired_replicas: 3,
                synced_at: Timestamp::now(),
                sync_period_seconds: 3600,
            },
        );
    }
    // Never called: system:masters skips the reviews.
    let unused =
        kube::Client::try_from(kube::Config::new("https://127.0.0.1:1".parse().unwrap())).unwrap();
    let state = ApiState::new(unused, cache);
    let settings = RequestHeader::new(
        ca_cert.pem().as_bytes(),
        vec!["front-proxy-client".into()],
        vec!["X-Remote-User".into()],
        vec!["X-Remote-Group".into()],
        vec!["X-Remote-Extra-".into()],
    )
    .unwrap();
    state.set_request_header(Some(Arc::new(settings)));
    let serving = llmscaleoperator::tls::self_signed(&["localhost".to_owned()]).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let shutdown = CancellationToken::new();
    let served = fixed(serving.clone());
    let stop = shutdown.clone();
    tokio::spawn(async move { serve(listener, served, state, stop).await.unwrap() });

    let clients: Vec<reqwest::Client> = (0..CONNECTIONS)
        .map(|_| {
            reqwest::Client::builder()
                .http1_only()
                .tls_certs_only([
                    reqwest::Certificate::from_pem(serving.cert_pem.as_bytes()).unwrap()
                ])
                .identity(reqwest::Identity::from_pem(identity_pem.as_bytes()).unwrap())
                .build()
                .unwrap()
        })
        .collect();
    // Warm up: connections and handshakes.
    for client in &clients {
        let _ = client.get(format!("{base}/livez")).send().await;
    }

    let headers = vec![
        ("X-Remote-User", "bench"),
        ("X-Remote-Group", "system:masters"),
    ];
    let baseline = load(format!("{base}/livez"), clients.clone(), Vec::new()).await;
    let one = load(
        format!("{base}/apis/external.metrics.k8s.io/v1beta1/namespaces/ns-3/kv-cache?labelSelector=llmscaler%3Dscaler-43"),
        clients.clone(),
        headers.clone(),
    )
    .await;
    let all = load(
        format!("{base}/apis/external.metrics.k8s.io/v1beta1/namespaces/ns-3/kv-cache"),
        clients,
        headers,
    )
    .await;
    shutdown.cancel();

    println!(
        "external metrics API, direct, {SCALERS} scalers cached, {CONNECTIONS} keep-alive TLS connections, {DURATION:?} each:"
    );
    for (name, run) in [
        ("/livez (baseline)", &baseline),
        ("one scaler's metric", &one),
        ("a namespace's 100 items", &all),
    ] {
        println!(
            "  {name:<26} {:>9.0} req/s  p50 {:>7.3} ms  p99 {:>7.3} ms  ({} requests)  {:.2}x of baseline",
            run.per_second,
            run.p50.as_secs_f64() * 1e3,
            run.p99.as_secs_f64() * 1e3,
            run.requests,
            run.per_second / baseline.per_second,
        );
    }
    println!("  upstream queries per request: 0 (the API reads only the in-process cache)");
}
