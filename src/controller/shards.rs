//! Scalers of shards another replica leads (`--shards` above 1): this replica neither queries
//! their signal nor writes them, and does not look at them on a period or when they change. It
//! serves their values on the external metrics API from their status, which the leader of their
//! shard writes whenever a value changes (taken as the watch brings it, see [`watched`]), and
//! looks at them again when it comes to lead their shard (see [`taken_over`]).
//!
//! What is served so is at most one status write behind the leader (plus the watch's delay): an
//! unchanged value is not rewritten, so while the shard's leader renews its Lease the value is
//! served as current (see [`Vouch`]); once nobody renews it, the value ages from its
//! `measuredAt` and the API stops serving it three periods later, unless a new leader has synced
//! the scaler by then (within a lease and one period).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::Context;
use crate::api::LLMScaler;
use crate::leader::Leadership;
use crate::metric_cache::{CachedMetric, ScalerKey, ScalerSnapshot, Vouch};

/// The scalers (by uid) this replica last found led by another, so that what it knew of each is
/// dropped once, when it stops leading it.
pub struct StandingBy {
    uids: Mutex<HashSet<String>>,
    /// Whether another replica holds a shard now: what vouches for the values served from a
    /// status (one for every scaler).
    held: Arc<dyn Fn(u32) -> bool + Send + Sync>,
}

impl StandingBy {
    pub(super) fn new(leadership: &Leadership) -> Self {
        let leadership = leadership.clone();
        Self {
            uids: Mutex::default(),
            held: Arc::new(move |shard| leadership.held_elsewhere(shard)),
        }
    }

    /// True when `uid` was not standing by before.
    fn begin(&self, uid: &str) -> bool {
        let mut set = self.uids.lock().unwrap_or_else(PoisonError::into_inner);
        if set.contains(uid) {
            return false;
        }
        set.insert(uid.to_owned())
    }

    /// Keeps only the uids `keep` says to.
    pub(super) fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut set = self.uids.lock().unwrap_or_else(PoisonError::into_inner);
        set.retain(|uid| keep(uid));
    }

    /// `uid` stands by no longer.
    pub(super) fn end(&self, uid: &str) {
        let mut set = self.uids.lock().unwrap_or_else(PoisonError::into_inner);
        set.remove(uid);
    }
}

/// For a scaler this replica does not evaluate (at its first look since its shard was lost): its
/// values served from its status, and true, as nothing more is done with it until its shard is
/// taken over. False: this replica evaluates it.
pub(super) fn elsewhere(scaler: &LLMScaler, ctx: &Context) -> bool {
    if !ctx.leadership.sharded() {
        return false;
    }
    let uid = scaler.uid().unwrap_or_default();
    if ctx.leadership.evaluates(&uid) {
        // Taken over: what it remembered was dropped when it began standing by, so it is a
        // scaler first seen, and waits for its own slot as after a restart (a shard's scalers
        // spread over the period, not all at the takeover).
        ctx.standing_by.end(&uid);
        return false;
    }
    if ctx.standing_by.begin(&uid) {
        // Its leader reports it now: this replica's series of it would go stale, and what it
        // remembers (told events, demand samples) would be out of date if the shard came back.
        ctx.metrics
            .forget(&scaler.namespace().unwrap_or_default(), &scaler.name_any());
        ctx.memory.forget(&uid);
        tracing::debug!(
            scaler = %scaler.name_any(), shard = ctx.leadership.shard_of(&uid),
            "led by another replica: served from its status"
        );
    }
    // A stand-in's values were served as the watch brought it; an object kept whole was led
    // here when it came, and is served from its status from now on.
    if !is_stand_in(scaler) {
        serve_from_status(ctx, scaler);
    }
    true
}

