//! The LLMScaler status, rendered from one sync's outcome. Pure: the caller writes it, and only
//! when it differs from what is stored.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::error::SyncError;
use crate::api::{
    LLMScalerStatus, MetricStatus, Recommendation, RecommendationHistory, ScaleToZeroStatus,
};
use crate::api::{ObjectiveStatus, StartupStatus};
use crate::scaling::{
    AwakeWait, Capacity, Change, Decision, DeferReason, Direction, Entry, HoldReason, Kept,
    Learned, Learnt, Lesson, LimitReason, Memory, Pause, Reason, Rising, Share, TargetState,
    ZeroMemory, ZeroReason, objective_missed, zero_phase,
};

pub const READY: &str = "Ready";
pub const SCALING_ACTIVE: &str = "ScalingActive";
pub const SCALING_LIMITED: &str = "ScalingLimited";
pub const ROLLOUT_IN_PROGRESS: &str = "RolloutInProgress";
pub const OBJECTIVE_MET: &str = "ObjectiveMet";

/// What a sync ended with.
pub enum Outcome<'a> {
    /// The target was read and a decision made (whether or not it wrote anything).
    Decided {
        decision: &'a Decision,
        target: &'a TargetState,
        /// metadata.uid of the target object read.
        target_uid: &'a str,
        wrote: bool,
        /// The start-up delay learned from the target's pods, if any.
        startup: Option<&'a StartupStatus>,
        /// The scale-to-zero timers after this sync, under scaleToZero.
        zero: Option<&'a ZeroMemory>,
        /// Consecutive syncs without a usable signal, this one included.
        syncs_without_signal: u32,
        /// What the objective stage learned, under an objective.
        objective: Option<&'a Learnt>,
    },
    /// The sync stopped before a decision, or its write was refused.
    Failed(&'a SyncError),
}

/// The JSON merge patch (RFC 7386) that turns the `stored` status into `rendered`: the rendered
/// status, plus a null for every field the stored one has and the rendered one leaves out, at any
/// depth. A merge patch only removes what it names as null; without them an optional field that
/// went away (a scale-to-zero idle timer that a new demand stopped, a history that emptied) would
/// stay in the object, be read back at the next sync as if it were still true, and make every
/// sync write the status again.
pub fn merge_patch(stored: Option<&LLMScalerStatus>, rendered: &LLMScalerStatus) -> Value {
    // A status is plain data and always serializes; were it ever not to, an empty patch changes
    // nothing, where a null would delete the whole status.
    let Ok(rendered) = serde_json::to_value(rendered) else {
        return Value::Object(serde_json::Map::new());
    };
    match stored.map(serde_json::to_value) {
        Some(Ok(stored)) => removing(&stored, rendered),
        _ => rendered,
    }
}

/// `new`, with a null for each key of `old` that `new` lacks, in objects present in both.
fn removing(old: &Value, new: Value) -> Value {
    match (old, new) {
        (Value::Object(old), Value::Object(mut new)) => {
            for (key, was) in old {
                match new.remove(key) {
                    Some(now) => {
                        new.insert(key.clone(), removing(was, now));
                    }
                    None => {
                        new.insert(key.clone(), Value::Null);
                    }
                }
            }
            Value::Object(new)
        }
        (_, new) => new,
    }
}

/// Identity of the scaler the status belongs to.
pub struct Scaler<'a> {
    pub uid: &'a str,
    pub generation: Option<i64>,
}

/// The status after this sync.
pub fn render(
    previous: Option<&LLMScalerStatus>,
    scaler: &Scaler<'_>,
    outcome: &Outcome<'_>,
    now: Timestamp,
) -> LLMScalerStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.observed_generation = scaler.generation;
    let mut set = |type_: &str, ok: bool, reason: &str, message: String| {
        set_condition(
            &mut status.conditions,
            type_,
            ok,
            reason,
            message,
            scaler.generation,
            now,
        );
    };
    match outcome {
        Outcome::Failed(error) => {
            let reason = error.reason().as_str();
            let message = crate::error_chain::render(*error);
            set(READY, false, reason, message.clone());
            set(SCALING_ACTIVE, false, reason, message);
        }
        Outcome::Decided {
            decision,
            target,
            target_uid,
            wrote,
            startup,
            zero,
            syncs_without_signal,
            objective,
        } => {
            set(
                READY,
                true,
                "Synced",
                "the last sync read the target and its signal".to_owned(),
            );
            let phase =
                zero.map(|z| zero_phase(decision, target.spec_replicas, target.ready_replicas, z));
            let (active, reason, message) = scaling_active(decision);
            set(SCALING_ACTIVE, active, reason, message);
            let (limited, reason, message) = scaling_limited(decision);
            set(SCALING_LIMITED, limited, reason, message);
            let (rolling, reason, message) = rollout(decision);
            set(ROLLOUT_IN_PROGRESS, rolling, reason, message);

            status.current_replicas = target.ready_replicas;
            status.desired_replicas = decision.desired;
            status.replicas = Some(match decision.write {
                Some(written) if *wrote => written,
                _ => target.spec_replicas,
            });
            if *wrote {
                status.last_scale_time = Some(Time(now));
            }
            status.current_metrics = metric_statuses(previous, decision, now);
            status.recommendation_history = history(scaler.uid, target_uid, &decision.memory);
            status.recurrence =
                super::recurrence::render(&decision.memory.recurring, target_uid, now)
                    .map(Box::new);
            if let Some(startup) = startup {
                status.startup = Some((*startup).clone());
            }
            status.scale_to_zero = zero.zip(phase).map(|(z, phase)| {
                Box::new(ScaleToZeroStatus {
                    phase: phase.as_str().to_owned(),
                    idle_since: z.idle_since.map(timer),
                    woke_at: z.woke_at.map(timer),
                })
            });
            status.syncs_without_signal = (*syncs_without_signal > 0)
                .then(|| i32::try_from(*syncs_without_signal).unwrap_or(i32::MAX));
            status.objective = objective.map(|l| Box::new(objective_status(l)));
            match objective {
                Some(learnt) => {
                    let (met, reason, message) = objective_met(learnt, decision, target);
                    set(OBJECTIVE_MET, met, reason, message);
                }
                None => status.conditions.retain(|c| c.type_ != OBJECTIVE_MET),
            }
        }
    }
    status
}

