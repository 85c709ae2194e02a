//! Scalers of shards another replica leads (`--shards` above 1): this replica neither queries
//! their signal nor writes them, never looks at them, and keeps only what the conflict checks of
//! its own scalers read of them ([`Others`]). It serves their values on the external metrics API
//! from their status, which the leader of their shard writes whenever a value changes (taken as
//! the watch brings it, see [`kept_elsewhere`]), and looks at them again when it comes to lead
//! their shard: the win asks for a new list of the scalers (see [`relist_on_gains`]).
//!
//! What is served so is at most one status write behind the leader (plus the watch's delay): an
//! unchanged value is not rewritten, so while the shard's leader renews its Lease the value is
//! served as current (see [`Vouch`]); once nobody renews it, the value ages from its
//! `measuredAt` and the API stops serving it three periods later, unless a new leader has synced
//! the scaler by then (within a lease and one period).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::Context;
use super::conflicts::Peer;
use crate::api::LLMScaler;
use crate::leader::{Leadership, ShardGains};
use crate::metric_cache::{CachedMetric, ScalerKey, ScalerSnapshot, Vouch};

/// What this replica keeps of the scalers another replica leads: what the conflict checks of its
/// own scalers read of them (a [`Peer`]), never the object. A scaler's spec and status are most
/// of its memory, and every replica of a sharded fleet watches every scaler.
pub struct Others {
    kept: Mutex<Kept>,
    /// Whether another replica holds a shard now: what vouches for the values served from a
    /// status (one for every scaler).
    held: Arc<dyn Fn(u32) -> bool + Send + Sync>,
}

#[derive(Default)]
struct Kept {
    /// namespace → name → what is kept, and the list that last brought it.
    peers: HashMap<String, HashMap<String, (Peer, u64)>>,
    /// The list of the scalers running now or last (counted from 1).
    list: u64,
}

