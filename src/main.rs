//! The llmscaleoperator binary: `run` (default), `crd`, `version`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use llmscaleoperator::controller::{self, PreflightError, Scope, Shared};
use llmscaleoperator::extmetrics::certs::{self, Policy, Source};
use llmscaleoperator::extmetrics::registration::Registrar;
use llmscaleoperator::extmetrics::review::Reviewer;
use llmscaleoperator::extmetrics::server::{ApiState, serve, watch_request_header};
use llmscaleoperator::leader::sharded::ShardConfig;
use llmscaleoperator::leader::{self, Election, Leadership, LeaseConfig, Timing};
use llmscaleoperator::metric_cache::MetricCache;
use llmscaleoperator::signals::{self, http::HttpError};
use llmscaleoperator::supervisor::{Supervisor, TaskStopped};
use llmscaleoperator::telemetry::{self, Health, LogFormat, TelemetryError, metrics::Metrics};
use llmscaleoperator::{api, tls};

/// jemalloc, in every build: with 20,000 scalers it holds a fifth less memory than glibc's
/// allocator at less CPU per sync (docs/operations.md, "Sizing"), and the image's static musl
/// build gets the allocator the benches measure instead of musl's own.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    Run(Box<RunArgs>),
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

    /// Only reconcile LLMScalers in these namespaces (comma-separated or repeated; default: all
    /// namespaces). Nothing is then listed or watched cluster-wide, so Roles in these namespaces
    /// are enough.
    #[arg(long, env = "LLMSCALER_NAMESPACE", value_delimiter = ',')]
    namespace: Vec<String>,

    /// Hosts a scaler's serverAddress may name (comma-separated or repeated): a host, a wildcard
    /// domain like *.monitoring.svc, or *, each optionally with :port. Default: any address.
    /// Whoever can create an LLMScaler makes the operator call its serverAddress; this narrows
    /// where those requests can go.
    #[arg(long, env = "LLMSCALER_ALLOWED_SERVER_ADDRESS", value_delimiter = ',')]
    allowed_server_address: Vec<String>,

    /// Requests in flight to one signal server (Prometheus, a decision server) at a time, from
    /// all scalers together; the rest wait their turn. An overloaded answer (429, 503) is
    /// retried with backoff for up to 5 s.
    #[arg(
        long,
        env = "LLMSCALER_MAX_REQUESTS_PER_SERVER",
        default_value_t = signals::gate::DEFAULT_PER_SERVER,
        value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u16).range(1..), usize::from)
    )]
    max_requests_per_server: usize,

    /// Address for /healthz, /readyz and the operator's own /metrics.
    #[arg(long, env = "LLMSCALER_HEALTH_ADDRESS", default_value = "0.0.0.0:8081")]
    health_address: SocketAddr,

    /// Serve /metrics here, over HTTPS, instead of on the health address: only to callers whose
    /// bearer token the API server accepts (TokenReview) and who may get the non-resource URL
    /// /metrics (SubjectAccessReview), as kube-rbac-proxy does. The probes stay open on the
    /// health address.
    #[arg(long, env = "LLMSCALER_METRICS_SECURE_ADDRESS", value_name = "ADDR")]
    metrics_secure_address: Option<SocketAddr>,

    /// Log line format.
    #[arg(long, env = "LLMSCALER_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,

    /// Log filter, e.g. info or llmscaleoperator=debug,kube=info (RUST_LOG overrides it).
    #[arg(long, env = "LLMSCALER_LOG_LEVEL", default_value = "info")]
    log_level: String,

    /// Address of the external.metrics.k8s.io API (HTTPS).
    #[arg(
        long,
        env = "LLMSCALER_EXTMETRICS_ADDRESS",
        default_value = "0.0.0.0:6443"
    )]
    extmetrics_address: SocketAddr,

    /// Do not serve the external metrics API.
    #[arg(long, env = "LLMSCALER_DISABLE_EXTMETRICS")]
    disable_extmetrics: bool,

    /// Keep the serving certificate (and its CA) in this Secret of the Service's namespace:
    /// created if missing, shared by every replica, renewed before it expires and reloaded
    /// without a restart. Without any certificate option a CA and certificate are made in
    /// memory at start (fine for a single replica).
    #[arg(
        long,
        env = "LLMSCALER_EXTMETRICS_TLS_SECRET",
        value_name = "NAME",
        conflicts_with_all = ["extmetrics_tls_existing_secret", "extmetrics_tls_cert_file"]
    )]
    extmetrics_tls_secret: Option<String>,

    /// Serve the certificate of a Secret someone else keeps (e.g. cert-manager: tls.crt,
    /// tls.key, and ca.crt for the caBundle), reloaded when it changes.
    #[arg(
        long,
        env = "LLMSCALER_EXTMETRICS_TLS_EXISTING_SECRET",
        value_name = "NAME",
        conflicts_with = "extmetrics_tls_cert_file"
    )]
    extmetrics_tls_existing_secret: Option<String>,

    /// PEM certificate (chain) for the external metrics API; with --extmetrics-tls-key-file.
    /// Read again when the files change.
    #[arg(
        long,
        env = "LLMSCALER_EXTMETRICS_TLS_CERT_FILE",
        value_name = "PATH",
        requires = "extmetrics_tls_key_file"
    )]
    extmetrics_tls_cert_file: Option<PathBuf>,

    /// PEM private key for --extmetrics-tls-cert-file.
    #[arg(
        long,
        env = "LLMSCALER_EXTMETRICS_TLS_KEY_FILE",
        value_name = "PATH",
        requires = "extmetrics_tls_cert_file"
    )]
    extmetrics_tls_key_file: Option<PathBuf>,

    /// Name of the Service in front of the external metrics API (for the generated certificate).
    #[arg(
        long,
        env = "LLMSCALER_EXTMETRICS_SERVICE",
        default_value = "llmscaleoperator"
    )]
    extmetrics_service: String,

    /// Namespace of that Service (default: $POD_NAMESPACE, else "default").
    #[arg(long, env = "LLMSCALER_EXTMETRICS_SERVICE_NAMESPACE")]
    extmetrics_service_namespace: Option<String>,

    /// Port of that Service.
    #[arg(long, env = "LLMSCALER_EXTMETRICS_SERVICE_PORT", default_value_t = 443)]
    extmetrics_service_port: i32,

    /// Register the API with the aggregator (APIService v1beta1.external.metrics.k8s.io). An
    /// APIService created by anyone else is left alone and reported.
    #[arg(long, env = "LLMSCALER_REGISTER_APISERVICE")]
    register_apiservice: bool,

    /// Run as one of several replicas: only the holder of a coordination.k8s.io Lease writes
    /// (replicas, pod marks, status, events, the APIService caBundle); the others evaluate and
    /// serve the external metrics API, ready to take over.
    #[arg(long, env = "LLMSCALER_LEADER_ELECT")]
    leader_elect: bool,

    /// Name of the leader Lease.
    #[arg(
        long,
        env = "LLMSCALER_LEADER_ELECT_LEASE",
        default_value = "llmscaleoperator"
    )]
    leader_elect_lease: String,

    /// Namespace of the leader Lease (default: $POD_NAMESPACE, else "default").
    #[arg(long, env = "LLMSCALER_LEADER_ELECT_NAMESPACE")]
    leader_elect_namespace: Option<String>,

    /// Seconds a Lease not renewed stays valid: a standby takes over this long after the leader
    /// stops renewing; the leader itself stops writing after two thirds of it.
    #[arg(
        long,
        env = "LLMSCALER_LEADER_ELECT_LEASE_SECONDS",
        default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(2..=300)
    )]
    leader_elect_lease_seconds: u64,

    /// Divide the scalers among the replicas: each scaler belongs to one of this many shards (a
    /// hash of its uid), each shard is led through a Lease of its own
    /// (<lease>-shard-<i>-of-<n>), and each replica leads its share of them, evaluating and
    /// writing only their scalers; the external metrics API of any replica still serves every
    /// scaler (the others' from their status). 1: one Lease, one writer, every replica
    /// evaluates every scaler. Every replica must run with the same count.
    #[arg(
        long,
        env = "LLMSCALER_SHARDS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(leader::sharded::MAX_SHARDS))
    )]
    shards: u32,

    /// CA bundle (PEM) for the APIService when --extmetrics-tls-cert-file is given.
    #[arg(long, env = "LLMSCALER_EXTMETRICS_TLS_CA_FILE", value_name = "PATH")]
    extmetrics_tls_ca_file: Option<PathBuf>,
}

