//! Scale to zero and back, on an activation signal that exists while no pod runs.
//!
//! A per-pod query has nothing to measure at zero replicas, so it can never wake a fleet: the
//! activation signal (a router's request rate, a gateway's queue) decides instead. While awake,
//! the fleet keeps at least one replica until the activation signal has stayed at or below its
//! threshold for the idle period, the minimum time awake after a wake-up has passed, and the
//! metrics themselves ask for no more than one replica. A signal that cannot be read never counts
//! as idle: a broken metric does not put a fleet to sleep, and it does not wake one either.

use k8s_openapi::jiff::Timestamp;

use super::behavior::Select;
use super::decision::decide;
use super::recommend::SkipReason;
use super::stabilization::Entry;
use super::types::{
    AwakeWait, Bounds, Decision, Direction, HoldReason, Input, LimitReason, Memory, Reason,
    ZeroReason,
};

/// The spec's scaleToZero, in the core's terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZeroRules {
    /// The activation value above which the fleet is woken (and at or below which it is idle).
    pub threshold: f64,
    /// How long the activation value must stay at or below the threshold before going to zero.
    pub idle_seconds: i64,
    /// How long a woken fleet stays awake at least, whatever the signal.
    pub min_awake_seconds: i64,
}

/// What scale-to-zero remembers between syncs (kept in status, so a restart keeps the timers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ZeroMemory {
    /// Since when the activation value has been at or below the threshold, without a break.
    pub idle_since: Option<Timestamp>,
    /// When this scaler last woke the target from zero.
    pub woke_at: Option<Timestamp>,
}

/// Where the target is in its sleep cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroPhase {
    /// No replica asked for.
    AtZero,
    /// Woken by this scaler; no replica is Ready yet.
    Waking,
    /// At least one replica asked for and serving (or not woken by this scaler).
    Awake,
}

impl ZeroPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AtZero => "AtZero",
            Self::Waking => "Waking",
            Self::Awake => "Awake",
        }
    }
}