impl Others {
    pub(super) fn new(leadership: &Leadership) -> Self {
        let leadership = leadership.clone();
        Self {
            kept: Mutex::default(),
            held: Arc::new(move |shard| leadership.held_elsewhere(shard)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `peer` of `namespace`; true when that incarnation was not kept before.
    pub(super) fn keep(&self, namespace: &str, peer: Peer) -> bool {
        let mut kept = self.lock();
        let list = kept.list;
        let names = match kept.peers.get_mut(namespace) {
            Some(names) => names,
            None => kept.peers.entry(namespace.to_owned()).or_default(),
        };
        match names.get_mut(&peer.name) {
            Some(entry) => {
                let new = entry.0.uid != peer.uid;
                *entry = (peer, list);
                new
            }
            None => {
                names.insert(peer.name.clone(), (peer, list));
                true
            }
        }
    }

    /// `namespace/name` is kept no longer (deleted, or led here now).
    pub(super) fn remove(&self, namespace: &str, name: &str) {
        let mut kept = self.lock();
        if let Some(names) = kept.peers.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                kept.peers.remove(namespace);
            }
        }
    }

    pub(super) fn get(&self, namespace: &str, name: &str) -> Option<Peer> {
        let kept = self.lock();
        Some(kept.peers.get(namespace)?.get(name)?.0.clone())
    }

    /// `f(namespace, peer)` for every scaler kept.
    pub(super) fn each(&self, mut f: impl FnMut(&str, &Peer)) {
        let kept = self.lock();
        for (namespace, names) in &kept.peers {
            for (peer, _) in names.values() {
                f(namespace, peer);
            }
        }
    }

    /// The uids kept.
    pub(super) fn uids(&self) -> HashSet<String> {
        let mut uids = HashSet::new();
        self.each(|_, peer| {
            uids.insert(peer.uid.clone());
        });
        uids
    }

    /// A list of the scalers starts: what it does not bring again is gone when it ends.
    pub(super) fn list_started(&self) {
        let mut kept = self.lock();
        kept.list += 1;
    }

    /// The list has ended: drops the scalers it did not bring (deleted while nothing watched).
    pub(super) fn list_ended(&self) {
        let mut kept = self.lock();
        let list = kept.list;
        kept.peers.retain(|_, names| {
            names.retain(|_, (_, seen)| *seen == list);
            !names.is_empty()
        });
    }
}

/// For a scaler as the watch brings it: true when another replica leads it; its values are then
/// served from its status and only a [`Peer`] of it is kept (the controller's cache is not to
/// hold it, and it is never looked at here). False: this replica evaluates it.
pub(super) fn kept_elsewhere(ctx: &Context, scaler: &LLMScaler) -> bool {
    if !ctx.leadership.sharded() {
        return false;
    }
    let namespace = scaler.namespace().unwrap_or_default();
    if ctx.leadership.evaluates(&scaler.uid().unwrap_or_default()) {
        ctx.others.remove(&namespace, &scaler.name_any());
        return false;
    }
    serve_from_status(ctx, scaler);
    let peer = Peer::of(scaler);
    ctx.conflicts.file_peer(&namespace, &peer);
    if ctx.others.keep(&namespace, peer) {
        stand_by(ctx, scaler);
    }
    true
}

/// For a scaler of the controller's cache, at a sync: true when another replica leads it now
/// (its shard was lost since the watch brought it); its values are served from its status, and
/// the scalers are listed again, which keeps only a [`Peer`] of it. Nothing more is done with it
/// until its shard is won again, when the list that win asks for brings it back as new (see
/// [`relist_on_gains`]). False: this replica evaluates it.
pub(super) fn elsewhere(scaler: &LLMScaler, ctx: &Context) -> bool {
    if !ctx.leadership.sharded() || ctx.leadership.evaluates(&scaler.uid().unwrap_or_default()) {
        return false;
    }
    serve_from_status(ctx, scaler);
    stand_by(ctx, scaler);
    ctx.relist.want();
    true
}

/// Its leader reports it now: this replica's series of it would go stale, what it remembers
/// (told events, demand samples) would be out of date if the shard came back, and the
/// generation it last looked at is forgotten so that it is looked at again then.
fn stand_by(ctx: &Context, scaler: &LLMScaler) {
    let uid = scaler.uid().unwrap_or_default();
    ctx.metrics
        .forget(&scaler.namespace().unwrap_or_default(), &scaler.name_any());
    ctx.memory.forget(&uid);
    ctx.generations.forget(&uid);
    tracing::debug!(
        scaler = %scaler.name_any(), shard = ctx.leadership.shard_of(&uid),
        "led by another replica: served from its status"
    );
}

/// Asks for the scalers to be listed again each time this replica comes to lead shards: the
/// list brings the whole objects of their scalers, which are new to the controller's cache and
/// looked at once it ends (see `list_triggers`). Runs until `shutdown`.
pub(super) async fn relist_on_gains(
    mut gains: ShardGains,
    relist: super::relist::Relist,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            won = gains.gained() => match won {
                Some(won) => {
                    tracing::debug!(shards = ?won, "shards taken over: listing their scalers");
                    relist.want();
                }
                // Nothing can be won any more.
                None => return shutdown.cancelled().await,
            },
        }
    }
}

/// The leader's last sync as its status tells, in the metric cache: nothing when that sync
/// failed (as the leader's own cache); current while the leader holds the shard.
fn serve_from_status(ctx: &Context, scaler: &LLMScaler) {
    let key = ScalerKey {
        namespace: scaler.namespace().unwrap_or_default(),
        name: scaler.name_any(),
    };
    let vouch = Vouch {
        shard: ctx
            .leadership
            .shard_of(scaler.metadata.uid.as_deref().unwrap_or_default()),
        held: ctx.others.held.clone(),
    };
    match snapshot(scaler, vouch) {
        Some(snapshot) => ctx.cache.update(key, snapshot),
        None => ctx.cache.remove(&key),
    }
}

