//! Looking ahead by one start-up delay: the demand a pod asked for now will meet when it is Ready.
//!
//! A pod that takes minutes to load a model is sized for the demand of minutes from now, not of
//! the last scrape. The estimate is a robust trend (Theil–Sen: the median slope between every two
//! samples, so a step or a burst is not mistaken for a trend) through the recent demand, in
//! replicas needed, projected one start-up delay ahead. It only ever raises a scale-up: a falling
//! trend is never projected, and the caller never lets a forecast lower the fleet nor start a
//! scale-up the measurement does not ask for. Noise is bounded four ways: the trend is fitted
//! over two start-up delays of samples, it needs enough of them spread over enough time, only
//! the lower end of the slope's 95% interval is projected, and the projection adds at most the
//! measured demand again (it never more than doubles what was measured).

use k8s_openapi::jiff::Timestamp;

/// One sync's measured demand, in replicas needed (before rounding up).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub at: Timestamp,
    pub need: f64,
}

/// Samples kept at most; the fit window also bounds them.
pub const MAX_SAMPLES: usize = 256;

/// Fewest samples (this sync's included) a trend is fitted to.
const MIN_SAMPLES: usize = 4;

/// The shortest fit window, so a short start-up delay still sees more than a couple of syncs.
const MIN_FIT_SECONDS: f64 = 60.0;

/// The projection adds at most this multiple of the measured demand.
const MAX_GROWTH: f64 = 1.0;

/// The seconds of history the fit uses for a look-ahead of `horizon_seconds`.
pub fn fit_seconds(horizon_seconds: f64) -> f64 {
    (2.0 * horizon_seconds).max(MIN_FIT_SECONDS)
}

/// The demand expected `horizon_seconds` from `now`, from the samples before now and this
/// sync's `need`; `None` when there is no rising trend to act on (too few samples, too short a
/// span, a flat or falling line, or no horizon). Never below `need`, never above
/// `need × (1 + MAX_GROWTH)`.
pub fn look_ahead(
    samples: &[Sample],
    need: f64,
    now: Timestamp,
    horizon_seconds: f64,
) -> Option<f64> {
    look_ahead_over(
        samples,
        need,
        now,
        horizon_seconds,
        fit_seconds(horizon_seconds),
    )
}

/// [`look_ahead`] with the trend fitted over `window` seconds of samples.
pub fn look_ahead_over(
    samples: &[Sample],
    need: f64,
    now: Timestamp,
    horizon_seconds: f64,
    window: f64,
) -> Option<f64> {
    if !(horizon_seconds > 0.0 && need.is_finite() && need >= 0.0) {
        return None;
    }
    // x = seconds before now (≤ 0), y = need.
    let points: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.need.is_finite())
        .map(|s| (-seconds_between(s.at, now), s.need))
        .filter(|(x, _)| *x < 0.0 && -*x <= window)
        .chain(std::iter::once((0.0, need)))
        .collect();
    if points.len() < MIN_SAMPLES {
        return None;
    }
    let span = -points.iter().map(|(x, _)| *x).fold(0.0, f64::min);
    if span < window / 2.0 {
        return None;
    }
    let (slope, at_now) = sen_lower_bound(&points)?;
    // The trend's level now, not the last noisy sample, carried one horizon ahead.
    let projected = at_now + slope * horizon_seconds;
    let bounded = projected.min(need * (1.0 + MAX_GROWTH));
    // Float noise on a flat line is not a trend.
    (bounded > need + 1e-9 * need.max(1.0)).then_some(bounded)
}

/// Most points the pairwise slopes are taken over (evenly thinned beyond it).
const MAX_FIT_POINTS: usize = 64;

/// A rising trend that the points show beyond their scatter: the lower end of the 95% interval of
/// the Theil–Sen slope (the median of the slopes between every two points, which a step or a
/// few outliers cannot move), and the trend's level at x = 0 (the median of y − slope·x).
/// `None` when that lower end is not above zero.
fn sen_lower_bound(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let step = points.len().div_ceil(MAX_FIT_POINTS).max(1);
    let thinned: Vec<(f64, f64)> = points.iter().rev().step_by(step).copied().collect();
    let n = thinned.len();
    let mut slopes: Vec<f64> = Vec::with_capacity(n * (n - 1) / 2);
    for (i, (xi, yi)) in thinned.iter().enumerate() {
        for (xj, yj) in &thinned[i + 1..] {
            if xi != xj {
                slopes.push((yi - yj) / (xi - xj));
            }
        }
    }
    if slopes.len() < 3 {
        return None;
    }
    slopes.sort_by(f64::total_cmp);
    // Rank of the interval's lower end: (N − z·σ) / 2 with σ² = n(n−1)(2n+5)/18 (no ties).
    let count = slopes.len() as f64;
    let nf = n as f64;
    let spread = 1.96 * (nf * (nf - 1.0) * (2.0 * nf + 5.0) / 18.0).sqrt();
    let lower_rank = ((count - spread) / 2.0).floor();
    if lower_rank < 0.0 {
        return None;
    }
    let lower = slopes[lower_rank as usize];
    if !(lower.is_finite() && lower > 0.0) {
        return None;
    }
    let median = slopes[slopes.len() / 2];
    let mut levels: Vec<f64> = thinned.iter().map(|(x, y)| y - median * x).collect();
    levels.sort_by(f64::total_cmp);
    Some((lower, levels[levels.len() / 2]))
}

