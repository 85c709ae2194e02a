//! How much load one pod carries while the user's latency objective holds, learned online from
//! what the pods export, so that nobody has to guess a per-replica target.
//!
//! Each sync brings one window of evidence: the load a Ready pod carried over the window (in the
//! capacity's unit) and the share of the window's requests that missed the objective, read from
//! a histogram. [`learn`] turns it into a new estimate by rules chosen so that the estimate cannot
//! chase its own scaling:
//! - a **miss** (more late requests than the objective allows, beyond chance) says the capacity
//!   is below the load it was measured at: the estimate drops to `cut` × that load (`severe_cut`
//!   × when the late share is far past the allowance; never rises), and that load is remembered
//!   as a ceiling for later probes. While pods start, a miss says this only if each pod still
//!   carries the window's mean load: otherwise it happened before the fleet grew;
//! - a **pass** in a settled fleet (every pod asked for Ready through the window) says the
//!   capacity is at least the load: the estimate rises toward it, and a pass near the estimate
//!   probes a little above it (never past `cut` × the lowest load a miss was seen at), so a
//!   fleet sized too large finds out;
//! - the **prior**, a guess, is lifted once, at once, to the load the pods carry (the window's
//!   mean, or the load now when higher; at most `max_lift` × the prior) by a pass on enough
//!   requests (`lift_requests`) before anything else has judged it: a guess must not grow a
//!   fleet that meets the objective;
//! - a pass while pods start, a pass far below the estimate, a window with too few requests or a
//!   share the buckets cannot place on either side of the budget says nothing: the estimate
//!   stays. A missing signal is never read as a met objective.
//!
//! Every other move is bounded per sync (`max_rise`, `max_fall`) and the estimate stays within the
//! rules' limits. The histogram's share above a budget is bracketed by the bucket bounds around
//! it ([`share_above`]) instead of interpolated: vLLM's TTFT buckets jump from 1.0 to 2.5 s, and
//! interpolating a 2 s budget inside that bucket counts a third of every 1–2.5 s first token as
//! late.

use thiserror::Error;

/// The share of a histogram's observations above a budget, as far as its buckets tell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// Observations above the first bucket bound at or above the budget: certainly late.
    pub at_least: f64,
    /// Observations above the last bucket bound at or below the budget: possibly late.
    pub at_most: f64,
    /// Observations in the histogram.
    pub observations: f64,
}

impl Share {
    /// The budget is one of the bucket bounds: the share is known exactly.
    pub fn exact(&self) -> bool {
        self.at_least == self.at_most
    }
}

/// Why a histogram gives no share.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum HistogramError {
    #[error("the histogram has no observation in the window")]
    Empty,
    #[error("the histogram has no +Inf bucket")]
    NoInfBucket,
    #[error("the bucket bounds are not ascending at le={le}")]
    Unordered { le: f64 },
    #[error("the bucket counts fall from {before} to {after} at le={le}: not cumulative")]
    NotCumulative { le: f64, before: f64, after: f64 },
    #[error("the budget {budget} is not a positive number")]
    Budget { budget: f64 },
}

/// The share of observations above `budget` in `cumulative`, a histogram as Prometheus answers
/// `sum by (le) (increase(<name>_bucket[window]))`: `(le, observations ≤ le)` in ascending `le`,
/// the last at +Inf.
pub fn share_above(cumulative: &[(f64, f64)], budget: f64) -> Result<Share, HistogramError> {
    if !(budget.is_finite() && budget > 0.0) {
        return Err(HistogramError::Budget { budget });
    }
    let Some(&(last, total)) = cumulative.last() else {
        return Err(HistogramError::NoInfBucket);
    };
    if last != f64::INFINITY {
        return Err(HistogramError::NoInfBucket);
    }
    let mut previous = (f64::NEG_INFINITY, 0.0);
    for &(le, count) in cumulative {
        let (before_le, before) = previous;
        if le.is_nan() || le <= before_le {
            return Err(HistogramError::Unordered { le });
        }
        if count.is_nan() || count < before {
            return Err(HistogramError::NotCumulative {
                le,
                before,
                after: count,
            });
        }
        previous = (le, count);
    }
    if total <= 0.0 {
        return Err(HistogramError::Empty);
    }
    // At or below the budget: the last bound ≤ budget (none: everything may be late).
    let below = cumulative
        .iter()
        .take_while(|(le, _)| *le <= budget)
        .last()
        .map_or(0.0, |(_, c)| *c);
    // Within the first bound ≥ budget: possibly in time; above it: certainly late.
    let within = cumulative
        .iter()
        .find(|(le, _)| *le >= budget)
        .map_or(total, |(_, c)| *c);
    Ok(Share {
        at_least: (total - within) / total,
        at_most: (total - below) / total,
        observations: total,
    })
}

