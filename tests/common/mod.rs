//! Shared set-up for the integration tests: the local control plane started by
//! `make cluster-up` (tests/cluster), never a mock.
//!
//! A test that needs the cluster fails with a clear message when it is missing; nothing skips.
//! Test binaries run one after another (cargo test's default), which `operator_cli` relies on
//! when it removes and reinstalls the CRD.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, CustomResourceExt};
use llmscaleoperator::api::LLMScaler;
use serde_json::json;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The admin kubeconfig of the local control plane.
pub fn kubeconfig_path() -> PathBuf {
    std::env::var_os("LLMSCALER_TEST_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/cluster/kubeconfig"))
}

/// The profile the running control plane was started with ("minimal" or "full").
pub fn cluster_profile() -> String {
    std::fs::read_to_string(repo_root().join("target/cluster/profile"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

pub async fn client() -> Client {
    llmscaleoperator::tls::install_crypto_provider().unwrap();
    let path = kubeconfig_path();
    let kubeconfig = Kubeconfig::read_from(&path).unwrap_or_else(|e| {
        panic!(
            "no local control plane ({}: {e}); start one with `make cluster-up` (make test does)",
            path.display()
        )
    });
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    client.apiserver_version().await.unwrap_or_else(|e| {
        panic!("the local control plane does not answer ({e}); restart it with `make cluster-up`")
    });
    client
}

/// Polls `check` until it returns `Some`, or fails the test after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Installs (or updates) the CRD generated from the types and waits until it is served.
pub async fn ensure_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("llmscaleoperator-tests").force();
    crds.patch(
        LLMScaler::crd_name(),
        &params,
        &Patch::Apply(LLMScaler::crd()),
    )
    .await
    .unwrap();
    eventually(
        "the LLMScaler CRD to be established",
        Duration::from_secs(30),
        || async {
            let crd = crds.get(LLMScaler::crd_name()).await.ok()?;
            let established = crd
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        },
    )
    .await;
    // Established can precede the resource appearing in discovery by a moment.
    let scalers: Api<LLMScaler> = Api::all(client.clone());
    eventually(
        "llmscalers to be served",
        Duration::from_secs(30),
        || async {
            scalers
                .list_metadata(&Default::default())
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
}

/// A fresh namespace for one test, named after it.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": { "generateName": format!("{prefix}-") }
    }))
    .unwrap();
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    created.metadata.name.unwrap()
}

/// Deletes a test namespace (best effort: its contents go with it).
pub async fn delete_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(name, &DeleteParams::default()).await;
}

