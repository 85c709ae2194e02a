//! `make bench`: what the operator itself costs, and how fast it reacts.
//!
//! Cost: the release binary runs as a process of its own against the local control plane with
//! 100, 1,000, 5,000 and 20,000 LLMScalers, each scaling its own Deployment on a steady metric.
//! Up to 5,000 the metric comes from a real Prometheus (Debian's, its defaults); above, from a
//! loopback stand-in that answers every query at once, so that the operator, not a Prometheus
//! sharing its two cores, is what is measured. Over one minute at each size it reads the
//! operator's CPU time, resident and peak memory (/proc), the syncs against those due (4 per
//! scaler and minute), how late they ran (the operator's own `sync_lateness_seconds`), the
//! apiserver requests per sync (kube-apiserver's own `apiserver_request_total`, reads and writes
//! apart, on the resources the operator uses) and the PromQL queries per sync.
//!
//! Arguments (after `--`): `--sizes 100,5000` measures only those sizes, `--no-reaction` and
//! `--no-restart` skip those parts, `--stand-in-above N` moves the limit above which the
//! stand-in answers, `--replicas N` runs N replicas dividing the fleet by shards instead, then one
//! replica with an Nth of each size, and reports the replicas' cost as ratios to it (neither the
//! reaction nor the restart). `LLMSCALER_BENCH_OPERATOR=<path>` runs another build
//! of the operator (an older one, to compare), and `LLMSCALER_BENCH_PERF=1` records each window
//! with `perf record` (target/bench/perf-<size>.data; of the first replica with `--replicas`).
//!
//! Reaction: one scaler on a 2 s sync period; the metric steps up and down 50 times, each at a
//! random phase of the sync timer; the time from the step to spec.replicas written, p50 and p99,
//! as a ratio of the sync period. The stand-in answers with the new value at once, so this is the
//! operator's own delay; behind a real Prometheus add its scrape interval.
//!
//! The control plane runs without kube-controller-manager (the minimal profile) and the bench
//! plays the Deployment controller by writing each Deployment's status, so every request on those
//! resources during a measurement is the operator's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::get;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use llmscaleoperator::api::LLMScaler;
use serde_json::json;
use support::prometheus::{Exporter, Prometheus, QueryCounts, Sampler};
use support::{cluster_client, cpu_time, kubeconfig_path, memory_kib};

const COST_NAMESPACE: &str = "llmscaler-cost";
const REACTION_NAMESPACE: &str = "llmscaler-reaction";
const SIZES: [usize; 4] = [100, 1_000, 5_000, 20_000];
/// Above this many scalers the stand-in answers the queries (see the top of the file).
const REAL_PROMETHEUS_UP_TO: usize = 5_000;
const WINDOW: Duration = Duration::from_secs(60);
/// The default syncPeriodSeconds, which the cost scalers keep.
const SYNC_PERIOD: Duration = Duration::from_secs(15);
const REACTION_PERIOD_SECONDS: u64 = 2;
const STEPS: usize = 50;
const CREATE_CONCURRENCY: usize = 48;
/// Sizes at which the load on Prometheus is measured around a restart.
const BURST_SIZES: [usize; 2] = [1_000, 5_000];
/// How long a restart is watched: two sync periods and the start-up.
const RESTART_WINDOW: Duration = Duration::from_secs(35);
/// The resources the operator reads or writes. Leases are left out: the operator runs without
/// leader election here, and kube-apiserver renews leases of its own every few seconds.
const OPERATOR_RESOURCES: [&str; 6] = [
    "llmscalers",
    "deployments",
    "statefulsets",
    "leaderworkersets",
    "pods",
    "events",
];

fn main() {
    llmscaleoperator::tls::install_crypto_provider().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

/// What to run, from the command line (see the top of the file).
struct Options {
    sizes: Vec<usize>,
    reaction: bool,
    restart: bool,
    real_prometheus_up_to: usize,
    perf: bool,
    /// Operator replicas sharing the fleet by shards (1: one replica, no election).
    replicas: usize,
}

impl Options {
    fn parse() -> Self {
        let mut options = Self {
            sizes: SIZES.to_vec(),
            reaction: true,
            restart: true,
            real_prometheus_up_to: REAL_PROMETHEUS_UP_TO,
            perf: std::env::var_os("LLMSCALER_BENCH_PERF").is_some_and(|v| v == "1"),
            replicas: 1,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--sizes" => {
                    options.sizes = args
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .map(|n| n.trim().replace('_', "").parse().unwrap())
                        .collect();
                    options.sizes.sort_unstable();
                }
                "--no-reaction" => options.reaction = false,
                "--no-restart" => options.restart = false,
                "--stand-in-above" => {
                    options.real_prometheus_up_to =
                        args.next().unwrap_or_default().parse().unwrap();
                }
                "--replicas" => {
                    options.replicas = args.next().unwrap_or_default().parse().unwrap();
                    assert!(options.replicas >= 1, "--replicas: at least 1");
                }
                // `cargo bench` passes --bench to every bench target.
                _ => {}
            }
        }
        options
    }
}

