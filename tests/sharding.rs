//! Shards across replicas (`--shards`): three operators divide six shards, each through its own
//! Lease. Each leads some, together all; every scaler is evaluated and written by the leader of
//! its shard alone, and every replica's external metrics API serves every scaler. A replica
//! killed without a word loses its shards to the others within the lease, their scalers are
//! synced and written by their new leaders, and the others' scalers keep their period
//! meanwhile. A replica stopped gracefully hands its shards over at once.
//!
//! Runs on either control plane: on the minimal one no controller makes pods, so the test plays
//! the Deployment controller (status follows spec.replicas); on the full one kwok's pods turn
//! Ready. A loopback stand-in answers every PromQL query with a load of 2 per replica.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::env::{Env, WAIT};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use llmscaleoperator::api::LLMScaler;
use llmscaleoperator::leader::sharded::shard_lease;
use llmscaleoperator::leader::shards::shard_of;
use serde_json::json;

const SHARDS: u32 = 6;
const SCALERS: usize = 30;
const LEASE_SECONDS: u64 = 4;
const LEASE: Duration = Duration::from_secs(LEASE_SECONDS);
const PERIOD_SECONDS: u64 = 2;
const PERIOD: Duration = Duration::from_secs(PERIOD_SECONDS);
const LEASE_NAME: &str = "llmscaleoperator";

struct Replica {
    name: &'static str,
    child: common::Spawned,
    metrics_port: u16,
    api_port: u16,
}

fn spawn(env: &Env, name: &'static str) -> Replica {
    let (metrics_port, api_port) = (common::free_port(), common::free_port());
    let dir = common::repo_root().join("target/test-tmp").join(&env.ns);
    std::fs::create_dir_all(&dir).unwrap();
    // Each replica's log is kept for a failure's post-mortem.
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_llmscaleoperator"))
        .args(["run", "--kubeconfig"])
        .arg(common::kubeconfig_path())
        .args(["--namespace", &env.ns])
        .args(["--extmetrics-service-namespace", &env.ns])
        .args(["--health-address", &format!("127.0.0.1:{metrics_port}")])
        .args(["--extmetrics-address", &format!("127.0.0.1:{api_port}")])
        .args(["--extmetrics-tls-secret", "serving"])
        .args(["--leader-elect", "--leader-elect-namespace", &env.ns])
        .args(["--leader-elect-lease-seconds", &LEASE_SECONDS.to_string()])
        .args(["--shards", &SHARDS.to_string()])
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

/// Answers every instant query with a load of 2: with a target of 1 each scaler grows its
/// Deployment to maxReplicas.
async fn prometheus_stand_in() -> String {
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::any(|| async {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            axum::Json(json!({
                "status": "success",
                "data": { "resultType": "vector", "result": [{ "metric": {}, "value": [now, "2"] }] }
            }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Plays the Deployment controller: every replica asked for is ready at once.
fn settle_deployments(env: &Env) -> tokio::task::JoinHandle<()> {
    let deployments: Api<Deployment> = env.deployments();
    tokio::spawn(async move {
        loop {
            if let Ok(list) = deployments.list(&ListParams::default()).await {
                for d in list.items {
                    let generation = d.metadata.generation.unwrap_or(1);
                    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    let status = d.status.clone().unwrap_or_default();
                    if status.observed_generation == Some(generation)
                        && status.ready_replicas == Some(want)
                    {
                        continue;
                    }
                    let patch = json!({ "status": {
                        "observedGeneration": generation, "replicas": want, "updatedReplicas": want,
                        "readyReplicas": want, "availableReplicas": want
                    }});
                    let _ = deployments
                        .patch_status(
                            &d.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

async fn create_scalers(env: &Env, server: &str) {
    futures::stream::iter(0..SCALERS)
        .for_each_concurrent(8, |i| async move {
            let name = format!("model-{i}");
            env.deployments()
                .create(&PostParams::default(), &deployment(&name))
                .await
                .unwrap();
            let scaler: LLMScaler = serde_json::from_value(json!({
                "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
                "metadata": { "name": name },
                "spec": {
                    "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": name },
                    "serverAddress": server,
                    "syncPeriodSeconds": PERIOD_SECONDS, "retryPeriodSeconds": PERIOD_SECONDS,
                    "minReplicas": 1, "maxReplicas": 2,
                    "metrics": [{ "name": "load", "query": format!("avg(load{{app=\"{name}\"}})"), "target": "1" }],
                    "scaleDown": { "stabilizationWindowSeconds": 0 },
                    "scaleUp": { "policies": [] }
                }
            }))
            .unwrap();
            env.scalers()
                .create(&PostParams::default(), &scaler)
                .await
                .unwrap();
        })
        .await;
}

/// A one-replica Deployment of pods labelled `app: name`.
fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "vllm", "image": "registry.k8s.io/pause:3.10" }] }
            }
        }
    }))
    .unwrap()
}

/// The holder of each shard's Lease.
async fn holders(env: &Env) -> Vec<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.ns);
    let mut holders = Vec::new();
    for shard in 0..SHARDS {
        let holder = leases
            .get_opt(&shard_lease(LEASE_NAME, shard, SHARDS))
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty());
        holders.push(holder);
    }
    holders
}

