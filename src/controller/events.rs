//! Kubernetes events (events.k8s.io) for every scale and every held sync, rendered from the
//! sync's Decision. The event writer folds repeats into one event with a growing count.

use super::event_writer::{EventWriter, Told};
use super::memory::Memories;

use crate::api::{LLMScaler, MetricProvider};
use crate::names::DECISION_METRIC;
use crate::scaling::{
    Decision, DeferReason, Direction, HoldReason, Lesson, LimitReason, Pause, PlanReason, Reason,
    SPARE_SHARE, TargetState, ZeroReason,
};

/// The reason of the event that says pods still starting were counted as capacity.
pub const STARTING_COUNTED: &str = "StartingCounted";
/// The reasons of the events that say a stabilization window holds the fleet.
pub const SCALE_DOWN_STABILIZED: &str = "ScaleDownStabilized";
pub const SCALE_UP_STABILIZED: &str = "ScaleUpStabilized";
/// The reason of the event that says the scaler is paused by annotation.
pub const PAUSED: &str = "Paused";
/// The reason of the event that says the fallback count applies.
pub const FALLBACK_ACTIVE: &str = "FallbackActive";
/// The reason of the event that says a scale-down waits because the demand is rising.
pub const RISING_DEMAND: &str = "RisingDemand";
/// The reason of the event that says a scale-down waits because the pods carry more requests
/// now than over the last minute (under an objective).
pub const LOAD_RISING: &str = "LoadRising";
/// The reason of the event that says the rise remembered for this time of the period holds the
/// fleet (spec.recurrence).
pub const RECURRING_DEMAND: &str = "RecurringDemand";

/// The states that last many syncs: each is told when it begins and when it changes, not at
/// every sync (a repeat would patch the event's series, an API write with nothing new).
///
/// A broken signal is such a state too: its warnings (one per skipped metric, and the hold)
/// are told together when the breakage begins and when what they say changes, not at every
/// sync of an outage.
pub const LASTING: [&str; 12] = [
    LATENCY_UNREAD,
    LOAD_RISING,
    OBJECTIVE_MISSED,
    SCALE_DOWN_STABILIZED,
    SCALE_UP_STABILIZED,
    RISING_DEMAND,
    RECURRING_DEMAND,
    FALLBACK_ACTIVE,
    PAUSED,
    CONFLICTING_AUTOSCALER,
    METRIC_SKIPPED,
    SCALING_HELD,
];

pub const METRIC_SKIPPED: &str = "MetricSkipped";
/// A scale-down waits for an objective's latency histograms.
pub const LATENCY_UNREAD: &str = "LatencyUnread";
/// An objective is missed for want of pods: at maxReplicas, or pods that do not start.
pub const OBJECTIVE_MISSED: &str = "ObjectiveMissed";
pub const SCALING_HELD: &str = "ScalingHeld";
/// The starting estimate was lifted, by as much as one lift goes, far below what the pods carry
/// in time: the fleet runs larger than it needs while the rest is learned.
pub const STARTING_ESTIMATE_LOW: &str = "StartingEstimateLow";

/// The reason of the warning that says another autoscaler drives the target.
pub const CONFLICTING_AUTOSCALER: &str = "ConflictingAutoscaler";

/// One event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Note {
    fn normal(reason: &'static str, message: String) -> Self {
        Self {
            warning: false,
            reason,
            message,
        }
    }

    fn warning(reason: &'static str, message: String) -> Self {
        Self {
            warning: true,
            reason,
            message,
        }
    }
}

