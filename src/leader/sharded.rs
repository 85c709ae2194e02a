//! The campaign of one replica for its share of the shards (`--shards` above 1).
//!
//! Every shard has a Lease of its own (`<lease>-shard-<i>-of-<n>`), judged by the same pure
//! [`Elector`] as the one Lease without sharding, so the timing and the fencing of "Running the
//! operator" hold per shard. Each replica also renews a member Lease of its own
//! (`<lease>-member-<identity>`); all of them carry the group label, so one list per look shows
//! every shard and every live member. From them each replica decides as every other would
//! ([`shards::plan`]): it keeps its shards within the fair share, takes the free shards that
//! fall to it, hands back (stops writing, waits for its writes in flight, releases) those it
//! holds in excess, and takes a shard left free for a whole lease whoever it fell to.
//!
//! A replica writes a shard's scalers only while both the shard's Lease and its member Lease are
//! current, and only while no live member runs with another shard count: replicas that divide the
//! scalers differently would otherwise write the same scaler. During a rolling change of
//! `--shards` nobody writes until the replicas of one count are gone.

use std::collections::{HashMap, HashSet};
use std::hash::Hasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::elector::{Elector, LeaseView, Step, Timing};
use super::shards::{self, Act, Look};
use super::{Election, Published, ShardState, lease_spec, released};

/// Label on every Lease of one sharded election: its value names the election.
pub const GROUP_LABEL: &str = "llmscaleoperator.io/lease-group";
/// Label telling shard Leases (`shard`) from member Leases (`member`).
pub const ROLE_LABEL: &str = "llmscaleoperator.io/lease-role";
/// Annotation of a member Lease: the shard count that replica runs with.
pub const SHARDS_ANNOTATION: &str = "llmscaleoperator.io/shards";

/// The most shards: each costs one Lease write per renewal (a seventh of the lease).
pub const MAX_SHARDS: u32 = 64;

/// Where the Leases live, who we are and how many shards there are.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    pub namespace: String,
    /// The base name: the shard and member Leases are named after it.
    pub name: String,
    pub identity: String,
    pub timing: Timing,
    /// 2 to [`MAX_SHARDS`].
    pub shards: u32,
}

/// The Lease of shard `shard` of `shards`. The count is in the name: replicas dividing the
/// scalers differently never share a shard Lease.
pub fn shard_lease(base: &str, shard: u32, shards: u32) -> String {
    format!("{base}-shard-{shard}-of-{shards}")
}

/// The member Lease of the replica `identity`.
pub fn member_lease(base: &str, identity: &str) -> String {
    let name = format!("{base}-member-{identity}");
    if is_dns_subdomain(&name) {
        name
    } else {
        format!("{base}-member-{:016x}", fnv(identity))
    }
}

/// The value of [`GROUP_LABEL`] for the election named `base`.
pub fn group(base: &str) -> String {
    let valid = base.len() <= 63
        && base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && base.starts_with(|c: char| c.is_ascii_alphanumeric())
        && base.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        base.to_owned()
    } else {
        format!("h-{:016x}", fnv(base))
    }
}

fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn fnv(text: &str) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(text.as_bytes());
    hasher.finish()
}

/// The election over the shards and the campaign, which the caller runs as a supervised task
/// (as [`super::start`]'s). `on_change` is told how many shards this replica leads whenever
/// that changes.
pub fn start(
    client: Client,
    config: ShardConfig,
    on_change: impl Fn(usize) + Send + 'static,
) -> (Election, impl Future<Output = ()> + Send + 'static) {
    let count = usize::try_from(config.shards).unwrap_or(1).max(1);
    let (tx, rx) = watch::channel(vec![ShardState::default(); count]);
    let published = Published::new(rx, count);
    let campaign = Campaign {
        api: Api::namespaced(client, &config.namespace),
        member_name: member_lease(&config.name, &config.identity),
        group: group(&config.name),
        member: Elector::new(config.identity.clone(), config.timing),
        others: HashMap::new(),
        slots: (0..config.shards)
            .map(|i| Slot {
                name: shard_lease(&config.name, i, config.shards),
                elector: Elector::new(config.identity.clone(), config.timing),
                free_since: None,
                held_elsewhere: false,
                releasing: None,
            })
            .collect(),
        standing: false,
        writing: published.writing.clone(),
        published: tx,
        config,
    };
    Election::running(published, |stop| campaign.run(stop, on_change))
}