fn led_by(holders: &[Option<String>], name: &str) -> Vec<usize> {
    holders
        .iter()
        .enumerate()
        .filter(|(_, h)| h.as_deref() == Some(name))
        .map(|(i, _)| i)
        .collect()
}

/// Every scaler's shard.
async fn shards(env: &Env) -> BTreeMap<String, usize> {
    env.scalers()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| {
            let shard = shard_of(&s.uid().unwrap(), SHARDS);
            (s.name_any(), usize::try_from(shard).unwrap())
        })
        .collect()
}

/// A replica's /metrics, if it answers.
async fn scrape(replica: &Replica) -> Option<String> {
    reqwest::get(format!("http://127.0.0.1:{}/metrics", replica.metrics_port))
        .await
        .ok()?
        .text()
        .await
        .ok()
}

fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

/// The syncs this replica has counted per scaler (llmscaleoperator_syncs_total, every result).
fn syncs(text: &str) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("llmscaleoperator_syncs_total{"))
    {
        let Some(scaler) = line
            .split("scaler=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            continue;
        };
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *counts.entry(scaler.to_owned()).or_default() += value;
    }
    counts
}

/// Per scaler, the replicas whose /metrics count syncs of it.
async fn syncing(replicas: &[&Replica]) -> BTreeMap<String, BTreeSet<String>> {
    let mut who: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for replica in replicas {
        let text = scrape(replica).await.unwrap_or_default();
        for scaler in syncs(&text).into_keys() {
            who.entry(scaler)
                .or_default()
                .insert(replica.name.to_owned());
        }
    }
    who
}

/// Per scaler, the replicas that reported events about it.
async fn reporters(env: &Env) -> BTreeMap<String, BTreeSet<String>> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let mut who: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in events.list(&ListParams::default()).await.unwrap().items {
        let (Some(scaler), Some(instance)) = (
            e.regarding.and_then(|r| r.name),
            e.reporting_instance.filter(|i| !i.is_empty()),
        ) else {
            continue;
        };
        who.entry(scaler).or_default().insert(instance);
    }
    who
}

