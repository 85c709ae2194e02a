//! Leader election on coordination.k8s.io Leases: only the holder writes replicas, pod marks,
//! status, events and the APIService caBundle.
//!
//! With one shard (the default) every replica campaigns for one Lease and evaluates every scaler,
//! so the external metrics API answers with current values wherever it is served. With several
//! (`--shards`), each shard has a Lease of its own and the replicas divide the shards among them
//! ([`sharded`]): a replica evaluates and writes only the scalers of the shards it leads, and
//! serves the others' values from their status.

pub mod elector;
pub mod sharded;
pub mod shards;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use elector::Timing;
use elector::{Elector, LeaseView, Step};

/// What this replica knows of one shard, as its campaign last published it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardState {
    /// Writes to the shard's scalers are allowed strictly before this instant; `None`: this
    /// replica does not lead the shard.
    pub until: Option<Instant>,
    /// Another replica holds the shard's Lease and renews it.
    pub held_elsewhere: bool,
    /// How many times this replica has come to lead the shard, counted as each state is
    /// published ([`publish`]): a reader that wakes late still tells a lead lost and won again
    /// between two of its looks from one held all along.
    pub term: u64,
}

/// Publishes `states` for the readers, counting a new term for every shard led now that was not
/// led under the last states published (never led, lost, or its deadline passed meanwhile).
/// Only a change wakes the readers.
pub(crate) fn publish(published: &watch::Sender<Vec<ShardState>>, mut states: Vec<ShardState>) {
    published.send_if_modified(|last| {
        let now = Instant::now();
        for (i, state) in states.iter_mut().enumerate() {
            let before = last.get(i).copied().unwrap_or_default();
            state.term =
                before.term + u64::from(leading(state.until, now) && !leading(before.until, now));
        }
        let new = *last != states;
        *last = states;
        new
    });
}

/// Whether this process may write now, per shard; cheap to clone and to ask on every write.
///
/// The one source of truth is the deadline per shard the campaign publishes: writes are allowed
/// strictly before it. [`Leadership::may_write_shard`] and [`LeadershipChanges`] are read from
/// it, so they cannot disagree, and a deadline that lapses while the API server is down stops
/// writes at once, without waiting for the campaign to notice.
#[derive(Clone)]
pub struct Leadership {
    /// `None`: no election, always allowed.
    election: Option<Published>,
}

#[derive(Clone)]
struct Published {
    /// One entry per shard (one without sharding).
    shards: watch::Receiver<Vec<ShardState>>,
    /// Writers holding a [`WriteGuard`], per shard: a shard handed over to another replica is
    /// released only once its writes in flight are done.
    writing: Arc<[AtomicUsize]>,
}

impl Published {
    fn new(shards: watch::Receiver<Vec<ShardState>>, count: usize) -> Self {
        Self {
            shards,
            writing: (0..count).map(|_| AtomicUsize::new(0)).collect(),
        }
    }
}

impl Leadership {
    /// No election: this process is the only writer.
    pub fn always() -> Self {
        Self { election: None }
    }

    /// A standby that never leads (tests of what a standby does).
    #[cfg(test)]
    pub fn never() -> Self {
        Self {
            election: Some(Published::new(
                watch::channel(vec![ShardState::default()]).1,
                1,
            )),
        }
    }

    /// Several shards whose deadlines and holders the test publishes, as the campaign would.
    #[cfg(test)]
    pub fn published(states: Vec<ShardState>) -> (watch::Sender<Vec<ShardState>>, Self) {
        let count = states.len();
        let (tx, rx) = watch::channel(states);
        let leadership = Self {
            election: Some(Published::new(rx, count)),
        };
        (tx, leadership)
    }

    /// How many shards the scalers are divided into (1 without sharding or election).
    pub fn shard_count(&self) -> u32 {
        self.election.as_ref().map_or(1, |e| {
            u32::try_from(e.shards.borrow().len().max(1)).unwrap_or(u32::MAX)
        })
    }

    /// Whether the scalers are divided among the replicas: then a replica evaluates only the
    /// scalers of the shards it leads.
    pub fn sharded(&self) -> bool {
        self.shard_count() > 1
    }

    /// The shard of the scaler with this uid.
    pub fn shard_of(&self, uid: &str) -> u32 {
        shards::shard_of(uid, self.shard_count())
    }

    /// Whether this replica may write as the leader of shard 0 (the only shard without
    /// sharding): the writes that belong to no scaler, such as the APIService caBundle.
    pub fn may_write(&self) -> bool {
        self.may_write_shard(0)
    }

