//! The fast tier: whole syncs (`reconcile`) against an in-process apiserver, in milliseconds and
//! without a cluster. It covers the controller's own glue — which failure gets which reason, what
//! a dry run and a standby write, which events are told once — and records every request, so a
//! test asserts what reached the API server. What the real apiserver enforces (admission, SSA,
//! RBAC, watches) stays with the integration tests on the real control plane.

use std::sync::{Arc, Mutex, PoisonError};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::reconcile::reconcile;
use super::{Context, Shared};
use crate::api::LLMScaler;
use crate::leader::Leadership;
use crate::metric_cache::{MetricCache, ScalerKey};
use crate::signals::allow::AllowList;
use crate::telemetry::metrics::Metrics;

const NS: &str = "ns";

/// One request the fake apiserver answered.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    query: String,
    body: Value,
}

impl Seen {
    fn is_write(&self) -> bool {
        self.method != Method::GET
    }
}

/// What the fake apiserver holds: the Deployments of namespace `ns` and every request seen.
#[derive(Default)]
struct State {
    deployments: Vec<Value>,
    hpas: Vec<Value>,
    seen: Vec<Seen>,
    /// Events are gone once created (expired, or deleted): a series patch finds none.
    events_expire: bool,
    /// Every watch fails at once, as after an API server restart (its list still answers).
    watches_fail: bool,
}

/// An apiserver that serves just what a sync of a Deployment target reads (discovery of apps/v1,
/// a list of Deployments, pods) and accepts what it writes (the scale apply, the status patch,
/// events), answering each write with a valid object.
#[derive(Clone, Default)]
struct FakeApi(Arc<Mutex<State>>);

impl FakeApi {
    fn with_deployment(self, name: &str, replicas: i32) -> Self {
        self.with_starting_deployment(name, replicas, replicas)
    }

    /// An apiserver whose watches fail, as one restarted that has not caught up.
    fn with_watches_failing(self) -> Self {
        self.lock().watches_fail = true;
        self
    }

    /// An apiserver whose events are gone as soon as they are created.
    fn with_events_expiring(self) -> Self {
        self.lock().events_expire = true;
        self
    }

    /// A Deployment of `replicas` of which `ready` are Ready.
    fn with_starting_deployment(self, name: &str, replicas: i32, ready: i32) -> Self {
        self.lock().deployments.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name, "namespace": NS, "uid": format!("uid-{name}"),
                          "resourceVersion": "1", "generation": 1 },
            "spec": {
                "replicas": replicas,
                "selector": { "matchLabels": { "app": name } },
                "template": { "metadata": { "labels": { "app": name } },
                              "spec": { "containers": [{ "name": "c", "image": "i" }] } }
            },
            "status": { "replicas": replicas, "readyReplicas": ready,
                        "updatedReplicas": replicas, "availableReplicas": replicas,
                        "observedGeneration": 1 }
        }));
        self
    }

    /// An HPA of the Deployment `target`.
    fn with_hpa(self, name: &str, target: &str) -> Self {
        self.lock().hpas.push(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": { "name": name, "namespace": NS, "uid": format!("uid-{name}"),
                          "resourceVersion": "1" },
            "spec": {
                "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": target },
                "minReplicas": 1, "maxReplicas": 5
            }
        }));
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn writes(&self) -> Vec<Seen> {
        self.lock()
            .seen
            .iter()
            .filter(|s| s.is_write())
            .cloned()
            .collect()
    }

    /// Bodies of the events created, as (reason, note).
    fn events(&self) -> Vec<(String, String)> {
        self.writes()
            .into_iter()
            .filter(|s| s.method == Method::POST && s.path.ends_with("/events"))
            .map(|s| {
                (
                    s.body["reason"].as_str().unwrap_or_default().to_owned(),
                    s.body["note"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// The events created with `reason` and the repeats of them folded into their series.
    fn events_with_repeats(&self, reason: &str) -> usize {
        let writes = self.writes();
        let names: Vec<&str> = writes
            .iter()
            .filter(|s| s.method == Method::POST && s.path.ends_with("/events"))
            .filter(|s| s.body["reason"] == reason)
            .filter_map(|s| s.body["metadata"]["name"].as_str())
            .collect();
        let repeats = writes.iter().filter(|s| {
            s.method == Method::PATCH
                && names
                    .iter()
                    .any(|name| s.path.ends_with(&format!("/events/{name}")))
        });
        names.len() + repeats.count()
    }

    /// Patches of an event's series (a repeat the event writer folded).
    fn event_repeats(&self) -> usize {
        self.series_counts().len()
    }

    /// The count each patch of an event's series carried.
    fn series_counts(&self) -> Vec<i64> {
        self.writes()
            .iter()
            .filter(|s| s.method == Method::PATCH && s.path.contains("/events/"))
            .map(|s| s.body["series"]["count"].as_i64().unwrap_or(0))
            .collect()
    }

    /// The last status patched onto the scaler.
    fn status(&self) -> Option<Value> {
        self.writes()
            .into_iter()
            .rev()
            .find(|s| s.path.ends_with("/status"))
            .map(|s| s.body["status"].clone())
    }

    /// The replica counts applied to Deployment `name`.
    fn scale_writes(&self, name: &str) -> Vec<i64> {
        let path = format!("/apis/apps/v1/namespaces/{NS}/deployments/{name}");
        self.writes()
            .into_iter()
            .filter(|s| s.method == Method::PATCH && s.path == path)
            .filter_map(|s| s.body["spec"]["replicas"].as_i64())
            .collect()
    }

    fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let api = api.clone();
            async move { api.answer(request).await }
        });
        kube::Client::new(service, NS)
    }

    async fn answer(&self, request: Request<Body>) -> Result<Response<Body>, kube::Error> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await?;
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let path = parts.uri.path().to_owned();
        let query = parts.uri.query().unwrap_or_default().to_owned();
        if query.contains("watch=true") && self.lock().watches_fail {
            let status = json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "the server is restarting", "reason": "ServiceUnavailable", "code": 503 });
            return Ok(Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .body(Body::from(status.to_string().into_bytes()))
                .expect("a response"));
        }
        if query.contains("watch=true") {
            // A watch that never sends anything: the list before it is all a sync needs.
            return futures::future::pending().await;
        }
        self.lock().seen.push(Seen {
            method: parts.method.clone(),
            path: path.clone(),
            query: query.clone(),
            body: body.clone(),
        });
        let deployments = format!("/apis/apps/v1/namespaces/{NS}/deployments");
        let (status, reply) = match (&parts.method, path.as_str()) {
            (&Method::GET, "/apis/apps/v1") => (StatusCode::OK, apps_v1()),
            // Every one, or one by name (a target claimed after the watch listed it).
            (&Method::GET, p) if p == deployments => {
                let named = named_in(&query);
                let items: Vec<Value> = self
                    .lock()
                    .deployments
                    .iter()
                    .filter(|d| named.as_ref().is_none_or(|n| d["metadata"]["name"] == *n))
                    .cloned()
                    .collect();
                (
                    StatusCode::OK,
                    json!({ "apiVersion": "apps/v1", "kind": "DeploymentList",
                            "metadata": { "resourceVersion": "1" }, "items": items }),
                )
            }
            (&Method::GET, p)
                if p == format!(
                    "/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers"
                ) =>
            {
                (
                    StatusCode::OK,
                    json!({ "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscalerList",
                            "metadata": { "resourceVersion": "1" },
                            "items": self.lock().hpas.clone() }),
                )
            }
            // One current ReplicaSet per Deployment (what victim selection looks for).
            (&Method::GET, p) if p == format!("/apis/apps/v1/namespaces/{NS}/replicasets") => {
                let items: Vec<Value> = self
                    .lock()
                    .deployments
                    .iter()
                    .map(|d| {
                        let name = d["metadata"]["name"].as_str().unwrap_or_default();
                        json!({ "apiVersion": "apps/v1", "kind": "ReplicaSet",
                            "metadata": { "name": format!("{name}-1"), "namespace": NS,
                                "uid": format!("uid-{name}-1"),
                                "annotations": { "deployment.kubernetes.io/revision": "1" },
                                "ownerReferences": [{ "apiVersion": "apps/v1",
                                    "kind": "Deployment", "name": name,
                                    "uid": format!("uid-{name}"), "controller": true }] },
                            "spec": { "selector": d["spec"]["selector"].clone() } })
                    })
                    .collect();
                (
                    StatusCode::OK,
                    json!({ "apiVersion": "apps/v1", "kind": "ReplicaSetList",
                            "metadata": { "resourceVersion": "1" }, "items": items }),
                )
            }
            (&Method::GET, p) if p.ends_with("/pods") => (
                StatusCode::OK,
                json!({ "apiVersion": "v1", "kind": "PodList",
                        "metadata": { "resourceVersion": "1" }, "items": [] }),
            ),
            (&Method::PATCH, p) if p.starts_with(&format!("{deployments}/")) => {
                let name = p.rsplit('/').next().unwrap_or_default();
                let found = self
                    .lock()
                    .deployments
                    .iter()
                    .find(|d| d["metadata"]["name"] == name)
                    .cloned();
                match found {
                    Some(d) => (StatusCode::OK, d),
                    None => not_found(),
                }
            }
            (&Method::PATCH, p) if p.ends_with("/status") => (StatusCode::OK, scaler_reply(p)),
            (&Method::POST, p) if p.ends_with("/events") => {
                let mut event = body;
                event["metadata"]["name"] = json!(format!("e{}", self.lock().seen.len()));
                (StatusCode::CREATED, event)
            }
            (&Method::PATCH, p) if p.contains("/events/") && self.lock().events_expire => {
                not_found()
            }
            (&Method::PATCH, p) if p.contains("/events/") => (
                StatusCode::OK,
                json!({ "apiVersion": "events.k8s.io/v1", "kind": "Event",
                        "metadata": { "name": p.rsplit('/').next(), "namespace": NS },
                        "eventTime": "2026-01-01T00:00:00.000000Z" }),
            ),
            _ => not_found(),
        };
        let bytes = serde_json::to_vec(&reply).unwrap_or_default();
        Ok(Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(bytes))
            .unwrap_or_else(|_| Response::new(Body::empty())))
    }
}

fn apps_v1() -> Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
        "resources": [
            { "name": "deployments", "singularName": "deployment", "namespaced": true,
              "kind": "Deployment", "verbs": ["get", "list", "watch", "patch"] },
            { "name": "deployments/scale", "singularName": "", "namespaced": true,
              "group": "autoscaling", "version": "v1", "kind": "Scale",
              "verbs": ["get", "patch", "update"] }
        ]
    })
}

/// The name a list's `fieldSelector=metadata.name=...` asks for, if any.
fn named_in(query: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("fieldSelector="))
        .map(|selector| selector.replace("%3D", "="))
        .and_then(|selector| selector.strip_prefix("metadata.name=").map(str::to_owned))
}

fn not_found() -> (StatusCode, Value) {
    (
        StatusCode::NOT_FOUND,
        json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "reason": "NotFound", "code": 404, "message": "not found" }),
    )
}