/// The events of a sync that reached a decision.
/// Under `dry_run` nothing was written, and the scale events say what would have happened.
pub fn decision_notes(
    scaler: &LLMScaler,
    decision: &Decision,
    target: &TargetState,
    dry_run: bool,
) -> Vec<Note> {
    let target_name = format!(
        "{}/{}",
        scaler.spec.target_ref.kind, scaler.spec.target_ref.name
    );
    let mut notes = Vec::new();
    // At zero a per-pod metric has nothing to measure: that is the expected state, not news.
    let at_zero = decision.reasons.iter().any(|r| {
        matches!(
            r,
            Reason::Zero(ZeroReason::AtZero { .. } | ZeroReason::Waking { .. })
        )
    });

    if scaler.spec.metric_provider == MetricProvider::Prometheus && !at_zero {
        let queries = scaler.spec.metrics.as_deref().unwrap_or_default();
        for (metric, spec) in decision.metrics.iter().zip(queries) {
            if let Err(why) = &metric.recommendation {
                notes.push(Note::warning(
                    METRIC_SKIPPED,
                    format!(
                        "metric {} skipped this sync: {why} (query: {})",
                        metric.name, spec.query
                    ),
                ));
            }
        }
    }

    if let Some(written) = decision.write {
        let verb = if dry_run { "would scale" } else { "scaled" };
        let mut message = format!(
            "{verb} {target_name} from {} to {written}",
            target.spec_replicas
        );
        if let Some(driver) = zero_or_fallback(decision).or_else(|| driver(decision)) {
            message.push_str(&format!(" ({driver})"));
        }
        if let Some(expected) = looked_ahead(decision) {
            message.push_str(&format!("; {expected}"));
        }
        if written != decision.desired {
            message.push_str(&format!(", on the way to {}", decision.desired));
            if let Some(policy) = rate_limit(decision) {
                message.push_str(&format!(" ({policy})"));
            }
        }
        if dry_run {
            message.push_str(" (dry run: nothing written)");
        }
        let reason = match (written > target.spec_replicas, dry_run) {
            (true, false) => "ScaledUp",
            (false, false) => "ScaledDown",
            (true, true) => "WouldScaleUp",
            (false, true) => "WouldScaleDown",
        };
        notes.push(Note::normal(reason, message));
    }

    for reason in &decision.reasons {
        let note = match reason {
            // Without the count of syncs, which grows: told when the fallback begins.
            Reason::Held(HoldReason::Fallback { floor, .. }) => Note::warning(
                FALLBACK_ACTIVE,
                format!(
                    "no usable signal for fallback.failureThreshold consecutive syncs: {target_name} runs at no fewer than {floor} (fallback.replicas) until the first good reading"
                ),
            ),
            Reason::Held(HoldReason::NoUsableMetric) => Note::warning(
                SCALING_HELD,
                format!(
                    "no metric could be measured; {target_name} stays at {}",
                    target.spec_replicas
                ),
            ),
            // Without the recommendation, which moves with the signal: the event is told when
            // the pause begins or changes, and the ScalingActive condition says what the signal
            // would do.
            Reason::Held(HoldReason::Paused(pause)) => Note::normal(
                PAUSED,
                paused_text(*pause, &target_name, target.spec_replicas),
            ),
            Reason::Held(HoldReason::SignalUnavailable(why)) => Note::warning(
                SCALING_HELD,
                format!("{why}; {target_name} stays at {}", target.spec_replicas),
            ),
            Reason::Deferred(DeferReason::Rollout(why)) => Note::normal(
                "ScalingDeferred",
                format!(
                    "{target_name} is mid-rollout ({why}); scaling to {} waits",
                    decision.desired
                ),
            ),
            Reason::Deferred(DeferReason::NotSettled { ready, spec }) => Note::normal(
                "ScalingDeferred",
                format!(
                    "scale-down to {} waits until all {spec} replicas are ready ({ready} are)",
                    decision.desired
                ),
            ),
            Reason::Deferred(DeferReason::LatencyUnread(why)) => Note::warning(
                LATENCY_UNREAD,
                format!(
                    "scale-down to {} waits until the objective's latency histograms can be read: {why}",
                    decision.desired
                ),
            ),
            // Without the loads, which move at every sync: told when the wait begins.
            Reason::Deferred(DeferReason::LoadRising(_)) => Note::normal(
                LOAD_RISING,
                format!(
                    "scale-down to {} waits while the load rises: the pods carry more requests now than over the last minute",
                    decision.desired
                ),
            ),
            Reason::Limited(LimitReason::Stabilized {
                direction: Direction::Down,
                recommended,
                held_at,
                window_seconds,
            }) if decision.write.is_none() => Note::normal(
                SCALE_DOWN_STABILIZED,
                format!(
                    "{recommended} recommended; held at {held_at}, the highest recommendation of the last {window_seconds}s"
                ),
            ),
            Reason::Limited(LimitReason::Stabilized {
                direction: Direction::Up,
                recommended,
                held_at,
                window_seconds,
            }) if decision.write.is_none() => Note::normal(
                SCALE_UP_STABILIZED,
                format!(
                    "{recommended} recommended; held at {held_at}, the lowest recommendation of the last {window_seconds}s"
                ),
            ),
            Reason::Planned(PlanReason::RisingDemand { measured, kept }) => Note::normal(
                RISING_DEMAND,
                format!(
                    "demand is rising: the scale-down to {measured} waits, {target_name} stays at {kept}"
                ),
            ),
            Reason::Planned(PlanReason::Recurring {
                measured, expected, ..
            }) if decision.write.is_none() => Note::normal(
                RECURRING_DEMAND,
                format!(
                    "the rise remembered for this time of the period holds {target_name} at {expected} ({measured} measured)"
                ),
            ),
            Reason::Planned(PlanReason::StartingCounted { starting }) => Note::normal(
                STARTING_COUNTED,
                format!(
                    "{starting} {} starting counted as capacity: {target_name} stays at {}",
                    if *starting == 1 { "pod" } else { "pods" },
                    target.spec_replicas
                ),
            ),
            _ => continue,
        };
        notes.push(note);
    }
    notes
}