    /// Whether this replica may write the scalers of `shard` now.
    pub fn may_write_shard(&self, shard: u32) -> bool {
        match &self.election {
            None => true,
            Some(e) => {
                let until = usize::try_from(shard)
                    .ok()
                    .and_then(|i| e.shards.borrow().get(i).and_then(|s| s.until));
                leading(until, Instant::now())
            }
        }
    }

    /// Whether this replica evaluates the scaler with this uid: every scaler without sharding
    /// (a standby keeps the external metrics API current), else only those it leads.
    pub fn evaluates(&self, uid: &str) -> bool {
        !self.sharded() || self.may_write_shard(self.shard_of(uid))
    }

    /// Whether another replica holds the Lease of `shard` and renews it.
    pub fn held_elsewhere(&self, shard: u32) -> bool {
        self.election.as_ref().is_some_and(|e| {
            usize::try_from(shard)
                .ok()
                .and_then(|i| e.shards.borrow().get(i).map(|s| s.held_elsewhere))
                .unwrap_or(false)
        })
    }

    /// Leave to write the scaler with this uid, while this replica leads its shard; the shard
    /// is not handed to another replica while a guard is held (see [`sharded`]). Asked once per
    /// sync, after the signal was read, and held until its last write.
    pub fn write_guard(&self, uid: &str) -> Option<WriteGuard> {
        let Some(election) = &self.election else {
            return Some(WriteGuard(None));
        };
        let shard = self.shard_of(uid);
        let index = usize::try_from(shard).ok()?;
        let counter = election.writing.get(index)?;
        // Counted before the deadline is read: a campaign that resigned the shard and then sees
        // no writer can release it, because any writer it missed reads the resignation.
        counter.fetch_add(1, Ordering::SeqCst);
        let guard = WriteGuard(Some((election.writing.clone(), index)));
        self.may_write_shard(shard).then_some(guard)
    }

    /// Wakes when this replica comes to lead shards it did not lead before (or whose lead
    /// lapsed meanwhile), as the campaign publishes it.
    pub fn shard_gains(&self) -> ShardGains {
        let states = self.election.as_ref().map(|e| e.shards.clone());
        let terms = states
            .as_ref()
            .map(|s| s.borrow().iter().map(|s| s.term).collect())
            .unwrap_or_default();
        ShardGains { states, terms }
    }

    /// Wakes when leadership of shard 0 is won or lost, as [`Leadership::may_write`] would tell.
    pub fn changes(&self) -> LeadershipChanges {
        LeadershipChanges {
            until: self.election.as_ref().map(|e| e.shards.clone()),
            last: self.may_write(),
        }
    }
}

/// See [`Leadership::write_guard`]; dropping it ends the write.
pub struct WriteGuard(Option<(Arc<[AtomicUsize]>, usize)>);