/// `input` decided with scale-to-zero: the recommendation of the metrics (`decide`), woken from
/// zero by the activation value, and put to sleep only when every condition of the module holds.
/// `input.bounds.min` is expected to be 0 (admission requires it); `memory` is the previous
/// sync's, and the returned one is to be kept.
pub fn decide_with_zero(
    input: &Input,
    rules: &ZeroRules,
    activation: Result<f64, SkipReason>,
    memory: ZeroMemory,
) -> (Decision, ZeroMemory) {
    let now = input.now;
    let current = input.target.spec_replicas;
    let activation = activation.and_then(|v| {
        if v.is_finite() {
            Ok(v)
        } else {
            Err(SkipReason::NotFinite(v))
        }
    });
    let active = matches!(activation, Ok(v) if v > rules.threshold);
    let idle = matches!(activation, Ok(v) if v <= rules.threshold);
    let awake_floor = Bounds {
        min: input.bounds.min.max(1),
        max: input.bounds.max,
    };
    // maxReplicas 0 pins the fleet at zero: nothing to wake.
    let can_wake = input.bounds.max >= 1;

    // selectPolicy: Disabled forbids a direction whatever asks for it: waking is a scale-up and
    // going to zero the largest scale-down there is.
    let up_disabled = input.behavior.up.select == Select::Disabled;
    let down_disabled = input.behavior.down.select == Select::Disabled;

    if current <= 0 {
        let mut asleep = decide(input);
        let asked = asleep.recommendation.is_some_and(|r| r >= 1);
        if can_wake && (active || asked) && up_disabled {
            asleep
                .reasons
                .push(Reason::Limited(LimitReason::DirectionDisabled {
                    direction: Direction::Up,
                    desired: awake_floor.min.min(awake_floor.max),
                }));
        } else if can_wake && (active || asked) {
            let mut woken = decide(&Input {
                bounds: awake_floor,
                ..input.clone()
            });
            if woken.recommendation.is_none() {
                // The usual case: the per-pod metrics have nothing to measure yet.
                woken = woken_blind(woken, input, awake_floor.min.min(awake_floor.max));
            }
            drop_floor_clamp(&mut woken, input.bounds.min);
            woken.reasons.push(Reason::Zero(ZeroReason::Woke {
                activation,
                threshold: rules.threshold,
            }));
            let woke_at = woken.write.is_some().then_some(now).or(memory.woke_at);
            return (
                woken,
                ZeroMemory {
                    idle_since: None,
                    woke_at,
                },
            );
        }
        // A per-pod metric with nothing to measure is the expected state at zero, not a hold.
        drop_expected_hold(&mut asleep);
        asleep.reasons.insert(
            0,
            Reason::Zero(ZeroReason::AtZero {
                activation,
                threshold: rules.threshold,
            }),
        );
        return (asleep, ZeroMemory::default());
    }

    let idle_since = if idle {
        memory.idle_since.or(Some(now))
    } else {
        None
    };
    let seconds = |since: Timestamp| (now - since).get_seconds().max(0);
    // The wake-up is over once a replica serves and the minimum time awake has passed: a fleet
    // that later has no Ready replica (crashing pods) is not Waking, and is held as any other.
    let woke_at = memory.woke_at.filter(|&woke| {
        input.target.ready_replicas <= 0 || seconds(woke) < rules.min_awake_seconds
    });
    let next = ZeroMemory {
        idle_since,
        woke_at,
    };
    let mut awake = decide(&Input {
        bounds: awake_floor,
        ..input.clone()
    });
    let recommended = awake.recommendation;
    // Only a fleet the metrics find (nearly) empty goes to sleep: the activation signal says there
    // is no new demand, the metrics that the work in flight is done.
    let metrics_allow = recommended.is_some_and(|r| r <= 1);
    let wait = if !idle {
        Some(AwakeWait::Active {
            activation,
            threshold: rules.threshold,
        })
    } else if let Some(since) = idle_since
        && seconds(since) < rules.idle_seconds
    {
        Some(AwakeWait::Idle {
            for_seconds: seconds(since),
            of: rules.idle_seconds,
        })
    } else if let Some(woke) = woke_at
        && seconds(woke) < rules.min_awake_seconds
    {
        Some(AwakeWait::MinAwake {
            for_seconds: seconds(woke),
            of: rules.min_awake_seconds,
        })
    } else {
        None
    };

    // Woken, and no replica Ready yet: the per-pod metrics have nothing to measure so far.
    if let Some(since) = woke_at
        && input.target.ready_replicas <= 0
        && drop_expected_hold(&mut awake)
    {
        awake
            .reasons
            .insert(0, Reason::Zero(ZeroReason::Waking { since }));
    }
    match wait {
        None if metrics_allow && input.target.rollout.is_none() && down_disabled => {
            awake
                .reasons
                .push(Reason::Limited(LimitReason::DirectionDisabled {
                    direction: Direction::Down,
                    desired: 0,
                }));
            (awake, next)
        }
        None if metrics_allow && input.target.rollout.is_none() => {
            (went_to_zero(awake, input, rules), ZeroMemory::default())
        }
        wait => {
            if let (Some(wait), Some(recommended)) = (wait, recommended)
                && drop_floor_clamp(&mut awake, input.bounds.min)
            {
                awake
                    .reasons
                    .push(Reason::Zero(ZeroReason::KeptAwake { recommended, wait }));
            }
            (awake, next)
        }
    }
}

/// The phase after `decision` on a target at `current` replicas with `ready` Ready.
pub fn phase(decision: &Decision, current: i32, ready: i32, memory: &ZeroMemory) -> ZeroPhase {
    let replicas = decision.write.unwrap_or(current);
    if replicas <= 0 {
        ZeroPhase::AtZero
    } else if ready <= 0 && memory.woke_at.is_some() {
        ZeroPhase::Waking
    } else {
        ZeroPhase::Awake
    }
}