/// The memory stored for this scaler and target (stabilization windows and rate-policy changes);
/// entries recorded for another incarnation of either are ignored (a history without a target
/// uid predates the field and is taken as this target's). The demand samples are not stored.
pub fn stored_memory(status: Option<&LLMScalerStatus>, uid: &str, target_uid: &str) -> Memory {
    let entries = |list: &[Recommendation]| -> Vec<Entry> {
        list.iter()
            .map(|e| Entry {
                at: e.time.0,
                replicas: e.replicas,
            })
            .collect()
    };
    status
        .and_then(|s| s.recommendation_history.as_ref())
        .filter(|h| h.uid == uid)
        .filter(|h| h.target_uid.as_deref().is_none_or(|t| t == target_uid))
        .map(|h| Memory {
            down: entries(&h.entries),
            up: entries(&h.scale_up_entries),
            changes: h
                .changes
                .iter()
                .map(|c| Change {
                    at: c.time.0,
                    replicas: c.replicas,
                })
                .collect(),
            samples: Vec::new(),
            admissions: Vec::new(),
            recurring: Default::default(),
        })
        .unwrap_or_default()
}

/// A scale-to-zero timer as status stores it. A `Time` is written to the whole second, and the
/// timers are read back from status at every sync: truncated, a quiet spell would start up to a
/// second before it did and the fleet go to zero that much early. Rounded up, the idle period
/// and the time awake last at least what the spec says.
fn timer(at: Timestamp) -> Time {
    let up = k8s_openapi::jiff::TimestampRound::new()
        .smallest(k8s_openapi::jiff::Unit::Second)
        .mode(k8s_openapi::jiff::RoundMode::Ceil);
    Time(at.round(up).unwrap_or(at))
}

/// The scale-to-zero timers stored in status.
pub fn stored_zero(status: Option<&LLMScalerStatus>) -> ZeroMemory {
    status
        .and_then(|s| s.scale_to_zero.as_ref())
        .map(|z| ZeroMemory {
            idle_since: z.idle_since.as_ref().map(|t| t.0),
            woke_at: z.woke_at.as_ref().map(|t| t.0),
        })
        .unwrap_or_default()
}

/// Capacity estimates are stored to this many decimals: finer than any move of the estimate
/// (at least 3% of it, above its floor of 0.25), coarse enough to read.
const CAPACITY_DECIMALS: i32 = 3;

fn rounded(value: f64) -> f64 {
    let scale = 10f64.powi(CAPACITY_DECIMALS);
    (value * scale).round() / scale
}

/// The status form of what the objective stage learned.
pub fn objective_status(learnt: &Learnt) -> ObjectiveStatus {
    let allowed = |share: &Share| 100.0 * (1.0 - share.at_most);
    ObjectiveStatus {
        requests_per_pod: format_value(rounded(learnt.capacity.per_pod)),
        missed_at: learnt.capacity.missed_at.map(|m| format_value(rounded(m))),
        untested: learnt.capacity.untested,
        attainment: learnt
            .late
            .as_ref()
            .map(|late| format!("{:.2}", allowed(late))),
        headroom: learnt.headroom.map(|h| format!("{:.1}", 100.0 * h)),
        lesson: Some(lesson(&learnt.lesson)),
    }
}

