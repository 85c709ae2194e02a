//! The fleet model run live: it follows the Ready pods of a Deployment, replays a trace over them
//! in real time (or faster) and serves their vLLM metrics on /metrics for Prometheus to scrape.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};

use crate::exposition::{self, Labels};
use crate::fleet::{Fleet, FleetConfig, Totals};
use crate::plot::Sample;
use crate::trace::Trace;

/// What to simulate, where.
pub struct LiveOptions {
    pub namespace: String,
    /// Label selector of the fleet's pods, e.g. app=vllm-sim; its app value labels the metrics.
    pub selector: String,
    pub trace: Trace,
    /// Simulated seconds per real second.
    pub speed: f64,
    pub fleet: FleetConfig,
    /// Print a status line every real second.
    pub progress: bool,
    /// The Deployment and the LLMScaler to show beside the fleet (spec.replicas and
    /// status.desiredReplicas), when given.
    pub deployment: Option<String>,
    pub scaler: Option<String>,
}

/// What a run did, sampled every real second.
pub struct Report {
    pub totals: Totals,
    pub samples: Vec<Sample>,
}

/// Runs until `stop` resolves, serving /metrics on `listener`; returns what the run did.
pub async fn run(
    client: Client,
    listener: tokio::net::TcpListener,
    options: LiveOptions,
    stop: impl Future<Output = ()>,
) -> Result<Report, String> {
    if !(options.speed.is_finite() && options.speed > 0.0) {
        return Err(format!(
            "the speed must be a positive number, got {}",
            options.speed
        ));
    }
    let app = options
        .selector
        .split(',')
        .find_map(|kv| kv.strip_prefix("app="))
        .unwrap_or("vllm")
        .to_owned();
    let labels = Labels {
        namespace: options.namespace.clone(),
        app,
        model_name: options.fleet.model_name.clone(),
    };
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &options.namespace);
    let scalers: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &options.namespace,
        &kube::api::ApiResource {
            group: "autoscaling.modelsphere.dev".into(),
            version: "v1alpha1".into(),
            api_version: "autoscaling.modelsphere.dev/v1alpha1".into(),
            kind: "LLMScaler".into(),
            plural: "llmscalers".into(),
        },
    );
    let pods: Api<Pod> = Api::namespaced(client, &options.namespace);
    let (store, writer) = reflector::store();
    let watch = reflector::reflector(
        writer,
        watcher(pods, watcher::Config::default().labels(&options.selector)),
    )
    .default_backoff()
    .touched_objects()
    .for_each(|_| futures::future::ready(()));
    let watch = tokio::spawn(watch);

    // The pods Ready when the run starts were loaded before it: they serve at once.
    let mut fleet = Fleet::new(options.fleet.clone());
    if !matches!(
        tokio::time::timeout(Duration::from_secs(10), store.wait_until_ready()).await,
        Ok(Ok(()))
    ) {
        eprintln!("fleet-sim: the pods were not listed within 10 s; every pod starts cold");
    }
    fleet.warm_pods(
        store
            .state()
            .iter()
            .filter(|pod| is_ready(pod))
            .map(|pod| pod.name_any()),
    );
    let fleet = Arc::new(Mutex::new(fleet));
    let served = fleet.clone();
    let router = Router::new().route(
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
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    let tick = Duration::from_millis(100);
    let mut ticker = tokio::time::interval(tick);
    let mut last_sample = Instant::now();
    let mut samples = Vec::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = &mut stop => break,
        }
        let ready: Vec<String> = store
            .state()
            .iter()
            .filter(|pod| is_ready(pod))
            .map(|pod| pod.name_any())
            .collect();
        {
            let mut fleet = fleet.lock().unwrap_or_else(PoisonError::into_inner);
            fleet.set_pods(ready);
            fleet.step(tick.mul_f64(options.speed), &options.trace);
        }
        if last_sample.elapsed() < Duration::from_secs(1) {
            continue;
        }
        last_sample = Instant::now();
        let spec = match &options.deployment {
            Some(name) => deployments
                .get(name)
                .await
                .ok()
                .and_then(|d| d.spec?.replicas)
                .map(f64::from),
            None => None,
        };
        let desired = match &options.scaler {
            Some(name) => scalers
                .get(name)
                .await
                .ok()
                .and_then(|s| s.data["status"]["desiredReplicas"].as_f64()),
            None => None,
        };
        let fleet = fleet.lock().unwrap_or_else(PoisonError::into_inner);
        let sample = sample(&fleet, &options.trace, spec, desired);
        if options.progress {
            eprintln!("{}", status_line(&fleet, &sample));
        }
        samples.push(sample);
    }
    watch.abort();
    server.abort();
    let totals = fleet
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .totals()
        .clone();
    Ok(Report { totals, samples })
}

fn sample(fleet: &Fleet, trace: &Trace, spec: Option<f64>, desired: Option<f64>) -> Sample {
    let pods: Vec<_> = fleet.pods().collect();
    let kv = if pods.is_empty() {
        0.0
    } else {
        pods.iter().map(|p| p.kv_usage).sum::<f64>() / pods.len() as f64
    };
    Sample {
        t: fleet.now().as_secs_f64(),
        load: trace.rate(fleet.now()),
        queued: fleet.queued() as f64,
        pods: pods.len() as f64,
        spec,
        desired,
        kv,
        slo_missed: fleet.totals().slo_violations,
    }
}

/// One line of what the fleet is doing.
pub fn status_line(fleet: &Fleet, sample: &Sample) -> String {
    let t = fleet.totals();
    let show = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
    format!(
        "t={:>6.0}s load={:>5.1}/s kv={:>3.0}% queued={:<5} pods={:<3} spec={:<3} desired={:<3} served={} slo-missed={} lost={}",
        sample.t,
        sample.load,
        sample.kv * 100.0,
        sample.queued,
        sample.pods,
        show(sample.spec),
        show(sample.desired),
        t.finished,
        t.slo_violations,
        t.lost
    )
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