/// A valid LLMScaler for the reply to a status patch (its content is not read).
fn scaler_reply(path: &str) -> Value {
    let name = path
        .trim_end_matches("/status")
        .rsplit('/')
        .next()
        .unwrap_or_default();
    let mut scaler = scaler_json(name, "http://127.0.0.1:1", json!({}));
    scaler["metadata"]["namespace"] = json!(NS);
    scaler
}

/// A scaler named `s` on the `vllm` Deployment that states only `objective`: no metrics.
fn objective_scaler(server: &str, objective: Value) -> Value {
    let mut scaler = scaler_json(
        "s",
        server,
        json!({ "metrics": null, "objective": objective }),
    );
    scaler["spec"]
        .as_object_mut()
        .expect("a spec")
        .remove("metrics");
    scaler
}

fn scaler_json(name: &str, server: &str, extra: Value) -> Value {
    let mut spec = json!({
        "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm" },
        "serverAddress": server,
        "minReplicas": 1, "maxReplicas": 10,
        "metrics": [{ "name": "kv", "query": "avg(kv)", "target": "1" }],
        "scaleDown": { "stabilizationWindowSeconds": 0 },
        "scaleUp": { "policies": [] },
        "startupSeconds": 0
    });
    for (key, value) in extra.as_object().into_iter().flatten() {
        spec[key] = value.clone();
    }
    json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": { "name": name, "namespace": NS, "uid": format!("uid-{name}"),
                      "generation": 1, "resourceVersion": "1" },
        "spec": spec
    })
}

/// The delay an action requeues after. Action keeps it private; its Debug form is
/// `Action { requeue_after: Some(12.3s) }`.
fn requeue_of(action: &Action) -> std::time::Duration {
    let debug = format!("{action:?}");
    debug
        .split("Some(")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|d| {
            if let Some(ms) = d.strip_suffix("ms") {
                ms.parse::<f64>().ok().map(|v| v / 1000.0)
            } else {
                d.strip_suffix('s')?.parse::<f64>().ok()
            }
        })
        .map(std::time::Duration::from_secs_f64)
        .unwrap_or_else(|| panic!("no requeue in {debug}"))
}

/// The action requeues the scaler keyed `uid` on its grid of `period_s` seconds: between half
/// and one and a half periods away, at its phase (within the time the test itself took).
fn assert_on_grid(action: &Action, uid: &str, period_s: u64) {
    use std::time::{Duration, SystemTime};
    let period = Duration::from_secs(period_s);
    let debug = format!("{action:?}");
    let wait = requeue_of(action);
    assert!(
        wait >= period / 2 && wait <= period + period / 2,
        "{debug} for a period of {period:?}"
    );
    let at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        + wait;
    let offset = at.as_millis() % period.as_millis();
    let phase = super::schedule::phase(uid, period).as_millis();
    let apart = offset
        .abs_diff(phase)
        .min(period.as_millis() - offset.abs_diff(phase));
    assert!(
        apart < 2_000,
        "{debug}: at offset {offset} ms, its phase is {phase} ms"
    );
}

/// Serves `app` on a loopback port of its own; its address.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// A Prometheus that answers every query with one series of value `value`.
async fn prometheus(value: f64) -> String {
    counted_prometheus(value).await.0
}

/// [`prometheus`], and how many queries it has answered.
async fn counted_prometheus(value: f64) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let reply = json!({ "status": "success", "data": { "resultType": "vector",
        "result": [{ "metric": {}, "value": [1.0, value.to_string()] }] } });
    let queries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = queries.clone();
    let app = axum::Router::new().fallback(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let reply = reply.clone();
        async move { axum::Json(reply) }
    });
    (serve(app).await, queries)
}

/// A scaler, the fake apiserver and a context, built step by step.
struct Harness {
    api: FakeApi,
    ctx: Arc<Context>,
    cache: MetricCache,
    metrics: Metrics,
    _shutdown: tokio_util::sync::DropGuard,
}

impl Harness {
    fn new(api: FakeApi, leadership: Leadership) -> Self {
        crate::tls::install_crypto_provider().ok();
        let cache = MetricCache::default();
        let metrics = Metrics::default();
        let shutdown = CancellationToken::new();
        let shared = Shared {
            cache: cache.clone(),
            metrics: metrics.clone(),
            http: crate::signals::http::client().expect("http client"),
            instance: None,
            leadership,
            allowed: AllowList::parse::<&str>(&[]).expect("allow all"),
        };
        let supervisor = crate::supervisor::Supervisor::new(shutdown.clone());
        let ctx = Context::new(api.client(), Some(NS.to_owned()), shared, supervisor);
        Self {
            api,
            ctx: Arc::new(ctx),
            cache,
            metrics,
            _shutdown: shutdown.drop_guard(),
        }
    }

    fn leader(api: FakeApi) -> Self {
        Self::new(api, Leadership::always())
    }

    /// A sync of `scaler` as the controller runs it: the scalers' watch has brought it first,
    /// which claimed its target.
    async fn sync(&self, scaler: &Value) -> Action {
        let scaler: LLMScaler = serde_json::from_value(scaler.clone()).expect("a valid scaler");
        super::claim_target(&self.ctx, &scaler);
        self.sync_unclaimed(scaler).await
    }

    /// A sync of a scaler the scalers' watch has not brought.
    async fn sync_unclaimed(&self, scaler: LLMScaler) -> Action {
        reconcile(Arc::new(scaler), self.ctx.clone())
            .await
            .expect("the sync completes")
    }

    /// Syncs `scaler`, then stores into it the status the sync wrote, as the apiserver applies
    /// a merge patch: the next sync reads what this one left.
    async fn sync_and_store(&self, scaler: &mut Value) -> Action {
        let before = self.api.writes().len();
        let action = self.sync(scaler).await;
        if let Some(patch) = self.api.writes()[before..]
            .iter()
            .rev()
            .find(|s| s.path.ends_with("/status"))
        {
            merge(&mut scaler["status"], &patch.body["status"]);
        }
        action
    }

    fn cached(&self, name: &str) -> Option<crate::metric_cache::ScalerSnapshot> {
        self.cache.get(&ScalerKey {
            namespace: NS.to_owned(),
            name: name.to_owned(),
        })
    }

    fn exposition(&self) -> String {
        self.metrics.encode().expect("metrics encode")
    }
}

fn condition(status: &Value, type_: &str) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null);
    let text = |field: &str| c[field].as_str().unwrap_or_default().to_owned();
    (text("status"), text("reason"), text("message"))
}

/// After a restart, a scaler that had synced its current spec waits for its own instant of the
/// period (reading and writing nothing) instead of syncing with every other scaler at once; one
/// whose spec changed since, or that never synced, syncs at once.
#[tokio::test]
async fn after_a_restart_a_synced_scaler_waits_for_its_own_slot() {
    let server = prometheus(3.0).await;
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let period = std::time::Duration::from_secs(15);
    let mut scaler = scaler_json("s", &server, json!({}));
    scaler["status"] = json!({ "observedGeneration": 1 });
    let first = h.sync(&scaler).await;
    assert!(
        h.api.scale_writes("vllm").is_empty(),
        "nothing read or written"
    );
    assert!(h.cached("s").is_none());
    // It waits for its own instant: within one period, landing on its phase.
    let wait = requeue_of(&first);
    assert!(wait < period, "{first:?}");
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        + wait;
    let offset = at.as_millis() % period.as_millis();
    let phase = super::schedule::phase("uid-s", period).as_millis();
    let apart = offset
        .abs_diff(phase)
        .min(period.as_millis() - offset.abs_diff(phase));
    assert!(
        apart < 2_000,
        "{first:?}: at offset {offset} ms, its phase is {phase} ms"
    );
    // Its next sync (the one at its slot) does the work.
    h.sync(&scaler).await;
    assert_eq!(h.api.scale_writes("vllm"), vec![6]);

    // A spec changed while the operator was away: synced at once.
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let mut changed = scaler_json("s", &server, json!({}));
    changed["metadata"]["generation"] = json!(2);
    changed["status"] = json!({ "observedGeneration": 1 });
    h.sync(&changed).await;
    assert_eq!(h.api.scale_writes("vllm"), vec![6]);
}

#[tokio::test]
async fn the_remembered_load_lives_in_status_and_starts_pods_ahead_of_it() {
    // One Ready pod's worth of load on each of 2 pods: nothing to do but remember it.
    let server = prometheus(1.0).await;
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let mut scaler = scaler_json(
        "s",
        &server,
        json!({ "recurrence": { "periodSeconds": 3600 } }),
    );
    h.sync_and_store(&mut scaler).await;
    assert!(h.api.scale_writes("vllm").is_empty());
    let kept = scaler["status"]["recurrence"].clone();
    assert_eq!(kept["periodSeconds"], 3600);
    assert!(
        !kept["targetUid"].as_str().unwrap_or_default().is_empty(),
        "{kept}"
    );
    let cells: Vec<&str> = kept["current"]
        .as_str()
        .unwrap_or_default()
        .split(' ')
        .collect();
    assert_eq!(cells.len(), 96, "{kept}");
    assert!(
        cells.iter().all(|c| *c == "-"),
        "the stretch under way is not written: {kept}"
    );
    assert!(
        kept.get("before").is_none(),
        "no period has finished: {kept}"
    );
    // The next sync adds to the stretch under way in this process: status has nothing new.
    let writes = h.api.writes().len();
    h.sync_and_store(&mut scaler).await;
    assert_eq!(
        h.api.writes().len(),
        writes,
        "{:?}",
        &h.api.writes()[writes..]
    );

    // A new process (a restart, another leader) reads status, where a period before carried 2
    // in the stretch now (and the next, should the sync fall in it) and 50 in every other: with
    // a start-up of an hour every stretch is within reach, the rise is 25× (bounded at 4×), and
    // 2 × 4 is asked for at once; the event says why.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs();
    let stretch = usize::try_from(now % 3600 * 96 / 3600).expect("a stretch");
    let before: Vec<&str> = (0..96)
        .map(|k| {
            if k == stretch || k == (stretch + 1) % 96 {
                "2"
            } else {
                "50"
            }
        })
        .collect();
    scaler["status"]["recurrence"]["before"] = json!([before.join(" ")]);
    scaler["spec"]["startupSeconds"] = json!(3600);
    let restarted = Harness::leader(h.api.clone());
    // Its first sync waits for its own slot; the next does the work.
    restarted.sync_and_store(&mut scaler).await;
    assert!(restarted.api.scale_writes("vllm").is_empty());
    restarted.sync_and_store(&mut scaler).await;
    assert_eq!(restarted.api.scale_writes("vllm"), vec![8]);
    let events = restarted.api.events();
    assert!(
        events.iter().any(|(r, n)| r == "ScaledUp"
            && n.contains(
                "for the rise the periods before saw from now to 3600s ahead (2 measured)"
            )),
        "{events:?}"
    );
    // Written back as it was read.
    assert_eq!(
        scaler["status"]["recurrence"]["before"][0]
            .as_str()
            .map(|d| d.split(' ').filter(|c| *c == "50").count()),
        Some(94)
    );
}

