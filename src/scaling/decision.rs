//! One sync's decision: from readings and the target's state to the replica count to write.

use k8s_openapi::jiff::Timestamp;

use super::recommend::{SkipReason, ratio_recommendation};
use super::stabilization::{Entry, record, stabilized};
use super::step::cap_scale_down;

/// The name under which an absolute decision appears among the metrics (status, cache, events).
pub const DECISION_METRIC: &str = "decision";

/// The replica bounds of the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub min: i32,
    pub max: i32,
}

/// scaleDown's damping knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScaleDownPolicy {
    pub window_seconds: i32,
    /// 0 = no limit.
    pub max_step: i32,
}

/// What the target looks like right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetState {
    /// spec.replicas: the count this operator writes.
    pub spec_replicas: i32,
    /// status.readyReplicas: the serving capacity the ratio is computed from.
    pub ready_replicas: i32,
    /// Why the target is mid-rollout, if it is.
    pub rollout: Option<String>,
}

/// One metric's reading at this sync.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricReading {
    pub name: String,
    pub value: Result<f64, SkipReason>,
    pub target: f64,
}

/// Where the recommendation comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// Per-replica metrics and the HPA ratio; the largest recommendation wins.
    Ratio(Vec<MetricReading>),
    /// An absolute replica count (a decision server), or why there is none.
    Absolute(Result<i32, String>),
}

/// Everything one decision depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub signal: Signal,
    pub target: TargetState,
    pub bounds: Bounds,
    pub scale_down: ScaleDownPolicy,
    pub history: Vec<Entry>,
    pub now: Timestamp,
}

/// What one metric contributed.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricOutcome {
    pub name: String,
    pub value: Option<f64>,
    pub recommendation: Result<i32, SkipReason>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum HoldReason {
    /// Every metric was skipped: the fleet stays where it is.
    NoUsableMetric,
    /// The decision server gave no usable count.
    SignalUnavailable(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum DeferReason {
    /// The target is mid-rollout; both directions wait.
    Rollout(String),
    /// A scale-down waits until every requested replica is ready.
    NotSettled { ready: i32, spec: i32 },
}

#[derive(Debug, Clone, PartialEq)]
pub enum LimitReason {
    ClampedToMin {
        recommended: i32,
        min: i32,
    },
    ClampedToMax {
        recommended: i32,
        max: i32,
    },
    /// Scale-down held at the highest recommendation within the window.
    Stabilized {
        recommended: i32,
        held_at: i32,
        window_seconds: i32,
    },
    /// This step removes at most `max_step` replicas on the way to `desired`.
    StepCapped {
        desired: i32,
        written: i32,
        max_step: i32,
    },
}

/// Why a sync did what it did; status conditions and events are rendered from these.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    Held(HoldReason),
    Deferred(DeferReason),
    Limited(LimitReason),
}

/// The outcome of one sync: every number and every reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The largest per-metric (or the absolute) recommendation, before any rail; `None` when
    /// nothing could be measured.
    pub recommendation: Option<i32>,
    /// Destination after clamping and stabilization, before the step cap (status.desiredReplicas).
    pub desired: i32,
    /// spec.replicas to write now; `None` leaves the target untouched.
    pub write: Option<i32>,
    pub reasons: Vec<Reason>,
    pub metrics: Vec<MetricOutcome>,
    /// Stabilization history to persist.
    pub history: Vec<Entry>,
}

impl Decision {
    /// Replicas removed by this sync's write (the pods to pick victims for).
    pub fn removed(&self, target: &TargetState) -> i32 {
        self.write
            .map_or(0, |w| target.spec_replicas.saturating_sub(w).max(0))
    }
}

