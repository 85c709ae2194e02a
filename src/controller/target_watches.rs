//! Watch caches of scale targets, one watch per kind, started the first time a scaler points at
//! that kind. A sync reads its target from memory instead of GETting it, and only the few fields
//! it reads are kept (`WatchedTarget`), of the targets the scalers evaluated here point at only
//! (`claimed_targets`): a scaler claims its target when the scalers' watch brings it to this
//! replica and releases it when it goes (deleted, retargeted, or led by another replica now).
//! A target claimed after its watch passed it is read once from the API server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::watcher::Event;
use thiserror::Error;
use tokio::sync::Mutex;

use super::cached_watch::{self, Kind};
use super::claimed_targets::{ClaimedTargets, Lookup, TargetName};
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
    #[error("cannot read {kind} {name}")]
    Read {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// kubectl apply's copy of the whole object, kept in an annotation.
pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The target caches of this process.
pub struct TargetWatches {
    client: Client,
    namespace: Option<String>,
    supervisor: Supervisor,
    watches: Mutex<HashMap<GroupVersionKind, Arc<TargetWatch>>>,
    /// The claimed targets of each kind, made at the first claim on the kind: claims come before
    /// its watch starts (as the scalers are listed), so that the watch's first list keeps them.
    kinds: std::sync::Mutex<HashMap<GroupVersionKind, Arc<ClaimedTargets>>>,
    /// The target each scaler claims, by the scaler's uid.
    claims: std::sync::Mutex<HashMap<String, Claim>>,
}

/// A scaler's claim: its target, in the store of the target's kind.
struct Claim {
    store: Arc<ClaimedTargets>,
    target: TargetName,
}

/// The watch of one kind and what it keeps.
struct TargetWatch {
    resource: Kind,
    store: Arc<ClaimedTargets>,
    synced: tokio::sync::watch::Receiver<bool>,
    /// The watch failed and has not delivered since (it waits out its backoff, or lists again).
    erring: Arc<AtomicBool>,
}

impl TargetWatches {
    pub fn new(client: Client, namespace: Option<String>, supervisor: Supervisor) -> Self {
        Self {
            client,
            namespace,
            supervisor,
            watches: Mutex::default(),
            kinds: Default::default(),
            claims: Default::default(),
        }
    }

    /// The target named by `target_ref` in `namespace`, or `None` if it does not exist, as
    /// `holder` (a scaler's uid) reads it: from memory, or once from the API server when the
    /// watch passed it before anyone claimed it.
    pub async fn get(
        &self,
        target_ref: &TargetRef,
        namespace: &str,
        holder: &str,
    ) -> Result<(Kind, Option<Arc<WatchedTarget>>), TargetLookupError> {
        let watch = self.watch(target_ref).await?;
        if !cached_watch::synced_within(&watch.synced, SYNC_TIMEOUT).await {
            return Err(TargetLookupError::NotSynced {
                kind: target_ref.kind.clone(),
            });
        }
        let target = (namespace.to_owned(), target_ref.name.clone());
        // The scalers' watch claimed it already; claimed again (a no-op then) so that a sync
        // never finds its own target unclaimed and reads it from the API server every time.
        self.claim_in(holder, &watch.store, &target);
        let object = match watch.store.lookup(&target) {
            Lookup::Known(object) => object,
            Lookup::Unknown(ticket) => {
                let read = self.read(&watch.resource, &target).await?;
                watch.store.fill(&target, ticket, read)
            }
            // Released while this sync ran (the scaler went): what the API server has.
            Lookup::Unclaimed => self.read(&watch.resource, &target).await?.map(Arc::new),
        };
        Ok((watch.resource.clone(), object))
    }

    /// Whether the watch of `target_ref`'s kind failed and has not delivered since: what its
    /// store holds may be behind the API server.
    pub async fn erring(&self, target_ref: &TargetRef) -> bool {
        self.watches
            .lock()
            .await
            .get(&gvk(target_ref))
            .is_some_and(|w| w.erring.load(Ordering::Relaxed))
    }

    /// `holder` (a scaler's uid) points at `target_ref` in `namespace`: its target is kept from
    /// now on, and the target it claimed before (if another) is released.
    pub fn claim(&self, holder: &str, target_ref: &TargetRef, namespace: &str) {
        let store = self.store_of(gvk(target_ref));
        self.claim_in(
            holder,
            &store,
            &(namespace.to_owned(), target_ref.name.clone()),
        );
    }

    /// The claimed targets of kind `gvk` (made at its first use).
    fn store_of(&self, gvk: GroupVersionKind) -> Arc<ClaimedTargets> {
        self.kinds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(gvk)
            .or_default()
            .clone()
    }

    fn claim_in(&self, holder: &str, store: &Arc<ClaimedTargets>, target: &TargetName) {
        let mut claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(claim) = claims.get(holder) {
            if Arc::ptr_eq(&claim.store, store) && claim.target == *target {
                return;
            }
            claim.store.release(&claim.target);
        }
        store.claim(target);
        claims.insert(
            holder.to_owned(),
            Claim {
                store: store.clone(),
                target: target.clone(),
            },
        );
    }

    /// `holder` (a scaler's uid) is not evaluated here any more: its target goes unless another
    /// scaler claims it.
    pub fn release(&self, holder: &str) {
        let claim = self
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(holder);
        if let Some(claim) = claim {
            claim.store.release(&claim.target);
        }
    }

    /// Releases the claim of every scaler `keep` says no to.
    pub fn retain_claims(&self, keep: impl Fn(&str) -> bool) {
        self.claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|holder, claim| {
                let kept = keep(holder);
                if !kept {
                    claim.store.release(&claim.target);
                }
                kept
            });
    }

    /// How many targets are kept, of every kind.
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.kinds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|store| store.len())
            .sum()
    }

    /// One target read from the API server. A list of the one name rather than a GET: the
    /// operator is granted list and watch on its targets, not get, and a list by name is the
    /// same one request.
    async fn read(
        &self,
        resource: &Kind,
        (namespace, name): &TargetName,
    ) -> Result<Option<WatchedTarget>, TargetLookupError> {
        tracing::debug!(kind = %resource.kind, %namespace, %name, "target not kept yet: reading it");
        let params = ListParams::default().fields(&format!("metadata.name={name}"));
        let listed = cached_watch::api(self.client.clone(), Some(namespace), resource)
            .list(&params)
            .await
            .map_err(|source| TargetLookupError::Read {
                kind: resource.kind.clone(),
                name: name.clone(),
                source,
            })?;
        Ok(listed
            .items
            .iter()
            .find(|object| object.metadata.name.as_deref() == Some(name))
            .map(WatchedTarget::from_object))
    }

    async fn watch(&self, target_ref: &TargetRef) -> Result<Arc<TargetWatch>, TargetLookupError> {
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
        let store = self.store_of(gvk.clone());
        let api = cached_watch::api(self.client.clone(), self.namespace.as_deref(), &resource);
        let events = kube::runtime::watcher(
            api,
            kube::runtime::watcher::Config::default().any_semantic(),
        );
        let events = kube::runtime::WatchStreamExt::default_backoff(events);
        // Erring from a failed watch until the watch delivers again (an event, or the end of a
        // list started over): meanwhile the store may miss the latest writes.
        let erring = Arc::new(AtomicBool::new(false));
        let flag = erring.clone();
        let events = events.inspect(move |item| match item {
            Err(_) => flag.store(true, Ordering::Relaxed),
            Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => {
                flag.store(false, Ordering::Relaxed);
            }
            Ok(Event::Init | Event::InitApply(_)) => {}
        });
        let sink = store.clone();
        let synced = cached_watch::run_events::<DynamicObject, _>(
            &resource.kind,
            events,
            &self.supervisor,
            move |event| sink.apply(event),
        );
        tracing::info!(kind = %resource.kind, api_version = %resource.api_version, "watching");
        let watch = Arc::new(TargetWatch {
            resource: Kind::new(resource),
            store,
            synced,
            erring,
        });
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
