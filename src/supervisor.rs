//! The process's background tasks, under one owner. A task that must last until shutdown (a
//! watch, a server, a certificate refresher) and ends or panics before it stops the whole
//! operator, which exits with an error and is restarted whole: better than an operator that
//! keeps answering its probes with a stale target cache or a certificate that no longer rotates.
//! Shutdown waits for every task, up to a grace, in two stages: the work first (syncs, clean-ups,
//! watches, servers), then the final services, which must outlast it (the leader campaign holds
//! the Lease until the last write in flight has landed).

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use thiserror::Error;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TrackedFuture;
use tracing::Instrument;

/// A task that stopped before shutdown.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("background task {task} {how} before shutdown")]
pub struct TaskStopped {
    pub task: String,
    pub how: How,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Returned,
    Panicked,
}

impl std::fmt::Display for How {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            How::Returned => "ended",
            How::Panicked => "panicked",
        })
    }
}

/// Cheap to clone; every clone spawns into the same set.
#[derive(Clone)]
pub struct Supervisor {
    tracker: TaskTracker,
    /// The final services, which stop after `tracker` has drained.
    last: TaskTracker,
    shutdown: CancellationToken,
    stopped: Arc<Mutex<Option<TaskStopped>>>,
}

impl Supervisor {
    pub fn new(shutdown: CancellationToken) -> Self {
        Self {
            tracker: TaskTracker::new(),
            last: TaskTracker::new(),
            shutdown,
            stopped: Arc::default(),
        }
    }

