//! One sync of one LLMScaler, in three steps:
//!
//! 1. [`observe`], on every replica: read the target, the signal and the start-up delay, and
//!    decide with the pure [`crate::scaling::law`] (the lab's operator runs the same). Any
//!    failure is one [`SyncError`].
//! 2. The [`Writer`], on the leader only (leadership is asked once per sync, after the signal was
//!    read): mark the victims of a scale-down, write spec.replicas, then the status and the
//!    events, each rendered from the one outcome.
//! 3. On every replica: the metric cache that serves the external metrics API, and the
//!    operator's own metrics, so a standby answers what the leader would.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::future::{join_all, join3};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use thiserror::Error;

use super::annotations::is_dry_run;
use super::error::SyncError;
use super::events::{self, Note};
use super::reads::recorded;
use super::server_access::{self, ServerAccess};
use super::status::{self, Outcome, Scaler};
use super::watched_target::{OwnWrite, WatchedTarget};
use super::{Context, scale, schedule, startup, victims, watched_target};
use crate::api::behavior::BehaviorError;
use crate::api::validation::parse_target;
use crate::api::{LLMScaler, LLMScalerStatus, MetricProvider, StartupStatus};
use crate::error_chain::{self, Chain};
use crate::metric_cache::{CachedMetric, ScalerKey, ScalerSnapshot};
use crate::names::{
    ACTIVATION_QUERY, DECISION_METRIC, DELETION_COST_QUERY, DRY_RUN_ANNOTATION, OBJECTIVE_METRIC,
    PAUSED_ANNOTATION, PAUSED_REPLICAS_ANNOTATION,
};
use crate::scaling::{
    Bounds, Decision, HoldReason, Input, Learnt, LoadCurve, MetricReading, ObjectiveReading, Pause,
    Reason, Signal, SkipReason, Step, Stored, TargetState, Unreadable, ZeroMemory,
    effective_startup, law,
};
use crate::signals::read::WhenEmpty;
use crate::signals::{decision_server, gate, http};
use crate::telemetry::metrics::SyncResult;
use crate::telemetry::sync_report::{Decided, Reported, SyncReport};

