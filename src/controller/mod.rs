//! Everything that talks to the cluster on behalf of an LLMScaler.

mod annotations;
mod cached_watch;
mod claimed_targets;
pub mod conflicts;
mod error;
pub mod event_writer;
pub mod events;
#[cfg(test)]
mod fast_tier;
mod generations;
pub mod headers;
mod list_triggers;
mod memory;
mod objective;
mod preflight;
mod reads;
mod reconcile;
mod recurrence;
mod relist;
pub mod scale;
pub mod schedule;
pub mod secrets;
pub mod server_access;
mod shards;
mod startup;
pub mod status;
pub mod target_watches;
pub mod victims;
pub mod watched_target;

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};

use crate::api::LLMScaler;
use crate::metric_cache::{MetricCache, ScalerKey};
use crate::supervisor::Supervisor;
use crate::telemetry::metrics::Metrics;

pub use error::{FailureReason, SyncError};
pub use preflight::{PreflightError, preflight};
pub use reconcile::ReconcileError;

/// What every sync needs, built once at start-up.
pub struct Context {
    pub client: Client,
    /// One pool for every signal source.
    pub http: reqwest::Client,
    pub targets: target_watches::TargetWatches,
    /// Other autoscalers of the same targets.
    pub conflicts: conflicts::Conflicts,
    pub cache: MetricCache,
    pub events: event_writer::EventWriter,
    pub metrics: Metrics,
    /// Only the leader writes; the others evaluate and keep the metric cache current. With
    /// shards, only the leader of a scaler's shard evaluates and writes it.
    pub leadership: crate::leader::Leadership,
    /// What is kept of the scalers of shards another replica leads.
    others: shards::Others,
    /// The generation of each scaler last looked at (a change asks for a look).
    generations: generations::Generations,
    /// Lists the scalers afresh, for the whole objects of a shard this replica leads now.
    relist: relist::Relist,
    /// The namespace this controller watches (`None`: every namespace).
    namespace: Option<String>,
    pub allowed: crate::signals::allow::AllowList,
    /// Secrets named by serverHeadersFrom, read at most every 30 s.
    pub secrets: secrets::SecretCache,
    /// Clients for servers with a private CA or a client certificate (serverTLS).
    pub tls_clients: server_access::TlsClients,
    /// What this process remembers of each scaler between syncs, one record per uid.
    pub memory: memory::Memories,
    /// The time a sync decides at: the wall clock, or a test's.
    pub clock: Clock,
    /// The background tasks and the syncs running now; a shutdown waits for them.
    supervisor: Supervisor,
}

impl Context {
    /// The context of the controller of one watch (`namespace`, or every namespace).
    pub fn new(
        client: Client,
        namespace: Option<String>,
        shared: Shared,
        supervisor: Supervisor,
    ) -> Self {
        Self {
            targets: target_watches::TargetWatches::new(
                client.clone(),
                namespace.clone(),
                supervisor.clone(),
            ),
            conflicts: conflicts::Conflicts::new(
                client.clone(),
                namespace.clone(),
                supervisor.clone(),
            ),
            events: event_writer::EventWriter::new(
                client.clone(),
                crate::names::OPERATOR.to_owned(),
                shared.instance,
            ),
            http: shared.http,
            cache: shared.cache,
            metrics: shared.metrics,
            others: shards::Others::new(&shared.leadership),
            generations: Default::default(),
            leadership: shared.leadership,
            allowed: shared.allowed,
            secrets: Default::default(),
            tls_clients: Default::default(),
            memory: Default::default(),
            relist: Default::default(),
            namespace: namespace.clone(),
            clock: Arc::new(Timestamp::now),
            supervisor,
            client,
        }
    }
}

/// Where a sync reads the time: the control law is given its clock, never reads one.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Which LLMScalers this process is responsible for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// These namespaces only (sorted, no repeats), or every namespace when empty. With a list,
    /// nothing is ever listed or watched cluster-wide, so namespaced Roles are enough.
    namespaces: Vec<String>,
}

impl Scope {
    /// Every namespace.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only `namespaces`; an empty list means every namespace.
    pub fn namespaces(namespaces: impl IntoIterator<Item = String>) -> Self {
        let set: std::collections::BTreeSet<String> = namespaces
            .into_iter()
            .map(|ns| ns.trim().to_owned())
            .filter(|ns| !ns.is_empty())
            .collect();
        Self {
            namespaces: set.into_iter().collect(),
        }
    }

    /// One entry per watch: `None` for all namespaces, else each namespace.
    pub fn watches(&self) -> Vec<Option<String>> {
        if self.namespaces.is_empty() {
            vec![None]
        } else {
            self.namespaces.iter().cloned().map(Some).collect()
        }
    }

    pub fn describe(&self) -> String {
        if self.namespaces.is_empty() {
            "all namespaces".to_owned()
        } else {
            self.namespaces.join(",")
        }
    }
}