fn snapshot(scaler: &LLMScaler, vouch: Vouch) -> Option<ScalerSnapshot> {
    let status = scaler.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == super::status::READY && c.status == "True");
    if !ready {
        return None;
    }
    let measured = |at: Option<&Time>| at.map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    let metrics: Vec<CachedMetric> = status
        .current_metrics
        .iter()
        .map(|m| CachedMetric {
            name: m.name.clone(),
            value: m.value.as_deref().and_then(|v| v.parse::<f64>().ok()),
            measured_at: measured(m.measured_at.as_ref()),
            recommendation: m.recommended_replicas,
            error: m.error.clone(),
        })
        .collect();
    let newest = status
        .current_metrics
        .iter()
        .filter_map(|m| m.measured_at.as_ref())
        .max_by_key(|t| t.0);
    Some(ScalerSnapshot {
        uid: scaler.uid().unwrap_or_default(),
        metrics,
        current_replicas: status.current_replicas,
        desired_replicas: status.desired_replicas,
        synced_at: measured(newest),
        sync_period_seconds: scaler.spec.sync_period_seconds,
        vouched: Some(vouch),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scaler(ready: &str) -> LLMScaler {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
            "metadata": { "name": "s", "namespace": "ns", "uid": "u-1" },
            "spec": {
                "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "d" },
                "serverAddress": "http://prometheus:9090", "syncPeriodSeconds": 10,
                "minReplicas": 1, "maxReplicas": 4,
                "metrics": [{ "name": "load", "query": "q", "target": "1" }]
            },
            "status": {
                "currentReplicas": 2, "desiredReplicas": 3,
                "conditions": [{ "type": "Ready", "status": ready, "reason": "Synced", "message": "",
                                 "lastTransitionTime": "2026-01-01T00:00:00Z" }],
                "currentMetrics": [
                    { "name": "load", "value": "1.5", "recommendedReplicas": 3,
                      "measuredAt": "2026-01-01T00:00:00Z" },
                    { "name": "other", "error": "no data", "measuredAt": "2026-01-01T00:00:05Z" }
                ]
            }
        }))
        .expect("a valid scaler")
    }

    fn vouch() -> Vouch {
        Vouch {
            shard: 1,
            held: Arc::new(|_| true),
        }
    }

    #[test]
    fn a_scaler_led_elsewhere_is_served_as_its_status_says() {
        let served = snapshot(&scaler("True"), vouch()).expect("served");
        assert_eq!(served.uid, "u-1");
        assert_eq!((served.current_replicas, served.desired_replicas), (2, 3));
        assert_eq!(served.metrics[0].value, Some(1.5));
        assert_eq!(served.metrics[0].recommendation, Some(3));
        let measured: Timestamp = "2026-01-01T00:00:00Z".parse().expect("a time");
        assert_eq!(served.metrics[0].measured_at, measured);
        assert_eq!(served.metrics[1].value, None);
        assert_eq!(served.metrics[1].error.as_deref(), Some("no data"));
        // The newest of the metrics' times.
        assert_eq!(
            served.synced_at,
            "2026-01-01T00:00:05Z".parse::<Timestamp>().expect("a time")
        );
        assert_eq!(served.sync_period_seconds, 10);
        // Current as long as the shard's leader holds it (see extmetrics::values).
        assert!(served.vouched.as_ref().is_some_and(Vouch::holds));

        // The leader's last sync failed: nothing, as on the leader.
        assert!(snapshot(&scaler("False"), vouch()).is_none());
    }

    fn peer(name: &str, uid: &str) -> Peer {
        let mut scaler = scaler("True");
        scaler.metadata.name = Some(name.to_owned());
        scaler.metadata.uid = Some(uid.to_owned());
        Peer::of(&scaler)
    }

    #[test]
    fn what_is_kept_of_other_scalers_follows_the_watch_and_its_lists() {
        let others = Others::new(&Leadership::always());
        // New, the same again, another incarnation under the name.
        assert!(others.keep("ns", peer("a", "u-a")));
        assert!(!others.keep("ns", peer("a", "u-a")));
        assert!(others.keep("ns", peer("a", "u-a2")));
        assert!(others.keep("ns", peer("b", "u-b")));
        assert!(others.keep("other", peer("a", "u-c")));
        assert_eq!(
            others.get("ns", "a").map(|p| p.uid),
            Some("u-a2".to_owned())
        );
        assert_eq!(others.get("ns", "c"), None);
        // What the conflict checks read of it.
        assert_eq!(others.get("ns", "b"), Some(peer("b", "u-b")));

        // Led here now (or deleted).
        others.remove("ns", "b");
        assert_eq!(others.get("ns", "b"), None);
        assert_eq!(
            others.uids(),
            ["u-a2", "u-c"].map(str::to_owned).into_iter().collect()
        );

        // A list that brings only ns/a again: other/a was deleted while nothing watched.
        others.list_started();
        assert!(!others.keep("ns", peer("a", "u-a2")));
        others.list_ended();
        assert_eq!(others.uids(), ["u-a2".to_owned()].into_iter().collect());
        // What the watch brings after the list stays until the next list.
        assert!(others.keep("ns", peer("d", "u-d")));
        others.list_started();
        others.list_ended();
        assert!(others.uids().is_empty());
    }
}
