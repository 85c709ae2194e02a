//! The llmscaleoperator binary: `run` (default), `crd`, `version`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use llmscaleoperator::controller::{self, PreflightError, Scope, Shared};
use llmscaleoperator::signals::{self, cache::MetricCache, http::HttpError};
use llmscaleoperator::telemetry::{self, Health, LogFormat, TelemetryError, metrics::Metrics};
use llmscaleoperator::{api, tls};

/// Autoscales LLM inference servers (vLLM and the like) on KV-cache use, queue depth or an
/// external planner's decision instead of CPU.
#[derive(Parser, Debug)]
#[command(
    name = "llmscaleoperator",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Flags of `run`, accepted without the subcommand too.
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator (the default when no subcommand is given).
    Run(RunArgs),
    /// Print the LLMScaler CustomResourceDefinition as YAML.
    Crd,
    /// Print the version.
    Version,
}

#[derive(Args, Debug, Clone)]
struct RunArgs {
    /// Kubeconfig to use instead of the in-cluster service account or $KUBECONFIG.
    #[arg(long, env = "LLMSCALER_KUBECONFIG", value_name = "PATH")]
    kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use (default: the file's current context).
    #[arg(long, env = "LLMSCALER_CONTEXT")]
    context: Option<String>,

    /// Only reconcile LLMScalers in this namespace (default: all namespaces).
    #[arg(long, env = "LLMSCALER_NAMESPACE")]
    namespace: Option<String>,

    /// Address for /healthz, /readyz and the operator's own /metrics.
    #[arg(long, env = "LLMSCALER_HEALTH_ADDRESS", default_value = "0.0.0.0:8081")]
    health_address: SocketAddr,

    /// Log line format.
    #[arg(long, env = "LLMSCALER_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,

    /// Log filter, e.g. info or llmscaleoperator=debug,kube=info (RUST_LOG overrides it).
    #[arg(long, env = "LLMSCALER_LOG_LEVEL", default_value = "info")]
    log_level: String,
}

#[derive(Debug, Error)]
enum MainError {
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    #[error(transparent)]
    Crd(#[from] api::CrdError),
    #[error("cannot load the Kubernetes client configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Crd) => print_crd(),
        Some(Command::Version) => {
            println!("llmscaleoperator {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Some(Command::Run(args)) => run(args),
        None => run(cli.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn print_crd() -> Result<(), MainError> {
    print!("{}", api::crd_yaml()?);
    Ok(())
}

fn run(args: RunArgs) -> Result<(), MainError> {
    // Before anything can open a TLS connection.
    tls::install_crypto_provider()?;
    telemetry::init_logging(args.log_format, &args.log_level)?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(MainError::Runtime)?
        .block_on(run_async(args))
}

async fn run_async(args: RunArgs) -> Result<(), MainError> {
    let config = client_config(&args).await?;
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| MainError::Config(e.to_string()))?;
    let scope = Scope {
        namespace: args.namespace.clone(),
    };
    controller::preflight(&client, &url, &scope).await?;
    tracing::info!(apiserver = %url, namespace = ?scope.namespace, "connected; LLMScaler CRD is installed");

    let shutdown = CancellationToken::new();
    let health = Health::default();
    let metrics = Metrics::default();
    let listener = telemetry::bind_health(args.health_address).await?;
    let health_server = tokio::spawn(telemetry::serve_health(
        listener,
        health.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(cancel_on_signal(shutdown.clone()));

    health.set_ready(true);
    tracing::info!(health = %args.health_address, "operator running");
    let shared = Shared {
        cache: MetricCache::default(),
        metrics,
        http: signals::http::client()?,
        instance: std::env::var("POD_NAME").ok(),
    };
    controller::run(client, scope, shared, shutdown.clone()).await;
    shutdown.cancel();
    if let Ok(Err(error)) = health_server.await {
        tracing::warn!(%error, "health server stopped with an error");
    }
    tracing::info!("operator stopped");
    Ok(())
}

async fn client_config(args: &RunArgs) -> Result<Config, MainError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| MainError::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| MainError::Config(format!("{}: {e}", path.display())))
        }
        None if args.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| MainError::Config(e.to_string())),
        None => Config::infer().await.map_err(|e| {
            MainError::Config(format!(
                "{e} (run in a cluster, set KUBECONFIG or pass --kubeconfig)"
            ))
        }),
    }
}

/// Ctrl-C or SIGTERM starts a graceful shutdown.
async fn cancel_on_signal(shutdown: CancellationToken) {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutdown requested");
    shutdown.cancel();
}