/// Reads a YAML file of the repository.
pub fn read_yaml<T: serde::de::DeserializeOwned>(relative: &str) -> T {
    let path = repo_root().join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub mod env;
pub mod netns;
pub mod prometheus;
pub mod proxy;

/// The controller running in this test process, scoped to one namespace; stopped when dropped.
pub struct Operator {
    shutdown: tokio_util::sync::CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
    pub cache: llmscaleoperator::metric_cache::MetricCache,
    pub metrics: llmscaleoperator::telemetry::metrics::Metrics,
}

impl Operator {
    /// The controller for one namespace, with the defaults.
    pub fn start(client: &Client, namespace: &str) -> Self {
        Self::builder(client).namespace(namespace).start()
    }

    /// A controller to configure: scope, HTTP timeout, allow-list.
    pub fn builder(client: &Client) -> OperatorBuilder {
        OperatorBuilder {
            client: client.clone(),
            scope: llmscaleoperator::controller::Scope::all(),
            timeout: None,
            allowed: Default::default(),
        }
    }
    /// Stops the controller and waits until it has.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .unwrap()
                .unwrap();
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub struct OperatorBuilder {
    client: Client,
    scope: llmscaleoperator::controller::Scope,
    timeout: Option<Duration>,
    allowed: llmscaleoperator::signals::allow::AllowList,
}

impl OperatorBuilder {
    /// Responsible for this namespace only.
    pub fn namespace(self, namespace: &str) -> Self {
        self.scope(llmscaleoperator::controller::Scope::namespaces([
            namespace.to_owned()
        ]))
    }

    pub fn scope(mut self, scope: llmscaleoperator::controller::Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Asks its signal sources with this per-request timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Calls only the server addresses these patterns permit.
    pub fn allowing(mut self, patterns: &[&str]) -> Self {
        self.allowed = llmscaleoperator::signals::allow::AllowList::parse(patterns).unwrap();
        self
    }

    pub fn start(self) -> Operator {
        use llmscaleoperator::controller::{self, Shared};
        let http = match self.timeout {
            Some(timeout) => llmscaleoperator::signals::http::client_with_timeout(timeout),
            None => llmscaleoperator::signals::http::client(),
        }
        .unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let cache = llmscaleoperator::metric_cache::MetricCache::default();
        let metrics = llmscaleoperator::telemetry::metrics::Metrics::default();
        let shared = Shared {
            cache: cache.clone(),
            metrics: metrics.clone(),
            http,
            instance: Some(format!("test-{}", self.scope.describe())),
            leadership: llmscaleoperator::leader::Leadership::always(),
            allowed: self.allowed,
        };
        let task = tokio::spawn(controller::run(
            self.client,
            self.scope,
            shared,
            llmscaleoperator::supervisor::Supervisor::new(shutdown.clone()),
        ));
        Operator {
            shutdown,
            task: Some(task),
            cache,
            metrics,
        }
    }
}

/// A free port on loopback (bound and released; the caller binds it again), never one handed out
/// before in this test process: the kernel may give a port just released again before the
/// process it was meant for has bound it (two spawned replicas once got the same one).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if GIVEN.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// Sends Ctrl-C (SIGINT) to the operator process and waits for it to exit.
pub async fn interrupt(
    child: &mut std::process::Child,
    within: Duration,
) -> std::process::ExitStatus {
    stop_with(child, "INT", within).await
}

/// Sends SIGTERM (what the kubelet sends a pod) and waits for the process to exit.
pub async fn terminate(
    child: &mut std::process::Child,
    within: Duration,
) -> std::process::ExitStatus {
    stop_with(child, "TERM", within).await
}

async fn stop_with(
    child: &mut std::process::Child,
    signal: &str,
    within: Duration,
) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap()
            .success()
    );
    eventually(
        &format!("the operator to exit after SIG{signal}"),
        within,
        || {
            let exited = child.try_wait().unwrap();
            async move { exited }
        },
    )
    .await
}

/// A CRD shaped like LeaderWorkerSet: spec.replicas and status.readyReplicas, nothing else the
/// operator relies on. No controller runs for it, so the test plays its status.
pub async fn install_leaderworkerset_crd(client: &Client) {
    install_crd(
        client,
        "leaderworkerset.x-k8s.io",
        "v1",
        "LeaderWorkerSet",
        "leaderworkersets",
        true,
    )
    .await;
}

/// KEDA's ScaledObject (keda.sh/v1alpha1), schema-less: what the conflict check reads of it is
/// spec.scaleTargetRef. No KEDA runs; the object only has to exist.
pub async fn install_scaledobject_crd(client: &Client) {
    install_crd(
        client,
        "keda.sh",
        "v1alpha1",
        "ScaledObject",
        "scaledobjects",
        false,
    )
    .await;
}

async fn install_crd(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    status: bool,
) {
    let name = format!("{plural}.{group}");
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "group": group,
            "names": { "kind": kind, "plural": plural, "singular": kind.to_lowercase() },
            "scope": "Namespaced",
            "versions": [{
                "name": version, "served": true, "storage": true,
                "subresources": if status { json!({ "status": {} }) } else { json!({}) },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                  "properties": { "replicas": { "type": "integer" } } },
                        "status": { "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                    "properties": { "readyReplicas": { "type": "integer" } } }
                    }
                } }
            }]
        }
    }))
    .unwrap();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply("llmscaleoperator-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    eventually(
        &format!("the {kind} CRD to be established"),
        env::WAIT,
        || async {
            let crd = api.get(&name).await.ok()?;
            crd.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        },
    )
    .await;
}