async fn run() {
    let options = Options::parse();
    let profile =
        std::fs::read_to_string(kubeconfig_path().with_file_name("profile")).unwrap_or_default();
    if profile.trim() == "full" {
        support::give_up(
            "the operator benchmark needs the minimal control plane (no kube-controller-manager \
             writing Deployments): run `make cluster-down` first, then `make bench`",
        );
    }
    let client = cluster_client().await;
    install_crd(&client).await;

    if options.replicas > 1 {
        sharded(&client, &options).await;
        return;
    }
    let CostServers {
        exporter: _exporter,
        prometheus: cost_prometheus,
        stand_in: cost_stand_in,
    } = CostServers::start(&options).await;
    let reaction_prometheus = StandIn::start(1.0).await;
    let mut operator = OperatorProcess::start().await;
    println!(
        "operator {} pid {} (log: {})",
        operator_binary().display(),
        operator.pid(),
        operator.log.display()
    );

    let reaction = match options.reaction {
        true => {
            let reaction = reaction(&client, &operator, &reaction_prometheus).await;
            // Its fast-syncing scaler must not count in the cost figures.
            clear(&client, REACTION_NAMESPACE).await;
            Some(reaction)
        }
        false => None,
    };

    let mut rows = Vec::new();
    let mut bursts = Vec::new();
    let mut created = 0;
    let mut server = cost_prometheus.url.clone();
    fresh_namespace(&client, COST_NAMESPACE).await;
    for &size in &options.sizes {
        let started = Instant::now();
        let real = size <= options.real_prometheus_up_to;
        if !real && server != cost_stand_in.url {
            server = cost_stand_in.url.clone();
            repoint(&client, created, &server).await;
        }
        grow(&client, created, size, &server).await;
        created = size;
        wait_synced(&client, COST_NAMESPACE, size).await;
        println!(
            "{size} scalers created and synced in {:.0} s; settling one sync period, then measuring {} s",
            started.elapsed().as_secs_f64(),
            WINDOW.as_secs()
        );
        tokio::time::sleep(SYNC_PERIOD + Duration::from_secs(2)).await;
        let queries = match real {
            true => Queries::Prometheus(&cost_prometheus),
            false => Queries::StandIn(&cost_stand_in),
        };
        let before = Reading::take(&client, &operator, &queries).await;
        let perf = options.perf.then(|| perf_record(operator.pid(), size));
        tokio::time::sleep(WINDOW).await;
        let after = Reading::take(&client, &operator, &queries).await;
        if let Some(mut perf) = perf {
            let _ = perf.wait();
        }
        let row = Row::between(size, real, &before, &after, &operator);
        println!("{}", row.line());
        rows.push(row);
        if options.restart && real && BURST_SIZES.contains(&size) {
            // The operator restarts with every scaler to sync, as after an upgrade; then, with
            // it stopped, what it did before syncs were spread and bounded is replayed. The
            // replay goes last: it leaves Prometheus busy with abandoned queries for a while,
            // which must not be counted against the operator.
            drop(operator);
            let (restarted, spread) = restart(&client, &cost_prometheus, size).await;
            println!("{}", spread.line());
            drop(restarted);
            let aligned = aligned_bursts(&cost_prometheus, size).await;
            println!("{}", aligned.line());
            operator = OperatorProcess::start().await;
            bursts.push(aligned);
            bursts.push(spread);
        }
    }
    clear(&client, COST_NAMESPACE).await;

    let report = report(&rows, &bursts, reaction.as_ref());
    println!("\n{report}");
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("operator.md"), &report).unwrap();
    println!("written to target/bench/operator.md");
}

/// What the cost scalers query: a real Prometheus (its defaults: 20 queries at once, and it
/// says how many queries it answered and turned away) scraping one series per model up to the
/// real-Prometheus limit, and for the fleets above it a stand-in (a Prometheus sharing the two
/// cores would be the bottleneck).
struct CostServers {
    exporter: Exporter,
    prometheus: Prometheus,
    stand_in: StandIn,
}

impl CostServers {
    async fn start(options: &Options) -> Self {
        let real_models = options
            .sizes
            .iter()
            .copied()
            .filter(|&n| n <= options.real_prometheus_up_to)
            .max()
            .unwrap_or(1);
        let exporter = Exporter::start(real_models, 1.0).await;
        let prometheus = Prometheus::scraping(exporter.addr).await;
        prometheus
            .wait_for_series("vllm:kv_cache_usage_perc", real_models)
            .await;
        Self {
            exporter,
            prometheus,
            stand_in: StandIn::start(1.0).await,
        }
    }
}

// ---------------------------------------------------------------- replicas sharing the fleet

