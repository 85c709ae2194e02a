//! Several replicas, one writer: the holder of the Lease scales, the standby evaluates and serves
//! the external metrics API with current values, and takes over within the lease duration when
//! the holder dies, or at once when it stops gracefully.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::env::{Env, WAIT};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::json;

struct Replica {
    name: &'static str,
    child: common::Spawned,
    metrics_port: u16,
    api_port: u16,
}

fn spawn(env: &Env, name: &'static str, lease_seconds: u64) -> Replica {
    spawn_via(env, name, lease_seconds, &common::kubeconfig_path())
}

/// A replica that reaches the API server with the kubeconfig at `kubeconfig`.
fn spawn_via(env: &Env, name: &'static str, lease_seconds: u64, kubeconfig: &Path) -> Replica {
    let (metrics_port, api_port) = (common::free_port(), common::free_port());
    // Each replica's log is kept for a failure's post-mortem.
    let log = std::fs::File::create(tempfile_dir(env).join(format!("{name}.log"))).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_llmscaleoperator"))
        .args(["run", "--kubeconfig", kubeconfig.to_str().unwrap()])
        .args([
            "--namespace",
            &env.ns,
            "--extmetrics-service-namespace",
            &env.ns,
        ])
        .args(["--health-address", &format!("127.0.0.1:{metrics_port}")])
        .args(["--extmetrics-address", &format!("127.0.0.1:{api_port}")])
        .args(["--extmetrics-tls-secret", "serving"])
        .args(["--leader-elect", "--leader-elect-namespace", &env.ns])
        .args(["--leader-elect-lease-seconds", &lease_seconds.to_string()])
        .env("POD_NAME", name)
        .env("RUST_LOG", "info,llmscaleoperator=debug")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Replica {
        name,
        child: common::Spawned::new(child),
        metrics_port,
        api_port,
    }
}

async fn holder(env: &Env) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.ns);
    leases
        .get_opt("llmscaleoperator")
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// llmscaleoperator_leader as a replica reports it.
async fn says_leader(replica: &Replica) -> Option<bool> {
    let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", replica.metrics_port))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let line = text
        .lines()
        .find(|l| l.starts_with("llmscaleoperator_leader "))?;
    Some(line.ends_with(" 1"))
}

/// The `load` metric of scaler `vllm` as a replica's external metrics API serves it, read with
/// the aggregator's front-proxy certificate.
async fn served_value(env: &Env, replica: &Replica) -> Option<String> {
    let answer = common::external_metrics_as_aggregator(
        env,
        replica.api_port,
        "load?labelSelector=llmscaler%3Dvllm",
    )
    .await?;
    answer["items"][0]["value"].as_str().map(str::to_owned)
}

/// Who reported the scaler's events.
async fn reporters(env: &Env) -> Vec<String> {
    env.events_about("vllm")
        .await
        .into_iter()
        .filter_map(|e| e.reporting_instance)
        .collect()
}

/// How many events (repeats included) `instance` has reported about the scaler.
async fn events_by(env: &Env, instance: &str) -> i32 {
    env.events_about("vllm")
        .await
        .into_iter()
        .filter(|e| e.reporting_instance.as_deref() == Some(instance))
        .map(|e| e.series.map_or(1, |s| s.count))
        .sum()
}

async fn set_max(env: &Env, max: i32) {
    env.scalers()
        .patch(
            "vllm",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": { "maxReplicas": max } })),
        )
        .await
        .unwrap();
}

/// `load` is per replica with a target of 1: any value above 1 grows the fleet to `max`.
async fn scaler(env: &Env, max: i32) {
    env.scaler(
        "vllm",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": max,
            "metrics": [{ "name": "load", "query": env.query("load"), "target": "1" }]
        }),
    )
    .await;
}