#[derive(Debug, Error)]
enum MainError {
    #[error(transparent)]
    AllowList(#[from] signals::allow::AllowError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    #[error(transparent)]
    Crd(#[from] api::CrdError),
    #[error("cannot load the Kubernetes client configuration from {}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot load the Kubernetes client configuration")]
    Context(#[source] kube::config::KubeconfigError),
    #[error(
        "cannot load the Kubernetes client configuration (run in a cluster, set KUBECONFIG or pass --kubeconfig)"
    )]
    Infer(#[source] kube::config::InferConfigError),
    #[error("cannot build the Kubernetes client")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("external metrics API: cannot listen on {address}")]
    ExtmetricsListen {
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--register-apiservice needs the CA of the serving certificate: --extmetrics-tls-ca-file, or ca.crt in the existing Secret"
    )]
    RegisterWithoutCa,
    #[error("external metrics API: serving certificate")]
    Certificates(#[from] certs::CertError),
    #[error(transparent)]
    TaskStopped(#[from] TaskStopped),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("--shards {0} needs --leader-elect: each shard is led through a Lease")]
    ShardsWithoutElection(u32),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Crd) => print_crd(),
        Some(Command::Version) => {
            println!("llmscaleoperator {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Some(Command::Run(args)) => run(*args),
        None => run(cli.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", llmscaleoperator::error_chain::Chain(&error));
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
    if args.shards > 1 && !args.leader_elect {
        return Err(MainError::ShardsWithoutElection(args.shards));
    }
    let allowed = signals::allow::AllowList::parse(&args.allowed_server_address)?;
    signals::gate::configure(args.max_requests_per_server);
    let config = client_config(&args).await?;
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(MainError::Client)?;
    let scope = Scope::namespaces(args.namespace.clone());
    controller::preflight(&client, &url, &scope).await?;
    tracing::info!(apiserver = %url, namespaces = %scope.describe(), "connected; LLMScaler CRD is installed");

    let shutdown = CancellationToken::new();
    // Every background task runs under it: one that stops early stops the operator.
    let supervisor = Supervisor::new(shutdown.clone());
    let health = Health::default();
    let metrics = Metrics::default();
    let listener = telemetry::bind_health(args.health_address).await?;
    let serving = telemetry::serve_health(
        listener,
        health.clone(),
        metrics.clone(),
        args.metrics_secure_address.is_none(),
        shutdown.clone(),
    );
    supervisor.spawn_service("health server", async move {
        if let Err(error) = serving.await {
            tracing::error!(error = %llmscaleoperator::error_chain::Chain(&error), "health server stopped with an error");
        }
    });
    if let Some(address) = args.metrics_secure_address {
        let listener = std::net::TcpListener::bind(address).map_err(|source| {
            MainError::Telemetry(TelemetryError::SecureServe {
                addr: address,
                source,
            })
        })?;
        let serving = telemetry::serve_secure_metrics(
            listener,
            Arc::new(Reviewer::new(client.clone())),
            metrics.clone(),
            shutdown.clone(),
        );
        supervisor.spawn_service("authenticated metrics server", async move {
            if let Err(error) = serving.await {
                tracing::error!(error = %llmscaleoperator::error_chain::Chain(&error), "authenticated metrics server stopped with an error");
            }
        });
        tracing::info!(%address, path = telemetry::METRICS_PATH, "serving metrics to authorized callers only");
    }
    supervisor.spawn_service("signal handler", cancel_on_signal(shutdown.clone()));

    tracing::info!(health = %args.health_address, "operator running");
    metrics.shards.set(i64::from(args.shards));
    let election = args.leader_elect.then(|| {
        let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
            format!(
                "{}-{}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "llmscaleoperator".to_owned()),
                std::process::id()
            )
        });
        let namespace = args
            .leader_elect_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".to_owned());
        let timing = Timing::for_lease(Duration::from_secs(args.leader_elect_lease_seconds));
        if args.shards > 1 {
            let config = ShardConfig {
                namespace,
                name: args.leader_elect_lease.clone(),
                identity,
                timing,
                shards: args.shards,
            };
            tracing::info!(lease = %config.name, namespace = %config.namespace, identity = %config.identity, shards = config.shards, "campaigning for a share of the shards");
            let (leader, led) = (metrics.leader.clone(), metrics.shards_led.clone());
            let (election, campaign) = leader::sharded::start(client.clone(), config, move |n| {
                leader.set(i64::from(n > 0));
                led.set(i64::try_from(n).unwrap_or(i64::MAX));
            });
            supervisor.spawn_final_service("leader election", campaign);
            return election;
        }
        let config = LeaseConfig {
            namespace,
            name: args.leader_elect_lease.clone(),
            identity,
            timing,
        };
        tracing::info!(lease = %config.name, namespace = %config.namespace, identity = %config.identity, "campaigning for leadership");
        let (leader, led) = (metrics.leader.clone(), metrics.shards_led.clone());
        let (election, campaign) = leader::start(client.clone(), config, move |leading| {
            leader.set(i64::from(leading));
            led.set(i64::from(leading));
        });
        supervisor.spawn_final_service("leader election", campaign);
        election
    });
    let leadership = election
        .as_ref()
        .map_or_else(Leadership::always, Election::leadership);
    if election.is_none() {
        metrics.leader.set(1);
        metrics.shards_led.set(1);
    }
    let cache = MetricCache::default();
    if !args.disable_extmetrics {
        start_extmetrics(
            &args,
            client.clone(),
            cache.clone(),
            leadership.clone(),
            &supervisor,
        )
        .await?;
    }
    // Ready once the external metrics API is up (and registered, when asked).
    health.set_ready(true);
    let shared = Shared {
        cache,
        metrics,
        http: signals::http::client()?,
        instance: std::env::var("POD_NAME").ok(),
        leadership,
        allowed,
    };
    controller::run(client, scope, shared, supervisor.clone()).await;
    shutdown.cancel();
    // Syncs in flight have finished: hand the Lease over so a standby need not wait it out.
    if let Some(election) = election {
        election.release().await;
    }
    supervisor.drain(SHUTDOWN_GRACE).await;
    if let Some(stopped) = supervisor.stopped() {
        return Err(stopped.into());
    }
    tracing::info!("operator stopped");
    Ok(())
}

/// How long the servers and watches may take to stop once the controller has.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Binds and starts the external metrics API (and registers it when asked); a taken port fails
/// start-up.
async fn start_extmetrics(
    args: &RunArgs,
    client: Client,
    cache: MetricCache,
    leadership: Leadership,
    supervisor: &Supervisor,
) -> Result<(), MainError> {
    let namespace = args
        .extmetrics_service_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "default".to_owned());
    let service = args.extmetrics_service.clone();
    let names = vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        "localhost".to_owned(),
    ];
    let source = match (
        &args.extmetrics_tls_secret,
        &args.extmetrics_tls_existing_secret,
        &args.extmetrics_tls_cert_file,
        &args.extmetrics_tls_key_file,
    ) {
        (Some(name), _, _, _) => Source::ManagedSecret {
            namespace: namespace.clone(),
            name: name.clone(),
            names,
            policy: Policy::default(),
        },
        (None, Some(name), _, _) => Source::ExistingSecret {
            namespace: namespace.clone(),
            name: name.clone(),
        },
        (None, None, Some(cert), Some(key)) => Source::Files {
            cert: cert.clone(),
            key: key.clone(),
            ca: args.extmetrics_tls_ca_file.clone(),
        },
        _ => Source::Ephemeral { names },
    };
    let certificates = certs::start(source, client.clone(), supervisor).await?;
    let listener = std::net::TcpListener::bind(args.extmetrics_address).map_err(|source| {
        MainError::ExtmetricsListen {
            address: args.extmetrics_address,
            source,
        }
    })?;
    let state = ApiState::new(client.clone(), cache);
    supervisor.spawn_service(
        "front-proxy settings watch",
        watch_request_header(client.clone(), state.clone(), supervisor.shutdown()),
    );
    tracing::info!(address = %args.extmetrics_address, "serving external.metrics.k8s.io");
    let served = certificates.clone();
    let shutdown = supervisor.shutdown();
    supervisor.spawn_service("external metrics server", async move {
        if let Err(error) = serve(listener, served, state, shutdown).await {
            tracing::error!(error = %llmscaleoperator::error_chain::Chain(&error), "external metrics server stopped with an error");
        }
    });

    if args.register_apiservice {
        if certificates.borrow().ca_bundle.is_none() {
            return Err(MainError::RegisterWithoutCa);
        }
        let registrar = Registrar {
            client,
            namespace,
            service,
            port: args.extmetrics_service_port,
        };
        registrar
            .keep_registered(certificates, leadership, supervisor)
            .await;
    }
    Ok(())
}

async fn client_config(args: &RunArgs) -> Result<Config, MainError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    match &args.kubeconfig {
        Some(path) => {
            let failed = |source| MainError::Kubeconfig {
                path: path.clone(),
                source,
            };
            let kubeconfig = Kubeconfig::read_from(path).map_err(failed)?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(failed)
        }
        None if args.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(MainError::Context),
        None => Config::infer().await.map_err(MainError::Infer),
    }
}

/// Ctrl-C or SIGTERM starts a graceful shutdown.
async fn cancel_on_signal(shutdown: CancellationToken) {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %llmscaleoperator::error_chain::Chain(&error), "cannot listen for Ctrl-C");
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
                tracing::warn!(error = %llmscaleoperator::error_chain::Chain(&error), "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
        // Stopped for another reason: nothing left to listen for.
        () = shutdown.cancelled() => return,
    }
    tracing::info!("shutdown requested");
    shutdown.cancel();
}
