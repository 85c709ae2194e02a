//! `make bench`: the external metrics API under load, direct over loopback TLS with keep-alive,
//! 1,000 scalers in the cache. Reports requests per second and latency for a metric read, and the
//! same for /livez (TLS and HTTP alone) as the baseline the ratio is taken against.
//!
//! The server runs in a process of its own (this binary again, with LLMSCALER_BENCH_ROLE=server)
//! so its CPU time can be read from /proc: besides the measured rate, where the load generator
//! takes part of the machine's cores, the report gives the server's CPU time per request and the
//! rate that alone would allow on every core.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod adapter_peer;
mod support;

use support::{cluster_client, cpu_time, kubeconfig_path};

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::jiff::Timestamp;
use llmscaleoperator::extmetrics::authn::RequestHeader;
use llmscaleoperator::extmetrics::certs::fixed;
use llmscaleoperator::extmetrics::registration::{APISERVICE, Registration, Target, register};
use llmscaleoperator::extmetrics::server::{ApiState, serve, watch_request_header};
use llmscaleoperator::metric_cache::{CachedMetric, MetricCache, ScalerKey, ScalerSnapshot};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_util::sync::CancellationToken;

const SCALERS: usize = 1000;
const NAMESPACES: usize = 10;
const CONNECTIONS: usize = 16;
const DURATION: Duration = Duration::from_secs(5);
const ROLE: &str = "LLMSCALER_BENCH_ROLE";
/// Where the aggregator finds the API: an ExternalName Service to localhost in this namespace.
const BENCH_NAMESPACE: &str = "llmscaler-bench";
const SERVICE: &str = "llmscaleoperator";
const ONE_METRIC: &str = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns-3/kv-cache?labelSelector=llmscaler%3Dscaler-43";

fn main() {
    llmscaleoperator::tls::install_crypto_provider().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if std::env::var(ROLE).as_deref() == Ok("server") {
        runtime.block_on(server());
    } else {
        runtime.block_on(client());
    }
}

/// What the server tells the load generator on its first stdout line.
#[derive(serde::Serialize, serde::Deserialize)]
struct Hello {
    port: u16,
    aggregator_port: u16,
    serving_pem: String,
    identity_cert_pem: String,
    identity_key_pem: String,
}

/// The API with 1,000 scalers cached, a front-proxy CA of its own; runs until stdin closes.
async fn server() {
    // Authentication is the real code path; system:masters in the headers means no
    // SubjectAccessReview is needed.
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
                vouched: None,
            },
        );
    }
    // Never called: system:masters skips the reviews.
    let unused =
        kube::Client::try_from(kube::Config::new("https://127.0.0.1:1".parse().unwrap())).unwrap();
    let state_cache = cache.clone();
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
    let serving = llmscaleoperator::tls::self_signed(&[
        "localhost".to_owned(),
        format!("{SERVICE}.{BENCH_NAMESPACE}.svc"),
    ])
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // Behind the aggregator: the real front-proxy settings and SubjectAccessReviews.
    let cluster = cluster_client().await;
    let behind = ApiState::new(cluster.clone(), state_cache.clone());
    let aggregator_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hello = Hello {
        port: listener.local_addr().unwrap().port(),
        aggregator_port: aggregator_listener.local_addr().unwrap().port(),
        serving_pem: serving.cert_pem.clone(),
        identity_cert_pem: client_cert.pem(),
        identity_key_pem: client_key.serialize_pem(),
    };
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(watch_request_header(
        cluster,
        behind.clone(),
        shutdown.clone(),
    ));
    let aggregated = tokio::spawn(serve(
        aggregator_listener,
        fixed(serving.clone()),
        behind,
        shutdown.clone(),
    ));
    let server = tokio::spawn(serve(listener, fixed(serving), state, stop));
    let mut out = std::io::stdout();
    writeln!(out, "{}", serde_json::to_string(&hello).unwrap()).unwrap();
    out.flush().unwrap();
    tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).unwrap_or(0) > 0 {}
    })
    .await
    .unwrap();
    shutdown.cancel();
    server.await.unwrap().unwrap();
    aggregated.await.unwrap().unwrap();
}