/// The samples to keep after this sync: those still inside the fit window, and this one.
pub fn remember(samples: &[Sample], latest: Sample, horizon_seconds: f64) -> Vec<Sample> {
    remember_over(samples, latest, fit_seconds(horizon_seconds))
}

/// [`remember`] for a trend fitted over `window` seconds.
pub fn remember_over(samples: &[Sample], latest: Sample, window: f64) -> Vec<Sample> {
    let mut kept: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| {
            let age = seconds_between(s.at, latest.at);
            age > 0.0 && age <= window
        })
        .collect();
    kept.push(latest);
    if kept.len() > MAX_SAMPLES {
        kept.drain(..kept.len() - MAX_SAMPLES);
    }
    kept
}

/// Seconds from `earlier` to `later` (negative when `earlier` is in the future).
fn seconds_between(earlier: Timestamp, later: Timestamp) -> f64 {
    later.duration_since(earlier).as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: f64) -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
            + k8s_openapi::jiff::SignedDuration::from_secs_f64(s)
    }

    fn ramp(from: f64, per_second: f64, every: f64, count: usize) -> Vec<Sample> {
        (0..count)
            .map(|i| {
                let at = i as f64 * every;
                Sample {
                    at: t(at),
                    need: from + per_second * at,
                }
            })
            .collect()
    }

    #[test]
    fn a_steady_ramp_is_projected_one_horizon_ahead() {
        // 10 replicas rising by 1 per minute, sampled every 15 s for 3 minutes.
        let past = ramp(10.0, 1.0 / 60.0, 15.0, 12);
        let now = t(180.0);
        let need = 13.0;
        let got = look_ahead(&past, need, now, 180.0).unwrap();
        assert!((got - 16.0).abs() < 1e-9, "{got}");
    }

    #[test]
    fn a_step_is_not_a_trend() {
        // Flat at 10 for three minutes, then 20 for the last 45 s: a new level, not a slope.
        let mut past = ramp(10.0, 0.0, 15.0, 12);
        past.extend((12..15).map(|i| Sample {
            at: t(i as f64 * 15.0),
            need: 20.0,
        }));
        assert_eq!(look_ahead(&past, 20.0, t(225.0), 120.0), None);
    }

    #[test]
    fn flat_falling_or_thin_histories_give_nothing() {
        let flat = ramp(10.0, 0.0, 15.0, 12);
        assert_eq!(look_ahead(&flat, 10.0, t(180.0), 180.0), None);
        let falling = ramp(20.0, -0.05, 15.0, 12);
        assert_eq!(look_ahead(&falling, 11.0, t(180.0), 180.0), None);
        // Three samples are not a trend.
        let thin = ramp(10.0, 1.0, 15.0, 2);
        assert_eq!(look_ahead(&thin, 40.0, t(30.0), 180.0), None);
        // Many samples over too short a span (a restart just refilled the history).
        let short = ramp(10.0, 0.1, 5.0, 10);
        assert_eq!(look_ahead(&short, 15.0, t(50.0), 180.0), None);
        // No horizon, no look-ahead.
        let rising = ramp(10.0, 0.1, 15.0, 12);
        assert_eq!(look_ahead(&rising, 28.0, t(180.0), 0.0), None);
    }

    #[test]
    fn samples_older_than_the_fit_window_are_forgotten() {
        let past = ramp(10.0, 0.0, 15.0, 40); // 0 … 585 s
        let kept = remember(
            &past,
            Sample {
                at: t(600.0),
                need: 10.0,
            },
            180.0,
        );
        // The fit window is two horizons: 360 s.
        assert_eq!(kept.first().map(|s| s.at), Some(t(240.0)));
        assert_eq!(kept.last().map(|s| s.at), Some(t(600.0)));
        assert!(kept.len() <= MAX_SAMPLES);
    }

    proptest! {
        #[test]
        fn a_forecast_is_never_below_the_measurement_nor_above_twice_it(
            needs in proptest::collection::vec(0.0f64..500.0, 0..40),
            need in 0.0f64..500.0,
            every in 1.0f64..60.0,
            horizon in 0.0f64..900.0,
        ) {
            let past: Vec<Sample> = needs
                .iter()
                .enumerate()
                .map(|(i, n)| Sample { at: t(i as f64 * every), need: *n })
                .collect();
            let now = t(needs.len() as f64 * every);
            if let Some(f) = look_ahead(&past, need, now, horizon) {
                prop_assert!(f > need && f <= need * 2.0 + 1e-9, "{f} from {need}");
            }
        }

        #[test]
        fn a_constant_signal_has_no_trend(level in 0.0f64..500.0, count in 0usize..40) {
            let past = ramp(level, 0.0, 15.0, count);
            prop_assert_eq!(look_ahead(&past, level, t(count as f64 * 15.0), 300.0), None);
        }
    }
}
