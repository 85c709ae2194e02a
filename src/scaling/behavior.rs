//! `behavior`, as in `autoscaling/v2`: per direction a tolerance, a stabilization window and rate
//! policies (Pods or Percent per period, combined by selectPolicy). The arithmetic follows the
//! HPA controller's (`calculateScaleUpLimitWithScalingRules` and its scale-down twin), so a rule
//! copied from an HPA or a KEDA ScaledObject means the same thing here.

use std::fmt;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::recurring::Recurrence;

/// What a rate policy counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// At most `value` replicas per period.
    Pods,
    /// At most `value` percent of the replicas at the start of the period.
    Percent,
}

/// One rate policy: at most `value` (pods or percent) per `period_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RatePolicy {
    pub kind: PolicyKind,
    pub value: i32,
    pub period_seconds: i32,
}

impl fmt::Display for RatePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            PolicyKind::Pods => write!(f, "Pods {}/{}s", self.value, self.period_seconds),
            PolicyKind::Percent => write!(f, "Percent {}%/{}s", self.value, self.period_seconds),
        }
    }
}

/// How several policies combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Select {
    /// The policy that allows the largest change.
    #[default]
    Max,
    /// The policy that allows the smallest change.
    Min,
    /// No change in this direction at all.
    Disabled,
}

/// The rules of one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// Recommendations of the last this many seconds are all consulted: scale-up goes no higher
    /// than the lowest of them, scale-down no lower than the highest. 0 = off.
    pub window_seconds: i32,
    /// A change of less than this fraction of the current count is not made.
    pub tolerance: f64,
    /// No policy: no rate limit.
    pub policies: Vec<RatePolicy>,
    pub select: Select,
}

impl Rules {
    /// No window, no tolerance, no rate limit.
    pub fn unlimited() -> Self {
        Self {
            window_seconds: 0,
            tolerance: 0.0,
            policies: Vec::new(),
            select: Select::Max,
        }
    }

    fn longest_period(&self) -> i64 {
        self.policies
            .iter()
            .map(|p| i64::from(p.period_seconds))
            .max()
            .unwrap_or(0)
    }
}

/// Both directions, plus the scale-down step cap of the original API (`maxStepReplicas`: at
/// most this many replicas removed by one write, the same as a Pods policy whose period is a
/// single sync).
#[derive(Debug, Clone, PartialEq)]
pub struct Behavior {
    pub up: Rules,
    pub down: Rules,
    /// 0 = no cap.
    pub max_step: i32,
    /// A pace every scale-down also keeps, whatever the policies and `selectPolicy` allow (set by
    /// the objective stage, not by the spec).
    pub down_pace: Option<RatePolicy>,
    /// Demand that recurs each period, remembered and started ahead of (spec).
    pub recurrence: Option<Recurrence>,
}

impl Behavior {
    /// No damping anywhere: the ratio's answer is written as it is.
    pub fn unlimited() -> Self {
        Self {
            up: Rules::unlimited(),
            down: Rules::unlimited(),
            max_step: 0,
            down_pace: None,
            recurrence: None,
        }
    }

    /// Only a scale-down window and step cap, as the API had before behavior.
    pub fn scale_down(window_seconds: i32, max_step: i32) -> Self {
        Self {
            down: Rules {
                window_seconds,
                ..Rules::unlimited()
            },
            max_step,
            ..Self::unlimited()
        }
    }
}

/// A change the controller made: `replicas` added (positive) or removed (negative) at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub at: Timestamp,
    pub replicas: i32,
}

/// Changes kept at most (and persisted in status).
pub const MAX_CHANGES: usize = 64;

fn within(at: Timestamp, now: Timestamp, period_seconds: i64) -> bool {
    now.duration_since(at) < SignedDuration::from_secs(period_seconds)
}

/// The replicas at the start of a period: the current count before the changes made inside it
/// (both directions, as the HPA counts them).
fn period_start(current: i32, changes: &[Change], now: Timestamp, period_seconds: i32) -> i64 {
    let changed: i64 = changes
        .iter()
        .filter(|c| within(c.at, now, i64::from(period_seconds)))
        .map(|c| i64::from(c.replicas))
        .sum();
    i64::from(current) - changed
}

/// The most replicas `rules` allow now, and the policy that set the limit (`None` when there is
/// no policy, so no limit).
pub fn scale_up_limit(
    current: i32,
    rules: &Rules,
    changes: &[Change],
    now: Timestamp,
) -> (i32, Option<RatePolicy>) {
    limit(true, current, rules, changes, now)
}

