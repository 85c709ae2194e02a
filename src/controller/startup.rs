//! Learning the start-up delay from the target's own pods: the seconds from each pod's creation
//! to its Ready condition. Pods are listed only when some may have just become Ready (fewer Ready
//! than asked for, or a Ready count that moved since the last sync), so a settled fleet costs no
//! request.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::api::{LLMScalerStatus, StartupStatus};
use crate::scaling::{TargetState, learn_startup};

use super::status::{startup_status, stored_startup};

/// Whether a pod may have become Ready since the last sync.
pub fn worth_a_look(previous: Option<&LLMScalerStatus>, target: &TargetState) -> bool {
    let last_ready = previous.map(|s| s.current_replicas);
    target.ready_replicas < target.spec_replicas || last_ready != Some(target.ready_replicas)
}

/// The creation-to-Ready seconds of the pods that became Ready after `after`, oldest first, and
/// the newest such Ready time.
pub fn samples(pods: &[Pod], after: Option<Timestamp>) -> (Vec<f64>, Option<Timestamp>) {
    let mut seen: Vec<(Timestamp, f64)> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let created = p.metadata.creation_timestamp.as_ref()?.0;
            let ready = p
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready" && c.status == "True")?
                .last_transition_time
                .as_ref()?
                .0;
            let fresh = after.is_none_or(|a| ready > a);
            fresh.then(|| (ready, ready.duration_since(created).as_secs_f64()))
        })
        .collect();
    seen.sort_by_key(|(ready, _)| *ready);
    let newest = seen.last().map(|(ready, _)| *ready);
    (seen.into_iter().map(|(_, s)| s).collect(), newest)
}

/// The start-up status after looking at the pods matching `selector`; the previous one when
/// there is nothing new (or nothing could be listed: learning is best effort and never fails a
/// sync).
pub async fn observe(
    client: &Client,
    namespace: &str,
    selector: &str,
    previous: Option<&LLMScalerStatus>,
) -> Option<StartupStatus> {
    let stored = previous.and_then(|s| s.startup.clone());
    let after = stored
        .as_ref()
        .and_then(|s| s.last_ready_time.as_ref())
        .map(|t| t.0);
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = match api.list(&ListParams::default().labels(selector)).await {
        Ok(list) => list.items,
        Err(error) => {
            tracing::debug!(error = %crate::error_chain::Chain(&error), "cannot list pods to learn the start-up delay");
            return stored;
        }
    };
    let (seconds, newest) = samples(&pods, after);
    if seconds.is_empty() {
        return stored;
    }
    let learned = learn_startup(stored_startup(previous), &seconds)?;
    Some(startup_status(learned, newest.or(after)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::fixture::t;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(created: i64, ready: Option<i64>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                creation_timestamp: Some(Time(t(created))),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready.is_some() { "True" } else { "False" }.into(),
                    last_transition_time: Some(Time(t(ready.unwrap_or(created)))),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn each_new_ready_pod_is_one_sample_in_ready_order() {
        let pods = [
            pod(0, Some(200)),
            pod(10, None),
            pod(50, Some(140)),
            pod(0, Some(30)),
        ];
        assert_eq!(
            samples(&pods, None),
            (vec![30.0, 90.0, 200.0], Some(t(200)))
        );
        // Only what became Ready after the last count.
        assert_eq!(samples(&pods, Some(t(140))), (vec![200.0], Some(t(200))));
        assert_eq!(samples(&pods, Some(t(200))), (vec![], None));
    }

    #[test]
    fn a_settled_fleet_is_not_listed() {
        let settled = TargetState {
            spec_replicas: 3,
            ready_replicas: 3,
            rollout: None,
        };
        let status = LLMScalerStatus {
            current_replicas: 3,
            ..LLMScalerStatus::default()
        };
        assert!(!worth_a_look(Some(&status), &settled));
        assert!(worth_a_look(None, &settled), "nothing seen yet");
        let grew = LLMScalerStatus {
            current_replicas: 2,
            ..status.clone()
        };
        assert!(worth_a_look(Some(&grew), &settled), "one just became Ready");
        let starting = TargetState {
            ready_replicas: 1,
            ..settled
        };
        assert!(worth_a_look(Some(&status), &starting));
    }
}
