//! One sync of one LLMScaler: observe, decide (pure), act, report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use reqwest::header::HeaderMap;
use serde_json::json;
use thiserror::Error;

use super::events::{self, Note};
use super::status::{self, Outcome, Scaler};
use super::targets::TargetLookupError;
use super::{Context, scale, startup, target, victims};
use crate::api::validation::parse_target;
use crate::api::{LLMScaler, LLMScalerStatus, MetricProvider};
use crate::scaling::{
    Bounds, DECISION_METRIC, Decision, Input, MetricReading, Reason, Signal, SkipReason, decide,
    effective_startup,
};
use crate::signals::cache::{CachedMetric, ScalerKey, ScalerSnapshot};
use crate::signals::{decision, http, prometheus};
use crate::telemetry::metrics::{MetricLabels, ScaleLabels, ScalerLabels, SyncLabels};

#[derive(Debug, Error)]
pub enum ReconcileError {
    #[error("LLMScaler has no namespace")]
    NoNamespace,
    #[error("cannot write the status: {0}")]
    Status(#[source] kube::Error),
}

/// Why a sync stopped before deciding; each becomes a condition reason and an event.
struct Failure {
    reason: &'static str,
    message: String,
}

/// Syncs one scaler. Failures the user can fix (a missing target, an unreadable spec) are
/// reported on the scaler and retried after retryPeriodSeconds; they are not errors here.
pub async fn reconcile(
    scaler: Arc<LLMScaler>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let _running = ctx.in_flight.enter();
    let started = Instant::now();
    let namespace = scaler.namespace().ok_or(ReconcileError::NoNamespace)?;
    let name = scaler.name_any();
    let now = Timestamp::now();

    let (result, action) = match sync(&scaler, &ctx, &namespace, now).await {
        Ok(Synced {
            decision,
            target,
            target_uid,
            wrote,
            notes: act_notes,
            startup,
        }) => {
            let outcome = Outcome::Decided {
                startup: startup.as_ref(),
                decision: &decision,
                target: &target,
                target_uid: &target_uid,
                wrote,
            };
            // A standby keeps its cache (and so the external metrics it serves) current, and
            // leaves status and events to the leader.
            if ctx.leadership.may_write() {
                write_status(&ctx, &scaler, &outcome, now).await?;
                let mut notes = act_notes;
                let uid = scaler.uid().unwrap_or_default();
                notes.extend(
                    events::decision_notes(&scaler, &decision, &target, is_dry_run(&scaler))
                        .into_iter()
                        // Told once per count asked for: while a scale-up's pods load, every
                        // sync would otherwise patch the event's series.
                        .filter(|n| {
                            n.reason != events::STARTING_COUNTED
                                || ctx.first_time(
                                    events::STARTING_COUNTED,
                                    &format!("{uid}/{}", target.spec_replicas),
                                )
                        }),
                );
                publish(&ctx, &scaler, &notes).await;
            }
            record(&ctx, &scaler, &namespace, &decision, &target, now);
            let result = sync_result(&decision, wrote);
            (
                result,
                Action::requeue(period(scaler.spec.sync_period_seconds)),
            )
        }
        Err(failure) => {
            tracing::warn!(scaler = %name, namespace = %namespace, reason = failure.reason, detail = %failure.message, "sync failed");
            // Nothing from an earlier sync stands in for this one: the external metrics API
            // answers NotFound until a sync succeeds, and an HPA reading it holds.
            ctx.cache.remove(&ScalerKey {
                namespace: namespace.clone(),
                name: name.clone(),
            });
            let outcome = Outcome::Failed {
                reason: failure.reason,
                message: failure.message.clone(),
            };
            if ctx.leadership.may_write() {
                write_status(&ctx, &scaler, &outcome, now).await?;
                let note = Note {
                    warning: true,
                    reason: failure.reason,
                    message: failure.message,
                };
                publish(&ctx, &scaler, &[note]).await;
            }
            (
                "failed",
                Action::requeue(period(scaler.spec.retry_period_seconds)),
            )
        }
    };
    if scaler.spec.metric_provider == MetricProvider::Custom
        && scaler.spec.scale_down.deletion_cost_query.is_some()
        && ctx.first_time("deletion-cost-ignored", &scaler.uid().unwrap_or_default())
    {
        tracing::info!(scaler = %scaler.name_any(), "deletionCostQuery is PromQL and is ignored under the Custom provider");
        let note = Note {
            warning: false,
            reason: "DeletionCostQueryIgnored",
            message: "scaleDown.deletionCostQuery is PromQL and is ignored under the Custom provider; the newest pods are removed first".to_owned(),
        };
        publish(&ctx, &scaler, &[note]).await;
    }
    if scaler.spec.preemption.is_some() {
        let note = Note {
            warning: false,
            reason: "PreemptionIgnored",
            message: "spec.preemption is accepted but has no effect yet".to_owned(),
        };
        publish(&ctx, &scaler, &[note]).await;
    }
    ctx.metrics
        .syncs
        .get_or_create(&SyncLabels {
            namespace,
            scaler: name,
            result: result.to_owned(),
        })
        .inc();
    ctx.metrics
        .sync_duration
        .observe(started.elapsed().as_secs_f64());
    Ok(action)
}

/// What a sync that reached a decision did.
struct Synced {
    decision: Decision,
    target: crate::scaling::TargetState,
    target_uid: String,
    wrote: bool,
    /// Events of the act step (victim marks), published with the decision's own.
    notes: Vec<Note>,
    startup: Option<crate::api::StartupStatus>,
}

/// Observe, decide, act.
async fn sync(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    now: Timestamp,
) -> Result<Synced, Failure> {
    let spec = &scaler.spec;
    let target_ref = &spec.target_ref;
    let (resource, object) = ctx
        .targets
        .get(target_ref, namespace)
        .await
        .map_err(|e| Failure {
            reason: match e {
                TargetLookupError::UnknownKind { .. } => "UnknownTargetKind",
                _ => "TargetUnavailable",
            },
            message: e.to_string(),
        })?;
    let object = object.ok_or_else(|| Failure {
        reason: "TargetNotFound",
        message: format!(
            "{} {} not found in namespace {namespace}",
            target_ref.kind, target_ref.name
        ),
    })?;
    let observed =
        target::snapshot(&target_ref.kind, &target_ref.api_version, &object).map_err(|e| {
            Failure {
                reason: "InvalidTarget",
                message: e.to_string(),
            }
        })?;

    // Before any request: the address may be somewhere the operator must not call.
    ctx.allowed
        .check(&spec.server_address)
        .map_err(|e| Failure {
            reason: "ServerAddressNotAllowed",
            message: e.to_string(),
        })?;
    let headers = super::headers::resolve(&ctx.secrets, &ctx.client, scaler, namespace)
        .await
        .map_err(|e| Failure {
            reason: e.reason(),
            message: e.to_string(),
        })?;
    let signal = match spec.metric_provider {
        MetricProvider::Prometheus => {
            Signal::Ratio(read_metrics(scaler, ctx, namespace, &headers).await)
        }
        MetricProvider::Custom => {
            Signal::Absolute(read_decision(scaler, ctx, namespace, &headers).await?)
        }
    };
    let uid = scaler.uid().unwrap_or_default();
    let target_uid = object.uid().unwrap_or_default();
    let behavior = crate::api::behavior::behavior(spec).map_err(|e| Failure {
        reason: "InvalidSpec",
        message: e.to_string(),
    })?;
    let startup = match &object.selector {
        Some(Ok(selector)) if startup::worth_a_look(scaler.status.as_ref(), &observed) => {
            startup::observe(&ctx.client, namespace, selector, scaler.status.as_ref()).await
        }
        _ => scaler.status.as_ref().and_then(|s| s.startup.clone()),
    };
    let mut memory = status::stored_memory(scaler.status.as_ref(), &uid, &target_uid);
    memory.samples = ctx.samples(&uid);
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
    };
    let decision = decide(&input);
    ctx.set_samples(&uid, decision.memory.samples.clone());