/// What the spec asks for and the operator does not do, told once per scaler (the caller keeps
/// the count).
pub fn spec_notices(scaler: &LLMScaler) -> Vec<Note> {
    let spec = &scaler.spec;
    let mut notes = Vec::new();
    if spec.metric_provider == MetricProvider::Custom
        && spec.scale_down.deletion_cost_query.is_some()
    {
        notes.push(Note::normal(
            "DeletionCostQueryIgnored",
            "scaleDown.deletionCostQuery is PromQL and is ignored under the Custom provider; the newest pods are removed first".to_owned(),
        ));
    }
    if spec.preemption.is_some() {
        notes.push(Note::normal(
            "PreemptionIgnored",
            "spec.preemption is accepted but has no effect yet".to_owned(),
        ));
    }
    notes
}

/// "paused by annotation: Deployment/vllm pinned at 4" or "... frozen at 3".
pub fn paused_text(pause: Pause, target_name: &str, spec_replicas: i32) -> String {
    match pause {
        Pause::Pinned(replicas) => {
            format!("paused by annotation: {target_name} pinned at {replicas}")
        }
        Pause::Frozen => format!("paused by annotation: {target_name} frozen at {spec_replicas}"),
    }
}

/// "sized at 12 for the demand expected in 180s (9 measured)" when the look-ahead raised a
/// scale-up; why a scale-down stopped above what was measured after a miss (a share of each
/// pod's capacity kept spare, or requests that run longer once the pods are full).
fn looked_ahead(decision: &Decision) -> Option<String> {
    decision.reasons.iter().find_map(|r| match r {
        Reason::Planned(PlanReason::SpareKept { measured, kept }) => Some(format!(
            "sized at {kept} to keep {:.0}% of each pod's learned capacity spare after a missed objective ({measured} measured)",
            (1.0 - SPARE_SHARE) * 100.0
        )),
        Reason::Planned(PlanReason::LongerAtCapacity {
            measured,
            kept,
            percent,
        }) => Some(format!(
            "sized at {kept} because a request runs {} longer with each pod at its learned capacity than now, after a missed objective ({measured} measured)",
            // A ratio just above 1 still rounds a count up, and "0% longer" would read as none.
            if *percent < 1 {
                "less than 1%".to_string()
            } else {
                format!("{percent}%")
            }
        )),
        Reason::Planned(PlanReason::LookedAhead {
            measured,
            expected,
            horizon_seconds,
        }) => Some(format!(
            "sized at {expected} for the demand expected in {horizon_seconds}s ({measured} measured)"
        )),
        Reason::Planned(PlanReason::Recurring {
            measured,
            expected,
            horizon_seconds,
        }) => Some(format!(
            "sized at {expected} for the rise the periods before saw from now to {horizon_seconds}s ahead ({measured} measured)"
        )),
        _ => None,
    })
}

