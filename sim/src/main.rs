//! fleet-sim: the fleet model run live against a cluster (see `live`). On the local control
//! plane kwok makes the Deployment's pods Ready.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kube::{Client, Config};
use llmscaleoperator_sim::fleet::FleetConfig;
use llmscaleoperator_sim::live::{self, LiveOptions};
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
    /// The served model name: the `model_name` label of every vllm:* series.
    #[arg(long, default_value = llmscaleoperator_sim::fleet::DEFAULT_MODEL_NAME)]
    model_name: String,
    /// Print a status line every real second.
    #[arg(long)]
    progress: bool,
    /// Show this Deployment's spec.replicas beside the fleet.
    #[arg(long)]
    deployment: Option<String>,
    /// Show this LLMScaler's desired replicas beside the fleet.
    #[arg(long)]
    scaler: Option<String>,
    /// Stop after this many real seconds (default: at Ctrl-C).
    #[arg(long)]
    seconds: Option<u64>,
    /// Write an SVG plot of the run here when it ends.
    #[arg(long)]
    plot: Option<PathBuf>,
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
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .map_err(|e| format!("{}: {e}", args.kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| format!("{}: {e}", args.kubeconfig.display()))?;
    let client = Client::try_from(config).map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    eprintln!(
        "fleet-sim: {} over pods {} in {}, /metrics on {}",
        args.trace, args.selector, args.namespace, args.listen
    );
    let title = format!(
        "{} trace, {} in {}",
        args.trace, args.selector, args.namespace
    );
    let options = LiveOptions {
        namespace: args.namespace,
        selector: args.selector,
        trace,
        speed: args.speed,
        fleet: FleetConfig {
            startup_delay: Duration::from_secs_f64(args.startup_delay.max(0.0)),
            model_name: args.model_name,
            ..FleetConfig::default()
        },
        progress: args.progress,
        deployment: args.deployment,
        scaler: args.scaler,
    };
    let limit = args.seconds;
    let stop = async move {
        match limit {
            Some(seconds) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    () = tokio::time::sleep(Duration::from_secs(seconds)) => {}
                }
            }
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    let report = live::run(client, listener, options, stop).await?;
    let t = &report.totals;
    eprintln!(
        "fleet-sim: {} requests, {} served, {} missed the TTFT SLO, {} lost with a pod, {} warm caches evicted, {:.2} replica-hours",
        t.arrived,
        t.finished,
        t.slo_violations,
        t.lost,
        t.warm_evictions,
        t.pod_seconds / 3600.0
    );
    if let Some(path) = args.plot {
        std::fs::write(
            &path,
            llmscaleoperator_sim::plot::svg(&report.samples, &title).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("fleet-sim: plot written to {}", path.display());
    }
    Ok(())
}
