//! A test's world: its own namespace on the full control plane and, usually, a Prometheus
//! scraping an exporter the test drives.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use llmscaleoperator::api::LLMScaler;
use serde_json::{Value, json};

use super::prometheus::{Exporter, Prometheus};

pub const WAIT: Duration = Duration::from_secs(60);

/// Deletes its namespace when dropped, also when the test fails, and then first prints every
/// scaler's status and the namespace's events, so a failure shows what the operator said.
pub struct Env {
    pub client: Client,
    pub ns: String,
    signal: Option<(Exporter, Prometheus)>,
    done: bool,
}

impl Env {
    /// A namespace on the full control plane, with a Prometheus scraping a test exporter.
    pub async fn new(prefix: &str) -> Self {
        let mut env = Self::without_prometheus(prefix).await;
        let exporter = Exporter::start().await;
        let prometheus = Prometheus::start(&exporter).await;
        env.signal = Some((exporter, prometheus));
        env
    }

    /// A namespace on the full control plane, with the CRD installed.
    pub async fn without_prometheus(prefix: &str) -> Self {
        assert_eq!(
            super::cluster_profile(),
            "full",
            "needs CLUSTER_PROFILE=full make cluster-up (make test does)"
        );
        Self::bare(prefix).await
    }

    /// A namespace on whichever control plane runs, the minimal one included (no controllers:
    /// a Deployment gets no pods, so the test plays its status), with the CRD installed.
    pub async fn bare(prefix: &str) -> Self {
        let client = super::client().await;
        super::ensure_crd(&client).await;
        let ns = super::namespace(&client, prefix).await;
        Self {
            client,
            ns,
            signal: None,
            done: false,
        }
    }

    pub fn exporter(&self) -> &Exporter {
        &self.signal.as_ref().expect("this Env has no Prometheus").0
    }

    pub fn prometheus(&self) -> &Prometheus {
        &self.signal.as_ref().expect("this Env has no Prometheus").1
    }

    pub fn prometheus_mut(&mut self) -> &mut Prometheus {
        &mut self.signal.as_mut().expect("this Env has no Prometheus").1
    }

    /// The series this test drives, and the query that reads it.
    pub fn series(&self, metric: &str) -> String {
        format!("{metric}{{test=\"{}\"}}", self.ns)
    }

    pub fn query(&self, metric: &str) -> String {
        format!("avg({})", self.series(metric))
    }

    /// Sets a metric and waits until Prometheus serves the new value.
    pub async fn set(&self, metric: &str, value: f64) {
        self.exporter().set(&self.series(metric), value);
        self.prometheus()
            .wait_for_value(&self.query(metric), value)
            .await;
    }

    pub fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn scalers(&self) -> Api<LLMScaler> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub async fn deployment(&self, name: &str, replicas: i32) {
        self.create_deployment(name, replicas).await;
        self.wait_ready(name, replicas).await;
    }

    /// Creates the Deployment without waiting for its pods.
    pub async fn create_deployment(&self, name: &str, replicas: i32) {
        self.create_deployment_with(name, replicas, json!({})).await;
    }

    /// Creates the Deployment whose pods turn Ready `ready_after` after they are created (kwok's
    /// pod-ready-delayed stage, as a model loads), without waiting for them.
    pub async fn create_slow_deployment(&self, name: &str, replicas: i32, ready_after: Duration) {
        let delay = format!("{}s", ready_after.as_secs());
        let annotations = json!({ "llmscaleoperator.test/ready-after": delay });
        self.create_deployment_with(name, replicas, annotations)
            .await;
    }