/// "scale-up limited by policy Pods 4/60s" when a rate policy cut this step short.
fn rate_limit(decision: &Decision) -> Option<String> {
    decision.reasons.iter().find_map(|r| match r {
        Reason::Limited(LimitReason::RateLimited {
            direction, policy, ..
        }) => Some(format!(
            "{} limited by policy {policy}",
            match direction {
                Direction::Up => "scale-up",
                Direction::Down => "scale-down",
            }
        )),
        Reason::Limited(LimitReason::Paced { pace, .. }) => Some(format!(
            "scale-down paced by the objective at {pace}, so each step's load is measured before the next"
        )),
        _ => None,
    })
}

/// "woken from zero: activation 2.5 is above the threshold 0", "idle for 300s", "fallback: ..."
/// when scale-to-zero or the fallback made the write.
fn zero_or_fallback(decision: &Decision) -> Option<String> {
    decision.reasons.iter().find_map(|r| match r {
        Reason::Zero(ZeroReason::Woke {
            activation,
            threshold,
        }) => Some(match activation {
            Ok(v) if v > threshold => {
                format!("woken from zero: activation {v} is above the threshold {threshold}")
            }
            _ => "woken from zero by the metrics' own recommendation".to_owned(),
        }),
        Reason::Zero(ZeroReason::WentToZero { idle_seconds }) => Some(format!(
            "to zero: no demand above the activation threshold for {idle_seconds}s"
        )),
        Reason::Held(HoldReason::Fallback { syncs, .. }) => Some(format!(
            "fallback: no usable signal for {syncs} consecutive syncs"
        )),
        Reason::Limited(LimitReason::ToBounds { current, bound }) => Some(if bound < current {
            format!("no usable signal, but maxReplicas is {bound}")
        } else {
            format!("no usable signal, but minReplicas is {bound}")
        }),
        _ => None,
    })
}

/// "kv-cache recommended 4" for the metric with the largest recommendation.
fn driver(decision: &Decision) -> Option<String> {
    decision
        .metrics
        .iter()
        .filter_map(|m| m.recommendation.as_ref().ok().map(|r| (r, m)))
        .max_by_key(|(r, _)| **r)
        .map(|(r, m)| match m.value {
            _ if m.name == DECISION_METRIC => format!("the decision server asked for {r}"),
            Some(v) => format!("metric {} = {v} recommended {r}", m.name),
            None => format!("metric {} recommended {r}", m.name),
        })
}

/// Publishes `notes` against the scaler; a failure to publish is logged, never fatal.
pub async fn publish(writer: &EventWriter, memory: &Memories, scaler: &LLMScaler, notes: &[Note]) {
    for note in notes {
        let told = Told {
            warning: note.warning,
            reason: note.reason,
            action: action(note),
            note: truncate(&note.message, 1000),
        };
        if let Err(error) = writer.tell(memory, scaler, &told).await {
            tracing::warn!(reason = note.reason, error = %crate::error_chain::Chain(&error), "cannot publish event");
        }
    }
}