    if is_dry_run(scaler) || !ctx.leadership.may_write() {
        // Everything is evaluated and published; nothing is written to the target or its pods
        // (a dry run by request, a standby because only the leader writes).
        return Ok(Synced {
            decision,
            target: observed,
            target_uid,
            wrote: false,
            notes: Vec::new(),
            startup,
        });
    }
    let removed = usize::try_from(decision.removed(&observed)).unwrap_or(0);
    let notes = victims::for_sync(scaler, ctx, namespace, &object, removed, &headers).await;

    let mut wrote = false;
    // Asked again just before the write: leadership can end while the signal is read.
    if let Some(replicas) = decision.write.filter(|_| ctx.leadership.may_write()) {
        scale::write_replicas(
            &ctx.client,
            &resource,
            namespace,
            &target_ref.name,
            replicas,
        )
        .await
        .map_err(|e| Failure {
            reason: "ScaleFailed",
            message: format!(
                "cannot set spec.replicas of {} {} to {replicas}: {e}",
                target_ref.kind, target_ref.name
            ),
        })?;
        wrote = true;
        tracing::info!(
            scaler = %scaler.name_any(), namespace, target = %target_ref.name,
            from = observed.spec_replicas, to = replicas, desired = decision.desired,
            "scaled"
        );
    }
    Ok(Synced {
        decision,
        target: observed,
        target_uid,
        wrote,
        notes,
        startup,
    })
}

