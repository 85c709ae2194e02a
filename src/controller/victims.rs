//! Cache-aware scale-down: before spec.replicas goes down, the pods chosen to go get a low
//! controller.kubernetes.io/pod-deletion-cost so the ReplicaSet deletes them first; marks that
//! outlive their purpose are removed on the next sync.
//!
//! Our marks are the annotation alone, written by server-side apply under a field manager of their
//! own; that manager in a pod's managedFields is how a mark is recognised as ours. Removing one is
//! an apply of nothing under that manager, which takes away exactly the field we set and never a
//! value someone else owns.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use thiserror::Error;

use super::Context;
use super::events::Note;
use super::reads::recorded;
use super::watched_target::{self, WatchedTarget};
use crate::api::{LLMScaler, MetricProvider, ScaleDownBehavior};
use crate::error_chain::{self, Chain};
use crate::names::{DELETION_COST_QUERY, MARK_MANAGER};
use crate::scaling::{Candidate, Ranking, pick, victim_costs, warmth_by_pod};
use crate::signals::http::Redacted;
use crate::signals::prometheus::Series;

pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
const REVISION: &str = "deployment.kubernetes.io/revision";
/// The warning that says deletionCostQuery cannot rank the pods.
pub const DELETION_COST_QUERY_FAILED: &str = "DeletionCostQueryFailed";

#[derive(Debug, Error)]
pub enum VictimError {
    #[error("the Deployment's selector cannot be used: {0}")]
    Selector(String),
    #[error("cannot list the Deployment's ReplicaSets or pods")]
    List(#[source] kube::Error),
    #[error("the Deployment has no current ReplicaSet")]
    NoReplicaSet,
}

/// Where the warmth of each pod comes from.
pub enum Warmth {
    /// deletionCostQuery's answer, one series per pod, or why there is none.
    Measured(Result<Vec<Series>, Redacted>),
    /// No measurement: newest pod first.
    Newest,
}

/// The outcome of marking, for events.
#[derive(Debug, Default)]
pub struct Marked {
    /// Victims, coldest first, with the cost written.
    pub victims: Vec<(String, i32)>,
    /// Pods whose mark could not be written, with the reason.
    pub failed: Vec<(String, String)>,
    /// Why the measurement could not be used, when it could not.
    pub query_error: Option<String>,
    pub ranking: Option<Ranking>,
}

/// Picks the `count` coldest Ready pods of the Deployment's current ReplicaSet and marks them,
/// after removing any older mark of this scaler from pods that are not victims now.
pub async fn mark(
    client: &Client,
    namespace: &str,
    deployment: &WatchedTarget,
    count: usize,
    warmth: Warmth,
) -> Result<Marked, VictimError> {
    let params = pods_of(deployment)?;
    let pods = candidates(client, namespace, deployment, &params).await?;
    let mut marked = Marked::default();
    let mut ranking = match warmth {
        Warmth::Newest => Ranking::NewestFirst,
        Warmth::Measured(_) => Ranking::Measured,
    };
    let mut measured: Vec<Candidate> = pods
        .iter()
        .map(|p| Candidate {
            name: p.name_any(),
            created: p.creation_timestamp().map(|t| t.0),
            warmth: None,
        })
        .collect();
    if let Warmth::Measured(answer) = warmth {
        let warmth = answer.map_err(|e| e.to_string()).and_then(|series| {
            // No pick among a pod's series: the whole answer is set aside.
            warmth_by_pod(series.iter().map(|s| (&s.labels, s.value)), namespace)
                .map_err(|e| error_chain::render(&e))
        });
        match warmth {
            Ok(warmth) => {
                for candidate in &mut measured {
                    candidate.warmth = warmth.get(&candidate.name).copied();
                }
            }
            Err(error) => {
                marked.query_error = Some(error);
                ranking = Ranking::NewestFirst;
            }
        }
    }
    marked.ranking = Some(ranking);
    let victims = pick(&measured, count, ranking);
    let victim_set: BTreeSet<&str> = victims.iter().map(String::as_str).collect();

    // Costs other writers gave the pods that stay; our own old marks are about to go.
    let kept_costs: Vec<i32> = pods
        .iter()
        .filter(|p| !victim_set.contains(p.name_any().as_str()) && !ours(*p))
        .filter_map(|p| p.annotations().get(DELETION_COST)?.parse().ok())
        .collect();
    clear(client, namespace, &params, &victims)
        .await
        .map_err(VictimError::List)?;

    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for (name, cost) in victims.iter().zip(victim_costs(victims.len(), &kept_costs)) {
        let apply = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "annotations": { DELETION_COST: cost.to_string() } },
        });
        // No force: a deletion cost someone else owns is theirs; we report and go on.
        match api
            .patch(
                name,
                &PatchParams::apply(MARK_MANAGER),
                &Patch::Apply(apply),
            )
            .await
        {
            Ok(_) => marked.victims.push((name.clone(), cost)),
            Err(e) => marked.failed.push((name.clone(), error_chain::render(&e))),
        }
    }
    Ok(marked)
}

