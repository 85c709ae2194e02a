//! `make demo`'s stand-in for a vLLM fleet's metrics: the file holds the total number of waiting
//! requests, and each scrape spreads it over the Deployment's ready replicas, the way a real
//! fleet's per-pod queue depth falls as pods are added.
//!
//! Usage: KUBECONFIG=... demo_exporter <listen address> <file> <namespace> <deployment>

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::{Router, extract::State, routing::get};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, Client};

struct Demo {
    file: PathBuf,
    namespace: String,
    deployment: String,
    deployments: Api<Deployment>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    llmscaleoperator::tls::install_crypto_provider()?;
    let usage = "usage: demo_exporter <listen address> <file> <namespace> <deployment>";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, file, namespace, deployment] = args.as_slice() else {
        return Err(usage.into());
    };
    let addr: SocketAddr = addr.parse()?;
    let client = Client::try_default().await?;
    let demo = Arc::new(Demo {
        file: PathBuf::from(file),
        namespace: namespace.clone(),
        deployment: deployment.clone(),
        deployments: Api::namespaced(client, namespace),
    });
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(demo);
    axum::serve(tokio::net::TcpListener::bind(addr).await?, app).await?;
    Ok(())
}

async fn metrics(State(demo): State<Arc<Demo>>) -> String {
    let total: f64 = tokio::fs::read_to_string(&demo.file)
        .await
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0.0);
    let ready = match demo.deployments.get(&demo.deployment).await {
        Ok(d) => d.status.and_then(|s| s.ready_replicas).unwrap_or(0),
        // No reading at all is what a broken exporter looks like: serve nothing.
        Err(_) => return String::new(),
    };
    let per_replica = total / f64::from(ready.max(1));
    format!(
        "# HELP vllm:num_requests_waiting Requests waiting per replica (demo: total / ready replicas).\n\
         # TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting{{namespace=\"{}\",app=\"{}\"}} {per_replica}\n",
        demo.namespace, demo.deployment
    )
}
