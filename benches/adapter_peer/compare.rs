//! The operator's external metrics API and prometheus-adapter side by side, in one run: the same
//! Prometheus scraping the same exporter, the same client (this bench's hyper load generator),
//! the same authentication (the control plane's front-proxy client certificate with the headers
//! the aggregator sends), the same concurrency levels, rounds interleaved operator, adapter,
//! operator, adapter...; then the same read through kube-apiserver's aggregator, the APIService
//! switched between them; then what a fleet of HPAs reading every 15 s does to Prometheus.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::{Adapter, metric_path, point_apiservice};
use crate::support::prometheus::{Exporter, Prometheus};
use crate::support::{cluster_client, cpu_time, kubeconfig_path, memory_kib};
use crate::{Run, connect_to, load};

const LEVELS: [usize; 3] = [1, 16, 64];
const ROUNDS: usize = 3;
const HEADERS: &[(&str, &str)] = &[
    ("X-Remote-User", "bench"),
    ("X-Remote-Group", "system:masters"),
];
/// HPA fleets: this many HPAs, each reading its metric every 15 s (the HPA's sync period).
const FLEETS: [usize; 2] = [100, 1_000];
const HPA_PERIOD: Duration = Duration::from_secs(15);
const FLEET_WINDOW: Duration = Duration::from_secs(30);

