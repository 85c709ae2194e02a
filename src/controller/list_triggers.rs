//! Scalers brought by a list are looked at once the list has ended.
//!
//! While the scalers are listed (at start, when the watch starts over, or when a shard won asks
//! for the whole objects, see `relist`), the reflector holds what it reads aside and swaps it
//! into its store only at the end of the list, but the objects reach the controller as they are
//! read. The controller drops a look at an object its store does not hold, so a scaler created
//! while a list ran again would never sync: its generation is seen then, and nothing after
//! changes it. Holding the looks of a list until its end, when the store holds every object
//! read, closes that gap.

use std::sync::{Mutex, PoisonError};

use futures::Stream;
use futures::channel::mpsc;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::api::LLMScaler;

/// Holds the looks asked during a list; see the module.
pub struct ListTriggers {
    state: Mutex<State>,
    held: mpsc::UnboundedSender<ObjectRef<LLMScaler>>,
}

#[derive(Default)]
struct State {
    listing: bool,
    pending: Vec<ObjectRef<LLMScaler>>,
}

impl ListTriggers {
    /// The holder, and the looks it lets go at the end of each list (for `reconcile_on`).
    pub fn new() -> (
        Self,
        impl Stream<Item = ObjectRef<LLMScaler>> + Send + 'static,
    ) {
        let (held, released) = mpsc::unbounded();
        let triggers = Self {
            state: Mutex::default(),
            held,
        };
        (triggers, released)
    }

    /// Follows the watch: a list starts, or has ended (the store then holds what it read).
    pub fn event(&self, event: &watcher::Event<LLMScaler>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Init => state.listing = true,
            watcher::Event::InitDone => {
                state.listing = false;
                for look in state.pending.drain(..) {
                    // Closed only when the controller is gone, and with it every look.
                    let _ = self.held.unbounded_send(look);
                }
                state.pending.shrink_to_fit();
            }
            _ => {}
        }
    }

    /// Whether a look at `scaler` may go to the controller now; during a list it is held (and
    /// false is returned).
    pub fn now(&self, scaler: &LLMScaler) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.listing {
            state.pending.push(ObjectRef::from_obj(scaler));
            false
        } else {
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn scaler(name: &str) -> LLMScaler {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
            "metadata": { "name": name, "namespace": "ns" },
            "spec": {
                "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "d" },
                "serverAddress": "http://prometheus:9090",
                "minReplicas": 1, "maxReplicas": 4,
                "metrics": [{ "name": "load", "query": "q", "target": "1" }]
            }
        }))
        .expect("a valid scaler")
    }

    #[tokio::test]
    async fn looks_during_a_list_wait_for_its_end() {
        let (triggers, mut released) = ListTriggers::new();
        let (a, b, c) = (scaler("a"), scaler("b"), scaler("c"));
        assert!(triggers.now(&a), "outside a list a look goes at once");
        triggers.event(&watcher::Event::Init);
        assert!(!triggers.now(&a) && !triggers.now(&b));
        let none = futures::poll!(released.next());
        assert!(none.is_pending(), "released before the end: {none:?}");
        triggers.event(&watcher::Event::InitApply(c.clone()));
        triggers.event(&watcher::Event::InitDone);
        assert_eq!(released.next().await, Some(ObjectRef::from_obj(&a)));
        assert_eq!(released.next().await, Some(ObjectRef::from_obj(&b)));
        assert!(futures::poll!(released.next()).is_pending());
        assert!(triggers.now(&c), "after the list a look goes at once again");
    }
}
