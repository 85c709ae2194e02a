//! Leader election on a coordination.k8s.io Lease: only the holder writes replicas, pod marks,
//! status, events and the APIService caBundle; every replica still evaluates its scalers, so the
//! external metrics API answers with current values wherever it is served.

pub mod elector;

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

/// Whether this process may write now; cheap to clone and to ask on every write.
///
/// The one source of truth is the deadline the campaign publishes: writes are allowed strictly
/// before it. Both [`Leadership::may_write`] and [`LeadershipChanges`] are read from it, so they
/// cannot disagree, and a deadline that lapses while the API server is down stops writes at once,
/// without waiting for the campaign to notice.
#[derive(Clone)]
pub struct Leadership {
    /// `None`: no election, always allowed. Otherwise the deadline last published by the
    /// campaign (`None` inside: not leading).
    until: Option<watch::Receiver<Option<Instant>>>,
}

impl Leadership {
    /// No election: this process is the only writer.
    pub fn always() -> Self {
        Self { until: None }
    }

    /// A standby that never leads (tests of what a standby does).
    #[cfg(test)]
    pub fn never() -> Self {
        Self {
            until: Some(watch::channel(None).1),
        }
    }

    pub fn may_write(&self) -> bool {
        match &self.until {
            None => true,
            Some(until) => leading(*until.borrow(), Instant::now()),
        }
    }

    /// Wakes when leadership is won or lost, as [`Leadership::may_write`] would tell.
    pub fn changes(&self) -> LeadershipChanges {
        LeadershipChanges {
            until: self.until.clone(),
            last: self.may_write(),
        }
    }
}

fn leading(until: Option<Instant>, now: Instant) -> bool {
    until.is_some_and(|until| now < until)
}

/// Leadership flips, derived from the published deadline: see [`LeadershipChanges::changed`].
pub struct LeadershipChanges {
    /// `None`: no election, nothing ever changes.
    until: Option<watch::Receiver<Option<Instant>>>,
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
            let deadline = *until.borrow_and_update();
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
    let (tx, until) = watch::channel(None);
    let stop = CancellationToken::new();
    let campaign = Campaign {
        api: Api::namespaced(client, &config.namespace),
        elector: Elector::new(config.identity.clone(), config.timing),
        config,
        until: tx,
    };
    let ended = CancellationToken::new();
    let done = ended.clone().drop_guard();
    let run = campaign.run(stop.clone(), on_change);
    let task = async move {
        // Dropped on return and on unwinding alike: release never waits for a dead campaign.
        let _done = done;
        run.await;
    };
    let election = Election {
        leadership: Leadership { until: Some(until) },
        stop,
        ended,
    };
    (election, task)
}

struct Campaign {
    api: Api<Lease>,
    config: LeaseConfig,
    elector: Elector,
    /// The deadline behind [`Leadership`]; written by [`Campaign::publish`] only.
    until: watch::Sender<Option<Instant>>,
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
        let until = self.elector.leading_until();
        // Published on every look at the Lease: only a new deadline wakes the waiters.
        self.until.send_if_modified(|published| {
            let new = *published != until;
            *published = until;
            new
        });
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
        let now = MicroTime(Timestamp::now());
        let mut spec = previous.unwrap_or_default();
        if acquire {
            spec.lease_transitions = Some(spec.lease_transitions.map_or(0, |t| t + 1));
            spec.acquire_time = Some(now.clone());
        }
        spec.holder_identity = Some(self.config.identity.clone());
        spec.lease_duration_seconds =
            Some(i32::try_from(self.config.timing.lease.as_secs().max(1)).unwrap_or(i32::MAX));
        spec.renew_time = Some(now);
        spec
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
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
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

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use super::*;

    /// Long enough that nothing in a test lapses unless it is meant to, even on a loaded machine.
    const FAR: Duration = Duration::from_secs(30);
    /// Time given to a waiter that should stay asleep to (wrongly) wake up.
    const QUIET: Duration = Duration::from_millis(50);

    /// An election whose deadline the test publishes, as the campaign would.
    fn elected(until: Option<Instant>) -> (watch::Sender<Option<Instant>>, Leadership) {
        let (tx, rx) = watch::channel(until);
        (tx, Leadership { until: Some(rx) })
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

    #[tokio::test]
    async fn a_standby_that_never_leads_never_writes() {
        let leadership = Leadership::never();
        assert!(!leadership.may_write());
        let mut changes = leadership.changes();
        assert_eq!(tokio::time::timeout(FAR, changes.changed()).await, Ok(None));
        assert!(!leadership.may_write());
    }
}