/// One shard as this replica sees it.
struct Slot {
    name: String,
    elector: Elector,
    /// Since when the Lease has been seen free (absent, released or expired).
    free_since: Option<Instant>,
    held_elsewhere: bool,
    /// Handed over at this instant: released once no write of the shard is in flight.
    releasing: Option<Instant>,
}

struct Campaign {
    api: Api<Lease>,
    config: ShardConfig,
    member_name: String,
    group: String,
    /// Our member Lease.
    member: Elector,
    /// The other member Leases, by name: alive while they are renewed.
    others: HashMap<String, Elector>,
    slots: Vec<Slot>,
    /// A live member, and no live member runs another shard count: may lead at all.
    standing: bool,
    writing: Arc<[AtomicUsize]>,
    /// Written by [`Campaign::publish`] only.
    published: watch::Sender<Vec<ShardState>>,
}

impl Campaign {
    async fn run(mut self, stop: CancellationToken, on_change: impl Fn(usize)) {
        let timing = self.config.timing;
        let mut led = 0;
        loop {
            // As the one-Lease campaign: a round never outlives the current leadership (nor,
            // for a replica that leads nothing, the renew deadline).
            let bound = self
                .leading_for()
                .unwrap_or(timing.renew_deadline)
                .min(timing.renew_deadline)
                .max(Duration::from_millis(10));
            tokio::select! {
                () = stop.cancelled() => break,
                finished = tokio::time::timeout(bound, self.round()) => {
                    if finished.is_err() {
                        tracing::warn!(lease = %self.config.name, timeout = ?bound, "the shard Leases did not answer in time");
                        self.publish();
                    }
                }
            }
            let now_led = self.led(Instant::now());
            if now_led != led {
                let shards: Vec<usize> = self.led_shards(Instant::now());
                tracing::info!(identity = %self.config.identity, led = now_led, of = self.config.shards, ?shards, "the shards this replica leads changed");
                led = now_led;
                on_change(led);
            }
            let pause = self
                .leading_for()
                .map_or(timing.retry, |left| left.min(timing.retry));
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(pause.max(Duration::from_millis(10))) => {}
            }
        }
        for slot in &mut self.slots {
            slot.elector.resign();
        }
        self.member.resign();
        self.standing = false;
        self.publish();
        if led > 0 {
            on_change(0);
        }
        // The syncs have drained before the stop was asked for: hand everything back, so the
        // others take the shards over on their next look instead of waiting the leases out.
        if tokio::time::timeout(timing.renew_deadline, self.release_all())
            .await
            .is_err()
        {
            tracing::warn!(lease = %self.config.name, "the shard Leases could not be released in time; the others take over when they expire");
        }
    }

    /// How long until the first of our shard deadlines passes; `None` when we lead none.
    fn leading_for(&self) -> Option<Duration> {
        let now = Instant::now();
        self.deadlines()
            .into_iter()
            .flatten()
            .filter(|until| *until > now)
            .map(|until| until - now)
            .min()
    }

    fn led(&self, now: Instant) -> usize {
        self.led_shards(now).len()
    }

    fn led_shards(&self, now: Instant) -> Vec<usize> {
        self.deadlines()
            .into_iter()
            .enumerate()
            .filter(|(_, until)| until.is_some_and(|u| now < u))
            .map(|(i, _)| i)
            .collect()
    }

    /// Per shard, until when its scalers may be written: the shard's own deadline, bounded by
    /// the member Lease's, and none while this replica may not lead at all.
    fn deadlines(&self) -> Vec<Option<Instant>> {
        let member = self.member.leading_until().filter(|_| self.standing);
        self.slots
            .iter()
            .map(|slot| {
                slot.elector
                    .leading_until()
                    .zip(member)
                    .map(|(a, b)| a.min(b))
            })
            .collect()
    }

    fn publish(&self) {
        let states: Vec<ShardState> = self
            .deadlines()
            .into_iter()
            .zip(&self.slots)
            .map(|(until, slot)| ShardState {
                until,
                held_elsewhere: slot.held_elsewhere,
                ..ShardState::default()
            })
            .collect();
        // Only a change wakes the waiters: renewals move the deadlines at every look.
        super::publish(&self.published, states);
    }

    /// One look at every Lease of the election and the writes it calls for.
    async fn round(&mut self) {
        let started = Instant::now();
        let selector = format!("{GROUP_LABEL}={}", self.group);
        let listed = match self
            .api
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => list.items,
            Err(error) => {
                tracing::warn!(%error, lease = %self.config.name, "cannot list the shard Leases");
                self.publish();
                return;
            }
        };
        let mut leases: HashMap<String, Lease> =
            listed.into_iter().map(|l| (l.name_any(), l)).collect();

        // Our member Lease first: without it we lead nothing.
        let mine = leases.remove(&self.member_name);
        match self.member.observe(view(mine.as_ref()).as_ref(), started) {
            Step::Wait => {
                tracing::warn!(lease = %self.member_name, identity = %self.config.identity, "another replica renews this replica's member Lease: two replicas share an identity");
            }
            step => {
                let annotations = [(SHARDS_ANNOTATION, self.config.shards.to_string())];
                if self
                    .write(
                        &self.member_name,
                        mine,
                        step == Step::Acquire,
                        "member",
                        &annotations,
                    )
                    .await
                {
                    self.member.written(started);
                }
            }
        }

        // The other members: alive while renewed, judged as a shard holder is.
        let mut members = vec![self.config.identity.clone()];
        let mut other_counts = Vec::new();
        let mut seen = HashSet::new();
        for lease in leases.values().filter(|l| role(l) == Some("member")) {
            let name = lease.name_any();
            let elector = self
                .others
                .entry(name.clone())
                .or_insert_with(|| Elector::new(self.config.identity.clone(), self.config.timing));
            seen.insert(name);
            if elector.observe(view(Some(lease)).as_ref(), started) != Step::Wait {
                continue;
            }
            let Some(holder) = holder(lease) else {
                continue;
            };
            let count = lease
                .annotations()
                .get(SHARDS_ANNOTATION)
                .and_then(|c| c.parse::<u32>().ok());
            if count == Some(self.config.shards) {
                members.push(holder);
            } else {
                other_counts.push((holder, count));
            }
        }
        self.others.retain(|name, _| seen.contains(name));
        if !other_counts.is_empty() {
            tracing::warn!(shards = self.config.shards, others = ?other_counts, "live replicas run with another shard count: this replica leads nothing until they are gone");
        }
        self.standing = self.member.may_write(Instant::now()) && other_counts.is_empty();

        // The shards.
        let looks: Vec<Look> = self
            .slots
            .iter_mut()
            .map(|slot| {
                let lease = leases.get(&slot.name);
                let step = slot.elector.observe(view(lease).as_ref(), started);
                slot.held_elsewhere = step == Step::Wait;
                match step {
                    Step::Renew => {
                        slot.free_since = None;
                        Look::Mine
                    }
                    Step::Wait => {
                        slot.free_since = None;
                        Look::Held {
                            by: lease.and_then(holder).unwrap_or_default(),
                        }
                    }
                    Step::Acquire => {
                        let since = *slot.free_since.get_or_insert(started);
                        Look::Free {
                            for_: started.duration_since(since),
                        }
                    }
                }
            })
            .collect();
        let acts = if self.standing {
            shards::plan(
                &self.config.identity,
                &members,
                &looks,
                self.config.timing.lease,
            )
        } else {
            looks
                .iter()
                .map(|l| match l {
                    Look::Mine => Act::HandOver,
                    _ => Act::Leave,
                })
                .collect()
        };
        let mut writes = Vec::new();
        for (i, (slot, act)) in self.slots.iter_mut().zip(&acts).enumerate() {
            match act {
                Act::Renew | Act::Acquire => {
                    slot.releasing = None;
                    writes.push((i, leases.remove(&slot.name), *act == Act::Acquire));
                }
                Act::HandOver if slot.releasing.is_none() => {
                    // No new write from now on; the release waits for those in flight.
                    slot.elector.resign();
                    slot.releasing = Some(started);
                    tracing::info!(shard = i, lease = %slot.name, "handing the shard over");
                }
                Act::HandOver | Act::Leave => {}
            }
        }
        self.publish();
        let this = &*self;
        let written = futures::future::join_all(writes.into_iter().map(|(i, lease, acquire)| {
            let name = &this.slots[i].name;
            async move { (i, this.write(name, lease, acquire, "shard", &[]).await) }
        }))
        .await;
        for (i, ok) in written {
            if ok {
                self.slots[i].elector.written(started);
            }
        }

        // Shards handed over: released once their writes in flight are done.
        for i in 0..self.slots.len() {
            let Some(since) = self.slots[i].releasing else {
                continue;
            };
            if self.writing[i].load(Ordering::SeqCst) == 0 {
                if let Some(lease) = leases.remove(&self.slots[i].name) {
                    self.release(lease).await;
                }
                self.slots[i].releasing = None;
            } else if started.duration_since(since) > self.config.timing.renew_deadline {
                // A write that does not end: the Lease expires by itself, unrenewed.
                tracing::warn!(
                    shard = i,
                    "writes in flight outlast the handover; the shard's Lease expires instead"
                );
                self.slots[i].releasing = None;
            }
        }
        self.publish();
    }

    /// Creates or replaces the Lease `name` (`existing` as listed) with us as the holder.
    /// Whether it was written.
    async fn write(
        &self,
        name: &str,
        existing: Option<Lease>,
        acquire: bool,
        role: &str,
        annotations: &[(&str, String)],
    ) -> bool {
        let identity = &self.config.identity;
        let timing = self.config.timing;
        let written = match existing {
            None => {
                let fresh = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some(self.config.namespace.clone()),
                        labels: Some(self.labels(role)),
                        annotations: Some(
                            annotations
                                .iter()
                                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                                .collect(),
                        ),
                        ..Default::default()
                    },
                    spec: Some(lease_spec(None, true, identity, timing)),
                };
                self.api.create(&PostParams::default(), &fresh).await
            }
            Some(mut lease) => {
                lease.spec = Some(lease_spec(lease.spec.take(), acquire, identity, timing));
                lease.labels_mut().extend(self.labels(role));
                for (k, v) in annotations {
                    lease.annotations_mut().insert((*k).to_owned(), v.clone());
                }
                self.api.replace(name, &PostParams::default(), &lease).await
            }
        };
        match written {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(lease = %name, "another replica wrote the Lease first");
                false
            }
            Err(error) => {
                tracing::warn!(%error, lease = %name, "cannot write the Lease");
                false
            }
        }
    }

    fn labels(&self, role: &str) -> std::collections::BTreeMap<String, String> {
        [
            (GROUP_LABEL.to_owned(), self.group.clone()),
            (ROLE_LABEL.to_owned(), role.to_owned()),
            (
                "app.kubernetes.io/managed-by".to_owned(),
                crate::names::OPERATOR.to_owned(),
            ),
        ]
        .into()
    }

    /// Hands a shard Lease back, if it is still ours as listed (a replace carries the listed
    /// resourceVersion: a Lease someone changed since is left alone).
    async fn release(&self, mut lease: Lease) {
        let name = lease.name_any();
        if holder(&lease).as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            released(spec);
        }
        match self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %name, "released the shard Lease"),
            Err(error) => tracing::warn!(%error, lease = %name, "cannot release the shard Lease"),
        }
    }

    /// At shutdown: every shard Lease we hold released, our member Lease deleted, so the others
    /// rebalance on their next look.
    async fn release_all(&self) {
        let selector = format!("{GROUP_LABEL}={}", self.group);
        let Ok(list) = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await
        else {
            return;
        };
        let ours: Vec<Lease> = list
            .items
            .into_iter()
            .filter(|l| holder(l).as_deref() == Some(self.config.identity.as_str()))
            .collect();
        let (members, shards): (Vec<Lease>, Vec<Lease>) = ours
            .into_iter()
            .partition(|l| l.name_any() == self.member_name);
        futures::future::join_all(shards.into_iter().map(|l| self.release(l))).await;
        if !members.is_empty()
            && let Err(error) = self
                .api
                .delete(&self.member_name, &DeleteParams::default())
                .await
        {
            tracing::warn!(%error, lease = %self.member_name, "cannot delete the member Lease");
        }
    }
}

fn view(lease: Option<&Lease>) -> Option<LeaseView> {
    lease.map(|l| LeaseView {
        holder: holder(l),
        resource_version: l.resource_version().unwrap_or_default(),
    })
}

fn holder(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty())
}

fn role(lease: &Lease) -> Option<&str> {
    lease.labels().get(ROLE_LABEL).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_are_valid_and_carry_the_count() {
        assert_eq!(
            shard_lease("llmscaleoperator", 3, 6),
            "llmscaleoperator-shard-3-of-6"
        );
        assert_eq!(
            member_lease("llmscaleoperator", "llmscaleoperator-7d9f-x2"),
            "llmscaleoperator-member-llmscaleoperator-7d9f-x2"
        );
        // An identity that is no DNS name (the fallback identity is host-pid) is hashed.
        let hashed = member_lease("op", "Host_Name-12");
        assert!(hashed.starts_with("op-member-") && is_dns_subdomain(&hashed));
        assert_eq!(hashed, member_lease("op", "Host_Name-12"));
        assert_eq!(group("llmscaleoperator"), "llmscaleoperator");
        let long = "x".repeat(70);
        assert!(group(&long).starts_with("h-") && group(&long).len() <= 63);
    }
}