impl Drop for WriteGuard {
    fn drop(&mut self) {
        if let Some((writing, index)) = &self.0
            && let Some(counter) = writing.get(*index)
        {
            counter.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn leading(until: Option<Instant>, now: Instant) -> bool {
    until.is_some_and(|until| now < until)
}

/// The published deadline of shard 0.
fn first(shards: &[ShardState]) -> Option<Instant> {
    shards.first().and_then(|s| s.until)
}

/// Leadership flips, derived from the published deadline: see [`LeadershipChanges::changed`].
pub struct LeadershipChanges {
    /// `None`: no election, nothing ever changes.
    until: Option<watch::Receiver<Vec<ShardState>>>,
    /// What [`Leadership::may_write`] said when last reported (or when this was made).
    last: bool,
}

impl LeadershipChanges {
    /// Waits until [`Leadership::may_write`] differs from what it was when last reported and
    /// returns the new value. Renewals move the deadline every few seconds but change nothing,
    /// so they do not end the wait; a deadline that passes without a new one does.
    ///
    /// `None` when nothing can change any more: there is no election, or the campaign has
    /// ended and its last deadline has passed.
    ///
    /// Cancel safe: what was last reported only moves when a value is returned, and each call
    /// reads the current deadline afresh.
    pub async fn changed(&mut self) -> Option<bool> {
        let until = self.until.as_mut()?;
        loop {
            let deadline = first(&until.borrow_and_update());
            let leads = leading(deadline, Instant::now());
            if leads != self.last {
                self.last = leads;
                return Some(leads);
            }
            match deadline.filter(|_| leads) {
                // Leading: a new deadline (renewed, or lost at once) or this one passing.
                Some(deadline) => {
                    let mut lapsed = std::pin::pin!(tokio::time::sleep_until(
                        tokio::time::Instant::from_std(deadline)
                    ));
                    tokio::select! {
                        published = until.changed() => if published.is_err() {
                            // The campaign has ended: only the deadline passing is left.
                            lapsed.await;
                        },
                        () = lapsed.as_mut() => {}
                    }
                }
                // Not leading: only a new deadline can change that.
                None => until.changed().await.ok()?,
            }
        }
    }
}

/// Shards won: see [`Leadership::shard_gains`].
pub struct ShardGains {
    /// `None`: no election, nothing is ever won.
    states: Option<watch::Receiver<Vec<ShardState>>>,
    /// Each shard's term when last looked at.
    terms: Vec<u64>,
}

impl ShardGains {
    /// Waits until the campaign publishes the lead of shards this replica did not lead when last
    /// looked at (or has lost and won again since, a lapse included), and returns them. `None`
    /// once nothing can change any more.
    pub async fn gained(&mut self) -> Option<Vec<u32>> {
        let states = self.states.as_mut()?;
        loop {
            states.changed().await.ok()?;
            let now = Instant::now();
            let states = states.borrow_and_update();
            let won: Vec<u32> = states
                .iter()
                .enumerate()
                .filter(|(i, s)| {
                    leading(s.until, now) && self.terms.get(*i).is_none_or(|t| *t != s.term)
                })
                .filter_map(|(i, _)| u32::try_from(i).ok())
                .collect();
            self.terms = states.iter().map(|s| s.term).collect();
            if !won.is_empty() {
                return Some(won);
            }
        }
    }
}

/// Where the Lease lives and who we are.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub timing: Timing,
}

/// A running election: [`Election::release`] ends it and frees the Lease.
pub struct Election {
    leadership: Leadership,
    stop: CancellationToken,
    /// Cancelled when the campaign has ended, by returning or by a panic.
    ended: CancellationToken,
}

impl Election {
    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// Stops writing, hands the Lease back so a standby takes over at once, and waits for that.
    pub async fn release(self) {
        self.stop.cancel();
        self.ended.cancelled().await;
    }
}

/// The election and the campaign for the Lease, which the caller runs as a supervised task: it
/// runs until [`Election::release`], and a campaign that ends before (a panic) must stop the
/// process rather than leave it a standby for good.
pub fn start(
    client: Client,
    config: LeaseConfig,
    on_change: impl Fn(bool) + Send + 'static,
) -> (Election, impl Future<Output = ()> + Send + 'static) {
    let (tx, until) = watch::channel(vec![ShardState::default()]);
    let campaign = Campaign {
        api: Api::namespaced(client, &config.namespace),
        elector: Elector::new(config.identity.clone(), config.timing),
        config,
        until: tx,
    };
    Election::running(Published::new(until, 1), |stop| {
        campaign.run(stop, on_change)
    })
}

impl Election {
    /// The election whose leadership `published` tells, and the task that runs the campaign
    /// `run` makes (given the token that stops it) until [`Election::release`].
    fn running<F>(
        published: Published,
        run: impl FnOnce(CancellationToken) -> F,
    ) -> (Self, impl Future<Output = ()> + Send + 'static)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let ended = CancellationToken::new();
        let done = ended.clone().drop_guard();
        let run = run(stop.clone());
        let task = async move {
            // Dropped on return and on unwinding alike: release never waits for a dead campaign.
            let _done = done;
            run.await;
        };
        let election = Election {
            leadership: Leadership {
                election: Some(published),
            },
            stop,
            ended,
        };
        (election, task)
    }
}

struct Campaign {
    api: Api<Lease>,
    config: LeaseConfig,
    elector: Elector,
    /// The deadline behind [`Leadership`] (its one shard); written by [`Campaign::publish`] only.
    until: watch::Sender<Vec<ShardState>>,
}

impl Campaign {
    async fn run(mut self, stop: CancellationToken, on_change: impl Fn(bool)) {
        let mut leading = false;
        loop {
            // A partitioned API server leaves a request hanging for minutes; a holder must still
            // notice in time that its writes have stopped, so a round never outlives the
            // current leadership (nor, for a standby, the renew deadline).
            let bound = self
                .leading_for()
                .unwrap_or(self.config.timing.renew_deadline)
                .min(self.config.timing.renew_deadline)
                .max(Duration::from_millis(10));
            tokio::select! {
                () = stop.cancelled() => break,
                finished = tokio::time::timeout(bound, self.round()) => {
                    if finished.is_err() {
                        tracing::warn!(lease = %self.config.name, timeout = ?bound, "the Lease did not answer in time");
                        self.publish();
                    }
                }
            }
            let now_leading = self.elector.may_write(Instant::now());
            if now_leading != leading {
                leading = now_leading;
                if leading {
                    tracing::info!(identity = %self.config.identity, lease = %self.config.name, "became the leader");
                } else {
                    tracing::warn!(identity = %self.config.identity, lease = %self.config.name, "not the leader any more; writes stop");
                }
                on_change(leading);
            }
            // Wake up in time to stop writing even if the API server stops answering.
            let pause = self.leading_for().map_or(self.config.timing.retry, |left| {
                left.min(self.config.timing.retry)
            });
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(pause.max(Duration::from_millis(10))) => {}
            }
        }
        self.elector.resign();
        self.publish();
        if leading {
            on_change(false);
            let timeout = self.config.timing.renew_deadline;
            if tokio::time::timeout(timeout, self.release()).await.is_err() {
                tracing::warn!(lease = %self.config.name, "the Lease could not be released in time; a standby takes over when it expires");
            }
        }
    }

    /// How much longer we may write; `None` when we may not (a lapsed leadership included:
    /// measuring from it would spin the loop against an API server that is down).
    fn leading_for(&self) -> Option<Duration> {
        let now = Instant::now();
        self.elector
            .leading_until()
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    fn publish(&self) {
        // Published on every look at the Lease: only a new deadline wakes the waiters.
        publish(
            &self.until,
            vec![ShardState {
                until: self.elector.leading_until(),
                ..ShardState::default()
            }],
        );
    }

    /// One look at the Lease and the write it calls for.
    async fn round(&mut self) {
        let started = Instant::now();
        let lease = match self.api.get_opt(&self.config.name).await {
            Ok(lease) => lease,
            Err(error) => {
                tracing::warn!(%error, lease = %self.config.name, "cannot read the leader Lease");
                self.publish();
                return;
            }
        };
        let view = lease.as_ref().map(|l| LeaseView {
            holder: l.spec.as_ref().and_then(|s| s.holder_identity.clone()),
            resource_version: l.resource_version().unwrap_or_default(),
        });
        let step = self.elector.observe(view.as_ref(), started);
        self.publish();
        let written = match (step, lease) {
            (Step::Wait, _) => return,
            (_, None) => {
                let fresh = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(None, true)),
                };
                self.api.create(&PostParams::default(), &fresh).await
            }
            (step, Some(mut existing)) => {
                existing.spec = Some(self.spec(existing.spec.take(), step == Step::Acquire));
                self.api
                    .replace(&self.config.name, &PostParams::default(), &existing)
                    .await
            }
        };
        match written {
            Ok(_) => self.elector.written(started),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(lease = %self.config.name, "another replica wrote the Lease first");
            }
            Err(error) => {
                tracing::warn!(%error, lease = %self.config.name, "cannot write the leader Lease");
            }
        }
        self.publish();
    }

    fn spec(&self, previous: Option<LeaseSpec>, acquire: bool) -> LeaseSpec {
        lease_spec(previous, acquire, &self.config.identity, self.config.timing)
    }

    /// Hands the Lease back: a standby sees it free and takes it on its next look.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let ours = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.config.identity.as_str());
        if !ours {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            released(spec);
        }
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.config.name, "released the leader Lease"),
            Err(error) => tracing::warn!(%error, "cannot release the leader Lease"),
        }
    }
}

