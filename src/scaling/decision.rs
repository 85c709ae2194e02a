//! One sync's decision: from readings and the target's state to the replica count to write.

use k8s_openapi::jiff::Timestamp;

use super::behavior::{self, Behavior, Change};
use super::forecast::{self, Sample};
use super::recommend::{SkipReason, metric_need, round_up};
use super::recurring;
use super::stabilization::{Entry, Hold, record, stabilized};
use super::step::cap_scale_down;
use super::types::{
    Decision, DeferReason, Direction, DownShare, HoldReason, Input, LimitReason, Memory,
    MetricOutcome, PlanReason, Reason, Rising, Signal,
};
use super::unreadable::{NegativeCount, Unreadable};

/// The name under which an absolute decision appears among the metrics (status, cache, events).
use crate::names::DECISION_METRIC;

/// The demand of this sync in replicas: the largest per-metric need, each metric's outcome, and
/// whether it came from the ratio (looked ahead and toleranced) or is an absolute count.
struct Measured {
    need: Option<f64>,
    /// Under one ratio metric, its per-replica target: the need times it is the metric's total
    /// load, which the recurrence remembers (so a capacity learned mid-rise does not read as a
    /// change of load).
    per_replica: Option<f64>,
    ratio: bool,
    metrics: Vec<MetricOutcome>,
    hold: Option<HoldReason>,
}

fn measure(signal: &Signal, ready: i32) -> Measured {
    match signal {
        Signal::Ratio(readings) => {
            let needs: Vec<Result<f64, SkipReason>> = readings
                .iter()
                .map(|r| {
                    r.value
                        .clone()
                        .and_then(|v| metric_need(r.kind, ready, v, r.target))
                })
                .collect();
            let metrics = readings
                .iter()
                .zip(&needs)
                .map(|(r, need)| MetricOutcome {
                    name: r.name.clone(),
                    value: r.value.as_ref().ok().copied(),
                    recommendation: need.clone().map(round_up),
                })
                .collect();
            let need = needs
                .iter()
                .filter_map(|n| n.as_ref().ok().copied())
                .reduce(f64::max);
            let per_replica = match readings.as_slice() {
                [one] if one.target.is_finite() && one.target > 0.0 => Some(one.target),
                _ => None,
            };
            Measured {
                need,
                per_replica,
                ratio: true,
                metrics,
                hold: need.is_none().then_some(HoldReason::NoUsableMetric),
            }
        }
        Signal::Absolute(Ok(count)) if *count >= 0 => Measured {
            need: Some(f64::from(*count)),
            per_replica: None,
            ratio: false,
            metrics: vec![MetricOutcome {
                name: DECISION_METRIC.to_owned(),
                value: Some(f64::from(*count)),
                recommendation: Ok(*count),
            }],
            hold: None,
        },
        Signal::Absolute(result) => {
            let why = match result {
                Ok(count) => Unreadable::new(NegativeCount(*count)),
                Err(why) => why.clone(),
            };
            Measured {
                need: None,
                per_replica: None,
                ratio: false,
                metrics: vec![MetricOutcome {
                    name: DECISION_METRIC.to_owned(),
                    value: None,
                    recommendation: Err(SkipReason::Unavailable(why.clone())),
                }],
                hold: Some(HoldReason::SignalUnavailable(why)),
            }
        }
    }
}

/// The ratio's recommendation made start-up aware: sized for the demand one start-up delay
/// ahead when that is higher (never lower), compared with the replicas already asked for
/// (starting pods are capacity on its way), and left alone inside the tolerance.
///
/// `recurring` is the need now grown by the rise the remembered periods saw from now until one
/// start-up ahead (in replicas): unlike the trend, it starts a scale-up on its own, since it was
/// measured on the days before rather than guessed from this one, and it holds a scale-down off.
fn plan(need: f64, recurring: Option<f64>, input: &Input, reasons: &mut Vec<Reason>) -> i32 {
    let current = input.target.spec_replicas;
    let ready = input.target.ready_replicas;
    let horizon = input.startup_seconds.unwrap_or(0.0);
    let expected = forecast::look_ahead(&input.memory.samples, need, input.now, horizon);
    let measured = round_up(need);
    let early = recurring
        .filter(|r| r.is_finite() && *r > need)
        .map(round_up)
        .filter(|r| *r > measured);
    let up_need = expected.unwrap_or(need);
    // Under an objective the admissions say whether the demand itself rises; without them the
    // trend in the reading is all there is. Fitted only when that trend rises.
    let demand_rises = || {
        input.admitted.is_none_or(|rate| {
            forecast::look_ahead_over(
                &input.memory.admissions,
                rate,
                input.now,
                horizon,
                admissions_fit_seconds(horizon, input.behavior.down.window_seconds),
            )
            .is_some()
        })
    };
    if current <= 0 {
        return round_up(up_need).max(early.unwrap_or(0));
    }
    let current_f = f64::from(current);
    let up_tolerance = input.behavior.up.tolerance.max(0.0);
    let down_tolerance = input.behavior.down.tolerance.max(0.0);
    // The measurement decides whether to scale up; the forecast only sizes the step, so noise
    // in the trend never starts a scale-up on its own.
    let recommendation = if need > current_f * (1.0 + up_tolerance) {
        round_up(up_need).max(early.unwrap_or(0))
    } else if let Some(early) = early.filter(|e| *e > current) {
        early
    } else if need < current_f * (1.0 - down_tolerance) {
        if expected.is_some() && demand_rises() {
            // The trend never deepens a scale-down, and a rising one holds it off: a pod removed
            // now would be asked for again before a new one could be Ready. (Scaling down only
            // to what the trend needs one start-up ahead was measured too: it saved 1-10% of
            // replica-hours on ramps but left eight times the oscillations on `burstgpt`.)
            // Under an objective it holds only while the admissions rise too: the requests in
            // flight also climb for minutes after each step down, on a flat demand, and each
            // such hold re-armed the scale-down window. Measured in the lab (8 seeds, both
            // cards, 90/180/300 s): the L40S's steady and threshold shapes 7-13% and the Azure
            // conversation log 5-6% fewer replica-hours at the same goodput, the L4 -3% to +2%;
            // the L40S's 5x step at 180 s fell from 97.1% to 94.9% (24 seeds), its fleet no
            // longer held large by chance when the step came, and the conversation shape at
            // 90 s from 99.69% to 99.33%.
            reasons.push(Reason::Planned(PlanReason::RisingDemand {
                measured,
                kept: current,
            }));
            current
        } else {
            let down_share = input
                .down_share
                .filter(|s| s.share().is_finite() && s.share() > 0.0);
            let kept = match down_share {
                Some(share) => round_up(need / share.share()).clamp(measured, current),
                None => measured,
            };
            match down_share {
                Some(DownShare::Spare(_)) if kept > measured => {
                    reasons.push(Reason::Planned(PlanReason::SpareKept { measured, kept }));
                }
                Some(DownShare::Longer(ratio)) if kept > measured => {
                    reasons.push(Reason::Planned(PlanReason::LongerAtCapacity {
                        measured,
                        kept,
                        percent: ((ratio - 1.0) * 100.0).round() as i32,
                    }));
                }
                _ => {}
            }
            kept.max(early.unwrap_or(0).min(current))
        }
    } else {
        current
    };
    if let Some(early) = early.filter(|e| recommendation == *e && *e > round_up(up_need)) {
        reasons.push(Reason::Planned(PlanReason::Recurring {
            measured,
            expected: early,
            horizon_seconds: horizon.round() as i32,
        }));
    } else if recommendation > current && recommendation > measured {
        reasons.push(Reason::Planned(PlanReason::LookedAhead {
            measured,
            expected: recommendation,
            horizon_seconds: horizon.round() as i32,
        }));
    }
    // Held where it is only because the pods already starting cover what Ready pods alone lack.
    if recommendation == current && ready < current && round_up(up_need) > ready {
        reasons.push(Reason::Planned(PlanReason::StartingCounted {
            starting: current - ready,
        }));
    }
    recommendation
}

