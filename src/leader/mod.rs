//! Leader election on a coordination.k8s.io Lease: only the holder writes replicas, pod marks,
//! status, events and the APIService caBundle; every replica still evaluates its scalers, so the
//! external metrics API answers with current values wherever it is served.

pub mod elector;

use std::sync::{Arc, Mutex, PoisonError};
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
#[derive(Clone)]
pub struct Leadership {
    /// `None`: no election, always allowed.
    until: Option<Arc<Mutex<Option<Instant>>>>,
    changes: watch::Receiver<bool>,
}

impl Leadership {
    /// No election: this process is the only writer.
    pub fn always() -> Self {
        Self {
            until: None,
            changes: watch::channel(true).1,
        }
    }

    /// A standby that never leads (tests of what a standby does).
    #[cfg(test)]
    pub fn never() -> Self {
        Self {
            until: Some(Arc::new(Mutex::new(None))),
            changes: watch::channel(false).1,
        }
    }

    pub fn may_write(&self) -> bool {
        match &self.until {
            None => true,
            Some(until) => until
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some_and(|t| Instant::now() < t),
        }
    }

    /// Flips when leadership is won or lost.
    pub fn changes(&self) -> watch::Receiver<bool> {
        self.changes.clone()
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
    let until = Arc::new(Mutex::new(None));
    let (tx, rx) = watch::channel(false);
    let stop = CancellationToken::new();
    let campaign = Campaign {
        api: Api::namespaced(client, &config.namespace),
        elector: Elector::new(config.identity.clone(), config.timing),
        config,
        until: until.clone(),
        tx,
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
        leadership: Leadership {
            until: Some(until),
            changes: rx,
        },
        stop,
        ended,
    };
    (election, task)
}

struct Campaign {
    api: Api<Lease>,
    config: LeaseConfig,
    elector: Elector,
    until: Arc<Mutex<Option<Instant>>>,
    tx: watch::Sender<bool>,
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
                self.tx.send_replace(leading);
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
            self.tx.send_replace(false);
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
        *self.until.lock().unwrap_or_else(PoisonError::into_inner) = self.elector.leading_until();
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