/// A failure of the controller itself, retried by kube-runtime's error policy. What the user can
/// fix is a [`SyncError`], reported on the scaler instead.
#[derive(Debug, Error)]
pub enum ReconcileError {
    #[error("LLMScaler has no namespace")]
    NoNamespace,
    #[error("cannot write the status")]
    Status(#[source] kube::Error),
}

/// A metric whose target cannot be used: that metric is skipped, the others still count.
#[derive(Debug, Error)]
#[error("metrics[{index}].target: {error}")]
struct MetricTargetError {
    index: usize,
    error: crate::api::validation::TargetError,
}

/// A decision server's answer that is not a count.
#[derive(Debug, Error)]
#[error("the decision server gave no usable count: {0}")]
struct NoUsableCount(http::Redacted);

/// Syncs one scaler; a shutdown waits for it.
pub async fn reconcile(
    scaler: Arc<LLMScaler>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let supervisor = ctx.supervisor.clone();
    supervisor.track(sync(scaler, ctx)).await
}

#[tracing::instrument(skip_all, fields(namespace = scaler.namespace().unwrap_or_default(), scaler = %scaler.name_any()))]
async fn sync(scaler: Arc<LLMScaler>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let namespace = scaler.namespace().ok_or(ReconcileError::NoNamespace)?;
    // First, whatever comes next: the conflict checks of other scalers find this one by target.
    ctx.conflicts.register(&scaler);
    let uid = scaler.uid().unwrap_or_default();
    // Taken whatever this sync does: only a sync requeued below has an instant it was due at.
    let due = ctx.memory.take_due(&uid);
    // With shards: a scaler whose shard another replica has taken costs no query here, and no
    // look until its shard is won again.
    if super::shards::elsewhere(&scaler, &ctx) {
        return Ok(Action::await_change());
    }
    if let Some(wait) = wait_for_own_slot(&scaler, &ctx) {
        return Ok(requeue(&ctx, &uid, wait));
    }
    let woke = SystemTime::now();
    // Its turn among the syncs against its server (see signals::gate): a burst waits here, each
    // sync holding little until it starts; the sync itself is boxed, allocated only then.
    let _turn = gate::sync_turn(&scaler.spec.server_address).await;
    let period = Box::pin(evaluate(&scaler, &ctx, &namespace, started, due, woke)).await?;
    Ok(requeue(&ctx, &uid, next_sync(&scaler, period)))
}

/// The sync proper: observe, act and report. Returns the period of the next one (the sync
/// period, or the retry period after a failure).
async fn evaluate(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    started: Instant,
    due: Option<SystemTime>,
    woke: SystemTime,
) -> Result<i32, ReconcileError> {
    let now = (ctx.clock)();
    let observed = observe(scaler, ctx, namespace, now).await;
    let lateness = lateness(due, woke, SystemTime::now());
    // Asked once, after the signal was read (leadership can end while it is read).
    let writer = Writer::if_leading(ctx, scaler);
    let outcome = match (observed, &writer) {
        (Ok(observed), Some(writer)) => writer.act(scaler, namespace, observed).await,
        (Ok(observed), None) => Ok(Synced::observed_only(observed)),
        (Err(error), _) => Err(error),
    };
    if let Err(error) = &outcome {
        tracing::warn!(reason = %error.reason(), detail = %Chain(error), "sync failed");
    }
    feed_cache(ctx, scaler, namespace, &outcome, now);
    let name = scaler.name_any();
    ctx.metrics.record(&report(
        scaler, namespace, &name, &outcome, started, lateness,
    ));
    if let Some(writer) = writer {
        writer.report(scaler, namespace, &outcome, now).await?;
    }
    Ok(match &outcome {
        Ok(_) => scaler.spec.sync_period_seconds,
        Err(_) => scaler.spec.retry_period_seconds,
    })
}

/// Requeues a sync `wait` from now, remembering when it is due.
fn requeue(ctx: &Context, uid: &str, wait: Duration) -> Action {
    if !uid.is_empty() {
        ctx.memory.set_due(uid, SystemTime::now() + wait);
    }
    Action::requeue(wait)
}

/// How far a sync's timer may fire before the instant it was set for and still be that sync: the
/// wall clock it is compared with may be stepped a little meanwhile; a timer never fires early.
const EARLY: Duration = Duration::from_millis(100);

/// How late a sync due at `due` ran: from that instant to `read`, when it had read its signal
/// (waiting for a CPU, for its turn at the signal server, or for a slow answer all count). None
/// for a sync that was not due (brought forward by a change of its spec, or the first after a
/// start) or woke well before its instant.
fn lateness(due: Option<SystemTime>, woke: SystemTime, read: SystemTime) -> Option<Duration> {
    let due = due?;
    if woke + EARLY < due {
        return None;
    }
    Some(read.duration_since(due).unwrap_or_default())
}

/// What the observe step read and decided.
struct Observed {
    decision: Decision,
    target: TargetState,
    /// metadata.uid of the target object read.
    target_uid: String,
    /// How to write the target, and what the victim selection needs of it.
    resource: super::cached_watch::Kind,
    object: Arc<WatchedTarget>,
    /// How to reach serverAddress (client and headers), for the deletion-cost query; none when
    /// a paused scaler's server cannot be reached.
    access: Option<ServerAccess>,
    startup: Option<StartupStatus>,
    /// The scale-to-zero timers after this sync, under scaleToZero.
    zero: Option<ZeroMemory>,
    /// Consecutive syncs without a usable signal, this one included.
    syncs_without_signal: u32,
    /// What the objective stage learned, under an objective.
    objective: Option<Learnt>,
}

/// A sync that reached a decision, and what it wrote.
struct Synced {
    observed: Observed,
    wrote: bool,
    /// Events of the act step (victim marks), published with the decision's own.
    notes: Vec<Note>,
}

impl Synced {
    /// A standby's or a dry run's sync: decided, nothing written.
    fn observed_only(observed: Observed) -> Self {
        Self {
            observed,
            wrote: false,
            notes: Vec::new(),
        }
    }

