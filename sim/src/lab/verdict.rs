//! The judge of a change to the control law, per (trace, start-up delay) cell: GPU-hours at a
//! fixed SLO. Users buy an autoscaler to serve a stated goodput for fewer GPUs, so for a level
//! (99% of requests within both latency objectives; the report also shows 95% and 99.9%) each
//! peer family is given its cheapest way to reach it — its cheapest setting that attains the
//! level, or a point between two settings of its frontier — and the operator's *defaults* (one
//! spec for every cell, nothing tuned) are compared with the cheapest of all of them.
//!
//! The cell is on the tuned frontier when the operator reaches the level for at most the cheapest
//! peer's replica-hours, and a win by a margin at 0.85× or less.

use crate::lab::oracle::{MEASURED, REACTIVE, is_reactive};
use crate::lab::report::{Interval, Runs, oscillations, paired_difference, summarize};
use crate::lab::run::Outcome;

/// The level the verdict is given at, and the ones the report shows beside it.
pub const LEVEL: f64 = 0.99;
pub const LEVELS: [f64; 3] = [0.95, 0.99, 0.999];
/// Operator ÷ cheapest peer at or below this: on the tuned frontier.
pub const ON_FRONTIER: f64 = 1.0;
/// … and at or below this: a win by a margin.
pub const WIN: f64 = 0.85;

/// A family's cheapest way to reach a level.
#[derive(Debug, Clone, PartialEq)]
pub struct Cheapest {
    pub family: String,
    /// The setting, or the two settings it lies between on the family's frontier.
    pub setting: String,
    /// Replica-hours per seed (interpolated alike on every seed).
    pub hours: Vec<f64>,
}

impl Cheapest {
    pub fn mean_hours(&self) -> f64 {
        self.hours.iter().sum::<f64>() / self.hours.len().max(1) as f64
    }
}

/// The family's cheapest way to attain `level` (mean over seeds): along its frontier (its
/// settings by replica-hours, each attaining more than every cheaper one), the first setting
/// that reaches the level, or the point on the segment from the setting before it where the
/// level is crossed. `None` when no setting reaches the level.
pub fn cheapest_at(runs: &[Runs], family: &str, level: f64) -> Option<Cheapest> {
    cheapest_among(runs, family, level, |r| r.family == family)
}

/// The reactive bound's cheapest way to attain `level`, its headroom chosen for the cell as a
/// peer's setting is: what a policy that knows each pod's capacity and every arrival so far,
/// but not the future, pays there.
pub fn reactive_at(runs: &[Runs], level: f64) -> Option<Cheapest> {
    cheapest_among(runs, REACTIVE, level, |r| {
        r.family == "oracle" && is_reactive(&r.label)
    })
}

/// [`cheapest_at`] over the settings `pick` takes, named `family`.
fn cheapest_among(
    runs: &[Runs],
    family: &str,
    level: f64,
    pick: impl Fn(&Runs) -> bool,
) -> Option<Cheapest> {
    let mut settings: Vec<(&Runs, f64, f64)> = runs
        .iter()
        .filter(|r| pick(r) && !r.outcomes.is_empty())
        .map(|r| {
            let s = summarize(&r.outcomes);
            (r, s.replica_hours, s.attainment)
        })
        .collect();
    settings.sort_by(|a, b| a.1.total_cmp(&b.1).then(b.2.total_cmp(&a.2)));
    let mut frontier: Vec<(&Runs, f64, f64)> = Vec::new();
    for setting in settings {
        if frontier.last().is_none_or(|last| setting.2 > last.2) {
            frontier.push(setting);
        }
    }
    let reached = frontier.iter().position(|(_, _, a)| *a >= level)?;
    let (high, _, a1) = frontier[reached];
    let per_seed =
        |r: &Runs| -> Vec<f64> { r.outcomes.iter().map(Outcome::replica_hours).collect() };
    // The setting itself: the cheapest setting already reaches the level (no extrapolation
    // below it), it lands on the level exactly, or the two settings' seeds do not pair.
    let below = reached.checked_sub(1).and_then(|i| frontier.get(i));
    let Some(&(low, _, a0)) =
        below.filter(|(low, _, _)| a1 > level && low.outcomes.len() == high.outcomes.len())
    else {
        return Some(Cheapest {
            family: family.to_owned(),
            setting: high.label.clone(),
            hours: per_seed(high),
        });
    };
    let w = (level - a0) / (a1 - a0);
    let hours = per_seed(low)
        .into_iter()
        .zip(per_seed(high))
        .map(|(h0, h1)| h0 + w * (h1 - h0))
        .collect();
    Some(Cheapest {
        family: family.to_owned(),
        setting: format!("between {} and {}", low.label, high.label),
        hours,
    })
}

