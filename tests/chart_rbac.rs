//! The chart's RBAC is enough and no more: the operator binary, run out of cluster as the chart's
//! ServiceAccount with exactly the chart's Roles and bindings, passes every scenario; with any
//! one rule (or built-in binding) taken away, at least one scenario fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::env::Env;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};

const APISERVICE: &str = "v1beta1.external.metrics.k8s.io";
/// How long a run with a rule taken away is given before its scenarios are judged.
const REDUCED_RUN: Duration = Duration::from_secs(25);
const FULL_RUN: Duration = Duration::from_secs(120);
/// The APIService and the release's cluster-wide objects are one of each: runs take turns.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn helm_template(release: &str, ns: &str, sets: &[String]) -> Vec<Value> {
    let helm = common::repo_root().join("target/cluster/bin/helm");
    let out = Command::new(helm)
        .args(["template", release, "chart", "--namespace", ns])
        .args(sets.iter().flat_map(|s| ["--set", s.as_str()]))
        .current_dir(common::repo_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// One thing to take away from the chart's RBAC.
#[derive(Debug, Clone)]
enum Removal {
    /// A rule (by index) of a Role or ClusterRole the chart defines.
    Rule {
        kind: String,
        role: String,
        index: usize,
        text: String,
    },
    /// A binding to a built-in role (auth-delegator, the authentication reader).
    Binding { kind: String, name: String },
}

impl std::fmt::Display for Removal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Removal::Rule {
                kind, role, text, ..
            } => write!(f, "{kind} {role}: {text}"),
            Removal::Binding { kind, name } => write!(f, "{kind} {name}"),
        }
    }
}

fn is_rbac(object: &Value) -> bool {
    ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
        .contains(&object["kind"].as_str().unwrap_or(""))
}

/// Every rule of every role the chart renders, and its bindings to roles it does not define.
fn removals(objects: &[Value]) -> Vec<Removal> {
    let ours: BTreeSet<String> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    let mut all = Vec::new();
    for object in objects.iter().filter(|o| is_rbac(o)) {
        let kind = object["kind"].as_str().unwrap().to_owned();
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        if kind.ends_with("Role") {
            for (index, rule) in object["rules"].as_array().unwrap().iter().enumerate() {
                all.push(Removal::Rule {
                    kind: kind.clone(),
                    role: name.clone(),
                    index,
                    text: rule.to_string(),
                });
            }
        } else if !ours.contains(object["roleRef"]["name"].as_str().unwrap()) {
            all.push(Removal::Binding { kind, name });
        }
    }
    all
}

fn without(objects: &[Value], removal: Option<&Removal>) -> Vec<Value> {
    objects
        .iter()
        .filter(|o| is_rbac(o))
        .filter(|o| match removal {
            Some(Removal::Binding { kind, name }) => {
                !(o["kind"] == kind.as_str() && o["metadata"]["name"] == name.as_str())
            }
            _ => true,
        })
        .map(|o| {
            let mut o = o.clone();
            if let Some(Removal::Rule {
                kind, role, index, ..
            }) = removal
                && o["kind"] == kind.as_str()
                && o["metadata"]["name"] == role.as_str()
            {
                o["rules"].as_array_mut().unwrap().remove(*index);
            }
            o
        })
        .collect()
}