/// `--replicas N`: N operator replicas divide the fleet by shards (`--shards N`, each shard led
/// through its own Lease), and each size is measured per replica: its syncs against the share of
/// the due syncs its shards hold, its CPU per sync, its memory. Then one replica of the same
/// build carries an Nth of each size, measured alike, and the report gives the replicas' cost
/// per sync and memory as ratios to it.
async fn sharded(client: &kube::Client, options: &Options) {
    let n = options.replicas;
    let CostServers {
        exporter: _exporter,
        prometheus,
        stand_in,
    } = CostServers::start(options).await;
    fresh_namespace(client, COST_NAMESPACE).await;
    let extra: Vec<String> = [
        "--leader-elect",
        "--leader-elect-namespace",
        COST_NAMESPACE,
        "--shards",
        &n.to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let mut operators = Vec::new();
    for i in 0..n {
        let op = OperatorProcess::start_with(&extra, &format!("operator-bench-{i}.log")).await;
        println!("replica {i}: pid {} (log: {})", op.pid(), op.log.display());
        operators.push(op);
    }
    // Every shard led, by one replica each.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut led = Vec::new();
        for op in &operators {
            led.push(op.sum("llmscaleoperator_shards_led", "").await);
        }
        if led.iter().all(|&l| l == 1.0) {
            break;
        }
        assert!(Instant::now() < deadline, "shards not divided: {led:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let mut lines = Vec::new();
    let mut shared = Vec::new();
    let mut created = 0;
    let mut server = prometheus.url.clone();
    for &size in &options.sizes {
        let (real, queries) = grow_settled(
            client,
            options,
            (&prometheus, &stand_in),
            (&mut created, &mut server),
            size,
        )
        .await;
        let fleet = Fleet::take(client, &queries).await;
        let mut before = Vec::new();
        for op in &operators {
            before.push(Reading::of(op, &fleet).await);
        }
        // The first replica's window, as one replica's is recorded.
        let perf = options.perf.then(|| perf_record(operators[0].pid(), size));
        tokio::time::sleep(WINDOW).await;
        if let Some(mut perf) = perf {
            let _ = perf.wait();
        }
        let fleet = Fleet::take(client, &queries).await;
        let mut after = Vec::new();
        for op in &operators {
            after.push(Reading::of(op, &fleet).await);
        }
        let rows: Vec<Row> = operators
            .iter()
            .zip(before.iter().zip(&after))
            .map(|(op, (b, a))| Row::between(size, real, b, a, op))
            .collect();
        let due = size as f64 * 60.0 / SYNC_PERIOD.as_secs_f64();
        let total: f64 = rows.iter().map(|r| r.syncs_per_minute).sum();
        // The apiserver's and the query server's counts are the whole fleet's.
        let syncs = total * after[0].at.duration_since(before[0].at).as_secs_f64() / 60.0;
        let requests: f64 = after[0]
            .requests
            .iter()
            .map(|(verb, count)| count - before[0].requests.get(verb).copied().unwrap_or(0.0))
            .sum();
        for (i, row) in rows.iter().enumerate() {
            let line = format!(
                "| {size} | {i} | {:.0} ({:.1}% of the fleet's due) | {} | {:.3} | {:.1} | {:.1} |",
                row.syncs_per_minute,
                100.0 * row.syncs_per_minute / due,
                row.lateness_p99
                    .map_or_else(|| "—".to_owned(), |s| format!("{s:.3}")),
                row.cpu_ms_per_sync,
                row.rss_kib as f64 / 1024.0,
                row.peak_kib as f64 / 1024.0,
            );
            println!("{line}");
            lines.push(line);
        }
        let summary = format!(
            "| {size} | all | {total:.0} ({:.1}% of due) | | {:.3} (mean) | {:.1} (mean) | | apiserver requests/sync {:.4}, queries/sync {:.2} |",
            100.0 * total / due,
            rows.iter().map(|r| r.cpu_ms_per_sync).sum::<f64>() / n as f64,
            rows.iter().map(|r| r.rss_kib as f64 / 1024.0).sum::<f64>() / n as f64,
            requests.abs() / syncs.max(1.0),
            (after[0].queries - before[0].queries) / syncs.max(1.0),
        );
        println!("{summary}");
        lines.push(summary);
        shared.push((size, rows));
    }
    clear(client, COST_NAMESPACE).await;
    drop(operators);

    // The same build as one replica carrying a share of each fleet, measured alike: what the
    // replicas' cost per sync and memory are compared with.
    let alone = OperatorProcess::start_with(&[], "operator-bench-alone.log").await;
    let mut ratios = Vec::new();
    created = 0;
    server = prometheus.url.clone();
    for (size, rows) in &shared {
        let share = size / n;
        let (real, queries) = grow_settled(
            client,
            options,
            (&prometheus, &stand_in),
            (&mut created, &mut server),
            share,
        )
        .await;
        let before = Reading::take(client, &alone, &queries).await;
        tokio::time::sleep(WINDOW).await;
        let after = Reading::take(client, &alone, &queries).await;
        let one = Row::between(share, real, &before, &after, &alone);
        let mean = |f: fn(&Row) -> f64| rows.iter().map(f).sum::<f64>() / rows.len() as f64;
        let cpu = mean(|r| r.cpu_ms_per_sync);
        let rss = mean(|r| r.rss_kib as f64) / 1024.0;
        let line = format!(
            "| {size} on {n} replicas | {share} on one | {:.0} ({:.1}% of due) | {:.3} / {:.3} ({:.2}×) | {:.1} / {:.1} ({:.2}×) |",
            one.syncs_per_minute,
            100.0 * one.syncs_per_minute / one.due_per_minute(),
            cpu,
            one.cpu_ms_per_sync,
            cpu / one.cpu_ms_per_sync,
            rss,
            one.rss_kib as f64 / 1024.0,
            rss / (one.rss_kib as f64 / 1024.0),
        );
        println!("{line}");
        ratios.push(line);
    }
    clear(client, COST_NAMESPACE).await;
    drop(alone);

    let mut report = format!(
        "## Operator cost with {n} replicas sharing the fleet (--shards {n}, sync period {} s)\n\n",
        SYNC_PERIOD.as_secs()
    );
    report.push_str("| scalers (fleet) | replica | syncs/min | lateness p99 s | CPU ms/sync | RSS MiB | peak RSS MiB |\n");
    report.push_str("| --- | --- | --- | --- | --- | --- | --- |\n");
    for line in &lines {
        report.push_str(line);
        report.push('\n');
    }
    report.push_str(&format!(
        "\n## Against one replica carrying 1/{n} of the fleet (same build, same run)\n\n"
    ));
    report.push_str("| sharded | alone | syncs/min alone | CPU ms/sync: per replica (mean) / alone | RSS MiB: per replica (mean) / alone |\n");
    report.push_str("| --- | --- | --- | --- | --- |\n");
    for line in &ratios {
        report.push_str(line);
        report.push('\n');
    }
    println!("\n{report}");
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("operator-{n}-replicas.md")), &report).unwrap();
    println!("written to target/bench/operator-{n}-replicas.md");
}

