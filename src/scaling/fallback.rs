//! The opt-in fallback: holding on a broken signal is the default, but after enough consecutive
//! syncs without a usable one, a team may rather run at least a known count than whatever the
//! fleet happened to have when the signal went away.

use super::stabilization::{Entry, Hold, record};
use super::types::{Decision, HoldReason, Input, Reason, TargetState};

/// The spec's fallback, in the core's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FallbackRules {
    /// Consecutive syncs without a usable signal before the fallback applies (at least 1).
    pub failure_threshold: u32,
    /// The fewest replicas to run while it applies.
    pub replicas: i32,
}

/// Whether this sync's signal counts towards the fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalHealth {
    /// Something usable was read: the count starts again.
    Usable,
    /// Nothing usable was read.
    Lost,
    /// At zero without an activation query, per-pod metrics have nothing to measure: that is the
    /// expected state, not a loss (and counting it would wake an idle fleet).
    NotExpected,
}

/// How this sync's `decision` counts for `target`; `activation` is, under scale-to-zero, whether
/// the activation query was read. That query stands in for the per-pod metrics only while no
/// replica is Ready (at zero, or woken and starting): those have nothing to measure then. Once a
/// replica serves, the per-pod metrics are the signal, and losing them is a loss even if the
/// router's metric still reads.
pub fn health(decision: &Decision, target: &TargetState, activation: Option<bool>) -> SignalHealth {
    let serving = target.ready_replicas > 0;
    if decision.recommendation.is_some() || (activation == Some(true) && !serving) {
        SignalHealth::Usable
    } else if target.spec_replicas <= 0 && activation.is_none() {
        SignalHealth::NotExpected
    } else {
        SignalHealth::Lost
    }
}