    fn result(&self) -> SyncResult {
        let reasons = &self.observed.decision.reasons;
        if self.wrote {
            SyncResult::Scaled
        } else if reasons.iter().any(|r| matches!(r, Reason::Held(_))) {
            SyncResult::Held
        } else if reasons.iter().any(|r| matches!(r, Reason::Deferred(_))) {
            SyncResult::Deferred
        } else {
            SyncResult::Unchanged
        }
    }
}

/// Reads the target and the signal and decides. Writes nothing to the cluster.
async fn observe(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    now: Timestamp,
) -> Result<Observed, SyncError> {
    let spec = &scaler.spec;
    let target_ref = &spec.target_ref;
    let pause = pause_of(scaler)?;
    let uid = scaler.metadata.uid.as_deref().unwrap_or_default();
    let (resource, object) = ctx.targets.get(target_ref, namespace, uid).await?;
    let object = object.ok_or_else(|| SyncError::TargetNotFound {
        kind: target_ref.kind.clone(),
        name: target_ref.name.clone(),
        namespace: namespace.to_owned(),
    })?;
    let mut observed =
        watched_target::snapshot(&target_ref.kind, &target_ref.api_version, &object)?;
    // This process's last write, while a failed watch has not shown it yet, is what the target
    // has. A watch that delivers shows it within moments, long before the next sync.
    if let Some(written) = ctx.memory.written(uid) {
        let unseen = if ctx.targets.erring(target_ref).await {
            watched_target::unseen_write(&object, &written)
        } else {
            None
        };
        match unseen {
            Some(replicas) => observed.spec_replicas = replicas,
            None => ctx.memory.set_written(uid, None),
        }
    }
    // An observer writes nothing, so it takes nothing from anyone (the advisory mode: an HPA
    // following this scaler's desired-replicas metric).
    if !is_dry_run(scaler)
        && let Some(other) = ctx.conflicts.find(scaler, namespace).await?
    {
        return Err(SyncError::ConflictingAutoscaler {
            kind: target_ref.kind.clone(),
            name: target_ref.name.clone(),
            other,
            dry_run: DRY_RUN_ANNOTATION,
        });
    }

    // A pause holds whatever the signal says, a signal source that cannot be reached included
    // (an incident is when a pause is wanted): why it cannot be reached becomes each reading's
    // reason, shown in status, instead of failing the sync and leaving the pin unwritten.
    let access = match reach_server(scaler, ctx, namespace).await {
        Ok(access) => Ok(access),
        Err(error) if pause.is_some() => Err(SkipReason::Unavailable(Unreadable::new(error))),
        Err(error) => return Err(error),
    };
    let behavior = crate::api::behavior::behavior(spec)?;
    let stages = crate::api::behavior::stages(spec, pause)?;
    let stored_capacity = status::stored_capacity(scaler.status.as_ref());
    // Under an objective: the queries its selector composes, and the target the in-flight
    // reading starts from (the law replaces it with what this sync learns).
    let objective = match (&spec.objective, &stages.objective) {
        (Some(objective), Some(rules)) => Some((
            crate::api::objective::queries(objective).map_err(BehaviorError::from)?,
            stored_capacity.map_or(rules.prior, |c| c.per_pod),
        )),
        _ => None,
    };
    // With no Ready pod, per-pod series are gone by design: nothing to explain.
    let when_empty = if observed.ready_replicas > 0 {
        WhenEmpty::Explain
    } else {
        WhenEmpty::Expected
    };
    let mut latency_read = None;
    let signal = match (&access, spec.metric_provider) {
        (Ok(access), MetricProvider::Prometheus) => {
            let (mut readings, in_flight, latency) = join3(
                read_metrics(scaler, ctx, namespace, access, when_empty),
                async {
                    match &objective {
                        Some((queries, target)) => Some(
                            read_query(
                                scaler,
                                ctx,
                                namespace,
                                access,
                                OBJECTIVE_METRIC,
                                queries.in_flight_at(observed.ready_replicas),
                                // The router's queue exists at zero: nothing is an error there.
                                match queries.waking {
                                    Some(_) => WhenEmpty::Explain,
                                    None => when_empty,
                                },
                            )
                            .await,
                        )
                        .map(|value| objective_reading(value, *target)),
                        None => None,
                    }
                },
                async {
                    match &objective {
                        Some((queries, _)) => Some(
                            super::objective::latency(scaler, ctx, namespace, access, queries)
                                .await,
                        ),
                        None => None,
                    }
                },
            )
            .await;
            readings.extend(in_flight);
            latency_read = latency;
            Signal::Ratio(readings)
        }
        (Ok(access), MetricProvider::Custom) => {
            Signal::Absolute(read_decision(scaler, ctx, namespace, access).await?)
        }
        (Err(why), MetricProvider::Prometheus) => {
            let mut readings = unreadable(scaler, why);
            if let Some((_, target)) = &objective {
                readings.push(objective_reading(Err(why.clone()), *target));
                latency_read = Some(Err(match why {
                    SkipReason::Unavailable(u) => u.clone(),
                    other => Unreadable::new(other.clone()),
                }));
            }
            Signal::Ratio(readings)
        }
        (Err(why), MetricProvider::Custom) => Signal::Absolute(Err(Unreadable::new(why.clone()))),
    };
    let activation = match (&stages.zero, &spec.scale_to_zero, &access) {
        (Some(_), Some(zero), Ok(access)) => {
            Some(read_activation(scaler, ctx, namespace, access, &zero.activation_query).await)
        }
        (Some(_), Some(_), Err(why)) => Some(Err(why.clone())),
        _ => None,
    };
    let uid = scaler.uid().unwrap_or_default();
    let target_uid = object.uid.clone();
    let startup = match &object.selector {
        Some(Ok(selector)) if startup::worth_a_look(scaler.status.as_ref(), &observed) => {
            startup::observe(&ctx.client, namespace, selector, scaler.status.as_ref()).await
        }
        _ => scaler.status.as_ref().and_then(|s| s.startup.clone()),
    };
    let mut memory = status::stored_memory(scaler.status.as_ref(), &uid, &target_uid);
    memory.samples = ctx.memory.samples(&uid);
    memory.admissions = ctx.memory.admissions(&uid);
    // The recurrence's days: this process's, with the stretch under way, or else status's
    // finished stretches (another target's are dropped), read only then.
    memory.recurring = ctx.memory.recurring(&uid, &target_uid).unwrap_or_else(|| {
        super::recurrence::stored(
            scaler.status.as_ref().and_then(|s| s.recurrence.as_deref()),
            &target_uid,
        )
    });
    let input = Input {
        signal,
        target: observed.clone(),
        bounds: Bounds {
            min: spec.min_replicas,
            max: spec.max_replicas,
        },
        behavior,
        startup_seconds: effective_startup(
            spec.startup_seconds,
            startup.as_ref().map(status::learned),
        ),
        memory,
        now,
        down_waits: None,
        admitted: None,
        down_share: None,
    };
    let stored = Stored {
        zero: status::stored_zero(scaler.status.as_ref()),
        syncs_without_signal: status::stored_syncs_without_signal(scaler.status.as_ref()),
        capacity: stored_capacity,
        curve: match &stages.objective {
            Some(_) => ctx.memory.curve(&uid),
            None => LoadCurve::default(),
        },
    };
    let objective_read = latency_read.map(|latency| ObjectiveReading {
        latency,
        newest_ready: startup
            .as_ref()
            .and_then(|s| s.last_ready_time.as_ref())
            .map(|t| t.0),
    });
    let Step {
        decision,
        zero,
        syncs_without_signal,
        objective,
    } = law(&input, &stages, activation, objective_read.as_ref(), stored);
    ctx.memory
        .set_samples(&uid, decision.memory.samples.clone());
    ctx.memory
        .set_admissions(&uid, decision.memory.admissions.clone());
    ctx.memory
        .set_recurring(&uid, &target_uid, decision.memory.recurring.clone());
    if let Some(learnt) = &objective {
        ctx.memory.set_curve(&uid, learnt.curve.clone());
    }
    Ok(Observed {
        decision,
        target: observed,
        target_uid,
        resource,
        object,
        access: access.ok(),
        startup,
        zero,
        syncs_without_signal,
        objective,
    })
}

/// The objective's in-flight reading, against the target it starts from.
fn objective_reading(value: Result<f64, SkipReason>, target: f64) -> MetricReading {
    MetricReading {
        name: OBJECTIVE_METRIC.to_owned(),
        value,
        target,
        kind: crate::scaling::TargetType::Value,
    }
}

/// Everything a sync writes to the cluster: the target's spec.replicas, the victims' marks, the
/// scaler's status and its events. Only the leader has one.
struct Writer<'a> {
    ctx: &'a Context,
    /// Held until the last write: the scaler's shard is not handed over meanwhile.
    _guard: crate::leader::WriteGuard,
}