#[tokio::test]
async fn a_hot_metric_scales_up_and_every_writer_output_says_so() {
    let server = prometheus(3.0).await;
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let action = h.sync(&scaler_json("s", &server, json!({}))).await;

    assert_on_grid(&action, "uid-s", 15);
    assert_eq!(h.api.scale_writes("vllm"), vec![6], "2 ready × 3 / 1");
    let status = h.api.status().expect("a status written");
    assert_eq!(status["desiredReplicas"], 6);
    assert_eq!(condition(&status, "Ready").1, "Synced");
    let events = h.api.events();
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "ScaledUp" && n.contains("from 2 to 6")),
        "{events:?}"
    );
    assert_eq!(h.cached("s").expect("cached").desired_replicas, 6);
    assert!(
        h.exposition().contains(
            r#"llmscaleoperator_syncs_total{namespace="ns",scaler="s",result="scaled"} 1"#
        )
    );
}

#[tokio::test]
async fn a_write_a_failed_watch_has_not_shown_is_not_made_and_told_again() {
    // The fake never shows a write in its list, as a target watch that failed (an API server
    // restarted) does not until it lists again.
    let server = prometheus(3.0).await;
    let h = Harness::leader(
        FakeApi::default()
            .with_deployment("vllm", 2)
            .with_watches_failing(),
    );
    let scaler = scaler_json("s", &server, json!({}));
    h.sync(&scaler).await;
    assert_eq!(h.api.scale_writes("vllm"), vec![6]);
    let target: LLMScaler = serde_json::from_value(scaler.clone()).expect("a valid scaler");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !h.ctx.targets.erring(&target.spec.target_ref).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the target watch never failed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Its cache still says 2: the sync decides on the 6 it wrote, and so writes nothing.
    h.sync(&scaler).await;
    assert_eq!(h.api.scale_writes("vllm"), vec![6], "written once");
    let told: Vec<_> = h
        .api
        .events()
        .into_iter()
        .filter(|(reason, _)| reason == "ScaledUp")
        .collect();
    assert_eq!(told.len(), 1, "told once: {told:?}");
    assert_eq!(h.api.event_repeats(), 0);
}

#[tokio::test]
async fn each_failure_is_its_reason_in_the_condition_the_event_and_the_metric() {
    let server = prometheus(1.0).await;
    let cases = [
        // The target does not exist.
        (
            scaler_json(
                "missing",
                &server,
                json!({ "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "gone" } }),
            ),
            "TargetNotFound",
            "Deployment gone not found in namespace ns",
        ),
        // A kind the API server does not serve.
        (
            scaler_json(
                "kind",
                &server,
                json!({ "targetRef": { "apiVersion": "example.com/v1", "kind": "Model", "name": "m" } }),
            ),
            "UnknownTargetKind",
            "does not serve kind Model in example.com/v1",
        ),
        // A tolerance admission refuses today, on an object stored before the rule.
        (
            scaler_json("tol", &server, json!({ "scaleUp": { "tolerance": "2" } })),
            "InvalidSpec",
            "scaleUp.tolerance is \"2\"",
        ),
        // The Custom provider without its block.
        (
            scaler_json("custom", &server, json!({ "metricProvider": "Custom" })),
            "InvalidSpec",
            "customProvider is required",
        ),
    ];
    for (scaler, reason, fragment) in cases {
        let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
        let name = scaler["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let action = h.sync(&scaler).await;
        // Retried on the grid of retryPeriodSeconds.
        assert_on_grid(&action, &format!("uid-{name}"), 10);
        let status = h.api.status().expect("a status written");
        let (ok, got, message) = condition(&status, "Ready");
        assert_eq!((ok.as_str(), got.as_str()), ("False", reason), "{name}");
        assert!(message.contains(fragment), "{name}: {message}");
        let events = h.api.events();
        assert!(
            events
                .iter()
                .any(|(r, n)| r == reason && n.contains(fragment)),
            "{name}: {events:?}"
        );
        assert!(
            h.api.scale_writes("vllm").is_empty(),
            "{name}: nothing scaled"
        );
        assert!(h.cached(&name).is_none(), "{name}: nothing served");
        let expected = format!(
            r#"llmscaleoperator_sync_failures_total{{namespace="ns",scaler="{name}",reason="{reason}"}} 1"#
        );
        assert!(h.exposition().contains(&expected), "{name}: {expected}");
    }
}

#[tokio::test]
async fn only_claimed_targets_are_kept_and_one_claimed_after_the_list_is_read_once() {
    let server = prometheus(3.0).await;
    let h = Harness::leader(
        FakeApi::default()
            .with_deployment("vllm", 2)
            .with_deployment("unscaled", 1),
    );
    let reads = |h: &Harness| {
        h.api
            .lock()
            .seen
            .iter()
            .filter(|s| {
                s.method == Method::GET
                    && s.path.ends_with("/deployments")
                    && named_in(&s.query).as_deref() == Some("vllm")
            })
            .count()
    };
    // Brought by the scalers' watch before the first sync: the target watch's list keeps it.
    h.sync(&scaler_json("listed", &server, json!({}))).await;
    assert_eq!(reads(&h), 0, "the list brought it");
    assert_eq!(
        h.ctx.targets.kept(),
        1,
        "the Deployment no scaler names is not kept"
    );

    // A scaler the target watch listed nothing for (its claim comes after the list): its target
    // is read once, then kept as the watch tells it.
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let scaler: LLMScaler =
        serde_json::from_value(scaler_json("late", &server, json!({}))).expect("a scaler");
    h.sync_unclaimed(scaler.clone()).await;
    assert_eq!(reads(&h), 1, "read once");
    assert_eq!(h.api.scale_writes("vllm"), vec![6], "found and scaled");
    h.sync_unclaimed(scaler).await;
    assert_eq!(reads(&h), 1, "then kept");
    assert_eq!(h.ctx.targets.kept(), 1);
}

/// A retargeted scaler lets its old target go; one the store no longer holds after a list lets
/// its target go too.
#[tokio::test]
async fn a_target_goes_with_the_last_scaler_that_names_it() {
    let server = prometheus(3.0).await;
    let h = Harness::leader(
        FakeApi::default()
            .with_deployment("vllm", 2)
            .with_deployment("other", 2),
    );
    let mut scaler = scaler_json("moving", &server, json!({}));
    h.sync(&scaler).await;
    h.sync(&scaler_json("steady", &server, json!({}))).await;
    scaler["spec"]["targetRef"] =
        json!({ "apiVersion": "apps/v1", "kind": "Deployment", "name": "other" });
    h.sync(&scaler).await;
    assert_eq!(
        h.ctx.targets.kept(),
        2,
        "vllm (steady's) and other (moving's)"
    );

    // The list ended without either scaler: both claims go, and their targets with them.
    let (empty, _writer) = kube::runtime::reflector::store::<LLMScaler>();
    super::forget_vanished(&h.ctx, &empty);
    assert_eq!(h.ctx.targets.kept(), 0);
}

#[tokio::test]
async fn a_dry_run_reports_what_it_would_do_and_writes_nothing_to_the_target() {
    let server = prometheus(3.0).await;
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let mut scaler = scaler_json("dry", &server, json!({}));
    scaler["metadata"]["annotations"] = json!({ crate::names::DRY_RUN_ANNOTATION: "true" });
    h.sync(&scaler).await;

    assert!(h.api.scale_writes("vllm").is_empty());
    assert_eq!(h.api.status().expect("status")["desiredReplicas"], 6);
    let events = h.api.events();
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "WouldScaleUp" && n.contains("dry run: nothing written")),
        "{events:?}"
    );
    assert_eq!(h.cached("dry").expect("cached").desired_replicas, 6);
}

#[tokio::test]
async fn a_standby_decides_and_serves_but_writes_nothing_at_all() {
    let server = prometheus(3.0).await;
    let h = Harness::new(
        FakeApi::default().with_deployment("vllm", 2),
        Leadership::never(),
    );
    h.sync(&scaler_json(
        "s",
        &server,
        json!({ "preemption": { "enable": true } }),
    ))
    .await;
    assert_eq!(
        h.api.writes().len(),
        0,
        "no scale, status or event: {:?}",
        h.api.writes()
    );
    assert_eq!(
        h.cached("s").expect("the standby serves").desired_replicas,
        6
    );

    // A failure on a standby is not reported either, and nothing stale is served.
    h.sync(&scaler_json(
        "s",
        &server,
        json!({ "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "gone" } }),
    ))
    .await;
    assert_eq!(h.api.writes().len(), 0);
    assert!(h.cached("s").is_none());
}

#[tokio::test]
async fn spec_notices_are_told_once_and_a_settled_sync_writes_nothing() {
    let server = prometheus(1.0).await;
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let scaler = scaler_json(
        "s",
        &server,
        json!({ "preemption": { "enable": true, "priorityClass": "high" } }),
    );
    h.sync(&scaler).await;
    let told: Vec<_> = h
        .api
        .events()
        .into_iter()
        .filter(|(r, _)| r == "PreemptionIgnored")
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");

    // The next syncs see the status they wrote: settled, nothing new to tell.
    let mut stored = scaler.clone();
    merge(&mut stored["status"], &h.api.status().expect("status"));
    let before = h.api.writes().len();
    for _ in 0..3 {
        h.sync(&stored).await;
    }
    assert_eq!(
        h.api.writes().len(),
        before,
        "a settled sync is no API write: {:?}",
        &h.api.writes()[before..]
    );
    assert_eq!(h.api.event_repeats(), 0);
}

#[tokio::test]
async fn a_broken_signal_is_told_when_it_begins_and_when_it_changes_not_every_sync() {
    let broken = prometheus(f64::NAN).await;
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let two = json!({ "metrics": [
        { "name": "kv", "query": "avg(kv)", "target": "1" },
        { "name": "queue", "query": "avg(queue)", "target": "2" }
    ] });
    let scaler = scaler_json("s", &broken, two);
    let mut stored = scaler.clone();
    let told = |api: &FakeApi, reason: &str| {
        api.events()
            .into_iter()
            .filter(|(r, _)| r == reason)
            .count()
    };
    for _ in 0..4 {
        h.sync_and_store(&mut stored).await;
    }
    assert_eq!(told(&h.api, "MetricSkipped"), 2, "one per metric, once");
    assert_eq!(told(&h.api, "ScalingHeld"), 1);
    assert_eq!(h.api.event_repeats(), 0, "no series patched at every sync");

    // Mended, then broken again: news again (the same three events, so the event writer adds to
    // their series).
    let fine = prometheus(1.0).await;
    stored["spec"]["serverAddress"] = json!(fine);
    h.sync_and_store(&mut stored).await;
    stored["spec"]["serverAddress"] = json!(broken);
    h.sync(&stored).await;
    assert_eq!(
        h.api.series_counts(),
        vec![2, 2, 2],
        "each told a second time"
    );
}

#[tokio::test]
async fn a_repeat_of_an_event_that_is_gone_is_told_afresh() {
    let broken = prometheus(f64::NAN).await;
    let api = FakeApi::default()
        .with_deployment("vllm", 2)
        .with_events_expiring();
    let h = Harness::leader(api);
    let scaler = scaler_json("s", &broken, json!({}));
    let mut stored = scaler.clone();
    let held = |api: &FakeApi| {
        api.events()
            .into_iter()
            .filter(|(r, _)| r == "ScalingHeld")
            .count()
    };
    h.sync_and_store(&mut stored).await;
    assert_eq!(held(&h.api), 1);
    // Mended, then broken again: the repeat finds its event gone, so it is a new event (and
    // the one after that adds to the new event's series, which is gone too: new again).
    let fine = prometheus(1.0).await;
    for server in [&fine, &broken, &fine, &broken] {
        stored["spec"]["serverAddress"] = json!(server);
        h.sync_and_store(&mut stored).await;
    }
    assert_eq!(h.api.series_counts(), vec![2, 2, 2, 2], "tried as repeats");
    assert_eq!(held(&h.api), 3, "each repeat told afresh");
}

#[tokio::test]
async fn a_held_scale_down_is_told_when_it_begins_and_when_it_changes_not_every_sync() {
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 6));
    let calm = prometheus(0.5).await;
    let scaler = scaler_json(
        "s",
        &calm,
        json!({ "scaleDown": { "stabilizationWindowSeconds": 300 } }),
    );
    let mut stored = scaler.clone();
    for _ in 0..4 {
        h.sync_and_store(&mut stored).await;
    }
    let held = |api: &FakeApi| -> Vec<String> {
        api.events()
            .into_iter()
            .filter(|(r, _)| r == "ScaleDownStabilized")
            .map(|(_, n)| n)
            .collect()
    };
    let told = held(&h.api);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].starts_with("3 recommended; held at 6"), "{told:?}");
    assert_eq!(h.api.event_repeats(), 0);
    assert!(h.api.scale_writes("vllm").is_empty(), "held");

    // Calmer still: what is recommended changed, so it is told again.
    let calmer = prometheus(0.25).await;
    stored["spec"]["serverAddress"] = json!(calmer);
    h.sync(&stored).await;
    let told = held(&h.api);
    assert_eq!(told.len(), 2, "{told:?}");
    assert!(told[1].starts_with("2 recommended; held at 6"), "{told:?}");
}