/// Seconds of admissions the demand's trend is fitted over before it holds a scale-down off:
/// the look-ahead's own fit, and at least the scale-down window, since each hold records the
/// count it keeps there and so keeps the fleet for a whole window after it. A rise that short a
/// fit reads in a wobble must not re-arm that window: measured in the lab (L40S, `threshold`,
/// 90 s start-up, 8 seeds), the admissions' trend fitted over the 180 s of two start-ups read a
/// wobble as a rise every four to five minutes, and three seeds held all hour at maxReplicas (64)
/// where the load asked for 42–51. Fitted over at least the 300 s window, that cell took 0.68×
/// the replica-hours at the same goodput (99.89%) and the other 90 s cells 2–8% fewer on both
/// cards (the L40S's 5× step 98.8% to 97.6%, steady 99.85% to 99.61%); the real-length days
/// kept their goodput, `burstgpt-24h` on the L40S at 90 s changing direction 152 times a run
/// instead of 67 (99.67% for 99.86%, 8% fewer replica-hours; the HPA's defaults change 388–399).
/// Start-ups of 150 s and more fit over a window's length already (their cells moved by less
/// than 0.3%).
fn admissions_fit_seconds(horizon: f64, down_window_seconds: i32) -> f64 {
    forecast::fit_seconds(horizon).max(f64::from(down_window_seconds.max(0)))
}

/// Whether `why` holds off a scale-down to `desired` when `recommended` is what this sync's
/// measurement asks for. A rising load holds it off only while the step would leave less room
/// than one more window of the rise asks for (the recommendation grown by the rise's ratio): a
/// count the stabilization window holds well above the measurement may still step down.
fn holds_off(why: &DeferReason, desired: i32, recommended: i32) -> bool {
    match why {
        DeferReason::LoadRising(Rising { now, mean }) => {
            *mean <= 0.0 || f64::from(desired) < f64::from(recommended) * now / mean
        }
        _ => true,
    }
}

/// Decides one sync.
pub fn decide(input: &Input) -> Decision {
    let Input {
        signal,
        target,
        bounds,
        behavior,
        startup_seconds,
        memory,
        now,
        down_waits,
        admitted,
        down_share: _,
    } = input;
    let current = target.spec_replicas;
    let mut reasons = Vec::new();

    let measured = measure(signal, target.ready_replicas);
    if let Some(hold) = measured.hold {
        reasons.push(Reason::Held(hold));
    }
    let Some(need) = measured.need else {
        // Nothing measurable: hold, and remember nothing new; only the bounds still apply. A
        // target at zero under minReplicas is left there: that is someone's hand (the HPA, too,
        // leaves a target scaled to zero alone).
        let (low, high) = (bounds.min.min(bounds.max), bounds.max);
        let bound = if current > high {
            high
        } else if current > 0 && current < low {
            low
        } else {
            current
        };
        // A step down stays within maxStepReplicas, as any other, and a rollout defers it as it
        // defers a measured one.
        let step = cap_scale_down(current, bound, behavior.max_step);
        if bound != current {
            reasons.push(Reason::Limited(LimitReason::ToBounds { current, bound }));
            if let Some(why) = &target.rollout {
                reasons.push(Reason::Deferred(DeferReason::Rollout(why.clone())));
            }
        }
        let write = (step != current && target.rollout.is_none()).then_some(step);
        return Decision {
            recommendation: None,
            desired: bound,
            write,
            reasons,
            metrics: measured.metrics,
            memory: memory.clone(),
        };
    };
    // This sync's load joins the remembered periods before they are read, so the first sync of
    // a period already reads the one just finished.
    let remembered = behavior
        .recurrence
        .zip(measured.per_replica)
        .map(|(rules, per_replica)| {
            let profile = recurring::record(&memory.recurring, rules, *now, need * per_replica);
            // The growth the remembered periods saw, applied to the load now: requests in flight
            // are not conserved across fleet sizes (a leaner fleet batches more and each request
            // runs longer), so yesterday's load itself undercounts today's on a leaner fleet.
            let ahead = recurring::growth(&profile, rules, *now, startup_seconds.unwrap_or(0.0))
                .map(|g| g * need);
            (profile, ahead)
        });
    let recommended = if measured.ratio {
        plan(
            need,
            remembered.as_ref().and_then(|(_, ahead)| *ahead),
            input,
            &mut reasons,
        )
    } else {
        round_up(need)
    };

    let (low, high) = (bounds.min.min(bounds.max), bounds.max);
    let clamped = recommended.clamp(low, high);
    if recommended < clamped {
        reasons.push(Reason::Limited(LimitReason::ClampedToMin {
            recommended,
            min: bounds.min,
        }));
    } else if recommended > clamped {
        reasons.push(Reason::Limited(LimitReason::ClampedToMax {
            recommended,
            max: bounds.max,
        }));
    }

    // A window with no history yet starts from the count found (the HPA's initial
    // recommendation): a new scaler does not shrink the fleet before one window has passed.
    let seeded = |history: &[Entry], window: i32| -> Vec<Entry> {
        if history.is_empty() && window > 0 {
            vec![Entry {
                at: *now,
                replicas: current,
            }]
        } else {
            history.to_vec()
        }
    };
    let down_history = seeded(&memory.down, behavior.down.window_seconds);
    let up_history = seeded(&memory.up, behavior.up.window_seconds);
    let held_down = stabilized(
        Hold::Highest,
        clamped,
        current,
        &down_history,
        behavior.down.window_seconds,
        *now,
    );
    let held = stabilized(
        Hold::Lowest,
        held_down,
        current,
        &up_history,
        behavior.up.window_seconds,
        *now,
    );
    // History recorded under other bounds must not hold the fleet outside today's.
    let desired = held.clamp(low, high.max(clamped));
    if desired != clamped {
        let (direction, window_seconds) = if desired > clamped {
            (Direction::Down, behavior.down.window_seconds)
        } else {
            (Direction::Up, behavior.up.window_seconds)
        };
        reasons.push(Reason::Limited(LimitReason::Stabilized {
            direction,
            recommended: clamped,
            held_at: desired,
            window_seconds,
        }));
    }
    let entry = Entry {
        at: *now,
        replicas: clamped,
    };
    let mut next = Memory {
        down: record(
            Hold::Highest,
            &down_history,
            entry,
            behavior.down.window_seconds,
        ),
        up: record(Hold::Lowest, &up_history, entry, behavior.up.window_seconds),
        changes: memory.changes.clone(),
        samples: if measured.ratio {
            forecast::remember(
                &memory.samples,
                Sample { at: *now, need },
                startup_seconds.unwrap_or(0.0),
            )
        } else {
            Vec::new()
        },
        // A sync without the admissions (no objective, or its window unread) keeps those seen:
        // the fit window bounds what the trend reads.
        admissions: match admitted {
            Some(rate) => forecast::remember_over(
                &memory.admissions,
                Sample {
                    at: *now,
                    need: *rate,
                },
                admissions_fit_seconds(
                    startup_seconds.unwrap_or(0.0),
                    behavior.down.window_seconds,
                ),
            ),
            None => memory.admissions.clone(),
        },
        // A sync that could not weigh its load (no single per-replica target) keeps the days
        // seen; a spec without a recurrence forgets them.
        recurring: match (remembered, behavior.recurrence) {
            (Some((profile, _)), _) => profile,
            (None, Some(_)) => memory.recurring.clone(),
            (None, None) => recurring::Profile::default(),
        },
    };

    let mut write = None;
    if desired != current {
        if let Some(why) = &target.rollout {
            reasons.push(Reason::Deferred(DeferReason::Rollout(why.clone())));
        } else if desired < current && target.ready_replicas != current {
            reasons.push(Reason::Deferred(DeferReason::NotSettled {
                ready: target.ready_replicas,
                spec: current,
            }));
            write = down_to_max(input, &mut reasons);
        } else if desired < current
            && let Some(why) = down_waits
                .as_ref()
                .filter(|why| holds_off(why, desired, clamped))
        {
            reasons.push(Reason::Deferred(why.clone()));
            write = down_to_max(input, &mut reasons);
        } else {
            write = rate_limited(
                current,
                desired,
                bounds.max,
                behavior,
                &memory.changes,
                *now,
                &mut reasons,
            );
        }
    }

    if let Some(written) = write {
        next.changes = behavior::remember(&memory.changes, behavior, current, written, *now);
        if written < current {
            // The window restarts at the new count: the next step down waits a full window. The
            // HPA keeps its history instead and follows a further fall as soon as the older
            // recommendations expire; measured in the lab, that saves 2-13% of replica-hours at
            // the same SLO but puts the defaults behind the HPA's frontier in more cells, and it
            // would change what an existing spec's window means.
            next.down = record(
                Hold::Highest,
                &[],
                Entry {
                    at: *now,
                    replicas: written,
                },
                behavior.down.window_seconds,
            );
        }
    }

    Decision {
        recommendation: Some(recommended),
        desired,
        write,
        reasons,
        metrics: measured.metrics,
        memory: next,
    }
}

