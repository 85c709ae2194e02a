//! The spec's scaleUp / scaleDown, as the decision core's [`Behavior`]. The controller and the
//! scaling-quality lab both go through here, so the lab judges exactly what a user's spec means.

use thiserror::Error;

use super::llmscaler::{
    LLMScalerSpec, MetricProvider, MetricTargetType, PolicyType, ScalingPolicy, SelectPolicy,
};
use crate::scaling::{
    Behavior, FallbackRules, Pause, PolicyKind, RatePolicy, Recurrence, Rules, Select, Stages,
    TargetType, ZeroRules,
};

/// A field that admission should have refused (the object predates the rule).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BehaviorError {
    #[error(
        "{field} is {value:?}: write a quoted decimal fraction from 0 up to (not including) 1, e.g. \"0.1\" for 10%"
    )]
    Tolerance { field: &'static str, value: String },
    #[error(
        "scaleToZero.activationThreshold is {0:?}: write a quoted decimal number from 0, e.g. \"0\" or \"0.5\""
    )]
    ActivationThreshold(String),
    #[error(
        "scaleToZero needs minReplicas: 0 (it is {0}): set minReplicas to 0, or remove scaleToZero"
    )]
    ScaleToZeroFloor(i32),
    #[error(
        "scaleToZero works with metricProvider Prometheus: under Custom the decision server's own count wakes and stops the target"
    )]
    ScaleToZeroProvider,
    #[error(transparent)]
    Objective(#[from] super::objective::ObjectiveError),
}

/// The damping both directions apply, from the spec.
pub fn behavior(spec: &LLMScalerSpec) -> Result<Behavior, BehaviorError> {
    let up = &spec.scale_up;
    let down = &spec.scale_down;
    Ok(Behavior {
        up: Rules {
            window_seconds: up.stabilization_window_seconds,
            tolerance: tolerance("scaleUp.tolerance", &up.tolerance)?,
            policies: up.policies.iter().map(policy).collect(),
            select: select(up.select_policy),
        },
        down: Rules {
            window_seconds: down.stabilization_window_seconds,
            tolerance: tolerance("scaleDown.tolerance", &down.tolerance)?,
            policies: down.policies.iter().map(policy).collect(),
            select: select(down.select_policy),
        },
        max_step: down.max_step_replicas,
        down_pace: None,
        recurrence: spec.recurrence.as_ref().map(|r| Recurrence {
            period_seconds: i64::from(r.period_seconds),
            days: u32::try_from(r.periods).unwrap_or(1).max(1),
        }),
    })
}

fn tolerance(field: &'static str, raw: &str) -> Result<f64, BehaviorError> {
    let refuse = || BehaviorError::Tolerance {
        field,
        value: raw.to_owned(),
    };
    let plain = raw == "0"
        || raw
            .strip_prefix('0')
            .unwrap_or(raw)
            .strip_prefix('.')
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
    if !plain {
        return Err(refuse());
    }
    raw.parse::<f64>()
        .ok()
        .filter(|v| (0.0..1.0).contains(v))
        .ok_or_else(refuse)
}

fn policy(p: &ScalingPolicy) -> RatePolicy {
    RatePolicy {
        kind: match p.type_ {
            PolicyType::Pods => PolicyKind::Pods,
            PolicyType::Percent => PolicyKind::Percent,
        },
        value: p.value,
        period_seconds: p.period_seconds,
    }
}

/// The spec's scaleToZero, in the core's terms; `None` without one.
pub fn zero_rules(spec: &LLMScalerSpec) -> Result<Option<ZeroRules>, BehaviorError> {
    let Some(zero) = &spec.scale_to_zero else {
        return Ok(None);
    };
    if spec.min_replicas != 0 {
        return Err(BehaviorError::ScaleToZeroFloor(spec.min_replicas));
    }
    if spec.metric_provider != MetricProvider::Prometheus {
        return Err(BehaviorError::ScaleToZeroProvider);
    }
    let raw = &zero.activation_threshold;
    let threshold = crate::api::validation::is_plain_decimal(raw)
        .then(|| raw.parse::<f64>().ok())
        .flatten()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| BehaviorError::ActivationThreshold(raw.clone()))?;
    Ok(Some(ZeroRules {
        threshold,
        idle_seconds: i64::from(zero.idle_seconds.max(0)),
        min_awake_seconds: i64::from(zero.min_awake_seconds.max(0)),
    }))
}

/// The spec's fallback, in the core's terms; `None` without one.
pub fn fallback_rules(spec: &LLMScalerSpec) -> Option<FallbackRules> {
    spec.fallback.as_ref().map(|f| FallbackRules {
        failure_threshold: u32::try_from(f.failure_threshold.max(1)).unwrap_or(1),
        replicas: f.replicas,
    })
}

/// The stages of the law the spec sets beyond the ratio, with the pause its annotations ask for:
/// what the controller and the lab's operator entrant both hand to [`crate::scaling::law`].
pub fn stages(spec: &LLMScalerSpec, pause: Option<Pause>) -> Result<Stages, BehaviorError> {
    Ok(Stages {
        objective: spec
            .objective
            .as_deref()
            .map(super::objective::rules)
            .transpose()?,
        zero: zero_rules(spec)?,
        fallback: fallback_rules(spec),
        pause,
    })
}

/// The core's form of a metric's targetType.
pub fn target_type(t: MetricTargetType) -> TargetType {
    match t {
        MetricTargetType::Value => TargetType::Value,
        MetricTargetType::AverageValue => TargetType::AverageValue,
    }
}

fn select(s: SelectPolicy) -> Select {
    match s {
        SelectPolicy::Max => Select::Max,
        SelectPolicy::Min => Select::Min,
        SelectPolicy::Disabled => Select::Disabled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerances_parse_like_the_admission_rule() {
        for (raw, want) in [
            ("0", Some(0.0)),
            ("0.1", Some(0.1)),
            (".25", Some(0.25)),
            ("0.0", Some(0.0)),
        ] {
            assert_eq!(tolerance("t", raw).ok(), want, "{raw}");
        }
        for raw in [
            "1", "1.0", "0.", ".", "", "-0.1", "10%", "0.1 ", "1e-1", "00.1",
        ] {
            assert!(tolerance("t", raw).is_err(), "{raw}");
        }
    }
}