async fn apply(client: &kube::Client, objects: &[Value]) {
    for object in objects {
        let ns = object["metadata"]["namespace"].as_str();
        let pp = PostParams::default();
        match object["kind"].as_str().unwrap() {
            "ClusterRole" => {
                let o: ClusterRole = serde_json::from_value(object.clone()).unwrap();
                Api::<ClusterRole>::all(client.clone())
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            "ClusterRoleBinding" => {
                let o: ClusterRoleBinding = serde_json::from_value(object.clone()).unwrap();
                Api::<ClusterRoleBinding>::all(client.clone())
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            "Role" => {
                let o: Role = serde_json::from_value(object.clone()).unwrap();
                Api::<Role>::namespaced(client.clone(), ns.unwrap())
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            "RoleBinding" => {
                let o: RoleBinding = serde_json::from_value(object.clone()).unwrap();
                Api::<RoleBinding>::namespaced(client.clone(), ns.unwrap())
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            other => panic!("not RBAC: {other}"),
        }
    }
}

async fn delete(client: &kube::Client, objects: &[Value]) {
    let dp = DeleteParams::default();
    for object in objects {
        let name = object["metadata"]["name"].as_str().unwrap();
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default");
        let _ = match object["kind"].as_str().unwrap() {
            "ClusterRole" => Api::<ClusterRole>::all(client.clone())
                .delete(name, &dp)
                .await
                .map(|_| ()),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
                .delete(name, &dp)
                .await
                .map(|_| ()),
            "Role" => Api::<Role>::namespaced(client.clone(), ns)
                .delete(name, &dp)
                .await
                .map(|_| ()),
            _ => Api::<RoleBinding>::namespaced(client.clone(), ns)
                .delete(name, &dp)
                .await
                .map(|_| ()),
        };
    }
}

/// A kubeconfig that authenticates as a ServiceAccount token against the local control plane.
fn token_kubeconfig(path: &std::path::Path, token: &str) {
    let admin: Value =
        serde_norway::from_str(&std::fs::read_to_string(common::kubeconfig_path()).unwrap())
            .unwrap();
    let cluster = admin["clusters"][0]["cluster"].clone();
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{ "name": "local", "cluster": cluster }],
        "users": [{ "name": "operator", "user": { "token": token } }],
        "contexts": [{ "name": "operator", "context": { "cluster": "local", "user": "operator" } }],
        "current-context": "operator",
    });
    std::fs::write(path, serde_norway::to_string(&config).unwrap()).unwrap();
}

/// The container args the chart gives the operator, with this test's addresses instead of the
/// in-cluster ones.
fn chart_args(objects: &[Value], fullname: &str) -> Vec<String> {
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == fullname)
        .unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .filter(|a| !a.starts_with("--health-address=") && !a.starts_with("--extmetrics-address="))
        .collect()
}

const SCENARIOS: &[&str] = &[
    "scales a Deployment",
    "scales a Deployment its watch listed before a scaler named it",
    "writes the scaler's status",
    "records events",
    "scales a StatefulSet",
    "scales a LeaderWorkerSet",
    "marks the pods to remove before a scale-down",
    "keeps its certificate Secret",
    "writes the caBundle of the chart's APIService",
    "answers a ServiceAccount token (TokenReview, SubjectAccessReview)",
    "answers the aggregator's front-proxy certificate",
    "holds the leader Lease",
];

struct World<'a> {
    env: &'a Env,
    fullname: String,
    /// leaderElection.shards (1: the one leader Lease).
    shards: u32,
    port: u16,
    reader_token: String,
    /// Whether the scaler of Deployment "late" was created (once the first one has scaled).
    late: std::sync::atomic::AtomicBool,
}

