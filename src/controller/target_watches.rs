//! Watch caches of scale targets, one reflector per kind, started the first time a scaler
//! points at that kind. A sync reads its target from memory instead of GETting it, and only the
//! few fields it reads are kept (`WatchedTarget`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::GroupVersionKind;
use kube::runtime::reflector::ObjectRef;
use thiserror::Error;
use tokio::sync::Mutex;

use super::cached_watch::{CachedWatch, Kind};
use super::watched_target::WatchedTarget;
use crate::api::TargetRef;
use crate::supervisor::Supervisor;

/// How long a sync waits for a freshly started watch to list its kind.
const SYNC_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Error)]
pub enum TargetLookupError {
    #[error("targetRef: the API server does not serve kind {kind} in {api_version}")]
    UnknownKind { api_version: String, kind: String },
    #[error("targetRef: cannot discover {kind} in {api_version}")]
    Discovery {
        api_version: String,
        kind: String,
        #[source]
        source: kube::Error,
    },
    #[error("the watch of {kind} has not listed its objects within {}s", SYNC_TIMEOUT.as_secs())]
    NotSynced { kind: String },
}

/// kubectl apply's copy of the whole object, kept in an annotation.
pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The target caches of this process.
pub struct TargetWatches {
    client: Client,
    namespace: Option<String>,
    supervisor: Supervisor,
    watches: Mutex<HashMap<GroupVersionKind, Arc<CachedWatch<WatchedTarget>>>>,
}

impl TargetWatches {
    pub fn new(client: Client, namespace: Option<String>, supervisor: Supervisor) -> Self {
        Self {
            client,
            namespace,
            supervisor,
            watches: Mutex::default(),
        }
    }

    /// The target named by `target_ref` in `namespace`, or `None` if it does not exist.
    pub async fn get(
        &self,
        target_ref: &TargetRef,
        namespace: &str,
    ) -> Result<(Kind, Option<Arc<WatchedTarget>>), TargetLookupError> {
        let watch = self.watch(target_ref).await?;
        if !watch.synced_within(SYNC_TIMEOUT).await {
            return Err(TargetLookupError::NotSynced {
                kind: target_ref.kind.clone(),
            });
        }
        let key = ObjectRef::new_with(&target_ref.name, watch.resource.clone()).within(namespace);
        Ok((watch.resource.clone(), watch.store.get(&key)))
    }

    async fn watch(
        &self,
        target_ref: &TargetRef,
    ) -> Result<Arc<CachedWatch<WatchedTarget>>, TargetLookupError> {
        let gvk = gvk(target_ref);
        let mut watches = self.watches.lock().await;
        if let Some(watch) = watches.get(&gvk) {
            return Ok(watch.clone());
        }
        let (resource, _caps) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|source| match source {
                kube::Error::Api(status) if status.code == 404 => TargetLookupError::UnknownKind {
                    api_version: target_ref.api_version.clone(),
                    kind: target_ref.kind.clone(),
                },
                kube::Error::Discovery(_) => TargetLookupError::UnknownKind {
                    api_version: target_ref.api_version.clone(),
                    kind: target_ref.kind.clone(),
                },
                source => TargetLookupError::Discovery {
                    api_version: target_ref.api_version.clone(),
                    kind: target_ref.kind.clone(),
                    source,
                },
            })?;
        let watch = Arc::new(CachedWatch::start(
            self.client.clone(),
            self.namespace.as_deref(),
            resource,
            &self.supervisor,
            WatchedTarget::from_object,
        ));
        watches.insert(gvk, watch.clone());
        Ok(watch)
    }
}

fn gvk(target_ref: &TargetRef) -> GroupVersionKind {
    let (group, version) = match target_ref.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", target_ref.api_version.as_str()),
    };
    GroupVersionKind::gvk(group, version, &target_ref.kind)
}
