//! Other autoscalers of the same target. Two writers of one `spec.replicas` take it from each
//! other at every sync, and neither says so; before it writes, a scaler looks for an
//! `autoscaling/v2` HorizontalPodAutoscaler, a KEDA ScaledObject (when that API is served) or an
//! older LLMScaler on its target, and writes nothing while one is there. Every lookup is in
//! memory: the HPAs and ScaledObjects are watched, the LLMScalers are the controller's own cache.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;
use thiserror::Error;
use tokio::sync::Mutex;

use super::cached_watch::{CachedWatch, compact_resource};
use crate::api::{LLMScaler, TargetRef};
use crate::supervisor::Supervisor;

/// How long a sync waits for a freshly started watch to list its kind.
const SYNC_TIMEOUT: Duration = Duration::from_secs(20);
/// How often to look again whether the KEDA API has appeared, while it is not served.
const REDISCOVER: Duration = Duration::from_secs(300);

const HPA_KIND: &str = "HorizontalPodAutoscaler";
const SCALED_OBJECT_KIND: &str = "ScaledObject";

#[derive(Debug, Error)]
pub enum ConflictCheckError {
    #[error(
        "cannot tell whether another autoscaler targets this object: the watch of {kind} has not listed within {}s (may the operator list and watch them?)",
        SYNC_TIMEOUT.as_secs()
    )]
    NotSynced { kind: &'static str },
    #[error("cannot tell whether another autoscaler targets this object: discovering {kind}")]
    Discovery {
        kind: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// The other autoscaler found on a scaler's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// HorizontalPodAutoscaler, ScaledObject or LLMScaler.
    pub kind: &'static str,
    pub name: String,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// A scale target as the three kinds name it; the version does not matter (`apps/v1` and
/// `apps/v1beta2` are the same Deployment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TargetKey {
    group: String,
    kind: String,
    name: String,
}

impl TargetKey {
    fn new(api_version: &str, kind: &str, name: &str) -> Self {
        let group = api_version
            .split_once('/')
            .map_or("", |(group, _)| group)
            .to_owned();
        Self {
            group,
            kind: kind.to_owned(),
            name: name.to_owned(),
        }
    }

    fn of(target: &TargetRef) -> Self {
        Self::new(&target.api_version, &target.kind, &target.name)
    }
}

/// What is kept of an HPA or a ScaledObject: whose replicas it drives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claim {
    /// Name and namespace only.
    metadata: ObjectMeta,
    target: Option<TargetKey>,
    /// An HPA that KEDA made for a ScaledObject: the ScaledObject is the one to name.
    made_by_keda: bool,
}

compact_resource!(Claim);

impl Claim {
    fn from_hpa(object: &DynamicObject) -> Self {
        Self::from_object(object, "apps/v1", "")
    }

    /// A ScaledObject's target defaults to an apps/v1 Deployment.
    fn from_scaled_object(object: &DynamicObject) -> Self {
        Self::from_object(object, "apps/v1", "Deployment")
    }

    fn from_object(object: &DynamicObject, default_api: &str, default_kind: &str) -> Self {
        let reference = object.data.pointer("/spec/scaleTargetRef");
        let field = |name: &str| reference.and_then(|r| r.get(name)).and_then(Value::as_str);
        let target = field("name").map(|name| {
            TargetKey::new(
                field("apiVersion").unwrap_or(default_api),
                field("kind").unwrap_or(default_kind),
                name,
            )
        });
        let made_by_keda = object
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == SCALED_OBJECT_KIND && o.api_version.starts_with("keda.sh/"));
        Self {
            metadata: ObjectMeta {
                name: object.metadata.name.clone(),
                namespace: object.metadata.namespace.clone(),
                ..ObjectMeta::default()
            },
            target,
            made_by_keda,
        }
    }

    fn claims(&self, namespace: &str, target: &TargetKey) -> bool {
        self.metadata.namespace.as_deref() == Some(namespace)
            && self.target.as_ref() == Some(target)
    }
}

/// Whether KEDA's API is served, as last discovered.
enum Keda {
    Unknown,
    Absent { since: Instant },
    Watched(Arc<CachedWatch<Claim>>),
}

/// The conflict check of one controller (one watched namespace, or all).
pub struct Conflicts {
    client: Client,
    namespace: Option<String>,
    supervisor: Supervisor,
    hpas: tokio::sync::OnceCell<Arc<CachedWatch<Claim>>>,
    keda: Mutex<Keda>,
    /// The controller's own cache of LLMScalers, set once it exists.
    scalers: OnceLock<Store<LLMScaler>>,
}

impl Conflicts {
    pub fn new(client: Client, namespace: Option<String>, supervisor: Supervisor) -> Self {
        Self {
            client,
            namespace,
            supervisor,
            hpas: tokio::sync::OnceCell::new(),
            keda: Mutex::new(Keda::Unknown),
            scalers: OnceLock::new(),
        }
    }

    /// Hands over the controller's cache of LLMScalers.
    pub fn set_scalers(&self, store: Store<LLMScaler>) {
        // Set once per controller; a second call would be the same store.
        let _ = self.scalers.set(store);
    }