/// The fewest replicas `rules` allow now, and the policy that set the limit.
pub fn scale_down_limit(
    current: i32,
    rules: &Rules,
    changes: &[Change],
    now: Timestamp,
) -> (i32, Option<RatePolicy>) {
    limit(false, current, rules, changes, now)
}

/// The fewest replicas `pace` allows now: it removes at most its share of the replicas at the
/// start of its period.
pub fn paced_limit(current: i32, pace: RatePolicy, changes: &[Change], now: Timestamp) -> i32 {
    let rules = Rules {
        policies: vec![pace],
        ..Rules::unlimited()
    };
    limit(false, current, &rules, changes, now).0
}

/// The HPA's `calculateScaleUpLimitWithScalingRules` (`up`) and its scale-down twin: each policy
/// proposes a limit from the replicas at the start of its period; `Max` keeps the one that allows
/// the largest change, `Min` the smallest. A limit never points the wrong way.
fn limit(
    up: bool,
    current: i32,
    rules: &Rules,
    changes: &[Change],
    now: Timestamp,
) -> (i32, Option<RatePolicy>) {
    if rules.select == Select::Disabled {
        return (current, None);
    }
    // Whether limit `a` allows a larger change than `b`.
    let allows_more = |a: i64, b: i64| if up { a > b } else { a < b };
    let mut best: Option<(i64, RatePolicy)> = None;
    for policy in &rules.policies {
        let start = period_start(current, changes, now, policy.period_seconds);
        let fraction = f64::from(policy.value) / 100.0;
        let proposed = match (up, policy.kind) {
            (true, PolicyKind::Pods) => start + i64::from(policy.value),
            // Rounded up, so that a small percentage can still add a pod.
            (true, PolicyKind::Percent) => (start as f64 * (1.0 + fraction)).ceil() as i64,
            (false, PolicyKind::Pods) => start - i64::from(policy.value),
            // Truncated, as the HPA does.
            (false, PolicyKind::Percent) => (start as f64 * (1.0 - fraction)) as i64,
        };
        let better = match best {
            None => true,
            Some((b, _)) if rules.select == Select::Max => allows_more(proposed, b),
            Some((b, _)) => allows_more(b, proposed),
        };
        if better {
            best = Some((proposed, *policy));
        }
    }
    match best {
        None if up => (i32::MAX, None),
        None => (i32::MIN, None),
        Some((limit, policy)) if up => (to_i32(limit.max(i64::from(current))), Some(policy)),
        Some((limit, policy)) => (to_i32(limit.min(i64::from(current))), Some(policy)),
    }
}

/// The changes to keep after writing `written` over `current` at `now`: those still inside the
/// longest period of either direction, and this one.
pub fn remember(
    changes: &[Change],
    behavior: &Behavior,
    current: i32,
    written: i32,
    now: Timestamp,
) -> Vec<Change> {
    let longest = behavior
        .up
        .longest_period()
        .max(behavior.down.longest_period())
        .max(
            behavior
                .down_pace
                .map_or(0, |p| i64::from(p.period_seconds)),
        );
    let mut kept: Vec<Change> = changes
        .iter()
        .copied()
        .filter(|c| longest > 0 && within(c.at, now, longest))
        .collect();
    let delta = i64::from(written) - i64::from(current);
    if delta != 0 && longest > 0 {
        kept.push(Change {
            at: now,
            replicas: to_i32(delta),
        });
    }
    if kept.len() > MAX_CHANGES {
        // The oldest go first; merged into the next so the period sums stay right.
        let surplus = kept.len() - MAX_CHANGES;
        let folded: i64 = kept[..=surplus].iter().map(|c| i64::from(c.replicas)).sum();
        kept[surplus].replicas = to_i32(folded);
        kept.drain(..surplus);
    }
    kept
}