/// Removes our marks from every pod selected by `params` that is not in `keep`. Returns how
/// many were cleared.
pub async fn clear(
    client: &Client,
    namespace: &str,
    params: &ListParams,
    keep: &[String],
) -> Result<usize, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = api.list_metadata(params).await?;
    let mut cleared = 0;
    for pod in listed.items {
        let name = pod.name_any();
        if keep.contains(&name) || !ours(&pod) {
            continue;
        }
        let nothing = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name } });
        match api
            .patch(
                &name,
                &PatchParams::apply(MARK_MANAGER),
                &Patch::Apply(nothing),
            )
            .await
        {
            Ok(_) => cleared += 1,
            // Deleted meanwhile: nothing left to clear.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(cleared)
}

/// Whether we own a deletion-cost mark on this object.
fn ours<K: ResourceExt>(object: &K) -> bool {
    object
        .managed_fields()
        .iter()
        .any(|m| m.manager.as_deref() == Some(MARK_MANAGER))
}

/// List parameters selecting the Deployment's pods (its full selector, expressions included).
pub fn pods_of(deployment: &WatchedTarget) -> Result<ListParams, VictimError> {
    match &deployment.selector {
        Some(Ok(selector)) => Ok(ListParams::default().labels(selector)),
        Some(Err(e)) => Err(VictimError::Selector(e.clone())),
        None => Err(VictimError::Selector(
            "the Deployment has no spec.selector".to_owned(),
        )),
    }
}

/// Removes the marks a deleted scaler may have left on its target's pods. Best effort: the
/// outcome is logged (there is no scaler left to carry an event).
pub(super) async fn clear_after_delete(ctx: &Context, scaler: &LLMScaler) {
    let spec = &scaler.spec;
    let namespace = scaler.namespace().unwrap_or_default();
    if !watched_target::is_deployment(&spec.target_ref.kind, &spec.target_ref.api_version) {
        return;
    }
    let uid = scaler.metadata.uid.as_deref().unwrap_or_default();
    let target = match ctx.targets.get(&spec.target_ref, &namespace, uid).await {
        Ok((_, Some(target))) => target,
        Ok((_, None)) => return,
        Err(e) => {
            tracing::warn!(scaler = %scaler.name_any(), namespace = %namespace, error = %Chain(&e), "cannot look up the target to remove deletion-cost marks");
            return;
        }
    };
    let result = match pods_of(&target) {
        Ok(params) => clear(&ctx.client, &namespace, &params, &[])
            .await
            .map_err(|e| error_chain::render(&e)),
        Err(e) => Err(error_chain::render(&e)),
    };
    match result {
        Ok(0) => {}
        Ok(cleared) => {
            tracing::info!(scaler = %scaler.name_any(), namespace = %namespace, cleared, "removed the deletion-cost marks of a deleted scaler");
        }
        Err(error) => {
            tracing::warn!(scaler = %scaler.name_any(), namespace = %namespace, %error, "cannot remove the deletion-cost marks of a deleted scaler");
        }
    }
}