/// Decides one sync.
pub fn decide(input: &Input) -> Decision {
    let Input {
        signal,
        target,
        bounds,
        scale_down,
        history,
        now,
    } = input;
    let current = target.spec_replicas;
    let mut reasons = Vec::new();

    let (recommendation, metrics) = match signal {
        Signal::Ratio(readings) => {
            let metrics: Vec<MetricOutcome> = readings
                .iter()
                .map(|r| MetricOutcome {
                    name: r.name.clone(),
                    value: r.value.as_ref().ok().copied(),
                    recommendation: r
                        .value
                        .clone()
                        .and_then(|v| ratio_recommendation(target.ready_replicas, v, r.target)),
                })
                .collect();
            let best = metrics
                .iter()
                .filter_map(|m| m.recommendation.as_ref().ok().copied())
                .max();
            if best.is_none() {
                reasons.push(Reason::Held(HoldReason::NoUsableMetric));
            }
            (best, metrics)
        }
        Signal::Absolute(Ok(count)) if *count >= 0 => {
            let outcome = MetricOutcome {
                name: DECISION_METRIC.to_owned(),
                value: Some(f64::from(*count)),
                recommendation: Ok(*count),
            };
            (Some(*count), vec![outcome])
        }
        Signal::Absolute(result) => {
            let why = match result {
                Ok(count) => format!("the decision is a negative replica count ({count})"),
                Err(why) => why.clone(),
            };
            reasons.push(Reason::Held(HoldReason::SignalUnavailable(why.clone())));
            let outcome = MetricOutcome {
                name: DECISION_METRIC.to_owned(),
                value: None,
                recommendation: Err(SkipReason::Unavailable(why)),
            };
            (None, vec![outcome])
        }
    };

    let Some(recommended) = recommendation else {
        // Nothing measurable: hold, and remember nothing new.
        return Decision {
            recommendation,
            desired: current,
            write: None,
            reasons,
            metrics,
            history: history.clone(),
        };
    };

    let clamped = recommended.clamp(bounds.min.min(bounds.max), bounds.max);
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

    // History recorded under an older, higher maxReplicas must not hold the fleet above today's.
    let desired = stabilized(clamped, current, history, scale_down.window_seconds, *now)
        .min(bounds.max.max(clamped));
    if desired > clamped {
        reasons.push(Reason::Limited(LimitReason::Stabilized {
            recommended: clamped,
            held_at: desired,
            window_seconds: scale_down.window_seconds,
        }));
    }
    let mut new_history = record(
        history,
        Entry {
            at: *now,
            replicas: clamped,
        },
        scale_down.window_seconds,
    );

    let mut write = None;
    if desired != current {
        if let Some(why) = &target.rollout {
            reasons.push(Reason::Deferred(DeferReason::Rollout(why.clone())));
        } else if desired < current && target.ready_replicas != current {
            reasons.push(Reason::Deferred(DeferReason::NotSettled {
                ready: target.ready_replicas,
                spec: current,
            }));
        } else {
            let step = cap_scale_down(current, desired, scale_down.max_step);
            if step != desired {
                reasons.push(Reason::Limited(LimitReason::StepCapped {
                    desired,
                    written: step,
                    max_step: scale_down.max_step,
                }));
            }
            write = Some(step);
        }
    }

    if let Some(written) = write
        && written < current
    {
        // The window restarts at the new count: the next step down waits a full window.
        new_history = record(
            &[],
            Entry {
                at: *now,
                replicas: written,
            },
            scale_down.window_seconds,
        );
    }

    Decision {
        recommendation,
        desired,
        write,
        reasons,
        metrics,
        history: new_history,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn metric(name: &str, value: f64, target: f64) -> MetricReading {
        MetricReading {
            name: name.to_owned(),
            value: Ok(value),
            target,
        }
    }

    fn skipped(name: &str, why: &str) -> MetricReading {
        MetricReading {
            name: name.to_owned(),
            value: Err(SkipReason::Unavailable(why.to_owned())),
            target: 1.0,
        }
    }

    fn settled(replicas: i32) -> TargetState {
        TargetState {
            spec_replicas: replicas,
            ready_replicas: replicas,
            rollout: None,
        }
    }

    fn input(signal: Signal, target: TargetState, min: i32, max: i32) -> Input {
        Input {
            signal,
            target,
            bounds: Bounds { min, max },
            scale_down: ScaleDownPolicy::default(),
            history: Vec::new(),
            now: t(0),
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
                rollout: Some("2 of 3 replicas updated".into()),
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
        let starting = TargetState {
            spec_replicas: 4,
            ready_replicas: 2,
            rollout: None,
        };
        let down = decide(&input(
            Signal::Ratio(vec![metric("q", 0.0, 1.0)]),
            starting.clone(),
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
            starting,
            1,
            10,
        ));
        assert_eq!(up.write, Some(10));
    }

    #[test]
    fn zero_ready_is_not_healthy() {
        // Pods requested but none ready: the baseline recommends 1, but that scale-down must wait.
        let target = TargetState {
            spec_replicas: 3,
            ready_replicas: 0,
            rollout: None,
        };
        let d = decide(&input(
            Signal::Ratio(vec![metric("q", 0.5, 1.0)]),
            target,
            0,
            10,
        ));
        assert_eq!((d.desired, d.write), (1, None));
    }

    /// Runs syncs every `period` seconds with a fixed metric, the fleet settling instantly.
    fn walk(
        start: i32,
        value: f64,
        policy: ScaleDownPolicy,
        period: i64,
        until: i64,
    ) -> Vec<(i64, i32)> {
        let mut spec = start;
        let mut history = Vec::new();
        let mut writes = Vec::new();
        let mut now = 0;
        while now <= until {
            let d = decide(&Input {
                signal: Signal::Ratio(vec![metric("q", value, 1.0)]),
                target: settled(spec),
                bounds: Bounds { min: 1, max: 10 },
                scale_down: policy,
                history: history.clone(),
                now: t(now),
            });
            if let Some(w) = d.write {
                writes.push((now, w));
                spec = w;
            }
            history = d.history;
            now += period;
        }
        writes
    }

    #[test]
    fn without_a_window_the_cap_walks_down_one_step_per_sync() {
        let writes = walk(
            5,
            0.0,
            ScaleDownPolicy {
                window_seconds: 0,
                max_step: 2,
            },
            15,
            60,
        );
        assert_eq!(writes, vec![(0, 3), (15, 1)]);
        let writes = walk(
            10,
            0.0,
            ScaleDownPolicy {
                window_seconds: 0,
                max_step: 2,
            },
            15,
            120,
        );
        assert_eq!(
            writes.iter().map(|w| w.1).collect::<Vec<_>>(),
            [8, 6, 4, 2, 1]
        );
    }

    #[test]
    fn with_a_window_each_step_down_waits_a_full_window() {
        // Window 300 s, cap 2, settled at 5, metric 0: 5 -> 3 at once, then 3 until a window
        // after the first sync that recommended fewer (15 s).
        let writes = walk(
            5,
            0.0,
            ScaleDownPolicy {
                window_seconds: 300,
                max_step: 2,
            },
            15,
            700,
        );
        assert_eq!(writes, vec![(0, 3), (315, 1)]);
    }

    #[test]
    fn stabilization_pins_the_fleet_then_releases_it() {
        // 8 recommended at 0; from 15 on the metric says 2. The 8 counts until the sync that
        // replaced it, so the fleet is held until a window after 15.
        let policy = ScaleDownPolicy {
            window_seconds: 180,
            max_step: 0,
        };
        let high = decide(&Input {
            signal: Signal::Ratio(vec![metric("q", 1.0, 1.0)]),
            target: settled(8),
            bounds: Bounds { min: 1, max: 10 },
            scale_down: policy,
            history: Vec::new(),
            now: t(0),
        });
        assert_eq!(high.write, None);
        let mut history = high.history;
        for now in (15..=180).step_by(15) {
            let d = decide(&Input {
                signal: Signal::Ratio(vec![metric("q", 0.25, 1.0)]),
                target: settled(8),
                bounds: Bounds { min: 1, max: 10 },
                scale_down: policy,
                history: history.clone(),
                now: t(now),
            });
            assert_eq!((d.desired, d.write), (8, None), "held at {now}s");
            assert!(d.reasons.iter().any(|r| matches!(
                r,
                Reason::Limited(LimitReason::Stabilized { held_at: 8, .. })
            )));
            history = d.history;
        }
        let released = decide(&Input {
            signal: Signal::Ratio(vec![metric("q", 0.25, 1.0)]),
            target: settled(8),
            bounds: Bounds { min: 1, max: 10 },
            scale_down: policy,
            history,
            now: t(195),
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
            Signal::Absolute(Err("server down".into())),
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
        i.scale_down.window_seconds = 300;
        i.history = vec![Entry {
            at: t(-10),
            replicas: 8,
        }];
        let d = decide(&i);
        assert_eq!((d.desired, d.write), (3, Some(3)));
    }

    #[test]
    fn desired_is_the_destination_and_write_the_step() {
        let mut i = input(
            Signal::Ratio(vec![metric("q", 0.0, 1.0)]),
            settled(10),
            1,
            10,
        );
        i.scale_down.max_step = 2;
        let d = decide(&i);
        assert_eq!((d.desired, d.write), (1, Some(8)));
        assert_eq!(d.removed(&i.target), 2);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn any_input() -> impl Strategy<Value = Input> {
        (
            0..50i32,
            0..50i32,
            0..60i32,
            0..60i32,
            proptest::collection::vec(prop_oneof![Just(f64::NAN), 0.0..1e4f64, Just(1e300)], 0..4),
            0.01..100f64,
            0..600i32,
            0..5i32,
            proptest::collection::vec((0..600i64, 0..60i32), 0..10),
            any::<bool>(),
        )
            .prop_map(
                |(min, span, spec, ready, values, target, window, step, hist, rollout)| Input {
                    signal: Signal::Ratio(
                        values
                            .into_iter()
                            .map(|v| MetricReading {
                                name: "m".into(),
                                value: Ok(v),
                                target,
                            })
                            .collect(),
                    ),
                    target: TargetState {
                        spec_replicas: spec,
                        ready_replicas: ready,
                        rollout: rollout.then(|| "rolling".to_owned()),
                    },
                    bounds: Bounds {
                        min,
                        max: min + span,
                    },
                    scale_down: ScaleDownPolicy {
                        window_seconds: window,
                        max_step: step,
                    },
                    history: {
                        let mut h: Vec<Entry> = hist
                            .into_iter()
                            .map(|(s, r)| Entry {
                                at: Timestamp::from_second(1_800_000_000 + s).unwrap(),
                                replicas: r,
                            })
                            .collect();
                        h.sort_by_key(|e| e.at);
                        h
                    },
                    now: Timestamp::from_second(1_800_000_600).unwrap(),
                },
            )
    }

    proptest! {
        #[test]
        fn a_written_count_is_within_bounds_or_a_capped_step_toward_them(i in any_input()) {
            let d = decide(&i);
            if let Some(w) = d.write {
                let current = i.target.spec_replicas;
                if w < current {
                    // A scale-down never goes below the destination, which is within bounds.
                    prop_assert!(w >= d.desired);
                    prop_assert!(d.desired >= i.bounds.min && d.desired <= i.bounds.max);
                } else {
                    prop_assert!(w >= i.bounds.min && w <= i.bounds.max);
                }
            }
        }

        #[test]
        fn a_step_never_removes_more_than_the_cap(i in any_input()) {
            let d = decide(&i);
            if i.scale_down.max_step > 0 {
                prop_assert!(d.removed(&i.target) <= i.scale_down.max_step);
            }
        }

        #[test]
        fn scale_up_is_never_delayed(i in any_input()) {
            let d = decide(&i);
            let current = i.target.spec_replicas;
            if let Some(rec) = d.recommendation {
                let clamped = rec.clamp(i.bounds.min, i.bounds.max);
                if clamped > current && i.target.rollout.is_none() {
                    prop_assert_eq!(d.write, Some(clamped));
                }
            }
        }

        #[test]
        fn nothing_measurable_writes_nothing(mut i in any_input()) {
            i.signal = Signal::Ratio(vec![MetricReading { name: "m".into(), value: Ok(f64::NAN), target: 1.0 }]);
            let d = decide(&i);
            prop_assert_eq!(d.write, None);
            prop_assert_eq!(d.desired, i.target.spec_replicas);
        }
    }
}