/// While a scale-down waits for a measurement (pods starting, the latency histograms, a rising
/// load), a fleet above maxReplicas still comes down to it: the wait is for what the pods carry,
/// and the bound is the user's, not a measurement. (A rollout's wait is not: stepping down then
/// would take the new template's cold pods first.)
fn down_to_max(input: &Input, reasons: &mut Vec<Reason>) -> Option<i32> {
    let (current, max) = (input.target.spec_replicas, input.bounds.max);
    (current > max)
        .then(|| {
            rate_limited(
                current,
                max,
                max,
                &input.behavior,
                &input.memory.changes,
                input.now,
                reasons,
            )
        })
        .flatten()
}

/// The count to write now on the way from `current` to `desired` under the rate policies, the
/// pace and the step cap; `None` when the direction is disabled. The pace never holds a fleet
/// above `max`: maxReplicas is a hard limit the user set, not a measurement.
fn rate_limited(
    current: i32,
    desired: i32,
    max: i32,
    behavior: &Behavior,
    changes: &[Change],
    now: Timestamp,
    reasons: &mut Vec<Reason>,
) -> Option<i32> {
    let (direction, rules) = if desired > current {
        (Direction::Up, &behavior.up)
    } else {
        (Direction::Down, &behavior.down)
    };
    if rules.select == behavior::Select::Disabled {
        reasons.push(Reason::Limited(LimitReason::DirectionDisabled {
            direction,
            desired,
        }));
        return None;
    }
    let (allowed, policy) = match direction {
        Direction::Up => {
            let (limit, policy) = behavior::scale_up_limit(current, rules, changes, now);
            (desired.min(limit), policy)
        }
        Direction::Down => {
            let (limit, policy) = behavior::scale_down_limit(current, rules, changes, now);
            (desired.max(limit), policy)
        }
    };
    let paced = match behavior.down_pace {
        Some(pace) if direction == Direction::Down => {
            behavior::paced_limit(current, pace, changes, now)
                .min(max)
                .max(allowed)
        }
        _ => allowed,
    };
    if allowed != desired
        && let Some(policy) = policy
    {
        reasons.push(Reason::Limited(LimitReason::RateLimited {
            direction,
            desired,
            written: allowed,
            policy,
        }));
    }
    if paced != allowed
        && let Some(pace) = behavior.down_pace
    {
        reasons.push(Reason::Limited(LimitReason::Paced {
            desired,
            written: paced,
            pace,
        }));
    }
    let allowed = paced;
    if allowed == current {
        return None;
    }
    let step = cap_scale_down(current, allowed, behavior.max_step);
    if step != allowed {
        reasons.push(Reason::Limited(LimitReason::StepCapped {
            desired,
            written: step,
            max_step: behavior.max_step,
        }));
    }
    Some(step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::fixture::t;
    use crate::scaling::{Bounds, MetricReading, RatePolicy, Rollout, TargetState, TargetType};

    fn metric(name: &str, value: f64, target: f64) -> MetricReading {
        MetricReading {
            name: name.to_owned(),
            value: Ok(value),
            target,
            kind: TargetType::Value,
        }
    }

    fn skipped(name: &str, why: &str) -> MetricReading {
        MetricReading {
            name: name.to_owned(),
            value: Err(SkipReason::Unavailable(
                crate::scaling::fixture::unreadable(why),
            )),
            target: 1.0,
            kind: TargetType::Value,
        }
    }

    fn settled(replicas: i32) -> TargetState {
        starting(replicas, replicas)
    }

    /// `spec` pods asked for, `ready` of them Ready, no rollout.
    fn starting(spec: i32, ready: i32) -> TargetState {
        TargetState {
            spec_replicas: spec,
            ready_replicas: ready,
            rollout: None,
        }
    }

    fn input(signal: Signal, target: TargetState, min: i32, max: i32) -> Input {
        Input {
            signal,
            target,
            bounds: Bounds { min, max },
            behavior: Behavior::unlimited(),
            startup_seconds: None,
            memory: Memory::default(),
            now: t(0),
            down_waits: None,
            admitted: None,
            down_share: None,
        }
    }

    #[test]
    fn scales_up_from_one_on_a_hot_metric() {
        let d = decide(&input(
            Signal::Ratio(vec![metric("kv", 2.0, 0.8)]),
            settled(1),
            1,
            5,
        ));
        assert_eq!(
            (d.recommendation, d.desired, d.write),
            (Some(3), 3, Some(3))
        );
        assert!(d.reasons.is_empty(), "{:?}", d.reasons);
    }

    #[test]
    fn the_largest_metric_wins_and_a_nan_guardrail_is_ignored() {
        let readings = vec![
            metric("kv", 0.4, 0.8),
            MetricReading {
                name: "p99".into(),
                value: Ok(f64::NAN),
                target: 2.0,
                kind: TargetType::Value,
            },
            metric("queue", 30.0, 10.0),
        ];
        let d = decide(&input(Signal::Ratio(readings), settled(4), 1, 20));
        assert_eq!(d.write, Some(12)); // queue: 4 × 3
        assert!(matches!(
            d.metrics[1].recommendation,
            Err(SkipReason::NotFinite(_))
        ));
        assert_eq!(d.metrics[0].recommendation, Ok(2));
    }

    #[test]
    fn every_metric_skipped_holds_even_at_zero() {
        for replicas in [0, 3] {
            let d = decide(&input(
                Signal::Ratio(vec![skipped("kv", "empty vector")]),
                settled(replicas),
                0,
                5,
            ));
            assert_eq!((d.desired, d.write), (replicas, None));
            assert_eq!(d.reasons, vec![Reason::Held(HoldReason::NoUsableMetric)]);
        }
    }

    #[test]
    fn scale_to_zero_and_wake_from_zero() {
        let down = decide(&input(
            Signal::Ratio(vec![metric("q", 0.0, 1.0)]),
            settled(2),
            0,
            5,
        ));
        assert_eq!(down.write, Some(0));
        let up = decide(&input(
            Signal::Ratio(vec![metric("q", 2.5, 1.0)]),
            settled(0),
            0,
            5,
        ));
        assert_eq!(
            up.write,
            Some(3),
            "ceil(2.5 / 1) from a single-replica baseline"
        );
    }

    #[test]
    fn clamps_and_says_so() {
        let d = decide(&input(
            Signal::Ratio(vec![metric("q", 100.0, 1.0)]),
            settled(2),
            1,
            5,
        ));
        assert_eq!(d.write, Some(5));
        assert!(
            d.reasons
                .contains(&Reason::Limited(LimitReason::ClampedToMax {
                    recommended: 200,
                    max: 5
                }))
        );
        let d = decide(&input(
            Signal::Ratio(vec![metric("q", 0.0, 1.0)]),
            settled(3),
            2,
            5,
        ));
        assert_eq!(d.write, Some(2));
        assert!(
            d.reasons
                .contains(&Reason::Limited(LimitReason::ClampedToMin {
                    recommended: 0,
                    min: 2
                }))
        );
    }

    #[test]
    fn rollout_defers_both_directions() {
        for value in [0.1, 5.0] {
            let target = TargetState {
                rollout: Some(Rollout::NotUpdated {
                    updated: 2,
                    spec: 3,
                }),
                ..settled(3)
            };
            let d = decide(&input(
                Signal::Ratio(vec![metric("q", value, 1.0)]),
                target,
                1,
                10,
            ));
            assert_eq!(d.write, None);
            assert!(
                d.reasons
                    .iter()
                    .any(|r| matches!(r, Reason::Deferred(DeferReason::Rollout(_))))
            );
        }
    }

    #[test]
    fn scale_down_waits_until_settled_but_scale_up_does_not() {
        let down = decide(&input(
            Signal::Ratio(vec![metric("q", 0.0, 1.0)]),
            starting(4, 2),
            1,
            10,
        ));
        assert_eq!(down.write, None);
        assert!(
            down.reasons
                .contains(&Reason::Deferred(DeferReason::NotSettled {
                    ready: 2,
                    spec: 4
                }))
        );
        let up = decide(&input(
            Signal::Ratio(vec![metric("q", 5.0, 1.0)]),
            starting(4, 2),
            1,
            10,
        ));
        assert_eq!(up.write, Some(10));
    }

    #[test]
    fn zero_ready_is_not_healthy() {
        // Pods requested but none ready: the baseline recommends 1, but that scale-down must wait.
        let target = starting(3, 0);
        let d = decide(&input(
            Signal::Ratio(vec![metric("q", 0.5, 1.0)]),
            target,
            0,
            10,
        ));
        assert_eq!((d.desired, d.write), (1, None));
    }

    /// Runs syncs every `period` seconds with a fixed metric, the fleet settling instantly.
    fn walk(start: i32, value: f64, policy: Behavior, period: i64, until: i64) -> Vec<(i64, i32)> {
        let mut spec = start;
        let mut history = Memory::default();
        let mut writes = Vec::new();
        let mut now = 0;
        while now <= until {
            let d = decide(&Input {
                signal: Signal::Ratio(vec![metric("q", value, 1.0)]),
                target: settled(spec),
                bounds: Bounds { min: 1, max: 10 },
                behavior: policy.clone(),
                startup_seconds: None,
                memory: history.clone(),
                now: t(now),
                down_waits: None,
                admitted: None,
                down_share: None,
            });
            if let Some(w) = d.write {
                writes.push((now, w));
                spec = w;
            }
            history = d.memory;
            now += period;
        }
        writes
    }

    #[test]
    fn without_a_window_the_cap_walks_down_one_step_per_sync() {
        let writes = walk(5, 0.0, Behavior::scale_down(0, 2), 15, 60);
        assert_eq!(writes, vec![(0, 3), (15, 1)]);
        let writes = walk(10, 0.0, Behavior::scale_down(0, 2), 15, 120);
        assert_eq!(
            writes.iter().map(|w| w.1).collect::<Vec<_>>(),
            [8, 6, 4, 2, 1]
        );
    }

    #[test]
    fn with_a_window_each_step_down_waits_a_full_window() {
        // Window 300 s, cap 2, settled at 5, metric 0. A new scaler takes the count it finds as
        // its first recommendation, so 5 holds for a window; then 5 -> 3, and 3 until a window
        // after the first sync that recommended fewer than 3 (315 s).
        let writes = walk(5, 0.0, Behavior::scale_down(300, 2), 15, 700);
        assert_eq!(writes, vec![(300, 3), (615, 1)]);
    }

    #[test]
    fn a_scale_down_restarts_the_window_at_the_new_count() {
        // Window 60 s, a sync every 15 s: 8 recommended until 15, 4 until 45, then 2. The 8
        // holds the fleet until 75; the step to 4 restarts the window, so the step to 2 comes a
        // window after 2 was first recommended against 4 (90 + 60), not when the 4 recorded at
        // 45 expires (105).
        let mut memory = Memory::default();
        let mut spec = 8;
        let mut writes = Vec::new();
        for now in (0..=240).step_by(15) {
            let value = match now {
                0 => 1.0,
                15 | 30 => 0.5,
                _ => 0.25,
            };
            let d = decide(&Input {
                signal: Signal::Ratio(vec![metric("q", value * 8.0 / f64::from(spec), 1.0)]),
                target: settled(spec),
                bounds: Bounds { min: 1, max: 10 },
                behavior: Behavior::scale_down(60, 0),
                startup_seconds: None,
                memory,
                now: t(now),
                down_waits: None,
                admitted: None,
                down_share: None,
            });
            if let Some(w) = d.write {
                writes.push((now, w));
                spec = w;
            }
            memory = d.memory;
        }
        assert_eq!(writes, vec![(75, 4), (150, 2)]);
    }

    #[test]
    fn stabilization_pins_the_fleet_then_releases_it() {
        // 8 recommended at 0; from 15 on the metric says 2. The 8 counts until the sync that
        // replaced it, so the fleet is held until a window after 15.
        let policy = Behavior::scale_down(180, 0);
        let high = decide(&Input {
            signal: Signal::Ratio(vec![metric("q", 1.0, 1.0)]),
            target: settled(8),
            bounds: Bounds { min: 1, max: 10 },
            behavior: policy.clone(),
            startup_seconds: None,
            memory: Memory::default(),
            now: t(0),
            down_waits: None,
            admitted: None,
            down_share: None,
        });
        assert_eq!(high.write, None);
        let mut history = high.memory;
        for now in (15..=180).step_by(15) {
            let d = decide(&Input {
                signal: Signal::Ratio(vec![metric("q", 0.25, 1.0)]),
                target: settled(8),
                bounds: Bounds { min: 1, max: 10 },
                behavior: policy.clone(),
                startup_seconds: None,
                memory: history.clone(),
                now: t(now),
                down_waits: None,
                admitted: None,
                down_share: None,
            });
            assert_eq!((d.desired, d.write), (8, None), "held at {now}s");
            assert!(d.reasons.iter().any(|r| matches!(
                r,
                Reason::Limited(LimitReason::Stabilized { held_at: 8, .. })
            )));
            history = d.memory;
        }
        let released = decide(&Input {
            signal: Signal::Ratio(vec![metric("q", 0.25, 1.0)]),
            target: settled(8),
            bounds: Bounds { min: 1, max: 10 },
            behavior: policy.clone(),
            startup_seconds: None,
            memory: history,
            now: t(195),
            down_waits: None,
            admitted: None,
            down_share: None,
        });
        assert_eq!(released.write, Some(2));
    }

    #[test]
    fn absolute_counts_are_clamped_and_failures_hold() {
        let d = decide(&input(Signal::Absolute(Ok(15)), settled(2), 1, 20));
        assert_eq!(d.write, Some(15), "absolute, not a ratio");
        let d = decide(&input(Signal::Absolute(Ok(40)), settled(2), 1, 20));
        assert_eq!(d.write, Some(20));
        let d = decide(&input(Signal::Absolute(Ok(0)), settled(2), 0, 20));
        assert_eq!(d.write, Some(0));
        let d = decide(&input(Signal::Absolute(Ok(0)), settled(2), 1, 20));
        assert_eq!(d.write, Some(1));
        let d = decide(&input(
            Signal::Absolute(Err(crate::scaling::fixture::unreadable("server down"))),
            settled(2),
            0,
            20,
        ));
        assert_eq!((d.desired, d.write), (2, None));
        let d = decide(&input(Signal::Absolute(Ok(-3)), settled(2), 0, 20));
        assert_eq!(d.write, None);
    }

    #[test]
    fn a_lowered_max_replicas_caps_the_stabilized_hold() {
        let mut i = input(Signal::Ratio(vec![metric("q", 0.0, 1.0)]), settled(8), 0, 3);
        i.behavior.down.window_seconds = 300;
        i.memory.down = vec![Entry {
            at: t(-10),
            replicas: 8,
        }];
        let d = decide(&i);
        assert_eq!((d.desired, d.write), (3, Some(3)));
    }

    #[test]
    fn a_total_is_divided_by_the_target_whatever_is_ready() {
        for ready in [0, 2, 9] {
            let d = decide(&input(
                Signal::Ratio(vec![MetricReading {
                    kind: TargetType::AverageValue,
                    ..metric("in-flight", 96.0, 16.0)
                }]),
                starting(9, ready),
                1,
                20,
            ));
            assert_eq!(d.recommendation, Some(6), "ready {ready}");
        }
    }

    #[test]
    fn pods_starting_are_counted_as_capacity() {
        // 4 asked for, 2 Ready and loaded at 2× target: the demand needs 4, which Ready pods
        // alone lack, but the 2 starting pods cover it.
        let d = decide(&input(
            Signal::Ratio(vec![metric("q", 2.0, 1.0)]),
            starting(4, 2),
            1,
            10,
        ));
        assert_eq!(d.write, None);
        assert!(
            d.reasons
                .contains(&Reason::Planned(PlanReason::StartingCounted {
                    starting: 2
                }))
        );
        // A fall in demand while pods start is a (deferred) scale-down, not capacity counted.
        let down = decide(&input(
            Signal::Ratio(vec![metric("q", 1.5, 1.0)]),
            starting(8, 2),
            1,
            10,
        ));
        assert!(
            !down
                .reasons
                .iter()
                .any(|r| matches!(r, Reason::Planned(PlanReason::StartingCounted { .. }))),
            "{:?}",
            down.reasons
        );
    }

    /// Six minutes of samples, one every 15 s up to `t(345)`, at `value(k)` for the k-th.
    fn six_minutes_of(value: impl Fn(i64) -> f64) -> Vec<Sample> {
        (0..24)
            .map(|k| Sample {
                at: t(k * 15),
                need: value(k),
            })
            .collect()
    }

    /// A need that rose from 6 to 12 replicas over six minutes, by a quarter every 15 s.
    fn rising_need(k: i64) -> f64 {
        6.0 + k as f64 * 0.25
    }

    /// 20 settled replicas measured at 12 at `t(360)` with a 180 s start-up, after `samples`.
    fn twenty_measured_at_twelve(samples: Vec<Sample>) -> Input {
        let mut i = input(
            Signal::Ratio(vec![metric("q", 0.6, 1.0)]),
            settled(20),
            1,
            40,
        );
        i.now = t(360);
        i.startup_seconds = Some(180.0);
        i.memory.samples = samples;
        i
    }

    #[test]
    fn a_rising_demand_sizes_the_scale_up_one_start_up_ahead() {
        // Need rising by 1 replica a minute for 6 minutes, measured 12 against 10 replicas;
        // with a 180 s start-up the step is sized for 15.
        let mut i = input(
            Signal::Ratio(vec![metric("q", 1.2, 1.0)]),
            settled(10),
            1,
            40,
        );
        i.now = t(360);
        i.startup_seconds = Some(180.0);
        i.memory.samples = six_minutes_of(rising_need);
        let d = decide(&i);
        assert_eq!(d.write, Some(15));
        assert!(
            d.reasons
                .contains(&Reason::Planned(PlanReason::LookedAhead {
                    measured: 12,
                    expected: 15,
                    horizon_seconds: 180
                }))
        );
        // The same history with a measurement inside the tolerance: the trend alone never
        // starts a scale-up.
        i.behavior.up.tolerance = 0.25;
        assert_eq!(decide(&i).write, None);
    }

    /// A day of an hour: 10 pods' load at night, 40 from minute 20 to 40, remembered over
    /// `days` periods and measured this period until `until` seconds in.
    fn remembered(days: u32, until: i64) -> (crate::scaling::Recurrence, Memory) {
        let rules = crate::scaling::Recurrence {
            period_seconds: 3600,
            days,
        };
        let load = |s: i64| {
            if (1200..2400).contains(&s.rem_euclid(3600)) {
                40.0
            } else {
                10.0
            }
        };
        let mut profile = recurring::Profile::default();
        let mut at = 0;
        while at < i64::from(days) * 3600 + until {
            profile = recurring::record(&profile, rules, t(at), load(at));
            at += 15;
        }
        (
            rules,
            Memory {
                recurring: profile,
                ..Memory::default()
            },
        )
    }

    /// `replicas` settled pods each reading `per_pod` against a target of 1, `until` seconds
    /// into the period after those [`remembered`] over `days`, with a 300 s start-up.
    fn remembering(per_pod: f64, replicas: i32, days: u32, until: i64) -> Input {
        let (rules, memory) = remembered(days, until);
        let mut i = input(
            Signal::Ratio(vec![metric("q", per_pod, 1.0)]),
            settled(replicas),
            1,
            64,
        );
        i.now = t(i64::from(days) * 3600 + until);
        i.startup_seconds = Some(300.0);
        i.behavior.recurrence = Some(rules);
        i.memory = memory;
        i
    }

    #[test]
    fn a_rise_every_remembered_period_saw_starts_pods_before_it_shows() {
        // Four minutes before the rise, with a 300 s start-up: 10 pods measured at 1 request
        // each against a target of 1; yesterday's rise to 40 is within reach of a pod asked for
        // now, so 40 are asked for at once, and the reason says why.
        let mut i = remembering(1.0, 10, 1, 960);
        let d = decide(&i);
        assert_eq!(d.write, Some(40));
        assert!(
            d.reasons.contains(&Reason::Planned(PlanReason::Recurring {
                measured: 10,
                expected: 40,
                horizon_seconds: 300
            })),
            "{:?}",
            d.reasons
        );
        // Never above maxReplicas.
        i.bounds.max = 25;
        assert_eq!(decide(&i).write, Some(25));
        // Ten minutes earlier the rise is beyond one start-up: nothing moves.
        assert_eq!(decide(&remembering(1.0, 10, 1, 360)).write, None);
        // Without the spec's recurrence the same memory asks for nothing.
        let mut i = remembering(1.0, 10, 1, 960);
        i.behavior.recurrence = None;
        assert_eq!(decide(&i).write, None);
    }

    #[test]
    fn the_days_seen_are_kept_through_a_sync_that_cannot_weigh_its_load() {
        // Two readings have no one per-replica target: the sync records nothing, forgets
        // nothing.
        let mut i = remembering(1.0, 10, 1, 960);
        let seen = i.memory.recurring.clone();
        i.signal = Signal::Ratio(vec![metric("q", 1.0, 1.0), metric("r", 1.0, 2.0)]);
        assert_eq!(decide(&i).memory.recurring, seen);
        // A spec without a recurrence forgets them.
        i.behavior.recurrence = None;
        assert_eq!(decide(&i).memory.recurring, recurring::Profile::default());
    }

    #[test]
    fn a_rise_fewer_periods_saw_than_the_spec_asks_starts_nothing() {
        let mut i = remembering(1.0, 10, 1, 960);
        i.behavior.recurrence = Some(crate::scaling::Recurrence {
            period_seconds: 3600,
            days: 2,
        });
        assert_eq!(decide(&i).write, None);
    }

    #[test]
    fn a_remembered_rise_holds_a_scale_down_off_and_a_plateau_does_not() {
        // 50 pods four minutes before the rise, a quiet minute measures 10 (a fifth each): the
        // fleet comes down only to what the rise every remembered period saw within one
        // start-up needs (4× here, the bound), 40, not to 10.
        let mut i = remembering(0.2, 50, 1, 960);
        i.behavior.down.window_seconds = 0;
        let d = decide(&i);
        assert_eq!(d.desired, 40, "{:?}", d.reasons);
        // On the plateau the remembered periods saw no rise: the measurement decides.
        let mut i = remembering(0.5, 40, 1, 1800);
        i.behavior.down.window_seconds = 0;
        assert_eq!(decide(&i).desired, 20);
    }

    #[test]
    fn a_wait_for_a_measurement_still_brings_a_fleet_above_max_replicas_down_to_it() {
        // 20 replicas, maxReplicas lowered to 10, the measurement asks for 4: while the
        // histograms cannot be read (or the load rises) the fleet waits at the bound, not above.
        let waits = [
            DeferReason::LatencyUnread(crate::scaling::fixture::unreadable("no series")),
            DeferReason::LoadRising(Rising {
                now: 2.0,
                mean: 1.0,
            }),
        ];
        for why in waits {
            let mut i = input(
                Signal::Ratio(vec![metric("q", 0.2, 1.0)]),
                settled(20),
                1,
                10,
            );
            i.down_waits = Some(why.clone());
            let d = decide(&i);
            assert_eq!((d.desired, d.write), (4, Some(10)), "{:?}", d.reasons);
            assert!(
                d.reasons.contains(&Reason::Deferred(why.clone())),
                "{:?}",
                d.reasons
            );
            // Within the bounds, nothing moves.
            let mut i = input(
                Signal::Ratio(vec![metric("q", 0.4, 1.0)]),
                settled(10),
                1,
                10,
            );
            i.down_waits = Some(why);
            assert_eq!(decide(&i).write, None);
        }
        // So does a fleet whose pods are still starting: 20 asked for, 15 Ready.
        let d = decide(&input(
            Signal::Ratio(vec![metric("q", 0.2, 1.0)]),
            starting(20, 15),
            1,
            10,
        ));
        assert_eq!(d.write, Some(10), "{:?}", d.reasons);
        let not_settled = Reason::Deferred(DeferReason::NotSettled {
            ready: 15,
            spec: 20,
        });
        assert!(d.reasons.contains(&not_settled), "{:?}", d.reasons);
    }

    /// The 20 replicas of [`twenty_measured_at_twelve`] kept by a rising trend, and saying so.
    fn held_by_the_trend(d: &Decision) {
        assert_eq!((d.desired, d.write), (20, None));
        let held = Reason::Planned(PlanReason::RisingDemand {
            measured: 12,
            kept: 20,
        });
        assert!(d.reasons.contains(&held), "{:?}", d.reasons);
    }

    fn not_held_by_the_trend(d: &Decision) {
        let held = |r: &Reason| matches!(r, Reason::Planned(PlanReason::RisingDemand { .. }));
        assert!(!d.reasons.iter().any(held), "{:?}", d.reasons);
    }

    #[test]
    fn a_rising_demand_holds_off_a_scale_down_and_a_flat_one_does_not() {
        // 20 replicas; the need rose from 6 to 12 over six minutes and is measured at 12, below
        // 20 × 0.9: the measurement alone would go to 12, but a pod the trend needs within the
        // 180 s start-up would be asked for again.
        let mut i = twenty_measured_at_twelve(six_minutes_of(rising_need));
        let d = decide(&i);
        held_by_the_trend(&d);
        // The same measurement after a flat history scales down.
        i.memory.samples = six_minutes_of(|_| 12.0);
        assert_eq!(decide(&i).write, Some(12));
        // And without a start-up delay there is no trend to hold for.
        i.startup_seconds = None;
        assert_eq!(decide(&i).write, Some(12));
    }

    #[test]
    fn after_a_miss_a_scale_down_keeps_a_share_of_each_pod_spare() {
        // 20 replicas whose pods' load needs 12 of them: without a share the fleet goes to 12.
        let mut i = twenty_measured_at_twelve(six_minutes_of(|_| 12.0));
        let plain = decide(&i);
        assert_eq!(plain.write, Some(12));
        assert!(
            !plain
                .reasons
                .iter()
                .any(|r| matches!(r, Reason::Planned(PlanReason::SpareKept { .. })))
        );
        // With nine tenths of each pod's capacity to fill, 12 / 0.9 = 13.3: 14 pods.
        i.down_share = Some(DownShare::Spare(0.9));
        let spared = decide(&i);
        assert_eq!(spared.write, Some(14));
        assert!(
            spared
                .reasons
                .contains(&Reason::Planned(PlanReason::SpareKept {
                    measured: 12,
                    kept: 14
                })),
            "{:?}",
            spared.reasons
        );
        // The share never holds a fleet above the count it has: a need of 19.5 over 0.9 is 22.
        i.signal = Signal::Ratio(vec![metric("q", 19.5 / 20.0, 1.0)]);
        let d = decide(&i);
        assert!(d.write.is_none_or(|w| w <= 20), "{:?}", d.write);
        // Requests that run a quarter longer once the pods are full: 12 × 1.25 = 15 pods.
        i.signal = twenty_measured_at_twelve(Vec::new()).signal;
        i.down_share = Some(DownShare::Longer(1.25));
        let longer = decide(&i);
        assert_eq!(longer.write, Some(15));
        assert!(
            longer
                .reasons
                .contains(&Reason::Planned(PlanReason::LongerAtCapacity {
                    measured: 12,
                    kept: 15,
                    percent: 25
                })),
            "{:?}",
            longer.reasons
        );
        // Nor is a share that is no number read as one.
        i.down_share = Some(DownShare::Spare(f64::NAN));
        i.signal = twenty_measured_at_twelve(Vec::new()).signal;
        assert_eq!(decide(&i).write, Some(12));
    }

    #[test]
    fn under_an_objective_a_rising_trend_holds_off_a_scale_down_only_while_admissions_rise() {
        // The requests in flight rose as in the test above; the admissions tell whether the
        // demand did.
        let mut i = twenty_measured_at_twelve(six_minutes_of(rising_need));
        // Flat at 30 a second: the climb is the fleet's own (each pod batches more after a step
        // down), and the scale-down goes ahead.
        i.memory.admissions = six_minutes_of(|_| 30.0);
        i.admitted = Some(30.0);
        let d = decide(&i);
        assert_eq!(d.write, Some(12), "{:?}", d.reasons);
        not_held_by_the_trend(&d);
        // This sync's admissions join the remembered ones, for the next sync's trend.
        assert_eq!(
            d.memory.admissions.last().map(|s| (s.at, s.need)),
            Some((t(360), 30.0))
        );
        // Rising from 15 to 30 a second: the demand rises, and the trend holds the fleet.
        i.memory.admissions = six_minutes_of(|k| 15.0 + k as f64 * 0.625);
        let d = decide(&i);
        held_by_the_trend(&d);
        // Unread this sync (or no objective): the trend in the reading holds alone, as before,
        // and the admissions seen are kept.
        i.memory.admissions = six_minutes_of(|_| 30.0);
        i.admitted = None;
        let d = decide(&i);
        assert_eq!((d.desired, d.write), (20, None));
        assert_eq!(d.memory.admissions, i.memory.admissions);
    }

    #[test]
    fn a_wobble_in_the_admissions_holds_no_scale_down_for_a_whole_window() {
        // The requests in flight rose as above, with a 90 s start-up and a 300 s scale-down
        // window. The admissions fell from 30 to 24 a second over three minutes and came back:
        // the last 180 s (two start-ups) alone read as a rise, the window's 300 s do not.
        let mut i = twenty_measured_at_twelve(six_minutes_of(rising_need));
        i.startup_seconds = Some(90.0);
        i.memory.admissions = six_minutes_of(|k| 24.0 + 0.5 * (k - 12).abs() as f64);
        i.admitted = Some(30.0);
        i.behavior.down.window_seconds = 300;
        let d = decide(&i);
        // The measurement's 12 is what the window records (it holds the fleet at 20 for now,
        // as it holds any first step down), not the 20 a hold keeps.
        assert_eq!(d.recommendation, Some(12), "{:?}", d.reasons);
        not_held_by_the_trend(&d);
        // The window's 300 s of admissions are remembered for the next sync's trend.
        assert_eq!(
            d.memory.admissions.first().map(|s| s.at),
            Some(t(60)),
            "{:?}",
            d.memory.admissions
        );
        // Without the window, the fit is the look-ahead's own two start-ups: the rise holds.
        i.behavior.down.window_seconds = 0;
        held_by_the_trend(&decide(&i));
        // A rise the whole window shows holds the fleet with the window too.
        i.behavior.down.window_seconds = 300;
        i.memory.admissions = six_minutes_of(|k| 15.0 + k as f64 * 0.625);
        held_by_the_trend(&decide(&i));
    }

    #[test]
    fn rate_policies_pace_a_scale_up_and_say_which() {
        let mut i = input(
            Signal::Ratio(vec![metric("q", 5.0, 1.0)]),
            settled(4),
            1,
            40,
        );
        i.behavior.up.policies = vec![RatePolicy {
            kind: crate::scaling::PolicyKind::Pods,
            value: 4,
            period_seconds: 60,
        }];
        let d = decide(&i);
        assert_eq!((d.desired, d.write), (20, Some(8)));
        assert!(d.reasons.iter().any(|r| matches!(
            r,
            Reason::Limited(LimitReason::RateLimited {
                direction: Direction::Up,
                written: 8,
                ..
            })
        )));
        // 30 s later the 4 added count against the same minute: no more.
        i.target = settled(8);
        i.memory = d.memory;
        i.now = t(30);
        assert_eq!(decide(&i).write, None);
        i.now = t(60);
        assert_eq!(decide(&i).write, Some(12));
    }

    #[test]
    fn a_pace_steps_a_scale_down_whatever_the_policies_allow() {
        // The demand of 10 pods on a fleet of 40, with the default scale-down policy (100% per
        // 15 s, which alone would write 10) and a pace of a quarter per minute.
        let mut i = input(
            Signal::Ratio(vec![metric("q", 2.5, 10.0)]),
            settled(40),
            1,
            40,
        );
        i.behavior.down.policies = vec![RatePolicy {
            kind: crate::scaling::PolicyKind::Percent,
            value: 100,
            period_seconds: 15,
        }];
        assert_eq!(decide(&i).write, Some(10));
        let pace = RatePolicy {
            kind: crate::scaling::PolicyKind::Percent,
            value: 25,
            period_seconds: 60,
        };
        i.behavior.down_pace = Some(pace);
        let d = decide(&i);
        assert_eq!((d.desired, d.write), (10, Some(30)));
        assert!(
            d.reasons.contains(&Reason::Limited(LimitReason::Paced {
                desired: 10,
                written: 30,
                pace
            })),
            "{:?}",
            d.reasons
        );
        // Inside the same minute the 10 removed count: nothing more, then a quarter of 30.
        i.target = settled(30);
        i.signal = Signal::Ratio(vec![metric("q", 10.0 / 3.0, 10.0)]);
        i.memory = d.memory;
        i.now = t(30);
        assert_eq!(decide(&i).write, None);
        i.now = t(60);
        assert_eq!(decide(&i).write, Some(22));
        // A scale-up is not paced.
        let mut up = input(
            Signal::Ratio(vec![metric("q", 40.0, 10.0)]),
            settled(10),
            1,
            100,
        );
        up.behavior.down_pace = Some(pace);
        assert_eq!(decide(&up).write, Some(40));
    }

    #[test]
    fn without_a_signal_a_fleet_outside_its_bounds_is_brought_to_them() {
        let lost = || Signal::Ratio(vec![skipped("q", "no series")]);
        // maxReplicas lowered to 6 under a fleet of 8 while the signal is lost: down to 6.
        let mut i = input(lost(), settled(8), 1, 40);
        i.bounds = Bounds { min: 1, max: 6 };
        let d = decide(&i);
        assert_eq!((d.desired, d.write), (6, Some(6)), "{:?}", d.reasons);
        assert_eq!(
            d.reasons,
            vec![
                Reason::Held(HoldReason::NoUsableMetric),
                Reason::Limited(LimitReason::ToBounds {
                    current: 8,
                    bound: 6
                })
            ]
        );
        // minReplicas raised to 4 under a fleet of 2: up to 4.
        let mut i = input(lost(), settled(2), 1, 40);
        i.bounds = Bounds { min: 4, max: 10 };
        assert_eq!(decide(&i).write, Some(4));
        // Within the bounds, or scaled to zero by hand: held where it is.
        let mut i = input(lost(), settled(5), 1, 40);
        i.bounds = Bounds { min: 4, max: 10 };
        assert_eq!(decide(&i).write, None);
        let mut i = input(lost(), settled(0), 1, 40);
        i.bounds = Bounds { min: 4, max: 10 };
        assert_eq!(decide(&i).write, None);
        // Mid-rollout it waits, as a measured sync does, and says so.
        let rolling = TargetState {
            rollout: Some(Rollout::OldPodsRunning { old: 2 }),
            ..settled(8)
        };
        let mut i = input(lost(), rolling, 1, 40);
        i.bounds = Bounds { min: 1, max: 6 };
        let d = decide(&i);
        assert_eq!((d.desired, d.write), (6, None));
        assert!(
            d.reasons
                .iter()
                .any(|r| matches!(r, Reason::Deferred(DeferReason::Rollout(_)))),
            "{:?}",
            d.reasons
        );
    }

    #[test]
    fn a_disabled_direction_writes_nothing() {
        let mut i = input(
            Signal::Ratio(vec![metric("q", 0.1, 1.0)]),
            settled(8),
            1,
            40,
        );
        i.behavior.down.select = crate::scaling::Select::Disabled;
        let d = decide(&i);
        assert_eq!(d.write, None);
        assert!(
            d.reasons
                .contains(&Reason::Limited(LimitReason::DirectionDisabled {
                    direction: Direction::Down,
                    desired: 1
                }))
        );
    }

    #[test]
    fn a_scale_up_window_waits_for_a_lasting_rise() {
        let mut i = input(
            Signal::Ratio(vec![metric("q", 2.0, 1.0)]),
            settled(4),
            1,
            40,
        );
        i.behavior.up.window_seconds = 60;
        let first = decide(&i);
        assert_eq!(
            first.write, None,
            "a new scaler starts from the count it finds"
        );
        i.memory = first.memory;
        i.now = t(60);
        assert_eq!(decide(&i).write, Some(8));
    }

    #[test]
    fn desired_is_the_destination_and_write_the_step() {
        let mut i = input(
            Signal::Ratio(vec![metric("q", 0.0, 1.0)]),
            settled(10),
            1,
            10,
        );
        i.behavior.max_step = 2;
        let d = decide(&i);
        assert_eq!((d.desired, d.write), (1, Some(8)));
        assert_eq!(d.removed(&i.target), 2);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use crate::scaling::behavior::{PolicyKind, Rules, Select};
    use crate::scaling::fixture::t;
    use crate::scaling::{Bounds, MetricReading, RatePolicy, Rollout, TargetState, TargetType};
    use proptest::prelude::*;

    fn any_rules() -> impl Strategy<Value = Rules> {
        (
            0..600i32,
            prop_oneof![Just(0.0), Just(0.1), 0.0..0.5f64],
            proptest::collection::vec((any::<bool>(), 1..200i32, 1..600i32), 0..3),
            prop_oneof![Just(Select::Max), Just(Select::Min), Just(Select::Disabled)],
        )
            .prop_map(|(window_seconds, tolerance, policies, select)| Rules {
                window_seconds,
                tolerance,
                policies: policies
                    .into_iter()
                    .map(|(pods, value, period_seconds)| RatePolicy {
                        kind: if pods {
                            PolicyKind::Pods
                        } else {
                            PolicyKind::Percent
                        },
                        value,
                        period_seconds,
                    })
                    .collect(),
                select,
            })
    }

    fn entries(raw: Vec<(i64, i32)>) -> Vec<Entry> {
        let mut h: Vec<Entry> = raw
            .into_iter()
            .map(|(s, r)| Entry {
                at: t(s),
                replicas: r,
            })
            .collect();
        h.sort_by_key(|e| e.at);
        h
    }

    fn any_input() -> impl Strategy<Value = Input> {
        (
            (0..50i32, 0..50i32, 0..60i32, 0..60i32),
            proptest::collection::vec(prop_oneof![Just(f64::NAN), 0.0..1e4f64, Just(1e300)], 0..4),
            (0.01..100f64, any::<bool>()),
            (any_rules(), any_rules(), 0..5i32),
            (
                proptest::collection::vec((0..600i64, 0..60i32), 0..10),
                proptest::collection::vec((0..600i64, 0..60i32), 0..10),
                proptest::collection::vec((0..600i64, -20..20i32), 0..10),
                proptest::collection::vec((0..600i64, 0.0..100f64), 0..30),
            ),
            (
                any::<bool>(),
                proptest::option::of(0.0..600f64),
                proptest::option::of((1..100i32, 1..300i32)),
            ),
        )
            .prop_map(
                |(
                    (min, span, spec, ready),
                    values,
                    (target, total),
                    (up, down, max_step),
                    (down_h, up_h, changes, samples),
                    (rollout, startup_seconds, pace),
                )| Input {
                    signal: Signal::Ratio(
                        values
                            .into_iter()
                            .map(|v| MetricReading {
                                name: "m".into(),
                                value: Ok(v),
                                target,
                                kind: if total {
                                    TargetType::AverageValue
                                } else {
                                    TargetType::Value
                                },
                            })
                            .collect(),
                    ),
                    target: TargetState {
                        spec_replicas: spec,
                        ready_replicas: ready,
                        rollout: rollout.then_some(Rollout::OldPodsRunning { old: 1 }),
                    },
                    bounds: Bounds {
                        min,
                        max: min + span,
                    },
                    behavior: Behavior {
                        up,
                        down,
                        max_step,
                        down_pace: pace.map(|(value, period_seconds)| RatePolicy {
                            kind: crate::scaling::PolicyKind::Percent,
                            value,
                            period_seconds,
                        }),
                        recurrence: None,
                    },
                    startup_seconds,
                    memory: Memory {
                        down: entries(down_h),
                        up: entries(up_h),
                        changes: changes
                            .into_iter()
                            .map(|(s, replicas)| Change { at: t(s), replicas })
                            .collect(),
                        samples: {
                            let mut v: Vec<Sample> = samples
                                .into_iter()
                                .map(|(s, need)| Sample { at: t(s), need })
                                .collect();
                            v.sort_by_key(|s| s.at);
                            v
                        },
                        admissions: Vec::new(),
                        recurring: Default::default(),
                    },
                    now: t(600),
                    down_waits: None,
                    admitted: None,
                    down_share: None,
                },
            )
    }

    proptest! {
        #[test]
        fn a_scale_up_never_passes_max_nor_a_scale_down_min(i in any_input()) {
            let d = decide(&i);
            if let Some(w) = d.write {
                let current = i.target.spec_replicas;
                if w > current {
                    prop_assert!(w <= i.bounds.max, "{w} over max {}", i.bounds.max);
                } else {
                    prop_assert!(w >= i.bounds.min, "{w} under min {}", i.bounds.min);
                    // A scale-down never goes below the destination, which is within bounds.
                    prop_assert!(w >= d.desired);
                    prop_assert!(d.desired >= i.bounds.min && d.desired <= i.bounds.max);
                }
            }
        }

        #[test]
        fn a_step_never_removes_more_than_the_cap(i in any_input()) {
            let d = decide(&i);
            if i.behavior.max_step > 0 {
                prop_assert!(d.removed(&i.target) <= i.behavior.max_step);
            }
        }

        #[test]
        fn a_pace_bounds_every_scale_down(i in any_input()) {
            let d = decide(&i);
            let current = i.target.spec_replicas;
            if let (Some(pace), Some(w)) = (i.behavior.down_pace, d.write.filter(|w| *w < current)) {
                let floor = behavior::paced_limit(current, pace, &i.memory.changes, i.now)
                    .min(i.bounds.max);
                prop_assert!(w >= floor, "wrote {w} from {current} under {pace}: below {floor}");
            }
        }

        #[test]
        fn a_forecast_never_triggers_a_scale_down(i in any_input()) {
            let with = decide(&i);
            let without = decide(&Input {
                memory: Memory { samples: Vec::new(), ..i.memory.clone() },
                ..i.clone()
            });
            let current = i.target.spec_replicas;
            if let Some(w) = with.write.filter(|w| *w < current) {
                prop_assert_eq!(without.write, Some(w));
            }
            if let (Some(a), Some(b)) = (with.write, without.write) {
                prop_assert!(a >= b, "the forecast lowered {b} to {a}");
            }
        }

        #[test]
        fn a_remembered_rise_never_lowers_the_fleet_nor_passes_max(
            i in any_input(),
            loads in prop::collection::vec(0.0f64..500.0, 1..40),
            days in 1u32..3,
        ) {
            let rules = crate::scaling::Recurrence { period_seconds: 3600, days };
            // The periods before `i.now`, at 90 s steps, the loads repeated.
            let mut profile = recurring::Profile::default();
            let start = i.now.as_second() - i64::from(days) * 3600 - 1800;
            for k in 0..(i64::from(days) * 40 + 20) {
                let at = Timestamp::from_second(start + k * 90).unwrap();
                let load = loads[usize::try_from(k).unwrap() % loads.len()];
                profile = recurring::record(&profile, rules, at, load);
            }
            let without = decide(&i);
            let mut remembering = i.clone();
            remembering.behavior.recurrence = Some(rules);
            remembering.memory.recurring = profile;
            let with = decide(&remembering);
            prop_assert!(
                with.desired >= without.desired,
                "the remembered rise lowered {} to {}", without.desired, with.desired
            );
            if let Some(w) = with.write {
                prop_assert!(
                    w <= i.bounds.max.max(i.target.spec_replicas),
                    "wrote {w} above max {}", i.bounds.max
                );
            }
        }

        #[test]
        fn a_constant_signal_never_moves_a_settled_fleet(
            replicas in 1..60i32,
            per_replica in 0.01..100f64,
            up in any_rules(),
            down in any_rules(),
            syncs in 1..40usize,
        ) {
            // Every replica carries exactly the target, sync after sync.
            let mut memory = Memory::default();
            for k in 0..syncs {
                let d = decide(&Input {
                    signal: Signal::Ratio(vec![MetricReading {
                        name: "m".into(),
                        value: Ok(per_replica),
                        target: per_replica,
                        kind: TargetType::Value,
                    }]),
                    target: TargetState {
                        spec_replicas: replicas,
                        ready_replicas: replicas,
                        rollout: None,
                    },
                    bounds: Bounds { min: 1, max: 100 },
                    behavior: Behavior { up: up.clone(), down: down.clone(), max_step: 0, down_pace: None, recurrence: None },
                    startup_seconds: Some(180.0),
                    memory,
                    now: t(15 * k as i64),
                down_waits: None, admitted: None, down_share: None,});
                prop_assert_eq!(d.write, None, "sync {}", k);
                memory = d.memory;
            }
        }

        #[test]
        fn within_the_tolerance_nothing_moves(
            replicas in 1..60i32,
            ratio in 0.9..1.1f64,
        ) {
            let d = decide(&Input {
                signal: Signal::Ratio(vec![MetricReading {
                    name: "m".into(),
                    value: Ok(ratio),
                    target: 1.0,
                    kind: TargetType::Value,
                }]),
                target: TargetState { spec_replicas: replicas, ready_replicas: replicas, rollout: None },
                bounds: Bounds { min: 1, max: 100 },
                behavior: Behavior {
                    up: Rules { tolerance: 0.1, ..Rules::unlimited() },
                    down: Rules { tolerance: 0.1, ..Rules::unlimited() },
                    max_step: 0,
                    down_pace: None,
                    recurrence: None,
                },
                startup_seconds: None,
                memory: Memory::default(),
                now: t(0),
            down_waits: None, admitted: None, down_share: None,});
            prop_assert_eq!(d.write, None);
        }

        #[test]
        fn nothing_measurable_writes_nothing(mut i in any_input()) {
            i.signal = Signal::Ratio(vec![MetricReading {
                name: "m".into(),
                value: Ok(f64::NAN),
                target: 1.0,
                kind: TargetType::Value,
            }]);
            let d = decide(&i);
            let current = i.target.spec_replicas;
            let (low, high) = (i.bounds.min.min(i.bounds.max), i.bounds.max);
            if i.target.rollout.is_some() {
                prop_assert_eq!(d.write, None);
            } else if current > high {
                // Only towards maxReplicas, never past it.
                let w = d.write.unwrap_or(current);
                prop_assert!(w < current && w >= high, "{current} -> {w}, max {high}");
            } else if current > 0 && current < low {
                prop_assert_eq!(d.write, Some(low));
            } else {
                prop_assert_eq!(d.write, None);
                prop_assert_eq!(d.desired, current);
            }
        }
    }
}
