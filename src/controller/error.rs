//! Why a sync stopped before it could decide or act. One type, rendered three ways: the Ready
//! condition and the warning event show the reason and the message, and the operator's metrics
//! count failures by the same reason.

use thiserror::Error;

pub use crate::failure::FailureReason;

use super::headers::HeadersError;
use super::secrets::SecretError;
use super::server_access::AccessError;
use super::target_watches::TargetLookupError;
use super::watched_target::TargetError;
use crate::api::behavior::BehaviorError;
use crate::signals::allow::AllowError;
use crate::signals::decision_server::DecisionError;

/// A failure the user can see and fix (a missing target, a spec the controller cannot use, a
/// credential it cannot read) or the cluster refused a write. Each is reported on the scaler and
/// retried after retryPeriodSeconds; none is an error of the controller itself.
#[derive(Debug, Error)]
pub enum SyncError {
    #[error(transparent)]
    TargetLookup(#[from] TargetLookupError),
    #[error("{kind} {name} not found in namespace {namespace}")]
    TargetNotFound {
        kind: String,
        name: String,
        namespace: String,
    },
    #[error(transparent)]
    InvalidTarget(#[from] TargetError),
    /// Checked before any request: the address may be somewhere the operator must not call.
    #[error(transparent)]
    ServerAddress(#[from] AllowError),
    #[error(transparent)]
    ServerAccess(#[from] super::server_access::AccessError),
    /// A field admission refuses today, on an object stored before the rule.
    #[error(transparent)]
    Behavior(#[from] BehaviorError),
    #[error("customProvider is required when metricProvider is Custom")]
    NoCustomProvider,
    #[error("annotation {annotation} is {value:?}: {expected}, or remove it")]
    InvalidAnnotation {
        annotation: &'static str,
        value: String,
        expected: String,
    },
    #[error(transparent)]
    DecisionUrl(DecisionError),
    /// Another autoscaler drives the target: two writers would take spec.replicas from each
    /// other at every sync.
    #[error(
        "{other} also scales {kind}/{name}: this scaler writes nothing while it does (remove one of them, or annotate this scaler {dry_run}=true to keep it as an observer)"
    )]
    ConflictingAutoscaler {
        kind: String,
        name: String,
        other: super::conflicts::Conflict,
        dry_run: &'static str,
    },
    #[error(transparent)]
    ConflictCheck(#[from] super::conflicts::ConflictCheckError),
    #[error("cannot set spec.replicas of {kind} {name} to {replicas}")]
    Scale {
        kind: String,
        name: String,
        replicas: i32,
        #[source]
        source: kube::Error,
    },
}

impl SyncError {
    pub fn reason(&self) -> FailureReason {
        match self {
            Self::TargetLookup(TargetLookupError::UnknownKind { .. }) => {
                FailureReason::UnknownTargetKind
            }
            Self::TargetLookup(_) => FailureReason::TargetUnavailable,
            Self::ConflictCheck(_) => FailureReason::ConflictCheckFailed,
            Self::ConflictingAutoscaler { .. } => FailureReason::ConflictingAutoscaler,
            Self::TargetNotFound { .. } => FailureReason::TargetNotFound,
            Self::InvalidTarget(_) => FailureReason::InvalidTarget,
            Self::ServerAddress(_) => FailureReason::ServerAddressNotAllowed,
            Self::ServerAccess(access) => match access {
                AccessError::Secret(SecretError::Read { .. })
                | AccessError::Headers(HeadersError::Secret(SecretError::Read { .. })) => {
                    FailureReason::SecretUnavailable
                }
                AccessError::Secret(SecretError::MissingKey { .. })
                | AccessError::Headers(HeadersError::Secret(SecretError::MissingKey { .. }))
                | AccessError::Invalid { .. }
                | AccessError::Client { .. } => FailureReason::InvalidSecret,
                AccessError::AuthorizationTwice | AccessError::Headers(_) => {
                    FailureReason::InvalidSpec
                }
            },
            Self::Behavior(_) | Self::NoCustomProvider | Self::DecisionUrl(_) => {
                FailureReason::InvalidSpec
            }
            Self::InvalidAnnotation { .. } => FailureReason::InvalidAnnotation,
            Self::Scale { .. } => FailureReason::ScaleFailed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derived label value is the variant's name, so it must be the reason as written.
    #[test]
    fn the_label_is_the_condition_reason() {
        for reason in FailureReason::ALL {
            assert_eq!(format!("{reason:?}"), reason.as_str());
        }
    }

    #[test]
    fn each_failure_has_its_reason() {
        let cases = [
            (
                SyncError::TargetLookup(TargetLookupError::UnknownKind {
                    api_version: "x/v1".into(),
                    kind: "Y".into(),
                }),
                FailureReason::UnknownTargetKind,
            ),
            (
                SyncError::TargetLookup(TargetLookupError::NotSynced { kind: "Y".into() }),
                FailureReason::TargetUnavailable,
            ),
            (
                SyncError::from(AccessError::from(HeadersError::Secret(SecretError::Read {
                    field: "serverHeadersFrom",
                    name: "auth".into(),
                    source: kube::Error::Api(Box::new(
                        kube::core::Status::failure("forbidden", "Forbidden").with_code(403),
                    )),
                }))),
                FailureReason::SecretUnavailable,
            ),
            (
                SyncError::from(AccessError::from(HeadersError::KeyName {
                    secret: "auth".into(),
                    key: "bad key".into(),
                })),
                FailureReason::InvalidSpec,
            ),
            (
                SyncError::from(AccessError::Secret(SecretError::MissingKey {
                    field: "serverTLS.ca",
                    name: "ca".into(),
                    key: "ca.crt".into(),
                })),
                FailureReason::InvalidSecret,
            ),
            (
                SyncError::from(AccessError::Invalid {
                    field: "serverTLS.ca",
                    secret: "ca".into(),
                    key: "ca.crt".into(),
                    problem: "holds no PEM certificate",
                }),
                FailureReason::InvalidSecret,
            ),
            (
                SyncError::from(AccessError::AuthorizationTwice),
                FailureReason::InvalidSpec,
            ),
            (SyncError::NoCustomProvider, FailureReason::InvalidSpec),
        ];
        for (error, reason) in cases {
            assert_eq!(error.reason(), reason, "{error}");
        }
        assert_eq!(
            SyncError::TargetNotFound {
                kind: "Deployment".into(),
                name: "vllm".into(),
                namespace: "ns".into()
            }
            .to_string(),
            "Deployment vllm not found in namespace ns"
        );
    }
}