/// A Lease handed back: nobody holds it, and it lapses a second after now, so a standby takes it
/// on its next look instead of waiting out the lease.
fn released(spec: &mut LeaseSpec) {
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(Timestamp::now()));
}

/// The spec `identity` writes to take (`acquire`) or renew a Lease whose spec was `previous`.
fn lease_spec(
    previous: Option<LeaseSpec>,
    acquire: bool,
    identity: &str,
    timing: Timing,
) -> LeaseSpec {
    let now = MicroTime(Timestamp::now());
    let mut spec = previous.unwrap_or_default();
    if acquire {
        spec.lease_transitions = Some(spec.lease_transitions.map_or(0, |t| t + 1));
        spec.acquire_time = Some(now.clone());
    }
    spec.holder_identity = Some(identity.to_owned());
    spec.lease_duration_seconds =
        Some(i32::try_from(timing.lease.as_secs().max(1)).unwrap_or(i32::MAX));
    spec.renew_time = Some(now);
    spec
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use super::*;

    /// Long enough that nothing in a test lapses unless it is meant to, even on a loaded machine.
    const FAR: Duration = Duration::from_secs(30);
    /// Time given to a waiter that should stay asleep to (wrongly) wake up.
    const QUIET: Duration = Duration::from_millis(50);

    /// An election whose deadline the test publishes, as the campaign would.
    fn elected(until: Option<Instant>) -> (Deadline, Leadership) {
        let (tx, leadership) = Leadership::published(vec![ShardState {
            until,
            held_elsewhere: false,
            term: 0,
        }]);
        (Deadline(tx), leadership)
    }

    /// Publishes shard 0's deadline as the one-Lease campaign does.
    struct Deadline(watch::Sender<Vec<ShardState>>);

    impl Deadline {
        fn send_replace(&self, until: Option<Instant>) {
            self.0.send_replace(vec![ShardState {
                until,
                held_elsewhere: false,
                term: 0,
            }]);
        }
    }

    #[tokio::test]
    async fn renewals_do_not_wake_the_waiter() {
        let (tx, leadership) = elected(Some(Instant::now() + FAR));
        let mut changes = leadership.changes();
        let mut changed = pin!(changes.changed());
        for _ in 0..5 {
            tx.send_replace(Some(Instant::now() + FAR));
            // A waiter woken by the new deadline is ready at once.
            let woke = tokio::time::timeout(QUIET, changed.as_mut()).await;
            assert!(woke.is_err(), "a renewal woke the waiter: {woke:?}");
            assert!(leadership.may_write());
        }
    }

    #[tokio::test]
    async fn a_deadline_that_passes_unrenewed_ends_leadership() {
        let deadline = Instant::now() + Duration::from_millis(200);
        let (tx, leadership) = elected(Some(deadline));
        assert!(leadership.may_write());
        let mut changes = leadership.changes();
        let changed = tokio::time::timeout(FAR, changes.changed()).await;
        assert_eq!(changed, Ok(Some(false)));
        assert!(
            Instant::now() >= deadline,
            "reported lost before the deadline"
        );
        assert!(!leadership.may_write());
        // The campaign is still running: a later win may still come, nothing is reported now.
        let again = tokio::time::timeout(QUIET, changes.changed()).await;
        assert!(again.is_err(), "reported again: {again:?}");
        drop(tx);
    }

    #[tokio::test]
    async fn winning_and_losing_wake_the_waiter() {
        let (tx, leadership) = elected(None);
        assert!(!leadership.may_write());
        let mut changes = leadership.changes();
        {
            let mut changed = pin!(changes.changed());
            let early = tokio::time::timeout(QUIET, changed.as_mut()).await;
            assert!(early.is_err(), "woke before any win: {early:?}");
            tx.send_replace(Some(Instant::now() + FAR));
            assert_eq!(tokio::time::timeout(FAR, changed).await, Ok(Some(true)));
        }
        assert!(leadership.may_write());
        // Lost to another replica: the campaign publishes no deadline at all.
        tx.send_replace(None);
        let lost = tokio::time::timeout(FAR, changes.changed()).await;
        assert_eq!(lost, Ok(Some(false)));
        assert!(!leadership.may_write());
    }

    #[tokio::test]
    async fn an_ended_campaign_ends_the_changes_once_its_deadline_has_passed() {
        let deadline = Instant::now() + Duration::from_millis(200);
        let (tx, leadership) = elected(Some(deadline));
        let mut changes = leadership.changes();
        drop(tx);
        // The last deadline still holds until it passes.
        assert!(leadership.may_write());
        let lost = tokio::time::timeout(FAR, changes.changed()).await;
        assert_eq!(lost, Ok(Some(false)));
        assert!(
            Instant::now() >= deadline,
            "reported lost before the deadline"
        );
        assert_eq!(tokio::time::timeout(FAR, changes.changed()).await, Ok(None));
        assert!(!leadership.may_write());
    }

    #[tokio::test]
    async fn without_an_election_writes_are_always_allowed_and_nothing_changes() {
        let leadership = Leadership::always();
        assert!(leadership.may_write());
        let mut changes = leadership.changes();
        assert_eq!(tokio::time::timeout(FAR, changes.changed()).await, Ok(None));
        assert!(leadership.may_write());
    }

    #[test]
    fn with_shards_a_replica_writes_only_what_it_leads_and_counts_its_writers() {
        let (tx, leadership) = Leadership::published(vec![
            ShardState {
                until: Some(Instant::now() + FAR),
                held_elsewhere: false,
                term: 0,
            },
            ShardState {
                until: None,
                held_elsewhere: true,
                term: 0,
            },
        ]);
        let writing = |shard: usize| {
            leadership.election.as_ref().expect("elected").writing[shard].load(Ordering::SeqCst)
        };
        let uid_in = |shard: u32| {
            (0..)
                .map(|i| format!("uid-{i}"))
                .find(|uid| shards::shard_of(uid, 2) == shard)
                .expect("some uid falls in every shard")
        };
        let (ours, theirs) = (uid_in(0), uid_in(1));
        assert!(leadership.sharded());
        assert!(leadership.evaluates(&ours) && !leadership.evaluates(&theirs));
        let held = |uid: &str| leadership.held_elsewhere(leadership.shard_of(uid));
        assert!(held(&theirs) && !held(&ours));
        assert!(leadership.write_guard(&theirs).is_none());
        assert_eq!(writing(1), 0, "a refused writer is not counted");
        let guard = leadership.write_guard(&ours).expect("leads shard 0");
        assert_eq!(writing(0), 1);
        drop(guard);
        assert_eq!(writing(0), 0);
        // Handed over: nothing more is written or evaluated.
        tx.send_replace(vec![ShardState::default(); 2]);
        assert!(leadership.write_guard(&ours).is_none());
        assert!(!leadership.evaluates(&ours));
        assert!(!leadership.may_write());

        let single = Leadership::always();
        assert!(!single.sharded());
        assert!(single.evaluates(&theirs) && single.write_guard(&theirs).is_some());
    }

    /// Asserts that no gain is told now (the wait is cancel safe).
    async fn quiet(gains: &mut ShardGains) {
        let woke = tokio::time::timeout(QUIET, gains.gained()).await;
        assert!(woke.is_err(), "woke: {woke:?}");
    }

    #[tokio::test]
    async fn gains_name_the_shards_won_and_those_lost_and_won_again() {
        let led = |until: Option<Instant>| ShardState {
            until,
            ..ShardState::default()
        };
        let far = || Some(Instant::now() + FAR);
        let (tx, leadership) = Leadership::published(vec![led(far()), led(None), led(None)]);
        let mut gains = leadership.shard_gains();
        // A renewal, and another replica's news, are no gain.
        publish(&tx, vec![led(far()), led(None), led(None)]);
        quiet(&mut gains).await;
        let theirs = ShardState {
            held_elsewhere: true,
            ..ShardState::default()
        };
        publish(&tx, vec![led(far()), theirs, led(None)]);
        quiet(&mut gains).await;
        // Won.
        publish(&tx, vec![led(far()), led(None), led(far())]);
        assert_eq!(
            tokio::time::timeout(FAR, gains.gained()).await,
            Ok(Some(vec![2]))
        );
        // Shard 2 lost and won again before the reader looks: a gain all the same.
        publish(&tx, vec![led(far()), led(None), led(None)]);
        publish(&tx, vec![led(far()), led(None), led(far())]);
        assert_eq!(
            tokio::time::timeout(FAR, gains.gained()).await,
            Ok(Some(vec![2]))
        );
        // Shard 0's deadline passes unrenewed, then a new one comes: won again. Shard 2's
        // renewal is not.
        let soon = Instant::now() + Duration::from_millis(100);
        publish(&tx, vec![led(Some(soon)), led(None), led(far())]);
        quiet(&mut gains).await;
        tokio::time::sleep_until(tokio::time::Instant::from_std(soon)).await;
        publish(&tx, vec![led(far()), led(None), led(far())]);
        assert_eq!(
            tokio::time::timeout(FAR, gains.gained()).await,
            Ok(Some(vec![0]))
        );
        drop(tx);
        assert_eq!(tokio::time::timeout(FAR, gains.gained()).await, Ok(None));
        assert_eq!(
            Leadership::always().shard_gains().gained().await,
            None,
            "without an election nothing is won"
        );
    }

    #[tokio::test]
    async fn a_standby_that_never_leads_never_writes() {
        let leadership = Leadership::never();
        assert!(!leadership.may_write());
        let mut changes = leadership.changes();
        assert_eq!(tokio::time::timeout(FAR, changes.changed()).await, Ok(None));
        assert!(!leadership.may_write());
    }
}