/// The capacity learned so far, from status (none before the first lesson, or if it was
/// edited into something that is not a number: the prior then).
pub fn stored_capacity(status: Option<&LLMScalerStatus>) -> Option<Capacity> {
    let objective = status?.objective.as_ref()?;
    let per_pod = objective
        .requests_per_pod
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)?;
    let missed_at = objective
        .missed_at
        .as_deref()
        .and_then(|m| m.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0);
    Some(Capacity {
        per_pod,
        missed_at,
        untested: objective.untested,
    })
}

/// A lesson, for a person.
pub fn lesson(lesson: &Lesson) -> String {
    let n = |v: &f64| format!("{v:.2}");
    match lesson {
        Lesson::Lowered { from, to, load } => format!(
            "objective missed at {} requests running per pod: capacity lowered from {} to {}",
            n(load),
            n(from),
            n(to)
        ),
        Lesson::Raised { from, to, load } => format!(
            "objective met at {} requests running per pod: capacity raised from {} to {}",
            n(load),
            n(from),
            n(to)
        ),
        Lesson::PriorLifted { from, to, load } => format!(
            "objective met at {} requests in flight per pod, above the starting estimate: capacity lifted from {} to {}",
            n(load),
            n(from),
            n(to)
        ),
        Lesson::Probed { from, to } => format!(
            "objective met near capacity: probing from {} to {}",
            n(from),
            n(to)
        ),
        Lesson::Capped { from, to, at } => format!(
            "the load-latency curve of the last hour puts the objective's limit at {} requests running per pod: capacity lowered from {} to {}",
            n(at),
            n(from),
            n(to)
        ),
        Lesson::Kept(kept) => match kept {
            Kept::NothingMeasured => {
                "capacity kept: no latency histogram could be read or none had a request".to_owned()
            }
            Kept::TooFewRequests { requests, needed } => format!(
                "capacity kept: {} requests in the last minute, {} needed to judge the objective",
                requests.round(),
                needed.round()
            ),
            Kept::Unclear {
                at_least,
                at_most,
                allowed,
            } => format!(
                "capacity kept: between {}% and {}% of requests were late, the objective allows {}%: the histogram buckets cannot tell",
                n(&(100.0 * at_least)),
                n(&(100.0 * at_most)),
                n(&(100.0 * allowed))
            ),
            Kept::FarBelow { load } => format!(
                "capacity kept: objective met at {} requests running per pod, too far below capacity to learn from",
                n(load)
            ),
            Kept::BelowPastMiss { missed_at } => format!(
                "capacity kept: just below the {} requests per pod the objective was missed at",
                n(missed_at)
            ),
            Kept::AlreadyBelow { load } => format!(
                "capacity kept: objective missed at {} requests running per pod, and capacity is already below it",
                n(load)
            ),
            Kept::MissedUnsettled { load } => format!(
                "capacity kept: objective missed at {} requests running per pod on average while pods were starting, at a load the window cannot tell",
                n(load)
            ),
            Kept::Unsettled { load } => format!(
                "capacity kept: objective met at {} requests running per pod while pods were starting",
                n(load)
            ),
            Kept::Rising { load, now } => format!(
                "capacity kept: objective met at {} requests running per pod, but {} are in flight per pod now: the load is still rising",
                n(load),
                n(now)
            ),
        },
    }
}

/// Whether the objective held over the last minute, and when it did not, what stands in the way:
/// the capacity learned (the fleet grows to it), maxReplicas, or pods that have not started. An
/// admission rate that could not be read is said after it: the trend's hold then follows the
/// requests in flight alone.
pub(super) fn objective_met(
    learnt: &Learnt,
    decision: &Decision,
    target: &TargetState,
) -> (bool, &'static str, String) {
    let (met, reason, mut message) = judged(learnt, decision, target);
    if let Some(Err(why)) = &learnt.admitted {
        message.push_str(&format!(
            "; the requests admitted a second could not be read ({why}), so a rising count of requests in flight alone holds scale-downs"
        ));
    }
    (met, reason, message)
}

/// The condition alone, from the latency window's judgement.
fn judged(
    learnt: &Learnt,
    decision: &Decision,
    target: &TargetState,
) -> (bool, &'static str, String) {
    let capacity = format!("{:.2}", learnt.capacity.per_pod);
    let Some(late) = &learnt.late else {
        return match &learnt.unread {
            Some(why) => (
                false,
                "LatencyUnread",
                format!(
                    "the latency window could not be read ({why}); capacity stays at {capacity} requests per pod and scale-downs wait"
                ),
            ),
            None => (
                true,
                "NoRequests",
                format!(
                    "no request finished in the last minute; capacity stays at {capacity} requests per pod"
                ),
            ),
        };
    };
    let attained = format!("{:.2}", 100.0 * (1.0 - late.at_most));
    if !objective_missed(&learnt.lesson) {
        return (
            true,
            "Met",
            format!(
                "at least {attained}% of the last minute's requests met the objective; capacity {capacity} requests per pod"
            ),
        );
    }
    let at_max = decision.reasons.iter().find_map(|r| match r {
        Reason::Limited(LimitReason::ClampedToMax { recommended, max }) => {
            Some((*recommended, *max))
        }
        _ => None,
    });
    if let Some((recommended, max)) = at_max {
        return (
            false,
            "MissedAtMaxReplicas",
            format!(
                "the objective was missed (at least {attained}% of the last minute's requests in time) and the fleet is held at maxReplicas {max} where {recommended} are needed at {capacity} requests per pod: raise maxReplicas"
            ),
        );
    }
    if target.ready_replicas < target.spec_replicas {
        return (
            false,
            "MissedWhilePodsStart",
            format!(
                "the objective was missed (at least {attained}% of the last minute's requests in time) while {} of {} pods are Ready",
                target.ready_replicas, target.spec_replicas
            ),
        );
    }
    (
        false,
        "Missed",
        format!(
            "the objective was missed (at least {attained}% of the last minute's requests in time): capacity lowered to {capacity} requests per pod, and the fleet sized to it"
        ),
    )
}