/// One server's reads in one round.
struct Round {
    run: Run,
    /// Prometheus instant queries during the round, per successful read.
    queries_per_read: f64,
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// The operator's API runs in process `operator_pid` on `operator_port` (its certificate
/// `operator_pem`), behind the real front-proxy settings, and serves `operator_path`; the
/// markdown report of the comparison.
pub async fn side_by_side(
    operator_pid: u32,
    operator_port: u16,
    operator_pem: &str,
    operator_path: &str,
    scalers: usize,
    namespaces: usize,
) -> String {
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut text = String::with_capacity(scalers * 80);
    for i in 0..scalers {
        writeln!(
            text,
            "vllm:kv_cache_usage_perc{{namespace=\"ns-{}\",app=\"scaler-{i}\"}} 0.5",
            i % namespaces
        )
        .unwrap();
    }
    let exporter = Exporter::serving(text).await;
    let prometheus = Prometheus::scraping(exporter.addr).await;
    prometheus
        .wait_for_series("vllm:kv_cache_usage_perc", scalers)
        .await;
    let adapter = Adapter::start(
        &repo,
        &prometheus.url,
        &format!("{}.{}.svc", crate::SERVICE, crate::BENCH_NAMESPACE),
    );
    // The same scaler for both: ns-3 / scaler-43.
    let adapter_path = metric_path("ns-3", "scaler-43");

    let pki = kubeconfig_path().parent().unwrap().join("pki");
    let read = |name: &str| std::fs::read(pki.join(name)).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for pem in [operator_pem, adapter.serving_pem.as_str()] {
        roots
            .add(CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
            .unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(&read("front-proxy-client.crt")).unwrap()],
            PrivateKeyDer::from_pem_slice(&read("front-proxy-client.key")).unwrap(),
        )
        .unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config));
    adapter
        .wait(|| {
            let (tls, path) = (tls.clone(), adapter_path.clone());
            async move { status(adapter.port, "localhost", &tls, &path, HEADERS).await }
        })
        .await;

    let servers = [
        (
            "operator",
            operator_pid,
            operator_port,
            operator_path.to_owned(),
        ),
        (
            "prometheus-adapter",
            adapter.pid(),
            adapter.port,
            adapter_path.clone(),
        ),
    ];
    // results[level][server] = rounds
    let mut results: Vec<[Vec<Round>; 2]> = Vec::new();
    for connections in LEVELS {
        let mut rounds: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..ROUNDS {
            for (s, (_, pid, port, path)) in servers.iter().enumerate() {
                let mut senders = Vec::new();
                for _ in 0..connections {
                    senders.push(connect_to(*port, "localhost", &tls).await);
                }
                let before = prometheus.queries().await.total();
                let run = load(*pid, path, &mut senders, HEADERS).await;
                let queries = prometheus.queries().await.total() - before;
                rounds[s].push(Round {
                    queries_per_read: queries / run.requests.max(1) as f64,
                    run,
                });
            }
        }
        results.push(rounds);
    }
    let rss = [
        memory_kib(operator_pid, "VmRSS"),
        memory_kib(adapter.pid(), "VmRSS"),
    ];

    // Through the aggregator, the APIService switched between the two, twice each.
    let client = cluster_client().await;
    crate::support::ensure_namespace(&client, crate::BENCH_NAMESPACE).await;
    let admin = admin_tls();
    let apiserver_port = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig_path()).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap()
    .cluster_url
    .port_u16()
    .unwrap();
    let targets = [
        (
            operator_port,
            operator_pem.to_owned(),
            operator_path.to_owned(),
        ),
        (
            adapter.port,
            adapter.serving_pem.clone(),
            adapter_path.clone(),
        ),
    ];
    let mut aggregated: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
    let mut fleets: Vec<[(f64, f64, f64); 2]> =
        FLEETS.iter().map(|_| [(0.0, 0.0, 0.0); 2]).collect();
    for round in 0..2 {
        for (s, (port, pem, path)) in targets.iter().enumerate() {
            point_apiservice(&client, crate::BENCH_NAMESPACE, crate::SERVICE, *port, pem).await;
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let last = status(apiserver_port, "127.0.0.1", &admin, path, &[]).await;
                if last == Some(200) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the aggregator never routed {path} to {} (last status {last:?})",
                    servers[s].0
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let mut senders = Vec::new();
            for _ in 0..16 {
                senders.push(connect_to(apiserver_port, "127.0.0.1", &admin).await);
            }
            let before = prometheus.queries().await.total();
            let run = load(servers[s].1, path, &mut senders, &[]).await;
            let queries = prometheus.queries().await.total() - before;
            aggregated[s].push(Round {
                queries_per_read: queries / run.requests.max(1) as f64,
                run,
            });
            if round == 0 {
                for (f, hpas) in FLEETS.iter().enumerate() {
                    fleets[f][s] = hpa_fleet(
                        *hpas,
                        apiserver_port,
                        &admin,
                        path,
                        &prometheus,
                        servers[s].1,
                    )
                    .await;
                }
            }
        }
    }
    let _ =
        kube::Api::<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>::all(
            client.clone(),
        )
        .delete("v1beta1.external.metrics.k8s.io", &Default::default())
        .await;
    let _ = kube::Api::<k8s_openapi::api::core::v1::Service>::namespaced(
        client.clone(),
        crate::BENCH_NAMESPACE,
    )
    .delete(crate::SERVICE, &Default::default())
    .await;
    report(scalers, &results, &aggregated, &fleets, rss)
}

/// One read's status, or None when the server cannot be reached.
async fn status(
    port: u16,
    server_name: &str,
    tls: &tokio_rustls::TlsConnector,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<u16> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let stream = tls
        .connect(
            rustls::pki_types::ServerName::try_from(server_name.to_owned()).ok()?,
            tcp,
        )
        .await
        .ok()?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .ok()?;
    tokio::spawn(connection);
    let mut request = hyper::Request::get(path).header("host", server_name);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).ok()?)
        .await
        .ok()?;
    let code = response.status().as_u16();
    response.into_body().collect().await.ok()?;
    Some(code)
}

/// The control plane's admin, by client certificate (what `kubectl get --raw` would use).
pub fn admin_tls() -> tokio_rustls::TlsConnector {
    let pki = kubeconfig_path().parent().unwrap().join("pki");
    let read = |name: &str| std::fs::read(pki.join(name)).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&read("ca.crt")).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(&read("admin.crt")).unwrap()],
            PrivateKeyDer::from_pem_slice(&read("admin.key")).unwrap(),
        )
        .unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// `hpas` HPAs each reading `path` through the aggregator every 15 s, paced evenly, for
