//! Watch caches of scale targets, one reflector per kind, started the first time a scaler
//! points at that kind. A sync reads its target from memory instead of GETting it, and only the
//! few fields it reads are kept (`WatchedTarget`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use thiserror::Error;
use tokio::sync::Mutex;

use super::watched_target::WatchedTarget;
use crate::api::TargetRef;
use crate::supervisor::Supervisor;

/// How long a sync waits for a freshly started watch to list its kind.
const SYNC_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Error)]
pub enum TargetLookupError {
    #[error("targetRef: the API server does not serve kind {kind} in {api_version}")]
    UnknownKind { api_version: String, kind: String },
    #[error("targetRef: cannot discover {kind} in {api_version}: {source}")]
    Discovery {
        api_version: String,
        kind: String,
        #[source]
        source: kube::Error,
    },
    #[error("the watch of {kind} has not listed its objects within {}s", SYNC_TIMEOUT.as_secs())]
    NotSynced { kind: String },
}

struct Watch {
    resource: ApiResource,
    store: Store<WatchedTarget>,
    /// Flips to true once the first list has been applied to `store`. Our own signal rather than
    /// `Store::wait_until_ready`, which was seen to leave one of several concurrent waiters
    /// asleep until its timeout.
    synced: tokio::sync::watch::Receiver<bool>,
}

/// kubectl apply's copy of the whole object, kept in an annotation.
pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The target caches of this process.
pub struct TargetWatches {
    client: Client,
    namespace: Option<String>,
    supervisor: Supervisor,
    watches: Mutex<HashMap<GroupVersionKind, Arc<Watch>>>,
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
    ) -> Result<(ApiResource, Option<Arc<WatchedTarget>>), TargetLookupError> {
        let watch = self.watch(target_ref).await?;
        let mut synced = watch.synced.clone();
        let synced = tokio::time::timeout(SYNC_TIMEOUT, synced.wait_for(|ready| *ready)).await;
        if !matches!(synced, Ok(Ok(_))) {
            return Err(TargetLookupError::NotSynced {
                kind: target_ref.kind.clone(),
            });
        }
        let key = ObjectRef::new_with(&target_ref.name, watch.resource.clone()).within(namespace);
        Ok((watch.resource.clone(), watch.store.get(&key)))
    }

    async fn watch(&self, target_ref: &TargetRef) -> Result<Arc<Watch>, TargetLookupError> {
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
        let api: Api<DynamicObject> = match &self.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default().any_semantic())
                .default_backoff()
                .map_ok(compact),
        );
        let kind = resource.kind.clone();
        let shutdown = self.supervisor.shutdown();
        let (synced_tx, synced) = tokio::sync::watch::channel(false);
        // A watch that ended would leave a cache that looks synced and never changes again.
        self.supervisor
            .spawn_service(format!("{kind} target watch"), async move {
                let run = stream.for_each(|event| {
                    match event {
                        // The reflector has applied the event to the store before passing it on.
                        Ok(watcher::Event::InitDone) => {
                            synced_tx.send_replace(true);
                        }
                        Ok(_) => {}
                        Err(error) => tracing::warn!(%kind, %error, "target watch error; retrying"),
                    }
                    futures::future::ready(())
                });
                tokio::select! {
                    () = run => {}
                    () = shutdown.cancelled() => {}
                }
            });
        tracing::info!(kind = %resource.kind, api_version = %resource.api_version, "watching targets");
        let watch = Arc::new(Watch {
            resource,
            store,
            synced,
        });
        watches.insert(gvk, watch.clone());
        Ok(watch)
    }
}

/// The event with each object reduced to what a sync reads, before the store keeps it.
fn compact(event: watcher::Event<DynamicObject>) -> watcher::Event<WatchedTarget> {
    use watcher::Event;
    match event {
        Event::Apply(o) => Event::Apply(WatchedTarget::from_object(&o)),
        Event::Delete(o) => Event::Delete(WatchedTarget::from_object(&o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(WatchedTarget::from_object(&o)),
        Event::InitDone => Event::InitDone,
    }
}

fn gvk(target_ref: &TargetRef) -> GroupVersionKind {
    let (group, version) = match target_ref.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", target_ref.api_version.as_str()),
    };
    GroupVersionKind::gvk(group, version, &target_ref.kind)
}