impl<'a> Writer<'a> {
    /// The writer, while this replica leads the scaler's shard (always, without leader
    /// election).
    fn if_leading(ctx: &'a Context, scaler: &LLMScaler) -> Option<Self> {
        let guard = ctx
            .leadership
            .write_guard(&scaler.uid().unwrap_or_default())?;
        Some(Self { ctx, _guard: guard })
    }

    /// Marks the victims of a scale-down and writes spec.replicas, unless the scaler is a dry
    /// run (then everything is evaluated and reported, and nothing written).
    async fn act(
        &self,
        scaler: &LLMScaler,
        namespace: &str,
        observed: Observed,
    ) -> Result<Synced, SyncError> {
        if is_dry_run(scaler) {
            return Ok(Synced::observed_only(observed));
        }
        let ctx = self.ctx;
        let target_ref = &scaler.spec.target_ref;
        let removed = usize::try_from(observed.decision.removed(&observed.target)).unwrap_or(0);
        let notes = victims::for_sync(
            scaler,
            ctx,
            namespace,
            &observed.object,
            removed,
            observed.access.as_ref(),
        )
        .await;
        let Some(replicas) = observed.decision.write else {
            return Ok(Synced {
                observed,
                wrote: false,
                notes,
            });
        };
        scale::write_replicas(
            &ctx.client,
            &observed.resource,
            namespace,
            &target_ref.name,
            replicas,
        )
        .await
        .map_err(|source| SyncError::Scale {
            kind: target_ref.kind.clone(),
            name: target_ref.name.clone(),
            replicas,
            source,
        })?;
        tracing::info!(
            target = %target_ref.name, from = observed.target.spec_replicas, to = replicas,
            desired = observed.decision.desired, "scaled"
        );
        let uid = scaler.metadata.uid.as_deref().unwrap_or_default();
        ctx.memory.set_written(
            uid,
            observed.object.generation.map(|generation| OwnWrite {
                target_uid: observed.target_uid.clone(),
                generation,
                from: observed.target.spec_replicas,
                to: replicas,
            }),
        );
        Ok(Synced {
            observed,
            wrote: true,
            notes,
        })
    }