/// Grows the cost fleet from `created` to `size` scalers (moved to the stand-in once above the
/// real-Prometheus limit), waits for every one's first sync and one period more; whether a real
/// Prometheus answers, and where the queries go.
async fn grow_settled<'a>(
    client: &kube::Client,
    options: &Options,
    (prometheus, stand_in): (&'a Prometheus, &'a StandIn),
    (created, server): (&mut usize, &mut String),
    size: usize,
) -> (bool, Queries<'a>) {
    let real = size <= options.real_prometheus_up_to;
    if !real && *server != stand_in.url {
        *server = stand_in.url.clone();
        repoint(client, *created, server).await;
    }
    grow(client, *created, size, server).await;
    *created = size;
    wait_synced(client, COST_NAMESPACE, size).await;
    tokio::time::sleep(SYNC_PERIOD + Duration::from_secs(2)).await;
    let queries = match real {
        true => Queries::Prometheus(prometheus),
        false => Queries::StandIn(stand_in),
    };
    (real, queries)
}

// ---------------------------------------------------------------- the operator under test

/// This build's operator, or the one `LLMSCALER_BENCH_OPERATOR` names.
fn operator_binary() -> std::path::PathBuf {
    std::env::var_os("LLMSCALER_BENCH_OPERATOR").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_BIN_EXE_llmscaleoperator")),
        std::path::PathBuf::from,
    )
}