#[tokio::test]
async fn a_pin_is_written_a_freeze_writes_nothing_and_a_bad_pause_changes_nothing() {
    let server = prometheus(3.0).await;
    let annotated = |name: &str, annotations: Value| {
        let mut scaler = scaler_json(name, &server, json!({}));
        scaler["metadata"]["annotations"] = annotations;
        scaler
    };

    // Pinned at 3 while the signal asks for 6 (2 ready × 3 / 1).
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    h.sync(&annotated(
        "pinned",
        json!({ crate::names::PAUSED_REPLICAS_ANNOTATION: "3" }),
    ))
    .await;
    assert_eq!(h.api.scale_writes("vllm"), vec![3]);
    let status = h.api.status().expect("status");
    let (ok, reason, message) = condition(&status, "ScalingActive");
    assert_eq!((ok.as_str(), reason.as_str()), ("False", "Paused"));
    assert!(
        message.contains("pinned at 3; the signal recommends 6"),
        "{message}"
    );
    assert!(
        h.api
            .events()
            .iter()
            .any(|(r, n)| r == "Paused" && n.contains("Deployment/vllm pinned at 3")),
        "{:?}",
        h.api.events()
    );
    assert!(
        h.exposition()
            .contains(r#"llmscaleoperator_paused{namespace="ns",scaler="pinned"} 1"#)
    );

    // Frozen: where it is, whatever the signal.
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    h.sync(&annotated(
        "frozen",
        json!({ crate::names::PAUSED_ANNOTATION: "true" }),
    ))
    .await;
    assert!(h.api.scale_writes("vllm").is_empty());
    assert_eq!(h.api.status().expect("status")["desiredReplicas"], 2);

    // A value that is not a count: a failure naming the annotation, and nothing scaled.
    for (annotation, value) in [
        (crate::names::PAUSED_REPLICAS_ANNOTATION, "three"),
        (crate::names::PAUSED_REPLICAS_ANNOTATION, "-1"),
        // Above maxReplicas (10).
        (crate::names::PAUSED_REPLICAS_ANNOTATION, "11"),
        (crate::names::PAUSED_ANNOTATION, "yes"),
    ] {
        let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
        h.sync(&annotated("bad", json!({ annotation: value })))
            .await;
        assert!(
            h.api.scale_writes("vllm").is_empty(),
            "{annotation}={value}"
        );
        let (ok, reason, message) = condition(&h.api.status().expect("status"), "Ready");
        assert_eq!(
            (ok.as_str(), reason.as_str()),
            ("False", "InvalidAnnotation")
        );
        assert!(
            message.contains(annotation) && message.contains(value),
            "{message}"
        );
    }

    // Not paused: the signal decides, and the gauge says so.
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    h.sync(&annotated(
        "free",
        json!({ crate::names::PAUSED_ANNOTATION: "false" }),
    ))
    .await;
    assert_eq!(h.api.scale_writes("vllm"), vec![6]);
    assert!(
        h.exposition()
            .contains(r#"llmscaleoperator_paused{namespace="ns",scaler="free"} 0"#)
    );
}

#[tokio::test]
async fn a_pin_is_written_while_the_server_cannot_be_reached_and_says_why() {
    // The credentials' Secret is missing: unpaused, the sync fails and writes nothing; pinned,
    // the pin is written and each metric says why it was not read.
    let server = prometheus(3.0).await;
    let auth = json!({ "serverAuth": { "bearer": { "secretName": "gone" } } });
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    h.sync(&scaler_json("free", &server, auth.clone())).await;
    assert!(h.api.scale_writes("vllm").is_empty());
    let (ok, reason, _) = condition(&h.api.status().expect("status"), "Ready");
    assert_eq!(
        (ok.as_str(), reason.as_str()),
        ("False", "SecretUnavailable")
    );

    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let mut pinned = scaler_json("pinned", &server, auth);
    pinned["metadata"]["annotations"] = json!({ crate::names::PAUSED_REPLICAS_ANNOTATION: "4" });
    h.sync(&pinned).await;
    assert_eq!(h.api.scale_writes("vllm"), vec![4]);
    let status = h.api.status().expect("status");
    let (ok, reason, _) = condition(&status, "ScalingActive");
    assert_eq!((ok.as_str(), reason.as_str()), ("False", "Paused"));
    let shown = status.to_string();
    assert!(
        shown.contains("serverAuth.bearer") && shown.contains("gone"),
        "the metric's reason names the Secret: {shown}"
    );
    assert_eq!(status["syncsWithoutSignal"], 1, "{status}");
    assert!(
        !h.exposition().contains("llmscaleoperator_metric_value{"),
        "no value stands for an unread metric"
    );
}

#[tokio::test]
async fn without_a_signal_a_fleet_above_max_replicas_is_brought_down_to_it() {
    // maxReplicas lowered to 6 under a fleet of 8 while the metric reads NaN.
    let broken = prometheus(f64::NAN).await;
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 8));
    h.sync(&scaler_json("s", &broken, json!({ "maxReplicas": 6 })))
        .await;
    assert_eq!(h.api.scale_writes("vllm"), vec![6]);
    let status = h.api.status().expect("status");
    let (limited, reason, message) = condition(&status, "ScalingLimited");
    assert_eq!(
        (limited.as_str(), reason.as_str()),
        ("True", "TooManyReplicas")
    );
    assert!(message.contains("no usable signal"), "{message}");
    let (_, held, _) = condition(&status, "ScalingActive");
    assert_eq!(held, "NoUsableMetric");
    assert!(
        h.api.events().iter().any(|(r, n)| r == "ScaledDown"
            && n.contains("from 8 to 6 (no usable signal, but maxReplicas is 6)")),
        "{:?}",
        h.api.events()
    );

    // Within the bounds it is held where it is.
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 5));
    h.sync(&scaler_json("s", &broken, json!({ "maxReplicas": 6 })))
        .await;
    assert!(h.api.scale_writes("vllm").is_empty());
}