    async fn create_deployment_with(
        &self,
        name: &str,
        replicas: i32,
        pod_annotations: serde_json::Value,
    ) {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { "app": name, "owner": "helm" }, "annotations": { "note": "keep" } },
            "spec": {
                "replicas": replicas,
                "selector": { "matchLabels": { "app": name } },
                "template": {
                    "metadata": { "labels": { "app": name }, "annotations": pod_annotations },
                    "spec": { "containers": [{ "name": "vllm", "image": "registry.k8s.io/pause:3.10" }] }
                }
            }
        }))
        .unwrap();
        self.deployments()
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
    }

    /// Waits until the Deployment asks for and has `replicas` ready replicas.
    pub async fn wait_ready(&self, name: &str, replicas: i32) {
        let api = self.deployments();
        super::eventually(
            &format!("{name} at {replicas} ready replicas"),
            WAIT,
            || async {
                let d = api.get(name).await.ok()?;
                let spec = d.spec?.replicas?;
                let ready = d.status?.ready_replicas.unwrap_or(0);
                (spec == replicas && ready == replicas).then_some(())
            },
        )
        .await;
    }

    pub async fn spec_replicas(&self, name: &str) -> i32 {
        self.deployments()
            .get(name)
            .await
            .unwrap()
            .spec
            .unwrap()
            .replicas
            .unwrap()
    }

    pub async fn scaler(&self, name: &str, target: &str, spec: Value) {
        self.scaler_annotated(name, target, json!({}), spec).await;
    }

    /// [`Env::scaler`] created with these annotations (e.g. dry-run) from the start.
    pub async fn scaler_annotated(
        &self,
        name: &str,
        target: &str,
        annotations: Value,
        spec: Value,
    ) {
        let mut full = json!({
            "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": target },
            "serverAddress": self.signal.as_ref().map(|s| s.1.url.clone()).unwrap_or_default(),
            "syncPeriodSeconds": 1,
            "retryPeriodSeconds": 1,
        });
        // Tests drive the mechanics one at a time: a scale-down comes at once unless they set a
        // window (the default, 300 s, would outlast them), and a scale-up is one step unless they
        // set rate policies (the exporter's per-replica values stay put as pods are added, so a
        // step paced by the default policies would compound).
        full["scaleDown"] = json!({ "stabilizationWindowSeconds": 0 });
        full["scaleUp"] = json!({ "policies": [] });
        for (key, value) in spec.as_object().unwrap() {
            match (full.get_mut(key), value) {
                (Some(Value::Object(ours)), Value::Object(theirs)) => ours.extend(theirs.clone()),
                _ => {
                    full[key] = value.clone();
                }
            }
        }
        let scaler: LLMScaler = serde_json::from_value(json!({
            "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
            "kind": "LLMScaler",
            "metadata": { "name": name, "annotations": annotations },
            "spec": full,
        }))
        .unwrap();
        self.scalers()
            .create(&PostParams::default(), &scaler)
            .await
            .unwrap();
    }

    pub async fn condition(&self, scaler: &str, type_: &str) -> Option<(String, String, String)> {
        let s = self.scalers().get(scaler).await.ok()?;
        let c = s
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)?;
        Some((c.status, c.reason, c.message))
    }

    /// Every event about `scaler`.
    pub async fn events_about(&self, scaler: &str) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(scaler))
            .collect()
    }

    /// Events about `scaler` whose reason is `reason`, as "note" strings.
    pub async fn events(&self, scaler: &str, reason: &str) -> Vec<String> {
        self.events_about(scaler)
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect()
    }

    /// Asserts that `reason` was told about `scaler` exactly once: one event, never repeated into
    /// a series (each repeat would be an API write for nothing new); returns that event.
    pub async fn assert_told_once(&self, scaler: &str, reason: &str) -> Event {
        let told: Vec<Event> = self
            .events_about(scaler)
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect();
        assert_eq!(told.len(), 1, "{reason}: {told:?}");
        assert!(
            told[0].series.is_none(),
            "{reason} repeated: {:?}",
            told[0].series
        );
        told.into_iter().next().expect("one event")
    }

    pub async fn wait_event(&self, scaler: &str, reason: &str, fragment: &str) -> String {
        super::eventually(
            &format!("a {reason} event containing {fragment:?}"),
            WAIT,
            || async {
                self.events(scaler, reason)
                    .await
                    .into_iter()
                    .find(|n| n.contains(fragment))
            },
        )
        .await
    }

    /// Asserts spec.replicas of `name` stays `replicas` for `period` (the controller syncs every
    /// second, so several syncs run in that time).
    pub async fn stays(&self, name: &str, replicas: i32, period: Duration) {
        let until = Instant::now() + period;
        while Instant::now() < until {
            assert_eq!(
                self.spec_replicas(name).await,
                replicas,
                "{name} must stay at {replicas}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub async fn done(mut self) {
        super::delete_namespace(&self.client, &self.ns).await;
        self.done = true;
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let ns = self.ns.clone();
        let failed = std::thread::panicking();
        // On a thread of its own with its own runtime and client: the test's runtime may be the
        // one that is unwinding, and its connections cannot be driven from inside drop.
        let cleanup = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let client = super::client().await;
                if failed {
                    eprintln!("{}", describe(&client, &ns).await);
                }
                super::delete_namespace(&client, &ns).await;
            });
        });
        let _ = cleanup.join();
    }
}

/// Every scaler's status and every event of `ns`, for a failed test's output.
async fn describe(client: &Client, ns: &str) -> String {
    let mut out = format!("--- namespace {ns} at the failure ---\n");
    let scalers: Api<LLMScaler> = Api::namespaced(client.clone(), ns);
    for scaler in scalers
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let name = scaler.metadata.name.clone().unwrap_or_default();
        let status = serde_json::to_string_pretty(&scaler.status).unwrap_or_default();
        out.push_str(&format!("LLMScaler {name} status: {status}\n"));
    }
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut events = events
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    for e in events {
        let about = e
            .regarding
            .as_ref()
            .and_then(|r| r.name.clone())
            .unwrap_or_default();
        let count = e.series.as_ref().map_or(1, |s| s.count);
        out.push_str(&format!(
            "event {} {} on {about} (x{count}): {}\n",
            e.type_.unwrap_or_default(),
            e.reason.unwrap_or_default(),
            e.note.unwrap_or_default()
        ));
    }
    out
}