/// The writer folds events that share type, reason and action into one series and never
/// updates the note, so a new message under the same reason would be lost. The action therefore
/// carries a digest of the message: a repeat of the same message is counted, a different one is
/// its own event.
fn action(note: &Note) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    note.message.hash(&mut hasher);
    format!("Sync-{:016x}", hasher.finish())
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The warning for an objective missed for want of pods (`reason` is the ObjectiveMet
/// condition's), told when it begins and when it changes; none for a miss the fleet can still
/// grow out of.
pub fn objective_missed(reason: &str, target: &TargetState, max: i32) -> Option<Note> {
    let message = match reason {
        "MissedAtMaxReplicas" => format!(
            "the latency objective is missed and the fleet is at maxReplicas {max}: raise maxReplicas"
        ),
        "MissedWhilePodsStart" => format!(
            "the latency objective is missed while {} of {} pods are Ready",
            target.ready_replicas, target.spec_replicas
        ),
        _ => return None,
    };
    Some(Note::warning(OBJECTIVE_MISSED, message))
}

/// The pods must carry this many times the lifted estimate in time for the start to be worth a
/// word: the fleet then runs at least twice the pods it needs until the estimate has climbed.
const FAR_ABOVE_THE_START: f64 = 2.0;

/// The note for a starting estimate lifted short of the load the pods met the objective at
/// (by [`FAR_ABOVE_THE_START`] or more): told once, with the lift, so that a fleet that grows
/// while its objective holds says why and which field sets the start. The lift goes only part of
/// the way by design (the rest of the climb is the margin a low start keeps for rises), so it is
/// news, not a warning.
pub fn starting_estimate_low(lesson: &Lesson) -> Option<Note> {
    let Lesson::PriorLifted { from, to, load } = lesson else {
        return None;
    };
    if load.is_nan() || *load < FAR_ABOVE_THE_START * to {
        return None;
    }
    Some(Note::normal(
        STARTING_ESTIMATE_LOW,
        format!(
            "the pods met the objective at {load:.2} requests in flight each, {:.1}× the starting \
             estimate of {from:.2}: it is lifted only to {to:.2} and learned up from there, so the \
             fleet runs larger than it needs meanwhile; objective.initialRequestsPerPod sets the \
             start (one near what the pods carry keeps no margin for a sudden rise)",
            load / from
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::{
        Behavior, Bounds, Input, Memory, MetricReading, Signal, SkipReason, TargetType, decide,
    };
    use k8s_openapi::jiff::Timestamp;

    fn scaler() -> LLMScaler {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
            "metadata": { "name": "s", "namespace": "ns" },
            "spec": {
                "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm" },
                "serverAddress": "http://prom:9090",
                "serverHeaders": { "Authorization": "Bearer hunter2" },
                "minReplicas": 1, "maxReplicas": 10,
                "metrics": [
                    { "name": "kv", "query": "avg(kv)", "target": "0.5" },
                    { "name": "p99", "query": "histogram_quantile(0.99, x)", "target": "2" }
                ],
                "scaleDown": { "maxStepReplicas": 2 }
            }
        }))
        .unwrap()
    }

    fn run(kv: f64, spec_replicas: i32) -> (Decision, TargetState) {
        run_with(kv, spec_replicas, Behavior::scale_down(0, 2))
    }

    fn run_with(kv: f64, spec_replicas: i32, behavior: Behavior) -> (Decision, TargetState) {
        run_waiting(kv, spec_replicas, behavior, None)
    }

    /// As [`run_with`], with what makes a scale-down wait under an objective.
    fn run_waiting(
        kv: f64,
        spec_replicas: i32,
        behavior: Behavior,
        down_waits: Option<DeferReason>,
    ) -> (Decision, TargetState) {
        let target = TargetState {
            spec_replicas,
            ready_replicas: spec_replicas,
            rollout: None,
        };
        let decision = decide(&Input {
            signal: Signal::Ratio(vec![
                MetricReading {
                    name: "kv".into(),
                    value: Ok(kv),
                    target: 0.5,
                    kind: TargetType::Value,
                },
                MetricReading {
                    name: "p99".into(),
                    value: Err(SkipReason::Unavailable(crate::scaling::Unreadable::new(
                        std::io::Error::other("the query returned no series (an empty vector)"),
                    ))),
                    target: 2.0,
                    kind: TargetType::Value,
                },
            ]),
            target: target.clone(),
            bounds: Bounds { min: 1, max: 10 },
            behavior,
            startup_seconds: None,
            memory: Memory::default(),
            now: Timestamp::UNIX_EPOCH,
            down_waits,
            admitted: None,
            down_share: None,
        });
        (decision, target)
    }

    #[test]
    fn a_scale_up_names_the_driving_metric_and_skips_carry_the_query() {
        let (d, t) = run(1.0, 2);
        let notes = decision_notes(&scaler(), &d, &t, false);
        assert_eq!(notes[0].reason, "MetricSkipped");
        assert!(notes[0].warning);
        assert_eq!(
            notes[0].message,
            "metric p99 skipped this sync: the query returned no series (an empty vector) (query: histogram_quantile(0.99, x))"
        );
        assert_eq!(notes[1].reason, "ScaledUp");
        assert_eq!(
            notes[1].message,
            "scaled Deployment/vllm from 2 to 4 (metric kv = 1 recommended 4)"
        );
        assert!(notes.iter().all(|n| !n.message.contains("hunter2")));
    }

    #[test]
    fn a_capped_scale_down_says_where_it_is_going() {
        let (d, t) = run(0.0, 8);
        let notes = decision_notes(&scaler(), &d, &t, false);
        let down = notes.iter().find(|n| n.reason == "ScaledDown").unwrap();
        assert_eq!(
            down.message,
            "scaled Deployment/vllm from 8 to 6 (metric kv = 0 recommended 0), on the way to 1"
        );
    }

    #[test]
    fn a_paced_scale_down_says_the_objective_paced_it() {
        let mut behavior = Behavior::scale_down(0, 0);
        behavior.down_pace = Some(crate::scaling::DOWN_PACE);
        let (d, t) = run_with(0.0, 8, behavior);
        let notes = decision_notes(&scaler(), &d, &t, false);
        let down = notes.iter().find(|n| n.reason == "ScaledDown").unwrap();
        assert_eq!(
            down.message,
            "scaled Deployment/vllm from 8 to 6 (metric kv = 0 recommended 0), on the way to 1 (scale-down paced by the objective at Percent 25%/60s, so each step's load is measured before the next)"
        );
    }

    #[test]
    fn a_scale_down_that_waits_for_a_rising_load_says_so_without_the_loads() {
        let rising = crate::scaling::Rising {
            now: 12.5,
            mean: 10.0,
        };
        let waits = Some(DeferReason::LoadRising(rising));
        let (d, t) = run_waiting(0.0, 8, Behavior::scale_down(0, 0), waits);
        assert_eq!(d.write, None);
        let notes = decision_notes(&scaler(), &d, &t, false);
        let wait = notes.iter().find(|n| n.reason == LOAD_RISING).unwrap();
        assert!(!wait.warning);
        // The loads move at every sync; the note does not, so it is told when the wait begins.
        assert_eq!(
            wait.message,
            "scale-down to 1 waits while the load rises: the pods carry more requests now than over the last minute"
        );
        assert!(LASTING.contains(&LOAD_RISING));
    }

    /// A fleet of `replicas`, every one Ready.
    fn settled(replicas: i32) -> TargetState {
        TargetState {
            spec_replicas: replicas,
            ready_replicas: replicas,
            rollout: None,
        }
    }

    /// A decision that writes `to` for `reason`.
    fn writing(to: i32, reason: Reason) -> Decision {
        Decision {
            recommendation: Some(to),
            desired: to,
            write: Some(to),
            reasons: vec![reason],
            metrics: Vec::new(),
            memory: Memory::default(),
        }
    }

    #[test]
    fn a_scale_down_that_keeps_spare_after_a_miss_says_so() {
        let spare = Reason::Planned(PlanReason::SpareKept {
            measured: 12,
            kept: 14,
        });
        let notes = decision_notes(&scaler(), &writing(14, spare), &settled(20), false);
        assert_eq!(
            notes[0].message,
            "scaled Deployment/vllm from 20 to 14; sized at 14 to keep 10% of each pod's learned capacity spare after a missed objective (12 measured)"
        );
    }

    #[test]
    fn a_scale_down_sized_for_longer_requests_after_a_miss_says_by_how_much() {
        let longer = Reason::Planned(PlanReason::LongerAtCapacity {
            measured: 12,
            kept: 15,
            percent: 22,
        });
        let notes = decision_notes(&scaler(), &writing(15, longer), &settled(20), false);
        assert_eq!(
            notes[0].message,
            "scaled Deployment/vllm from 20 to 15; sized at 15 because a request runs 22% longer with each pod at its learned capacity than now, after a missed objective (12 measured)"
        );
        // A ratio just above one, which still rounded the count up, is not said as none.
        let barely = Reason::Planned(PlanReason::LongerAtCapacity {
            measured: 12,
            kept: 13,
            percent: 0,
        });
        let notes = decision_notes(&scaler(), &writing(13, barely), &settled(20), false);
        assert!(
            notes[0].message.contains("runs less than 1% longer"),
            "{}",
            notes[0].message
        );
    }

    #[test]
    fn a_remembered_rise_says_what_it_sized_for_and_what_it_holds() {
        let recurring = Reason::Planned(PlanReason::Recurring {
            measured: 10,
            expected: 40,
            horizon_seconds: 300,
        });
        let up = writing(40, recurring);
        let notes = decision_notes(&scaler(), &up, &settled(10), false);
        assert_eq!(
            notes[0].message,
            "scaled Deployment/vllm from 10 to 40; sized at 40 for the rise the periods before saw from now to 300s ahead (10 measured)"
        );
        let held = Decision { write: None, ..up };
        let notes = decision_notes(&scaler(), &held, &settled(40), false);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, RECURRING_DEMAND);
        assert_eq!(
            notes[0].message,
            "the rise remembered for this time of the period holds Deployment/vllm at 40 (10 measured)"
        );
    }

    #[test]
    fn repeats_share_an_action_and_new_messages_do_not() {
        let a = Note::warning("ScalingHeld", "server down".into());
        let b = Note::warning("ScalingHeld", "bad JSON".into());
        assert_eq!(action(&a), action(&a.clone()));
        assert_ne!(action(&a), action(&b));
        assert!(action(&a).len() <= 128);
    }

    #[test]
    fn a_start_far_below_what_the_pods_carry_is_told_and_a_near_one_is_not() {
        let far = Lesson::PriorLifted {
            from: 4.0,
            to: 6.0,
            load: 31.37,
        };
        let note = starting_estimate_low(&far).expect("told");
        assert!(!note.warning);
        assert_eq!(note.reason, STARTING_ESTIMATE_LOW);
        assert!(
            note.message
                .contains("31.37 requests in flight each, 7.8× the starting estimate of 4.00")
                && note.message.contains("lifted only to 6.00")
                && note.message.contains("objective.initialRequestsPerPod"),
            "{}",
            note.message
        );
        // Lifted to 6 at 7 per pod: the fleet is about right, nothing to say.
        let near = Lesson::PriorLifted {
            from: 4.0,
            to: 6.0,
            load: 7.0,
        };
        assert_eq!(starting_estimate_low(&near), None);
        let raised = Lesson::Raised {
            from: 4.0,
            to: 4.2,
            load: 40.0,
        };
        assert_eq!(
            starting_estimate_low(&raised),
            None,
            "only the lift tells it"
        );
    }

    #[test]
    fn truncates_on_a_char_boundary() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("ééé", 3), "é…");
    }
}