/// The estimate and what it remembers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// Load one Ready pod carries while the objective holds, in the estimate's unit.
    pub per_pod: f64,
    /// The lowest per-pod load the objective was seen missed at since a pass above it: probes
    /// stay below it.
    pub missed_at: Option<f64>,
    /// The estimate is still the prior, a guess: no miss, no lift and no pass of a settled
    /// fleet has judged it yet.
    pub untested: bool,
}

impl Capacity {
    /// A fleet with no history starts from `prior` (from the spec's target, or a conservative
    /// default).
    pub fn prior(per_pod: f64) -> Self {
        Self {
            per_pod,
            missed_at: None,
            untested: true,
        }
    }

    /// An estimate some window has judged: no longer the prior.
    pub fn judged(per_pod: f64, missed_at: Option<f64>) -> Self {
        Self {
            per_pod,
            missed_at,
            untested: false,
        }
    }
}

const SEVERE_CUT: f64 = 0.7;

/// A window is judged only if the objective's allowance expects at least this many late requests
/// in it. Below that one late request is already several times the allowance, and a count that
/// small cannot tell a miss from chance: at 99%, 2 late of 20 happen by chance once in 60
/// windows, and each such false miss cuts the estimate and caps later probes (measured in the
/// lab: a first minute of 20 requests pinned a diurnal fleet at 1.5× the pods it needed).
const EXPECTED_LATE_TO_JUDGE: f64 = 0.5;
/// Nor on fewer requests than this, whatever the percentile.
const MIN_REQUESTS: f64 = 20.0;
/// A met window lifts an untested prior at once only if the allowance expects this many late
/// requests in it: at 99%, 0 late of 53 (the fewest judged) happens one time in three when 2%
/// are late, 0 late of 300 one time in 400. Measured in the lab: lifted on every judged window,
/// a diurnal trough of 50-request windows lifted the prior by a tenth and the rise that followed
/// missed the objective (98.4% at 180 s, 99.4% without).
const EXPECTED_LATE_TO_LIFT: f64 = 3.0;
/// The most the lift raises the prior by. One minute met at a load says nothing of the rises
/// after it: lifted to the whole load a minute had met, an L40S fleet went from 4 to 58
/// requests per pod with no margin left, and every chat-like shape there fell to 81–96%
/// goodput. At 2× the L40S conversation shape fell from 99.7% to 98.7% at 180 s start-up; at
/// 1.5× it kept 99.3–99.4% at 90 and 180 s and rose from 98.4% to 99.0% at 300 s, while the L4
/// conversation and steady shapes, whose pods carry about 6, saved 13–16% of their
/// replica-hours (8 seeds each).
const MAX_LIFT: f64 = 1.5;

/// A window is steady while the load one pod carries now is at most this many times the
/// window's mean: a quarter above it is a rise of about half the mean within the minute. A pass
/// on a load still rising says only that the pods carried the minute's mean in time; raised or
/// probed with it (3–5% a sync), the estimate climbs as fast as the load, so the load over the
/// estimate stays flat and no scale-up is asked for until the pods run past what they carry in
/// time, with a whole start-up still to wait. Traced in the lab (L40S, conversation shape,
/// 180 s start-up): a fleet of 24 pods whose estimate stood at 46 saw each pod's requests in
/// flight go from 34 to 59 in two minutes, and the estimate went with them to 58 before the
/// first scale-up; the pods carry about 69 in time. Measured (8 seeds, both cards, 90/180/300 s):
/// that shape went from 99.39%, 99.33% and 98.95% goodput to 99.75%, 99.35% and 99.10% on the
/// L40S for 0.5–0.7% more replica-hours, and no other cell moved by more than 3.5% (L4 burstgpt
/// and diurnal at 180 s: +3.5% and +2%, diurnal at 300 s −2% and 97.75% to 98.05%). At 1.1 the
/// worst conversation run at 300 s rose from 94.9% to 99.2%, but the L4's diurnal shape at 180 s
/// cost 16% more and burstgpt at 90 s 9%.
const STEADY: f64 = 1.25;

/// The requests in which an objective met by `percentile` % expects `late` late ones, and at
/// least [`MIN_REQUESTS`].
fn expecting(late: f64, percentile: f64) -> f64 {
    (late * 100.0 / (100.0 - percentile)).max(MIN_REQUESTS)
}