/// `perf record` of the operator for one window, with call graphs from the unwind tables.
fn perf_record(pid: u32, size: usize) -> Child {
    let out = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("target/bench/perf-{size}.data"));
    Command::new("perf")
        .args(["record", "-F", "199", "--call-graph", "dwarf,16384", "-o"])
        .arg(out)
        .args(["-p", &pid.to_string(), "--", "sleep"])
        .arg(WINDOW.as_secs().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The release binary as a child process; killed when dropped.
struct OperatorProcess {
    child: Child,
    metrics_url: String,
    log: std::path::PathBuf,
    http: reqwest::Client,
}

impl OperatorProcess {
    async fn start() -> Self {
        Self::start_with(&[], "operator-bench.log").await
    }

    /// The operator with `extra` arguments, logging to target/bench/`log_name`.
    async fn start_with(extra: &[String], log_name: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(log_name);
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(operator_binary())
            .arg("--kubeconfig")
            .arg(kubeconfig_path())
            .args(["--health-address", &format!("127.0.0.1:{port}")])
            .args(["--disable-extmetrics", "--log-level", "warn"])
            // Only the bench's own scalers: other tests' scalers on a shared control plane would
            // count in its figures.
            .args([
                "--namespace",
                &format!("{COST_NAMESPACE},{REACTION_NAMESPACE}"),
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let operator = Self {
            child,
            metrics_url: format!("http://127.0.0.1:{port}/metrics"),
            log,
            http: reqwest::Client::new(),
        };
        let ready = format!("http://127.0.0.1:{port}/readyz");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = operator.http.get(&ready).send().await
                && r.status().is_success()
            {
                break operator;
            }
            assert!(
                Instant::now() < deadline,
                "the operator did not become ready within 60 s; see {}",
                operator.log.display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The operator's own /metrics.
    async fn exposition(&self) -> String {
        self.http
            .get(&self.metrics_url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The sum of the series starting with `prefix` whose labels contain `with`.
    async fn sum(&self, prefix: &str, with: &str) -> f64 {
        sum_of(&self.exposition().await, prefix, with)
    }
}

/// The sum of the series of `text` starting with `prefix` whose labels contain `with`.
fn sum_of(text: &str, prefix: &str, with: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- Prometheus stand-in

/// Answers every instant query at once with one sample of a settable value: the reaction is the
/// operator's own delay, not a Prometheus's.
struct StandIn {
    url: String,
    value: Arc<AtomicU64>,
    /// Queries answered so far.
    answered: Arc<AtomicU64>,
}

#[derive(Clone)]
struct StandInState {
    value: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
}

impl StandIn {
    async fn start(value: f64) -> Self {
        let state = StandInState {
            value: Arc::new(AtomicU64::new(value.to_bits())),
            answered: Arc::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/api/v1/query", get(answer).post(answer))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url,
            value: state.value,
            answered: state.answered,
        }
    }

    fn set(&self, value: f64) {
        self.value.store(value.to_bits(), Ordering::SeqCst);
    }
}

async fn answer(State(state): State<StandInState>) -> impl axum::response::IntoResponse {
    let value = f64::from_bits(state.value.load(Ordering::SeqCst));
    state.answered.fetch_add(1, Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    axum::Json(json!({
        "status": "success",
        "data": { "resultType": "vector", "result": [ { "metric": {}, "value": [now, value.to_string()] } ] }
    }))
}

// ---------------------------------------------------------------- objects

async fn install_crd(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("config/crd/bases/autoscaling.modelsphere.dev_llmscalers.yaml");
    let crd: CustomResourceDefinition =
        serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        "llmscalers.autoscaling.modelsphere.dev",
        &PatchParams::apply("llmscaler-bench").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let established = crds
            .get("llmscalers.autoscaling.modelsphere.dev")
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if established {
            return;
        }
        assert!(Instant::now() < deadline, "the CRD was not established");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The namespace, emptied of what an earlier run left. Namespaces are reused rather than
/// deleted: without kube-controller-manager a deleted namespace never finishes terminating.
async fn fresh_namespace(client: &kube::Client, name: &str) {
    support::ensure_namespace(client, name).await;
    clear(client, name).await;
}

/// Deletes the scalers and Deployments of a namespace and waits until they are gone.
async fn clear(client: &kube::Client, namespace: &str) {
    let scalers: Api<LLMScaler> = Api::namespaced(client.clone(), namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let all = ListParams::default();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        // A collection of thousands can outlast the request (the apiserver goes on deleting):
        // asked again until nothing is left.
        let _ = scalers
            .delete_collection(&DeleteParams::default(), &all)
            .await;
        let _ = deployments
            .delete_collection(&DeleteParams::default(), &all)
            .await;
        let left = scalers
            .list_metadata(&all)
            .await
            .map_or(1, |l| l.items.len())
            + deployments
                .list_metadata(&all)
                .await
                .map_or(1, |l| l.items.len());
        if left == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{left} objects left in {namespace}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [ { "name": "vllm", "image": "registry.k8s.io/pause:3.10" } ] }
            }
        }
    }))
    .unwrap()
}

/// Plays the Deployment controller: every replica of the current template is ready.
async fn settle(deployments: &Api<Deployment>, name: &str, replicas: i32) {
    let generation = deployments
        .get(name)
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap_or(1);
    let status = json!({ "status": {
        "observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
        "readyReplicas": replicas, "availableReplicas": replicas
    }});
    deployments
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

fn scaler(name: &str, target: &str, server: &str, extra: serde_json::Value) -> LLMScaler {
    let mut spec = json!({
        "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": target },
        "serverAddress": server,
        "minReplicas": 1, "maxReplicas": 4,
        "metrics": [ {
            "name": "kv-cache",
            "query": format!("avg(vllm:kv_cache_usage_perc{{namespace=\"bench\", app=\"{target}\"}})"),
            "target": "1"
        } ],
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": { "name": name }, "spec": spec
    }))
    .unwrap()
}

/// Adds scalers `from..to`, each with its own ready one-replica Deployment and a stabilization
/// window, so a steady scaler keeps a recommendation history in its status.
async fn grow(client: &kube::Client, from: usize, to: usize, server: &str) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), COST_NAMESPACE);
    let scalers: Api<LLMScaler> = Api::namespaced(client.clone(), COST_NAMESPACE);
    futures::stream::iter(from..to)
        .map(|i| {
            let (deployments, scalers) = (&deployments, &scalers);
            async move {
                let name = format!("model-{i}");
                deployments
                    .create(&PostParams::default(), &deployment(&name, 1))
                    .await
                    .unwrap();
                settle(deployments, &name, 1).await;
                let extra = json!({ "scaleDown": { "stabilizationWindowSeconds": 180 } });
                scalers
                    .create(&PostParams::default(), &scaler(&name, &name, server, extra))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// Points scalers `0..count` at `server` (a spec change: each syncs again at once).
async fn repoint(client: &kube::Client, count: usize, server: &str) {
    let scalers: Api<LLMScaler> = Api::namespaced(client.clone(), COST_NAMESPACE);
    let patch = json!({ "spec": { "serverAddress": server } });
    futures::stream::iter(0..count)
        .map(|i| {
            let (scalers, patch) = (&scalers, &patch);
            async move {
                scalers
                    .patch(
                        &format!("model-{i}"),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// Waits until every scaler of the namespace has reported a sync that decided 1 replica (and
/// read from the server it names now).
async fn wait_synced(client: &kube::Client, namespace: &str, count: usize) {
    let scalers: Api<LLMScaler> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + Duration::from_secs(1200);
    // Listing a big fleet is work for the apiserver too, which shares the cores.
    let every = Duration::from_secs(if count > 5_000 { 10 } else { 2 });
    loop {
        let mut synced = 0;
        let mut page = ListParams::default().limit(1_000);
        loop {
            let list = scalers.list(&page).await.unwrap();
            synced += list
                .items
                .iter()
                .filter(|s| {
                    s.status.as_ref().is_some_and(|st| {
                        st.desired_replicas == 1
                            && st.observed_generation == s.metadata.generation
                            && st
                                .conditions
                                .iter()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                    })
                })
                .count();
            match list.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => page = page.continue_token(&token),
                None => break,
            }
        }
        if synced >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {synced} of {count} scalers synced within 20 minutes"
        );
        tokio::time::sleep(every).await;
    }
}

// ---------------------------------------------------------------- cost

/// Where the cost scalers' queries go, and how many it answered.
enum Queries<'a> {
    Prometheus(&'a Prometheus),
    StandIn(&'a StandIn),
}

impl Queries<'_> {
    async fn total(&self) -> f64 {
        match self {
            Self::Prometheus(prometheus) => prometheus.queries().await.total(),
            Self::StandIn(stand_in) => stand_in.answered.load(Ordering::Relaxed) as f64,
        }
    }
}

/// Counters read at one instant.
struct Reading {
    at: Instant,
    cpu: Duration,
    syncs: f64,
    queries: f64,
    /// apiserver_request_total on the operator's resources, by verb.
    requests: BTreeMap<String, f64>,
    /// The operator's `sync_lateness_seconds` buckets: upper bound, cumulative count.
    lateness: Vec<(f64, f64)>,
    /// The operator's `query_duration_seconds` buckets (its turn at the server included).
    query_duration: Vec<(f64, f64)>,
}

impl Reading {
    async fn take(
        client: &kube::Client,
        operator: &OperatorProcess,
        queries: &Queries<'_>,
    ) -> Self {
        let fleet = Fleet::take(client, queries).await;
        Self::of(operator, &fleet).await
    }

    /// The operator's own counters, with the fleet's read once for every replica.
    async fn of(operator: &OperatorProcess, fleet: &Fleet) -> Self {
        let own = operator.exposition().await;
        Self {
            at: Instant::now(),
            cpu: cpu_time(operator.pid()),
            syncs: sum_of(&own, "llmscaleoperator_syncs_total{", ""),
            queries: fleet.queries,
            requests: fleet.requests.clone(),
            lateness: buckets(&own, "llmscaleoperator_sync_lateness_seconds_bucket"),
            query_duration: buckets(&own, "llmscaleoperator_query_duration_seconds_bucket"),
        }
    }
}

/// What the whole fleet's operators did, read at one instant: the queries the server answered
/// and the apiserver's requests on the operator's resources.
struct Fleet {
    queries: f64,
    requests: BTreeMap<String, f64>,
}

impl Fleet {
    async fn take(client: &kube::Client, queries: &Queries<'_>) -> Self {
        let text = client
            .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
            .await
            .unwrap();
        Self {
            queries: queries.total().await,
            requests: requests_by_verb(&text),
        }
    }
}

/// A histogram's cumulative buckets in an exposition, by upper bound (`+Inf` last).
fn buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let mut buckets: Vec<(f64, f64)> = support::samples(text, name)
        .into_iter()
        .filter_map(|(labels, count)| {
            let le = labels.get("le")?;
            let bound = match le.as_str() {
                "+Inf" => f64::INFINITY,
                le => le.parse().ok()?,
            };
            Some((bound, count))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
}

/// The `q` quantile of the observations between two readings of cumulative buckets, linear
/// within a bucket as PromQL's `histogram_quantile`; `None` without observations (or without
/// the histogram: an older build).
fn quantile_between(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let counts: Vec<(f64, f64)> = after
        .iter()
        .map(|(bound, n)| {
            let earlier = before
                .iter()
                .find(|(b, _)| b == bound)
                .map_or(0.0, |(_, n)| *n);
            (*bound, n - earlier)
        })
        .collect();
    let total = counts.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(bound, count) in &counts {
        if count >= rank {
            if bound.is_infinite() {
                return Some(lower.0);
            }
            let share = (rank - lower.1) / (count - lower.1).max(f64::MIN_POSITIVE);
            return Some(lower.0 + (bound - lower.0) * share);
        }
        lower = (bound, count);
    }
    Some(lower.0)
}

/// Sums `apiserver_request_total` over the operator's resources, by verb.
fn requests_by_verb(text: &str) -> BTreeMap<String, f64> {
    let mut by_verb = BTreeMap::new();
    for (labels, value) in support::samples(text, "apiserver_request_total") {
        let resource = labels
            .get("resource")
            .map(String::as_str)
            .unwrap_or_default();
        if OPERATOR_RESOURCES.contains(&resource) {
            let verb = labels.get("verb").cloned().unwrap_or_default();
            *by_verb.entry(verb).or_insert(0.0) += value;
        }
    }
    by_verb
}

fn is_read(verb: &str) -> bool {
    matches!(verb, "GET" | "LIST" | "WATCH")
}

struct Row {
    scalers: usize,
    /// Whether a real Prometheus answered (else the stand-in).
    real: bool,
    syncs_per_minute: f64,
    cpu_seconds_per_minute: f64,
    cpu_ms_per_sync: f64,
    rss_kib: u64,
    peak_kib: u64,
    reads_per_sync: f64,
    writes_per_sync: f64,
    queries_per_sync: f64,
    lateness_p50: Option<f64>,
    lateness_p99: Option<f64>,
    query_p99: Option<f64>,
    /// Requests of the window by verb, for the notes.
    verbs: BTreeMap<String, f64>,
}

impl Row {
    fn between(
        scalers: usize,
        real: bool,
        before: &Reading,
        after: &Reading,
        op: &OperatorProcess,
    ) -> Self {
        let minutes = after.at.duration_since(before.at).as_secs_f64() / 60.0;
        let syncs = (after.syncs - before.syncs).max(1.0);
        let verbs: BTreeMap<String, f64> = after
            .requests
            .iter()
            .map(|(verb, n)| {
                (
                    verb.clone(),
                    n - before.requests.get(verb).copied().unwrap_or(0.0),
                )
            })
            .filter(|(_, n)| *n > 0.0)
            .collect();
        let reads: f64 = verbs.iter().filter(|(v, _)| is_read(v)).map(|e| e.1).sum();
        let writes: f64 = verbs.iter().filter(|(v, _)| !is_read(v)).map(|e| e.1).sum();
        let cpu = after.cpu.saturating_sub(before.cpu).as_secs_f64();
        Self {
            scalers,
            real,
            syncs_per_minute: syncs / minutes,
            cpu_seconds_per_minute: cpu / minutes,
            cpu_ms_per_sync: cpu * 1000.0 / syncs,
            rss_kib: memory_kib(op.pid(), "VmRSS"),
            peak_kib: memory_kib(op.pid(), "VmHWM"),
            reads_per_sync: reads / syncs,
            writes_per_sync: writes / syncs,
            queries_per_sync: (after.queries - before.queries) / syncs,
            lateness_p50: quantile_between(&before.lateness, &after.lateness, 0.5),
            lateness_p99: quantile_between(&before.lateness, &after.lateness, 0.99),
            query_p99: quantile_between(&before.query_duration, &after.query_duration, 0.99),
            verbs,
        }
    }

    /// Syncs due per minute: one per scaler and sync period.
    fn due_per_minute(&self) -> f64 {
        self.scalers as f64 * 60.0 / SYNC_PERIOD.as_secs_f64()
    }

    fn line(&self) -> String {
        let seconds = |q: Option<f64>| q.map_or_else(|| "—".to_owned(), |s| format!("{s:.3}"));
        format!(
            "| {} | {} | {:.0} ({:.1}%) | {} | {} | {} | {:.2} | {:.3} | {:.1} | {:.1} | {:.4} | {:.4} | {:.2} |",
            self.scalers,
            if self.real { "Prometheus" } else { "stand-in" },
            self.syncs_per_minute,
            100.0 * self.syncs_per_minute / self.due_per_minute(),
            seconds(self.lateness_p50),
            seconds(self.lateness_p99),
            seconds(self.query_p99),
            self.cpu_seconds_per_minute,
            self.cpu_ms_per_sync,
            self.rss_kib as f64 / 1024.0,
            self.peak_kib as f64 / 1024.0,
            // abs: a sum of nothing is -0.0
            self.reads_per_sync.abs(),
            self.writes_per_sync.abs(),
            self.queries_per_sync,
        )
    }
}

// ---------------------------------------------------------------- load on Prometheus

/// What one way of querying did to Prometheus over a window.
struct Burst {
    scalers: usize,
    how: &'static str,
    /// Prometheus's own count of the window's queries, by status code.
    answered: QueryCounts,
    /// Queries the client gave up on (its 10 s timeout, a refused connection).
    client_errors: f64,
    /// Syncs held for want of a signal (the operator's own count; none for the replay).
    held_syncs: Option<f64>,
    peak_per_second: f64,
    mean_per_second: f64,
}

impl Burst {
    fn line(&self) -> String {
        format!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {} | {:.0} | {:.0} |",
            self.scalers,
            self.how,
            self.answered.total().abs(),
            self.answered.rejected().abs(),
            self.client_errors.abs(),
            self.held_syncs
                .map_or_else(|| "—".to_owned(), |n| format!("{:.0}", n.abs())),
            self.peak_per_second,
            self.mean_per_second,
        )
    }
}

/// What the operator did before syncs were spread and bounded, replayed from the bench: every
/// scaler's query sent at the same instant (as when it started with `scalers` scalers to list),
/// and again one sync period later (each scaler requeued exactly one period after its last
/// sync, so the alignment lasted), with the operator's 10 s request timeout.
async fn aligned_bursts(prometheus: &Prometheus, scalers: usize) -> Burst {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let before = prometheus.queries().await;
    let sampler = Sampler::start(prometheus, Duration::from_millis(250));
    let mut client_errors = 0.0;
    for round in 0..2 {
        if round > 0 {
            tokio::time::sleep(SYNC_PERIOD).await;
        }
        let all = (0..scalers).map(|i| {
            let request = http
                .get(format!("{}/api/v1/query", prometheus.url))
                .query(&[(
                    "query",
                    format!(
                        "avg(vllm:kv_cache_usage_perc{{namespace=\"bench\", app=\"model-{i}\"}})"
                    ),
                )]);
            async move { request.send().await.map(|r| r.status().as_u16()) }
        });
        let answers = futures::future::join_all(all).await;
        client_errors += answers.iter().filter(|a| a.is_err()).count() as f64;
    }
    // Prometheus counts a query when it is done with it, also one whose client gave up long
    // before: the window lasts until its count has stopped moving, so that none of these
    // leftovers is counted against the restart that follows.
    let mut last = prometheus.queries().await.total();
    let quiet_by = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = prometheus.queries().await.total();
        if now == last || Instant::now() > quiet_by {
            break;
        }
        last = now;
    }
    let answered = prometheus.queries().await.since(&before);
    let (peak_per_second, mean_per_second) = sampler.stop(Duration::from_secs(1));
    Burst {
        scalers,
        how: "aligned, unbounded (before; replayed)",
        answered,
        client_errors,
        held_syncs: None,
        peak_per_second,
        mean_per_second,
    }
}

/// The operator started with `scalers` scalers to sync, watched for two sync periods.
async fn restart(
    client: &kube::Client,
    prometheus: &Prometheus,
    scalers: usize,
) -> (OperatorProcess, Burst) {
    let before = prometheus.queries().await;
    let sampler = Sampler::start(prometheus, Duration::from_millis(250));
    let operator = OperatorProcess::start().await;
    tokio::time::sleep(RESTART_WINDOW).await;
    let answered = prometheus.queries().await.since(&before);
    let (peak_per_second, mean_per_second) = sampler.stop(Duration::from_secs(1));
    let held = operator
        .sum("llmscaleoperator_syncs_total{", "result=\"held\"")
        .await;
    let errors = operator
        .sum("llmscaleoperator_query_errors_total{", "")
        .await;
    // Every scaler still reads 1 replica: nothing was lost to the restart.
    wait_synced(client, COST_NAMESPACE, scalers).await;
    (
        operator,
        Burst {
            scalers,
            how: "spread, at most 8 in flight (now)",
            answered,
            client_errors: errors,
            held_syncs: Some(held),
            peak_per_second,
            mean_per_second,
        },
    )
}

// ---------------------------------------------------------------- reaction

struct Reaction {
    period: Duration,
    latencies: Vec<Duration>,
}

impl Reaction {
    fn quantile(&self, q: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }
}

/// 50 metric steps, alternately up (1 -> 2 replicas) and down (2 -> 1), each at a random phase
/// of the sync timer; the time from the step until spec.replicas holds the new count.
async fn reaction(
    client: &kube::Client,
    operator: &OperatorProcess,
    prometheus: &StandIn,
) -> Reaction {
    fresh_namespace(client, REACTION_NAMESPACE).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), REACTION_NAMESPACE);
    let scalers: Api<LLMScaler> = Api::namespaced(client.clone(), REACTION_NAMESPACE);
    deployments
        .create(&PostParams::default(), &deployment("model", 1))
        .await
        .unwrap();
    settle(&deployments, "model", 1).await;
    prometheus.set(1.0);
    // maxReplicas 2 keeps a load of 2 per replica from compounding once the second is ready;
    // without a scale-down window (the default holds a scale-down for 5 minutes) the down steps
    // measure the operator's delay too.
    let extra = json!({
        "syncPeriodSeconds": REACTION_PERIOD_SECONDS, "maxReplicas": 2,
        "scaleDown": { "stabilizationWindowSeconds": 0 }
    });
    scalers
        .create(
            &PostParams::default(),
            &scaler("model", "model", &prometheus.url, extra),
        )
        .await
        .unwrap();
    wait_synced(client, REACTION_NAMESPACE, 1).await;
    let period = Duration::from_secs(REACTION_PERIOD_SECONDS);
    println!(
        "reaction: {STEPS} steps on a {}s sync period (operator pid {})",
        period.as_secs(),
        operator.pid()
    );

    // A fixed seed: the phases differ from step to step, and from run to run they are the same.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut latencies = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let phase = Duration::from_millis(seed % (REACTION_PERIOD_SECONDS * 1000));
        tokio::time::sleep(phase).await;
        // Per-replica load 2 on one replica wants two (and no more: maxReplicas); 0.5 on two
        // wants one.
        let (value, to) = if step % 2 == 0 { (2.0, 2) } else { (0.5, 1) };
        prometheus.set(value);
        let stepped = Instant::now();
        let deadline = stepped + period * 10;
        loop {
            let replicas = deployments
                .get("model")
                .await
                .unwrap()
                .spec
                .and_then(|s| s.replicas);
            if replicas == Some(to) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "step {step}: spec.replicas still {replicas:?}, not {to}, after {:?}",
                period * 10
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        latencies.push(stepped.elapsed());
        settle(&deployments, "model", to).await;
        // The next step starts from a fleet the operator has seen settle.
        let deadline = Instant::now() + period * 10;
        loop {
            let current = scalers
                .get("model")
                .await
                .unwrap()
                .status
                .map(|s| s.current_replicas);
            if current == Some(to) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "step {step}: the scaler never saw {to} ready"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Reaction { period, latencies }
}

// ---------------------------------------------------------------- report

fn report(rows: &[Row], bursts: &[Burst], reaction: Option<&Reaction>) -> String {
    let mut out = String::new();
    writeln!(
        out,
        "## Operator cost (steady metric, sync period {} s, stabilization window 180 s)\n",
        SYNC_PERIOD.as_secs()
    )
    .unwrap();
    writeln!(out, "| scalers | answered by | syncs/min (% of due) | lateness p50 s | lateness p99 s | query p99 s | CPU s/min | CPU ms/sync | RSS MiB | peak RSS MiB | apiserver reads/sync | apiserver writes/sync | PromQL queries/sync |").unwrap();
    writeln!(
        out,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    .unwrap();
    for row in rows {
        writeln!(out, "{}", row.line()).unwrap();
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        let per_scaler = (last.rss_kib as f64 - first.rss_kib as f64)
            / (last.scalers - first.scalers).max(1) as f64;
        writeln!(
            out,
            "\nResident memory grows by {per_scaler:.1} KiB per scaler from {} to {} scalers (goal: < 10 KiB).",
            first.scalers, last.scalers
        )
        .unwrap();
        writeln!(
            out,
            "CPU per sync at {} scalers is {:.2}× that at {} (goal: within 1.5×).",
            last.scalers,
            last.cpu_ms_per_sync / first.cpu_ms_per_sync.max(f64::MIN_POSITIVE),
            first.scalers
        )
        .unwrap();
    }
    for row in rows {
        writeln!(
            out,
            "Requests on the operator's resources in the {} scaler window: {:?}",
            row.scalers, row.verbs
        )
        .unwrap();
    }
    writeln!(
        out,
        "\n## Load on Prometheus around a restart ({} s windows; Prometheus's defaults, 20 queries at once)\n",
        RESTART_WINDOW.as_secs()
    )
    .unwrap();
    writeln!(out, "| scalers | how | queries Prometheus counted | rejected (503, 429) | gave up (client) | syncs held | busiest second (queries/s) | mean (queries/s) |").unwrap();
    writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- |").unwrap();
    for burst in bursts {
        writeln!(out, "{}", burst.line()).unwrap();
    }
    writeln!(
        out,
        "\nBefore is replayed by the bench (every scaler's query at one instant, twice, a period \
         apart); now is the operator itself, started with every scaler to sync. For the operator, \
         \"gave up\" is its own count of queries without a usable value."
    )
    .unwrap();
    let Some(reaction) = reaction else {
        return out;
    };
    let period = reaction.period.as_secs_f64();
    let p50 = reaction.quantile(0.5).as_secs_f64();
    let p99 = reaction.quantile(0.99).as_secs_f64();
    writeln!(out, "\n## Reaction (metric step to spec.replicas written, {} steps, sync period {period:.0} s)\n", reaction.latencies.len()).unwrap();
    writeln!(out, "| p50 | p99 | p50 / period | p99 / period |").unwrap();
    writeln!(out, "| --- | --- | --- | --- |").unwrap();
    writeln!(
        out,
        "| {:.0} ms | {:.0} ms | {:.2} | {:.2} |",
        p50 * 1000.0,
        p99 * 1000.0,
        p50 / period,
        p99 / period
    )
    .unwrap();
    out
}