impl World<'_> {
    async fn check(&self, scenario: &str) -> bool {
        let client = &self.env.client;
        let ns = &self.env.ns;
        match scenario {
            "scales a Deployment" => replicas::<Deployment>(client, ns, "up").await == Some(3),
            // The operator keeps only the targets scalers name: a scaler that comes after the
            // Deployment watch listed its target reads it once (with the verbs it is granted).
            "scales a Deployment its watch listed before a scaler named it" => {
                use std::sync::atomic::Ordering;
                if !self.late.load(Ordering::SeqCst) {
                    if replicas::<Deployment>(client, ns, "up").await == Some(3) {
                        let late = json!({ "minReplicas": 1, "maxReplicas": 2,
                            "metrics": [{ "name": "load", "query": self.env.query("load"), "target": "1" }] });
                        self.env.scaler("late", "late", late).await;
                        self.late.store(true, Ordering::SeqCst);
                    }
                    return false;
                }
                replicas::<Deployment>(client, ns, "late").await == Some(2)
            }
            "writes the scaler's status" => self
                .env
                .scalers()
                .get("up")
                .await
                .ok()
                .and_then(|s| s.status)
                .is_some_and(|s| s.desired_replicas == 3),
            "records events" => !self.env.events("up", "ScaledUp").await.is_empty(),
            "scales a StatefulSet" => replicas::<StatefulSet>(client, ns, "sts").await == Some(2),
            "scales a LeaderWorkerSet" => {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &lws());
                api.get("lws")
                    .await
                    .ok()
                    .and_then(|o| o.data["spec"]["replicas"].as_i64())
                    == Some(2)
            }
            "marks the pods to remove before a scale-down" => {
                replicas::<Deployment>(client, ns, "down").await == Some(1)
                    && !self.env.events("down", "VictimsSelected").await.is_empty()
                    && self
                        .env
                        .events("down", "DeletionCostFailed")
                        .await
                        .is_empty()
            }
            "keeps its certificate Secret" => self.ca().await.is_some(),
            "writes the caBundle of the chart's APIService" => {
                let apiservice = Api::<APIService>::all(client.clone())
                    .get(APISERVICE)
                    .await
                    .ok();
                let bundle = apiservice
                    .and_then(|a| a.spec?.ca_bundle)
                    .map(|b| String::from_utf8(b.0).unwrap());
                bundle.is_some() && bundle == self.ca().await
            }
            "answers a ServiceAccount token (TokenReview, SubjectAccessReview)" => {
                self.read_metric(None, Some(&self.reader_token)).await
            }
            "answers the aggregator's front-proxy certificate" => {
                let pki = common::kubeconfig_path().parent().unwrap().join("pki");
                let mut pem = std::fs::read(pki.join("front-proxy-client.crt")).unwrap();
                pem.extend(std::fs::read(pki.join("front-proxy-client.key")).unwrap());
                let identity = reqwest::Identity::from_pem(&pem).unwrap();
                self.read_metric(Some(identity), None).await
            }
            "holds the leader Lease" => {
                let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
                    Api::namespaced(client.clone(), ns);
                let names: Vec<String> = if self.shards > 1 {
                    (0..self.shards)
                        .map(|i| {
                            llmscaleoperator::leader::sharded::shard_lease(
                                &self.fullname,
                                i,
                                self.shards,
                            )
                        })
                        .collect()
                } else {
                    vec![self.fullname.clone()]
                };
                let mut held = true;
                for name in names {
                    held &= leases
                        .get_opt(&name)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|l| l.spec?.holder_identity)
                        .is_some_and(|h| !h.is_empty());
                }
                held
            }
            other => panic!("unknown scenario {other}"),
        }
    }

    async fn ca(&self) -> Option<String> {
        let secrets: Api<Secret> = Api::namespaced(self.env.client.clone(), &self.env.ns);
        let secret = secrets
            .get_opt(&format!("{}-extmetrics-tls", self.fullname))
            .await
            .ok()??;
        let data = secret.data?;
        data.get("ca.key")?;
        Some(String::from_utf8(data.get("ca.crt")?.0.clone()).unwrap())
    }

    /// Reads the `load` metric of scaler `up` directly from the operator.
    async fn read_metric(&self, identity: Option<reqwest::Identity>, token: Option<&str>) -> bool {
        let Some(ca) = self.ca().await else {
            return false;
        };
        let mut builder = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(ca.as_bytes()).unwrap()])
            .timeout(Duration::from_secs(5));
        if let Some(identity) = identity {
            builder = builder.identity(identity);
        }
        let client = builder.build().unwrap();
        let mut request = client.get(format!(
            "https://localhost:{}/apis/external.metrics.k8s.io/v1beta1/namespaces/{}/load?labelSelector=llmscaler%3Dup",
            self.port, self.env.ns
        ));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        } else {
            request = request
                .header("X-Remote-User", "aggregated-caller")
                .header("X-Remote-Group", "system:masters");
        }
        request
            .send()
            .await
            .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
    }
}

fn lws() -> ApiResource {
    ApiResource {
        group: "leaderworkerset.x-k8s.io".into(),
        version: "v1".into(),
        api_version: "leaderworkerset.x-k8s.io/v1".into(),
        kind: "LeaderWorkerSet".into(),
        plural: "leaderworkersets".into(),
    }
}

async fn replicas<K>(client: &kube::Client, ns: &str, name: &str) -> Option<i32>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + serde::Serialize,
    <K as kube::Resource>::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let value = serde_json::to_value(api.get(name).await.ok()?).ok()?;
    value["spec"]["replicas"].as_i64().map(|r| r as i32)
}

