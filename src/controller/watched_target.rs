//! Reading a scale target generically: spec.replicas, status.readyReplicas and, for
//! Deployments, whether a rollout is in progress.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::DynamicObject;
use kube::core::Selector;
use serde_json::Value;
use thiserror::Error;

use crate::scaling::{Rollout, TargetState};

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TargetError {
    #[error("{kind} {name} has no integer spec.replicas, so it cannot be scaled")]
    NoReplicas { kind: String, name: String },
}

/// What the operator keeps of a scale target, taken from each watched object as it arrives: the
/// pod template, managed fields, labels and conditions are never held, which is most of a
/// workload object's size on a big fleet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatchedTarget {
    pub name: String,
    pub uid: String,
    pub generation: Option<i64>,
    pub spec_replicas: Option<i32>,
    /// spec.selector as a label selector for listing pods, or why it cannot be one.
    pub selector: Option<Result<String, String>>,
    pub replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
    pub updated_replicas: Option<i32>,
    pub observed_generation: Option<i64>,
}

impl WatchedTarget {
    pub fn from_object(object: &DynamicObject) -> Self {
        let meta = &object.metadata;
        let data = &object.data;
        Self {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            generation: meta.generation,
            spec_replicas: int_at(data, "/spec/replicas"),
            selector: data.pointer("/spec/selector").map(render_selector),
            replicas: int_at(data, "/status/replicas"),
            ready_replicas: int_at(data, "/status/readyReplicas"),
            updated_replicas: int_at(data, "/status/updatedReplicas"),
            observed_generation: data
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64),
        }
    }
}

/// A write of spec.replicas this process made, as it saw the target then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnWrite {
    pub target_uid: String,
    /// metadata.generation of the object the write was decided on.
    pub generation: i64,
    pub from: i32,
    pub to: i32,
}

/// The spec.replicas to decide on, when the watch has not shown this process's own last write
/// yet: the object is still the one that write was decided on (same uid, same generation, the
/// count it was written over), and a write of spec.replicas moves the generation. `None` once the
/// watch has moved on (by that write or any other), or without a generation to tell by.
///
/// Why: a watch that must start over (an API server restarted, its resource versions too old)
/// may take its backoff's seconds to list again, and meanwhile every sync would read the count
/// from before the write, write the same count again and report the scale-up again (seen on the
/// control plane: "from 2 to 4" nine times, one a second).
pub fn unseen_write(target: &WatchedTarget, written: &OwnWrite) -> Option<i32> {
    (target.uid == written.target_uid
        && target.generation == Some(written.generation)
        && target.spec_replicas == Some(written.from))
    .then_some(written.to)
}

fn render_selector(raw: &Value) -> Result<String, String> {
    let selector: LabelSelector = serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
    let selector = Selector::try_from(selector).map_err(|e| e.to_string())?;
    Ok(selector.to_string())
}

/// The parts of a target a sync needs.
pub fn snapshot(
    kind: &str,
    api_version: &str,
    target: &WatchedTarget,
) -> Result<TargetState, TargetError> {
    let spec_replicas = target
        .spec_replicas
        .ok_or_else(|| TargetError::NoReplicas {
            kind: kind.to_owned(),
            name: target.name.clone(),
        })?;
    let rollout = if is_deployment(kind, api_version) {
        rollout_in_progress(target, spec_replicas)
    } else {
        None
    };
    Ok(TargetState {
        spec_replicas,
        ready_replicas: target.ready_replicas.unwrap_or(0),
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
fn rollout_in_progress(target: &WatchedTarget, spec_replicas: i32) -> Option<Rollout> {
    let observed = target.observed_generation.unwrap_or(0);
    if let Some(generation) = target.generation
        && observed < generation
    {
        return Some(Rollout::GenerationNotObserved {
            generation,
            observed,
        });
    }
    let updated = target.updated_replicas.unwrap_or(0);
    if updated < spec_replicas {
        return Some(Rollout::NotUpdated {
            updated,
            spec: spec_replicas,
        });
    }
    let total = target.replicas.unwrap_or(0);
    if total > updated {
        return Some(Rollout::OldPodsRunning {
            old: total - updated,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_own_write_stands_until_the_watch_shows_the_target_moved() {
        let target = |uid: &str, generation: Option<i64>, replicas: i32| WatchedTarget {
            uid: uid.into(),
            generation,
            spec_replicas: Some(replicas),
            ..WatchedTarget::default()
        };
        let written = OwnWrite {
            target_uid: "t1".into(),
            generation: 7,
            from: 2,
            to: 4,
        };
        // The watch still shows the object the write was decided on: the write is what it has.
        assert_eq!(unseen_write(&target("t1", Some(7), 2), &written), Some(4));
        // The watch caught up (the write moved the generation), or someone else moved it.
        assert_eq!(unseen_write(&target("t1", Some(8), 4), &written), None);
        assert_eq!(unseen_write(&target("t1", Some(9), 2), &written), None);
        // Another object of that name, or nothing to tell the generation by.
        assert_eq!(unseen_write(&target("t2", Some(7), 2), &written), None);
        assert_eq!(unseen_write(&target("t1", None, 2), &written), None);
    }

    fn object(generation: i64, spec: Value, status: Value) -> WatchedTarget {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "vllm", "generation": generation,
                "annotations": { "kubectl.kubernetes.io/last-applied-configuration": "{...}" },
                "managedFields": [ { "manager": "kubectl" } ] },
            "spec": spec, "status": status,
        }))
        .unwrap();
        WatchedTarget::from_object(&object)
    }

    #[test]
    fn only_what_a_sync_reads_is_kept() {
        let t = object(
            4,
            json!({"replicas": 3, "selector": {"matchLabels": {"app": "m"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]},
                "template": {"spec": {"containers": []}}}),
            json!({"readyReplicas": 3, "observedGeneration": 4, "conditions": [{"type": "Available"}]}),
        );
        assert_eq!(t.name, "vllm");
        assert_eq!(t.generation, Some(4));
        assert_eq!(t.spec_replicas, Some(3));
        assert_eq!(t.selector, Some(Ok("app=m,tier in (gpu)".to_owned())));
        assert_eq!(
            (t.ready_replicas, t.observed_generation),
            (Some(3), Some(4))
        );
        let bad = object(
            1,
            json!({"replicas": 1, "selector": {"matchExpressions": [{"key": "x", "operator": "Bogus"}]}}),
            json!({}),
        );
        assert!(matches!(bad.selector, Some(Err(_))), "{:?}", bad.selector);
        assert_eq!(object(1, json!({"replicas": 1}), json!({})).selector, None);
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
        let expected = [
            "the Deployment controller has not observed generation 2 yet (observed 1)",
            "2 of 3 replicas run the current template",
            "1 replicas of an older template are still running",
        ];
        for (status, expected) in cases.into_iter().zip(expected) {
            let d = object(2, json!({"replicas": 3}), status.clone());
            let rollout = snapshot("Deployment", "apps/v1", &d).unwrap().rollout;
            assert_eq!(
                rollout.map(|r| r.to_string()).as_deref(),
                Some(expected),
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