#[tokio::test]
async fn one_leader_writes_and_a_standby_takes_over_when_it_dies() {
    let env = Env::new("leader").await;
    env.deployment("vllm", 1).await;
    env.set("load", 2.0).await;
    scaler(&env, 2).await;
    let lease = Duration::from_secs(3);
    let mut replicas = vec![spawn(&env, "op-a", 3), spawn(&env, "op-b", 3)];

    let leader = common::eventually("a leader", WAIT, || holder(&env)).await;
    env.wait_ready("vllm", 2).await;
    let (leader_index, standby_index) = if leader == "op-a" { (0, 1) } else { (1, 0) };
    let standby_name = replicas[standby_index].name;
    assert_eq!(says_leader(&replicas[leader_index]).await, Some(true));
    assert_eq!(says_leader(&replicas[standby_index]).await, Some(false));

    // The standby evaluates too: its external metrics API follows the signal.
    env.set("load", 3.0).await;
    common::eventually("the standby to serve the current value", WAIT, || async {
        (served_value(&env, &replicas[standby_index])
            .await
            .as_deref()
            == Some("3"))
        .then_some(())
    })
    .await;
    let before = reporters(&env).await;
    assert!(!before.is_empty());
    assert!(
        before.iter().all(|r| *r == leader),
        "only the leader reports: {before:?}"
    );

    // The leader dies without a word. The standby takes over within the lease duration (plus
    // one look at the Lease), and at no moment do both say they lead.
    replicas[leader_index].child.kill().unwrap();
    let killed = Instant::now();
    loop {
        let standby_leads = says_leader(&replicas[standby_index]).await == Some(true);
        if holder(&env).await.as_deref() == Some(standby_name) && standby_leads {
            break;
        }
        assert!(killed.elapsed() < Duration::from_secs(20), "no takeover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = killed.elapsed();
    assert!(
        took >= lease - Duration::from_millis(500) && took < lease + Duration::from_secs(2),
        "took over after {took:?} with a {lease:?} lease"
    );
    replicas[leader_index].child.wait().unwrap();

    // The new leader writes.
    set_max(&env, 4).await;
    env.wait_ready("vllm", 4).await;
    // Its event follows its writes: waited for.
    common::eventually("an event from the new leader", WAIT, || async {
        reporters(&env)
            .await
            .iter()
            .any(|r| r == standby_name)
            .then_some(())
    })
    .await;
    for mut replica in replicas.into_iter().filter(|r| r.name == standby_name) {
        assert!(common::interrupt(&mut replica.child, WAIT).await.success());
    }
    env.done().await;
}

#[tokio::test]
async fn a_graceful_stop_hands_the_lease_over_at_once() {
    let env = Env::new("leader-handover").await;
    env.deployment("vllm", 1).await;
    env.set("load", 1.0).await;
    scaler(&env, 2).await;
    // A long lease: a handover faster than it shows the Lease was released, not waited out.
    let mut replicas = [spawn(&env, "op-a", 30), spawn(&env, "op-b", 30)];
    let leader = common::eventually("a leader", WAIT, || holder(&env)).await;
    let (leader_index, standby_index) = if leader == "op-a" { (0, 1) } else { (1, 0) };
    let standby_name = replicas[standby_index].name;

    // SIGTERM, as the kubelet stops a pod: well within the chart's grace period.
    let stopped = Instant::now();
    let status = common::terminate(&mut replicas[leader_index].child, WAIT).await;
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "the leader took {:?} to exit",
        stopped.elapsed()
    );
    assert!(status.success(), "{status:?}");
    common::eventually("the standby to take the released Lease", WAIT, || async {
        (holder(&env).await.as_deref() == Some(standby_name)).then_some(())
    })
    .await;
    let took = stopped.elapsed();
    assert!(took < Duration::from_secs(15), "handover took {took:?}");
    env.set("load", 2.0).await;
    env.wait_ready("vllm", 2).await;
    assert!(
        common::interrupt(&mut replicas[standby_index].child, WAIT)
            .await
            .success()
    );
    env.done().await;
}

#[tokio::test]
async fn a_leader_killed_mid_window_leaves_the_hold_to_its_successor() {
    const WINDOW: Duration = Duration::from_secs(20);
    let env = Env::new("leader-window").await;
    env.deployment("vllm", 4).await;
    env.set("load", 1.0).await;
    env.scaler(
        "vllm",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{ "name": "load", "query": env.query("load"), "target": "1" }],
            "scaleDown": { "stabilizationWindowSeconds": WINDOW.as_secs() }
        }),
    )
    .await;
    let mut replicas = [spawn(&env, "op-a", 3), spawn(&env, "op-b", 3)];
    let leader = common::eventually("a leader", WAIT, || holder(&env)).await;
    common::eventually("a steady sync at 4", WAIT, || async {
        let (status, _, message) = env.condition("vllm", "ScalingActive").await?;
        (status == "True" && message.contains("recommends 4")).then_some(())
    })
    .await;

    // The load drops: the leader holds the fleet at 4 for the window...
    env.set("load", 0.25).await;
    env.wait_event("vllm", "ScaleDownStabilized", "held at 4")
        .await;
    let dropped = Instant::now();
    // ...and is killed without a chance to say anything (SIGKILL) in the middle of it.
    let leader_index = usize::from(leader != "op-a");
    replicas[leader_index].child.kill().unwrap();
    replicas[leader_index].child.wait().unwrap();

    // The successor takes over within the lease and keeps the hold until the window has passed.
    let successor = replicas[1 - leader_index].name;
    common::eventually("the standby to take over", WAIT, || async {
        (holder(&env).await.as_deref() == Some(successor)).then_some(())
    })
    .await;
    let hold_until = dropped + WINDOW - Duration::from_secs(3);
    while Instant::now() < hold_until {
        assert_eq!(
            env.spec_replicas("vllm").await,
            4,
            "scaled down {:?} after the drop, inside a {WINDOW:?} window",
            dropped.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    env.wait_ready("vllm", 1).await;
    env.done().await;
}

#[tokio::test]
async fn a_partitioned_leader_stops_writing_before_the_standby_takes_over() {
    let env = Env::new("leader-partition").await;
    env.deployment("vllm", 1).await;
    env.set("load", 2.0).await;
    scaler(&env, 2).await;
    let lease = Duration::from_secs(3);
    let renew_deadline = llmscaleoperator::leader::Timing::for_lease(lease).renew_deadline;

    // op-a reaches the API server through a relay the test can cut; it leads alone first.
    let admin = common::kubeconfig_path();
    let partition = common::proxy::Partition::start(common::proxy::server_addr(&admin)).await;
    let dir = tempfile_dir(&env);
    let a = spawn_via(&env, "op-a", 3, &partition.kubeconfig(&admin, &dir));
    common::eventually("op-a to lead", WAIT, || async {
        (holder(&env).await.as_deref() == Some("op-a")).then_some(())
    })
    .await;
    env.wait_ready("vllm", 2).await;
    let b = spawn(&env, "op-b", 3);
    common::eventually("op-b to stand by", WAIT, || async {
        (says_leader(&b).await == Some(false)).then_some(())
    })
    .await;
    assert_eq!(says_leader(&a).await, Some(true));

    // The partition: op-a's requests hang. It must stop writing (and say so) by its renew
    // deadline, before op-b can take the Lease one lease duration after the last renewal.
    partition.cut();
    let cut = Instant::now();
    let (mut fenced, mut taken) = (None, None);
    while fenced.is_none() || taken.is_none() {
        assert!(
            cut.elapsed() < lease * 4,
            "after {:?}: op-a stopped {fenced:?}, op-b took over {taken:?}",
            cut.elapsed()
        );
        if fenced.is_none() && says_leader(&a).await == Some(false) {
            fenced = Some(cut.elapsed());
        }
        if taken.is_none() && holder(&env).await.as_deref() == Some("op-b") {
            taken = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (fenced, taken) = (fenced.unwrap(), taken.unwrap());
    assert!(
        fenced < taken,
        "op-a stopped at {fenced:?}, after op-b took over at {taken:?}"
    );
    assert!(
        fenced <= renew_deadline + Duration::from_millis(500),
        "op-a stopped {fenced:?} after the cut; its renew deadline is {renew_deadline:?}"
    );
    assert!(
        taken < lease + Duration::from_secs(2),
        "op-b took over {taken:?} after the cut of a {lease:?} lease"
    );
    let a_events = events_by(&env, "op-a").await;

    // op-b writes; op-a, back on the network, stays a standby and writes nothing.
    set_max(&env, 3).await;
    env.wait_ready("vllm", 3).await;
    partition.heal();
    set_max(&env, 4).await;
    env.wait_ready("vllm", 4).await;
    let healed = Instant::now();
    while healed.elapsed() < lease * 2 {
        assert_eq!(says_leader(&a).await, Some(false), "op-a leads again");
        assert_eq!(holder(&env).await.as_deref(), Some("op-b"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        events_by(&env, "op-a").await,
        a_events,
        "op-a reported after it lost the Lease"
    );
    assert!(events_by(&env, "op-b").await >= 2, "op-b scaled twice");
    drop((a, b));
    env.done().await;
}

/// A directory for this test's files, removed with the target dir.
fn tempfile_dir(env: &Env) -> std::path::PathBuf {
    let dir = common::repo_root().join("target/test-tmp").join(&env.ns);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn sigterm_lets_the_sync_in_flight_finish_then_exits() {
    const ANSWER_AFTER: Duration = Duration::from_secs(3);
    let env = Env::new("leader-drain").await;
    env.deployment("vllm", 1).await;
    // A planner that takes its time: the test stops the operator while it thinks.
    let asked = std::sync::Arc::new(tokio::sync::Notify::new());
    let notify = asked.clone();
    let app = axum::Router::new().route(
        "/decisions",
        axum::routing::get(move || {
            let notify = notify.clone();
            async move {
                notify.notify_one();
                tokio::time::sleep(ANSWER_AFTER).await;
                axum::Json(json!({
                    "apiVersion": "llmscaling.inference.x-k8s.io/v1alpha1",
                    "decisions": [{ "namespace": "drain", "serviceId": "llama", "replicas": { "active": 2 } }]
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let mut replica = spawn(&env, "op-a", 15);
    env.scaler(
        "vllm",
        "vllm",
        json!({
            "metricProvider": "Custom", "serverAddress": url,
            "customProvider": { "serviceId": "llama", "namespace": "drain", "path": "decisions" },
            "minReplicas": 1, "maxReplicas": 4
        }),
    )
    .await;
    tokio::time::timeout(WAIT, asked.notified()).await.unwrap();
    let stopped = Instant::now();
    let status = common::terminate(&mut replica.child, WAIT).await;
    let took = stopped.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took >= ANSWER_AFTER - Duration::from_millis(500)
            && took < ANSWER_AFTER + Duration::from_secs(5),
        "exited {took:?} after SIGTERM, with a sync {ANSWER_AFTER:?} from done"
    );
    // The sync that was running finished its work: the planner's count was written.
    assert_eq!(env.spec_replicas("vllm").await, 2);
    env.done().await;
}