/// The LLMScalers of one watch.
pub fn scalers(client: Client, namespace: Option<&str>) -> Api<LLMScaler> {
    match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

/// The pieces shared with the rest of the process.
#[derive(Clone)]
pub struct Shared {
    pub cache: MetricCache,
    pub metrics: Metrics,
    pub http: reqwest::Client,
    /// Reported as the instance of every event (the pod name in a cluster).
    pub instance: Option<String>,
    /// Whether this replica may write (always, without leader election).
    pub leadership: crate::leader::Leadership,
    /// Where serverAddress may point (`--allowed-server-address`).
    pub allowed: crate::signals::allow::AllowList,
}

/// Runs the LLMScaler controller until the supervisor's shutdown fires: one controller per
/// watched namespace (or one for all), each with its own caches, all sharing the metric cache
/// and HTTP pool. Its target watches and clean-ups run under `supervisor`.
pub async fn run(client: Client, scope: Scope, shared: Shared, supervisor: Supervisor) {
    let controllers = scope.watches().into_iter().map(|namespace| {
        run_one(
            client.clone(),
            namespace,
            shared.clone(),
            supervisor.clone(),
        )
    });
    futures::future::join_all(controllers).await;
}

async fn run_one(
    client: Client,
    namespace: Option<String>,
    shared: Shared,
    supervisor: Supervisor,
) {
    let shutdown = supervisor.shutdown();
    let scalers = scalers(client.clone(), namespace.as_deref());
    let ctx = Arc::new(Context::new(client, namespace, shared, supervisor.clone()));

    let (reader, writer) = reflector::store();
    ctx.conflicts.set_scalers(conflicts::Scalers {
        cache: reader.clone(),
        peers: ctx.others.peers.clone(),
    });
    let sorting = ctx.clone();
    let after_list = ctx.clone();
    let listed = reader.clone();
    let looks = ctx.clone();
    let (list_triggers, listed_looks) = list_triggers::ListTriggers::new();
    let list_marks = Arc::new(list_triggers);
    let list_holds = list_marks.clone();
    // With shards, the scalers of a shard won are listed again (nothing else would bring them).
    if ctx.leadership.sharded() {
        supervisor.spawn_service(
            "shard takeovers",
            shards::relist_on_gains(
                ctx.leadership.shard_gains(),
                ctx.relist.clone(),
                shutdown.clone(),
            ),
        );
    }
    let events = relist::scaler_events(
        scalers,
        watcher::Config::default().any_semantic(),
        &ctx.relist,
    )
    .modify(|s| {
        // Never read; on a big fleet a large share of each cached scaler.
        s.managed_fields_mut().clear();
        s.annotations_mut().remove(target_watches::LAST_APPLIED);
    })
    .try_filter_map(move |event| std::future::ready(Ok(sort(&sorting, event))));
    let stream = reflector::reflector(writer, events)
        .inspect(move |event| match event {
            Ok(event @ watcher::Event::Init) => list_marks.event(event),
            Ok(event @ watcher::Event::InitDone) => {
                // The store holds the list's objects now: the looks held during it go.
                list_marks.event(event);
                // A scaler deleted while a list ran (or the watch was down) leaves the store at
                // the end of the list without a Delete event.
                forget_vanished(&after_list, &listed);
                // The conflict checks find every listed scaler, another replica's too (those
                // never sync here).
                after_list.conflicts.file_cached();
            }
            _ => {}
        })
        .applied_objects()
        // Our own status writes do not change the generation, so they do not trigger a sync.
        .try_filter(move |scaler| std::future::ready(looks.generations.changed(scaler)))
        // During a list, looks wait for its end (see list_triggers).
        .try_filter(move |scaler| std::future::ready(list_holds.now(scaler)));

    let stopping = shutdown.clone();
    let controller = Controller::for_stream(stream, reader)
        .reconcile_on(listed_looks)
        .graceful_shutdown_on(async move { stopping.cancelled().await })
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(error = %crate::error_chain::Chain(&error), "reconcile did not complete");
            }
        });
    // Syncs in flight (and the watches and clean-ups) get a grace to finish; then the
    // controller is dropped. The leader campaign is not waited for: it holds the Lease until
    // this returns. Not left to kube-runtime's own graceful shutdown, which can hold on
    // well after the last sync (before the first list of scalers, and at times after it).
    let drained = async {
        shutdown.cancelled().await;
        supervisor.drain_work(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        () = controller => {}
        () = drained => {}
    }
}

