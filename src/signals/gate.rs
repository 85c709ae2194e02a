//! The operator's load on each signal server. A thousand scalers pointing at one Prometheus would
//! otherwise send it a thousand queries at once; Prometheus bounds its concurrent queries and
//! answers the excess with 503, and a held sync for want of an answer is exactly what an
//! overloaded server should not cause. So, for the whole process:
//!
//! - at most [`per_server`] requests are in flight to one server (scheme, host and port),
//!   whichever scaler or TLS settings they come from; the rest wait their turn, for at most the
//!   request timeout;
//! - an answer that says the server is overloaded (429, 503) is retried after a backoff (its
//!   `Retry-After` when it gives one), within [`RETRY_BUDGET`] of the first try;
//! - at most [`SYNCS_PER_REQUEST`] times as many syncs as requests are under way against one
//!   server ([`sync_turn`]); the others wait for their turn before they start, holding almost
//!   nothing. A burst (a fleet created at once) would otherwise hold every sync's whole state at
//!   once while they queue for the server: tens of kilobytes each, and memory the allocator
//!   keeps long after the burst.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Requests in flight to one server when nothing else was configured: well under Prometheus's
/// default `--query.max-concurrency` of 20, so that its other clients (Grafana, rules) keep a share.
pub const DEFAULT_PER_SERVER: usize = 8;

/// How long after the first try an overloaded answer is still retried. Short against the
/// default sync period (15 s): the sync still happens within its period.
pub const RETRY_BUDGET: Duration = Duration::from_secs(5);

/// Syncs under way against one server per request allowed in flight to it: a sync makes one to a
/// few requests and writes to the API server between them, so a few syncs per request slot keep
/// the server as busy as the request bound allows.
pub const SYNCS_PER_REQUEST: usize = 4;

const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const LONGEST_BACKOFF: Duration = Duration::from_secs(2);

struct Gates {
    per_server: usize,
    servers: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Turns of whole syncs, per server.
    syncs: Mutex<HashMap<String, Arc<Semaphore>>>,
}

static GATES: OnceLock<Gates> = OnceLock::new();

fn gates() -> &'static Gates {
    GATES.get_or_init(|| Gates::new(DEFAULT_PER_SERVER))
}

impl Gates {
    fn new(per_server: usize) -> Self {
        Self {
            per_server: per_server.max(1),
            servers: Mutex::new(HashMap::new()),
            syncs: Mutex::new(HashMap::new()),
        }
    }
}

/// Sets the bound at start-up (before the first request); later calls change nothing. Returns
/// the bound in force.
pub fn configure(per_server: usize) -> usize {
    GATES.get_or_init(|| Gates::new(per_server)).per_server
}

/// The bound in force.
pub fn per_server() -> usize {
    gates().per_server
}

/// `scheme://host:port` of `url`, the unit the bound applies to.
pub fn origin(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) => format!(
            "{}://{}:{}",
            parsed.scheme(),
            parsed.host_str().unwrap_or_default(),
            parsed.port_or_known_default().unwrap_or_default()
        ),
        Err(_) => url.to_owned(),
    }
}

/// A place among the requests in flight to `origin`, waiting at most `patience` for one.
pub async fn enter(origin: &str, patience: Duration) -> Option<OwnedSemaphorePermit> {
    let gates = gates();
    let semaphore = semaphore_of(&gates.servers, origin, gates.per_server);
    tokio::time::timeout(patience, semaphore.acquire_owned())
        .await
        .ok()?
        .ok()
}

/// A turn to sync against the server at `address` (its origin), among at most
/// [`SYNCS_PER_REQUEST`] × [`per_server`] syncs under way against it. Not bounded in time: each
/// sync's own requests are (the request gate's patience, the request timeout, the retry budget).
pub async fn sync_turn(address: &str) -> Option<OwnedSemaphorePermit> {
    let gates = gates();
    let turns = gates.per_server.saturating_mul(SYNCS_PER_REQUEST);
    semaphore_of(&gates.syncs, &origin(address), turns)
        .acquire_owned()
        .await
        .ok()
}

