//! `make demo`'s decision server for the Custom sample: answers
//! `GET /decisions?serviceId=...` in the llmscaling.inference.x-k8s.io/v1alpha1 shape, with the
//! replica count read from a file at each request.
//!
//! Usage: decision_server <listen address> <file>

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::{Json, Router, routing::get};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: decision_server <listen address> <file>";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, file] = args.as_slice() else {
        return Err(usage.into());
    };
    let addr: SocketAddr = addr.parse()?;
    let app = Router::new()
        .route("/decisions", get(decisions))
        .with_state(Arc::new(PathBuf::from(file)));
    axum::serve(tokio::net::TcpListener::bind(addr).await?, app).await?;
    Ok(())
}

async fn decisions(
    State(file): State<Arc<PathBuf>>,
    Query(query): Query<HashMap<String, String>>,
) -> Json<Value> {
    let active: i64 = tokio::fs::read_to_string(file.as_ref())
        .await
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(1);
    let service = query.get("serviceId").cloned().unwrap_or_default();
    Json(json!({
        "apiVersion": "llmscaling.inference.x-k8s.io/v1alpha1",
        "decisions": [
            { "namespace": "modelforge", "serviceId": service, "replicas": { "active": active } }
        ]
    }))
}