/// Removes the hold for want of a metric, where no metric can be expected; says whether there
/// was one.
fn drop_expected_hold(decision: &mut Decision) -> bool {
    let before = decision.reasons.len();
    decision
        .reasons
        .retain(|r| !matches!(r, Reason::Held(HoldReason::NoUsableMetric)));
    decision.reasons.len() != before
}

/// Removes the "raised to minReplicas" that only the awake floor of one replica caused (the
/// spec's own minimum is 0); says whether there was one.
fn drop_floor_clamp(decision: &mut Decision, spec_min: i32) -> bool {
    let before = decision.reasons.len();
    decision.reasons.retain(
        |r| !matches!(r, Reason::Limited(LimitReason::ClampedToMin { min: 1, .. }) if spec_min < 1),
    );
    decision.reasons.len() != before
}

/// Woken on the activation value alone: the smallest fleet allowed, at once.
fn woken_blind(held: Decision, input: &Input, replicas: i32) -> Decision {
    let memory = Memory {
        changes: super::behavior::remember(
            &input.memory.changes,
            &input.behavior,
            input.target.spec_replicas,
            replicas,
            input.now,
        ),
        ..held.memory
    };
    Decision {
        desired: replicas,
        write: Some(replicas),
        reasons: Vec::new(),
        memory,
        ..held
    }
}