    /// Writes the status (when it changed) and publishes the sync's events.
    async fn report(
        &self,
        scaler: &LLMScaler,
        namespace: &str,
        outcome: &Result<Synced, SyncError>,
        now: Timestamp,
    ) -> Result<(), ReconcileError> {
        let ctx = self.ctx;
        let uid = scaler.uid().unwrap_or_default();
        let rendered = match outcome {
            Ok(synced) => Outcome::Decided {
                startup: synced.observed.startup.as_ref(),
                decision: &synced.observed.decision,
                target: &synced.observed.target,
                target_uid: &synced.observed.target_uid,
                wrote: synced.wrote,
                zero: synced.observed.zero.as_ref(),
                syncs_without_signal: synced.observed.syncs_without_signal,
                objective: synced.observed.objective.as_ref(),
            },
            Err(error) => Outcome::Failed(error),
        };
        self.write_status(scaler, namespace, &rendered, now).await?;

        let (mut notes, mut candidates, target) = match outcome {
            Ok(synced) => {
                let Observed {
                    decision,
                    target,
                    objective,
                    ..
                } = &synced.observed;
                let mut decided =
                    events::decision_notes(scaler, decision, target, is_dry_run(scaler));
                if let Some(learnt) = objective {
                    let (_, reason, _) = status::objective_met(learnt, decision, target);
                    decided.extend(events::objective_missed(
                        reason,
                        target,
                        scaler.spec.max_replicas,
                    ));
                    decided.extend(events::starting_estimate_low(&learnt.lesson));
                }
                (synced.notes.clone(), decided, Some(target))
            }
            Err(error) => {
                let failed = Note {
                    warning: true,
                    reason: error.reason().as_str(),
                    message: error_chain::render(error),
                };
                (Vec::new(), vec![failed], None)
            }
        };
        // A lasting state is told when it begins and when what it says changes (all its notes of
        // this sync together: one per skipped metric); one that is over is news again when it
        // begins again.
        for topic in events::LASTING {
            let told: Vec<&str> = candidates
                .iter()
                .filter(|n| n.reason == topic)
                .map(|n| n.message.as_str())
                .collect();
            if told.is_empty() {
                ctx.memory.ended(topic, &uid);
            } else if !ctx.memory.changed(topic, &uid, &told.join("\n")) {
                candidates.retain(|n| n.reason != topic);
            }
        }
        notes.extend(
            candidates
                .into_iter()
                .filter(|n| self.worth_telling(n, &uid, target)),
        );
        // Notices about the spec are told once per scaler: repeated, each sync would patch the
        // event's series, an API write per sync for nothing new.
        notes.extend(
            events::spec_notices(scaler)
                .into_iter()
                .filter(|n| ctx.memory.first_time(n.reason, &uid)),
        );
        events::publish(&ctx.events, &ctx.memory, scaler, &notes).await;
        Ok(())
    }

    /// Pods starting are told once per count asked for, not at every sync while they load (each
    /// repeat would patch the event's series: an API write per sync with nothing new in it).
    fn worth_telling(&self, note: &Note, uid: &str, target: Option<&TargetState>) -> bool {
        match (note.reason, target) {
            // The number starting falls as the pods load.
            (events::STARTING_COUNTED, Some(target)) => self.ctx.memory.first_time_for(
                events::STARTING_COUNTED,
                uid,
                target.spec_replicas.to_string(),
            ),
            _ => true,
        }
    }