/// How the estimate moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityRules {
    /// Share of requests the objective lets miss (1 − its percentile).
    pub allowed_miss: f64,
    /// A window with fewer requests than this is no evidence (enough for the allowance to
    /// expect half a late request, and at least 20).
    pub min_requests: f64,
    /// How many standard deviations above the allowed count of late requests a window's count
    /// must be to be a miss: a window of 250 requests under a 1% allowance expects 2.5 late
    /// ones, and 4 are chance, not evidence.
    pub confidence: f64,
    /// A miss sets the estimate to this share of the load it was measured at; probes stop at
    /// this share of the lowest load a miss was seen at.
    pub cut: f64,
    /// A miss with at least `severe` times the allowed share certainly late is far past the
    /// capacity (queueing makes the late share climb steeply past it): the estimate drops to
    /// `severe_cut` × the load instead.
    pub severe: f64,
    pub severe_cut: f64,
    /// A pass raises or probes the estimate only on a steady window: when the load one pod
    /// carries now is at most `steady` × the window's mean load.
    pub steady: f64,
    /// A pass at a load of at least `near` × the estimate probes the estimate up by `probe`.
    pub near: f64,
    pub probe: f64,
    /// The most one sync raises the estimate by, as a factor. Syncs read overlapping windows,
    /// so this is per sync, not per window: at 1.05 and a 15 s sync, at most ×1.2 a minute.
    pub max_rise: f64,
    /// The most one sync lowers the estimate by, as a factor (below 1).
    pub max_fall: f64,
    /// An untested prior is lifted to the load the pods carry only by a met window of at least
    /// this many requests: enough for the allowance to expect three late ones (300 at 99%).
    pub lift_requests: f64,
    /// The most a lift raises the prior by, as a factor: the lift is a single step, after which
    /// the estimate is no longer untested.
    pub max_lift: f64,
    /// The estimate never leaves these limits.
    pub floor: f64,
    pub ceiling: f64,
}

impl CapacityRules {
    /// The defaults for an objective met by `percentile` % of requests.
    pub fn for_percentile(percentile: f64, floor: f64, ceiling: f64) -> Self {
        Self {
            allowed_miss: (1.0 - percentile / 100.0).clamp(0.0, 1.0),
            // 50 requests at 99%, 20 at 97.5% and below, 500 at 99.9%.
            min_requests: expecting(EXPECTED_LATE_TO_JUDGE, percentile),
            confidence: 2.0,
            cut: 0.9,
            severe: 10.0,
            severe_cut: SEVERE_CUT,
            steady: STEADY,
            near: 0.8,
            probe: 1.03,
            max_rise: 1.05,
            max_fall: 0.5,
            lift_requests: expecting(EXPECTED_LATE_TO_LIFT, percentile),
            max_lift: MAX_LIFT,
            floor,
            ceiling,
        }
    }
}

/// One window's evidence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    /// The mean load one Ready pod carried over the window.
    pub load: f64,
    /// Every pod the fleet asked for was Ready through the whole window. While pods start, the
    /// Ready ones carry a transient load whose misses have not all shown yet (TPOT is observed
    /// when a request finishes), so a pass then raises nothing; a miss still counts.
    pub settled: bool,
    /// The share of the window's requests that missed the objective.
    pub late: Share,
    /// The load one pod carries now, in the same unit or above it (requests in flight, the
    /// waiting ones included), when known: a window that missed while pods started is
    /// attributed to its mean load only while the load is still that high.
    pub current: Option<f64>,
}

/// What one window taught: a type until it is rendered for a person (status and events, once
/// the controller learns capacity).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lesson {
    /// The objective was missed at `load`: the estimate came down.
    Lowered { from: f64, to: f64, load: f64 },
    /// The objective held at `load`, above the estimate: the estimate came up.
    Raised { from: f64, to: f64, load: f64 },
    /// The objective held, on enough requests, at `load` above the untested prior: the prior
    /// came up toward it at once, by at most `max_lift`.
    PriorLifted { from: f64, to: f64, load: f64 },
    /// The objective held near the estimate: the estimate probes a little above it.
    Probed { from: f64, to: f64 },
    /// The load curve puts the load where the objective would miss at `at`, below what the
    /// estimate allows: the estimate came down toward it (the curve of the objective's stage).
    Capped { from: f64, to: f64, at: f64 },
    /// Nothing moved the estimate.
    Kept(Kept),
}

/// Why a window left the estimate where it was.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kept {
    /// No histogram could be read, or it was empty: nothing is measured.
    NothingMeasured,
    /// Too few requests to judge the objective on.
    TooFewRequests { requests: f64, needed: f64 },
    /// The buckets around the budget cannot tell whether the share allowed was exceeded.
    Unclear {
        at_least: f64,
        at_most: f64,
        allowed: f64,
    },
    /// The objective held, but at a load too far below the estimate to say anything about it.
    FarBelow { load: f64 },
    /// The objective held near the estimate, which already stands at the highest a past miss
    /// allows.
    BelowPastMiss { missed_at: f64 },
    /// A miss, but the estimate is already at or below what it says.
    AlreadyBelow { load: f64 },
    /// The objective held while pods were starting: no evidence to raise on.
    Unsettled { load: f64 },
    /// The objective held while the load was still rising (`now` per pod against the window's
    /// mean `load`): no evidence to raise or probe on.
    Rising { load: f64, now: f64 },
    /// The objective was missed while pods were starting: no load to attribute the misses to.
    MissedUnsettled { load: f64 },
}