#[tokio::test]
async fn scale_events_count_writes_and_a_removed_metric_leaves_metrics() {
    let server = prometheus(3.0).await;
    // A dry run decides 6 at every sync and writes nothing: no scale event.
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let mut dry = scaler_json("dry", &server, json!({}));
    dry["metadata"]["annotations"] = json!({ crate::names::DRY_RUN_ANNOTATION: "true" });
    h.sync(&dry).await;
    h.sync(&dry).await;
    assert!(
        !h.exposition()
            .contains("llmscaleoperator_scale_events_total{"),
        "{}",
        h.exposition()
    );

    // A write is one event.
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 2));
    let two = json!({ "metrics": [
        { "name": "kv", "query": "avg(kv)", "target": "1" },
        { "name": "queue", "query": "avg(queue)", "target": "2" }
    ] });
    h.sync(&scaler_json("s", &server, two)).await;
    assert_eq!(h.api.scale_writes("vllm"), vec![6]);
    let shown = h.exposition();
    assert!(
        shown.contains(
            r#"llmscaleoperator_scale_events_total{namespace="ns",scaler="s",direction="up"} 1"#
        ),
        "{shown}"
    );
    for metric in ["kv", "queue"] {
        let value = format!(
            r#"llmscaleoperator_metric_value{{namespace="ns",scaler="s",metric="{metric}"}} 3"#
        );
        assert!(shown.contains(&value), "{value} in {shown}");
    }

    // queue taken out of the spec: its series go, kv's stay.
    h.sync(&scaler_json("s", &server, json!({}))).await;
    let shown = h.exposition();
    assert!(!shown.contains(r#"metric="queue""#), "{shown}");
    assert!(shown.contains(r#"metric_target{namespace="ns",scaler="s",metric="kv"} 1"#));
}

#[tokio::test]
async fn an_hpa_on_the_target_stops_every_write_and_is_told_once() {
    let server = prometheus(3.0).await;
    let h = Harness::leader(
        FakeApi::default()
            .with_deployment("vllm", 2)
            .with_hpa("vllm-hpa", "vllm"),
    );
    let scaler = scaler_json("s", &server, json!({}));
    h.sync(&scaler).await;
    h.sync(&scaler).await;
    assert!(
        h.api.scale_writes("vllm").is_empty(),
        "the signal asks for 6"
    );
    let (ok, reason, message) = condition(&h.api.status().expect("status"), "Ready");
    assert_eq!(
        (ok.as_str(), reason.as_str()),
        ("False", "ConflictingAutoscaler")
    );
    assert!(
        message.contains("HorizontalPodAutoscaler vllm-hpa also scales Deployment/vllm"),
        "{message}"
    );
    let told: Vec<_> = h
        .api
        .events()
        .into_iter()
        .filter(|(r, _)| r == "ConflictingAutoscaler")
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(h.api.event_repeats(), 0);

    // An HPA on another Deployment is no conflict; a dry-run scaler takes nothing from anyone.
    let h = Harness::leader(
        FakeApi::default()
            .with_deployment("vllm", 2)
            .with_hpa("other", "not-vllm"),
    );
    h.sync(&scaler).await;
    assert_eq!(h.api.scale_writes("vllm"), vec![6]);
    let h = Harness::leader(
        FakeApi::default()
            .with_deployment("vllm", 2)
            .with_hpa("vllm-hpa", "vllm"),
    );
    let mut observer = scaler_json("s", &server, json!({}));
    observer["metadata"]["annotations"] = json!({ crate::names::DRY_RUN_ANNOTATION: "true" });
    h.sync(&observer).await;
    let (ok, _, _) = condition(&h.api.status().expect("status"), "Ready");
    assert_eq!(ok, "True");
}

/// RFC 7386 JSON merge patch, as the apiserver applies the status patches a sync sends.
fn merge(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(object) = target.as_object_mut() else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            object.remove(key);
        } else {
            merge(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The lab's operator entrant (`benches/lab/operator.rs`), built here as it is in the lab.
#[allow(dead_code, unused_imports)]
#[path = "../../benches/lab/operator.rs"]
mod lab_operator;

/// A Prometheus whose one series has the value `reading` holds when it is asked, or none.
async fn prometheus_reading(reading: Arc<Mutex<Option<f64>>>) -> String {
    let app = axum::Router::new().fallback(move || {
        let reading = reading.clone();
        async move {
            let value = *reading.lock().unwrap_or_else(PoisonError::into_inner);
            let result = match value {
                Some(v) => json!([{ "metric": {}, "value": [1.0, v.to_string()] }]),
                None => json!([]),
            };
            axum::Json(json!({ "status": "success",
                "data": { "resultType": "vector", "result": result } }))
        }
    });
    serve(app).await
}

/// The same readings, fed to the controller (whole syncs, the status stored between them as the
/// apiserver would) and to the lab's operator entrant, every 15 s of one clock: the replica
/// counts they decide are the same, sync by sync, for a spec with a fallback, pinned, frozen
/// and free. The lab measures the law that ships only while this holds.
#[tokio::test]
async fn the_controller_and_the_lab_entrant_decide_alike() {
    use llmscaleoperator_sim::lab::metrics::{PodSample, Scrapes};
    use llmscaleoperator_sim::lab::policy::{Bounds, PodState, Policy, View};

    use crate::scaling::Pause;

    const PODS: u32 = 4;
    // Requests in flight per pod, or no series (a Prometheus that lost its targets): up past
    // the target, a long outage (the fallback's threshold is 3), back, down (held by the
    // scale-down window), up in steps (the rate policies).
    let readings: Vec<Option<f64>> = [
        &[Some(40.0), Some(40.0), Some(16.0)][..],
        &[None; 5],
        &[Some(8.0), Some(8.0), Some(2.0), Some(2.0)],
        &[Some(100.0); 3],
        &[None, Some(4.0), None, None, None, Some(24.0)],
        &[Some(1.0); 24],
    ]
    .concat();
    let bounds = Bounds { min: 1, max: 10 };
    let fallback = json!({ "fallback": { "failureThreshold": 3, "replicas": 6 } });
    let cases: [(&str, Option<Pause>, Value); 3] = [
        ("free", None, json!({})),
        (
            "pinned",
            Some(Pause::Pinned(3)),
            json!({ crate::names::PAUSED_REPLICAS_ANNOTATION: "3" }),
        ),
        (
            "frozen",
            Some(Pause::Frozen),
            json!({ crate::names::PAUSED_ANNOTATION: "true" }),
        ),
    ];
    let mut fallbacks_seen = 0;
    for (name, pause, annotations) in cases {
        let mut entrant = lab_operator::Operator::with(bounds, fallback.clone());
        if let Some(pause) = pause {
            entrant = entrant.paused(pause);
        }
        let reading = Arc::new(Mutex::new(None));
        let server = prometheus_reading(reading.clone()).await;
        let mut spec = serde_json::to_value(entrant.spec()).expect("the spec serializes");
        spec["serverAddress"] = json!(server);
        let mut scaler = json!({
            "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
            "metadata": { "name": name, "namespace": NS, "uid": format!("uid-{name}"),
                          "generation": 1, "resourceVersion": "1",
                          "annotations": annotations },
            "spec": spec
        });
        let api = FakeApi::default().with_deployment("vllm", PODS as i32);
        let mut h = Harness::leader(api);
        let now = Arc::new(Mutex::new(0.0_f64));
        let clock = now.clone();
        Arc::get_mut(&mut h.ctx).expect("one owner").clock = Arc::new(move || {
            let seconds = *clock.lock().unwrap_or_else(PoisonError::into_inner);
            k8s_openapi::jiff::Timestamp::from_second(lab_operator::EPOCH).expect("epoch")
                + k8s_openapi::jiff::SignedDuration::from_secs_f64(seconds)
        });
        // Ready since the start: nothing is learned of the start-up on either path.
        let pods: Vec<PodState> = (0..u64::from(PODS))
            .map(|id| PodState {
                id,
                created: 0.0,
                running_at: Some(0.0),
                ready_at: Some(0.0),
            })
            .collect();

        let (mut by_controller, mut by_entrant) = (Vec::new(), Vec::new());
        for (i, value) in readings.iter().enumerate() {
            let t = 15.0 * (i as f64 + 1.0);
            *now.lock().unwrap_or_else(PoisonError::into_inner) = t;
            *reading.lock().unwrap_or_else(PoisonError::into_inner) = *value;

            let writes = h.api.scale_writes("vllm").len();
            // What the apiserver stores is what the next sync reads.
            h.sync_and_store(&mut scaler).await;
            let wrote = h.api.scale_writes("vllm").get(writes).copied();
            by_controller.push(wrote.unwrap_or(i64::from(PODS)));

            let mut scrapes = Scrapes::new();
            for pod in value.iter().flat_map(|v| {
                (0..u64::from(PODS)).map(move |id| {
                    let sample = PodSample {
                        running: *v,
                        waiting: 0.0,
                        kv_usage: 0.0,
                    };
                    (id, sample)
                })
            }) {
                scrapes.record(pod.0, t, pod.1);
            }
            let view = View {
                now: t,
                spec: PODS,
                pods: &pods,
                metrics: &scrapes,
            };
            by_entrant.push(i64::from(entrant.decide(&view)));
        }
        assert_eq!(
            by_controller, by_entrant,
            "{name}: the controller (left) and the lab entrant (right) decided differently"
        );
        match pause {
            Some(Pause::Pinned(n)) => assert!(by_controller.iter().all(|&c| c == i64::from(n))),
            Some(Pause::Frozen) => assert!(by_controller.iter().all(|&c| c == i64::from(PODS))),
            None => {
                // The run exercises more than one stage: the signal scaled up (by the rate
                // policy's step) and down (after the window), the fallback raised.
                assert!(by_controller.contains(&8), "{by_controller:?}");
                assert!(by_controller.contains(&1), "{by_controller:?}");
                fallbacks_seen += by_controller.iter().filter(|&&c| c == 6).count();
            }
        }
    }
    assert!(
        fallbacks_seen > 0,
        "the fallback raised the fleet at least once"
    );
}

/// The deletion-cost query goes through the one signal read like every other query: it is
/// timed, counted under its own name when it gives nothing usable, and its credentials never
/// reach the warning that says the pods were ranked newest first.
#[tokio::test]
async fn the_deletion_cost_query_is_read_and_counted_like_every_query() {
    // The metric reads 0.5 per pod (a scale-down from 6 to 3); the warmth query fails.
    let app = axum::Router::new().fallback(|uri: http::Uri| async move {
        let query = uri.query().unwrap_or_default().to_owned();
        if query.contains("warmth") {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({ "status": "error", "errorType": "bad_data",
                    "error": "parse error near Bearer hunter2" })),
            );
        }
        (
            StatusCode::OK,
            axum::Json(
                json!({ "status": "success", "data": { "resultType": "vector",
                "result": [{ "metric": {}, "value": [1.0, "0.5"] }] } }),
            ),
        )
    });
    let server = serve(app).await;

    let h = Harness::leader(FakeApi::default().with_deployment("vllm", 6));
    let spec = json!({
        "serverHeaders": { "Authorization": "Bearer hunter2" },
        "scaleDown": { "stabilizationWindowSeconds": 0, "deletionCostQuery": "warmth" }
    });
    h.sync(&scaler_json("s", &server, spec)).await;
    assert_eq!(h.api.scale_writes("vllm"), vec![3]);
    let shown = h.exposition();
    let counted = format!(
        r#"llmscaleoperator_query_errors_total{{namespace="ns",scaler="s",metric="{}"}} 1"#,
        crate::names::DELETION_COST_QUERY
    );
    assert!(shown.contains(&counted), "{counted} in {shown}");
    assert!(
        shown.contains("llmscaleoperator_query_duration_seconds_count 2"),
        "the metric and the deletion-cost query: {shown}"
    );
    let events = h.api.events();
    let warned = events
        .iter()
        .find(|(reason, _)| reason == "DeletionCostQueryFailed")
        .map(|(_, note)| note.clone())
        .unwrap_or_default();
    assert!(
        warned.contains("parse error near [redacted]") && !warned.contains("hunter2"),
        "{events:?}"
    );
}

/// A minute of a fleet in few numbers, served as a [`Window`]: a value per gauge query and both
/// histograms (cumulative counts at 0.1, 1 and +Inf s) or no histogram series. The late
/// requests are late in the queue-time histogram only.
#[derive(Debug, Clone)]
struct Exported {
    in_flight: f64,
    load: f64,
    /// Requests in the window, and how many of them were late (above every budget).
    requests: f64,
    late: f64,
    histograms: bool,
}

impl From<&Exported> for Window {
    fn from(e: &Exported) -> Self {
        // The late requests queued too long; every one kept its TPOT.
        let histogram = |late: f64| {
            let on_time = e.requests - late;
            if e.histograms {
                vec![(0.1, on_time), (1.0, on_time), (f64::INFINITY, e.requests)]
            } else {
                Vec::new()
            }
        };
        Window {
            in_flight: Some(e.in_flight),
            pending: None,
            load: Some(e.load),
            queue: histogram(e.late),
            tpot: histogram(0.0),
            // Every request of the window was admitted in it, with the histograms' series.
            admitted: e.histograms.then_some(e.requests / 60.0),
        }
    }
}

/// Under an objective, a scale-down into a rising load waits and says so in a condition and an
/// event; at the minute's mean it goes ahead.
#[tokio::test]
async fn an_objective_scale_down_waits_while_the_pods_carry_more_than_over_the_minute() {
    let rising = Exported {
        in_flight: 4.4,
        load: 4.0,
        requests: 400.0,
        late: 0.0,
        histograms: true,
    };
    let exported = Arc::new(Mutex::new(Window::from(&rising)));
    let (h, mut scaler) = objective_fleet(&exported, 10, "8").await;

    // 10 pods with 4.4 in flight each against an estimate of 8 would do with 6 (5.5), but they
    // ran 4 each over the minute: 6 carries no more minute of that rise (6.6), so nothing moves.
    h.sync_and_store(&mut scaler).await;
    let status = scaler["status"].clone();
    assert_eq!(h.api.scale_writes("vllm"), Vec::<i64>::new(), "{status:#}");
    let (limited, reason, message) = condition(&status, "ScalingLimited");
    assert_eq!((limited.as_str(), reason.as_str()), ("True", "LoadRising"));
    assert!(
        message.contains("4.40 requests each now, above the 4.00"),
        "{message}"
    );
    let events = h.api.events();
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "LoadRising" && n.contains("scale-down to 6 waits")),
        "{events:?}"
    );

    // Back at the minute's mean: the step goes ahead, paced to three quarters of the pods.
    *exported.lock().unwrap_or_else(PoisonError::into_inner) = Window::from(&Exported {
        in_flight: 4.0,
        ..rising
    });
    h.sync_and_store(&mut scaler).await;
    assert_eq!(h.api.scale_writes("vllm"), vec![7]);
}

/// Under an objective, an admission rate that cannot be read leaves the rest of the window to
/// count: the capacity is judged, a scale-down on a steady load goes ahead, and the condition
/// names the query that failed.
#[tokio::test]
async fn an_objective_without_the_admission_rate_still_learns_and_scales_down() {
    let steady = Window {
        admitted: None,
        ..Window::from(&Exported {
            in_flight: 4.0,
            load: 4.0,
            requests: 400.0,
            late: 0.0,
            histograms: true,
        })
    };
    let exported = Arc::new(Mutex::new(steady));
    let (h, mut scaler) = objective_fleet(&exported, 10, "8").await;

    h.sync_and_store(&mut scaler).await;
    let status = scaler["status"].clone();
    // 10 pods at 4 each against 8 need 5, paced to three quarters of the pods.
    assert_eq!(h.api.scale_writes("vllm"), vec![7], "{status:#}");
    assert_eq!(status["objective"]["attainment"], "100.00", "{status:#}");
    let (met, reason, message) = condition(&status, "ObjectiveMet");
    assert_eq!((met.as_str(), reason.as_str()), ("True", "Met"));
    assert!(
        message.contains(
            "the requests admitted a second could not be read (objective.requestsAdmitted:"
        ),
        "{message}"
    );
}

/// Under an objective, the controller reads the composed queries, learns the capacity from the
/// histograms, sizes the fleet with it and shows it in status; histograms that go missing keep
/// the estimate, defer a scale-down and say so.
#[tokio::test]
async fn an_objective_learns_its_capacity_from_the_histograms_and_a_gap_holds_the_fleet() {
    let exported = Arc::new(Mutex::new(Window::from(&Exported {
        in_flight: 6.0,
        load: 6.0,
        requests: 400.0,
        late: 40.0,
        histograms: true,
    })));
    let (h, mut scaler) = objective_fleet(&exported, 2, "8").await;

    // 10% late at 6 running per pod: the prior of 8 comes down to 0.9 × 6.
    h.sync_and_store(&mut scaler).await;
    let status = scaler["status"].clone();
    assert_eq!(status["objective"]["requestsPerPod"], "5.4", "{status:#}");
    assert_eq!(status["objective"]["missedAt"], "6");
    assert_eq!(status["objective"]["attainment"], "90.00");
    // 6 in flight per pod against 5.4: the pods carry 11.1% more than the capacity learned.
    assert_eq!(status["objective"]["headroom"], "-11.1");
    assert_eq!(condition(&status, "ObjectiveMet").1, "Missed");
    // 2 Ready × 6 in flight / 5.4 = 2.2 → 3.
    assert_eq!(h.api.scale_writes("vllm"), vec![3]);
    let reading = status["currentMetrics"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == "objective")
        .cloned();
    assert_eq!(
        reading.map(|m| m["value"].clone()),
        Some(json!("6")),
        "{status:#}"
    );

    // The histograms go missing while the load falls: the estimate stays, nothing is removed.
    *exported.lock().unwrap_or_else(PoisonError::into_inner) = Window::from(&Exported {
        in_flight: 0.5,
        load: 0.5,
        requests: 0.0,
        late: 0.0,
        histograms: false,
    });
    // (The fake apiserver's Deployment still has 2 replicas, both Ready: 1 would do.)
    h.sync_and_store(&mut scaler).await;
    let status = scaler["status"].clone();
    assert_eq!(h.api.scale_writes("vllm"), vec![3], "{status:#}");
    assert_eq!(status["objective"]["requestsPerPod"], "5.4");
    // 0.5 of 5.4 in use: 90.7% spare, though the scale-down waits for the histograms.
    assert_eq!(status["objective"]["headroom"], "90.7");
    let (met, reason, message) = condition(&status, "ObjectiveMet");
    assert_eq!((met.as_str(), reason.as_str()), ("False", "LatencyUnread"));
    assert!(message.contains("objective.queueTime"), "{message}");
    let events = h.api.events();
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "LatencyUnread" && n.contains("latency histograms")),
        "{events:?}"
    );

    // Back, missing again, and more load than maxReplicas can carry: the condition and a
    // warning say what to change.
    *exported.lock().unwrap_or_else(PoisonError::into_inner) = Window::from(&Exported {
        in_flight: 60.0,
        load: 6.0,
        requests: 400.0,
        late: 40.0,
        histograms: true,
    });
    h.sync_and_store(&mut scaler).await;
    let status = scaler["status"].clone();
    assert_eq!(h.api.scale_writes("vllm"), vec![3, 10], "{status:#}");
    let (met, reason, message) = condition(&status, "ObjectiveMet");
    assert_eq!(
        (met.as_str(), reason.as_str()),
        ("False", "MissedAtMaxReplicas")
    );
    assert!(message.contains("raise maxReplicas"), "{message}");
    let events = h.api.events();
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "ObjectiveMissed" && n.contains("maxReplicas 10")),
        "{events:?}"
    );
    assert!(
        h.exposition().contains(
            r#"llmscaleoperator_metric_target{namespace="ns",scaler="s",metric="objective"} 5.4"#
        ),
        "{}",
        h.exposition()
    );
}