    async fn write_status(
        &self,
        scaler: &LLMScaler,
        namespace: &str,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<(), ReconcileError> {
        let uid = scaler.uid().unwrap_or_default();
        let identity = Scaler {
            uid: &uid,
            generation: scaler.meta().generation,
        };
        let rendered: LLMScalerStatus =
            status::render(scaler.status.as_ref(), &identity, outcome, now);
        if scaler.status.as_ref() == Some(&rendered) {
            return Ok(());
        }
        let api: Api<LLMScaler> = Api::namespaced(self.ctx.client.clone(), namespace);
        let patch = json!({ "status": status::merge_patch(scaler.status.as_ref(), &rendered) });
        api.patch_status(
            &scaler.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(ReconcileError::Status)?;
        Ok(())
    }
}

/// The pause the scaler's annotations ask for; a value that means neither is an error that
/// changes nothing.
fn pause_of(scaler: &LLMScaler) -> Result<Option<Pause>, SyncError> {
    let annotations = scaler.annotations();
    if let Some(value) = annotations.get(PAUSED_REPLICAS_ANNOTATION) {
        // Within the spec's bounds: a pin past maxReplicas is a typo more often than an intent,
        // and the bounds are what the platform team agreed to pay for.
        let max = scaler.spec.max_replicas;
        return match value.trim().parse::<i32>() {
            Ok(replicas) if (0..=max).contains(&replicas) => Ok(Some(Pause::Pinned(replicas))),
            _ => Err(SyncError::InvalidAnnotation {
                annotation: PAUSED_REPLICAS_ANNOTATION,
                value: value.clone(),
                expected: format!("write a replica count from 0 to maxReplicas ({max})"),
            }),
        };
    }
    match annotations.get(PAUSED_ANNOTATION).map(|v| v.trim()) {
        None | Some("false") => Ok(None),
        Some("true") => Ok(Some(Pause::Frozen)),
        Some(value) => Err(SyncError::InvalidAnnotation {
            annotation: PAUSED_ANNOTATION,
            value: value.to_owned(),
            expected: "write \"true\" (or \"false\")".to_owned(),
        }),
    }
}

/// The client and headers serverAddress is reached with, once the address is allowed (checked
/// before any request: it may be somewhere the operator must not call).
async fn reach_server(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
) -> Result<ServerAccess, SyncError> {
    ctx.allowed.check(&scaler.spec.server_address)?;
    Ok(server_access::resolve(
        &ctx.secrets,
        &ctx.tls_clients,
        &ctx.http,
        &ctx.client,
        scaler,
        namespace,
    )
    .await?)
}

/// Every metric of the scaler, unread for `why`.
fn unreadable(scaler: &LLMScaler, why: &SkipReason) -> Vec<MetricReading> {
    let metrics = scaler.spec.metrics.as_deref().unwrap_or_default();
    metrics
        .iter()
        .enumerate()
        .map(|(i, metric)| MetricReading {
            name: metric_name(metric, i),
            value: Err(why.clone()),
            target: parse_target(&metric.target).unwrap_or(f64::NAN),
            kind: crate::api::behavior::target_type(metric.target_type),
        })
        .collect()
}

/// Queries every metric of the scaler concurrently. A metric that cannot be read becomes a
/// skipped reading with its reason.
async fn read_metrics(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    access: &ServerAccess,
    when_empty: WhenEmpty,
) -> Vec<MetricReading> {
    let spec = &scaler.spec;
    let metrics = spec.metrics.as_deref().unwrap_or_default();
    let queries = metrics.iter().enumerate().map(|(i, metric)| async move {
        let name = metric_name(metric, i);
        let kind = crate::api::behavior::target_type(metric.target_type);
        let target = match parse_target(&metric.target) {
            Ok(t) => t,
            Err(e) => {
                return MetricReading {
                    name,
                    value: Err(SkipReason::Unavailable(Unreadable::new(
                        MetricTargetError { index: i, error: e },
                    ))),
                    target: f64::NAN,
                    kind,
                };
            }
        };
        let value = read_query(
            scaler,
            ctx,
            namespace,
            access,
            &name,
            &metric.query,
            when_empty,
        )
        .await;
        MetricReading {
            name,
            value,
            target,
            kind,
        }
    });
    join_all(queries).await
}

/// Reads the scale-to-zero activation query; a failure is a reading that neither wakes nor
/// counts as idle. The one signal at zero: its emptiness is always worth explaining.
async fn read_activation(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    access: &ServerAccess,
    query: &str,
) -> Result<f64, SkipReason> {
    read_query(
        scaler,
        ctx,
        namespace,
        access,
        ACTIVATION_QUERY,
        query,
        WhenEmpty::Explain,
    )
    .await
}

/// A PromQL value read through the one signal read, recorded under `metric`; an error becomes
/// the reading's reason, whole and with the request's credentials redacted.
async fn read_query(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    access: &ServerAccess,
    metric: &str,
    query: &str,
    when_empty: WhenEmpty,
) -> Result<f64, SkipReason> {
    let read = access
        .at(&scaler.spec.server_address)
        .value(query, when_empty)
        .await;
    recorded(&ctx.metrics, namespace, &scaler.name_any(), metric, read)
        .map_err(|e| SkipReason::Unavailable(Unreadable::new(e)))
}

/// The name a metric is recorded and served under: its own, or `metric-<index>` when unnamed.
pub(super) fn metric_name(metric: &crate::api::MetricSpec, index: usize) -> String {
    metric
        .name
        .clone()
        .unwrap_or_else(|| crate::names::unnamed_metric(index))
}

/// Asks the decision server. A spec the controller cannot use fails the sync; an answer that
/// cannot be used is a reason to hold.
async fn read_decision(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    access: &ServerAccess,
) -> Result<Result<i32, Unreadable>, SyncError> {
    let spec = &scaler.spec;
    let provider = spec
        .custom_provider
        .as_ref()
        .ok_or(SyncError::NoCustomProvider)?;
    let url =
        decision_server::decision_url(&spec.server_address, &provider.path, &provider.service_id)
            .map_err(SyncError::DecisionUrl)?;
    let read = access
        .at(&spec.server_address)
        .decision(&url, &provider.service_id, provider.namespace.as_deref())
        .await;
    let count = recorded(
        &ctx.metrics,
        namespace,
        &scaler.name_any(),
        DECISION_METRIC,
        read,
    );
    Ok(count.map_err(|e| Unreadable::new(NoUsableCount(e))))
}

/// Feeds the metric cache the external metrics API serves: this sync's decision, or nothing
/// when it failed (the API answers NotFound until a sync succeeds, and an HPA reading it holds;
/// nothing from an earlier sync stands in for this one).
fn feed_cache(
    ctx: &Context,
    scaler: &LLMScaler,
    namespace: &str,
    outcome: &Result<Synced, SyncError>,
    now: Timestamp,
) {
    let key = ScalerKey {
        namespace: namespace.to_owned(),
        name: scaler.name_any(),
    };
    let Ok(synced) = outcome else {
        ctx.cache.remove(&key);
        return;
    };
    let Observed {
        decision, target, ..
    } = &synced.observed;
    let metrics = decision
        .metrics
        .iter()
        .map(|m| CachedMetric {
            name: m.name.clone(),
            value: m.value,
            measured_at: now,
            recommendation: m.recommendation.as_ref().ok().copied(),
            error: m.recommendation.as_ref().err().map(ToString::to_string),
        })
        .collect();
    ctx.cache.update(
        key,
        ScalerSnapshot {
            uid: scaler.uid().unwrap_or_default(),
            metrics,
            current_replicas: target.ready_replicas,
            desired_replicas: decision.desired,
            synced_at: now,
            sync_period_seconds: scaler.spec.sync_period_seconds,
            vouched: None,
        },
    );
}

/// The operator's own metrics of this sync: its result (and a failure's reason), its duration,
/// the replica gauges and the scale counter.
/// The sync as the operator's metrics record it.
fn report<'a>(
    scaler: &'a LLMScaler,
    namespace: &'a str,
    name: &'a str,
    outcome: &'a Result<Synced, SyncError>,
    started: Instant,
    lateness: Option<Duration>,
) -> SyncReport<'a> {
    let synced = match outcome {
        Ok(synced) => synced,
        Err(error) => {
            return SyncReport {
                namespace,
                scaler: name,
                elapsed: started.elapsed(),
                lateness,
                conditions: vec![(status::READY, false), (status::SCALING_ACTIVE, false)],
                outcome: Reported::Failed(error.reason()),
            };
        }
    };
    let Observed {
        decision,
        target,
        objective,
        ..
    } = &synced.observed;
    let specs = scaler.spec.metrics.as_deref().unwrap_or_default();
    let metrics = decision
        .metrics
        .iter()
        .enumerate()
        .map(|(i, outcome)| {
            let target = match objective {
                // The objective's reading, against the capacity learned.
                Some(learnt) if outcome.name == OBJECTIVE_METRIC => Some(learnt.capacity.per_pod),
                _ => specs
                    .get(i)
                    .filter(|_| outcome.name != DECISION_METRIC)
                    .and_then(|m| parse_target(&m.target).ok()),
            };
            (outcome.name.as_str(), outcome.value, target)
        })
        .collect();
    let paused = decision
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::Held(HoldReason::Paused(_))));
    SyncReport {
        namespace,
        scaler: name,
        elapsed: started.elapsed(),
        lateness,
        conditions: vec![
            (status::READY, true),
            (status::SCALING_ACTIVE, status::scaling_active(decision).0),
            (status::SCALING_LIMITED, status::scaling_limited(decision).0),
        ]
        .into_iter()
        .chain(objective.as_ref().map(|l| {
            (
                status::OBJECTIVE_MET,
                status::objective_met(l, decision, target).0,
            )
        }))
        .collect(),
        outcome: Reported::Decided(Decided {
            result: synced.result(),
            metrics,
            also_in_use: also_queried(scaler),
            desired: decision.desired,
            ready: target.ready_replicas,
            paused,
            min: scaler.spec.min_replicas,
            max: scaler.spec.max_replicas,
            syncs_without_signal: synced.observed.syncs_without_signal,
            attainment: objective
                .as_ref()
                .and_then(|l| l.late)
                .map(|late| 1.0 - late.at_most),
            headroom: objective.as_ref().and_then(|l| l.headroom),
            written: decision
                .write
                .filter(|_| synced.wrote)
                .map(|written| (written, target.spec_replicas)),
        }),
    }
}

