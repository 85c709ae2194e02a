//! The process's background tasks, under one owner. A task that must last until shutdown (a
//! watch, a server, a certificate refresher) and ends or panics before it stops the whole
//! operator, which exits with an error and is restarted whole: better than an operator that
//! keeps answering its probes with a stale target cache or a certificate that no longer rotates.
//! Shutdown waits for every task, up to a grace.

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
    shutdown: CancellationToken,
    stopped: Arc<Mutex<Option<TaskStopped>>>,
}

impl Supervisor {
    pub fn new(shutdown: CancellationToken) -> Self {
        Self {
            tracker: TaskTracker::new(),
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
        let name = name.into();
        // Whatever the service logs carries its name (a background task has no sync's span).
        let inner = tokio::spawn(task.instrument(tracing::info_span!("service", service = %name)));
        let shutdown = self.shutdown.clone();
        let stopped = self.stopped.clone();
        self.tracker.spawn(async move {
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

    /// Waits up to `grace` for every task and tracked future to finish; returns how many had
    /// not.
    pub async fn drain(&self, grace: Duration) -> usize {
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            let left = self.tracker.len();
            tracing::warn!(
                ?grace,
                tasks = left,
                "background work did not finish in time; exiting anyway"
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
}