struct Run {
    requests: usize,
    /// Answers other than 200 (not in the latencies).
    errors: usize,
    p50: Duration,
    p99: Duration,
    per_second: f64,
    /// Server CPU time (user + system) per request.
    server_cpu: Duration,
}

async fn connect(
    port: u16,
    tls: &tokio_rustls::TlsConnector,
) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    connect_to(port, "localhost", tls).await
}

async fn connect_to(
    port: u16,
    server_name: &str,
    tls: &tokio_rustls::TlsConnector,
) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tcp.set_nodelay(true).unwrap();
    let stream = tls
        .connect(ServerName::try_from(server_name.to_owned()).unwrap(), tcp)
        .await
        .unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

async fn load(
    pid: u32,
    path: &str,
    senders: &mut Vec<hyper::client::conn::http1::SendRequest<Empty<Bytes>>>,
    headers: &'static [(&'static str, &'static str)],
) -> Run {
    let path: Arc<str> = path.into();
    let cpu_before = cpu_time(pid);
    let deadline = Instant::now() + DURATION;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for mut sender in senders.drain(..) {
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(100_000);
            let mut errors = 0;
            while Instant::now() < deadline {
                let mut request = hyper::Request::get(&*path).header("host", "localhost");
                // kube-apiserver authenticates by client certificate; the host is not checked.
                for (k, v) in headers {
                    request = request.header(*k, *v);
                }
                let request = request.body(Empty::new()).unwrap();
                let t = Instant::now();
                sender.ready().await.unwrap();
                let response = sender.send_request(request).await.unwrap();
                let ok = response.status() == 200;
                response.into_body().collect().await.unwrap();
                if ok {
                    latencies.push(t.elapsed());
                } else {
                    errors += 1;
                }
            }
            (sender, latencies, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (sender, latencies, failed) = task.await.unwrap();
        senders.push(sender);
        all.extend(latencies);
        errors += failed;
    }
    assert!(
        !all.is_empty(),
        "no request to {path} succeeded ({errors} failed)"
    );
    let elapsed = started.elapsed();
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Run {
        requests: all.len(),
        errors,
        p50: at(0.50),
        p99: at(0.99),
        per_second: all.len() as f64 / elapsed.as_secs_f64(),
        server_cpu: cpu / u32::try_from(all.len()).unwrap(),
    }
}

async fn client() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, "server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let hello: Hello = serde_json::from_str(&line).unwrap();

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(hello.serving_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(hello.identity_cert_pem.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(hello.identity_key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut senders = Vec::new();
    for _ in 0..CONNECTIONS {
        senders.push(connect(hello.port, &tls).await);
    }

    const HEADERS: &[(&str, &str)] = &[
        ("X-Remote-User", "bench"),
        ("X-Remote-Group", "system:masters"),
    ];
    let baseline = load(pid, "/livez", &mut senders, &[]).await;
    let one = load(pid, ONE_METRIC, &mut senders, HEADERS).await;
    let all = load(
        pid,
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns-3/kv-cache",
        &mut senders,
        HEADERS,
    )
    .await;
    let aggregated = through_the_aggregator(pid, &hello).await;
    let compared = adapter_peer::compare::side_by_side(
        pid,
        hello.aggregator_port,
        &hello.serving_pem,
        ONE_METRIC,
        SCALERS,
        NAMESPACES,
    )
    .await;
    drop(child.stdin.take());
    child.wait().unwrap();

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "external metrics API, direct, {SCALERS} scalers cached, {CONNECTIONS} keep-alive TLS connections, {DURATION:?} each, {cores} cores shared by server and load generator:"
    );
    for (name, run) in [
        ("/livez (baseline)", &baseline),
        ("one scaler's metric", &one),
        ("a namespace's 100 items", &all),
        ("one metric, aggregator", &aggregated),
    ] {
        let capacity = cores as f64 / run.server_cpu.as_secs_f64().max(1e-9);
        println!(
            "  {name:<24} {:>7.0} req/s  p50 {:>6.3} ms  p99 {:>6.3} ms  {:.2}x of baseline  server CPU {:>5.1} µs/req (≈ {:>6.0} req/s on {cores} cores)  ({} requests)",
            run.per_second,
            run.p50.as_secs_f64() * 1e3,
            run.p99.as_secs_f64() * 1e3,
            run.per_second / baseline.per_second,
            run.server_cpu.as_secs_f64() * 1e6,
            capacity,
            run.requests,
        );
    }
    println!(
        "  (aggregator: kube-apiserver on this machine proxies to the API as an aggregated server; its own CPU is not in the server column)"
    );
    println!(
        "  upstream queries per request: the API holds no Prometheus or decision-server client; tests/extmetrics_aggregator.rs counts them (none)"
    );
    println!("\n{compared}");
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("extmetrics-vs-adapter.md"), &compared).unwrap();
    println!("written to target/bench/extmetrics-vs-adapter.md");
}

/// Registers the API with the local control plane's aggregator and reads one metric through
/// kube-apiserver as its admin; unregisters afterwards.
async fn through_the_aggregator(pid: u32, hello: &Hello) -> Run {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
    use kube::api::{Api, DeleteParams, PostParams};

    let client = cluster_client().await;
    support::ensure_namespace(&client, BENCH_NAMESPACE).await;
    let services: Api<Service> = Api::namespaced(client.clone(), BENCH_NAMESPACE);
    let _ = services.delete(SERVICE, &DeleteParams::default()).await;
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": { "name": SERVICE },
        "spec": { "type": "ExternalName", "externalName": "localhost",
                  "ports": [{ "name": "https", "port": hello.aggregator_port }] }
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let apiservices: Api<APIService> = Api::all(client.clone());
    let target = Target {
        namespace: BENCH_NAMESPACE,
        service: SERVICE,
        port: i32::from(hello.aggregator_port),
        ca_pem: &hello.serving_pem,
    };
    match register(&client, &target).await.unwrap() {
        Registration::Registered => {}
        Registration::HeldByAnother { holder, .. } => support::give_up(&format!(
            "{APISERVICE} belongs to {holder}; the bench leaves it alone (delete it, or run \
             `make bench` on a fresh control plane)"
        )),
    }

    // The admin of the local control plane, by client certificate (tests/cluster/up.sh makes
    // them next to the kubeconfig).
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig_path()).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let apiserver_port = config.cluster_url.port_u16().unwrap();
    let tls = adapter_peer::compare::admin_tls();

    // Available, and answering through the aggregator, before the clock starts.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut probe = connect_to(apiserver_port, "127.0.0.1", &tls).await;
    loop {
        let request = hyper::Request::get(ONE_METRIC)
            .header("host", "127.0.0.1")
            .body(Empty::new())
            .unwrap();
        probe.ready().await.unwrap();
        let response = probe.send_request(request).await.unwrap();
        let status = response.status();
        response.into_body().collect().await.unwrap();
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the aggregator never routed to the bench server (last status {status})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut senders = Vec::new();
    for _ in 0..CONNECTIONS {
        senders.push(connect_to(apiserver_port, "127.0.0.1", &tls).await);
    }
    let run = load(pid, ONE_METRIC, &mut senders, &[]).await;
    drop(senders);
    // The namespace stays for the next run (see support::ensure_namespace); what this run
    // made in it goes.
    let _ = apiservices
        .delete(APISERVICE, &DeleteParams::default())
        .await;
    let _ = services.delete(SERVICE, &DeleteParams::default()).await;
    run
}
