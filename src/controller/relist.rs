//! The scalers' watch, listed afresh when asked. With shards, a replica keeps only what the
//! conflict checks read of each scaler another replica leads (`shards::Others`), never the
//! object; when it comes to lead their shard, the whole objects are read back by listing again,
//! which the reflector swaps into its store at the end of the list, as after any watch that had
//! to start over.
//!
//! Asked for when a shard is won (as the campaign publishes it, `shards::relist_on_gains`), and
//! by a sync that finds its scaler led by another replica now (the list then trades the whole
//! object its cache holds for what is kept of another's). What the list brings is looked at once
//! it has ended (see `list_triggers`). Lists are spaced and never cut short: the next starts once
//! the last has ended and at least five seconds after it started.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::api::LLMScaler;

/// At least this long between the starts of two lists.
const SPACING: Duration = Duration::from_secs(5);

/// Asks for a fresh list of the scalers' watch; cheap to clone and to ask often.
#[derive(Clone)]
pub struct Relist(Arc<watch::Sender<u64>>);

impl Default for Relist {
    fn default() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
}

impl Relist {
    pub fn want(&self) {
        self.0.send_modify(|asked| *asked = asked.wrapping_add(1));
    }

    fn asks(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }

    /// How many times a list was asked for.
    #[cfg(test)]
    pub fn asked(&self) -> u64 {
        *self.0.borrow()
    }
}

type Events = BoxStream<'static, Result<watcher::Event<LLMScaler>, watcher::Error>>;

struct Listing {
    events: Events,
    asks: watch::Receiver<u64>,
    /// False once nobody can ask any more.
    open: bool,
    started: Instant,
    /// Whether the list started last has ended: a list is never cut short by the next, which
    /// on a big fleet could start over for as long as syncs keep asking.
    listed: bool,
    /// When the next list starts, once one was asked for.
    due: Option<Instant>,
}

/// The events of `api`'s watch, started afresh (a new list) each time `relist` is asked.
pub fn scaler_events(
    api: Api<LLMScaler>,
    config: watcher::Config,
    relist: &Relist,
) -> impl Stream<Item = Result<watcher::Event<LLMScaler>, watcher::Error>> + Send + use<> {
    let start: Arc<dyn Fn() -> Events + Send + Sync> = Arc::new(move || {
        watcher(api.clone(), config.clone())
            .default_backoff()
            .boxed()
    });
    let mut asks = relist.asks();
    asks.mark_unchanged();
    let listing = Listing {
        events: start(),
        asks,
        open: true,
        started: Instant::now(),
        listed: false,
        due: None,
    };
    futures::stream::unfold(listing, move |mut listing| {
        let start = start.clone();
        async move {
            loop {
                let due = listing.due;
                let lapse = async move {
                    match due {
                        Some(due) => tokio::time::sleep_until(due.into()).await,
                        None => futures::future::pending().await,
                    }
                };
                tokio::select! {
                    event = listing.events.next() => {
                        if let Some(Ok(watcher::Event::InitDone)) = &event {
                            listing.listed = true;
                        }
                        return event.map(|e| (e, listing));
                    }
                    asked = listing.asks.changed(), if listing.open && listing.due.is_none() => {
                        match asked {
                            Ok(()) => listing.due = Some(Instant::now().max(listing.started + SPACING)),
                            Err(_) => listing.open = false,
                        }
                    }
                    () = lapse, if listing.listed => {
                        tracing::info!("listing the scalers afresh for the shards this replica leads now");
                        listing.events = start();
                        listing.started = Instant::now();
                        listing.listed = false;
                        listing.due = None;
                        // Asks made until now are answered by this list.
                        listing.asks.mark_unchanged();
                    }
                }
            }
        }
    })
}
