//! Other autoscalers of the same target. Two writers of one `spec.replicas` take it from each
//! other at every sync, and neither says so; before it writes, a scaler looks for an
//! `autoscaling/v2` HorizontalPodAutoscaler, a KEDA ScaledObject (when that API is served) or an
//! older LLMScaler on its target, and writes nothing while one is there. Every lookup is in
//! memory: the HPAs and ScaledObjects are watched, the LLMScalers are the controller's own cache.
//!
//! A lookup costs the same whatever the size of the fleet: each kind is indexed by the target it
//! names ([`Claims`], [`ScalerIndex`]), and only the few objects filed under a scaler's own
//! target are read, from the watch caches as they are now. A scan of every cached scaler at every
//! sync was most of a sync's cost at 5,000 scalers (O(fleet²) work per period).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;
use thiserror::Error;

use super::cached_watch::{CachedWatch, OnEvent, compact_resource};
use crate::api::{LLMScaler, TargetRef};
use crate::supervisor::Supervisor;

/// How long a sync waits for a freshly started watch to list its kind.
const SYNC_TIMEOUT: Duration = Duration::from_secs(20);
/// How often to look again whether the KEDA API has appeared, while it is not served.
const REDISCOVER: Duration = Duration::from_secs(300);
/// How often the scaler index drops scalers that are gone and that no lookup has met since.
const SWEEP: Duration = Duration::from_secs(300);

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
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

    /// Whether `target` names this key, without allocating (asked at every sync).
    fn is(&self, target: &TargetRef) -> bool {
        let group = target
            .api_version
            .split_once('/')
            .map_or("", |(group, _)| group);
        self.group == group && self.kind == target.kind && self.name == target.name
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

/// The HPAs (or ScaledObjects) of one watch by the target they drive: namespace, target, then
/// the names of the objects claiming it. Kept from the watch's own events, after the reflector
/// has applied them to the store; a relist is filed afresh from the store when it is done.
#[derive(Default)]
pub struct Claims(Mutex<ClaimsInner>);

#[derive(Default)]
struct ClaimsInner {
    by_target: HashMap<String, HashMap<TargetKey, BTreeSet<String>>>,
    /// (namespace, name) → the target it is filed under.
    filed: HashMap<(String, String), TargetKey>,
}

impl ClaimsInner {
    fn file(&mut self, claim: &Claim) {
        let (Some(namespace), Some(name)) = (&claim.metadata.namespace, &claim.metadata.name)
        else {
            return;
        };
        let at = (namespace.clone(), name.clone());
        if self.filed.get(&at) == claim.target.as_ref() {
            return;
        }
        self.unfile(namespace, name);
        if let Some(target) = &claim.target {
            self.by_target
                .entry(namespace.clone())
                .or_default()
                .entry(target.clone())
                .or_default()
                .insert(name.clone());
            self.filed.insert(at, target.clone());
        }
    }

    fn unfile(&mut self, namespace: &str, name: &str) {
        let Some(target) = self.filed.remove(&(namespace.to_owned(), name.to_owned())) else {
            return;
        };
        if let Some(targets) = self.by_target.get_mut(namespace) {
            if let Some(names) = targets.get_mut(&target) {
                names.remove(name);
                if names.is_empty() {
                    targets.remove(&target);
                }
            }
            if targets.is_empty() {
                self.by_target.remove(namespace);
            }
        }
    }
}

impl Claims {
    fn lock(&self) -> std::sync::MutexGuard<'_, ClaimsInner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the index current with one event of the watch (already applied to `store`).
    fn observe(&self, event: &watcher::Event<Claim>, store: &Store<Claim>) {
        match event {
            watcher::Event::Apply(claim) => self.lock().file(claim),
            watcher::Event::Delete(claim) => {
                if let (Some(namespace), Some(name)) =
                    (&claim.metadata.namespace, &claim.metadata.name)
                {
                    self.lock().unfile(namespace, name);
                }
            }
            // A relist replaces the store when it is done: file what it holds now.
            watcher::Event::InitDone => {
                let mut inner = ClaimsInner::default();
                for claim in store.state() {
                    inner.file(&claim);
                }
                *self.lock() = inner;
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }

    /// The first (by name) object of `watch` that claims `target` in `namespace`, read from its
    /// store as it is now.
    fn find(
        &self,
        watch: &CachedWatch<Claim>,
        namespace: &str,
        target: &TargetKey,
    ) -> Option<Arc<Claim>> {
        let names: Vec<String> = self
            .lock()
            .by_target
            .get(namespace)
            .and_then(|targets| targets.get(target))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default();
        names.iter().find_map(|name| {
            let key = ObjectRef::new_with(name, watch.resource.clone()).within(namespace);
            watch
                .store
                .get(&key)
                .filter(|c| c.claims(namespace, target))
        })
    }
}

/// A watch of HPAs or ScaledObjects with its index by target.
struct Indexed {
    watch: CachedWatch<Claim>,
    claims: Arc<Claims>,
}

impl Indexed {
    fn start(
        client: Client,
        namespace: Option<&str>,
        resource: ApiResource,
        supervisor: &Supervisor,
        compact: fn(&DynamicObject) -> Claim,
    ) -> Arc<Self> {
        let claims = Arc::new(Claims::default());
        let index = claims.clone();
        let on_event: OnEvent<Claim> = Box::new(move |event, store| index.observe(event, store));
        let watch = CachedWatch::start(client, namespace, resource, supervisor, compact, on_event);
        Arc::new(Self { watch, claims })
    }

    fn find(&self, namespace: &str, target: &TargetKey) -> Option<Arc<Claim>> {
        self.claims.find(&self.watch, namespace, target)
    }
}

/// What the conflict checks read of an LLMScaler: the target it names, when it came, whether it
/// is a dry run. With shards, this is all a replica keeps of the scalers another replica leads
/// (see [`Peers`]); its strings are shared with the scaler index's entry of it, so that a
/// scaler of another shard costs them once.
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    pub uid: Arc<str>,
    pub name: Arc<str>,
    target: Arc<TargetKey>,
    created: Option<Timestamp>,
    dry_run: bool,
}

impl Peer {
    pub fn of(scaler: &LLMScaler) -> Self {
        Self {
            uid: scaler.metadata.uid.as_deref().unwrap_or_default().into(),
            name: scaler.name_any().into(),
            target: Arc::new(TargetKey::of(&scaler.spec.target_ref)),
            created: created(scaler),
            dry_run: super::annotations::is_dry_run(scaler),
        }
    }

    /// [`Self::of`], reusing the strings of `before` (what was kept of it) where they are the
    /// same: the watch brings a scaler of another shard at each of its leader's status writes,
    /// and each would otherwise copy them again.
    /// `name` is the scaler's ([`ResourceExt::name_any`]).
    fn of_reusing(scaler: &LLMScaler, name: &str, before: &Self) -> Self {
        let reused = |now: &str, kept: &Arc<str>| -> Arc<str> {
            if now == &**kept {
                kept.clone()
            } else {
                now.into()
            }
        };
        let target = &scaler.spec.target_ref;
        Self {
            uid: reused(
                scaler.metadata.uid.as_deref().unwrap_or_default(),
                &before.uid,
            ),
            name: reused(name, &before.name),
            target: if before.target.is(target) {
                before.target.clone()
            } else {
                Arc::new(TargetKey::of(target))
            },
            created: created(scaler),
            dry_run: super::annotations::is_dry_run(scaler),
        }
    }
}

fn created(scaler: &LLMScaler) -> Option<Timestamp> {
    scaler.meta().creation_timestamp.as_ref().map(|t| t.0)
}

/// What is kept of the scalers another replica leads (with shards): their [`Peer`]s, beside the
/// controller's cache, which never holds them. A scaler's spec and status are most of its
/// memory, and every replica of a sharded fleet watches every scaler.
#[derive(Default)]
pub struct Peers(Mutex<Kept>);

#[derive(Default)]
struct Kept {
    /// namespace → name → what is kept, and the list that last brought it.
    peers: HashMap<String, HashMap<Arc<str>, (Peer, u64)>>,
    /// The list of the scalers running now or last (counted from 1).
    list: u64,
}

impl Peers {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the [`Peer`] of `scaler`: whether that incarnation was not kept before, and the
    /// Peer kept (which shares what it can with the one kept before: file that one).
    pub fn keep(&self, scaler: &LLMScaler) -> (bool, Peer) {
        let namespace = scaler.metadata.namespace.as_deref().unwrap_or_default();
        let mut kept = self.lock();
        let list = kept.list;
        let names = match kept.peers.get_mut(namespace) {
            Some(names) => names,
            None => kept.peers.entry(namespace.to_owned()).or_default(),
        };
        let name = scaler.name_any();
        match names.get_mut(name.as_str()) {
            Some(entry) => {
                let peer = Peer::of_reusing(scaler, &name, &entry.0);
                let new = entry.0.uid != peer.uid;
                *entry = (peer.clone(), list);
                (new, peer)
            }
            None => {
                let peer = Peer::of(scaler);
                names.insert(peer.name.clone(), (peer.clone(), list));
                (true, peer)
            }
        }
    }

    /// `namespace/name` is kept no longer (deleted, or led here now).
    pub fn remove(&self, namespace: &str, name: &str) {
        let mut kept = self.lock();
        if let Some(names) = kept.peers.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                kept.peers.remove(namespace);
            }
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Peer> {
        let kept = self.lock();
        Some(kept.peers.get(namespace)?.get(name)?.0.clone())
    }

    /// `f(namespace, peer)` for every scaler kept.
    fn each(&self, mut f: impl FnMut(&str, &Peer)) {
        let kept = self.lock();
        for (namespace, names) in &kept.peers {
            for (peer, _) in names.values() {
                f(namespace, peer);
            }
        }
    }

    /// The uids kept.
    pub fn uids(&self) -> std::collections::HashSet<String> {
        let mut uids = std::collections::HashSet::new();
        self.each(|_, peer| {
            uids.insert(peer.uid.to_string());
        });
        uids
    }

    /// A list of the scalers starts: what it does not bring again is gone when it ends.
    pub fn list_started(&self) {
        self.lock().list += 1;
    }

    /// The list has ended: drops the scalers it did not bring (deleted while nothing watched).
    pub fn list_ended(&self) {
        let mut kept = self.lock();
        let list = kept.list;
        kept.peers.retain(|_, names| {
            names.retain(|_, (_, seen)| *seen == list);
            !names.is_empty()
        });
    }
}

/// Where the conflict checks read the LLMScalers as they are now: the controller's cache and,
/// with shards, what is kept of the scalers another replica leads.
#[derive(Clone)]
pub struct Scalers {
    pub cache: Store<LLMScaler>,
    pub peers: Arc<Peers>,
}

impl Scalers {
    /// `namespace/name` as it is now, if it is still the incarnation `uid`.
    fn current(&self, namespace: &str, name: &str, uid: &str) -> Option<Peer> {
        match self.cache.get(&ObjectRef::new(name).within(namespace)) {
            Some(cached) => {
                (cached.metadata.uid.as_deref() == Some(uid)).then(|| Peer::of(&cached))
            }
            None => self.peers.get(namespace, name).filter(|p| &*p.uid == uid),
        }
    }
}

/// The LLMScalers of one controller by the target they name, so that a sync reads only the
/// scalers of its own target. Filed from the controller's cache once it is ready (the controller
/// runs no sync before), then by each scaler's own syncs (its first comes at once when it is
/// created or its spec changes) and, with shards, by the watch for the scalers another replica
/// leads; checked against the scalers as they are now at every lookup: a scaler that is gone,
/// or that names another target now, is never taken for a claimant, and whether one is a dry
/// run is read as it is now.
#[derive(Default)]
struct ScalerIndex {
    /// namespace → target → (uid, name) of each scaler filed there: nearly always one, so a
    /// list (a map per target would allocate a node for its one entry).
    by_target: HashMap<Arc<str>, HashMap<Arc<TargetKey>, Vec<UidName>>>,
    /// uid → where it is filed. Both maps share each scaler's strings (and, for a scaler of
    /// another shard, its [`Peer`]'s): on a fleet of thousands they are most of the index.
    filed: HashMap<Arc<str>, Filed>,
    seeded: bool,
    swept: Option<Instant>,
}

/// A scaler's uid and name, as the index files it under its target.
type UidName = (Arc<str>, Arc<str>);

/// Where one scaler is filed.
struct Filed {
    namespace: Arc<str>,
    target: Arc<TargetKey>,
    name: Arc<str>,
}

impl ScalerIndex {
    /// Files `scaler` under the target it names now.
    fn file(&mut self, scaler: &LLMScaler) {
        let (Some(uid), Some(namespace)) = (&scaler.metadata.uid, &scaler.metadata.namespace)
        else {
            return;
        };
        let target = &scaler.spec.target_ref;
        let name = scaler.name_any();
        self.file_as(
            uid,
            namespace,
            &name,
            |key| key.is(target),
            || {
                (
                    uid.as_str().into(),
                    name.as_str().into(),
                    Arc::new(TargetKey::of(target)),
                )
            },
        );
    }

    /// Files `peer` of `namespace` under the target it names now, with the peer's own strings.
    fn file_peer(&mut self, namespace: &str, peer: &Peer) {
        self.file_as(
            &peer.uid,
            namespace,
            &peer.name,
            |key| *key == *peer.target,
            || (peer.uid.clone(), peer.name.clone(), peer.target.clone()),
        );
    }

    /// Files `uid` (`namespace/name`) under its target: `is` tells whether a key is that target
    /// (so that an unchanged entry costs no allocation, as at every sync), `parts` makes the
    /// entry's uid, name and target.
    fn file_as(
        &mut self,
        uid: &str,
        namespace: &str,
        name: &str,
        is: impl Fn(&TargetKey) -> bool,
        parts: impl FnOnce() -> (Arc<str>, Arc<str>, Arc<TargetKey>),
    ) {
        if let Some(filed) = self.filed.get(uid)
            && &*filed.namespace == namespace
            && is(&filed.target)
            && &*filed.name == name
        {
            return;
        }
        self.unfile(uid);
        let (uid, name, target) = parts();
        // One copy of each namespace's name, however many scalers it holds.
        let namespace: Arc<str> = self
            .by_target
            .get_key_value(namespace)
            .map_or_else(|| namespace.into(), |(ns, _)| ns.clone());
        self.by_target
            .entry(namespace.clone())
            .or_default()
            .entry(target.clone())
            .or_insert_with(|| Vec::with_capacity(1))
            .push((uid.clone(), name.clone()));
        self.filed.insert(
            uid,
            Filed {
                namespace,
                target,
                name,
            },
        );
    }

    fn unfile(&mut self, uid: &str) {
        let Some(filed) = self.filed.remove(uid) else {
            return;
        };
        if let Some(targets) = self.by_target.get_mut(&*filed.namespace) {
            if let Some(uids) = targets.get_mut(&*filed.target) {
                uids.retain(|(other, _)| &**other != uid);
                if uids.is_empty() {
                    targets.remove(&*filed.target);
                }
            }
            if targets.is_empty() {
                self.by_target.remove(&*filed.namespace);
            }
        }
    }

    /// [`Conflicts::register`].
    fn register(&mut self, scalers: Option<&Scalers>, scaler: &LLMScaler) {
        if !self.seeded
            && let Some(scalers) = scalers
        {
            self.file_all(scalers);
        }
        self.file(scaler);
        if let Some(scalers) = scalers
            && self.swept.is_some_and(|at| at.elapsed() >= SWEEP)
        {
            self.sweep(scalers);
            self.swept = Some(Instant::now());
        }
    }

    /// Files every scaler of `scalers`.
    fn file_all(&mut self, scalers: &Scalers) {
        for cached in scalers.cache.state() {
            self.file(&cached);
        }
        scalers
            .peers
            .each(|namespace, peer| self.file_peer(namespace, peer));
        if !self.seeded {
            self.seeded = true;
            self.swept = Some(Instant::now());
        }
    }

    /// The scalers filed under `target` in `namespace`: (uid, name).
    fn filed_under(&self, namespace: &str, target: &TargetKey) -> Vec<UidName> {
        self.by_target
            .get(namespace)
            .and_then(|targets| targets.get(target))
            .cloned()
            .unwrap_or_default()
    }

    /// Drops every scaler `scalers` no longer holds (the same uid under the same name).
    fn sweep(&mut self, scalers: &Scalers) {
        let gone: Vec<Arc<str>> = self
            .filed
            .iter()
            .filter(|(uid, filed)| {
                scalers
                    .current(&filed.namespace, &filed.name, uid)
                    .is_none()
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            self.unfile(&uid);
        }
    }
}

/// The oldest other LLMScaler that writes `target` in `namespace` and came before `scaler` (see
/// [`precedes`]): read from `scalers` as they are now, among those `index` files under that
/// target. Entries found stale on the way are mended.
fn older_scaler(
    index: &Mutex<ScalerIndex>,
    scalers: &Scalers,
    scaler: &LLMScaler,
    namespace: &str,
    target: &TargetKey,
) -> Option<Peer> {
    let lock = || index.lock().unwrap_or_else(PoisonError::into_inner);
    // Copied out: the scalers are read without holding the index.
    let filed = lock().filed_under(namespace, target);
    let mine = (created(scaler), scaler.name_any());
    let mut oldest: Option<Peer> = None;
    for (uid, name) in filed {
        if scaler.metadata.uid.as_deref() == Some(&*uid) {
            continue;
        }
        let Some(other) = scalers.current(namespace, &name, &uid) else {
            // Gone (or another incarnation under that name, filed by its own sync).
            lock().unfile(&uid);
            continue;
        };
        if *other.target != *target {
            // It names another target now: filed there.
            lock().file_peer(namespace, &other);
            continue;
        }
        if other.dry_run || !precedes(other.order(), (mine.0, &mine.1)) {
            continue;
        }
        if oldest
            .as_ref()
            .is_none_or(|o| precedes(other.order(), o.order()))
        {
            oldest = Some(other);
        }
    }
    oldest
}

impl Peer {
    /// What [`precedes`] compares.
    fn order(&self) -> (Option<Timestamp>, &str) {
        (self.created, &self.name)
    }
}

/// Whether KEDA's API is served, as last discovered.
enum Keda {
    Unknown,
    Absent { since: Instant },
    Watched(Arc<Indexed>),
}

/// The conflict check of one controller (one watched namespace, or all).
pub struct Conflicts {
    client: Client,
    namespace: Option<String>,
    supervisor: Supervisor,
    hpas: tokio::sync::OnceCell<Arc<Indexed>>,
    keda: tokio::sync::Mutex<Keda>,
    /// The controller's own cache of LLMScalers (and what is kept of another shard's), set once
    /// it exists.
    scalers: OnceLock<Scalers>,
    index: Mutex<ScalerIndex>,
}

impl Conflicts {
    pub fn new(client: Client, namespace: Option<String>, supervisor: Supervisor) -> Self {
        Self {
            client,
            namespace,
            supervisor,
            hpas: tokio::sync::OnceCell::new(),
            keda: tokio::sync::Mutex::new(Keda::Unknown),
            scalers: OnceLock::new(),
            index: Mutex::default(),
        }
    }

    /// Hands over the controller's cache of LLMScalers, and what is kept of another shard's.
    pub fn set_scalers(&self, scalers: Scalers) {
        // Set once per controller; a second call would be the same store.
        let _ = self.scalers.set(scalers);
    }

    fn index(&self) -> std::sync::MutexGuard<'_, ScalerIndex> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Files `scaler` under the target it names now; called at the start of each of its syncs,
    /// before anything can fail. The first call files every cached scaler (the controller syncs
    /// nothing before its cache is ready), and every few minutes scalers that are gone are
    /// dropped.
    pub fn register(&self, scaler: &LLMScaler) {
        self.index().register(self.scalers.get(), scaler);
    }

    /// Files every scaler, once a list of them has ended. With shards, the scalers of another
    /// replica never sync here: this, and each change the watch brings of them (see
    /// [`Self::file_peer`]), is how they are filed.
    pub fn file_cached(&self) {
        if let Some(scalers) = self.scalers.get() {
            self.index().file_all(scalers);
        }
    }

    /// Files a scaler of `namespace` another replica leads, as the watch brings it.
    pub fn file_peer(&self, namespace: &str, peer: &Peer) {
        self.index().file_peer(namespace, peer);
    }

    fn older_scaler(
        &self,
        scaler: &LLMScaler,
        namespace: &str,
        target: &TargetKey,
    ) -> Option<Peer> {
        older_scaler(&self.index, self.scalers.get()?, scaler, namespace, target)
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
            if !keda.watch.synced_within(SYNC_TIMEOUT).await {
                return Err(ConflictCheckError::NotSynced {
                    kind: SCALED_OBJECT_KIND,
                });
            }
            if let Some(found) = keda.find(namespace, &target) {
                return Ok(Some(Conflict {
                    kind: SCALED_OBJECT_KIND,
                    name: found.name_any(),
                }));
            }
        }
        let hpas = self.hpas().await;
        if !hpas.watch.synced_within(SYNC_TIMEOUT).await {
            return Err(ConflictCheckError::NotSynced { kind: HPA_KIND });
        }
        if let Some(found) = hpas.find(namespace, &target) {
            // An HPA KEDA made is named after its ScaledObject (found above, when KEDA's API is
            // watched); otherwise it is the HPA itself that writes.
            let (kind, name) = match found.made_by_keda {
                true => (SCALED_OBJECT_KIND, keda_owner(&found.name_any())),
                false => (HPA_KIND, found.name_any()),
            };
            return Ok(Some(Conflict { kind, name }));
        }
        let older = self.older_scaler(scaler, namespace, &target);
        Ok(older.map(|other| Conflict {
            kind: "LLMScaler",
            name: other.name.to_string(),
        }))
    }

    async fn hpas(&self) -> Arc<Indexed> {
        self.hpas
            .get_or_init(|| async {
                Indexed::start(
                    self.client.clone(),
                    self.namespace.as_deref(),
                    ApiResource::erase::<HorizontalPodAutoscaler>(&()),
                    &self.supervisor,
                    Claim::from_hpa,
                )
            })
            .await
            .clone()
    }

    /// The ScaledObject watch, started when KEDA's API is served; looked for again every few
    /// minutes while it is not, so KEDA installed later is noticed.
    async fn scaled_objects(&self) -> Result<Option<Arc<Indexed>>, ConflictCheckError> {
        let mut keda = self.keda.lock().await;
        match &*keda {
            Keda::Watched(watch) => return Ok(Some(watch.clone())),
            Keda::Absent { since } if since.elapsed() < REDISCOVER => return Ok(None),
            Keda::Absent { .. } | Keda::Unknown => {}
        }
        let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", SCALED_OBJECT_KIND);
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, _)) => {
                let watch = Indexed::start(
                    self.client.clone(),
                    self.namespace.as_deref(),
                    resource,
                    &self.supervisor,
                    Claim::from_scaled_object,
                );
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

/// Whether `a` came before `b` (creation time, name): created earlier, or at the same second
/// with a smaller name.
fn precedes(a: (Option<Timestamp>, &str), b: (Option<Timestamp>, &str)) -> bool {
    match (a.0, b.0) {
        (Some(x), Some(y)) if x != y => x < y,
        _ => a.1 < b.1,
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

    // ------------------------------------------------------------ the indexes against a scan

    use kube::runtime::reflector::store::Writer;
    use proptest::prelude::*;

    use super::super::cached_watch::Kind;

    /// A scaler of the generated fleets: few namespaces, targets and creation seconds, so that
    /// they collide (same target, same second) often.
    #[derive(Debug, Clone)]
    struct Spec {
        namespace: u8,
        name: u8,
        uid: u16,
        kind: u8,
        target: u8,
        beta: bool,
        created: u8,
        dry_run: bool,
        /// Led by another replica: kept as a peer, never in the cache, never synced here.
        elsewhere: bool,
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (
            0u8..2,
            0u8..12,
            0u8..2,
            0u8..3,
            any::<bool>(),
            0u8..3,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(namespace, name, kind, target, beta, created, dry_run, elsewhere)| Spec {
                    namespace,
                    name,
                    uid: 0,
                    kind,
                    target,
                    beta,
                    created,
                    dry_run,
                    elsewhere,
                },
            )
    }

    const KINDS: [&str; 2] = ["Deployment", "StatefulSet"];

    fn scaler_of(s: &Spec) -> LLMScaler {
        let mut annotations = serde_json::Map::new();
        if s.dry_run {
            annotations.insert(crate::names::DRY_RUN_ANNOTATION.into(), json!("true"));
        }
        serde_json::from_value(json!({
            "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
            "metadata": {
                "name": format!("s{}", s.name), "namespace": format!("ns{}", s.namespace),
                "uid": format!("u{}-{}-{}", s.namespace, s.name, s.uid),
                "creationTimestamp": format!("2026-01-01T00:00:0{}Z", s.created),
                "annotations": annotations,
            },
            "spec": {
                "targetRef": {
                    "apiVersion": if s.beta { "apps/v1beta2" } else { "apps/v1" },
                    "kind": KINDS[usize::from(s.kind)],
                    "name": format!("t{}", s.target),
                },
                "serverAddress": "http://prometheus:9090",
                "minReplicas": 1, "maxReplicas": 4,
                "metrics": [ { "query": "up", "target": "1" } ],
            }
        }))
        .unwrap()
    }

    /// What the conflict check answered before the index: any other non-dry-run scaler on the
    /// same target that came first, among every scaler, cached or kept as a peer.
    fn scanned(live: &[Spec], scaler: &LLMScaler) -> Vec<String> {
        let namespace = scaler.namespace().unwrap();
        let me = Peer::of(scaler);
        let mut found: Vec<String> = live
            .iter()
            .map(|s| (format!("ns{}", s.namespace), Peer::of(&scaler_of(s))))
            .filter(|(ns, other)| {
                *ns == namespace
                    && other.uid != me.uid
                    && other.target == me.target
                    && !other.dry_run
                    && precedes(other.order(), me.order())
            })
            .map(|(_, other)| other.name.to_string())
            .collect();
        found.sort();
        found
    }

    /// The fleet as the watch brings it: a scaler led here to the cache, another replica's kept
    /// as a peer and filed (as `shards::kept_elsewhere` does).
    struct Watched {
        writer: Writer<LLMScaler>,
        scalers: Scalers,
    }

    impl Watched {
        fn apply(&mut self, index: &Mutex<ScalerIndex>, s: &Spec) {
            let scaler = scaler_of(s);
            let namespace = format!("ns{}", s.namespace);
            if s.elsewhere {
                self.writer
                    .apply_watcher_event(&watcher::Event::Delete(scaler.clone()));
                let (_, peer) = self.scalers.peers.keep(&scaler);
                index.lock().unwrap().file_peer(&namespace, &peer);
            } else {
                self.scalers.peers.remove(&namespace, &scaler.name_any());
                self.writer
                    .apply_watcher_event(&watcher::Event::Apply(scaler));
            }
        }

        fn delete(&mut self, s: &Spec) {
            let scaler = scaler_of(s);
            self.scalers
                .peers
                .remove(&format!("ns{}", s.namespace), &scaler.name_any());
            self.writer
                .apply_watcher_event(&watcher::Event::Delete(scaler));
        }
    }

    #[derive(Debug, Clone)]
    enum Change {
        /// Deleted: no sync of it follows.
        Delete(usize),
        /// Its spec names another target (a sync follows at once, if it is led here).
        Retarget(usize, u8, u8),
        /// An annotation only (no sync follows).
        ToggleDryRun(usize),
        /// A new scaler (a sync follows at once, if it is led here).
        Create(Spec),
        /// Deleted and created again under its name, a new uid (a sync follows, if led here).
        Recreate(usize),
        /// Its shard moves to or from another replica (no sync follows).
        Move(usize),
    }

    fn change() -> impl Strategy<Value = Change> {
        prop_oneof![
            (0usize..32).prop_map(Change::Delete),
            (0usize..32, 0u8..2, 0u8..3).prop_map(|(i, k, t)| Change::Retarget(i, k, t)),
            (0usize..32).prop_map(Change::ToggleDryRun),
            spec().prop_map(Change::Create),
            (0usize..32).prop_map(Change::Recreate),
            (0usize..32).prop_map(Change::Move),
        ]
    }

    /// A scaler of namespace `ns` named `name`, incarnation `uid`.
    fn scaler(ns: &str, name: &str, uid: &str) -> LLMScaler {
        let shape = Spec {
            namespace: 0,
            name: 0,
            uid: 0,
            kind: 0,
            target: 0,
            beta: false,
            created: 0,
            dry_run: false,
            elsewhere: true,
        };
        let mut scaler = scaler_of(&shape);
        scaler.metadata.namespace = Some(ns.to_owned());
        scaler.metadata.name = Some(name.to_owned());
        scaler.metadata.uid = Some(uid.to_owned());
        scaler
    }

    #[test]
    fn what_is_kept_of_other_scalers_follows_the_watch_and_its_lists() {
        let others = Peers::default();
        let keep = |ns: &str, name: &str, uid: &str| others.keep(&scaler(ns, name, uid)).0;
        // New, the same again, another incarnation under the name.
        assert!(keep("ns", "a", "u-a"));
        assert!(!keep("ns", "a", "u-a"));
        assert!(keep("ns", "a", "u-a2"));
        assert!(keep("ns", "b", "u-b"));
        assert!(keep("other", "a", "u-c"));
        assert_eq!(others.get("ns", "a").map(|p| p.uid), Some("u-a2".into()));
        assert_eq!(others.get("ns", "c"), None);
        // What the conflict checks read of it.
        assert_eq!(
            others.get("ns", "b"),
            Some(Peer::of(&scaler("ns", "b", "u-b")))
        );

        // Led here now (or deleted).
        others.remove("ns", "b");
        assert_eq!(others.get("ns", "b"), None);
        assert_eq!(
            others.uids(),
            ["u-a2", "u-c"].map(str::to_owned).into_iter().collect()
        );

        // A list that brings only ns/a again: other/a was deleted while nothing watched.
        others.list_started();
        assert!(!keep("ns", "a", "u-a2"));
        others.list_ended();
        assert_eq!(others.uids(), ["u-a2".to_owned()].into_iter().collect());
        // What the watch brings after the list stays until the next list.
        assert!(keep("ns", "d", "u-d"));
        others.list_started();
        others.list_ended();
        assert!(others.uids().is_empty());
    }

    #[test]
    fn a_scaler_of_another_shard_keeps_one_copy_of_its_strings() {
        let others = Peers::default();
        let index = Mutex::new(ScalerIndex::default());
        let (_, first) = others.keep(&scaler("ns", "a", "u-a"));
        index.lock().unwrap().file_peer("ns", &first);
        // Its next status write: the watch brings a fresh copy, the kept strings stay.
        let (new, again) = others.keep(&scaler("ns", "a", "u-a"));
        assert!(!new);
        assert!(Arc::ptr_eq(&again.uid, &first.uid));
        assert!(Arc::ptr_eq(&again.name, &first.name));
        assert!(Arc::ptr_eq(&again.target, &first.target));
        index.lock().unwrap().file_peer("ns", &again);
        // The index files the peer's own strings.
        let filed = index.lock().unwrap().filed_under("ns", &first.target);
        assert!(Arc::ptr_eq(&filed[0].0, &first.uid));
        assert!(Arc::ptr_eq(&filed[0].1, &first.name));
        let index = index.lock().unwrap();
        let (target, _) = index.by_target["ns"].get_key_value(&*first.target).unwrap();
        assert!(Arc::ptr_eq(target, &first.target));
        // Retargeted: the new target is kept, the uid and name are still shared.
        let mut moved = scaler("ns", "a", "u-a");
        moved.spec.target_ref.kind = "StatefulSet".into();
        moved.spec.target_ref.name = "t9".into();
        let (_, moved) = others.keep(&moved);
        assert!(Arc::ptr_eq(&moved.uid, &first.uid));
        assert_eq!(moved.target.name, "t9");
    }

    proptest! {
        /// The index finds a conflict exactly when the scan of every scaler did, names one the
        /// scan found, and the oldest of them: after a start (filed from the cache and what is
        /// kept of another replica's scalers) and after creations, deletions, retargets,
        /// annotation changes and shards moving, of which only the syncs of the scalers led
        /// here and the watch's news of another replica's are registered.
        #[test]
        fn the_scaler_index_answers_as_the_scan_did(
            fleet in proptest::collection::vec(spec(), 0..16),
            changes in proptest::collection::vec(change(), 0..24),
        ) {
            let mut writer: Writer<LLMScaler> = Writer::default();
            let others = Arc::new(Peers::default());
            writer.apply_watcher_event(&watcher::Event::Init);
            // One object per namespace/name: a later one of the fleet replaces an earlier.
            let mut live: Vec<Spec> = Vec::new();
            for s in fleet {
                live.retain(|l| (l.namespace, l.name) != (s.namespace, s.name));
                live.push(s);
            }
            for s in &live {
                let scaler = scaler_of(s);
                if s.elsewhere {
                    others.keep(&scaler);
                } else {
                    writer.apply_watcher_event(&watcher::Event::InitApply(scaler));
                }
            }
            writer.apply_watcher_event(&watcher::Event::InitDone);
            let scalers = Scalers { cache: writer.as_reader(), peers: others };
            let mut watched = Watched { writer, scalers: scalers.clone() };
            let index = Mutex::new(ScalerIndex::default());
            // As at the end of every list (`Conflicts::file_cached`).
            index.lock().unwrap().file_all(&scalers);
            let mut next_uid = 1;
            for change in changes {
                let pick = |i: usize| (!live.is_empty()).then(|| i % live.len());
                let synced = match change {
                    Change::Delete(i) => {
                        if let Some(i) = pick(i) {
                            watched.delete(&live.remove(i));
                        }
                        None
                    }
                    Change::Retarget(i, kind, target) => pick(i).map(|i| {
                        live[i].kind = kind;
                        live[i].target = target;
                        live[i].clone()
                    }),
                    Change::ToggleDryRun(i) => {
                        if let Some(i) = pick(i) {
                            live[i].dry_run = !live[i].dry_run;
                            watched.apply(&index, &live[i]);
                        }
                        None
                    }
                    Change::Create(mut s) => {
                        s.uid = next_uid;
                        next_uid += 1;
                        if let Some(old) = live.iter().position(|l| (l.namespace, l.name) == (s.namespace, s.name)) {
                            watched.delete(&live.remove(old));
                        }
                        live.push(s.clone());
                        Some(s)
                    }
                    Change::Recreate(i) => pick(i).map(|i| {
                        watched.delete(&live[i]);
                        live[i].uid = next_uid;
                        next_uid += 1;
                        live[i].clone()
                    }),
                    Change::Move(i) => {
                        if let Some(i) = pick(i) {
                            live[i].elsewhere = !live[i].elsewhere;
                            watched.apply(&index, &live[i]);
                        }
                        None
                    }
                };
                if let Some(s) = synced {
                    watched.apply(&index, &s);
                    if !s.elsewhere {
                        index.lock().unwrap().register(Some(&scalers), &scaler_of(&s));
                    }
                }
            }
            // Every scaler led here syncs now, and registers first.
            for s in live.iter().filter(|s| !s.elsewhere) {
                let scaler = scaler_of(s);
                index.lock().unwrap().register(Some(&scalers), &scaler);
                let namespace = scaler.namespace().unwrap();
                let target = TargetKey::of(&scaler.spec.target_ref);
                let found = older_scaler(&index, &scalers, &scaler, &namespace, &target)
                    .map(|o| o.name);
                let expected = scanned(&live, &scaler);
                match &found {
                    None => prop_assert!(expected.is_empty(), "{}: missed {expected:?}", scaler.name_any()),
                    Some(name) => {
                        prop_assert!(expected.iter().any(|e| **e == **name), "{}: {name} not in {expected:?}", scaler.name_any());
                        let peers: Vec<Peer> = live
                            .iter()
                            .filter(|o| o.namespace == s.namespace)
                            .map(|o| Peer::of(&scaler_of(o)))
                            .collect();
                        let winner = peers.iter().find(|p| p.name == *name).unwrap();
                        for other in peers.iter().filter(|p| expected.iter().any(|e| **e == *p.name)) {
                            prop_assert!(!precedes(other.order(), winner.order()), "{} came before {name}", other.name);
                        }
                    }
                }
            }
            // Nothing filed that is not cached or kept.
            let mut swept = index.lock().unwrap();
            swept.sweep(&scalers);
            prop_assert_eq!(swept.filed.len(), scalers.cache.len() + scalers.peers.uids().len());
        }

        /// The HPA (ScaledObject) index follows its watch's events, a relist included, and finds
        /// what a scan of its store finds.
        #[test]
        fn the_claim_index_answers_as_the_scan_did(
            events in proptest::collection::vec((0u8..3, 0u8..6, 0u8..2, 0u8..3), 0..40),
            probes in proptest::collection::vec((0u8..2, 0u8..3), 1..8),
        ) {
            let resource = Kind::new(ApiResource::erase::<HorizontalPodAutoscaler>(&()));
            let mut writer: Writer<Claim> = Writer::new(resource.clone());
            let store = writer.as_reader();
            let claims = Claims::default();
            let hpa = |name: u8, ns: u8, target: u8| Claim::from_hpa(&object(json!({
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": { "name": format!("h{name}"), "namespace": format!("ns{ns}") },
                "spec": { "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": format!("t{target}") } }
            })));
            let mut apply = |event: watcher::Event<Claim>| {
                writer.apply_watcher_event(&event);
                claims.observe(&event, &store);
            };
            apply(watcher::Event::Init);
            apply(watcher::Event::InitDone);
            for (what, name, ns, target) in events {
                match what {
                    0 => apply(watcher::Event::Apply(hpa(name, ns, target))),
                    1 => apply(watcher::Event::Delete(hpa(name, ns, target))),
                    // A relist with what the store holds now, less this one.
                    _ => {
                        let kept: Vec<Arc<Claim>> = store.state();
                        apply(watcher::Event::Init);
                        for c in kept.iter().filter(|c| c.metadata.name != Some(format!("h{name}"))) {
                            apply(watcher::Event::InitApply((**c).clone()));
                        }
                        apply(watcher::Event::InitDone);
                    }
                }
            }
            let watch = CachedWatch::for_test(resource, store.clone());
            for (ns, target) in probes {
                let namespace = format!("ns{ns}");
                let key = TargetKey::new("apps/v1", "Deployment", &format!("t{target}"));
                let found = claims.find(&watch, &namespace, &key).map(|c| c.name_any());
                let mut scanned: Vec<String> = store
                    .state()
                    .iter()
                    .filter(|c| c.claims(&namespace, &key))
                    .map(|c| c.name_any())
                    .collect();
                scanned.sort();
                prop_assert_eq!(found, scanned.first().cloned());
            }
        }
    }
}