/// The starting estimate is a guess the status marks as such until something judges it; a minute
/// that meets the objective on enough requests lifts it once, by at most half, to the load the
/// pods carry, and says so.
#[tokio::test]
async fn a_met_minute_lifts_the_untested_prior_once_and_the_status_says_so() {
    let window = |requests: f64| {
        Window::from(&Exported {
            in_flight: 7.0,
            load: 7.0,
            requests,
            late: 0.0,
            histograms: true,
        })
    };
    // 10 requests in the minute: too few to judge anything.
    let exported = Arc::new(Mutex::new(window(10.0)));
    let (h, mut scaler) = objective_fleet(&exported, 2, "4").await;

    h.sync_and_store(&mut scaler).await;
    let status = scaler["status"].clone();
    assert_eq!(status["objective"]["requestsPerPod"], "4", "{status:#}");
    assert_eq!(status["objective"]["untested"], true, "{status:#}");
    // 2 Ready × 7 in flight / 4 = 3.5 → 4.
    assert_eq!(h.api.scale_writes("vllm"), vec![4]);

    // 400 requests in time at 7 per pod: the guess of 4 is lifted, by half at most, to 6.
    *exported.lock().unwrap_or_else(PoisonError::into_inner) = window(400.0);
    h.sync_and_store(&mut scaler).await;
    let status = scaler["status"].clone();
    assert_eq!(status["objective"]["requestsPerPod"], "6", "{status:#}");
    assert_eq!(status["objective"].get("untested"), None, "{status:#}");
    let lesson = status["objective"]["lesson"].as_str().unwrap_or_default();
    assert!(
        lesson.contains("starting estimate") && lesson.contains("lifted from 4.00 to 6.00"),
        "{lesson}"
    );

    // 7 per pod against the 6 lifted to: the fleet is about right, nothing more to say.
    assert_eq!(
        h.api.events_with_repeats("StartingEstimateLow"),
        0,
        "{:?}",
        h.api.events()
    );

    // Once: the next such minute gets the bounded rise of a settled pass (×1.05), not a lift.
    h.sync_and_store(&mut scaler).await;
    let status = scaler["status"].clone();
    assert_eq!(status["objective"]["requestsPerPod"], "6.3", "{status:#}");
}

/// Pods that meet the objective far above the starting estimate (a larger card than the default
/// is sized for) grow the fleet while the estimate climbs: an event says so once, with the load
/// they carried and the field that sets the start.
#[tokio::test]
async fn a_start_far_below_what_the_pods_carry_is_told_once() {
    let window = Window::from(&Exported {
        in_flight: 30.0,
        load: 30.0,
        requests: 400.0,
        late: 0.0,
        histograms: true,
    });
    let exported = Arc::new(Mutex::new(window));
    let (h, mut scaler) = objective_fleet(&exported, 2, "4").await;
    h.sync_and_store(&mut scaler).await;
    let status = scaler["status"].clone();
    assert_eq!(status["objective"]["requestsPerPod"], "6", "{status:#}");
    // 2 Ready × 30 in flight / 6 = 10: the fleet grows while its objective holds.
    assert_eq!(h.api.scale_writes("vllm"), vec![10], "{status:#}");
    let told: Vec<String> = h
        .api
        .events()
        .into_iter()
        .filter(|(reason, _)| reason == "StartingEstimateLow")
        .map(|(_, note)| note)
        .collect();
    assert_eq!(told.len(), 1, "{:?}", h.api.events());
    assert!(
        told[0].contains("30.00 requests in flight each, 7.5× the starting estimate of 4.00")
            && told[0].contains("objective.initialRequestsPerPod"),
        "{told:?}"
    );
    // The next syncs learn by the other rules: nothing is told again.
    h.sync_and_store(&mut scaler).await;
    h.sync_and_store(&mut scaler).await;
    assert_eq!(
        h.api.events_with_repeats("StartingEstimateLow"),
        1,
        "{:?}",
        h.api.events()
    );
}

/// With a pendingQuery, a fleet whose pods are not Ready yet (woken from zero) is sized for what
/// waits at the router at the learned capacity, from that query alone: the engines have no
/// series then, and the composed in-flight query is not asked.
#[tokio::test]
async fn a_waking_fleet_is_sized_for_the_requests_the_router_holds() {
    let exported = Arc::new(Mutex::new(Window {
        pending: Some(20.0),
        ..Window::default()
    }));
    let server = prometheus_window(exported.clone()).await;
    let h = Harness::leader(FakeApi::default().with_starting_deployment("vllm", 1, 0));
    let mut scaler = objective_scaler(
        &server,
        json!({ "selector": "model_name=\"m\"", "pendingQuery": "router_queue" }),
    );
    h.sync_and_store(&mut scaler).await;
    let status = scaler["status"].clone();
    // 20 requests at the router, a pod carries 4 (the prior): 5 pods, in one write.
    assert_eq!(h.api.scale_writes("vllm"), vec![5], "{status:#}");
    let reading = status["currentMetrics"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == "objective")
        .map(|m| m["value"].clone());
    assert_eq!(reading, Some(json!("20")), "{status:#}");

    // Without it the same fleet reads the engines, which have no series: held, not sized.
    let h = Harness::leader(FakeApi::default().with_starting_deployment("vllm", 1, 0));
    let mut scaler = objective_scaler(&server, json!({ "selector": "model_name=\"m\"" }));
    h.sync_and_store(&mut scaler).await;
    assert_eq!(h.api.scale_writes("vllm"), Vec::<i64>::new());
}