/// The queries a scaler makes besides its metrics, whose series in the operator's metrics stay.
fn also_queried(scaler: &LLMScaler) -> Vec<&'static str> {
    let spec = &scaler.spec;
    let activation = spec.scale_to_zero.as_ref().map(|_| ACTIVATION_QUERY);
    let deletion_cost = spec
        .scale_down
        .deletion_cost_query
        .as_ref()
        .filter(|q| !q.trim().is_empty())
        .map(|_| DELETION_COST_QUERY);
    activation.into_iter().chain(deletion_cost).collect()
}

pub fn error_policy(scaler: Arc<LLMScaler>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    tracing::warn!(scaler = %scaler.name_any(), error = %crate::error_chain::Chain(error), "sync failed, retrying");
    let wait = next_sync(&scaler, scaler.spec.retry_period_seconds);
    requeue(&ctx, &scaler.uid().unwrap_or_default(), wait)
}

/// Marks the first sight of a scaler in this process. A process that starts lists every scaler
/// at once: one that already synced its current spec (status.observedGeneration says so) waits
/// for its own instant of the period rather than querying its server together with all the
/// others; a new scaler, or one whose spec changed meanwhile, syncs at once. The external
/// metrics of a waiting scaler are served from its first sync, at most one period later.
fn wait_for_own_slot(scaler: &LLMScaler, ctx: &Context) -> Option<Duration> {
    let uid = scaler.metadata.uid.as_deref()?;
    if !ctx.memory.first_time(super::memory::FIRST_SIGHT, uid) {
        return None;
    }
    let synced_before = scaler.status.as_ref().is_some_and(|s| {
        s.observed_generation.is_some() && s.observed_generation == scaler.metadata.generation
    });
    if !synced_before {
        return None;
    }
    let wait = schedule::first_slot(
        uid,
        requeue_after(scaler.spec.sync_period_seconds),
        std::time::SystemTime::now(),
    );
    (!wait.is_zero()).then_some(wait)
}