/// `decision` under the fallback, given the syncs without a signal before this one; returns the
/// decision and the count to remember. While the fallback applies the fleet is raised to
/// `replicas` (never above maxReplicas) at once, and that count enters the scale-down window so
/// the first good reading does not drop it in the same instant. Mid-rollout it waits.
pub fn with_fallback(
    decision: Decision,
    rules: &FallbackRules,
    health: SignalHealth,
    before: u32,
    input: &Input,
) -> (Decision, u32) {
    let current = input.target.spec_replicas;
    let syncs = match health {
        SignalHealth::Usable | SignalHealth::NotExpected => return (decision, 0),
        SignalHealth::Lost => before.saturating_add(1),
    };
    // A rollout defers the fallback's raise as it defers every other move (the decision already
    // says so): the count goes on, and the floor applies at the first sync after the rollout if
    // the signal is still lost. A rollout is also when per-pod series come and go.
    if syncs < rules.failure_threshold.max(1) || input.target.rollout.is_some() {
        return (decision, syncs);
    }
    let floor = rules.replicas.min(input.bounds.max).max(0);
    let mut decision = decision;
    decision
        .reasons
        .insert(0, Reason::Held(HoldReason::Fallback { syncs, floor }));
    if current < floor {
        decision.desired = floor;
        decision.write = Some(floor);
        decision.memory.down = record(
            Hold::Highest,
            &decision.memory.down,
            Entry {
                at: input.now,
                replicas: floor,
            },
            input.behavior.down.window_seconds,
        );
    }
    // A larger fleet keeps the decision, which read nothing usable: it holds, and only a fleet
    // above maxReplicas is brought down to it.
    (decision, syncs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::types::Rollout;
    use crate::scaling::{decide, fixture};

    const RULES: FallbackRules = FallbackRules {
        failure_threshold: 3,
        replicas: 4,
    };
    fn input(value: Option<f64>, spec: i32) -> Input {
        fixture::input()
            .value(value)
            .replicas(spec, spec)
            .bounds(1, 6)
            .scale_down_window(300)
            .build()
    }

    fn decision(value: Option<f64>, spec: i32) -> Decision {
        decide(&input(value, spec))
    }

    fn run(value: Option<f64>, spec: i32, before: u32, rules: &FallbackRules) -> (Decision, u32) {
        let i = input(value, spec);
        let d = decide(&i);
        let h = health(&d, &i.target, None);
        with_fallback(d, rules, h, before, &i)
    }

    #[test]
    fn holds_until_the_threshold_then_raises_to_the_floor() {
        let (d, n) = run(None, 2, 0, &RULES);
        assert_eq!((d.write, n), (None, 1));
        let (d, n) = run(None, 2, 1, &RULES);
        assert_eq!((d.write, n), (None, 2));
        let (d, n) = run(None, 2, 2, &RULES);
        assert_eq!((d.write, d.desired, n), (Some(4), 4, 3));
        assert_eq!(
            d.reasons.first(),
            Some(&Reason::Held(HoldReason::Fallback { syncs: 3, floor: 4 }))
        );
        assert_eq!(d.memory.down.last().map(|e| e.replicas), Some(4));
    }

    #[test]
    fn a_fleet_above_max_goes_down_to_it_under_the_fallback_too() {
        // maxReplicas 6 under a fleet of 9, the signal lost for long: down to 6, not held at 9.
        let (d, _) = run(None, 9, 9, &RULES);
        assert_eq!((d.write, d.desired), (Some(6), 6), "{:?}", d.reasons);
    }

    #[test]
    fn never_lowers_and_never_passes_max() {
        let (d, _) = run(None, 5, 9, &RULES);
        assert_eq!(
            (d.write, d.desired),
            (None, 5),
            "a larger fleet is held, not shrunk"
        );
        let big = FallbackRules {
            failure_threshold: 1,
            replicas: 50,
        };
        let (d, _) = run(None, 2, 0, &big);
        assert_eq!(d.write, Some(6), "maxReplicas still rules");
    }

    #[test]
    fn a_rollout_defers_the_raise_and_the_count_goes_on() {
        let mut i = input(None, 2);
        i.target.rollout = Some(Rollout::OldPodsRunning { old: 1 });
        let d = decide(&i);
        let h = health(&d, &i.target, None);
        let (d, n) = with_fallback(d, &RULES, h, 5, &i);
        assert_eq!((d.write, d.desired, n), (None, 2, 6), "{:?}", d.reasons);
        assert_eq!(
            d.reasons,
            vec![Reason::Held(HoldReason::NoUsableMetric)],
            "held for want of a signal, not raised by the fallback (RolloutInProgress says why)"
        );
        // The rollout over, the signal still lost: the floor at once.
        let (d, n) = run(None, 2, n, &RULES);
        assert_eq!((d.write, n), (Some(4), 7));
    }

    #[test]
    fn the_first_good_reading_ends_it() {
        let (d, n) = run(Some(0.5), 4, 7, &RULES);
        assert_eq!(n, 0);
        assert!(
            !d.reasons
                .iter()
                .any(|r| matches!(r, Reason::Held(HoldReason::Fallback { .. })))
        );
    }

    #[test]
    fn at_zero_without_activation_nothing_counts() {
        let d = decision(None, 0);
        let at = |spec, ready| TargetState {
            spec_replicas: spec,
            ready_replicas: ready,
            rollout: None,
        };
        assert_eq!(health(&d, &at(0, 0), None), SignalHealth::NotExpected);
        assert_eq!(health(&d, &at(0, 0), Some(false)), SignalHealth::Lost);
        assert_eq!(health(&d, &at(0, 0), Some(true)), SignalHealth::Usable);
        assert_eq!(
            health(&d, &at(1, 0), Some(true)),
            SignalHealth::Usable,
            "waking"
        );
        let (d, n) = with_fallback(d, &RULES, SignalHealth::NotExpected, 5, &input(None, 0));
        assert_eq!((d.write, n), (None, 0));
    }

    #[test]
    fn a_serving_fleet_that_loses_its_metrics_has_lost_its_signal_whatever_the_router_says() {
        let d = decision(None, 2);
        let serving = TargetState {
            spec_replicas: 2,
            ready_replicas: 2,
            rollout: None,
        };
        assert_eq!(health(&d, &serving, Some(true)), SignalHealth::Lost);
    }
}