/// Events go out only while this replica leads.
async fn publish(ctx: &Context, scaler: &LLMScaler, notes: &[Note]) {
    if ctx.leadership.may_write() {
        events::publish(&ctx.recorder, scaler, notes).await;
    }
}

/// The annotation that turns a scaler into an observer: it decides and reports, and writes nothing.
pub const DRY_RUN_ANNOTATION: &str = "autoscaling.modelsphere.dev/dry-run";

fn is_dry_run(scaler: &LLMScaler) -> bool {
    scaler
        .annotations()
        .get(DRY_RUN_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// Queries every metric of the scaler concurrently. A metric that cannot be read becomes a
/// skipped reading with its reason.
async fn read_metrics(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    headers: &HeaderMap,
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
                    value: Err(SkipReason::Unavailable(format!("metrics[{i}].target: {e}"))),
                    target: f64::NAN,
                    kind,
                };
            }
        };
        let started = Instant::now();
        let value =
            prometheus::query_value(&ctx.http, &spec.server_address, headers, &metric.query).await;
        ctx.metrics.observe_query(
            MetricLabels {
                namespace: namespace.to_owned(),
                scaler: scaler.name_any(),
                metric: name.clone(),
            },
            started.elapsed(),
            value.as_ref().is_ok_and(|v| v.is_finite()),
        );
        MetricReading {
            name,
            value: value
                .map_err(|e| SkipReason::Unavailable(http::redact(&e.to_string(), headers))),
            target,
            kind,
        }
    });
    join_all(queries).await
}

/// The name a metric is recorded and served under: its own, or `metric-<index>` when unnamed.
pub(super) fn metric_name(metric: &crate::api::MetricSpec, index: usize) -> String {
    metric
        .name
        .clone()
        .unwrap_or_else(|| format!("metric-{index}"))
}

