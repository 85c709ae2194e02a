//! The LLMScaler API: types, admission rules and the generated CRD.

pub mod behavior;
mod crd;
mod llmscaler;
pub mod objective;
pub mod validation;

pub use crd::{CrdError, crd_yaml};
pub use llmscaler::{
    CustomProvider, Fallback, LLMScaler, LLMScalerSpec, LLMScalerStatus, MetricProvider,
    MetricSpec, MetricStatus, MetricTargetType, Objective, ObjectiveStatus, PolicyType, Preemption,
    Recommendation, RecommendationHistory, Recurrence, RecurrenceStatus, ScaleDown,
    ScaleDownBehavior, ScaleToZero, ScaleToZeroStatus, ScaleUp, ScalingPolicy, SecretKey,
    SecretName, SelectPolicy, ServerAuth, ServerHeadersFrom, ServerTls, StartupStatus, TargetRef,
};

/// API group of every resource this operator defines.
pub const GROUP: &str = "autoscaling.modelsphere.dev";