    /// The autoscaler that already drives `scaler`'s target, if any. Of two LLMScalers on one
    /// target the older one keeps it (by creation time, then name): adding a second scaler by
    /// mistake must not stop the first.
    pub async fn find(
        &self,
        scaler: &LLMScaler,
        namespace: &str,
    ) -> Result<Option<Conflict>, ConflictCheckError> {
        let target = TargetKey::of(&scaler.spec.target_ref);
        if let Some(keda) = self.scaled_objects().await? {
            if !keda.synced_within(SYNC_TIMEOUT).await {
                return Err(ConflictCheckError::NotSynced {
                    kind: SCALED_OBJECT_KIND,
                });
            }
            if let Some(found) = keda.store.find(|c| c.claims(namespace, &target)) {
                return Ok(Some(Conflict {
                    kind: SCALED_OBJECT_KIND,
                    name: found.name_any(),
                }));
            }
        }
        let hpas = self.hpas().await;
        if !hpas.synced_within(SYNC_TIMEOUT).await {
            return Err(ConflictCheckError::NotSynced { kind: HPA_KIND });
        }
        if let Some(found) = hpas.store.find(|c| c.claims(namespace, &target)) {
            // An HPA KEDA made is named after its ScaledObject (found above, when KEDA's API is
            // watched); otherwise it is the HPA itself that writes.
            let (kind, name) = match found.made_by_keda {
                true => (SCALED_OBJECT_KIND, keda_owner(&found.name_any())),
                false => (HPA_KIND, found.name_any()),
            };
            return Ok(Some(Conflict { kind, name }));
        }
        let older = self.scalers.get().and_then(|store| {
            store.find(|other| {
                other.namespace().as_deref() == Some(namespace)
                    && other.uid() != scaler.uid()
                    && TargetKey::of(&other.spec.target_ref) == target
                    && !super::annotations::is_dry_run(other)
                    && precedes(other, scaler)
            })
        });
        Ok(older.map(|other| Conflict {
            kind: "LLMScaler",
            name: other.name_any(),
        }))
    }

    async fn hpas(&self) -> Arc<CachedWatch<Claim>> {
        self.hpas
            .get_or_init(|| async {
                Arc::new(CachedWatch::start(
                    self.client.clone(),
                    self.namespace.as_deref(),
                    ApiResource::erase::<HorizontalPodAutoscaler>(&()),
                    &self.supervisor,
                    Claim::from_hpa,
                ))
            })
            .await
            .clone()
    }

    /// The ScaledObject watch, started when KEDA's API is served; looked for again every few
    /// minutes while it is not, so KEDA installed later is noticed.
    async fn scaled_objects(&self) -> Result<Option<Arc<CachedWatch<Claim>>>, ConflictCheckError> {
        let mut keda = self.keda.lock().await;
        match &*keda {
            Keda::Watched(watch) => return Ok(Some(watch.clone())),
            Keda::Absent { since } if since.elapsed() < REDISCOVER => return Ok(None),
            Keda::Absent { .. } | Keda::Unknown => {}
        }
        let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", SCALED_OBJECT_KIND);
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, _)) => {
                let watch = Arc::new(CachedWatch::start(
                    self.client.clone(),
                    self.namespace.as_deref(),
                    resource,
                    &self.supervisor,
                    Claim::from_scaled_object,
                ));
                *keda = Keda::Watched(watch.clone());
                Ok(Some(watch))
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                *keda = Keda::Absent {
                    since: Instant::now(),
                };
                Ok(None)
            }
            Err(kube::Error::Discovery(_)) => {
                *keda = Keda::Absent {
                    since: Instant::now(),
                };
                Ok(None)
            }
            Err(source) => Err(ConflictCheckError::Discovery {
                kind: SCALED_OBJECT_KIND,
                source,
            }),
        }
    }
}

/// KEDA names the HPA of ScaledObject `x` `keda-hpa-x`.
fn keda_owner(hpa: &str) -> String {
    hpa.strip_prefix("keda-hpa-").unwrap_or(hpa).to_owned()
}

/// Whether `a` came before `b`: created earlier, or at the same second with a smaller name.
fn precedes(a: &LLMScaler, b: &LLMScaler) -> bool {
    let created = |s: &LLMScaler| s.meta().creation_timestamp.as_ref().map(|t| t.0);
    match (created(a), created(b)) {
        (Some(x), Some(y)) if x != y => x < y,
        _ => a.name_any() < b.name_any(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(data: Value) -> DynamicObject {
        serde_json::from_value(data).unwrap()
    }

    #[test]
    fn targets_match_by_group_kind_and_name_not_version() {
        assert_eq!(
            TargetKey::new("apps/v1", "Deployment", "vllm"),
            TargetKey::new("apps/v1beta2", "Deployment", "vllm")
        );
        assert_ne!(
            TargetKey::new("apps/v1", "Deployment", "vllm"),
            TargetKey::new("apps/v1", "StatefulSet", "vllm")
        );
    }

    #[test]
    fn a_scaled_object_defaults_to_a_deployment_and_keda_hpas_are_known() {
        let so = Claim::from_scaled_object(&object(json!({
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": { "name": "so", "namespace": "ns" },
            "spec": { "scaleTargetRef": { "name": "vllm" } }
        })));
        assert!(so.claims("ns", &TargetKey::new("apps/v1", "Deployment", "vllm")));
        assert!(!so.claims("other", &TargetKey::new("apps/v1", "Deployment", "vllm")));

        let hpa = Claim::from_hpa(&object(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": { "name": "keda-hpa-so", "namespace": "ns",
                "ownerReferences": [{ "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                                      "name": "so", "uid": "u" }] },
            "spec": { "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm" } }
        })));
        assert!(hpa.made_by_keda);
        assert_eq!(keda_owner("keda-hpa-so"), "so");
    }
}