/// What a Prometheus answers the composed queries of an objective with, as the lab reads them:
/// requests in flight per engine, the mean running per engine over the window and both
/// histograms' increase (no series where the lab has none).
#[derive(Debug, Clone, Default)]
struct Window {
    in_flight: Option<f64>,
    /// The objective's pendingQuery `router_queue`, summed: what the router holds.
    pending: Option<f64>,
    load: Option<f64>,
    queue: Vec<(f64, f64)>,
    tpot: Vec<(f64, f64)>,
    /// First tokens served a second over the window.
    admitted: Option<f64>,
}

/// A leader over a Deployment of `replicas` Ready pods and an objective scaler that starts from
/// `prior` requests per pod, its Prometheus answering the composed queries from `exported`.
async fn objective_fleet(
    exported: &Arc<Mutex<Window>>,
    replicas: i32,
    prior: &str,
) -> (Harness, Value) {
    let server = prometheus_window(exported.clone()).await;
    let h = Harness::leader(FakeApi::default().with_deployment("vllm", replicas));
    let scaler = objective_scaler(
        &server,
        json!({ "selector": "model_name=\"m\"", "initialRequestsPerPod": prior }),
    );
    (h, scaler)
}

async fn prometheus_window(window: Arc<Mutex<Window>>) -> String {
    use std::collections::HashMap;
    let app = axum::Router::new().fallback(
        move |axum::extract::Query(params): axum::extract::Query<HashMap<String, String>>| {
            let w = window
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            async move {
                let query = params.get("query").cloned().unwrap_or_default();
                let one = |v: Option<f64>| match v {
                    Some(v) => json!([{ "metric": {}, "value": [1.0, v.to_string()] }]),
                    None => json!([]),
                };
                let buckets = |cumulative: &[(f64, f64)]| {
                    let series: Vec<Value> = cumulative
                        .iter()
                        .map(|(le, count)| {
                            let le = if le.is_infinite() {
                                "+Inf".to_owned()
                            } else {
                                le.to_string()
                            };
                            json!({ "metric": { "le": le }, "value": [1.0, count.to_string()] })
                        })
                        .collect();
                    Value::Array(series)
                };
                let result = if query.starts_with("sum by (le)") && query.contains("queue") {
                    buckets(&w.queue)
                } else if query.starts_with("sum by (le)") {
                    buckets(&w.tpot)
                } else if query.starts_with("avg(avg_over_time") {
                    one(w.load)
                } else if query.starts_with("sum(rate(vllm:time_to_first_token_seconds_count") {
                    one(w.admitted)
                } else if query == "sum(router_queue)" {
                    one(w.pending)
                } else {
                    one(w.in_flight)
                };
                axum::Json(json!({ "status": "success",
                    "data": { "resultType": "vector", "result": result } }))
            }
        },
    );
    serve(app).await
}

/// One pod's 15 s in the objective's cross-path tests: requests running, requests finished, how
/// many of them queued close to the budget but in time (0.9 s of 1 s), how many queued too long;
/// `None`: nothing is scraped (Prometheus lost its targets).
type PodStep = Option<(f64, u64, u64, u64)>;

/// What the controller and the lab entrant did, sync by sync, on the same steps.
struct CrossPath {
    by_controller: Vec<i64>,
    learnt_by_controller: Vec<Option<f64>>,
    /// `status.objective.lesson` after each of the controller's syncs.
    lessons: Vec<String>,
    /// The syncs at which the controller held a scale-down for a rising demand (a
    /// `RisingDemand` event written or repeated).
    held_for_demand: Vec<usize>,
}

/// The lab's pods export histograms and gauges for `steps`, every 15 s of one clock; the
/// controller reads what a Prometheus would answer the composed queries with over the same
/// window (whole syncs, the status stored between them), and the lab entrant reads the pods.
/// Both must decide the same replica counts and learn the same capacity, sync by sync.
/// `startup` is the spec's `startupSeconds` on both (unset, both learn 0 from pods Ready an hour
/// before their first sync).
async fn objective_cross_path(steps: &[PodStep], startup: Option<i32>) -> CrossPath {
    use llmscaleoperator_sim::lab::exported::Exported as PodExported;
    use llmscaleoperator_sim::lab::metrics::{PodSample, Scrapes};
    use llmscaleoperator_sim::lab::policy::{Bounds, PodState, Policy, View};

    const PODS: u32 = 4;
    let bounds = Bounds { min: 1, max: 10 };
    let mut entrant =
        lab_operator::Operator::objective(bounds, 4.0, lab_operator::Objective::default());
    if let Some(seconds) = startup {
        entrant = entrant.starting_in(seconds);
    }
    let window = Arc::new(Mutex::new(Window::default()));
    let server = prometheus_window(window.clone()).await;
    let mut spec = serde_json::to_value(entrant.spec()).expect("the spec serializes");
    spec["serverAddress"] = json!(server);
    let mut scaler = json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": { "name": "objective", "namespace": NS, "uid": "uid-objective",
                      "generation": 1, "resourceVersion": "1" },
        "spec": spec
    });
    let api = FakeApi::default().with_deployment("vllm", PODS as i32);
    let mut h = Harness::leader(api);
    let now = Arc::new(Mutex::new(0.0_f64));
    let clock = now.clone();
    Arc::get_mut(&mut h.ctx).expect("one owner").clock = Arc::new(move || {
        let seconds = *clock.lock().unwrap_or_else(PoisonError::into_inner);
        k8s_openapi::jiff::Timestamp::from_second(lab_operator::EPOCH).expect("epoch")
            + k8s_openapi::jiff::SignedDuration::from_secs_f64(seconds)
    });
    // Ready long before the first sync: the fleet is settled on both paths.
    let pods: Vec<PodState> = (0..u64::from(PODS))
        .map(|id| PodState {
            id,
            created: -3600.0,
            running_at: Some(-3600.0),
            ready_at: Some(-3600.0),
        })
        .collect();
    let mut exported = vec![PodExported::default(); PODS as usize];
    let mut scrapes = Scrapes::new();

    let (mut by_controller, mut by_entrant) = (Vec::new(), Vec::new());
    let (mut learnt_by_controller, mut learnt_by_entrant) = (Vec::new(), Vec::new());
    let mut lessons = Vec::new();
    let mut held_for_demand = Vec::new();
    let rising_demand = |h: &Harness| {
        h.api
            .events_with_repeats(crate::controller::events::RISING_DEMAND)
    };
    for (i, step) in steps.iter().enumerate() {
        let t = 15.0 * (i as f64 + 1.0);
        *now.lock().unwrap_or_else(PoisonError::into_inner) = t;
        if let Some((running, finished, close, late)) = *step {
            for (id, pod) in exported.iter_mut().enumerate() {
                pod.queue.observe_n(0.05, finished - close - late);
                pod.queue.observe_n(0.9, close);
                pod.queue.observe_n(5.0, late);
                pod.tpot.observe_n(0.03, finished);
                // Each finished request had its first token in the window too: the admissions.
                pod.ttft.observe_n(0.2, finished);
                let sample = PodSample {
                    running,
                    waiting: 0.0,
                    kv_usage: 0.0,
                };
                scrapes.record(id as u64, t, sample);
                scrapes.record_exported(id as u64, t, *pod);
            }
        }
        let view = View {
            now: t,
            spec: PODS,
            pods: &pods,
            metrics: &scrapes,
        };
        // What Prometheus answers is what the lab reads from its pods.
        let running = scrapes.latest(t, llmscaleoperator_sim::lab::metrics::Gauge::Running);
        // (An instant vector looks back further than the window: in flight outlasts the rest.)
        let in_flight = (!running.is_empty())
            .then(|| running.iter().map(|(_, v)| v).sum::<f64>() / running.len() as f64);
        let served = match lab_operator::latency(&view) {
            Ok(latency) => Window {
                in_flight,
                pending: None,
                load: Some(latency.load),
                queue: latency.queue,
                tpot: latency.tpot,
                admitted: latency.admitted.ok(),
            },
            Err(_) => Window {
                in_flight,
                ..Window::default()
            },
        };
        *window.lock().unwrap_or_else(PoisonError::into_inner) = served;

        let writes = h.api.scale_writes("vllm").len();
        let held = rising_demand(&h);
        h.sync_and_store(&mut scaler).await;
        let wrote = h.api.scale_writes("vllm").get(writes).copied();
        by_controller.push(wrote.unwrap_or(i64::from(PODS)));
        if rising_demand(&h) > held {
            held_for_demand.push(i);
        }
        learnt_by_controller.push(
            scaler["status"]["objective"]["requestsPerPod"]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok()),
        );
        lessons.push(
            scaler["status"]["objective"]["lesson"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );

        by_entrant.push(i64::from(entrant.decide(&view)));
        learnt_by_entrant.push(entrant.learned().map(|c| c.per_pod));
    }
    assert_eq!(
        by_controller, by_entrant,
        "the controller (left) and the lab entrant (right) decided differently"
    );
    // The controller keeps its estimate in status, to three decimals: each sync's rounding
    // carries into the next, so the two agree to within a small share, not to the bit.
    let alike = learnt_by_controller
        .iter()
        .zip(&learnt_by_entrant)
        .all(|(c, e)| match (c, e) {
            (Some(c), Some(e)) => (c - e).abs() <= 1e-3 * e.max(1.0),
            _ => false,
        });
    assert!(
        alike,
        "the controller and the lab entrant learned differently:\n{learnt_by_controller:?}\n{learnt_by_entrant:?}"
    );
    CrossPath {
        by_controller,
        learnt_by_controller,
        lessons,
        held_for_demand,
    }
}

/// The cross-path test for the objective, through a pass (the estimate rises), a miss (it
/// falls), an outage (every series gone: the scale-down waits) and a quiet spell (it comes down).
#[tokio::test]
async fn the_controller_and_the_lab_entrant_learn_the_objective_alike() {
    const PODS: i64 = 4;
    let steps: Vec<PodStep> = [
        &[Some((6.0, 30, 0, 0)); 8][..],
        &[Some((5.0, 30, 0, 9)); 4],
        &[None; 4],
        &[Some((1.0, 10, 0, 0)); 28],
    ]
    .concat();
    let CrossPath {
        by_controller,
        learnt_by_controller,
        ..
    } = objective_cross_path(&steps, None).await;
    // The run exercises every lesson: the estimate rose past the prior on the passes, fell on
    // the miss, held through the outage (no scale-down while the latency is unread), and the
    // fleet came down once the histograms were back.
    let learnt: Vec<f64> = learnt_by_controller.iter().flatten().copied().collect();
    assert!(learnt.iter().any(|&c| c > 4.0), "{learnt:?}");
    assert!(learnt.iter().any(|&c| c < 4.0), "{learnt:?}");
    let outage = 12..16;
    assert!(
        by_controller[outage].iter().all(|&c| c >= PODS),
        "{by_controller:?}"
    );
    assert!(by_controller.iter().any(|&c| c < PODS), "{by_controller:?}");
}

