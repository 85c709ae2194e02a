//! Demand that recurs: what each stretch of the period (a day) asked for on the periods before,
//! so a fleet starts pods ahead of a rise it has already seen, instead of one start-up delay
//! after it.
//!
//! A morning ramp steeper than one start-up delay can carry is missed by any policy that only
//! measures: the trend ([`super::forecast`]) sees the climb after it has begun, and the pods it
//! asks for are Ready minutes later. Yet a day's traffic mostly repeats. So each stretch of the
//! period ([`BINS`] of them, aligned to the epoch: a day's stretches start at UTC midnight)
//! keeps the mean load measured in it; a finished period joins the remembered ones (the last
//! `days`). What is expected between now and one start-up ahead is a growth: for each
//! remembered period, its highest stretch over that span over its stretch now; the lowest of
//! those, at most [`MAX_GROWTH`]. The caller applies it to the load measured now. Only a rise
//! every remembered period saw starts pods early, so a one-off burst is never replayed; a
//! stretch never measured (the operator was down, the period was partly seen) asks for
//! nothing.
//!
//! A growth rather than the remembered load itself, because requests in flight are not
//! conserved across fleet sizes: a leaner fleet batches more and each request runs longer, so
//! the same arrivals put more in flight. Measured in the lab on the L40S at a 180 s start-up,
//! sizing for yesterday's load at today's learned capacity left up to 21% of a five-minute
//! stretch's requests late on the third and fourth mornings (the pods ran 55-130 requests each
//! where they carry about 42); the growth reached the objective at every start-up.
//! It also follows a level that moved since (a quieter weekend, a busier week).

use k8s_openapi::jiff::Timestamp;

/// Stretches a period is cut into: a quarter of an hour in a day.
pub const BINS: usize = 96;

/// The spec's recurrence: how long a period is, and how many past periods must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recurrence {
    pub period_seconds: i64,
    pub days: u32,
}

/// One stretch of the period being measured: the sum and count of its loads.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Running {
    pub sum: f64,
    pub count: u32,
}

/// What the periods before said, and what this one says so far.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Profile {
    /// The period's length the stretches were cut for (a change of spec starts afresh).
    pub period_seconds: i64,
    /// Which period `current` is: whole periods since the epoch.
    pub index: i64,
    /// This period's stretches so far; empty before the first measurement.
    pub current: Vec<Running>,
    /// The finished periods' mean load per stretch, the most recent first, at most `days`.
    pub past: Vec<Vec<Option<f64>>>,
}

/// Which period `now` is in (whole periods since the epoch) and which of its stretches.
pub fn position(rules: Recurrence, now: Timestamp) -> Option<(i64, usize)> {
    let period = rules.period_seconds;
    if period < BINS as i64 {
        return None;
    }
    let seconds = now.as_second();
    let index = seconds.div_euclid(period);
    let into = seconds.rem_euclid(period);
    let bin = usize::try_from(into * BINS as i64 / period).ok()?;
    Some((index, bin.min(BINS - 1)))
}

fn means(current: &[Running]) -> Vec<Option<f64>> {
    current
        .iter()
        .map(|r| (r.count > 0).then(|| r.sum / f64::from(r.count)))
        .collect()
}

/// The profile after this sync measured `load` (the metric's total) at `now`.
pub fn record(profile: &Profile, rules: Recurrence, now: Timestamp, load: f64) -> Profile {
    let Some((index, bin)) = position(rules, now) else {
        return Profile::default();
    };
    if !(load.is_finite() && load >= 0.0) {
        return profile.clone();
    }
    let fresh = profile.current.len() != BINS
        || profile.period_seconds != rules.period_seconds
        || index < profile.index;
    let mut next = if fresh {
        Profile {
            period_seconds: rules.period_seconds,
            index,
            current: vec![Running::default(); BINS],
            past: Vec::new(),
        }
    } else {
        profile.clone()
    };
    if index > next.index {
        let keep = usize::try_from(rules.days).unwrap_or(usize::MAX);
        let mut past = vec![means(&next.current)];
        // Periods nobody measured are remembered as unknown: they ask for nothing.
        let skipped = usize::try_from(index - next.index - 1).unwrap_or(usize::MAX);
        past.extend(std::iter::repeat_n(vec![None; BINS], skipped.min(keep)));
        past.append(&mut next.past);
        past.truncate(keep);
        next.past = past;
        next.index = index;
        next.current = vec![Running::default(); BINS];
    }
    if let Some(slot) = next.current.get_mut(bin) {
        slot.sum += load;
        slot.count = slot.count.saturating_add(1);
    }
    next
}

/// Most the remembered growth multiplies the load now by: at least the look-ahead's doubling,
/// and bounded, since a near-empty stretch now makes any ratio large.
pub const MAX_GROWTH: f64 = 4.0;

