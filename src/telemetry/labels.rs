//! The label sets of the series named after a scaler, and the label values they take: shared by
//! what a sync reports (`sync_report`), the series kept per scaler (`scaler_series`) and the
//! registry (`metrics`).

use std::fmt::Write as _;
use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use crate::failure::FailureReason;

/// A scaler's namespace or name in a label set. Shared: the series a sync makes point at the
/// same two strings instead of each owning copies (a scaler has twenty-odd series).
pub(super) type Name = Arc<str>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ScalerLabels {
    pub namespace: Name,
    pub scaler: Name,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SyncLabels {
    pub namespace: Name,
    pub scaler: Name,
    pub result: SyncResult,
}

/// How a sync ended, the `result` label of `llmscaleoperator_syncs_total`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum SyncResult {
    /// spec.replicas was written.
    Scaled,
    /// The signal could not be used; the target stays where it is.
    Held,
    /// A change waits (a rollout, replicas not yet ready).
    Deferred,
    /// Nothing to do.
    Unchanged,
    /// The sync stopped before deciding, or its write was refused.
    Failed,
}

impl SyncResult {
    pub const ALL: [SyncResult; 5] = [
        Self::Scaled,
        Self::Held,
        Self::Deferred,
        Self::Unchanged,
        Self::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scaled => "scaled",
            Self::Held => "held",
            Self::Deferred => "deferred",
            Self::Unchanged => "unchanged",
            Self::Failed => "failed",
        }
    }
}

impl EncodeLabelValue for SyncResult {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct FailureLabels {
    pub namespace: Name,
    pub scaler: Name,
    pub reason: FailureReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct MetricLabels {
    pub namespace: Name,
    pub scaler: Name,
    pub metric: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ConditionLabels {
    pub namespace: Name,
    pub scaler: Name,
    /// Ready, ScalingActive, ScalingLimited or (under an objective) ObjectiveMet.
    pub condition: &'static str,
    /// "true" or "false": the series of the condition's current status is 1, the other 0.
    pub status: &'static str,
}

/// The conditions exposed as `llmscaleoperator_condition`.
pub(super) const CONDITIONS: [&str; 4] =
    ["Ready", "ScalingActive", "ScalingLimited", "ObjectiveMet"];

/// The labels that name a scaler; every series made from them shares their two strings.
pub(super) fn scaler_labels(namespace: &str, scaler: &str) -> ScalerLabels {
    ScalerLabels {
        namespace: namespace.into(),
        scaler: scaler.into(),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ScaleLabels {
    pub namespace: Name,
    pub scaler: Name,
    /// up or down.
    pub direction: &'static str,
}
