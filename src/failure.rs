//! The reasons a sync fails, as written: the Ready condition's and the warning event's reason
//! (CamelCase), and the `reason` label of `llmscaleoperator_sync_failures_total`. Below both the
//! controller (whose `SyncError::reason` names one) and telemetry (which counts them), so neither
//! imports the other for it.

use prometheus_client::encoding::EncodeLabelValue;

/// The reason of a failed sync: a condition reason and event reason as written (CamelCase), and
/// the `reason` label of `llmscaleoperator_sync_failures_total`.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum FailureReason {
    UnknownTargetKind,
    TargetUnavailable,
    TargetNotFound,
    InvalidTarget,
    ServerAddressNotAllowed,
    SecretUnavailable,
    InvalidSecret,
    InvalidSpec,
    InvalidAnnotation,
    ConflictingAutoscaler,
    ConflictCheckFailed,
    ScaleFailed,
}

impl FailureReason {
    pub const ALL: [FailureReason; 12] = [
        Self::UnknownTargetKind,
        Self::TargetUnavailable,
        Self::TargetNotFound,
        Self::InvalidTarget,
        Self::ServerAddressNotAllowed,
        Self::SecretUnavailable,
        Self::InvalidSecret,
        Self::InvalidSpec,
        Self::InvalidAnnotation,
        Self::ConflictingAutoscaler,
        Self::ConflictCheckFailed,
        Self::ScaleFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownTargetKind => "UnknownTargetKind",
            Self::TargetUnavailable => "TargetUnavailable",
            Self::TargetNotFound => "TargetNotFound",
            Self::InvalidTarget => "InvalidTarget",
            Self::ServerAddressNotAllowed => "ServerAddressNotAllowed",
            Self::SecretUnavailable => "SecretUnavailable",
            Self::InvalidSecret => "InvalidSecret",
            Self::InvalidSpec => "InvalidSpec",
            Self::InvalidAnnotation => "InvalidAnnotation",
            Self::ConflictingAutoscaler => "ConflictingAutoscaler",
            Self::ConflictCheckFailed => "ConflictCheckFailed",
            Self::ScaleFailed => "ScaleFailed",
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