fn semaphore_of(
    by_origin: &Mutex<HashMap<String, Arc<Semaphore>>>,
    origin: &str,
    permits: usize,
) -> Arc<Semaphore> {
    let mut by_origin = by_origin.lock().unwrap_or_else(PoisonError::into_inner);
    // Asked at every request: the origin is copied only the first time.
    match by_origin.get(origin) {
        Some(semaphore) => semaphore.clone(),
        None => by_origin
            .entry(origin.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(permits)))
            .clone(),
    }
}

/// Whether an answer with this status says "later" rather than "no".
pub fn overloaded(status: u16) -> bool {
    status == 429 || status == 503
}

/// The wait before retry number `attempt` (0 for the first retry): the server's `Retry-After`
/// if it gave one, else an exponential backoff from 200 ms to 2 s scaled by `jitter` in [0, 1)
/// to between half and all of it, so that callers turned away together do not come back
/// together. `None` when the wait would end after `remaining` of the budget.
pub fn backoff(
    attempt: u32,
    retry_after: Option<Duration>,
    remaining: Duration,
    jitter: f64,
) -> Option<Duration> {
    let wait = retry_after.unwrap_or_else(|| {
        let full = FIRST_BACKOFF
            .saturating_mul(1u32 << attempt.min(10))
            .min(LONGEST_BACKOFF);
        full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    });
    (wait < remaining).then_some(wait)
}

/// A `Retry-After` header in seconds (the HTTP-date form is not used by Prometheus or by
/// proxies in front of it, and is ignored).
pub fn retry_after(value: Option<&reqwest::header::HeaderValue>) -> Option<Duration> {
    let seconds: u64 = value?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn origins_ignore_paths_and_queries() {
        assert_eq!(
            origin("http://prometheus.monitoring:9090/api/v1/query?query=up"),
            "http://prometheus.monitoring:9090"
        );
        assert_eq!(
            origin("https://thanos.example.com/api/v1/query"),
            "https://thanos.example.com:443"
        );
        assert_eq!(origin("not a url"), "not a url");
    }

    #[test]
    fn backoff_grows_then_stops_at_the_budget() {
        let budget = RETRY_BUDGET;
        assert_eq!(
            backoff(0, None, budget, 1.0),
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            backoff(0, None, budget, 0.0),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            backoff(3, None, budget, 1.0),
            Some(Duration::from_millis(1600))
        );
        assert_eq!(backoff(9, None, budget, 1.0), Some(LONGEST_BACKOFF));
        assert_eq!(
            backoff(0, Some(Duration::from_secs(3)), budget, 0.0),
            Some(Duration::from_secs(3)),
            "the server's Retry-After wins"
        );
        assert_eq!(
            backoff(0, Some(Duration::from_secs(30)), budget, 0.0),
            None,
            "a Retry-After beyond the budget ends the retries"
        );
        assert_eq!(backoff(2, None, Duration::from_millis(300), 1.0), None);
    }

    #[test]
    fn retry_after_reads_seconds() {
        let header = |v: &str| reqwest::header::HeaderValue::from_str(v).unwrap();
        assert_eq!(
            retry_after(Some(&header("2"))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(Some(&header("Wed, 21 Oct 2015 07:28:00 GMT"))),
            None
        );
        assert_eq!(retry_after(None), None);
        assert!(overloaded(503) && overloaded(429) && !overloaded(500) && !overloaded(200));
    }

    proptest! {
        #[test]
        fn a_backoff_is_within_half_to_all_of_its_step_and_the_budget(
            attempt in 0u32..64,
            jitter in 0.0f64..1.0,
            remaining_ms in 0u64..10_000,
        ) {
            let remaining = Duration::from_millis(remaining_ms);
            if let Some(wait) = backoff(attempt, None, remaining, jitter) {
                prop_assert!(wait < remaining);
                prop_assert!(wait >= FIRST_BACKOFF / 2);
                prop_assert!(wait <= LONGEST_BACKOFF);
            }
        }
    }
}