    /// The token every task watches; cancelled at shutdown, or when a task stops early.
    pub fn shutdown(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Runs `task`, which must run until the shutdown token fires (it watches the token itself,
    /// so that it can end cleanly). If it ends or panics before that, the operator stops.
    pub fn spawn_service<F>(&self, name: impl Into<String>, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.supervise(&self.tracker, name.into(), task);
    }

    /// Runs `task` as a service that is stopped by its owner only once the work has drained
    /// ([`Supervisor::drain_work`]), not by the shutdown token: the leader campaign, whose Lease
    /// must stay held while the writes in flight finish. Ending or panicking before shutdown
    /// stops the operator, as for any service.
    pub fn spawn_final_service<F>(&self, name: impl Into<String>, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.supervise(&self.last, name.into(), task);
    }

    fn supervise<F>(&self, tracker: &TaskTracker, name: String, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // Whatever the service logs carries its name (a background task has no sync's span).
        let inner = tokio::spawn(task.instrument(tracing::info_span!("service", service = %name)));
        let shutdown = self.shutdown.clone();
        let stopped = self.stopped.clone();
        tracker.spawn(async move {
            let how = match inner.await {
                Ok(()) => How::Returned,
                Err(error) if error.is_panic() => How::Panicked,
                Err(_) => return,
            };
            if shutdown.is_cancelled() && how == How::Returned {
                return;
            }
            tracing::error!(task = %name, %how, "a background task stopped before shutdown; the operator stops so that it is restarted whole");
            stopped
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(TaskStopped { task: name, how });
            shutdown.cancel();
        });
    }

    /// Runs `task`, which ends on its own (a clean-up); shutdown waits for it. A panic is logged
    /// and stops nothing else.
    pub fn spawn_job<F>(&self, name: impl Into<String>, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        let inner = tokio::spawn(task.instrument(tracing::info_span!("job", job = %name)));
        self.tracker.spawn(async move {
            if let Err(error) = inner.await
                && error.is_panic()
            {
                tracing::error!(task = %name, "a background job panicked");
            }
        });
    }

    /// Wraps a future (a sync) so that [`Supervisor::drain`] waits for it.
    pub fn track<F: Future>(&self, work: F) -> TrackedFuture<F> {
        self.tracker.track_future(work)
    }

    /// Waits up to `grace` for the work (every task and tracked future but the final services)
    /// to finish; returns how many had not. Waiting for a final service here would wait out the
    /// whole grace, since its owner stops it only after this returns.
    pub async fn drain_work(&self, grace: Duration) -> usize {
        Self::wait(&self.tracker, grace, "background work").await
    }

    /// Waits up to `grace` for the work, then up to `grace` for the final services; returns how
    /// many tasks had not finished.
    pub async fn drain(&self, grace: Duration) -> usize {
        Self::wait(&self.tracker, grace, "background work").await
            + Self::wait(&self.last, grace, "final services").await
    }

    async fn wait(tracker: &TaskTracker, grace: Duration, what: &'static str) -> usize {
        tracker.close();
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            let left = tracker.len();
            tracing::warn!(
                ?grace,
                tasks = left,
                what,
                "tasks did not finish in time; exiting anyway"
            );
            return left;
        }
        0
    }

    /// The first task that stopped before shutdown, if any: the process then exits with an
    /// error.
    pub fn stopped(&self) -> Option<TaskStopped> {
        self.stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_service_that_ends_early_stops_everything_and_is_named() {
        let supervisor = Supervisor::new(CancellationToken::new());
        let token = supervisor.shutdown();
        let watched = supervisor.shutdown();
        supervisor.spawn_service("a watch", async move { watched.cancelled().await });
        supervisor.spawn_service("a server", async {});
        tokio::time::timeout(Duration::from_secs(5), token.cancelled())
            .await
            .expect("the early end cancels the shutdown token");
        assert_eq!(supervisor.drain(Duration::from_secs(5)).await, 0);
        assert_eq!(
            supervisor.stopped(),
            Some(TaskStopped {
                task: "a server".into(),
                how: How::Returned
            })
        );
    }

    #[tokio::test]
    async fn a_panic_is_a_stop_too() {
        let supervisor = Supervisor::new(CancellationToken::new());
        supervisor.spawn_service("a refresher", async { panic!("boom") });
        tokio::time::timeout(Duration::from_secs(5), supervisor.shutdown().cancelled())
            .await
            .expect("cancelled");
        assert_eq!(supervisor.stopped().map(|s| s.how), Some(How::Panicked));
    }

    #[tokio::test]
    async fn services_that_end_at_shutdown_are_no_failure_and_drain_waits_for_work() {
        let supervisor = Supervisor::new(CancellationToken::new());
        let watched = supervisor.shutdown();
        supervisor.spawn_service("a watch", async move { watched.cancelled().await });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let sync = tokio::spawn(supervisor.track(async move { rx.await.ok() }));
        supervisor.spawn_job("a clean-up", async {});
        supervisor.shutdown().cancel();
        // The tracked sync is still running: drain gives up after the grace and says so.
        assert_eq!(supervisor.drain(Duration::from_millis(50)).await, 1);
        tx.send(()).ok();
        sync.await.ok();
        assert_eq!(supervisor.drain(Duration::from_secs(5)).await, 0);
        assert_eq!(supervisor.stopped(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_work_drains_without_waiting_for_a_final_service() {
        const GRACE: Duration = Duration::from_secs(10);
        let supervisor = Supervisor::new(CancellationToken::new());
        let watched = supervisor.shutdown();
        supervisor.spawn_service("a watch", async move { watched.cancelled().await });
        // A campaign: stopped by its owner once the work has drained, never by the token.
        let release = CancellationToken::new();
        let released = release.clone();
        supervisor.spawn_final_service("a campaign", async move { released.cancelled().await });
        let started = tokio::time::Instant::now();
        supervisor.shutdown().cancel();
        assert_eq!(supervisor.drain_work(GRACE).await, 0);
        assert!(
            started.elapsed() < GRACE,
            "the work's drain waited {:?} for the campaign",
            started.elapsed()
        );
        release.cancel();
        assert_eq!(supervisor.drain(GRACE).await, 0);
        assert!(started.elapsed() < GRACE);
        assert_eq!(supervisor.stopped(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_service_that_ends_early_stops_the_operator() {
        let supervisor = Supervisor::new(CancellationToken::new());
        supervisor.spawn_final_service("a campaign", async {});
        tokio::time::timeout(Duration::from_secs(5), supervisor.shutdown().cancelled())
            .await
            .expect("the early end cancels the shutdown token");
        assert_eq!(
            supervisor.stopped(),
            Some(TaskStopped {
                task: "a campaign".into(),
                how: How::Returned
            })
        );
    }
}
