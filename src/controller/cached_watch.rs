//! One watch of one kind, kept in memory by kube's reflector in a compact form: only the fields
//! the controller reads are stored, which is most of an object's size on a big fleet. The other
//! autoscalers the conflict check looks for are each one of these; the scale targets run their
//! watch the same way ([`run_events`]) into a store of the claimed targets only.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::supervisor::Supervisor;

/// The kind of a watch, shared: kube's store keys every object by a reference that carries its
/// dynamic type, so a plain `ApiResource` there is five strings copied into each key (a quarter
/// of a compact target's memory), where this is one pointer.
/// (Comparing two of the same `Arc` stops at the pointer.)
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kind(Arc<ApiResource>);

impl Kind {
    pub fn new(resource: ApiResource) -> Self {
        Self(Arc::new(resource))
    }
}

impl std::ops::Deref for Kind {
    type Target = ApiResource;

    fn deref(&self) -> &ApiResource {
        &self.0
    }
}

/// Implements `kube::Resource` for a compact type with an `metadata: ObjectMeta` field, stored
/// by the reflector like the object it came from (its dynamic type is the object's kind).
macro_rules! compact_resource {
    ($type:ty) => {
        impl kube::Resource for $type {
            type DynamicType = $crate::controller::cached_watch::Kind;
            type Scope = kube::core::DynamicResourceScope;

            fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                dt.kind.as_str().into()
            }

            fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                dt.group.as_str().into()
            }

            fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                dt.version.as_str().into()
            }

            fn api_version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                dt.api_version.as_str().into()
            }

            fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                dt.plural.as_str().into()
            }

            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use compact_resource;

/// Told each event of a watch once the reflector has applied it to the store (an index kept
/// beside the store, see `conflicts`).
pub type OnEvent<K> = Box<dyn Fn(&watcher::Event<K>, &Store<K>) + Send + Sync>;

/// A watch of one kind and its in-memory store.
pub struct CachedWatch<K: kube::Resource<DynamicType = Kind> + Clone + 'static> {
    pub resource: Kind,
    pub store: Store<K>,
    /// Flips to true once the first list has been applied to `store`. Our own signal rather than
    /// `Store::wait_until_ready`, which was seen to leave one of several concurrent waiters
    /// asleep until its timeout.
    synced: tokio::sync::watch::Receiver<bool>,
}

impl<K> CachedWatch<K>
where
    K: kube::Resource<DynamicType = Kind> + Clone + Send + Sync + 'static,
{
    /// Starts watching `resource` in `namespace` (every namespace for `None`) under
    /// `supervisor`, keeping `compact(object)` of each object and telling `on_event` each event
    /// after the store has it.
    pub fn start(
        client: Client,
        namespace: Option<&str>,
        resource: ApiResource,
        supervisor: &Supervisor,
        compact: fn(&DynamicObject) -> K,
        on_event: OnEvent<K>,
    ) -> Self {
        let api = api(client, namespace, &resource);
        let resource = Kind::new(resource);
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default().any_semantic())
                .default_backoff()
                .map_ok(move |event| event.map_compact(compact)),
        );
        let applied = store.clone();
        let synced = run_events(&resource.kind, stream, supervisor, move |event| {
            on_event(event, &applied);
        });
        tracing::info!(kind = %resource.kind, api_version = %resource.api_version, "watching");
        Self {
            resource,
            store,
            synced,
        }
    }

    /// A watch of nothing around `store`, for tests of what reads it.
    #[cfg(test)]
    pub fn for_test(resource: Kind, store: Store<K>) -> Self {
        Self {
            resource,
            store,
            synced: tokio::sync::watch::channel(true).1,
        }
    }

    /// Whether the first list has been applied, waiting at most `timeout` for it.
    pub async fn synced_within(&self, timeout: Duration) -> bool {
        synced_within(&self.synced, timeout).await
    }
}

/// The objects of `resource` in `namespace` (every namespace for `None`).
pub(super) fn api(
    client: Client,
    namespace: Option<&str>,
    resource: &ApiResource,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, resource),
        None => Api::all_with(client, resource),
    }
}

/// Runs the watch `events` of `kind` under `supervisor` until shutdown, telling `sink` each
/// event; the receiver flips to true once the first list has been told. A watch that ended would
/// leave a cache that looks synced and never changes again, so it runs as a service.
pub(super) fn run_events<K, S>(
    kind: &str,
    events: S,
    supervisor: &Supervisor,
    mut sink: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> tokio::sync::watch::Receiver<bool>
where
    K: Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let kind = kind.to_owned();
    let shutdown = supervisor.shutdown();
    let (synced_tx, synced) = tokio::sync::watch::channel(false);
    supervisor.spawn_service(format!("{kind} watch"), async move {
        let run = events.for_each(|event| {
            match &event {
                Ok(event) => {
                    sink(event);
                    if matches!(event, watcher::Event::InitDone) {
                        synced_tx.send_replace(true);
                    }
                }
                Err(error) => tracing::warn!(%kind, error = %crate::error_chain::Chain(error), "watch error; retrying"),
            }
            futures::future::ready(())
        });
        tokio::select! {
            () = run => {}
            () = shutdown.cancelled() => {}
        }
    });
    synced
}

/// Whether `synced` (of [`run_events`]) has flipped, waiting at most `timeout` for it.
pub(super) async fn synced_within(
    synced: &tokio::sync::watch::Receiver<bool>,
    timeout: Duration,
) -> bool {
    let mut synced = synced.clone();
    matches!(
        tokio::time::timeout(timeout, synced.wait_for(|ready| *ready)).await,
        Ok(Ok(_))
    )
}

/// A watch event with its object replaced by the compact form.
trait MapCompact {
    fn map_compact<K>(self, compact: fn(&DynamicObject) -> K) -> watcher::Event<K>;
}

impl MapCompact for watcher::Event<DynamicObject> {
    fn map_compact<K>(self, compact: fn(&DynamicObject) -> K) -> watcher::Event<K> {
        use watcher::Event;
        match self {
            Event::Apply(o) => Event::Apply(compact(&o)),
            Event::Delete(o) => Event::Delete(compact(&o)),
            Event::Init => Event::Init,
            Event::InitApply(o) => Event::InitApply(compact(&o)),
            Event::InitDone => Event::InitDone,
        }
    }
}