/// Waits until the events about each scaler were reported by exactly the replicas `want` names.
/// A sync publishes its events after its scale write, so a Deployment can show the new replicas
/// a moment before the event about them exists.
async fn writers_become(env: &Env, want: &BTreeMap<String, BTreeSet<String>>) {
    let deadline = Instant::now() + WAIT;
    loop {
        let written = reporters(env).await;
        let settled = want.iter().all(|(s, w)| written.get(s) == Some(w));
        if settled {
            return;
        }
        // Too many reporters never settles: fail on it at once, by name.
        for (scaler, w) in want {
            if let Some(got) = written.get(scaler) {
                assert!(
                    got.is_subset(w),
                    "events about {scaler}: {got:?}, want {w:?}"
                );
            }
        }
        if Instant::now() >= deadline {
            for (scaler, w) in want {
                assert_eq!(written.get(scaler), Some(w), "events about {scaler}");
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn spec_replicas(env: &Env) -> BTreeMap<String, i32> {
    env.deployments()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|d| {
            let replicas = d.spec.and_then(|s| s.replicas).unwrap_or(0);
            (d.metadata.name.unwrap_or_default(), replicas)
        })
        .collect()
}

/// The `load` values a replica's external metrics API serves, by scaler, read with the
/// aggregator's front-proxy certificate.
async fn served(env: &Env, replica: &Replica) -> Option<BTreeMap<String, String>> {
    let answer = common::external_metrics_as_aggregator(env, replica.api_port, "load").await?;
    Some(
        answer["items"]
            .as_array()?
            .iter()
            .filter_map(|item| {
                let scaler = item["metricLabels"]["llmscaler"].as_str()?;
                Some((scaler.to_owned(), item["value"].as_str()?.to_owned()))
            })
            .collect(),
    )
}

#[tokio::test]
async fn replicas_divide_the_shards_and_take_over_a_dead_ones() {
    let env = Env::bare("shards").await;
    let server = prometheus_stand_in().await;
    let settler = (common::cluster_profile() != "full").then(|| settle_deployments(&env));
    let mut replicas = vec![
        spawn(&env, "op-a"),
        spawn(&env, "op-b"),
        spawn(&env, "op-c"),
    ];
    let names: Vec<&str> = replicas.iter().map(|r| r.name).collect();

    // Each leads a third of the shards, and says so.
    common::eventually("the shards divided two by two", WAIT, || async {
        let holders = holders(&env).await;
        let balanced = names.iter().all(|n| led_by(&holders, n).len() == 2);
        for replica in &replicas {
            let led = gauge(&scrape(replica).await?, "llmscaleoperator_shards_led")?;
            if led != 2.0 {
                return None;
            }
        }
        balanced.then_some(())
    })
    .await;

    create_scalers(&env, &server).await;
    common::eventually("every Deployment scaled to 2", WAIT, || async {
        let replicas = spec_replicas(&env).await;
        (replicas.len() == SCALERS && replicas.values().all(|r| *r == 2)).then_some(())
    })
    .await;
    let holders_before = holders(&env).await;
    let shard_of = shards(&env).await;
    let leader_of = |scaler: &str| holders_before[shard_of[scaler]].clone().unwrap();

    // Each scaler is written by the leader of its shard, and by nobody else.
    let want: BTreeMap<String, BTreeSet<String>> = shard_of
        .keys()
        .map(|s| (s.clone(), BTreeSet::from([leader_of(s)])))
        .collect();
    writers_become(&env, &want).await;
    // ...and evaluated by it alone: no other replica counts a sync of it.
    let all: Vec<&Replica> = replicas.iter().collect();
    common::eventually(
        "each scaler synced by its shard's leader only",
        WAIT,
        || async {
            let syncing = syncing(&all).await;
            shard_of
                .keys()
                .all(|s| syncing.get(s) == Some(&BTreeSet::from([leader_of(s)])))
                .then_some(())
        },
    )
    .await;
    // Every replica serves every scaler's value, two thirds of them from their status.
    for replica in &replicas {
        common::eventually(
            &format!("{} to serve every scaler's load", replica.name),
            WAIT,
            || async {
                let served = served(&env, replica).await?;
                (served.len() == SCALERS && served.values().all(|v| v == "2")).then_some(())
            },
        )
        .await;
    }

    // A scaler of another replica's shard, created after this one started, is known to its
    // conflict checks: of two scalers of a new Deployment, the younger yields to the older
    // wherever each is led. Pairs are made until a few are led apart (a third are led together).
    let mut pairs = Vec::new();
    let mut apart = 0;
    for i in 0..SCALERS {
        let target = format!("pair-{i}");
        env.deployments()
            .create(&PostParams::default(), &deployment(&target))
            .await
            .unwrap();
        let mut leaders = Vec::new();
        for role in ["older", "younger"] {
            let mut scaler = env.scalers().get(&format!("model-{i}")).await.unwrap();
            scaler.metadata = kube::api::ObjectMeta {
                name: Some(format!("{role}-{i}")),
                ..Default::default()
            };
            scaler.spec.target_ref.name = target.clone();
            scaler.status = None;
            let made = env
                .scalers()
                .create(&PostParams::default(), &scaler)
                .await
                .unwrap();
            let shard = llmscaleoperator::leader::shards::shard_of(&made.uid().unwrap(), SHARDS);
            leaders.push(holders_before[usize::try_from(shard).unwrap()].clone());
        }
        pairs.push(i);
        if leaders[0] != leaders[1] {
            apart += 1;
            if apart == 2 {
                break;
            }
        }
    }
    assert_eq!(apart, 2, "no two pairs led apart");
    common::eventually(
        "each younger scaler to yield to its older",
        WAIT,
        || async {
            for i in &pairs {
                let status = env
                    .scalers()
                    .get(&format!("younger-{i}"))
                    .await
                    .ok()?
                    .status?;
                let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
                let yields = ready.status == "False"
                    && ready.reason == "ConflictingAutoscaler"
                    && ready.message.contains(&format!("LLMScaler older-{i} "));
                if !yields {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    let gone = kube::api::DeleteParams::default();
    for i in &pairs {
        for name in [format!("older-{i}"), format!("younger-{i}")] {
            env.scalers().delete(&name, &gone).await.unwrap();
        }
        env.deployments()
            .delete(&format!("pair-{i}"), &gone)
            .await
            .unwrap();
    }

    // op-a dies without a word.
    let dead = replicas.remove(0);
    let orphans = led_by(&holders_before, dead.name);
    let mut dead_child = dead.child;
    dead_child.kill().unwrap();
    let killed = Instant::now();
    let survivors: Vec<&Replica> = replicas.iter().collect();
    let syncs_at_kill: Vec<BTreeMap<String, f64>> = {
        let mut at = Vec::new();
        for r in &survivors {
            at.push(syncs(&scrape(r).await.unwrap()));
        }
        at
    };
    let took = loop {
        let holders = holders(&env).await;
        // The survivors' own shards stay where they are.
        for (shard, holder) in holders_before.iter().enumerate() {
            if !orphans.contains(&shard) {
                assert_eq!(&holders[shard], holder, "shard {shard} moved");
            }
        }
        let moved = orphans
            .iter()
            .all(|&s| holders[s].as_deref().is_some_and(|h| h != dead.name));
        if moved {
            break killed.elapsed();
        }
        assert!(killed.elapsed() < LEASE * 4, "no takeover: {holders:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        took >= LEASE - Duration::from_secs(1) && took < LEASE + Duration::from_secs(3),
        "the shards moved {took:?} after the kill, with a {LEASE:?} lease"
    );
    dead_child.wait().unwrap();
    let holders_after = holders(&env).await;
    for replica in &survivors {
        assert_eq!(
            led_by(&holders_after, replica.name).len(),
            3,
            "{holders_after:?}"
        );
    }

    // The new leaders sync the orphaned scalers within a period of taking them over, and the
    // survivors' own scalers kept their period all along.
    let new_leader_of = |scaler: &str| holders_after[shard_of[scaler]].clone().unwrap();
    // Within a period of taking over, at each scaler's own slot (and one more look at /metrics).
    common::eventually(
        "each scaler synced by its new leader only",
        PERIOD * 2,
        || async {
            let syncing = syncing(&survivors).await;
            shard_of
                .keys()
                .all(|s| syncing.get(s) == Some(&BTreeSet::from([new_leader_of(s)])))
                .then_some(())
        },
    )
    .await;
    let elapsed = killed.elapsed();
    for (replica, before) in survivors.iter().zip(&syncs_at_kill) {
        let now = syncs(&scrape(replica).await.unwrap());
        for scaler in shard_of.keys().filter(|s| leader_of(s) == replica.name) {
            let synced = now[scaler] - before[scaler];
            // One per period, give or take the ends of the window.
            let expected = elapsed.as_secs_f64() / PERIOD.as_secs_f64() - 2.0;
            assert!(
                synced >= expected,
                "{scaler} synced {synced} times in {elapsed:?} on {}",
                replica.name
            );
        }
    }

    // The new leaders write: a higher bound reaches every Deployment, the orphans' written by
    // their new leaders, the others' still by their first.
    let params = PatchParams::default();
    for scaler in shard_of.keys() {
        env.scalers()
            .patch(
                scaler,
                &params,
                &Patch::Merge(json!({ "spec": { "maxReplicas": 3 } })),
            )
            .await
            .unwrap();
    }
    common::eventually("every Deployment scaled to 3", WAIT, || async {
        spec_replicas(&env)
            .await
            .values()
            .all(|r| *r == 3)
            .then_some(())
    })
    .await;
    let want: BTreeMap<String, BTreeSet<String>> = shard_of
        .keys()
        .map(|s| (s.clone(), BTreeSet::from([leader_of(s), new_leader_of(s)])))
        .collect();
    writers_become(&env, &want).await;

    // A graceful stop hands the shards over at once, well within a lease.
    let mut leaving = replicas.remove(0);
    let stopped = Instant::now();
    assert!(common::terminate(&mut leaving.child, WAIT).await.success());
    let last = replicas[0].name;
    common::eventually("the last replica to lead every shard", WAIT, || async {
        (led_by(&holders(&env).await, last).len() == usize::try_from(SHARDS).unwrap()).then_some(())
    })
    .await;
    let handover = stopped.elapsed();
    assert!(handover < LEASE, "handed over after {handover:?}");
    assert!(
        common::interrupt(&mut replicas[0].child, WAIT)
            .await
            .success()
    );
    if let Some(settler) = settler {
        settler.abort();
    }
    // The minimal control plane runs no namespace controller: the namespace would stay
    // terminating with its objects, and its scalers would load any operator watching them all.
    let all = kube::api::DeleteParams::default();
    env.scalers()
        .delete_collection(&all, &ListParams::default())
        .await
        .unwrap();
    env.deployments()
        .delete_collection(&all, &ListParams::default())
        .await
        .unwrap();
    env.done().await;
}