/// The consecutive syncs without a usable signal stored in status.
pub fn stored_syncs_without_signal(status: Option<&LLMScalerStatus>) -> u32 {
    status
        .and_then(|s| s.syncs_without_signal)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

/// The start-up delay learned so far, from status.
pub fn stored_startup(status: Option<&LLMScalerStatus>) -> Option<Learned> {
    status.and_then(|s| s.startup.as_ref()).map(learned)
}

/// The core's form of a stored start-up delay.
pub fn learned(s: &StartupStatus) -> Learned {
    Learned {
        seconds: f64::from(s.observed_seconds),
        samples: u32::try_from(s.samples).unwrap_or(0),
    }
}

/// The status form of a learned start-up delay.
pub fn startup_status(learned: Learned, last_ready: Option<Timestamp>) -> StartupStatus {
    StartupStatus {
        observed_seconds: learned.seconds.round() as i32,
        samples: i32::try_from(learned.samples).unwrap_or(i32::MAX),
        last_ready_time: last_ready.map(Time),
    }
}

fn history(uid: &str, target_uid: &str, memory: &Memory) -> Option<RecommendationHistory> {
    let list = |entries: &[Entry]| -> Vec<Recommendation> {
        entries
            .iter()
            .map(|e| Recommendation {
                time: Time(e.at),
                replicas: e.replicas,
            })
            .collect()
    };
    let empty = memory.down.is_empty() && memory.up.is_empty() && memory.changes.is_empty();
    (!empty).then(|| RecommendationHistory {
        uid: uid.to_owned(),
        target_uid: Some(target_uid.to_owned()),
        entries: list(&memory.down),
        scale_up_entries: list(&memory.up),
        changes: memory
            .changes
            .iter()
            .map(|c| Recommendation {
                time: Time(c.at),
                replicas: c.replicas,
            })
            .collect(),
    })
}

pub(super) fn scaling_active(decision: &Decision) -> (bool, &'static str, String) {
    for reason in &decision.reasons {
        match reason {
            Reason::Held(HoldReason::Fallback { syncs, floor }) => {
                return (
                    false,
                    "FallbackActive",
                    format!(
                        "no usable signal for {syncs} consecutive syncs ({}); running at no fewer than fallback.replicas {floor} until the first good reading",
                        skipped(decision)
                    ),
                );
            }
            Reason::Zero(ZeroReason::AtZero {
                activation,
                threshold,
            }) => {
                return match activation {
                    Ok(v) => (
                        true,
                        "AtZero",
                        format!(
                            "at zero: the activation value {v} is not above the threshold {threshold}; it wakes the target when it is"
                        ),
                    ),
                    Err(why) => (
                        false,
                        "AtZero",
                        format!(
                            "at zero, and the activation query could not be read ({why}); the target stays at zero"
                        ),
                    ),
                };
            }
            Reason::Zero(ZeroReason::Waking { since }) => {
                return (
                    true,
                    "Waking",
                    format!(
                        "woken from zero at {since}; waiting for the first replica to be Ready"
                    ),
                );
            }
            Reason::Zero(ZeroReason::WentToZero { idle_seconds }) => {
                return (
                    true,
                    "AtZero",
                    format!(
                        "gone to zero: the activation value stayed at or below the threshold for {idle_seconds}s"
                    ),
                );
            }
            Reason::Held(HoldReason::NoUsableMetric) => {
                return (
                    false,
                    "NoUsableMetric",
                    format!(
                        "no metric could be measured ({}); the replica count is held",
                        skipped(decision)
                    ),
                );
            }
            Reason::Held(HoldReason::SignalUnavailable(why)) => {
                return (
                    false,
                    "SignalUnavailable",
                    format!("{why}; the replica count is held"),
                );
            }
            Reason::Held(HoldReason::Paused(pause)) => {
                let recommended = decision
                    .recommendation
                    .map_or_else(|| "nothing".to_owned(), |r| r.to_string());
                return (
                    false,
                    "Paused",
                    match pause {
                        Pause::Pinned(replicas) => format!(
                            "paused by annotation: pinned at {replicas}; the signal recommends {recommended}"
                        ),
                        Pause::Frozen => format!(
                            "paused by annotation: frozen; the signal recommends {recommended}"
                        ),
                    },
                );
            }
            _ => {}
        }
    }
    let recommended = decision.recommendation.unwrap_or_default();
    (
        true,
        "ValidMetric",
        format!("the signal recommends {recommended} replicas"),
    )
}

/// Why each metric was skipped, as "name: reason; ...", bounded so a condition stays readable.
fn skipped(decision: &Decision) -> String {
    const MAX_CHARS: usize = 512;
    let mut text = decision
        .metrics
        .iter()
        .filter_map(|m| Some(format!("{}: {}", m.name, m.recommendation.as_ref().err()?)))
        .collect::<Vec<_>>()
        .join("; ");
    if text.chars().count() > MAX_CHARS {
        text = text.chars().take(MAX_CHARS).collect::<String>() + "…";
    }
    text
}

pub(super) fn scaling_limited(decision: &Decision) -> (bool, &'static str, String) {
    for reason in &decision.reasons {
        match reason {
            Reason::Zero(ZeroReason::KeptAwake { recommended, wait }) => {
                let why = match wait {
                    AwakeWait::Active {
                        activation: Ok(v),
                        threshold,
                    } => format!("the activation value {v} is above the threshold {threshold}"),
                    AwakeWait::Active {
                        activation: Err(why),
                        ..
                    } => format!("the activation query could not be read ({why})"),
                    AwakeWait::Idle { for_seconds, of } => {
                        format!("idle for {for_seconds}s of scaleToZero.idleSeconds {of}")
                    }
                    AwakeWait::MinAwake { for_seconds, of } => {
                        format!("awake for {for_seconds}s of scaleToZero.minAwakeSeconds {of}")
                    }
                };
                return (
                    true,
                    "KeptAwake",
                    format!("{recommended} recommended; one replica stays: {why}"),
                );
            }
            Reason::Limited(LimitReason::ClampedToMax { recommended, max }) => {
                return (
                    true,
                    "TooManyReplicas",
                    format!("{recommended} recommended, capped at maxReplicas {max}"),
                );
            }
            Reason::Limited(LimitReason::ClampedToMin { recommended, min }) => {
                return (
                    true,
                    "TooFewReplicas",
                    format!("{recommended} recommended, raised to minReplicas {min}"),
                );
            }
            Reason::Limited(LimitReason::ToBounds { current, bound }) => {
                let (reason, word, field) = if bound < current {
                    ("TooManyReplicas", "lowered", "maxReplicas")
                } else {
                    ("TooFewReplicas", "raised", "minReplicas")
                };
                return (
                    true,
                    reason,
                    format!(
                        "no usable signal, but {current} replicas are outside the bounds: {word} to {field} {bound}"
                    ),
                );
            }
            _ => {}
        }
    }
    for reason in &decision.reasons {
        match reason {
            Reason::Limited(LimitReason::RateLimited {
                direction,
                desired,
                written,
                policy,
            }) => {
                let (reason, word) = match direction {
                    Direction::Up => ("ScaleUpLimit", "scale-up"),
                    Direction::Down => ("ScaleDownLimit", "scale-down"),
                };
                return (
                    true,
                    reason,
                    format!(
                        "{word} limited by policy {policy}: {written} now, on the way to {desired}"
                    ),
                );
            }
            Reason::Limited(LimitReason::Paced {
                desired,
                written,
                pace,
            }) => {
                return (
                    true,
                    "ScaleDownLimit",
                    format!(
                        "scale-down paced by the objective at {pace}, so each step's load is measured before the next: {written} now, on the way to {desired}"
                    ),
                );
            }
            Reason::Deferred(DeferReason::LoadRising(Rising { now, mean })) => {
                return (
                    true,
                    "LoadRising",
                    format!(
                        "scale-down to {} waits while the load rises: the pods carry {now:.2} requests each now, above the {mean:.2} they ran on average over the last minute",
                        decision.desired
                    ),
                );
            }
            Reason::Limited(LimitReason::DirectionDisabled { direction, desired }) => {
                let (reason, field) = match direction {
                    Direction::Up => ("ScaleUpDisabled", "scaleUp"),
                    Direction::Down => ("ScaleDownDisabled", "scaleDown"),
                };
                return (
                    true,
                    reason,
                    format!("{desired} recommended, but {field}.selectPolicy is Disabled"),
                );
            }
            _ => {}
        }
    }
    (
        false,
        "DesiredWithinRange",
        "the recommendation is within minReplicas and maxReplicas".to_owned(),
    )
}

fn rollout(decision: &Decision) -> (bool, &'static str, String) {
    for reason in &decision.reasons {
        if let Reason::Deferred(DeferReason::Rollout(why)) = reason {
            return (
                true,
                "RolloutInProgress",
                format!("scaling waits for the rollout: {why}"),
            );
        }
    }
    (
        false,
        "NoRollout",
        "the target is not mid-rollout".to_owned(),
    )
}

fn metric_statuses(
    previous: Option<&LLMScalerStatus>,
    decision: &Decision,
    now: Timestamp,
) -> Vec<MetricStatus> {
    decision
        .metrics
        .iter()
        .map(|m| {
            let value = m.value.map(format_value);
            let recommended_replicas = m.recommendation.as_ref().ok().copied();
            let error = m.recommendation.as_ref().err().map(ToString::to_string);
            // Keep the earlier timestamp when nothing about the metric changed, so an unchanged
            // reading does not rewrite the status.
            let unchanged = previous.and_then(|p| {
                p.current_metrics.iter().find(|old| {
                    old.name == m.name
                        && old.value == value
                        && old.recommended_replicas == recommended_replicas
                        && old.error == error
                })
            });
            MetricStatus {
                name: m.name.clone(),
                measured_at: unchanged
                    .and_then(|u| u.measured_at.clone())
                    .or(Some(Time(now))),
                value,
                recommended_replicas,
                error,
            }
        })
        .collect()
}

/// Shortest decimal that reads back as the same number.
pub fn format_value(value: f64) -> String {
    format!("{value}")
}

/// Sets one condition, keeping lastTransitionTime when its status did not change.
fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) {
    let status = if ok { "True" } else { "False" }.to_owned();
    let transition = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    let condition = Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: transition,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::fixture::t;

    /// A sync of target "t1" that decided `decision`, without start-up, scale-to-zero or a lost
    /// signal to report.
    fn plain<'a>(decision: &'a Decision, target: &'a TargetState, wrote: bool) -> Outcome<'a> {
        Outcome::Decided {
            decision,
            target,
            target_uid: "t1",
            wrote,
            startup: None,
            zero: None,
            syncs_without_signal: 0,
            objective: None,
        }
    }
    use crate::scaling::{
        Behavior, Bounds, Input, Memory, MetricReading, Signal, TargetType, decide,
    };

    fn decided(value: f64, spec: i32, min: i32, max: i32) -> (Decision, TargetState) {
        decided_with(value, spec, min, max, Behavior::scale_down(60, 0))
    }

    /// The decision on a `kv` reading of `value` (target 1) over `spec` settled replicas.
    fn decided_with(
        value: f64,
        spec: i32,
        min: i32,
        max: i32,
        behavior: Behavior,
    ) -> (Decision, TargetState) {
        decided_waiting(value, spec, min, max, behavior, None)
    }

    /// As [`decided_with`], with what makes a scale-down wait under an objective.
    fn decided_waiting(
        value: f64,
        spec: i32,
        min: i32,
        max: i32,
        behavior: Behavior,
        down_waits: Option<DeferReason>,
    ) -> (Decision, TargetState) {
        let target = TargetState {
            spec_replicas: spec,
            ready_replicas: spec,
            rollout: None,
        };
        let d = decide(&Input {
            signal: Signal::Ratio(vec![MetricReading {
                name: "kv".into(),
                value: Ok(value),
                target: 1.0,
                kind: TargetType::Value,
            }]),
            target: target.clone(),
            bounds: Bounds { min, max },
            behavior,
            startup_seconds: None,
            memory: Memory::default(),
            now: t(0),
            down_waits,
            admitted: None,
            down_share: None,
        });
        (d, target)
    }

    /// The status a first sync of scaler `u1` renders from `d`, written or not.
    fn first_status(d: &Decision, target: &TargetState, wrote: bool) -> LLMScalerStatus {
        let scaler = Scaler {
            uid: "u1",
            generation: Some(1),
        };
        render(None, &scaler, &plain(d, target, wrote), t(0))
    }

    fn condition<'a>(s: &'a LLMScalerStatus, type_: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn scale_to_zero_timers_read_back_from_status_never_start_early() {
        let (d, target) = decided(0.0, 1, 0, 2);
        let scaler = Scaler {
            uid: "u1",
            generation: Some(1),
        };
        // Two timers between whole seconds, one on a whole second.
        let quiet = t(10) + std::time::Duration::from_millis(300);
        let zero = ZeroMemory {
            idle_since: Some(quiet),
            woke_at: Some(t(5)),
        };
        let mut outcome = plain(&d, &target, false);
        if let Outcome::Decided { zero: stored, .. } = &mut outcome {
            *stored = Some(&zero);
        }
        let s = render(None, &scaler, &outcome, quiet);
        // As the next sync reads it: through the API server's JSON.
        let stored: LLMScalerStatus =
            serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        let back = stored_zero(Some(&stored));
        let idle = back.idle_since.unwrap();
        assert!(
            idle >= quiet && idle < quiet + std::time::Duration::from_secs(1),
            "idle since {idle}, quiet since {quiet}"
        );
        assert_eq!(back.woke_at, Some(t(5)), "a whole second stays as it is");
    }

    #[test]
    fn a_scale_up_fills_every_field() {
        let (d, target) = decided(3.0, 1, 1, 2);
        let scaler = Scaler {
            uid: "u1",
            generation: Some(4),
        };
        let s = render(None, &scaler, &plain(&d, &target, true), t(0));
        assert_eq!(
            (
                s.current_replicas,
                s.desired_replicas,
                s.replicas,
                s.observed_generation
            ),
            (1, 2, Some(2), Some(4))
        );
        // A sync that wrote nothing (a dry run, a standby) shows the count it found.
        let unwritten = render(None, &scaler, &plain(&d, &target, false), t(0));
        assert_eq!(unwritten.replicas, Some(1));
        assert_eq!(condition(&s, READY).status, "True");
        assert_eq!(condition(&s, SCALING_ACTIVE).status, "True");
        assert_eq!(condition(&s, SCALING_LIMITED).reason, "TooManyReplicas");
        assert_eq!(condition(&s, ROLLOUT_IN_PROGRESS).status, "False");
        assert_eq!(s.current_metrics[0].value.as_deref(), Some("3"));
        assert_eq!(s.last_scale_time, Some(Time(t(0))));
        assert_eq!(stored_memory(Some(&s), "u1", "t1").down.len(), 1);
        assert!(
            stored_memory(Some(&s), "another-incarnation", "t1")
                .down
                .is_empty()
        );
        assert!(
            stored_memory(Some(&s), "u1", "a-recreated-target")
                .down
                .is_empty(),
            "a recreated target does not inherit the hold"
        );
        let mut older = s.clone();
        older.recommendation_history.as_mut().unwrap().target_uid = None;
        assert_eq!(stored_memory(Some(&older), "u1", "t1").down.len(), 1);
    }

    #[test]
    fn an_identical_sync_renders_an_identical_status() {
        let (d, target) = decided(1.0, 1, 1, 5);
        let scaler = Scaler {
            uid: "u1",
            generation: Some(1),
        };
        let first = render(None, &scaler, &plain(&d, &target, false), t(0));
        let (d2, _) = decided(1.0, 1, 1, 5);
        let mut d2 = d2;
        d2.memory = d.memory.clone();
        let second = render(Some(&first), &scaler, &plain(&d2, &target, false), t(15));
        assert_eq!(first, second, "nothing changed, so nothing to write");
    }

    #[test]
    fn a_failure_keeps_the_numbers_and_flips_conditions() {
        let (d, target) = decided(2.0, 2, 1, 5);
        let scaler = Scaler {
            uid: "u1",
            generation: Some(1),
        };
        let ok = render(None, &scaler, &plain(&d, &target, false), t(0));
        let failed = render(
            Some(&ok),
            &scaler,
            &Outcome::Failed(&SyncError::TargetNotFound {
                kind: "Deployment".into(),
                name: "vllm".into(),
                namespace: "ns".into(),
            }),
            t(10),
        );
        assert_eq!(failed.current_replicas, ok.current_replicas);
        let ready = condition(&failed, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "TargetNotFound")
        );
        assert_eq!(ready.last_transition_time, Time(t(10)));
        assert_eq!(condition(&failed, SCALING_ACTIVE).status, "False");
        // A condition that kept its status keeps its transition time.
        assert_eq!(
            condition(&failed, SCALING_LIMITED).last_transition_time,
            Time(t(0))
        );
    }

    #[test]
    fn a_rate_limited_step_names_its_policy_and_the_learned_delay_is_kept() {
        let mut behavior = Behavior::unlimited();
        behavior.up.policies = vec![crate::scaling::RatePolicy {
            kind: crate::scaling::PolicyKind::Pods,
            value: 4,
            period_seconds: 60,
        }];
        let (d, target) = decided_with(5.0, 4, 1, 40, behavior);
        let startup = StartupStatus {
            observed_seconds: 180,
            samples: 3,
            last_ready_time: Some(Time(t(-5))),
        };
        let s = render(
            None,
            &Scaler {
                uid: "u1",
                generation: Some(1),
            },
            &Outcome::Decided {
                startup: Some(&startup),
                zero: None,
                syncs_without_signal: 0,
                decision: &d,
                target: &target,
                target_uid: "t1",
                wrote: true,
                objective: None,
            },
            t(0),
        );
        let limited = condition(&s, SCALING_LIMITED);
        assert_eq!(
            (limited.status.as_str(), limited.reason.as_str()),
            ("True", "ScaleUpLimit")
        );
        assert_eq!(
            limited.message,
            "scale-up limited by policy Pods 4/60s: 8 now, on the way to 20"
        );
        assert_eq!(s.startup.as_ref(), Some(&startup));
        // The change is remembered for the policy's period.
        assert_eq!(stored_memory(Some(&s), "u1", "t1").changes.len(), 1);
        assert_eq!(stored_startup(Some(&s)).map(|l| l.seconds), Some(180.0));
    }

    #[test]
    fn a_paced_scale_down_says_the_objective_paced_it() {
        let mut behavior = Behavior::unlimited();
        behavior.down_pace = Some(crate::scaling::DOWN_PACE);
        let (d, target) = decided_with(0.25, 40, 1, 40, behavior);
        let s = first_status(&d, &target, true);
        let limited = condition(&s, SCALING_LIMITED);
        assert_eq!(
            (limited.status.as_str(), limited.reason.as_str()),
            ("True", "ScaleDownLimit")
        );
        assert_eq!(
            limited.message,
            "scale-down paced by the objective at Percent 25%/60s, so each step's load is measured before the next: 30 now, on the way to 10"
        );
        // The step is remembered for the pace's minute.
        assert_eq!(stored_memory(Some(&s), "u1", "t1").changes.len(), 1);
    }

    #[test]
    fn a_scale_down_that_waits_for_a_rising_load_says_so() {
        let rising = Rising {
            now: 12.5,
            mean: 10.0,
        };
        let waits = Some(DeferReason::LoadRising(rising));
        let (d, target) = decided_waiting(0.25, 40, 1, 40, Behavior::unlimited(), waits);
        assert_eq!((d.desired, d.write), (10, None));
        let s = first_status(&d, &target, false);
        let limited = condition(&s, SCALING_LIMITED);
        assert_eq!(
            (limited.status.as_str(), limited.reason.as_str()),
            ("True", "LoadRising")
        );
        assert_eq!(
            limited.message,
            "scale-down to 10 waits while the load rises: the pods carry 12.50 requests each now, above the 10.00 they ran on average over the last minute"
        );
    }

    /// RFC 7386 applied, as the API server applies a status merge patch.
    fn apply(target: &Value, patch: &Value) -> Value {
        let Value::Object(patch) = patch else {
            return patch.clone();
        };
        let mut out = match target {
            Value::Object(o) => o.clone(),
            _ => serde_json::Map::new(),
        };
        for (key, value) in patch {
            if value.is_null() {
                out.remove(key);
            } else {
                let merged = apply(out.get(key).unwrap_or(&Value::Null), value);
                out.insert(key.clone(), merged);
            }
        }
        Value::Object(out)
    }

    #[test]
    fn the_status_patch_removes_what_went_away_at_any_depth() {
        let entry = |at: i64| Recommendation {
            time: Time(t(at)),
            replicas: 3,
        };
        let stored = LLMScalerStatus {
            current_replicas: 2,
            desired_replicas: 3,
            last_scale_time: Some(Time(t(0))),
            scale_to_zero: Some(Box::new(ScaleToZeroStatus {
                phase: "Awake".into(),
                idle_since: Some(Time(t(10))),
                woke_at: Some(Time(t(5))),
            })),
            recommendation_history: Some(RecommendationHistory {
                uid: "u1".into(),
                target_uid: Some("t1".into()),
                entries: vec![entry(1)],
                scale_up_entries: vec![entry(2)],
                changes: vec![entry(3)],
            }),
            syncs_without_signal: Some(2),
            ..LLMScalerStatus::default()
        };
        let rendered = LLMScalerStatus {
            current_replicas: 3,
            scale_to_zero: Some(Box::new(ScaleToZeroStatus {
                phase: "Awake".into(),
                idle_since: None,
                woke_at: Some(Time(t(5))),
            })),
            recommendation_history: Some(RecommendationHistory {
                scale_up_entries: Vec::new(),
                changes: Vec::new(),
                ..stored.recommendation_history.clone().unwrap()
            }),
            syncs_without_signal: None,
            ..stored.clone()
        };
        let patch = merge_patch(Some(&stored), &rendered);
        assert_eq!(patch["scaleToZero"]["idleSince"], Value::Null);
        assert!(patch["scaleToZero"].get("idleSince").is_some(), "{patch}");
        let applied = apply(&serde_json::to_value(&stored).unwrap(), &patch);
        assert_eq!(
            serde_json::from_value::<LLMScalerStatus>(applied).unwrap(),
            rendered
        );
        // Without a stored status the patch is the rendered status itself.
        assert_eq!(
            merge_patch(None, &rendered),
            serde_json::to_value(&rendered).unwrap()
        );
        // And a patch from a status to itself names nothing to remove.
        assert_eq!(
            merge_patch(Some(&rendered), &rendered),
            serde_json::to_value(&rendered).unwrap()
        );
    }

    #[test]
    fn a_pass_on_a_rising_load_says_so_with_both_loads() {
        let said = lesson(&Lesson::Kept(Kept::Rising {
            load: 36.0,
            now: 46.5,
        }));
        assert_eq!(
            said,
            "capacity kept: objective met at 36.00 requests running per pod, but 46.50 are in flight per pod now: the load is still rising"
        );
    }
}