/// Where the operator's defaults stand in a cell at a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The defaults do not attain the level at all.
    BelowLevel,
    /// They reach it, for more than the cheapest peer.
    Behind,
    /// For at most the cheapest peer's replica-hours.
    OnFrontier,
    /// For at most 0.85× of them.
    Wins,
    /// They reach it, and no peer does.
    Alone,
}

impl Standing {
    pub fn describe(self) -> &'static str {
        match self {
            Standing::BelowLevel => "below the level",
            Standing::Behind => "behind",
            Standing::OnFrontier => "on the frontier",
            Standing::Wins => "wins",
            Standing::Alone => "only one to reach it",
        }
    }
}

/// One cell's verdict at one level.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub level: f64,
    /// The operator's defaults: mean attainment and replica-hours.
    pub attained: f64,
    pub hours: f64,
    /// The cheapest peer family's cheapest way to the level.
    pub cheapest: Option<Cheapest>,
    /// Operator ÷ cheapest peer, replica-hours (when the operator reaches the level), with a
    /// paired 95% bootstrap interval over seeds.
    pub ratio: Option<f64>,
    pub ratio_interval: Option<Interval>,
    /// The cost bound over the cheapest peer: how much room any policy has in the cell.
    pub bound_vs_cheapest: Option<f64>,
    /// The reactive bound's cheapest way to the level over the cheapest peer: what a policy
    /// pays that knows each pod's capacity and every arrival so far, but not the future, and
    /// waits a start-up for its pods as every policy in the lab does (the cost bound starts
    /// them at once). Not a bound on every such policy: it holds a multiple of the busiest
    /// recent minute, so it pays for every burst.
    pub reactive_vs_cheapest: Option<f64>,
    /// Oscillations of the operator's defaults and of the HPA's, and their paired difference.
    pub oscillations: (f64, f64),
    pub oscillations_vs_hpa: Option<Interval>,
    /// Peer families that reach the level with none of their settings.
    pub unreachable: Vec<String>,
}

impl Verdict {
    pub fn standing(&self) -> Standing {
        if self.attained < self.level {
            return Standing::BelowLevel;
        }
        match self.ratio {
            None => Standing::Alone,
            Some(r) if r <= WIN => Standing::Wins,
            Some(r) if r <= ON_FRONTIER => Standing::OnFrontier,
            Some(_) => Standing::Behind,
        }
    }
}

/// Judges the operator's defaults (family "operator", default) against every peer family (any
/// but the operator and the oracle) at `level`; `bound` is the cell's cost bound. `None` without
/// the operator's defaults.
pub fn judge(runs: &[Runs], level: f64, bound: f64) -> Option<Verdict> {
    let op = runs.iter().find(|r| r.family == "operator" && r.default)?;
    Some(judge_runs(runs, op, level, bound))
}

/// Judges one of the operator's other entrants (an opt-in setting, by its label) as [`judge`]
/// judges the defaults: against every peer family's cheapest way to `level`, paired by seed.
/// `None` where the cell has no entrant of that label.
pub fn judge_entrant(runs: &[Runs], label: &str, level: f64, bound: f64) -> Option<Verdict> {
    let op = runs
        .iter()
        .find(|r| r.family == "operator" && r.label == label)?;
    Some(judge_runs(runs, op, level, bound))
}