/// Asks the decision server. A spec the controller cannot use fails the sync; an answer that
/// cannot be used is a reason to hold.
async fn read_decision(
    scaler: &LLMScaler,
    ctx: &Context,
    namespace: &str,
    headers: &HeaderMap,
) -> Result<Result<i32, String>, Failure> {
    let spec = &scaler.spec;
    let invalid = |message: String| Failure {
        reason: "InvalidSpec",
        message,
    };
    let provider = spec.custom_provider.as_ref().ok_or_else(|| {
        invalid("customProvider is required when metricProvider is Custom".to_owned())
    })?;
    let url = decision::decision_url(&spec.server_address, &provider.path, &provider.service_id)
        .map_err(|e| invalid(e.to_string()))?;
    let started = Instant::now();
    let count = decision::fetch_decision(
        &ctx.http,
        &url,
        headers,
        &provider.service_id,
        provider.namespace.as_deref(),
    )
    .await;
    ctx.metrics.observe_query(
        MetricLabels {
            namespace: namespace.to_owned(),
            scaler: scaler.name_any(),
            metric: DECISION_METRIC.to_owned(),
        },
        started.elapsed(),
        count.is_ok(),
    );
    Ok(count.map_err(|e| {
        format!(
            "the decision server gave no usable count: {}",
            http::redact(&e.to_string(), headers)
        )
    }))
}

/// Writes the status if, and only if, it changed.
async fn write_status(
    ctx: &Context,
    scaler: &LLMScaler,
    outcome: &Outcome<'_>,
    now: Timestamp,
) -> Result<(), ReconcileError> {
    let uid = scaler.uid().unwrap_or_default();
    let identity = Scaler {
        uid: &uid,
        generation: scaler.meta().generation,
    };
    let rendered: LLMScalerStatus = status::render(scaler.status.as_ref(), &identity, outcome, now);
    if scaler.status.as_ref() == Some(&rendered) {
        return Ok(());
    }
    let namespace = scaler.namespace().unwrap_or_default();
    let api: Api<LLMScaler> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = json!({ "status": rendered });
    api.patch_status(
        &scaler.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(ReconcileError::Status)?;
    Ok(())
}

/// Feeds the shared cache and the operator's gauges from the decision.
fn record(
    ctx: &Context,
    scaler: &LLMScaler,
    namespace: &str,
    decision: &Decision,
    target: &crate::scaling::TargetState,
    now: Timestamp,
) {
    let name = scaler.name_any();
    let labels = ScalerLabels {
        namespace: namespace.to_owned(),
        scaler: name.clone(),
    };
    ctx.metrics
        .desired_replicas
        .get_or_create(&labels)
        .set(i64::from(decision.desired));
    ctx.metrics
        .current_replicas
        .get_or_create(&labels)
        .set(i64::from(target.ready_replicas));
    if let Some(written) = decision.write {
        let direction = if written > target.spec_replicas {
            "up"
        } else {
            "down"
        };
        ctx.metrics
            .scale_events
            .get_or_create(&ScaleLabels {
                namespace: namespace.to_owned(),
                scaler: name.clone(),
                direction: direction.to_owned(),
            })
            .inc();
    }
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
        ScalerKey {
            namespace: namespace.to_owned(),
            name,
        },
        ScalerSnapshot {
            uid: scaler.uid().unwrap_or_default(),
            metrics,
            current_replicas: target.ready_replicas,
            desired_replicas: decision.desired,
            synced_at: now,
            sync_period_seconds: scaler.spec.sync_period_seconds,
        },
    );
}

fn sync_result(decision: &Decision, wrote: bool) -> &'static str {
    if wrote {
        "scaled"
    } else if decision
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::Held(_)))
    {
        "held"
    } else if decision
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::Deferred(_)))
    {
        "deferred"
    } else {
        "unchanged"
    }
}

pub fn error_policy(scaler: Arc<LLMScaler>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(scaler = %scaler.name_any(), %error, "sync failed, retrying");
    Action::requeue(period(scaler.spec.retry_period_seconds))
}

/// A period from the spec; admission guarantees >= 1, but an object stored before that rule must
/// not spin the controller.
fn period(seconds: i32) -> Duration {
    Duration::from_secs(u64::try_from(seconds.max(1)).unwrap_or(1))
}
