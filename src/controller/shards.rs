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

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::Context;
use super::conflicts::Peers;
use crate::api::LLMScaler;
use crate::leader::{Leadership, ShardGains};
use crate::metric_cache::{CachedMetric, ScalerKey, ScalerSnapshot, Vouch};

/// What this replica keeps of the scalers another replica leads: what the conflict checks of its
/// own scalers read of them ([`Peers`]), never the object, and what vouches for the values it
/// serves of them.
pub struct Others {
    pub(super) peers: Arc<Peers>,
    /// Whether another replica holds a shard now: what vouches for the values served from a
    /// status (one for every scaler).
    held: Arc<dyn Fn(u32) -> bool + Send + Sync>,
}

impl Others {
    pub(super) fn new(leadership: &Leadership) -> Self {
        let leadership = leadership.clone();
        Self {
            peers: Arc::default(),
            held: Arc::new(move |shard| leadership.held_elsewhere(shard)),
        }
    }
}

/// For a scaler as the watch brings it: true when another replica leads it; its values are then
/// served from its status and only a [`Peer`](super::conflicts::Peer) of it is kept (the
/// controller's cache is not to hold it, and it is never looked at here). False: this replica
/// evaluates it.
pub(super) fn kept_elsewhere(ctx: &Context, scaler: &LLMScaler) -> bool {
    if !ctx.leadership.sharded() {
        return false;
    }
    let namespace = scaler.namespace().unwrap_or_default();
    if ctx.leadership.evaluates(&scaler.uid().unwrap_or_default()) {
        ctx.others.peers.remove(&namespace, &scaler.name_any());
        return false;
    }
    serve_from_status(ctx, scaler);
    let (new, peer) = ctx.others.peers.keep(scaler);
    ctx.conflicts.file_peer(&namespace, &peer);
    if new {
        stand_by(ctx, scaler);
    }
    true
}

/// For a scaler of the controller's cache, at a sync: true when another replica leads it now
/// (its shard was lost since the watch brought it); its values are served from its status, and
/// the scalers are listed again, which keeps only a [`Peer`](super::conflicts::Peer) of it.
/// Nothing more is done with it until its shard is won again, when the list that win asks for
/// brings it back as new (see [`relist_on_gains`]). False: this replica evaluates it.
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
    ctx.targets.release(&uid);
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
}