/// How long syncs in flight may take to finish once shutdown is asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// What the controller's cache is to see of an event of the scalers' watch. With shards, a
/// scaler another replica leads is served from its status and kept only as what the conflict
/// checks read of it (see `shards`): the cache never holds it, and a whole copy it holds from
/// before the shard was lost goes. A deletion is forgotten here, whichever replica led it.
fn sort(ctx: &Arc<Context>, event: watcher::Event<LLMScaler>) -> Option<watcher::Event<LLMScaler>> {
    use watcher::Event;
    match event {
        Event::Apply(scaler) if shards::kept_elsewhere(ctx, &scaler) => Some(Event::Delete(scaler)),
        Event::InitApply(scaler) if shards::kept_elsewhere(ctx, &scaler) => None,
        // Evaluated here: its target is to be kept (see `target_watches`).
        Event::Apply(scaler) => {
            claim_target(ctx, &scaler);
            Some(Event::Apply(scaler))
        }
        Event::InitApply(scaler) => {
            claim_target(ctx, &scaler);
            Some(Event::InitApply(scaler))
        }
        Event::Delete(scaler) => {
            forget_scaler(ctx, &scaler);
            Some(Event::Delete(scaler))
        }
        Event::Init => {
            ctx.others.peers.list_started();
            Some(Event::Init)
        }
        Event::InitDone => {
            ctx.others.peers.list_ended();
            Some(Event::InitDone)
        }
    }
}

fn claim_target(ctx: &Context, scaler: &LLMScaler) {
    ctx.targets.claim(
        scaler.metadata.uid.as_deref().unwrap_or_default(),
        &scaler.spec.target_ref,
        scaler.metadata.namespace.as_deref().unwrap_or_default(),
    );
}

fn forget_scaler(ctx: &Arc<Context>, scaler: &LLMScaler) {
    let namespace = scaler.namespace().unwrap_or_default();
    let name = scaler.name_any();
    ctx.cache.remove(&ScalerKey {
        namespace: namespace.clone(),
        name: name.clone(),
    });
    ctx.metrics.forget(&namespace, &name);
    tracing::info!(scaler = %name, namespace = %namespace, "LLMScaler deleted");
    // Deletion-cost marks of a scale-down that never happened would steer the next scale-down of
    // whoever scales the target now; the leader takes them away.
    let uid = scaler.uid().unwrap_or_default();
    ctx.others.peers.remove(&namespace, &name);
    ctx.generations.forget(&uid);
    let guard = ctx
        .leadership
        .write_guard(&uid)
        .filter(|_| ctx.memory.may_have_marks(&uid));
    if let Some(guard) = guard {
        let job = ctx.clone();
        let scaler = scaler.clone();
        ctx.supervisor
            .spawn_job("deletion-cost clean-up", async move {
                // Its shard is not handed over while its marks are taken away.
                let _guard = guard;
                victims::clear_after_delete(&job, &scaler).await;
                job.memory.forget(&uid);
                job.targets.release(&uid);
            });
    } else {
        ctx.memory.forget(&uid);
        ctx.targets.release(&uid);
    }
}

/// After a list: forgets what this replica kept of every scaler of its watch the store no longer
/// holds (deleted while the list ran, so told by no Delete event), and of none another replica
/// leads. Its deletion-cost marks, if any, are left for the next scale-down of the target, which
/// replaces them.
fn forget_vanished(ctx: &Context, store: &reflector::Store<LLMScaler>) {
    let held = store.state();
    let uids: std::collections::HashSet<&str> = held
        .iter()
        .filter_map(|s| s.metadata.uid.as_deref())
        .collect();
    let others = ctx.others.peers.uids();
    let named: std::collections::HashSet<(&str, &str)> = held
        .iter()
        .filter_map(|s| {
            Some((
                s.metadata.namespace.as_deref()?,
                s.metadata.name.as_deref()?,
            ))
        })
        .collect();
    // The metric cache and the series are shared by the watches of every namespace.
    let ours = |namespace: &str| ctx.namespace.as_deref().is_none_or(|n| n == namespace);
    ctx.cache.retain(|key, snapshot| {
        !ours(&key.namespace)
            || uids.contains(snapshot.uid.as_str())
            || others.contains(snapshot.uid.as_str())
    });
    ctx.metrics
        .retain_scalers(|namespace, name| !ours(namespace) || named.contains(&(namespace, name)));
    ctx.memory.retain(|uid| uids.contains(uid));
    ctx.targets.retain_claims(|uid| uids.contains(uid));
    ctx.generations.retain(|uid| uids.contains(uid));
}

/// Upper bound on any single start-up call to the API server.
pub(crate) const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_is_every_namespace_or_a_clean_list() {
        assert_eq!(Scope::all().watches(), vec![None]);
        assert_eq!(Scope::namespaces(Vec::new()), Scope::all());
        let scope = Scope::namespaces(["b".into(), " a ".into(), "b".into(), String::new()]);
        assert_eq!(
            scope.watches(),
            vec![Some("a".to_owned()), Some("b".to_owned())]
        );
        assert_eq!(scope.describe(), "a,b");
        assert_eq!(Scope::all().describe(), "all namespaces");
    }
}
