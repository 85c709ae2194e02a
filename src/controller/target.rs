//! Reading a scale target generically: spec.replicas, status.readyReplicas and, for
//! Deployments, whether a rollout is in progress.

use kube::api::DynamicObject;
use serde_json::Value;
use thiserror::Error;

use crate::scaling::TargetState;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TargetError {
    #[error("{kind} {name} has no integer spec.replicas, so it cannot be scaled")]
    NoReplicas { kind: String, name: String },
}

/// The parts of a target a sync needs.
pub fn snapshot(
    kind: &str,
    api_version: &str,
    object: &DynamicObject,
) -> Result<TargetState, TargetError> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let spec_replicas =
        int_at(&object.data, "/spec/replicas").ok_or_else(|| TargetError::NoReplicas {
            kind: kind.to_owned(),
            name,
        })?;
    let ready_replicas = int_at(&object.data, "/status/readyReplicas").unwrap_or(0);
    let rollout = if is_deployment(kind, api_version) {
        rollout_in_progress(object.metadata.generation, &object.data, spec_replicas)
    } else {
        None
    };
    Ok(TargetState {
        spec_replicas,
        ready_replicas,
        rollout,
    })
}

fn int_at(data: &Value, pointer: &str) -> Option<i32> {
    data.pointer(pointer)?
        .as_i64()
        .and_then(|v| i32::try_from(v).ok())
}

/// The rollout guard applies to the apps group's Deployment only.
pub(crate) fn is_deployment(kind: &str, api_version: &str) -> bool {
    kind == "Deployment"
        && api_version
            .split_once('/')
            .is_some_and(|(group, _)| group == "apps")
}

/// Why a Deployment is mid-rollout, if it is: its controller has not observed the latest spec,
/// not every replica runs the new template yet, or old-template pods are still around.
fn rollout_in_progress(
    generation: Option<i64>,
    data: &Value,
    spec_replicas: i32,
) -> Option<String> {
    let observed = data
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if let Some(generation) = generation
        && observed < generation
    {
        return Some(format!(
            "the Deployment controller has not observed generation {generation} yet (observed {observed})"
        ));
    }
    let updated = int_at(data, "/status/updatedReplicas").unwrap_or(0);
    if updated < spec_replicas {
        return Some(format!(
            "{updated} of {spec_replicas} replicas run the current template"
        ));
    }
    let total = int_at(data, "/status/replicas").unwrap_or(0);
    if total > updated {
        return Some(format!(
            "{} replicas of an older template are still running",
            total - updated
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(generation: i64, spec: Value, status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "vllm", "generation": generation },
            "spec": spec, "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_settled_deployment() {
        let d = object(
            2,
            json!({"replicas": 3}),
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3}),
        );
        assert_eq!(
            snapshot("Deployment", "apps/v1", &d).unwrap(),
            TargetState {
                spec_replicas: 3,
                ready_replicas: 3,
                rollout: None
            }
        );
    }

    #[test]
    fn each_rollout_signal_defers() {
        let cases = [
            json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3}),
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2, "readyReplicas": 3}),
            json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 3, "readyReplicas": 3}),
        ];
        for status in cases {
            let d = object(2, json!({"replicas": 3}), status.clone());
            assert!(
                snapshot("Deployment", "apps/v1", &d)
                    .unwrap()
                    .rollout
                    .is_some(),
                "{status}"
            );
        }
    }

    #[test]
    fn other_kinds_have_no_rollout_guard_and_missing_ready_is_zero() {
        let s = object(5, json!({"replicas": 2}), json!({}));
        let state = snapshot("StatefulSet", "apps/v1", &s).unwrap();
        assert_eq!(
            state,
            TargetState {
                spec_replicas: 2,
                ready_replicas: 0,
                rollout: None
            }
        );
        let lws = snapshot("Deployment", "example.com/v1", &s).unwrap();
        assert_eq!(lws.rollout, None, "only apps/Deployment is guarded");
    }

    #[test]
    fn a_kind_without_spec_replicas_is_an_error() {
        let cm = object(1, json!({"data": 1}), json!({}));
        let err = snapshot("ConfigMap", "v1", &cm).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ConfigMap vllm has no integer spec.replicas, so it cannot be scaled"
        );
    }
}