/// The scenario world in a fresh namespace: targets, scalers, the chart's APIService, a reader.
async fn prepare(env: &mut Env, fullname: &str) -> String {
    env.ns = common::namespace(&env.client, "rbac").await;
    env.set("load", 3.0).await;
    env.set("idle", 0.5).await;
    env.deployment("up", 1).await;
    env.deployment("down", 2).await;
    env.deployment("late", 1).await;
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": { "name": "sts" },
        "spec": {
            "replicas": 1, "serviceName": "sts",
            "selector": { "matchLabels": { "app": "sts" } },
            "template": { "metadata": { "labels": { "app": "sts" } },
                          "spec": { "containers": [{ "name": "vllm", "image": "registry.k8s.io/pause:3.10" }] } }
        }
    }))
    .unwrap();
    Api::<StatefulSet>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &sts)
        .await
        .unwrap();
    let lws_api: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.ns, &lws());
    let mut object = DynamicObject::new("lws", &lws()).data(json!({ "spec": { "replicas": 1 } }));
    object.metadata.namespace = Some(env.ns.clone());
    lws_api
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let status = json!({ "status": { "readyReplicas": 1 } });
    lws_api
        .patch_status(
            "lws",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(status),
        )
        .await
        .unwrap();

    let up = json!({ "minReplicas": 1, "maxReplicas": 3,
                     "metrics": [{ "name": "load", "query": env.query("load"), "target": "1" }] });
    env.scaler("up", "up", up).await;
    let mut two = json!({ "minReplicas": 1, "maxReplicas": 2,
                          "metrics": [{ "name": "load", "query": env.query("load"), "target": "1" }] });
    two["targetRef"] = json!({ "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "sts" });
    env.scaler("sts", "sts", two.clone()).await;
    two["targetRef"] = json!({ "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "lws" });
    env.scaler("lws", "lws", two).await;
    env.scaler(
        "down",
        "down",
        json!({ "minReplicas": 1, "maxReplicas": 2,
                "metrics": [{ "name": "idle", "query": env.query("idle"), "target": "1" }] }),
    )
    .await;

    // The chart's APIService, as `helm install` leaves it: ours by label, no caBundle yet.
    let apiservices: Api<APIService> = Api::all(env.client.clone());
    common::remove_apiservice(&apiservices).await;
    let apiservice: APIService = serde_json::from_value(json!({
        "metadata": { "name": APISERVICE,
                      "labels": { "autoscaling.modelsphere.dev/apiservice-owner": "llmscaleoperator" } },
        "spec": { "group": "external.metrics.k8s.io", "version": "v1beta1",
                  "groupPriorityMinimum": 100, "versionPriority": 100,
                  "service": { "name": fullname, "namespace": env.ns, "port": 443 } }
    }))
    .unwrap();
    apiservices
        .create(&PostParams::default(), &apiservice)
        .await
        .unwrap();

    let reader = common::token_for(&env.client, &env.ns, "reader").await;
    common::grant_metrics(&env.client, &env.ns, "reader").await;
    reader
}

/// Runs the operator as the chart's ServiceAccount with `removal` taken from its RBAC (the
/// namespaced variant of the chart when `namespaced`, with `shards` when above 1); returns the
/// scenarios that passed within `budget` (all of them ends the run early).
async fn run(
    env: &mut Env,
    index: usize,
    removal: Option<&Removal>,
    namespaced: bool,
    shards: u32,
    budget: Duration,
) -> BTreeSet<&'static str> {
    // One release name for every run: the cluster-wide objects of a run are gone before the next.
    let release = "rbac";
    let fullname = format!("{release}-llmscaleoperator");
    let reader_token = prepare(env, &fullname).await;
    let mut sets = if namespaced {
        vec![
            "rbac.namespaced=true".to_owned(),
            format!("watch.namespaces={{{}}}", env.ns),
        ]
    } else {
        Vec::new()
    };
    if shards > 1 {
        sets.push(format!("leaderElection.shards={shards}"));
    }
    let rendered = helm_template(release, &env.ns, &sets);
    let rbac = without(&rendered, removal);
    apply(&env.client, &rbac).await;
    let token = common::token_for(&env.client, &env.ns, &fullname).await;
    let kubeconfig =
        std::env::temp_dir().join(format!("rbac-{}-{index}.kubeconfig", std::process::id()));
    token_kubeconfig(&kubeconfig, &token);

    let port = common::free_port();
    let operator = Command::new(env!("CARGO_BIN_EXE_llmscaleoperator"))
        .args(chart_args(&rendered, &fullname))
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--namespace",
            &env.ns,
        ])
        .args([
            "--health-address",
            &format!("127.0.0.1:{}", common::free_port()),
        ])
        .args(["--extmetrics-address", &format!("127.0.0.1:{port}")])
        .env("POD_NAMESPACE", &env.ns)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut operator = common::Spawned::new(operator);
    let world = World {
        env,
        fullname: fullname.clone(),
        shards,
        port,
        reader_token,
        late: Default::default(),
    };
    let deadline = Instant::now() + budget;
    let mut passed = BTreeSet::new();
    loop {
        for scenario in SCENARIOS {
            if !passed.contains(scenario) && world.check(scenario).await {
                passed.insert(*scenario);
            }
        }
        let exited = operator.try_wait().unwrap().is_some();
        if passed.len() == SCENARIOS.len() || exited || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = operator.kill();
    let _ = operator.wait();
    let _ = std::fs::remove_file(&kubeconfig);
    delete(&env.client, &rbac).await;
    common::delete_namespace(&env.client, &env.ns).await;
    passed
}

/// The scenarios that did not pass.
fn failed(passed: &BTreeSet<&'static str>) -> Vec<&'static str> {
    SCENARIOS
        .iter()
        .copied()
        .filter(|s| !passed.contains(s))
        .collect()
}

/// Removes the APIService the runs used and the test's first namespace.
async fn finish(mut env: Env, first_ns: String) {
    let _ = Api::<APIService>::all(env.client.clone())
        .delete(APISERVICE, &DeleteParams::default())
        .await;
    env.ns = first_ns;
    env.done().await;
}

#[tokio::test]
async fn the_charts_rbac_is_sufficient_and_every_rule_is_needed() {
    let _turn = TURN.lock().await;
    let mut env = Env::new("rbac").await;
    common::install_leaderworkerset_crd(&env.client).await;
    // Served, so the conflict check watches ScaledObjects (and needs the rule to).
    common::install_scaledobject_crd(&env.client).await;
    let first_ns = env.ns.clone();

    // Everything the chart grants: every scenario passes.
    let passed = run(&mut env, 0, None, false, 1, FULL_RUN).await;
    let missing = failed(&passed);
    assert!(
        missing.is_empty(),
        "with the chart's RBAC these failed: {missing:?}"
    );

    // Take each rule away in turn: something the operator must do stops working.
    let rendered = helm_template("rbac", "ns", &[]);
    let removals = removals(&rendered);
    assert!(removals.len() >= 10, "{removals:?}");
    let mut unneeded = Vec::new();
    for (i, removal) in removals.iter().enumerate() {
        let passed = run(&mut env, i + 1, Some(removal), false, 1, REDUCED_RUN).await;
        let broken = failed(&passed);
        eprintln!("without {removal}: failed {broken:?}");
        if broken.is_empty() {
            unneeded.push(removal.to_string());
        }
    }
    assert!(
        unneeded.is_empty(),
        "rules no scenario needs (remove them from the chart): {unneeded:#?}"
    );

    finish(env, first_ns).await;
}

/// rbac.namespaced: Roles in the watched namespace only, no cluster-wide grant for the
/// controller; the operator lists and watches only there, and everything still works.
#[tokio::test]
async fn namespaced_rbac_is_enough_for_the_watched_namespaces() {
    let _turn = TURN.lock().await;
    let mut env = Env::new("rbac-namespaced").await;
    common::install_leaderworkerset_crd(&env.client).await;
    // Served, so the conflict check watches ScaledObjects (and needs the rule to).
    common::install_scaledobject_crd(&env.client).await;
    let first_ns = env.ns.clone();
    let passed = run(&mut env, 100, None, true, 1, FULL_RUN).await;
    let missing = failed(&passed);
    assert!(
        missing.is_empty(),
        "with namespaced Roles these failed: {missing:?}"
    );
    finish(env, first_ns).await;
}

/// leaderElection.shards: the sharded leader Role is enough to lead every shard (and so to do
/// everything else), and each of its rules is needed.
#[tokio::test]
async fn sharded_rbac_leads_every_shard_and_every_lease_rule_is_needed() {
    const SHARDS: u32 = 3;
    let _turn = TURN.lock().await;
    let mut env = Env::new("rbac-sharded").await;
    common::install_leaderworkerset_crd(&env.client).await;
    common::install_scaledobject_crd(&env.client).await;
    let first_ns = env.ns.clone();
    let passed = run(&mut env, 200, None, false, SHARDS, FULL_RUN).await;
    let missing = failed(&passed);
    assert!(
        missing.is_empty(),
        "with the sharded chart's RBAC these failed: {missing:?}"
    );
    let rendered = helm_template("rbac", "ns", &[format!("leaderElection.shards={SHARDS}")]);
    let lease_rules: Vec<Removal> = removals(&rendered)
        .into_iter()
        .filter(|r| matches!(r, Removal::Rule { role, .. } if role.ends_with("-leader")))
        .collect();
    assert_eq!(lease_rules.len(), 2, "{lease_rules:?}");
    for (i, removal) in lease_rules.iter().enumerate() {
        let passed = run(&mut env, 201 + i, Some(removal), false, SHARDS, REDUCED_RUN).await;
        assert!(
            !failed(&passed).is_empty(),
            "without {removal} every scenario still passed"
        );
    }
    finish(env, first_ns).await;
}