/// [`FLEET_WINDOW`]: Prometheus's queries per second, Prometheus's CPU (cores) and the metrics
/// server's CPU (cores) meanwhile.
async fn hpa_fleet(
    hpas: usize,
    apiserver_port: u16,
    admin: &tokio_rustls::TlsConnector,
    path: &str,
    prometheus: &Prometheus,
    server_pid: u32,
) -> (f64, f64, f64) {
    let mut senders: Vec<Sender> = Vec::new();
    for _ in 0..8 {
        senders.push(connect_to(apiserver_port, "127.0.0.1", admin).await);
    }
    let interval = HPA_PERIOD.div_f64(hpas as f64);
    let reads = (FLEET_WINDOW.as_secs_f64() / interval.as_secs_f64()) as usize;
    let before = prometheus.queries().await.total();
    let (prom_cpu, server_cpu) = (cpu_time(prometheus.pid()), cpu_time(server_pid));
    let started = Instant::now();
    let mut ticker = tokio::time::interval(interval);
    let mut tasks = Vec::new();
    let senders: Vec<Arc<tokio::sync::Mutex<Sender>>> = senders
        .into_iter()
        .map(|s| Arc::new(tokio::sync::Mutex::new(s)))
        .collect();
    let path: Arc<str> = path.into();
    for i in 0..reads {
        ticker.tick().await;
        let sender = senders[i % senders.len()].clone();
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let mut sender = sender.lock().await;
            let request = hyper::Request::get(&*path)
                .header("host", "127.0.0.1")
                .body(Empty::<Bytes>::new())
                .unwrap();
            if sender.ready().await.is_ok()
                && let Ok(response) = sender.send_request(request).await
            {
                let _ = response.into_body().collect().await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let queries = prometheus.queries().await.total() - before;
    (
        queries / elapsed,
        cpu_time(prometheus.pid())
            .saturating_sub(prom_cpu)
            .as_secs_f64()
            / elapsed,
        cpu_time(server_pid)
            .saturating_sub(server_cpu)
            .as_secs_f64()
            / elapsed,
    )
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `median [min–max]` of one figure over the rounds, with `decimals` decimals.
fn spread(rounds: &[Round], decimals: usize, figure: impl Fn(&Round) -> f64) -> (f64, String) {
    let mut values: Vec<f64> = rounds.iter().map(figure).collect();
    let mid = median(&mut values);
    let (lo, hi) = (values[0], values[values.len() - 1]);
    (
        mid,
        format!("{mid:.decimals$} [{lo:.decimals$}–{hi:.decimals$}]"),
    )
}

fn report(
    scalers: usize,
    direct: &[[Vec<Round>; 2]],
    aggregated: &[Vec<Round>; 2],
    fleets: &[[(f64, f64, f64); 2]],
    rss: [u64; 2],
) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = String::new();
    writeln!(
        out,
        "## External metrics: the operator and prometheus-adapter v0.12.0 side by side\n\n\
         One run on one machine ({cores} cores shared by the load generator, both servers, \
         Prometheus and kube-apiserver): {scalers} scalers, one Prometheus scraping one exporter, \
         the same client, the front-proxy client certificate and `X-Remote-User` / \
         `X-Remote-Group` headers for both, {ROUNDS} interleaved rounds of {:?} per server and \
         level. Median [min–max] over the rounds; ratios are operator / adapter of the medians.\n",
        crate::DURATION
    )
    .unwrap();
    writeln!(out, "| connections | server | reads/s | p50 ms | p99 ms | errors | Prometheus queries per read |").unwrap();
    writeln!(out, "| --- | --- | --- | --- | --- | --- | --- |").unwrap();
    let mut ratios = Vec::new();
    for (level, rounds) in LEVELS.iter().zip(direct) {
        let mut medians = [(0.0, 0.0); 2];
        for (s, name) in ["operator", "prometheus-adapter"].iter().enumerate() {
            let (rate, rate_text) = spread(&rounds[s], 0, |r| r.run.per_second);
            let (_, p50) = spread(&rounds[s], 2, |r| r.run.p50.as_secs_f64() * 1e3);
            let (p99, p99_text) = spread(&rounds[s], 2, |r| r.run.p99.as_secs_f64() * 1e3);
            let errors: usize = rounds[s].iter().map(|r| r.run.errors).sum();
            let (_, queries) = spread(&rounds[s], 2, |r| r.queries_per_read);
            writeln!(
                out,
                "| {level} | {name} | {rate_text} | {p50} | {p99_text} | {errors} | {queries} |"
            )
            .unwrap();
            medians[s] = (rate, p99);
        }
        ratios.push((
            *level,
            medians[0].0 / medians[1].0,
            medians[0].1 / medians[1].1,
        ));
    }
    writeln!(
        out,
        "\n| connections | reads/s operator ÷ adapter | p99 operator ÷ adapter |"
    )
    .unwrap();
    writeln!(out, "| --- | --- | --- |").unwrap();
    for (level, rate, p99) in &ratios {
        writeln!(
            out,
            "| {level} | {rate:.1}× | {p99:.3} (1/{:.0}) |",
            1.0 / p99
        )
        .unwrap();
    }
    writeln!(
        out,
        "\nResident memory after the rounds: operator API {:.1} MiB, prometheus-adapter {:.1} MiB.\n",
        rss[0] as f64 / 1024.0,
        rss[1] as f64 / 1024.0
    )
    .unwrap();
    writeln!(out, "Through kube-apiserver's aggregator (16 connections, the APIService switched between them, 2 rounds each):\n").unwrap();
    writeln!(
        out,
        "| server | reads/s | p50 ms | p99 ms | errors | Prometheus queries per read |"
    )
    .unwrap();
    writeln!(out, "| --- | --- | --- | --- | --- | --- |").unwrap();
    let mut agg_medians = [0.0; 2];
    for (s, name) in ["operator", "prometheus-adapter"].iter().enumerate() {
        let (rate, rate_text) = spread(&aggregated[s], 0, |r| r.run.per_second);
        let (_, p50) = spread(&aggregated[s], 2, |r| r.run.p50.as_secs_f64() * 1e3);
        let (_, p99) = spread(&aggregated[s], 2, |r| r.run.p99.as_secs_f64() * 1e3);
        let errors: usize = aggregated[s].iter().map(|r| r.run.errors).sum();
        let (_, queries) = spread(&aggregated[s], 2, |r| r.queries_per_read);
        writeln!(
            out,
            "| {name} | {rate_text} | {p50} | {p99} | {errors} | {queries} |"
        )
        .unwrap();
        agg_medians[s] = rate;
    }
    writeln!(
        out,
        "\nThrough the aggregator the operator serves {:.1}× the adapter's reads per second (kube-apiserver's own proxying is in both).\n",
        agg_medians[0] / agg_medians[1]
    )
    .unwrap();
    writeln!(out, "An HPA fleet, each HPA reading its external metric every 15 s through the aggregator ({:?} paced evenly):\n", FLEET_WINDOW).unwrap();
    writeln!(
        out,
        "| HPAs | server | Prometheus queries/s | Prometheus CPU (cores) | server CPU (cores) |"
    )
    .unwrap();
    writeln!(out, "| --- | --- | --- | --- | --- |").unwrap();
    for (hpas, row) in FLEETS.iter().zip(fleets) {
        for (s, name) in ["operator", "prometheus-adapter"].iter().enumerate() {
            let (queries, prom_cpu, server_cpu) = row[s];
            writeln!(
                out,
                "| {hpas} | {name} | {queries:.1} | {prom_cpu:.3} | {server_cpu:.3} |"
            )
            .unwrap();
        }
    }
    out
}