/// With a start-up delay the trend's hold is compared too: the controller keeps the requests
/// admitted a second between syncs (in its memory) as the lab entrant keeps them in its own.
/// When the requests in flight climb on flat admissions (each request runs longer), a scale-down
/// goes ahead; when both climb, it waits.
#[tokio::test]
async fn the_controller_and_the_lab_entrant_hold_for_a_rising_demand_alike() {
    // `n` steps from `running.0` to `running.1` requests per pod, finishing from `finished.0` to
    // `finished.1` requests each 15 s, all in time.
    let ramp = |n: u32, running: (f64, f64), finished: (f64, f64)| -> Vec<PodStep> {
        (0..n)
            .map(|i| {
                let at = f64::from(i) / f64::from(n - 1);
                let finished = finished.0 + at * (finished.1 - finished.0);
                Some((
                    running.0 + at * (running.1 - running.0),
                    finished.round() as u64,
                    0,
                    0,
                ))
            })
            .collect()
    };
    // Four pods at 1 to 2 requests each against the prior of 4 ask for fewer pods throughout;
    // the scale-down window (300 s) passes in the first phase.
    let (flat, rising) = (24..40, 56..72);
    let steps: Vec<PodStep> = [
        ramp(24, (1.0, 1.0), (10.0, 10.0)),
        ramp(16, (1.0, 2.0), (10.0, 10.0)),
        ramp(16, (1.0, 1.0), (10.0, 10.0)),
        ramp(16, (1.0, 2.0), (10.0, 20.0)),
    ]
    .concat();
    let CrossPath {
        by_controller,
        held_for_demand,
        ..
    } = objective_cross_path(&steps, Some(120)).await;
    let shown = format!("{by_controller:?}, held at {held_for_demand:?}");
    // On flat admissions the in-flight trend (it rises for 240 s) holds nothing: the fleet still
    // steps down at its end.
    assert!(
        by_controller[flat.end - 8..flat.end].contains(&3),
        "{shown}"
    );
    // Both rising: the scale-down waits once the admissions' trend shows, and till the end (the
    // count the hold kept then holds in the scale-down window).
    let first = held_for_demand.first().copied().unwrap_or(usize::MAX);
    assert!(rising.contains(&first), "{shown}");
    assert!(
        by_controller[first..rising.end].iter().all(|&c| c == 4),
        "{shown}"
    );
}

/// The load curve is carried between syncs alike: the controller keeps it in its memory, the
/// lab entrant beside its estimate. Close calls climb with the load (5%, 20%, then half the
/// requests at 4 per pod, where 2.5% miss); the miss cuts the estimate to 3.6 and the curve,
/// which puts the objective's limit lower, brings it down further while the fleet runs at 3.
#[tokio::test]
async fn the_controller_and_the_lab_entrant_cap_the_objective_by_its_load_curve_alike() {
    let steps: Vec<PodStep> = [
        &[Some((2.0, 40, 2, 0)); 8][..],
        &[Some((3.0, 40, 8, 0)); 8],
        &[Some((4.0, 40, 20, 1)); 8],
        &[Some((3.0, 40, 8, 0)); 12],
    ]
    .concat();
    let CrossPath {
        learnt_by_controller,
        lessons,
        ..
    } = objective_cross_path(&steps, None).await;
    let capped: Vec<usize> = lessons
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("the load-latency curve"))
        .map(|(i, _)| i)
        .collect();
    assert!(!capped.is_empty(), "{lessons:#?}");
    // It acted after the miss and took the estimate below the miss's cut, not below the 3 per
    // pod the fleet carried while the objective held.
    let lowest = learnt_by_controller
        .iter()
        .flatten()
        .copied()
        .fold(f64::INFINITY, f64::min);
    assert!(
        (3.0..3.6).contains(&lowest),
        "{learnt_by_controller:?}\n{lessons:#?}"
    );
}

/// A scaler deleted while the scalers were being listed leaves the store at the end of the list
/// without a Delete event: what this replica kept of it goes then, and nothing of the others.
#[tokio::test]
async fn a_scaler_deleted_during_a_list_is_forgotten_at_its_end() {
    let server = prometheus(4.0).await;
    let h = Harness::leader(
        FakeApi::default()
            .with_deployment("vllm", 2)
            .with_deployment("other", 2),
    );
    let kept = scaler_json("kept", &server, json!({}));
    let other = json!({ "apiVersion": "apps/v1", "kind": "Deployment", "name": "other" });
    let gone = scaler_json("gone", &server, json!({ "targetRef": other }));
    h.sync(&kept).await;
    h.sync(&gone).await;
    let key = |name: &str| ScalerKey {
        namespace: NS.to_owned(),
        name: name.to_owned(),
    };
    assert!(h.cache.get(&key("gone")).is_some());
    // Another watch's scaler (the cache is shared by the watches of every namespace) stays.
    let elsewhere = ScalerKey {
        namespace: "elsewhere".to_owned(),
        name: "x".to_owned(),
    };
    let mut theirs = h.cache.get(&key("kept")).expect("kept is served");
    theirs.uid = "uid-elsewhere".to_owned();
    h.cache.update(elsewhere.clone(), theirs);
    let mut listed = kube::runtime::reflector::store::Writer::<LLMScaler>::default();
    listed.apply_watcher_event(&kube::runtime::watcher::Event::Apply(
        serde_json::from_value(kept).expect("a valid scaler"),
    ));
    super::forget_vanished(&h.ctx, &listed.as_reader());
    assert!(h.cache.get(&key("kept")).is_some());
    assert!(h.cache.get(&key("gone")).is_none());
    assert!(h.cache.get(&elsewhere).is_some());
    let text = h.metrics.encode().expect("encodes");
    assert!(
        text.contains(r#"scaler="kept""#) && !text.contains(r#"scaler="gone""#),
        "{text}"
    );
}

/// With shards, a scaler of a shard another replica holds costs this replica no query, no write
/// and no look on a period: its values are served from its status. Once its shard is won here,
/// it is this replica's to sync again.
#[tokio::test]
async fn another_shards_scaler_is_served_from_its_status_and_never_looked_at_again() {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use crate::leader::ShardState;

    let (server, queries) = counted_prometheus(3.0).await;
    let mut scaler = scaler_json("s", &server, json!({}));
    scaler["status"] = json!({
        "currentReplicas": 2, "desiredReplicas": 6,
        "conditions": [{ "type": "Ready", "status": "True", "reason": "Synced", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z" }],
        "currentMetrics": [{ "name": "kv", "value": "3", "recommendedReplicas": 6,
                             "measuredAt": "2026-01-01T00:00:00Z" }]
    });
    let ours = ShardState {
        until: Some(Instant::now() + Duration::from_secs(3600)),
        ..ShardState::default()
    };
    let theirs = ShardState {
        held_elsewhere: true,
        ..ShardState::default()
    };
    let shard = usize::try_from(crate::leader::shards::shard_of("uid-s", 2)).expect("a shard");
    let mut states = vec![ours, ours];
    states[shard] = theirs;
    let (tx, leadership) = Leadership::published(states);
    let h = Harness::new(FakeApi::default().with_deployment("vllm", 2), leadership);

    // The controller's cache, fed as the watch's events are sorted; it holds the whole object
    // from before the shard was lost.
    use kube::runtime::watcher::Event;
    let mut cache = kube::runtime::reflector::store::Writer::<LLMScaler>::default();
    let feed = |cache: &mut kube::runtime::reflector::store::Writer<LLMScaler>, event| {
        if let Some(event) = super::sort(&h.ctx, event) {
            cache.apply_watcher_event(&event);
        }
    };
    let object: LLMScaler = serde_json::from_value(scaler.clone()).expect("a valid scaler");
    cache.apply_watcher_event(&Event::Apply(object.clone()));
    // Looked at here before (its generation seen).
    assert!(h.ctx.generations.changed(&object) && !h.ctx.generations.changed(&object));

    // As the watch brings it now: served at once, kept only as what the conflict checks read,
    // and gone from the controller's cache.
    feed(&mut cache, Event::Apply(object.clone()));
    assert!(cache.as_reader().state().is_empty());
    let namespace = kube::ResourceExt::namespace(&object).expect("a namespace");
    assert_eq!(
        h.ctx.others.peers.get(&namespace, "s"),
        Some(super::conflicts::Peer::of(&object))
    );
    let served = h.cached("s").expect("served from its status");
    assert_eq!(
        (served.desired_replicas, served.metrics[0].value),
        (6, Some(3.0))
    );
    assert!(served.vouched.as_ref().is_some_and(|v| v.holds()));

    // The whole object, looked at (a look already due before it left the cache): no query, no
    // write, and no look on a period; a list is asked for, which trades any whole copy still
    // cached for what is kept.
    let lists = h.ctx.relist.asked();
    assert_eq!(h.sync(&scaler).await, Action::await_change());
    assert_eq!(h.ctx.relist.asked(), lists + 1, "a list asked for");
    assert_eq!(queries.load(Ordering::SeqCst), 0, "no query");
    assert!(h.api.writes().is_empty(), "{:?}", h.api.writes());
    assert_eq!(h.cached("s"), Some(served.clone()));

    // A list that brings it again: still only kept, still served.
    for event in [
        Event::Init,
        Event::InitApply(object.clone()),
        Event::InitDone,
    ] {
        feed(&mut cache, event);
    }
    super::forget_vanished(&h.ctx, &cache.as_reader());
    assert!(cache.as_reader().state().is_empty());
    assert!(h.ctx.others.peers.get(&namespace, "s").is_some());
    assert_eq!(h.cached("s"), Some(served));
    // A list that does not (deleted while nothing watched): what was kept of it goes, and so do
    // its served values.
    for event in [Event::Init, Event::InitDone] {
        feed(&mut cache, event);
    }
    super::forget_vanished(&h.ctx, &cache.as_reader());
    assert_eq!(h.ctx.others.peers.get(&namespace, "s"), None);
    assert_eq!(h.cached("s"), None);

    // Its shard won here: the list that asks for brings it to the cache as new (its generation
    // was forgotten), and it is looked at on a period again.
    tx.send_replace(vec![ours, ours]);
    feed(&mut cache, Event::Apply(object.clone()));
    assert_eq!(cache.as_reader().state().len(), 1);
    assert_eq!(h.ctx.others.peers.get(&namespace, "s"), None);
    assert!(h.ctx.generations.changed(&object));
    assert_ne!(h.sync(&scaler).await, Action::await_change());
}