/// The scalers of the shards this replica comes to lead, as they are won: each is looked at
/// once (a stand-in waits for the list it asks for, see [`stand_in`]), as nothing else would
/// bring back a scaler left standing by.
pub(super) fn taken_over(
    leadership: &Leadership,
    scalers: Store<LLMScaler>,
    relist: super::relist::Relist,
) -> impl Stream<Item = ObjectRef<LLMScaler>> + Send + 'static {
    let gains = leadership.shard_gains();
    let leadership = leadership.clone();
    futures::stream::unfold(gains, |mut gains| async move {
        let won = gains.gained().await?;
        Some((won, gains))
    })
    .flat_map(move |won| {
        relist.want();
        let mine: Vec<ObjectRef<LLMScaler>> = scalers
            .state()
            .iter()
            .filter(|s| won.contains(&leadership.shard_of(&s.uid().unwrap_or_default())))
            .map(|s| ObjectRef::from_obj(&**s))
            .collect();
        tracing::debug!(shards = ?won, scalers = mine.len(), "shards taken over");
        futures::stream::iter(mine)
    })
}

/// For a scaler another replica leads, as the watch brings it: its values served from its
/// status, and only a stand-in of it kept. A scaler this replica evaluates is left alone (its
/// syncs feed the cache).
pub(super) fn watched(ctx: &Context, scaler: &mut LLMScaler) {
    if ctx.leadership.sharded() && !ctx.leadership.evaluates(&scaler.uid().unwrap_or_default()) {
        serve_from_status(ctx, scaler);
        stand_in(scaler);
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
        held: ctx.standing_by.held.clone(),
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

/// Strips a scaler another replica leads down to what the conflict checks of this replica's own
/// scalers read of it (its target, bounds, creation time and dry-run annotation) and the sync
/// period; its values are served from its status before (see [`watched`]). A scaler's spec and
/// status are most of its memory, and a replica of a sharded fleet holds every scaler.
///
/// The stand-in is marked by an empty serverAddress, which admission refuses on a real object;
/// when this replica comes to lead the shard, the whole object is listed again (`relist`).
pub(super) fn stand_in(scaler: &mut LLMScaler) {
    let meta = &mut scaler.metadata;
    let dry_run = meta
        .annotations
        .as_mut()
        .and_then(|a| a.remove_entry(crate::names::DRY_RUN_ANNOTATION));
    meta.annotations = dry_run.map(|(k, v)| std::iter::once((k, v)).collect());
    meta.labels = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.managed_fields = None;
    meta.generate_name = None;
    meta.self_link = None;
    let spec = &mut scaler.spec;
    spec.server_address = String::new();
    spec.custom_provider = None;
    spec.server_headers = None;
    spec.server_headers_from = None;
    spec.server_tls = None;
    spec.server_auth = None;
    spec.metrics = None;
    spec.objective = None;
    spec.scale_up.policies = Vec::new();
    spec.scale_up.tolerance = String::new();
    spec.scale_down.policies = Vec::new();
    spec.scale_down.tolerance = String::new();
    spec.startup_seconds = None;
    spec.scale_to_zero = None;
    spec.fallback = None;
    spec.preemption = None;
    scaler.status = None;
}

/// Whether this is what [`stand_in`] kept of a scaler.
pub(super) fn is_stand_in(scaler: &LLMScaler) -> bool {
    scaler.spec.server_address.is_empty()
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

    #[test]
    fn a_stand_in_keeps_what_conflict_checks_read_and_is_told_apart() {
        let whole = scaler("True");
        let mut kept = whole.clone();
        stand_in(&mut kept);
        assert!(is_stand_in(&kept) && !is_stand_in(&whole));
        // Its values are served before it is stripped (see `watched`).
        assert_eq!(kept.status, None);
        // What the conflict checks read of another scaler.
        assert_eq!(kept.spec.target_ref, whole.spec.target_ref);
        assert_eq!(kept.metadata.uid, whole.metadata.uid);
        assert_eq!(kept.spec.metrics, None);
        let mut dry = scaler("True");
        dry.metadata.annotations = Some(
            [
                (
                    crate::names::DRY_RUN_ANNOTATION.to_owned(),
                    "true".to_owned(),
                ),
                ("other".to_owned(), "x".to_owned()),
            ]
            .into(),
        );
        stand_in(&mut dry);
        assert!(super::super::annotations::is_dry_run(&dry));
        assert_eq!(dry.metadata.annotations.as_ref().map(|a| a.len()), Some(1));
    }
}