/// A new ServiceAccount and a token for it.
pub async fn token_for(client: &Client, ns: &str, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let request: TokenRequest =
        serde_json::from_value(json!({ "spec": { "expirationSeconds": 3600 } })).unwrap();
    let answer: TokenRequest = sas
        .create_subresource("token", name, &PostParams::default(), &request)
        .await
        .unwrap();
    answer.status.unwrap().token
}

/// Lets a ServiceAccount read every external metric in its namespace.
pub async fn grant_metrics(client: &Client, ns: &str, sa: &str) {
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": { "name": "llmscaler-test-external-metrics-reader" },
        "rules": [{ "apiGroups": ["external.metrics.k8s.io"], "resources": ["*"], "verbs": ["get", "list", "watch"] }]
    }))
    .unwrap();
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let _ = roles.create(&PostParams::default(), &role).await;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "read-metrics" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "llmscaler-test-external-metrics-reader" },
        "subjects": [{ "kind": "ServiceAccount", "name": sa, "namespace": ns }]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// Deletes the external.metrics.k8s.io APIService, whoever made it, and waits until it is gone.
pub async fn remove_apiservice(
    apiservices: &Api<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>,
) {
    const APISERVICE: &str = "v1beta1.external.metrics.k8s.io";
    let _ = apiservices
        .delete(APISERVICE, &DeleteParams::default())
        .await;
    eventually("no APIService for the group", env::WAIT, || async {
        apiservices
            .get_opt(APISERVICE)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}

/// Runs the helm the local control plane's build made, from the repository root.
pub fn helm(args: &[&str]) -> std::process::Output {
    let helm = repo_root().join("target/cluster/bin/helm");
    std::process::Command::new(&helm)
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} ({e}); `make test` builds it", helm.display()))
}

/// Runs the kubectl the local control plane's build made (the version the apiserver is), against
/// that control plane.
pub fn kubectl(args: &[&str]) -> std::process::Output {
    let kubectl = repo_root().join("target/cluster/bin/kubectl");
    std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig_path())
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}); `make test` builds it",
                kubectl.display()
            )
        })
}

/// A child process that is killed when the test lets go of it, panics included: a failed test
/// must not leave an operator running against the shared control plane.
pub struct Spawned(Option<std::process::Child>);

impl Spawned {
    pub fn new(child: std::process::Child) -> Self {
        Self(Some(child))
    }

    /// The process itself, no longer killed on drop.
    pub fn into_inner(mut self) -> std::process::Child {
        self.0.take().unwrap()
    }
}

impl std::ops::Deref for Spawned {
    type Target = std::process::Child;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref().unwrap()
    }
}

impl std::ops::DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.as_mut().unwrap()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What the external metrics API listening on `port` answers for `path` (below
/// `/apis/external.metrics.k8s.io/v1beta1/namespaces/<env.ns>/`), asked as the aggregator asks:
/// with its front-proxy client certificate, trusting the CA in the `serving` Secret of
/// `env.ns`. `None` while that Secret or an answer is not there yet.
pub async fn external_metrics_as_aggregator(
    env: &env::Env,
    port: u16,
    path: &str,
) -> Option<serde_json::Value> {
    use k8s_openapi::api::core::v1::Secret;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let ca = secrets
        .get("serving")
        .await
        .ok()?
        .data?
        .get("ca.crt")?
        .0
        .clone();
    let pki = kubeconfig_path().parent().unwrap().join("pki");
    let mut pem = std::fs::read(pki.join("front-proxy-client.crt")).unwrap();
    pem.extend(std::fs::read(pki.join("front-proxy-client.key")).unwrap());
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca).ok()?])
        .identity(reqwest::Identity::from_pem(&pem).unwrap())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    client
        .get(format!(
            "https://localhost:{port}/apis/external.metrics.k8s.io/v1beta1/namespaces/{}/{path}",
            env.ns
        ))
        .header("X-Remote-User", "test")
        .header("X-Remote-Group", "system:masters")
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}
