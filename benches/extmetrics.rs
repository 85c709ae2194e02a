//! `make bench`: the external metrics API under load, direct over loopback TLS with keep-alive,
//! 1,000 scalers in the cache. Reports requests per second and latency for a metric read, and the
//! same for /livez (TLS and HTTP alone) as the baseline the ratio is taken against.
//!
//! The server runs in a process of its own (this binary again, with LLMSCALER_BENCH_ROLE=server)
//! so its CPU time can be read from /proc: besides the measured rate, where the load generator
//! takes part of the machine's cores, the report gives the server's CPU time per request and the
//! rate that alone would allow on every core.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
use llmscaleoperator::extmetrics::server::{ApiState, serve};
use llmscaleoperator::signals::cache::{CachedMetric, MetricCache, ScalerKey, ScalerSnapshot};
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
    let hello = Hello {
        port: listener.local_addr().unwrap().port(),
        serving_pem: serving.cert_pem.clone(),
        identity_cert_pem: client_cert.pem(),
        identity_key_pem: client_key.serialize_pem(),
    };
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
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
}

struct Run {
    requests: usize,
    p50: Duration,
    p99: Duration,
    per_second: f64,
    /// Server CPU time (user + system) per request.
    server_cpu: Duration,
}

/// User + system CPU time of a process so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let hz = 100; // USER_HZ on Linux
    Duration::from_millis(ticks * 1000 / hz)
}

async fn connect(
    port: u16,
    tls: &tokio_rustls::TlsConnector,
) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tcp.set_nodelay(true).unwrap();
    let stream = tls
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
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
    path: &'static str,
    senders: &mut Vec<hyper::client::conn::http1::SendRequest<Empty<Bytes>>>,
    headers: &'static [(&'static str, &'static str)],
) -> Run {
    let cpu_before = cpu_time(pid);
    let deadline = Instant::now() + DURATION;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for mut sender in senders.drain(..) {
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(100_000);
            while Instant::now() < deadline {
                let mut request = hyper::Request::get(path).header("host", "localhost");
                for (k, v) in headers {
                    request = request.header(*k, *v);
                }
                let request = request.body(Empty::new()).unwrap();
                let t = Instant::now();
                sender.ready().await.unwrap();
                let response = sender.send_request(request).await.unwrap();
                assert_eq!(response.status(), 200, "{path}");
                response.into_body().collect().await.unwrap();
                latencies.push(t.elapsed());
            }
            (sender, latencies)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let (sender, latencies) = task.await.unwrap();
        senders.push(sender);
        all.extend(latencies);
    }
    let elapsed = started.elapsed();
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Run {
        requests: all.len(),
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
    let one = load(
        pid,
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns-3/kv-cache?labelSelector=llmscaler%3Dscaler-43",
        &mut senders,
        HEADERS,
    )
    .await;
    let all = load(
        pid,
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns-3/kv-cache",
        &mut senders,
        HEADERS,
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
    println!("  upstream queries per request: 0 (the API reads only the in-process cache)");
}