/// The peer families of a cell (every family but the operator's and the oracle's), each once, in
/// name order.
pub fn peer_families(runs: &[Runs]) -> Vec<&str> {
    let mut families: Vec<&str> = runs
        .iter()
        .map(|r| r.family.as_str())
        .filter(|f| *f != "operator" && *f != "oracle")
        .collect();
    families.sort_unstable();
    families.dedup();
    families
}

fn judge_runs(runs: &[Runs], op: &Runs, level: f64, bound: f64) -> Verdict {
    let mine = summarize(&op.outcomes);
    let mut unreachable = Vec::new();
    let mut cheapest: Option<Cheapest> = None;
    for family in peer_families(runs) {
        match cheapest_at(runs, family, level) {
            None => unreachable.push(family.to_owned()),
            Some(c) => {
                if cheapest
                    .as_ref()
                    .is_none_or(|best| c.mean_hours() < best.mean_hours())
                {
                    cheapest = Some(c);
                }
            }
        }
    }
    let op_hours: Vec<f64> = op.outcomes.iter().map(Outcome::replica_hours).collect();
    let reaches = mine.attainment >= level;
    let ratio = cheapest
        .as_ref()
        .filter(|_| reaches)
        .map(|c| mine.replica_hours / c.mean_hours());
    let ratio_interval = cheapest
        .as_ref()
        .filter(|_| reaches)
        .and_then(|c| paired_ratio(&op_hours, &c.hours, 2000, 13));
    let hpa = runs.iter().find(|r| r.family == "HPA" && r.default);
    Verdict {
        level,
        attained: mine.attainment,
        hours: mine.replica_hours,
        bound_vs_cheapest: cheapest.as_ref().map(|c| bound / c.mean_hours()),
        reactive_vs_cheapest: cheapest
            .as_ref()
            .zip(reactive_at(runs, level))
            .map(|(c, reactive)| reactive.mean_hours() / c.mean_hours()),
        cheapest,
        ratio,
        ratio_interval,
        oscillations: (
            mine.oscillations,
            hpa.map_or(f64::NAN, |h| summarize(&h.outcomes).oscillations),
        ),
        oscillations_vs_hpa: hpa
            .and_then(|h| paired_difference(&oscillations(op), &oscillations(h), 2000, 11)),
        unreachable,
    }
}

/// Judges the operator's defaults at the goodput they attained themselves: what the cheapest peer
/// setting tuned for the cell pays for the same goodput. Where the defaults overshoot the level
/// (99.4% for an objective of 99%), the verdict at the level weighs the overshoot as cost; this
/// one tells a change that moves the defaults along the peers' frontier (cheaper and a little
/// worse) from one that moves them below it. `None` without the operator's defaults.
pub fn at_own_goodput(runs: &[Runs], bound: f64) -> Option<Verdict> {
    let op = runs.iter().find(|r| r.family == "operator" && r.default)?;
    judge(runs, summarize(&op.outcomes).attainment, bound)
}

/// One setting kept for every cell of a start-up delay, as a user deploys it, against each
/// cell's cheapest peer setting tuned for that cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Everywhere {
    pub family: String,
    pub setting: String,
    /// The cells (indices into those judged) where some peer setting reaches the level.
    pub reachable: Vec<usize>,
    /// Of those, the ones this setting reaches the level in, each with its replica-hours over
    /// that cell's cheapest peer.
    pub reached: Vec<(usize, f64)>,
}