fn to_i32(v: i64) -> i32 {
    i32::try_from(v.clamp(i64::from(i32::MIN), i64::from(i32::MAX))).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::fixture::t;

    fn pods(value: i32, period_seconds: i32) -> RatePolicy {
        RatePolicy {
            kind: PolicyKind::Pods,
            value,
            period_seconds,
        }
    }

    fn percent(value: i32, period_seconds: i32) -> RatePolicy {
        RatePolicy {
            kind: PolicyKind::Percent,
            value,
            period_seconds,
        }
    }

    fn rules(policies: Vec<RatePolicy>, select: Select) -> Rules {
        Rules {
            policies,
            select,
            ..Rules::unlimited()
        }
    }

    #[test]
    fn the_hpa_default_scale_up_doubles_or_adds_four() {
        let up = rules(vec![percent(100, 15), pods(4, 15)], Select::Max);
        assert_eq!(scale_up_limit(10, &up, &[], t(0)).0, 20);
        assert_eq!(scale_up_limit(1, &up, &[], t(0)).0, 5);
        let min = Rules {
            select: Select::Min,
            ..up.clone()
        };
        assert_eq!(scale_up_limit(10, &min, &[], t(0)), (14, Some(pods(4, 15))));
    }

    #[test]
    fn changes_inside_the_period_count_against_it() {
        let up = rules(vec![pods(4, 60)], Select::Max);
        let changes = [Change {
            at: t(0),
            replicas: 3,
        }];
        // 3 of the 4 were added 30 s ago, from 5.
        assert_eq!(scale_up_limit(8, &up, &changes, t(30)).0, 9);
        // A minute later the period has passed.
        assert_eq!(scale_up_limit(8, &up, &changes, t(60)).0, 12);
    }

    #[test]
    fn scale_down_percent_truncates_and_max_allows_the_most() {
        let down = rules(vec![percent(50, 60), pods(2, 60)], Select::Max);
        assert_eq!(
            scale_down_limit(9, &down, &[], t(0)),
            (4, Some(percent(50, 60)))
        );
        let min = rules(vec![percent(50, 60), pods(2, 60)], Select::Min);
        assert_eq!(scale_down_limit(9, &min, &[], t(0)), (7, Some(pods(2, 60))));
    }

    #[test]
    fn disabled_allows_no_change_and_no_policy_no_limit() {
        let off = rules(vec![pods(4, 15)], Select::Disabled);
        assert_eq!(scale_up_limit(3, &off, &[], t(0)).0, 3);
        assert_eq!(scale_down_limit(3, &off, &[], t(0)).0, 3);
        let none = Rules::unlimited();
        assert_eq!(scale_up_limit(3, &none, &[], t(0)), (i32::MAX, None));
        assert_eq!(scale_down_limit(3, &none, &[], t(0)), (i32::MIN, None));
    }

    #[test]
    fn a_limit_never_points_the_wrong_way() {
        // More was removed in the period than the policy allows: the limit is today's count.
        let down = rules(vec![pods(1, 60)], Select::Max);
        let changes = [Change {
            at: t(0),
            replicas: -5,
        }];
        assert_eq!(scale_down_limit(5, &down, &changes, t(10)).0, 5);
        let up = rules(vec![pods(1, 60)], Select::Max);
        let changes = [Change {
            at: t(0),
            replicas: 5,
        }];
        assert_eq!(scale_up_limit(10, &up, &changes, t(10)).0, 10);
    }

    #[test]
    fn remembered_changes_expire_with_the_longest_period() {
        let behavior = Behavior {
            up: rules(vec![pods(4, 60)], Select::Max),
            down: rules(vec![pods(1, 120)], Select::Max),
            max_step: 0,
            down_pace: None,
            recurrence: None,
        };
        let kept = remember(&[], &behavior, 3, 7, t(0));
        assert_eq!(
            kept,
            vec![Change {
                at: t(0),
                replicas: 4
            }]
        );
        let kept = remember(&kept, &behavior, 7, 6, t(100));
        assert_eq!(kept.len(), 2);
        let kept = remember(&kept, &behavior, 6, 6, t(130));
        assert_eq!(
            kept,
            vec![Change {
                at: t(100),
                replicas: -1
            }]
        );
        assert!(remember(&kept, &Behavior::unlimited(), 6, 9, t(140)).is_empty());
    }

    #[test]
    fn a_long_history_is_folded_not_lost() {
        let behavior = Behavior {
            up: rules(vec![pods(100, 3600)], Select::Max),
            down: Rules::unlimited(),
            max_step: 0,
            down_pace: None,
            recurrence: None,
        };
        let mut kept = Vec::new();
        for i in 0..200 {
            kept = remember(&kept, &behavior, i, i + 1, t(i64::from(i)));
        }
        assert_eq!(kept.len(), MAX_CHANGES);
        let total: i32 = kept.iter().map(|c| c.replicas).sum();
        assert_eq!(total, 200);
    }
}