/// Marks the pods a scale-down of `removed` replicas should take, or clears old marks when
/// nothing is being removed. Never fails the sync: a problem becomes a warning event and the
/// scale-down goes ahead without marks.
pub(super) async fn for_sync(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    target: &WatchedTarget,
    removed: usize,
    access: Option<&super::server_access::ServerAccess>,
) -> Vec<Note> {
    let spec = &scaler.spec;
    let uid = scaler.uid().unwrap_or_default();
    let cache_aware = spec.scale_down.behavior == ScaleDownBehavior::CacheAware
        && watched_target::is_deployment(&spec.target_ref.kind, &spec.target_ref.api_version);
    let warn = |reason: &'static str, message: String| Note {
        warning: true,
        reason,
        message,
    };
    if !cache_aware {
        if removed > 0 && ctx.memory.first_time("no-victim-selection", &uid) {
            let why = if spec.scale_down.behavior == ScaleDownBehavior::None {
                "scaleDown.behavior is None".to_owned()
            } else {
                format!(
                    "a {} deletes pods by ordinal and ignores deletion costs",
                    spec.target_ref.kind
                )
            };
            return vec![Note {
                warning: false,
                reason: "NoVictimSelection",
                message: format!("pods are not marked for deletion: {why}"),
            }];
        }
        return Vec::new();
    }

    if removed == 0 {
        // Marks from an earlier sync whose scale-down did not happen must not linger.
        if !ctx.memory.may_have_marks(&uid) {
            return Vec::new();
        }
        let params = match pods_of(target) {
            Ok(params) => params,
            Err(e) => return vec![warn("DeletionCostCleanupFailed", error_chain::render(&e))],
        };
        return match clear(&ctx.client, namespace, &params, &[]).await {
            Ok(_) => {
                ctx.memory.set_may_have_marks(&uid, false);
                Vec::new()
            }
            Err(e) => vec![warn(
                "DeletionCostCleanupFailed",
                format!("cannot remove old deletion-cost marks: {}", Chain(&e)),
            )],
        };
    }

    let query = spec
        .scale_down
        .deletion_cost_query
        .as_deref()
        .filter(|q| !q.trim().is_empty());
    let warmth = match (spec.metric_provider, query, access) {
        (MetricProvider::Prometheus, Some(query), Some(access)) => {
            let read = access.at(&spec.server_address).series(query).await;
            let name = scaler.name_any();
            Warmth::Measured(recorded(
                &ctx.metrics,
                namespace,
                &name,
                DELETION_COST_QUERY,
                read,
            ))
        }
        _ => Warmth::Newest,
    };
    ctx.memory.set_may_have_marks(&uid, true);
    let marked = match mark(&ctx.client, namespace, target, removed, warmth).await {
        Ok(marked) => marked,
        Err(e) => {
            return vec![warn(
                "VictimSelectionFailed",
                format!("{}; scaling down without deletion-cost marks", Chain(&e)),
            )];
        }
    };
    let mut notes = Vec::new();
    // A query that cannot rank the pods stays so until its author mends it: told when it
    // begins and when what is wrong changes, not at every scale-down.
    match &marked.query_error {
        Some(error) => {
            let message = format!(
                "deletionCostQuery could not be used ({error}); the newest pods are taken as the coldest"
            );
            if ctx
                .memory
                .changed(DELETION_COST_QUERY_FAILED, &uid, &message)
            {
                notes.push(warn(DELETION_COST_QUERY_FAILED, message));
            }
        }
        None => ctx.memory.ended(DELETION_COST_QUERY_FAILED, &uid),
    }
    for (pod, error) in &marked.failed {
        notes.push(warn(
            "DeletionCostFailed",
            format!("cannot mark pod {pod}: {error}; it may not be the one deleted"),
        ));
    }
    if !marked.victims.is_empty() {
        let how = match marked.ranking {
            Some(crate::scaling::Ranking::Measured) => "coldest first by deletionCostQuery",
            _ => "newest first",
        };
        let list: Vec<String> = marked
            .victims
            .iter()
            .map(|(pod, cost)| format!("{pod} ({cost})"))
            .collect();
        notes.push(Note {
            warning: false,
            reason: "VictimsSelected",
            message: format!("marked for deletion, {how}: {}", list.join(", ")),
        });
    }
    notes
}

/// Ready, non-terminating pods of the Deployment's current ReplicaSet.
async fn candidates(
    client: &Client,
    namespace: &str,
    deployment: &WatchedTarget,
    params: &ListParams,
) -> Result<Vec<Pod>, VictimError> {
    let uid = deployment.uid.clone();
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let current = replicasets
        .list(params)
        .await
        .map_err(VictimError::List)?
        .items
        .into_iter()
        .filter(|rs| rs.owner_references().iter().any(|o| o.uid == uid))
        .max_by_key(|rs| {
            rs.annotations()
                .get(REVISION)
                .and_then(|r| r.parse::<i64>().ok())
                .unwrap_or(0)
        })
        .ok_or(VictimError::NoReplicaSet)?;
    let rs_uid = current.uid().unwrap_or_default();

    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    Ok(pods
        .list(params)
        .await
        .map_err(VictimError::List)?
        .items
        .into_iter()
        .filter(|p| p.owner_references().iter().any(|o| o.uid == rs_uid))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(is_ready)
        .collect())
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