impl Everywhere {
    /// Its highest ratio over the cells it reaches, and that cell.
    pub fn worst(&self) -> Option<(usize, f64)> {
        self.reached
            .iter()
            .copied()
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// The operator's defaults and, for each peer family and the reactive bound, the settings a
/// user could keep for every one of `cells`: those no other setting of the family beats on both
/// counts, the cells (where any peer setting reaches `level`) it reaches the level in and its
/// worst ratio there to the cell's cheapest peer. The verdict per cell compares one spec with a
/// peer tuned for each cell; this compares it with each peer at one setting for all, and with
/// what one headroom for all costs a policy that knows each pod's capacity exactly (the reactive
/// bound, whose headroom the verdict chooses per cell), or the headroom such a policy measures
/// from the rises it has seen (the measured-headroom bound). The operator's defaults first, then
/// by family, most cells reached first.
pub fn everywhere(cells: &[&[Runs]], level: f64) -> Vec<Everywhere> {
    let cheapest: Vec<Option<f64>> = cells
        .iter()
        .map(|runs| {
            peer_families(runs)
                .into_iter()
                .filter_map(|f| cheapest_at(runs, f, level).map(|c| c.mean_hours()))
                .reduce(f64::min)
        })
        .collect();
    let reachable: Vec<usize> = (0..cells.len())
        .filter(|i| cheapest[*i].is_some())
        .collect();
    // The reactive bound's settings and the measured-headroom bound are the oracle family's in
    // the results: named apart here.
    let family_of = |r: &Runs| -> Option<String> {
        match r.family.as_str() {
            "operator" => r.default.then(|| r.family.clone()),
            "oracle" if r.label == MEASURED => Some(MEASURED.to_owned()),
            "oracle" => is_reactive(&r.label).then(|| REACTIVE.to_owned()),
            _ => Some(r.family.clone()),
        }
    };
    let mut candidates: Vec<(String, String)> = cells
        .iter()
        .flat_map(|runs| runs.iter())
        .filter_map(|r| Some((family_of(r)?, r.label.clone())))
        .collect();
    candidates.sort();
    candidates.dedup();
    let judged: Vec<Everywhere> = candidates
        .into_iter()
        .map(|(family, setting)| {
            let reached = reachable
                .iter()
                .filter_map(|&i| {
                    let run = cells[i].iter().find(|r| {
                        r.label == setting && family_of(r).is_some_and(|f| f == family)
                    })?;
                    let s = summarize(&run.outcomes);
                    let best = cheapest[i]?;
                    (!run.outcomes.is_empty() && s.attainment >= level)
                        .then(|| (i, s.replica_hours / best))
                })
                .collect();
            Everywhere {
                family,
                setting,
                reachable: reachable.clone(),
                reached,
            }
        })
        .collect();
    let worst = |e: &Everywhere| e.worst().map_or(f64::INFINITY, |(_, r)| r);
    let beaten = |e: &Everywhere| {
        judged.iter().any(|o| {
            o.family == e.family
                && o.reached.len() >= e.reached.len()
                && worst(o) <= worst(e)
                && (o.reached.len() > e.reached.len() || worst(o) < worst(e))
        })
    };
    let mut kept: Vec<Everywhere> = judged
        .iter()
        .filter(|e| e.family == "operator" || (!e.reached.is_empty() && !beaten(e)))
        .cloned()
        .collect();
    kept.sort_by(|a, b| {
        (b.family == "operator")
            .cmp(&(a.family == "operator"))
            .then(a.family.cmp(&b.family))
            .then(b.reached.len().cmp(&a.reached.len()))
            .then(worst(a).total_cmp(&worst(b)))
    });
    kept
}

/// The ratio of the means of `a` and `b` (paired by index) and its percentile-bootstrap 95%
/// interval, resampling seeds.
pub fn paired_ratio(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Option<Interval> {
    use rand::{Rng, SeedableRng};
    let n = a.len().min(b.len());
    if n == 0 {
        return None;
    }
    let ratio = |picks: &mut dyn Iterator<Item = usize>| {
        let (sa, sb) = picks.fold((0.0, 0.0), |(sa, sb), i| (sa + a[i], sb + b[i]));
        sa / sb
    };
    let mean = ratio(&mut (0..n));
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed);
    let mut samples: Vec<f64> = (0..resamples.max(1))
        .map(|_| {
            let picks: Vec<usize> = (0..n).map(|_| rng.random_range(0..n)).collect();
            ratio(&mut picks.into_iter())
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((q * samples.len() as f64) as usize).min(samples.len() - 1)];
    Some(Interval {
        mean,
        low: at(0.025),
        high: at(0.975),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A setting whose seeds attain `met` of 1000 at `hours` each.
    fn setting(label: &str, family: &str, default: bool, seeds: &[(u64, f64, u32)]) -> Runs {
        Runs {
            label: label.into(),
            family: family.into(),
            default,
            outcomes: seeds
                .iter()
                .map(|&(met, hours, oscillations)| Outcome {
                    judged: 1000,
                    met,
                    replica_seconds: hours * 3600.0,
                    oscillations,
                    ..Outcome::default()
                })
                .collect(),
        }
    }

    #[test]
    fn the_cheapest_way_to_a_level_is_found_along_the_frontier() {
        let runs = [
            setting(
                "HPA (target 32)",
                "HPA",
                false,
                &[(900, 6.0, 0), (900, 6.0, 0)],
            ),
            setting("HPA", "HPA", true, &[(985, 10.0, 0), (985, 12.0, 0)]),
            setting(
                "HPA (target 8)",
                "HPA",
                false,
                &[(995, 20.0, 0), (995, 22.0, 0)],
            ),
            // Dearer and worse than a cheaper setting: off the frontier.
            setting(
                "HPA (down 0 s)",
                "HPA",
                false,
                &[(950, 15.0, 0), (950, 15.0, 0)],
            ),
        ];
        // 0.99 lies half-way from 0.985 to 0.995: half-way in replica-hours, seed by seed.
        let at99 = cheapest_at(&runs, "HPA", 0.99).unwrap();
        assert_eq!(at99.setting, "between HPA and HPA (target 8)");
        assert_eq!(at99.hours, vec![15.0, 17.0]);
        assert!((at99.mean_hours() - 16.0).abs() < 1e-9);
        // A level the cheapest setting already reaches: that setting, no extrapolation below.
        let at80 = cheapest_at(&runs, "HPA", 0.80).unwrap();
        assert_eq!(
            (at80.setting.as_str(), at80.mean_hours()),
            ("HPA (target 32)", 6.0)
        );
        // Exactly on a setting.
        assert_eq!(
            cheapest_at(&runs, "HPA", 0.995).unwrap().setting,
            "HPA (target 8)"
        );
        assert!(
            cheapest_at(&runs, "HPA", 0.999).is_none(),
            "no setting reaches it"
        );
        assert!(cheapest_at(&runs, "KEDA", 0.5).is_none());
    }

    fn cell(op: &[(u64, f64, u32)]) -> Vec<Runs> {
        vec![
            setting("llmscaleoperator", "operator", true, op),
            setting("HPA", "HPA", true, &[(992, 10.0, 2); 3]),
            setting("HPA (target 8)", "HPA", false, &[(999, 20.0, 1); 3]),
            setting("KEDA", "KEDA", true, &[(991, 12.0, 1); 3]),
            setting("WVA", "WVA", true, &[(700, 4.0, 1); 3]),
            setting("oracle", "oracle", true, &[(1000, 5.0, 0); 3]),
        ]
    }

    #[test]
    fn the_verdict_is_replica_hours_at_the_level_against_the_cheapest_peer() {
        // 99.5% for 8 replica-hours against the HPA's 10 at 99.2%: 0.8×, a win.
        let v = judge(
            &cell(&[(995, 8.0, 2), (995, 8.0, 2), (996, 8.0, 2)]),
            LEVEL,
            4.0,
        )
        .unwrap();
        let cheapest = v.cheapest.as_ref().unwrap();
        assert_eq!(
            (cheapest.family.as_str(), cheapest.setting.as_str()),
            ("HPA", "HPA")
        );
        assert!((v.ratio.unwrap() - 0.8).abs() < 1e-9, "{v:?}");
        let interval = v.ratio_interval.unwrap();
        assert!(interval.low <= 0.8 && interval.high >= 0.8, "{interval:?}");
        assert!((v.bound_vs_cheapest.unwrap() - 0.4).abs() < 1e-9);
        assert_eq!(v.unreachable, vec!["WVA".to_owned()]);
        assert_eq!(v.standing(), Standing::Wins);
        assert_eq!(v.oscillations, (2.0, 2.0));
        // 9.5 replica-hours: on the frontier, no margin.
        let v = judge(&cell(&[(995, 9.5, 2); 3]), LEVEL, 4.0).unwrap();
        assert_eq!(v.standing(), Standing::OnFrontier);
        // 11: behind.
        let v = judge(&cell(&[(995, 11.0, 2); 3]), LEVEL, 4.0).unwrap();
        assert_eq!(v.standing(), Standing::Behind);
        // Cheap but under the level: no ratio at all.
        let v = judge(&cell(&[(980, 5.0, 2); 3]), LEVEL, 4.0).unwrap();
        assert_eq!((v.standing(), v.ratio), (Standing::BelowLevel, None));
        // A level only the operator reaches.
        let v = judge(&cell(&[(1000, 30.0, 2); 3]), 0.9995, 4.0).unwrap();
        assert_eq!(v.standing(), Standing::Alone);
        assert!(judge(&cell(&[])[1..], LEVEL, 4.0).is_none());
    }

    #[test]
    fn the_reactive_bound_is_the_room_a_policy_that_cannot_see_the_future_has() {
        // Its headroom is chosen per cell as a peer's setting is: at 99% it lies halfway between
        // ×1 (98.5%, 6 h) and ×1.5 (99.5%, 9 h), 7.5 h against the HPA's 10. The oracle's own
        // settings (it knows the future) are not among it, nor are the peers' settings.
        let mut runs = cell(&[(995, 8.0, 2); 3]);
        runs.push(setting(
            "oracle (knows the future) ×1.5 headroom",
            "oracle",
            false,
            &[(999, 6.0, 0); 3],
        ));
        runs.push(setting(
            "reactive bound ×1 headroom",
            "oracle",
            false,
            &[(985, 6.0, 0); 3],
        ));
        runs.push(setting(
            "reactive bound ×1.5 headroom",
            "oracle",
            false,
            &[(995, 9.0, 0); 3],
        ));
        let reactive = reactive_at(&runs, LEVEL).unwrap();
        assert_eq!(
            reactive.setting,
            "between reactive bound ×1 headroom and reactive bound ×1.5 headroom"
        );
        let v = judge(&runs, LEVEL, 4.0).unwrap();
        assert!(
            (v.reactive_vs_cheapest.unwrap() - 0.75).abs() < 1e-9,
            "{v:?}"
        );
        // Its room is not the peers': the cheapest peer is still the HPA.
        assert_eq!(v.cheapest.as_ref().unwrap().family, "HPA");
        // A level none of its headrooms reaches, or a cell without it: no room to show.
        assert!(reactive_at(&runs, 0.999).is_none());
        let without = judge(&cell(&[(995, 8.0, 2); 3]), LEVEL, 4.0).unwrap();
        assert_eq!(without.reactive_vs_cheapest, None);
    }

    #[test]
    fn one_setting_everywhere_is_judged_against_each_cells_cheapest_peer() {
        // Cell 0, flat: the HPA's target 8 reaches 99% for 10 h, its target 2 for 30 h. Cell 1,
        // a step: only target 2 reaches it (40 h). Cell 2: no peer reaches it.
        let flat = [
            setting("llmscaleoperator", "operator", true, &[(995, 12.0, 1); 3]),
            setting("HPA (target 8)", "HPA", false, &[(992, 10.0, 1); 3]),
            setting("HPA (target 2)", "HPA", false, &[(999, 30.0, 1); 3]),
            setting("oracle", "oracle", true, &[(999, 5.0, 0); 3]),
        ];
        let step = [
            setting("llmscaleoperator", "operator", true, &[(950, 35.0, 1); 3]),
            setting("HPA (target 8)", "HPA", false, &[(900, 25.0, 1); 3]),
            setting("HPA (target 2)", "HPA", false, &[(991, 40.0, 1); 3]),
        ];
        let hard = [
            setting("llmscaleoperator", "operator", true, &[(999, 50.0, 1); 3]),
            setting("HPA (target 2)", "HPA", false, &[(800, 60.0, 1); 3]),
        ];
        let all = everywhere(&[&flat, &step, &hard], LEVEL);
        assert_eq!(all.len(), 3, "{all:?}");
        // The defaults first: one of the two reachable cells, at 1.2× there (cell 2 no peer
        // reaches, so it is not counted).
        assert_eq!(
            (all[0].family.as_str(), all[0].reachable.clone()),
            ("operator", vec![0, 1])
        );
        assert_eq!(all[0].reached.len(), 1);
        assert!(
            (all[0].worst().unwrap().1 - 1.2).abs() < 1e-9,
            "{:?}",
            all[0]
        );
        // The HPA kept at target 2 reaches both, at 3× the flat cell's cheapest; at target 8 it
        // reaches only the flat one, at 1×. Neither beats the other on both counts.
        assert_eq!(all[1].setting, "HPA (target 2)");
        let (cell, ratio) = all[1].worst().unwrap();
        assert_eq!(cell, 0);
        assert!((ratio - 3.0).abs() < 1e-9, "{:?}", all[1]);
        assert_eq!(all[2].setting, "HPA (target 8)");
        assert_eq!(all[2].worst(), Some((0, 1.0)));
        // A setting beaten on both counts is left out.
        let mut worse = flat.to_vec();
        worse.push(setting(
            "HPA (target 4)",
            "HPA",
            false,
            &[(995, 12.0, 1); 3],
        ));
        let kept = everywhere(&[&worse, &step, &hard], LEVEL);
        assert!(
            kept.iter().all(|e| e.setting != "HPA (target 4)"),
            "{kept:?}"
        );
    }

    #[test]
    fn the_reactive_bounds_at_one_headroom_are_judged_everywhere_and_the_oracle_is_not() {
        // The HPA's target 8 is each cell's cheapest peer: 10 h on the flat cell, 40 h on the
        // step. The reactive bound at ×1 reaches the flat cell for 6 h and not the step; at ×2
        // both, for 12 h and 30 h. The measured-headroom bound reaches the flat cell for 7 h:
        // a family of its own, not one of the reactive bound's headrooms (×1 would hide it).
        // The oracle that knows the future reaches both and is no setting anyone can keep.
        let flat = [
            setting("llmscaleoperator", "operator", true, &[(995, 12.0, 1); 3]),
            setting("HPA (target 8)", "HPA", false, &[(992, 10.0, 1); 3]),
            setting("oracle", "oracle", true, &[(999, 5.0, 0); 3]),
            setting(
                "reactive bound ×1 headroom",
                "oracle",
                false,
                &[(995, 6.0, 0); 3],
            ),
            setting(
                "reactive bound ×2 headroom",
                "oracle",
                false,
                &[(999, 12.0, 0); 3],
            ),
            setting(MEASURED, "oracle", false, &[(993, 7.0, 0); 3]),
        ];
        let step = [
            setting("llmscaleoperator", "operator", true, &[(995, 44.0, 1); 3]),
            setting("HPA (target 8)", "HPA", false, &[(991, 40.0, 1); 3]),
            setting("oracle", "oracle", true, &[(999, 20.0, 0); 3]),
            setting(
                "reactive bound ×1 headroom",
                "oracle",
                false,
                &[(950, 20.0, 0); 3],
            ),
            setting(
                "reactive bound ×2 headroom",
                "oracle",
                false,
                &[(992, 30.0, 0); 3],
            ),
            setting(MEASURED, "oracle", false, &[(980, 35.0, 0); 3]),
        ];
        let all = everywhere(&[&flat, &step], LEVEL);
        let names: Vec<(&str, &str)> = all
            .iter()
            .map(|e| (e.family.as_str(), e.setting.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("operator", "llmscaleoperator"),
                ("HPA", "HPA (target 8)"),
                (MEASURED, MEASURED),
                (REACTIVE, "reactive bound ×2 headroom"),
                (REACTIVE, "reactive bound ×1 headroom"),
            ]
        );
        // The measured headroom reaches the flat cell only, at 0.7×.
        let (cell, ratio) = all[2].worst().unwrap();
        assert_eq!((cell, all[2].reached.len()), (0, 1));
        assert!((ratio - 0.7).abs() < 1e-9, "{:?}", all[2]);
        // At ×2 it reaches both cells, at 1.2× the flat cell's cheapest peer and 0.75× the
        // step's; at ×1 only the flat cell, at 0.6×.
        let (cell, ratio) = all[3].worst().unwrap();
        assert_eq!((cell, all[3].reached.len()), (0, 2));
        assert!((ratio - 1.2).abs() < 1e-9, "{:?}", all[3]);
        assert!((all[3].reached[1].1 - 0.75).abs() < 1e-9, "{:?}", all[3]);
        let (cell, ratio) = all[4].worst().unwrap();
        assert_eq!((cell, all[4].reached.len()), (0, 1));
        assert!((ratio - 0.6).abs() < 1e-9, "{:?}", all[4]);
        // The reactive bound is no peer: the cells' cheapest stay the HPA's.
        assert!(
            (all[1].worst().unwrap().1 - 1.0).abs() < 1e-9,
            "{:?}",
            all[1]
        );
    }

    #[test]
    fn an_opt_in_entrant_is_judged_by_its_label_as_the_defaults_are() {
        // The defaults fall below the level; the entrant beside them reaches it for 8 h against
        // the HPA's 10: a win, judged on its own seeds.
        let mut runs = cell(&[(980, 5.0, 2); 3]);
        runs.push(setting(
            "llmscaleoperator (recurrence)",
            "operator",
            false,
            &[(995, 8.0, 3); 3],
        ));
        assert_eq!(
            judge(&runs, LEVEL, 4.0).unwrap().standing(),
            Standing::BelowLevel
        );
        let v = judge_entrant(&runs, "llmscaleoperator (recurrence)", LEVEL, 4.0).unwrap();
        assert!((v.ratio.unwrap() - 0.8).abs() < 1e-9, "{v:?}");
        assert_eq!((v.standing(), v.oscillations), (Standing::Wins, (3.0, 2.0)));
        // Only the operator's own entrants, and only those present, are judged.
        assert!(judge_entrant(&runs, "HPA (target 8)", LEVEL, 4.0).is_none());
        assert!(judge_entrant(&runs, "llmscaleoperator (no look-ahead)", LEVEL, 4.0).is_none());
    }

    #[test]
    fn at_its_own_goodput_the_operator_is_weighed_against_the_peers_at_that_goodput() {
        // 99.5% for 11 replica-hours: behind the HPA's 10 at 99% (it pays for the overshoot)...
        let runs = cell(&[(995, 11.0, 2); 3]);
        assert_eq!(
            judge(&runs, LEVEL, 4.0).unwrap().standing(),
            Standing::Behind
        );
        // ...but at 99.5% the HPA's cheapest way lies between its default (99.2%, 10 h) and
        // target 8 (99.9%, 20 h), 3/7 of the way: 14.29 h, and 11 h is a win.
        let own = at_own_goodput(&runs, 4.0).unwrap();
        assert!((own.level - 0.995).abs() < 1e-12, "{own:?}");
        let cheapest = own.cheapest.as_ref().unwrap();
        assert_eq!(cheapest.setting, "between HPA and HPA (target 8)");
        assert!((cheapest.mean_hours() - (10.0 + 10.0 * 3.0 / 7.0)).abs() < 1e-9);
        assert!((own.ratio.unwrap() - 11.0 / cheapest.mean_hours()).abs() < 1e-9);
        assert_eq!(own.standing(), Standing::Wins);
        // A goodput no peer reaches: alone there.
        let alone = at_own_goodput(&cell(&[(1000, 30.0, 2); 3]), 4.0).unwrap();
        assert_eq!(alone.standing(), Standing::Alone);
        assert!(at_own_goodput(&cell(&[])[1..], 4.0).is_none());
    }

    #[test]
    fn a_paired_ratio_interval_narrows_with_agreeing_seeds() {
        let i = paired_ratio(&[8.0, 8.0, 8.0], &[10.0, 10.0, 10.0], 500, 1).unwrap();
        assert!((i.mean - 0.8).abs() < 1e-12 && i.low == i.high, "{i:?}");
        let j = paired_ratio(&[4.0, 12.0, 8.0], &[10.0, 10.0, 10.0], 500, 1).unwrap();
        assert!(j.low < 0.8 && j.high > 0.8, "{j:?}");
        assert!(paired_ratio(&[], &[], 10, 1).is_none());
    }
}
