//! kube-apiserver killed (SIGKILL) and started again under a running operator process, the shared
//! control plane's own apiserver on its etcd: the operator does not crash, keeps evaluating while
//! the apiserver is away, applies once it is back what was decided meanwhile, does not repeat an
//! action, and its watches of both the scaler and the target resume.
//!
//! The only test in this binary: nothing else may use the cluster while its apiserver is down
//! (test binaries run one after another).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use common::env::{Env, WAIT};
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// A decision server on loopback whose answer the test sets, counting the questions.
struct Planner {
    url: String,
    active: Arc<AtomicI64>,
    asked: Arc<AtomicU64>,
}

impl Planner {
    async fn start(active: i64) -> Self {
        let (answer, asked) = (
            Arc::new(AtomicI64::new(active)),
            Arc::new(AtomicU64::new(0)),
        );
        let state = (answer.clone(), asked.clone());
        let app = axum::Router::new()
            .route(
                "/decisions",
                axum::routing::get(
                    |axum::extract::State((answer, asked)): axum::extract::State<(
                        Arc<AtomicI64>,
                        Arc<AtomicU64>,
                    )>| async move {
                        asked.fetch_add(1, Ordering::SeqCst);
                        axum::Json(json!({
                            "apiVersion": "llmscaling.inference.x-k8s.io/v1alpha1",
                            "decisions": [{
                                "namespace": "restart", "serviceId": "llama",
                                "replicas": { "active": answer.load(Ordering::SeqCst) }
                            }]
                        }))
                    },
                ),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url,
            active: answer,
            asked,
        }
    }

    fn answer(&self, active: i64) {
        self.active.store(active, Ordering::SeqCst);
    }

    fn asked(&self) -> u64 {
        self.asked.load(Ordering::SeqCst)
    }
}

/// Scale actions reported about the scaler: (note, how many times it was reported).
async fn actions(env: &Env) -> Vec<(String, i32)> {
    env.events_about("vllm")
        .await
        .into_iter()
        .filter(|e| matches!(e.reason.as_deref(), Some("ScaledUp" | "ScaledDown")))
        .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
        .collect()
}

/// The one action whose note contains `fragment`, reported once. A sync publishes its events
/// after its writes, so the event is waited for; once there, it must be the only one, counted once.
async fn acted_once(env: &Env, fragment: &str) {
    let matching = common::eventually(&format!("an event {fragment:?}"), WAIT, || async {
        let matching: Vec<_> = actions(env)
            .await
            .into_iter()
            .filter(|(note, _)| note.contains(fragment))
            .collect();
        (!matching.is_empty()).then_some(matching)
    })
    .await;
    assert!(
        matching.len() == 1 && matching[0].1 == 1,
        "{fragment:?} must be reported exactly once: {:?}",
        actions(env).await
    );
}

/// The pid of the shared control plane's kube-apiserver.
fn apiserver_pid() -> String {
    let file = common::repo_root().join("target/cluster/pids/kube-apiserver.pid");
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .to_owned()
}

async fn metric(port: u16, name: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[tokio::test]
async fn a_killed_apiserver_comes_back_and_no_action_is_lost_or_repeated() {
    let env = Env::without_prometheus("restart").await;
    env.deployment("vllm", 1).await;
    let planner = Planner::start(2).await;

    // The operator as users run it: its own process, with leader election (a lease shorter than
    // the outage, so leadership is lost and won back on the way).
    let port = common::free_port();
    let kubeconfig = common::kubeconfig_path();
    // Its log is kept for a failure's post-mortem.
    let dir = common::repo_root().join("target/test-tmp").join(&env.ns);
    std::fs::create_dir_all(&dir).unwrap();
    let log = std::fs::File::create(dir.join("operator.log")).unwrap();
    eprintln!("operator log: {}", dir.join("operator.log").display());
    let mut operator = common::Spawned::new(
        Command::new(env!("CARGO_BIN_EXE_llmscaleoperator"))
            .args(["run", "--kubeconfig", kubeconfig.to_str().unwrap()])
            .args(["--namespace", &env.ns, "--disable-extmetrics"])
            .args(["--health-address", &format!("127.0.0.1:{port}")])
            .args(["--leader-elect", "--leader-elect-namespace", &env.ns])
            .args(["--leader-elect-lease-seconds", "3"])
            .env("POD_NAME", "op-restart")
            .env("RUST_LOG", "info,llmscaleoperator=debug")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    env.scaler(
        "vllm",
        "vllm",
        json!({
            "metricProvider": "Custom",
            "serverAddress": planner.url,
            "customProvider": { "serviceId": "llama", "namespace": "restart", "path": "decisions" },
            "minReplicas": 1, "maxReplicas": 10
        }),
    )
    .await;
    env.wait_ready("vllm", 2).await;
    acted_once(&env, "from 1 to 2").await;

    // The apiserver dies without a word; the planner asks for 4 while it is away.
    assert!(
        Command::new("kill")
            .args(["-KILL", &apiserver_pid()])
            .status()
            .unwrap()
            .success()
    );
    planner.answer(4);
    let asked = planner.asked();
    common::eventually(
        "the operator to keep evaluating without an apiserver",
        WAIT,
        || async { (planner.asked() >= asked + 3).then_some(()) },
    )
    .await;
    common::eventually("the operator to give up leading", WAIT, || async {
        (metric(port, "llmscaleoperator_leader").await? == 0.0).then_some(())
    })
    .await;
    assert!(
        operator.try_wait().unwrap().is_none(),
        "the operator exited"
    );

    let restarted = Command::new(common::repo_root().join("tests/cluster/up.sh"))
        .arg("restart-apiserver")
        .env("CLUSTER_SKIP_BUILD", "1")
        .output()
        .unwrap();
    assert!(
        restarted.status.success(),
        "restart-apiserver failed:\n{}",
        String::from_utf8_lossy(&restarted.stderr)
    );

    // What was decided meanwhile is applied once, by the same process.
    env.wait_ready("vllm", 4).await;
    common::eventually("the operator to lead again", WAIT, || async {
        (metric(port, "llmscaleoperator_leader").await? == 1.0).then_some(())
    })
    .await;
    acted_once(&env, "from 2 to 4").await;

    // The target watch resumed: another writer's change is seen and overruled.
    env.deployments()
        .patch(
            "vllm",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 1 } })),
        )
        .await
        .unwrap();
    common::eventually("replicas restored to 4", WAIT, || async {
        (env.spec_replicas("vllm").await == 4).then_some(())
    })
    .await;
    // The scaler watch resumed: a new floor above the decision is acted on.
    env.scalers()
        .patch(
            "vllm",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "minReplicas": 5 } })),
        )
        .await
        .unwrap();
    env.wait_ready("vllm", 5).await;
    env.stays("vllm", 5, Duration::from_secs(3)).await;
    acted_once(&env, "from 2 to 4").await;
    acted_once(&env, "from 4 to 5").await;
    assert!(
        operator.try_wait().unwrap().is_none(),
        "the operator exited"
    );
    assert!(
        common::interrupt(&mut operator, WAIT).await.success(),
        "the operator did not stop cleanly"
    );
    env.done().await;
}