/// How much the load grows between now and `horizon_seconds` ahead, as the remembered periods
/// saw it: for each, the highest stretch over that span over the stretch now; the lowest of
/// those, at most [`MAX_GROWTH`]. `None` while fewer than `days` periods are remembered, or
/// where one of them is unknown over the whole span or measured nothing (or no load) in the
/// stretch now.
pub fn growth(
    profile: &Profile,
    rules: Recurrence,
    now: Timestamp,
    horizon_seconds: f64,
) -> Option<f64> {
    let (index, bin) = position(rules, now)?;
    let days = usize::try_from(rules.days).ok()?;
    if days == 0
        || profile.period_seconds != rules.period_seconds
        || profile.index != index
        || profile.past.len() < days
    {
        return None;
    }
    let bin_seconds = rules.period_seconds as f64 / BINS as f64;
    let ahead = (horizon_seconds.max(0.0) / bin_seconds).ceil();
    let span = if ahead.is_finite() {
        (ahead as usize).min(BINS - 1)
    } else {
        BINS - 1
    };
    profile.past[..days]
        .iter()
        .map(|day| {
            let base = day.get(bin).copied().flatten().filter(|b| *b > 0.0)?;
            (0..=span)
                .filter_map(|k| day.get((bin + k) % BINS).copied().flatten())
                .reduce(f64::max)
                .map(|peak| peak / base)
        })
        .try_fold(f64::INFINITY, |low, day| day.map(|d| low.min(d)))
        .filter(|l| l.is_finite())
        .map(|g| g.min(MAX_GROWTH))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HOUR: Recurrence = Recurrence {
        period_seconds: 3600,
        days: 2,
    };

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// A profile fed `load(t)` every 15 s from `from` to `to`.
    fn fed(mut p: Profile, from: i64, to: i64, load: impl Fn(i64) -> f64) -> Profile {
        let mut t = from;
        while t < to {
            p = record(&p, HOUR, at(t), load(t));
            t += 15;
        }
        p
    }

    /// Night at 10, a ramp to 100 over ten minutes from minute 20, back at minute 40.
    fn day(t: i64) -> f64 {
        match t.rem_euclid(3600) {
            s if s < 1200 => 10.0,
            s if s < 1800 => 10.0 + 90.0 * (s - 1200) as f64 / 600.0,
            s if s < 2400 => 100.0,
            _ => 10.0,
        }
    }

    #[test]
    fn a_ramp_every_remembered_period_saw_is_expected_one_start_up_ahead() {
        let p = fed(Profile::default(), 0, 3 * 3600 + 1000, day);
        // Just before the ramp of the fourth period, 150 s ahead: from the stretch now (10) to
        // the ramp's at 1,275-1,312.5 s (its mean 24.1).
        let g = growth(&p, HOUR, at(3 * 3600 + 1150), 150.0).unwrap();
        assert!((2.3..2.5).contains(&g), "{g}");
        // Five minutes ahead it reaches 4.7, and is bounded.
        assert_eq!(
            growth(&p, HOUR, at(3 * 3600 + 1150), 300.0),
            Some(MAX_GROWTH)
        );
        // With nothing ahead, the night stays the night.
        let night = growth(&p, HOUR, at(3 * 3600 + 100), 300.0).unwrap();
        assert!((night - 1.0).abs() < 1e-9, "{night}");
    }

    #[test]
    fn nothing_is_expected_until_enough_periods_are_remembered() {
        let one = fed(Profile::default(), 0, 3600 + 1000, day);
        assert_eq!(one.past.len(), 1);
        assert_eq!(growth(&one, HOUR, at(3600 + 1150), 300.0), None);
    }

    #[test]
    fn a_burst_seen_once_is_not_replayed() {
        let burst = |t: i64| {
            if (1200..1500).contains(&t) {
                100.0
            } else {
                10.0
            }
        };
        let p = fed(Profile::default(), 0, 2 * 3600 + 1000, burst);
        let g = growth(&p, HOUR, at(2 * 3600 + 1150), 300.0).unwrap();
        assert!((g - 1.0).abs() < 1e-9, "{g}");
    }

    #[test]
    fn a_stretch_that_carried_no_load_grows_nothing() {
        // Idle nights (scaled to zero), then the ramp: no ratio of a rise to nothing, so the
        // remembered day asks for nothing there rather than the bound.
        let idle_night = |t: i64| {
            if t.rem_euclid(3600) < 1200 {
                0.0
            } else {
                day(t)
            }
        };
        let p = fed(Profile::default(), 0, 2 * 3600 + 1000, idle_night);
        assert_eq!(growth(&p, HOUR, at(2 * 3600 + 1150), 300.0), None);
        // From the ramp's first stretch with load, the rise is measured again.
        let g = growth(&p, HOUR, at(2 * 3600 + 1250), 150.0).unwrap();
        assert!((1.0..=MAX_GROWTH).contains(&g), "{g}");
    }

    #[test]
    fn a_period_nobody_measured_asks_for_nothing() {
        // Measured in periods 0 and 1, down through period 2, back in period 3.
        let p = fed(Profile::default(), 0, 2 * 3600, day);
        let p = fed(p, 3 * 3600, 3 * 3600 + 1000, day);
        assert_eq!(p.past.len(), 2);
        assert_eq!(growth(&p, HOUR, at(3 * 3600 + 1150), 300.0), None);
    }

    #[test]
    fn a_new_period_length_starts_afresh() {
        let p = fed(Profile::default(), 0, 3 * 3600, day);
        let daily = Recurrence {
            period_seconds: 86_400,
            days: 2,
        };
        let q = record(&p, daily, at(3 * 3600), 5.0);
        assert!(q.past.is_empty());
        assert_eq!(growth(&q, daily, at(3 * 3600 + 15), 300.0), None);
    }

    proptest! {
        /// The growth is never below 1 (the stretch now is part of the span) nor above the bound.
        #[test]
        fn the_growth_stays_within_its_bounds(
            loads in prop::collection::vec(0.0f64..1e6, 1..800),
            now in 0i64..20_000,
            horizon in 0.0f64..4000.0,
        ) {
            let mut p = Profile::default();
            for (i, l) in loads.iter().enumerate() {
                p = record(&p, HOUR, at(i as i64 * 15), *l);
            }
            if let Some(g) = growth(&p, HOUR, at(now), horizon) {
                prop_assert!((1.0..=MAX_GROWTH).contains(&g), "{g}");
            }
            prop_assert!(p.past.len() <= HOUR.days as usize);
        }
    }
}