/// The whole fleet goes at once: the idle period was its stabilization window. The windows start
/// afresh at zero, and the change is remembered for the rate policies.
fn went_to_zero(awake: Decision, input: &Input, rules: &ZeroRules) -> Decision {
    let current = input.target.spec_replicas;
    let entry = Entry {
        at: input.now,
        replicas: 0,
    };
    let memory = Memory {
        down: if input.behavior.down.window_seconds > 0 {
            vec![entry]
        } else {
            Vec::new()
        },
        up: Vec::new(),
        changes: super::behavior::remember(
            &input.memory.changes,
            &input.behavior,
            current,
            0,
            input.now,
        ),
        samples: awake.memory.samples,
        admissions: awake.memory.admissions,
        recurring: awake.memory.recurring,
    };
    Decision {
        recommendation: Some(0),
        desired: 0,
        write: Some(0),
        reasons: vec![Reason::Zero(ZeroReason::WentToZero {
            idle_seconds: rules.idle_seconds,
        })],
        metrics: awake.metrics,
        memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::{MetricReading, Signal, TargetType, fixture};

    const RULES: ZeroRules = ZeroRules {
        threshold: 0.0,
        idle_seconds: 300,
        min_awake_seconds: 600,
    };

    fn at(seconds: i64) -> Timestamp {
        fixture::time(seconds)
    }

    /// A per-pod metric (target 1 per replica) that is unreadable at zero, like a vLLM query.
    fn input(spec: i32, ready: i32, per_pod: Option<f64>, now: i64) -> Input {
        fixture::input()
            .value(per_pod)
            .replicas(spec, ready)
            .bounds(0, 8)
            .at(now)
            .build()
    }

    #[test]
    fn at_zero_the_activation_wakes_what_a_per_pod_metric_cannot() {
        let i = input(0, 0, None, 0);
        let (d, m) = decide_with_zero(&i, &RULES, Ok(0.0), ZeroMemory::default());
        assert_eq!(
            (d.desired, d.write),
            (0, None),
            "idle activation: stays at zero"
        );
        assert_eq!(
            d.reasons,
            vec![Reason::Zero(ZeroReason::AtZero {
                activation: Ok(0.0),
                threshold: 0.0
            })],
            "no hold for want of a metric: at zero there is none to want"
        );
        assert_eq!(m, ZeroMemory::default());

        let (d, m) = decide_with_zero(&i, &RULES, Ok(2.5), ZeroMemory::default());
        assert_eq!(d.write, Some(1), "woken to one replica");
        assert_eq!(m.woke_at, Some(at(0)));
        assert!(
            !d.reasons
                .iter()
                .any(|r| matches!(r, Reason::Limited(LimitReason::ClampedToMin { .. }))),
            "the floor of one is not minReplicas: {:?}",
            d.reasons
        );
        assert_eq!(phase(&d, 0, 0, &m), ZeroPhase::Waking);

        // The next sync: asked for, not Ready, no per-pod series yet.
        let (d, _) = decide_with_zero(&input(1, 0, None, 15), &RULES, Ok(2.5), m);
        assert_eq!(d.write, None);
        assert_eq!(
            d.reasons,
            vec![Reason::Zero(ZeroReason::Waking { since: at(0) })]
        );
    }

    #[test]
    fn a_wake_up_ends_once_a_replica_served_and_the_minimum_time_passed() {
        let woke = ZeroMemory {
            idle_since: None,
            woke_at: Some(at(0)),
        };
        // Serving, but within the minimum time awake: the wake-up is remembered.
        let (_, m) = decide_with_zero(&input(1, 1, Some(0.5), 100), &RULES, Ok(2.0), woke);
        assert_eq!(m.woke_at, Some(at(0)));
        // Serving past it: forgotten.
        let (_, m) = decide_with_zero(&input(1, 1, Some(0.5), 5_000), &RULES, Ok(2.0), woke);
        assert_eq!(m.woke_at, None);
        // Hours later the pods crash: no longer Waking, held for want of a metric like any fleet.
        let (d, m) = decide_with_zero(&input(1, 0, None, 9_000), &RULES, Ok(2.0), m);
        assert_eq!(phase(&d, 1, 0, &m), ZeroPhase::Awake);
        assert!(
            d.reasons
                .contains(&Reason::Held(HoldReason::NoUsableMetric)),
            "{:?}",
            d.reasons
        );
        // Still starting past the minimum time (a slow cold start): still Waking.
        let (d, m) = decide_with_zero(&input(1, 0, None, 5_000), &RULES, Ok(2.0), woke);
        assert_eq!(phase(&d, 1, 0, &m), ZeroPhase::Waking);
    }

    #[test]
    fn a_broken_activation_never_wakes_and_never_sleeps() {
        let broken = || {
            Err(SkipReason::Unavailable(fixture::unreadable(
                "connection refused",
            )))
        };
        let (d, _) = decide_with_zero(
            &input(0, 0, None, 0),
            &RULES,
            broken(),
            ZeroMemory::default(),
        );
        assert_eq!(d.write, None);
        // Awake, idle metrics, every timer long past: still no sleep while activation is broken.
        let memory = ZeroMemory {
            idle_since: Some(at(0)),
            woke_at: Some(at(0)),
        };
        let (d, m) = decide_with_zero(&input(1, 1, Some(0.0), 5_000), &RULES, broken(), memory);
        assert_eq!(d.write, None);
        assert_eq!(d.desired, 1);
        assert_eq!(m.idle_since, None, "the idle period starts again");
        assert!(d.reasons.iter().any(|r| matches!(
            r,
            Reason::Zero(ZeroReason::KeptAwake {
                wait: AwakeWait::Active { .. },
                ..
            })
        )));
    }

    #[test]
    fn a_recommendation_at_zero_wakes_too() {
        // An AverageValue router queue is readable at zero and asks for 3.
        let mut i = input(0, 0, None, 0);
        i.signal = Signal::Ratio(vec![MetricReading {
            name: "queue".into(),
            value: Ok(12.0),
            target: 4.0,
            kind: TargetType::AverageValue,
        }]);
        let (d, _) = decide_with_zero(&i, &RULES, Ok(0.0), ZeroMemory::default());
        assert_eq!(d.write, Some(3));
    }

    #[test]
    fn a_disabled_direction_neither_wakes_nor_goes_to_zero() {
        let disabled_direction = |d: &Decision, direction| {
            d.reasons.iter().any(|r| {
                matches!(r, Reason::Limited(LimitReason::DirectionDisabled { direction: x, .. }) if *x == direction)
            })
        };
        // At zero with demand, scale-ups disabled: it stays at zero and says why.
        let mut i = input(0, 0, None, 0);
        i.behavior.up.select = Select::Disabled;
        let (d, m) = decide_with_zero(&i, &RULES, Ok(2.5), ZeroMemory::default());
        assert_eq!(d.write, None, "{:?}", d.reasons);
        assert!(disabled_direction(&d, Direction::Up), "{:?}", d.reasons);
        assert_eq!(m.woke_at, None);

        // One idle replica past every wait, scale-downs disabled: it stays at one.
        let idle = ZeroMemory {
            idle_since: Some(at(0)),
            woke_at: None,
        };
        let mut i = input(1, 1, Some(0.0), 10_000);
        i.behavior.down.select = Select::Disabled;
        let (d, m) = decide_with_zero(&i, &RULES, Ok(0.0), idle);
        assert_eq!(d.write, None, "{:?}", d.reasons);
        assert!(disabled_direction(&d, Direction::Down), "{:?}", d.reasons);
        assert_eq!(m.idle_since, Some(at(0)), "the idle period goes on");
        // The same without Disabled goes to zero.
        let (d, _) = decide_with_zero(&input(1, 1, Some(0.0), 10_000), &RULES, Ok(0.0), idle);
        assert_eq!(d.write, Some(0));
    }

    #[test]
    fn max_replicas_zero_keeps_it_asleep() {
        let mut i = input(0, 0, None, 0);
        i.bounds.max = 0;
        let (d, _) = decide_with_zero(&i, &RULES, Ok(9.0), ZeroMemory::default());
        assert_eq!(d.write, None);
    }

    /// Follows one wake-up through a signal that drops at once: the fleet stays at one for the
    /// minimum time awake, then for the idle period, then goes to zero.
    #[test]
    fn sleeps_only_after_idle_period_and_min_awake() {
        let mut memory = ZeroMemory::default();
        let (d, m) = decide_with_zero(&input(0, 0, None, 0), &RULES, Ok(1.0), memory);
        assert_eq!(d.write, Some(1));
        memory = m;
        let mut slept_at = None;
        for t in (15..=1_200).step_by(15) {
            let (d, m) = decide_with_zero(&input(1, 1, Some(0.0), t), &RULES, Ok(0.0), memory);
            memory = m;
            if d.write == Some(0) {
                slept_at = Some(t);
                assert_eq!(
                    d.reasons,
                    vec![Reason::Zero(ZeroReason::WentToZero { idle_seconds: 300 })]
                );
                break;
            }
            assert_eq!(d.desired, 1, "at {t}s");
            let wait = d.reasons.iter().find_map(|r| match r {
                Reason::Zero(ZeroReason::KeptAwake { wait, .. }) => Some(wait.clone()),
                _ => None,
            });
            match wait {
                Some(AwakeWait::Idle { .. }) => assert!(t < 15 + 300, "at {t}s"),
                Some(AwakeWait::MinAwake { of, .. }) => assert_eq!(of, 600),
                other => panic!("at {t}s: {other:?}"),
            }
        }
        // Idle from 15 s: idle long enough at 315 s, but awake only since 0 s: 600 s.
        assert_eq!(slept_at, Some(600));
    }

    #[test]
    fn a_busy_fleet_does_not_sleep_on_an_idle_activation() {
        let memory = ZeroMemory {
            idle_since: Some(at(0)),
            woke_at: None,
        };
        // Per-pod load 1.5 on 2 replicas asks for 3.
        let (d, _) = decide_with_zero(&input(2, 2, Some(1.5), 5_000), &RULES, Ok(0.0), memory);
        assert_eq!(d.desired, 3);
        assert_ne!(d.write, Some(0));
    }

    #[test]
    fn the_idle_period_restarts_when_demand_returns() {
        let memory = ZeroMemory {
            idle_since: Some(at(0)),
            woke_at: None,
        };
        let (_, m) = decide_with_zero(&input(1, 1, Some(0.0), 200), &RULES, Ok(3.0), memory);
        assert_eq!(m.idle_since, None);
        let (d, m) = decide_with_zero(&input(1, 1, Some(0.0), 215), &RULES, Ok(0.0), m);
        assert_eq!(m.idle_since, Some(at(215)));
        assert_eq!(d.write, None);
    }
}
