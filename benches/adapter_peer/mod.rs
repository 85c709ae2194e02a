//! The peer users would otherwise run: prometheus-adapter v0.12.0, the external metrics server of
//! the vLLM production-stack's HPA recipe, built from its Go module by
//! `tests/cluster/build.sh adapter` (a benchmark peer only, never part of `make test`).
//!
//! It is configured so that its external metric `kv-cache` answers the PromQL a per-scaler
//! LLMScaler query uses (`avg(vllm:kv_cache_usage_perc{namespace=..., app=...})`), authenticates
//! callers exactly as the operator does behind the aggregator (the local control plane's
//! front-proxy CA, `X-Remote-User` / `X-Remote-Group`), and serves on loopback.

pub mod compare;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The adapter's external metric path for scaler `i` of namespace `ns`.
pub fn metric_path(ns: &str, app: &str) -> String {
    format!(
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/kv-cache?labelSelector=app%3D{app}"
    )
}

const CONFIG: &str = r#"externalRules:
  - seriesQuery: 'vllm:kv_cache_usage_perc{namespace!="",app!=""}'
    resources:
      overrides:
        namespace: {resource: namespace}
    name:
      as: kv-cache
    metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>})'
"#;

pub struct Adapter {
    child: Child,
    pub port: u16,
    /// Its self-signed serving certificate (for "localhost" and the bench's Service).
    pub serving_pem: String,
    pub log: PathBuf,
}

impl Adapter {
    /// Starts the adapter against `prometheus` and the local control plane; gives up with a
    /// message when it was not built.
    pub fn start(repo: &Path, prometheus: &str, service_dns: &str) -> Self {
        let binary = repo.join("target/cluster/bin/prometheus-adapter");
        if !binary.exists() {
            crate::support::give_up(
                "prometheus-adapter is not built: `tests/cluster/build.sh adapter` builds it \
                 (make bench does)",
            );
        }
        let dir = repo.join("target/bench/prometheus-adapter");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.yaml"), CONFIG).unwrap();
        // The aggregator checks the certificate against the Service's DNS name.
        let serving =
            llmscaleoperator::tls::self_signed(&["localhost".to_owned(), service_dns.to_owned()])
                .unwrap();
        std::fs::write(dir.join("tls.crt"), &serving.cert_pem).unwrap();
        std::fs::write(dir.join("tls.key"), &serving.key_pem).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let kubeconfig = repo.join("target/cluster/kubeconfig");
        let pki = repo.join("target/cluster/pki");
        let log = dir.join("adapter.log");
        let child = Command::new(&binary)
            .arg(format!("--secure-port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--tls-cert-file={}", dir.join("tls.crt").display()))
            .arg(format!(
                "--tls-private-key-file={}",
                dir.join("tls.key").display()
            ))
            .arg(format!("--lister-kubeconfig={}", kubeconfig.display()))
            .arg(format!(
                "--authentication-kubeconfig={}",
                kubeconfig.display()
            ))
            .arg(format!(
                "--authorization-kubeconfig={}",
                kubeconfig.display()
            ))
            .arg(format!(
                "--requestheader-client-ca-file={}",
                pki.join("front-proxy-ca.crt").display()
            ))
            .arg("--requestheader-allowed-names=front-proxy-client")
            .arg("--requestheader-username-headers=X-Remote-User")
            .arg("--requestheader-group-headers=X-Remote-Group")
            .arg("--requestheader-extra-headers-prefix=X-Remote-Extra-")
            .arg(format!("--prometheus-url={prometheus}"))
            .arg(format!("--config={}", dir.join("config.yaml").display()))
            // Its series list is refreshed every 10 minutes by default; a metric answers 404
            // until the list has seen it.
            .arg("--metrics-relist-interval=5s")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self {
            child,
            port,
            serving_pem: serving.cert_pem,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `ready` (a read of one metric) says 200, or gives up after two minutes.
    pub async fn wait<F, Fut>(&self, mut ready: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<u16>>,
    {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let status = ready().await;
            if status == Some(200) {
                return;
            }
            if Instant::now() > deadline {
                crate::support::give_up(&format!(
                    "prometheus-adapter never answered its metric (last status {status:?}); see {}",
                    self.log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Points `v1beta1.external.metrics.k8s.io` at a server on loopback port `port` (an
/// ExternalName Service to localhost in `namespace`), trusting `ca_pem`, replacing whatever held
/// it; waits until the aggregator calls it Available.
pub async fn point_apiservice(
    client: &kube::Client,
    namespace: &str,
    service: &str,
    port: u16,
    ca_pem: &str,
) {
    use base64::Engine as _;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
    use kube::api::{Api, DeleteParams, PostParams};
    use llmscaleoperator::extmetrics::registration::{APISERVICE, OWNER_LABEL};

    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let _ = services.delete(service, &DeleteParams::default()).await;
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": { "name": service },
        "spec": { "type": "ExternalName", "externalName": "localhost",
                  "ports": [{ "name": "https", "port": port }] }
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let apiservices: Api<APIService> = Api::all(client.clone());
    let _ = apiservices
        .delete(APISERVICE, &DeleteParams::default())
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while apiservices.get_opt(APISERVICE).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the old APIService never went");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let apiservice: APIService = serde_json::from_value(serde_json::json!({
        // Labelled as the operator's own (what the bench's operator half registers), so a run
        // cut short leaves nothing the next run refuses to replace.
        "metadata": { "name": APISERVICE,
                      "labels": { OWNER_LABEL: llmscaleoperator::names::OPERATOR } },
        "spec": {
            "group": "external.metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100,
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            "service": { "namespace": namespace, "name": service, "port": port }
        }
    }))
    .unwrap();
    apiservices
        .create(&PostParams::default(), &apiservice)
        .await
        .unwrap();
}
