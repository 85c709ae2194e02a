//! The HPA ratio for one metric.

use thiserror::Error;

use super::unreadable::Unreadable;

/// Why a metric contributes nothing to a sync. The controller adds its own (query errors,
/// empty or multi-series results); these are the ones the arithmetic itself can find.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SkipReason {
    #[error("value {0} is not a finite number")]
    NotFinite(f64),
    #[error("value {0} is negative; a per-replica load cannot be below zero")]
    Negative(f64),
    #[error("target {0} is not a positive finite number")]
    BadTarget(f64),
    /// The reader's own reason (a query error, no series, an unreachable server).
    #[error("{0}")]
    Unavailable(Unreadable),
}

/// How a metric's value relates to the replica count, in the words of an HPA's External metric
/// target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TargetType {
    /// The value is a per-replica level (an average over the pods): replicas =
    /// `ceil(ready × value / target)`.
    #[default]
    Value,
    /// The value is the fleet's total (a sum over the pods, or a router's queue): replicas =
    /// `ceil(value / target)`, whatever the count of ready pods.
    AverageValue,
}

/// The replicas one metric needs before rounding.
pub fn metric_need(
    kind: TargetType,
    ready: i32,
    value: f64,
    target: f64,
) -> Result<f64, SkipReason> {
    match kind {
        TargetType::Value => ratio_need(ready, value, target),
        // A total is the demand itself: the one-replica baseline is exactly "divide by target".
        TargetType::AverageValue => ratio_need(1, value, target),
    }
}

/// `ceil(ready × value / target)`, or `ceil(value / target)` for a fleet with no ready replica
/// (nothing to scale from, so one replica is the baseline for waking up).
///
/// Saturates at `i32::MAX` instead of wrapping; the caller clamps to maxReplicas.
pub fn ratio_recommendation(ready: i32, value: f64, target: f64) -> Result<i32, SkipReason> {
    ratio_need(ready, value, target).map(round_up)
}

/// The replicas the demand needs before rounding: `ready × value / target` (one replica as the
/// baseline when none is ready). Finite and non-negative, possibly huge.
pub fn ratio_need(ready: i32, value: f64, target: f64) -> Result<f64, SkipReason> {
    if !value.is_finite() {
        return Err(SkipReason::NotFinite(value));
    }
    if value < 0.0 {
        return Err(SkipReason::Negative(value));
    }
    if !(target.is_finite() && target > 0.0) {
        return Err(SkipReason::BadTarget(target));
    }
    let base = f64::from(ready.max(1));
    let raw = base * (value / target);
    Ok(if raw.is_finite() { raw } else { f64::MAX })
}

/// The replica count that covers `need`: its ceiling, with float noise around an integer taken
/// as that integer, saturating at `i32::MAX`.
pub fn round_up(need: f64) -> i32 {
    saturating_ceil(snap_to_integer(need))
}

/// Float noise must not add a replica: 3 × 0.7 / 0.7 can come out as 3.0000000000000004, whose
/// ceiling would be 4. Values within a relative 1e-9 of an integer are taken as that integer.
fn snap_to_integer(x: f64) -> f64 {
    let nearest = x.round();
    if (x - nearest).abs() <= 1e-9 * nearest.abs().max(1.0) {
        nearest
    } else {
        x
    }
}

fn saturating_ceil(x: f64) -> i32 {
    let up = x.ceil();
    if up >= f64::from(i32::MAX) {
        i32::MAX
    } else if up <= 0.0 {
        0
    } else {
        // In (0, i32::MAX): exact.
        up as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hpa_ratio() {
        assert_eq!(ratio_recommendation(2, 0.9, 0.8), Ok(3)); // 2 × 1.125 = 2.25
        assert_eq!(ratio_recommendation(4, 0.4, 0.8), Ok(2));
        assert_eq!(ratio_recommendation(4, 0.8, 0.8), Ok(4));
        assert_eq!(ratio_recommendation(3, 0.0, 0.8), Ok(0));
        assert_eq!(ratio_recommendation(5, 160.0, 80.0), Ok(10));
        assert_eq!(
            ratio_recommendation(1, 1e-3, 80.0),
            Ok(1),
            "any real load needs a replica"
        );
        assert_eq!(
            ratio_recommendation(1, 1e-15, 80.0),
            Ok(0),
            "float noise around zero is zero"
        );
    }

    #[test]
    fn zero_ready_uses_a_single_replica_baseline() {
        assert_eq!(ratio_recommendation(0, 2.0, 0.8), Ok(3));
        assert_eq!(ratio_recommendation(0, 0.0, 0.8), Ok(0));
        assert_eq!(ratio_recommendation(0, 0.5, 0.8), Ok(1));
    }

    #[test]
    fn float_noise_does_not_add_a_replica() {
        assert_eq!(ratio_recommendation(3, 0.7, 0.7), Ok(3));
        assert_eq!(ratio_recommendation(10, 0.1, 0.1), Ok(10));
        assert_eq!(ratio_recommendation(3, 0.3, 0.1), Ok(9));
        assert_eq!(ratio_recommendation(7, 0.29, 0.29), Ok(7));
    }

    #[test]
    fn saturates_instead_of_wrapping() {
        assert_eq!(ratio_recommendation(i32::MAX, 1e300, 1e-300), Ok(i32::MAX));
        assert_eq!(ratio_recommendation(1000, f64::MAX, 0.001), Ok(i32::MAX));
        assert_eq!(ratio_recommendation(i32::MAX, 1.0, 1.0), Ok(i32::MAX));
    }

    #[test]
    fn unusable_values_are_skipped_not_zero() {
        assert_eq!(
            ratio_recommendation(3, f64::NAN, 1.0)
                .map_err(|e| matches!(e, SkipReason::NotFinite(_))),
            Err(true)
        );
        assert!(matches!(
            ratio_recommendation(3, f64::INFINITY, 1.0),
            Err(SkipReason::NotFinite(_))
        ));
        assert!(matches!(
            ratio_recommendation(3, f64::NEG_INFINITY, 1.0),
            Err(SkipReason::NotFinite(_))
        ));
        assert!(matches!(
            ratio_recommendation(3, -0.5, 1.0),
            Err(SkipReason::Negative(_))
        ));
        assert!(matches!(
            ratio_recommendation(3, 1.0, 0.0),
            Err(SkipReason::BadTarget(_))
        ));
        assert!(matches!(
            ratio_recommendation(3, 1.0, f64::NAN),
            Err(SkipReason::BadTarget(_))
        ));
    }
}