/// The estimate after one window of evidence (`None`: no usable histogram in the window).
pub fn learn(
    capacity: Capacity,
    evidence: Option<Evidence>,
    rules: &CapacityRules,
) -> (Capacity, Lesson) {
    let from = capacity.per_pod;
    let bounded = |to: f64| {
        to.clamp(from * rules.max_fall, from * rules.max_rise)
            .clamp(rules.floor, rules.ceiling)
    };
    let Some(Evidence {
        load,
        late,
        settled,
        current,
    }) = evidence.filter(|e| e.load.is_finite() && e.load >= 0.0)
    else {
        return (capacity, Lesson::Kept(Kept::NothingMeasured));
    };
    if late.observations < rules.min_requests {
        let kept = Kept::TooFewRequests {
            requests: late.observations,
            needed: rules.min_requests,
        };
        return (capacity, Lesson::Kept(kept));
    }
    let n = late.observations;
    let allowed = rules.allowed_miss * n;
    let margin = rules.confidence * (allowed * (1.0 - rules.allowed_miss)).sqrt();
    let still_as_high = current.is_some_and(|c| c >= load);
    if late.at_least * n > allowed + margin && !settled && !still_as_high {
        // Pods became Ready inside the window and each carries less now than the window's mean:
        // its misses happened at a higher load than the mean says, before the fleet grew, so
        // they move nothing. Attributed to the mean, they cut the estimate below what the pods
        // carry and the fleet grows past what it needs (measured on the control plane: 8 pods
        // for 6). Ignoring every miss while pods start instead costs the real code log 4 points
        // (94.4% to 90.3%): there the load is still rising when they happen.
        return (capacity, Lesson::Kept(Kept::MissedUnsettled { load }));
    }
    if late.at_least * n > allowed + margin {
        let missed_at = Some(capacity.missed_at.map_or(load, |m| m.min(load)));
        let cut = if late.at_least >= rules.severe * rules.allowed_miss {
            rules.severe_cut
        } else {
            rules.cut
        };
        let to = bounded(from.min(cut * load));
        let lesson = if to < from {
            Lesson::Lowered { from, to, load }
        } else {
            Lesson::Kept(Kept::AlreadyBelow { load })
        };
        return (Capacity::judged(to, missed_at), lesson);
    }
    if late.at_most > rules.allowed_miss {
        // Within chance of the allowance, or the buckets cannot tell: either way, no evidence.
        let kept = Kept::Unclear {
            at_least: late.at_least,
            at_most: late.at_most,
            allowed: rules.allowed_miss,
        };
        return (capacity, Lesson::Kept(kept));
    }
    // The prior is a guess. A window that finds the objective met, on enough requests to
    // say so (not the half late request a pass needs), shows the pods carrying what they carry
    // now in time: the prior must not grow that fleet, so it is lifted to that load at once
    // instead of the bounded rise. Measured in the lab: a conversation fleet of 34 pods meeting
    // the objective at about 5 requests each grew to 64 on the prior of 4 in its first four
    // minutes, and took 20 minutes to come back down.
    let carried = current
        .filter(|c| c.is_finite())
        .map_or(load, |c| c.max(load));
    if capacity.untested && carried > from && late.observations >= rules.lift_requests {
        let to = carried
            .min(from * rules.max_lift)
            .clamp(rules.floor, rules.ceiling);
        let lifted = Capacity::judged(to, capacity.missed_at);
        return (
            lifted,
            Lesson::PriorLifted {
                from,
                to,
                load: carried,
            },
        );
    }
    if !settled {
        return (capacity, Lesson::Kept(Kept::Unsettled { load }));
    }
    if let Some(now) = current.filter(|c| *c > rules.steady * load) {
        return (capacity, Lesson::Kept(Kept::Rising { load, now }));
    }
    // A pass at a load above a past miss: that miss no longer describes the pods.
    let missed_at = capacity.missed_at.filter(|m| *m > load);
    if load > from {
        let to = bounded(load);
        return (
            Capacity::judged(to, missed_at),
            Lesson::Raised { from, to, load },
        );
    }
    if load < rules.near * from {
        let kept = Capacity::judged(from, missed_at);
        return (kept, Lesson::Kept(Kept::FarBelow { load }));
    }
    let limit = missed_at.map_or(f64::INFINITY, |m| rules.cut * m);
    let to = bounded((from * rules.probe).min(limit)).max(from);
    let lesson = match missed_at {
        Some(missed_at) if to <= from => Lesson::Kept(Kept::BelowPastMiss { missed_at }),
        _ => Lesson::Probed { from, to },
    };
    (Capacity::judged(to, missed_at), lesson)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn rules() -> CapacityRules {
        CapacityRules::for_percentile(99.0, 0.1, 256.0)
    }

    /// A window of `requests` at `load`, of which `late` missed (an exact share).
    fn window(load: f64, requests: f64, late: f64) -> Option<Evidence> {
        Some(Evidence {
            load,
            late: Share {
                at_least: late,
                at_most: late,
                observations: requests,
            },
            settled: true,
            current: None,
        })
    }

    /// vLLM's TTFT buckets around 2 s, as a cumulative histogram.
    fn ttft(counts: [f64; 4]) -> Vec<(f64, f64)> {
        vec![
            (0.5, counts[0]),
            (1.0, counts[1]),
            (2.5, counts[2]),
            (f64::INFINITY, counts[3]),
        ]
    }

    #[test]
    fn a_budget_between_bounds_is_bracketed_and_on_a_bound_is_exact() {
        // 100 requests: 60 within 0.5 s, 90 within 1 s, 98 within 2.5 s.
        let h = ttft([60.0, 90.0, 98.0, 100.0]);
        let share = share_above(&h, 2.0).unwrap();
        assert_eq!((share.at_least, share.at_most), (0.02, 0.10));
        assert!(!share.exact());
        let share = share_above(&h, 2.5).unwrap();
        assert_eq!((share.at_least, share.at_most), (0.02, 0.02));
        assert!(share.exact());
        // Below the first bound: anything may be late.
        assert_eq!(share_above(&h, 0.1).unwrap().at_most, 1.0);
        assert_eq!(share_above(&h, 0.1).unwrap().at_least, 0.4);
        // Above the last finite bound: nothing is certainly late.
        let share = share_above(&h, 5.0).unwrap();
        assert_eq!((share.at_least, share.at_most), (0.0, 0.02));
    }

    #[test]
    fn a_broken_histogram_is_an_error_not_a_share() {
        assert_eq!(
            share_above(&ttft([0.0; 4]), 2.0),
            Err(HistogramError::Empty)
        );
        assert_eq!(
            share_above(&[(1.0, 3.0)], 2.0),
            Err(HistogramError::NoInfBucket)
        );
        assert_eq!(share_above(&[], 2.0), Err(HistogramError::NoInfBucket));
        assert!(matches!(
            share_above(&ttft([5.0, 4.0, 6.0, 7.0]), 2.0),
            Err(HistogramError::NotCumulative { le, .. }) if le == 1.0
        ));
        assert!(matches!(
            share_above(&[(2.0, 1.0), (1.0, 2.0), (f64::INFINITY, 3.0)], 2.0),
            Err(HistogramError::Unordered { le }) if le == 1.0
        ));
        assert!(matches!(
            share_above(&ttft([1.0, 2.0, 3.0, 4.0]), 0.0),
            Err(HistogramError::Budget { .. })
        ));
        assert!(matches!(
            share_above(&ttft([1.0, f64::NAN, 3.0, 4.0]), 2.0),
            Err(HistogramError::NotCumulative { .. })
        ));
    }

    #[test]
    fn a_miss_cuts_to_below_the_load_and_caps_later_probes() {
        let r = rules();
        let (c, lesson) = learn(Capacity::prior(16.0), window(10.0, 100.0, 0.05), &r);
        assert_eq!(c.per_pod, 9.0);
        assert_eq!(c.missed_at, Some(10.0));
        assert_eq!(
            lesson,
            Lesson::Lowered {
                from: 16.0,
                to: 9.0,
                load: 10.0
            }
        );
        // The same miss seen again (overlapping windows) changes nothing.
        let (again, lesson) = learn(c, window(10.0, 100.0, 0.05), &r);
        assert_eq!(again, c);
        assert_eq!(lesson, Lesson::Kept(Kept::AlreadyBelow { load: 10.0 }));
        // Passes near the estimate never probe past 0.9 × the load that missed.
        let mut c = c;
        for _ in 0..100 {
            c = learn(c, window(c.per_pod, 100.0, 0.0), &r).0;
        }
        assert_eq!(c.per_pod, 9.0);
        // A pass above the old miss clears it; the estimate rises by one bounded step.
        let (c, lesson) = learn(c, window(11.0, 100.0, 0.0), &r);
        assert_eq!(c.missed_at, None);
        assert!(matches!(lesson, Lesson::Raised { to, .. } if to == 9.0 * 1.05));
    }

    #[test]
    fn a_window_is_judged_once_the_allowance_expects_half_a_late_request() {
        let needed =
            |percentile: f64| CapacityRules::for_percentile(percentile, 0.1, 256.0).min_requests;
        assert_eq!(needed(99.0), 50.0);
        assert!((needed(99.9) - 500.0).abs() < 1e-6);
        assert_eq!(needed(95.0), 20.0, "never fewer than 20");
        // At 99%, 2 late of 49 is no evidence; 2 of 50 is a miss.
        let r = rules();
        let c = Capacity::prior(8.0);
        assert!(matches!(
            learn(c, window(8.0, 49.0, 2.0 / 49.0), &r).1,
            Lesson::Kept(Kept::TooFewRequests { .. })
        ));
        assert!(matches!(
            learn(c, window(8.0, 50.0, 0.04), &r).1,
            Lesson::Lowered { .. }
        ));
    }

    #[test]
    fn nothing_measured_too_few_requests_or_unclear_buckets_keep_the_estimate() {
        let r = rules();
        let c = Capacity::prior(8.0);
        assert_eq!(learn(c, None, &r), (c, Lesson::Kept(Kept::NothingMeasured)));
        assert_eq!(
            learn(c, window(30.0, 5.0, 1.0), &r).1,
            Lesson::Kept(Kept::TooFewRequests {
                requests: 5.0,
                needed: 50.0
            })
        );
        let unclear = Some(Evidence {
            load: 8.0,
            late: Share {
                at_least: 0.0,
                at_most: 0.2,
                observations: 100.0,
            },
            settled: true,
            current: None,
        });
        assert!(matches!(
            learn(c, unclear, &r),
            (same, Lesson::Kept(Kept::Unclear { .. })) if same == c
        ));
        // A settled pass far below it says nothing of the estimate, but it has judged the prior.
        let judged = Capacity {
            untested: false,
            ..c
        };
        assert_eq!(
            learn(c, window(2.0, 100.0, 0.0), &r),
            (judged, Lesson::Kept(Kept::FarBelow { load: 2.0 }))
        );
        assert_eq!(learn(c, window(f64::NAN, 100.0, 0.0), &r).0, c);
        // Far below the estimate but above an old miss: the miss no longer describes the pods.
        let old_miss = Capacity::judged(8.0, Some(2.0));
        assert_eq!(
            learn(old_miss, window(3.0, 100.0, 0.0), &r),
            (judged, Lesson::Kept(Kept::FarBelow { load: 3.0 }))
        );
    }

    #[test]
    fn late_requests_within_chance_of_the_allowance_are_no_miss() {
        let r = rules();
        let c = Capacity::prior(8.0);
        // 250 requests allow 2.5 late ones; 5 (2%) is within two standard deviations (≈3.1).
        let (kept, lesson) = learn(c, window(8.0, 250.0, 0.02), &r);
        assert_eq!(kept, c);
        assert!(
            matches!(lesson, Lesson::Kept(Kept::Unclear { .. })),
            "{lesson:?}"
        );
        // 8 (3.2%) is not.
        assert!(matches!(
            learn(c, window(8.0, 250.0, 0.032), &r).1,
            Lesson::Lowered { .. }
        ));
        // Over 2,500 requests, 2% is well beyond chance.
        assert!(matches!(
            learn(c, window(8.0, 2500.0, 0.02), &r).1,
            Lesson::Lowered { .. }
        ));
    }

    #[test]
    fn a_pass_well_above_the_estimate_rises_by_a_bounded_step() {
        let (c, lesson) = learn(Capacity::prior(4.0), window(20.0, 100.0, 0.0), &rules());
        assert_eq!(c.per_pod, 4.2);
        assert_eq!(
            lesson,
            Lesson::Raised {
                from: 4.0,
                to: 4.2,
                load: 20.0
            }
        );
    }

    #[test]
    fn a_window_while_pods_start_moves_nothing_pass_or_miss() {
        let r = rules();
        let starting = |late| {
            window(20.0, 100.0, late).map(|e| Evidence {
                settled: false,
                ..e
            })
        };
        let c = Capacity::prior(4.0);
        assert_eq!(
            learn(c, starting(0.0), &r),
            (c, Lesson::Kept(Kept::Unsettled { load: 20.0 }))
        );
        let c = Capacity::prior(40.0);
        assert_eq!(
            learn(c, starting(0.5), &r),
            (c, Lesson::Kept(Kept::MissedUnsettled { load: 20.0 }))
        );
        // Still carrying that load now, the misses are the load's: they cut.
        let still = window(20.0, 100.0, 0.5).map(|e| Evidence {
            settled: false,
            current: Some(21.0),
            ..e
        });
        assert!(matches!(
            learn(Capacity::prior(24.0), still, &r),
            (_, Lesson::Lowered { .. })
        ));
        // Settled, the same miss cuts (severely: half the requests are late).
        let settled = window(20.0, 100.0, 0.5);
        assert!(matches!(
            learn(Capacity::prior(24.0), settled, &r),
            (after, Lesson::Lowered { .. }) if (after.per_pod - 20.0 * r.severe_cut).abs() < 1e-9
        ));
    }

    #[test]
    fn a_pass_while_the_load_still_rises_raises_and_probes_nothing() {
        let r = rules();
        let tested = Capacity::judged(40.0, None);
        // Near the estimate, but a quarter and more above the window's mean now: kept.
        let (kept, lesson) = learn(tested, met(36.0, 46.0, 400.0, true), &r);
        assert_eq!(kept, tested);
        assert_eq!(
            lesson,
            Lesson::Kept(Kept::Rising {
                load: 36.0,
                now: 46.0
            })
        );
        // Above the estimate and still rising: no raise either.
        let (kept, lesson) = learn(tested, met(44.0, 56.0, 400.0, true), &r);
        assert!(
            kept == tested && matches!(lesson, Lesson::Kept(Kept::Rising { .. })),
            "{lesson:?}"
        );
        // At most a quarter above the mean is steady: the same windows probe and raise.
        let (probed, lesson) = learn(tested, met(36.0, 45.0, 400.0, true), &r);
        assert!(
            matches!(lesson, Lesson::Probed { .. }) && probed.per_pod == 40.0 * r.probe,
            "{lesson:?}"
        );
        let (raised, lesson) = learn(tested, met(44.0, 44.0, 400.0, true), &r);
        assert!(
            matches!(lesson, Lesson::Raised { .. }) && raised.per_pod == 40.0 * r.max_rise,
            "{lesson:?}"
        );
        // A miss on a rising load still cuts.
        let rising_miss = Some(Evidence {
            current: Some(60.0),
            ..window(44.0, 400.0, 0.05).unwrap()
        });
        assert!(matches!(
            learn(tested, rising_miss, &r),
            (after, Lesson::Lowered { .. }) if after.per_pod < 40.0
        ));
    }

    /// A met window at `load` with `current` in flight per pod now.
    fn met(load: f64, current: f64, requests: f64, settled: bool) -> Option<Evidence> {
        Some(Evidence {
            current: Some(current),
            settled,
            ..window(load, requests, 0.0)?
        })
    }

    #[test]
    fn a_met_window_on_enough_requests_lifts_the_prior_once_to_the_load_the_pods_carry() {
        let r = rules();
        assert_eq!(r.lift_requests, 300.0);
        // While pods start: lifted to the load now (above the window's mean), and judged.
        let (lifted, lesson) = learn(Capacity::prior(4.0), met(5.0, 5.5, 400.0, false), &r);
        assert_eq!(
            lesson,
            Lesson::PriorLifted {
                from: 4.0,
                to: 5.5,
                load: 5.5
            }
        );
        assert!(!lifted.untested && lifted.per_pod == 5.5, "{lifted:?}");
        // The next strong pass gets the bounded rise, not another lift.
        let (after, lesson) = learn(lifted, met(9.0, 9.0, 400.0, true), &r);
        assert!(
            matches!(lesson, Lesson::Raised { .. }) && after.per_pod == 5.5 * r.max_rise,
            "{lesson:?}"
        );
        // A load far above the prior lifts it by the bound only.
        let (bounded, lesson) = learn(Capacity::prior(4.0), met(20.0, 30.0, 400.0, true), &r);
        assert_eq!(bounded.per_pod, 4.0 * r.max_lift);
        assert!(matches!(lesson, Lesson::PriorLifted { load, .. } if load == 30.0));
    }

    #[test]
    fn a_weak_window_a_miss_or_a_tested_estimate_gets_no_lift() {
        let r = rules();
        // 299 requests: a pass, but too few to lift on; settled, the bounded rise.
        let (weak, lesson) = learn(Capacity::prior(4.0), met(6.0, 6.0, 299.0, true), &r);
        assert!(matches!(lesson, Lesson::Raised { .. }) && weak.per_pod == 4.0 * r.max_rise);
        assert!(!weak.untested, "a settled judgment ends the prior");
        // Unsettled and weak: nothing, and still untested.
        let (kept, _) = learn(Capacity::prior(4.0), met(6.0, 6.0, 299.0, false), &r);
        assert_eq!(kept, Capacity::prior(4.0));
        // A miss on the prior is a miss: cut, and judged.
        let missed = Some(Evidence {
            current: Some(8.0),
            ..window(6.0, 400.0, 0.05).unwrap()
        });
        let (cut, lesson) = learn(Capacity::prior(8.0), missed, &r);
        assert!(matches!(lesson, Lesson::Lowered { .. }) && !cut.untested && cut.per_pod < 8.0);
        // Far below the prior: nothing to lift to.
        let (below, _) = learn(Capacity::prior(8.0), met(3.0, 3.5, 400.0, false), &r);
        assert_eq!(below, Capacity::prior(8.0));
        // A tested estimate rises by the bounded step only.
        let tested = Capacity::judged(4.0, None);
        let (rose, _) = learn(tested, met(6.0, 6.0, 400.0, true), &r);
        assert_eq!(rose.per_pod, 4.0 * r.max_rise);
    }

    proptest! {
        #[test]
        fn the_estimate_moves_boundedly_and_only_the_way_the_evidence_points(
            per_pod in 0.1f64..256.0,
            missed in proptest::option::of(0.1f64..300.0),
            load in 0.0f64..300.0,
            requests in 0.0f64..500.0,
            at_least in 0.0f64..1.0,
            spread in 0.0f64..1.0,
            settled in proptest::bool::ANY,
        ) {
            let r = rules();
            let before = Capacity::judged(per_pod, missed);
            let late = Share { at_least, at_most: (at_least + spread).min(1.0), observations: requests };
            let (after, lesson) = learn(before, Some(Evidence { load, late, settled, current: None }), &r);
            prop_assert!(after.per_pod >= r.floor && after.per_pod <= r.ceiling);
            prop_assert!(after.per_pod <= per_pod * r.max_rise + 1e-9);
            prop_assert!(after.per_pod >= per_pod * r.max_fall - 1e-9);
            let judged = requests >= r.min_requests;
            let allowed = r.allowed_miss * requests;
            let beyond_chance = late.at_least * requests
                > allowed + r.confidence * (allowed * (1.0 - r.allowed_miss)).sqrt();
            if judged && beyond_chance && settled {
                prop_assert!(after.per_pod <= per_pod, "a miss never raises: {lesson:?}");
                prop_assert!(after.missed_at.is_some_and(|m| m <= load));
            } else if judged && !beyond_chance && late.at_most <= r.allowed_miss && settled {
                prop_assert!(after.per_pod >= per_pod, "a pass never lowers: {lesson:?}");
            } else {
                prop_assert_eq!(after, before);
            }
            if let Lesson::Probed { to, .. } = lesson {
                prop_assert!(after.missed_at.is_none_or(|m| to <= r.cut * m + 1e-9));
            }
        }

        #[test]
        fn a_prior_rises_at_most_to_the_load_carried_and_only_on_a_strong_pass(
            per_pod in 0.1f64..256.0,
            load in 0.0f64..300.0,
            current in proptest::option::of(0.0f64..300.0),
            requests in 0.0f64..1000.0,
            at_least in 0.0f64..1.0,
            spread in 0.0f64..1.0,
            settled in proptest::bool::ANY,
        ) {
            let r = rules();
            let before = Capacity::prior(per_pod);
            let late = Share { at_least, at_most: (at_least + spread).min(1.0), observations: requests };
            let (after, lesson) = learn(before, Some(Evidence { load, late, settled, current }), &r);
            prop_assert!(after.per_pod >= r.floor && after.per_pod <= r.ceiling);
            let carried = current.map_or(load, |c| c.max(load));
            let strong_pass = requests >= r.lift_requests && late.at_most <= r.allowed_miss;
            if after.per_pod > per_pod * r.max_rise + 1e-9 {
                prop_assert!(strong_pass, "lifted without a strong pass: {lesson:?}");
                prop_assert!(after.per_pod <= carried.max(r.floor) + 1e-9);
                prop_assert!(after.per_pod <= (per_pod * r.max_lift).max(r.floor) + 1e-9);
                prop_assert!(!after.untested, "a lift happens once");
            }
            if !strong_pass || carried <= per_pod {
                prop_assert!(after.per_pod <= per_pod * r.max_rise + 1e-9, "{lesson:?}");
            }
            prop_assert!(after.per_pod >= per_pod * r.max_fall - 1e-9);
        }

        #[test]
        fn a_steady_load_that_meets_the_objective_settles(
            prior in 0.5f64..64.0,
            load in 0.5f64..64.0,
            capacity in 0.5f64..64.0,
        ) {
            // Pods that miss above `capacity` and pass below it, at a steady per-pod load
            // (the fleet is sized to the estimate, so the load per pod follows it).
            let r = rules();
            let mut c = Capacity::prior(prior);
            let mut trail = Vec::new();
            for _ in 0..400 {
                let per_pod = load.min(c.per_pod);
                let late = if per_pod > capacity { 0.05 } else { 0.0 };
                c = learn(c, window(per_pod, 100.0, late), &r).0;
                trail.push(c.per_pod);
            }
            // Settled: the last hundred windows do not move it.
            let tail = &trail[300..];
            prop_assert!(tail.iter().all(|x| *x == tail[0]), "{:?}", &trail[290..]);
        }
    }
}