/// The delay to the scaler's next slot on its grid of `period_seconds` (see [`schedule`]): its
/// uid sets the phase, so scalers created together still query at different instants.
fn next_sync(scaler: &LLMScaler, period_seconds: i32) -> Duration {
    let key = scaler.metadata.uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            scaler.namespace().unwrap_or_default(),
            scaler.name_any()
        )
    });
    schedule::next_sync(
        &key,
        requeue_after(period_seconds),
        std::time::SystemTime::now(),
    )
}

/// A period from the spec; admission guarantees >= 1, but an object stored before that rule must
/// not spin the controller.
fn requeue_after(seconds: i32) -> Duration {
    Duration::from_secs(u64::try_from(seconds.max(1)).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_counts_from_the_instant_a_sync_was_due() {
        let due = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let ms = Duration::from_millis;
        // Woke on time, read its signal 30 ms later.
        assert_eq!(lateness(Some(due), due, due + ms(30)), Some(ms(30)));
        // Woke 4 s late (no CPU, a backlog).
        assert_eq!(
            lateness(Some(due), due + ms(4_000), due + ms(4_020)),
            Some(ms(4_020))
        );
        // A hair early by the wall clock: on time.
        assert_eq!(lateness(Some(due), due - ms(5), due - ms(1)), Some(ms(0)));
        // Brought forward by a change of its spec: not a due sync.
        assert_eq!(lateness(Some(due), due - ms(3_000), due - ms(2_990)), None);
        // Nothing requeued it (the first sync in this process).
        assert_eq!(lateness(None, due, due), None);
    }
}
