//! fleet-sim: the fleet model run live against a cluster. It follows the Ready pods of a
//! Deployment (kwok makes them Ready on the local control plane), replays a trace over them in
//! real time (or faster) and serves their vLLM metrics on /metrics for Prometheus to scrape.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config, ResourceExt};
use llmscaleoperator_sim::exposition::{self, Labels};
use llmscaleoperator_sim::fleet::{Fleet, FleetConfig};
use llmscaleoperator_sim::trace::Trace;

#[derive(Parser, Debug)]
#[command(
    name = "fleet-sim",
    about = "A simulated vLLM fleet for the autoscaler's demo and tests"
)]
struct Args {
    /// Kubeconfig of the cluster whose pods make up the fleet.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Namespace of the pods.
    #[arg(long)]
    namespace: String,
    /// Label selector of the fleet's pods, e.g. app=vllm-sim; its app value labels the metrics.
    #[arg(long)]
    selector: String,
    /// Address for /metrics.
    #[arg(long, default_value = "127.0.0.1:9400")]
    listen: SocketAddr,
    /// A built-in trace (steady, diurnal, burst, idle) or a trace file.
    #[arg(long, default_value = "burst")]
    trace: String,
    /// Length of a built-in trace, in simulated seconds.
    #[arg(long, default_value_t = 300.0)]
    duration: f64,
    /// Simulated seconds per real second.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Seconds from a pod's Ready to its first request (model load), simulated time.
    #[arg(long, default_value_t = 20.0)]
    startup_delay: f64,
    /// Print a status line every real second.
    #[arg(long)]
    progress: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(error) = rustls::crypto::ring::default_provider().install_default() {
        eprintln!("error: a crypto provider is already installed: {error:?}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let trace = match Trace::builtin(&args.trace, args.duration) {
        Some(trace) => trace,
        None => {
            let text = std::fs::read_to_string(&args.trace).map_err(|e| {
                format!(
                    "--trace {}: not a built-in trace and not a readable file: {e}",
                    args.trace
                )
            })?;
            Trace::parse(&text).map_err(|e| format!("{}: {e}", args.trace))?
        }
    };
    if !(args.speed.is_finite() && args.speed > 0.0) {
        return Err(format!(
            "--speed must be a positive number, got {}",
            args.speed
        ));
    }
    let app = args
        .selector
        .split(',')
        .find_map(|kv| kv.strip_prefix("app="))
        .unwrap_or("vllm")
        .to_owned();
    let labels = Labels {
        namespace: args.namespace.clone(),
        app,
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .map_err(|e| format!("{}: {e}", args.kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| format!("{}: {e}", args.kubeconfig.display()))?;
    let client = Client::try_from(config).map_err(|e| e.to_string())?;

    let pods: Api<Pod> = Api::namespaced(client, &args.namespace);
    let (store, writer) = reflector::store();
    let watch = reflector::reflector(
        writer,
        watcher(pods, watcher::Config::default().labels(&args.selector)),
    )
    .default_backoff()
    .touched_objects()
    .for_each(|_| futures::future::ready(()));
    tokio::spawn(watch);

    let fleet = Arc::new(Mutex::new(Fleet::new(FleetConfig {
        startup_delay: Duration::from_secs_f64(args.startup_delay.max(0.0)),
        ..FleetConfig::default()
    })));
    let served = fleet.clone();
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let fleet = served.clone();
            let labels = labels.clone();
            async move {
                let fleet = fleet.lock().unwrap_or_else(PoisonError::into_inner);
                exposition::render(&fleet, &labels)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    eprintln!(
        "fleet-sim: {} over pods {} in {}, /metrics on {}",
        args.trace, args.selector, args.namespace, args.listen
    );

    let tick = Duration::from_millis(100);
    let mut ticker = tokio::time::interval(tick);
    let mut last_print = Instant::now();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        let ready: Vec<String> = store
            .state()
            .iter()
            .filter(|pod| is_ready(pod))
            .map(|pod| pod.name_any())
            .collect();
        let mut fleet = fleet.lock().unwrap_or_else(PoisonError::into_inner);
        fleet.set_pods(ready);
        fleet.step(tick.mul_f64(args.speed), &trace);
        if args.progress && last_print.elapsed() >= Duration::from_secs(1) {
            last_print = Instant::now();
            let t = fleet.totals();
            let pods: Vec<_> = fleet.pods().collect();
            let kv = if pods.is_empty() {
                0.0
            } else {
                pods.iter().map(|p| p.kv_usage).sum::<f64>() / pods.len() as f64
            };
            eprintln!(
                "t={:>6.0}s load={:>5.1}/s pods={} kv={:>3.0}% queued={} served={} slo-missed={} lost={}",
                fleet.now().as_secs_f64(),
                trace.rate(fleet.now()),
                pods.len(),
                kv * 100.0,
                fleet.queued(),
                t.finished,
                t.slo_violations,
                t.lost
            );
        }
    }
}

/// Ready and not on its way out.
fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
