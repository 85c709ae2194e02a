//! The targets of one kind that scalers evaluated here point at, kept as the kind's watch brings
//! them, and nothing else of the kind: with shards, the targets of the scalers another replica
//! leads are not held here (nor are the objects no scaler points at).
//!
//! A target is *claimed* by the scalers that point at it (see `target_watches`). The watch's
//! events are applied to claimed targets only; a target claimed after the watch passed it (a new
//! scaler, a shard won) is unknown until a sync reads it once from the API server and
//! [`ClaimedTargets::fill`]s it in. The watch is always newer than such a read or catches up with
//! it, so a read only fills what no event has told since the claim, and every claimed target
//! converges to the watch's state:
//! - an event applied after the claim wins over a read that returns later (the read may be
//!   older; if it was newer, the watch brings that state too);
//! - a list (a watch starting over) marks gone every claimed target it did not bring, even one a
//!   read is still fetching (the read may predate a deletion the list no longer tells), unless the
//!   target was claimed after the list passed it (its read then comes after the list's state).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use kube::api::DynamicObject;
use kube::runtime::watcher;

use super::watched_target::WatchedTarget;

/// A target's namespace and name.
pub type TargetName = (String, String);

/// The claimed targets of one kind.
#[derive(Default)]
pub struct ClaimedTargets(Mutex<State>);

#[derive(Default)]
struct State {
    slots: HashMap<TargetName, Slot>,
    /// While a list runs: every object it has brought so far, claimed or not (see the module).
    listing: Option<HashSet<TargetName>>,
    /// Slots made so far: each slot's number tells a read for it from one for a slot of the same
    /// name released before.
    made: u64,
}

struct Slot {
    /// How many claims name it; it goes with the last.
    holders: u32,
    seen: Seen,
    ticket: Ticket,
}

/// Which slot a read is for (see [`ClaimedTargets::fill`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64);

#[derive(Clone)]
enum Seen {
    /// Nothing told since it was claimed: a sync reads it.
    Unknown,
    Present(Arc<WatchedTarget>),
    /// Known not to exist.
    Absent,
}

/// What the store knows of a claimed target.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    Known(Option<Arc<WatchedTarget>>),
    /// Nothing yet: read it and [`ClaimedTargets::fill`] it in with this ticket.
    Unknown(Ticket),
    /// Claimed by nobody.
    Unclaimed,
}

impl ClaimedTargets {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One more claim on `target`.
    pub fn claim(&self, target: &TargetName) {
        let mut state = self.lock();
        match state.slots.get_mut(target) {
            Some(slot) => slot.holders += 1,
            None => {
                state.made += 1;
                let ticket = Ticket(state.made);
                state.slots.insert(
                    target.clone(),
                    Slot {
                        holders: 1,
                        seen: Seen::Unknown,
                        ticket,
                    },
                );
            }
        }
    }

    /// One claim fewer on `target`; the last takes it out of memory.
    pub fn release(&self, target: &TargetName) {
        let mut state = self.lock();
        if let Some(slot) = state.slots.get_mut(target) {
            slot.holders = slot.holders.saturating_sub(1);
            if slot.holders == 0 {
                state.slots.remove(target);
            }
        }
    }

    /// What is known of `target`.
    pub fn lookup(&self, target: &TargetName) -> Lookup {
        match self.lock().slots.get(target) {
            Some(slot) => match &slot.seen {
                Seen::Present(object) => Lookup::Known(Some(object.clone())),
                Seen::Absent => Lookup::Known(None),
                Seen::Unknown => Lookup::Unknown(slot.ticket),
            },
            None => Lookup::Unclaimed,
        }
    }

    /// A read of `target` from the API server (`None`: it does not exist) for the slot of
    /// `ticket`, kept if nothing was told of it since it was claimed; returns what is known of it
    /// now (the read itself when the slot it was for has gone).
    pub fn fill(
        &self,
        target: &TargetName,
        ticket: Ticket,
        read: Option<WatchedTarget>,
    ) -> Option<Arc<WatchedTarget>> {
        let mut state = self.lock();
        let read = read.map(Arc::new);
        let Some(slot) = state.slots.get_mut(target) else {
            return read;
        };
        if slot.ticket == ticket && matches!(slot.seen, Seen::Unknown) {
            slot.seen = match &read {
                Some(object) => Seen::Present(object.clone()),
                None => Seen::Absent,
            };
        }
        match &slot.seen {
            Seen::Present(object) => Some(object.clone()),
            Seen::Absent => None,
            Seen::Unknown => read,
        }
    }

    /// Applies an event of the kind's watch: only claimed targets are compacted and kept.
    pub fn apply(&self, event: &watcher::Event<DynamicObject>) {
        let mut state = self.lock();
        match event {
            watcher::Event::Init => state.listing = Some(HashSet::new()),
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                let name = name_of(object);
                state.set(&name, || {
                    Seen::Present(Arc::new(WatchedTarget::from_object(object)))
                });
                if let (watcher::Event::InitApply(_), Some(listing)) = (event, &mut state.listing) {
                    listing.insert(name);
                }
            }
            watcher::Event::Delete(object) => state.set(&name_of(object), || Seen::Absent),
            watcher::Event::InitDone => {
                let listed = state.listing.take().unwrap_or_default();
                for (name, slot) in &mut state.slots {
                    if !listed.contains(name) {
                        slot.seen = Seen::Absent;
                    }
                }
            }
        }
    }

    /// How many targets are kept (for tests and the bench's accounting).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }
}

impl State {
    fn set(&mut self, name: &TargetName, seen: impl FnOnce() -> Seen) {
        if let Some(slot) = self.slots.get_mut(name) {
            slot.seen = seen();
        }
    }
}

fn name_of(object: &DynamicObject) -> TargetName {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn object(name: &str, replicas: i64) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name, "namespace": "ns" },
            "spec": { "replicas": replicas },
        }))
        .unwrap()
    }

    fn target(name: &str) -> TargetName {
        ("ns".to_owned(), name.to_owned())
    }

    fn replicas(lookup: Lookup) -> Option<Option<i32>> {
        match lookup {
            Lookup::Known(object) => Some(object.and_then(|o| o.spec_replicas)),
            Lookup::Unknown(_) | Lookup::Unclaimed => None,
        }
    }

    /// Fills `name` in with a read of `replicas` (`None`: not found) for the slot of `ticket`;
    /// the replicas known of it then.
    fn fill(
        store: &ClaimedTargets,
        name: &str,
        ticket: Ticket,
        replicas: Option<i32>,
    ) -> Option<i32> {
        let read = replicas.map(|r| WatchedTarget::from_object(&object(name, r.into())));
        store
            .fill(&target(name), ticket, read)
            .and_then(|o| o.spec_replicas)
    }

    fn ticket(lookup: Lookup) -> Ticket {
        match lookup {
            Lookup::Unknown(ticket) => ticket,
            other => panic!("expected an unknown target, got {other:?}"),
        }
    }

    #[test]
    fn only_claimed_targets_are_kept_and_the_last_release_drops_one() {
        let store = ClaimedTargets::default();
        store.claim(&target("a"));
        store.apply(&watcher::Event::Init);
        for name in ["a", "b", "c"] {
            store.apply(&watcher::Event::InitApply(object(name, 2)));
        }
        store.apply(&watcher::Event::InitDone);
        assert_eq!(store.len(), 1, "b and c are claimed by nobody");
        assert_eq!(replicas(store.lookup(&target("a"))), Some(Some(2)));
        assert_eq!(replicas(store.lookup(&target("b"))), None, "never kept");

        // A second scaler on the same target; one goes, the target stays.
        store.claim(&target("a"));
        store.release(&target("a"));
        assert_eq!(replicas(store.lookup(&target("a"))), Some(Some(2)));
        store.release(&target("a"));
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn a_read_fills_a_target_claimed_after_the_watch_passed_it_but_never_beats_an_event() {
        let store = ClaimedTargets::default();
        store.apply(&watcher::Event::Init);
        store.apply(&watcher::Event::InitApply(object("a", 1)));
        store.apply(&watcher::Event::InitDone);
        store.claim(&target("a"));
        let a = ticket(store.lookup(&target("a")));
        assert_eq!(fill(&store, "a", a, Some(1)), Some(1));

        // Claimed, read started; an event comes before the read returns: the event stands.
        store.claim(&target("b"));
        let b = ticket(store.lookup(&target("b")));
        store.apply(&watcher::Event::Apply(object("b", 5)));
        assert_eq!(
            fill(&store, "b", b, Some(4)),
            Some(5),
            "the stale read is not kept"
        );
        // A read for a slot released since is not kept in the slot made after it.
        store.release(&target("b"));
        store.claim(&target("b"));
        assert_eq!(
            fill(&store, "b", b, Some(4)),
            Some(4),
            "the caller gets its read"
        );
        assert!(matches!(store.lookup(&target("b")), Lookup::Unknown(t) if t != b));
        // A read of a missing target is remembered as missing, until the watch tells otherwise.
        store.claim(&target("c"));
        let c = ticket(store.lookup(&target("c")));
        assert_eq!(fill(&store, "c", c, None), None);
        assert_eq!(replicas(store.lookup(&target("c"))), Some(None));
        store.apply(&watcher::Event::Apply(object("c", 3)));
        assert_eq!(replicas(store.lookup(&target("c"))), Some(Some(3)));
        store.apply(&watcher::Event::Delete(object("c", 3)));
        assert_eq!(replicas(store.lookup(&target("c"))), Some(None));
    }

    /// One step of the world in the property test.
    #[derive(Debug, Clone)]
    enum Step {
        /// The API server changes object i (a new state, or deleted).
        Write(usize, Option<i32>),
        /// The watch tells its next event.
        Tell,
        /// The watch starts over: a list of what exists now, told one object per `Tell`.
        Relist,
        /// A scaler claims object i (and starts reading it if the store does not know it).
        Claim(usize),
        /// The oldest claim of object i goes.
        Release(usize),
        /// The oldest read in flight returns.
        Return,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0..4usize, proptest::option::weighted(0.8, 0..100i32)).prop_map(|(i, r)| Step::Write(i, r)),
            6 => Just(Step::Tell),
            1 => Just(Step::Relist),
            2 => (0..4usize).prop_map(Step::Claim),
            1 => (0..4usize).prop_map(Step::Release),
            2 => Just(Step::Return),
        ]
    }

    fn name(i: usize) -> String {
        format!("t{i}")
    }

    proptest! {
        /// Whatever the order of writes, watch events, lists, claims, releases and reads: once
        /// the watch has told everything and no read is in flight, every claimed target is
        /// known as the API server has it, and nothing unclaimed is kept.
        #[test]
        fn claimed_targets_converge_to_the_api_servers_state(steps in proptest::collection::vec(step(), 0..80)) {
            let store = ClaimedTargets::default();
            let mut truth: [Option<i32>; 4] = [None; 4];
            // The watch's events not told yet, in order.
            let mut pending: std::collections::VecDeque<watcher::Event<DynamicObject>> = Default::default();
            let mut reads: std::collections::VecDeque<(usize, Ticket, Option<i32>)> = Default::default();
            let mut claims = [0u32; 4];
            let relist = |truth: &[Option<i32>; 4], pending: &mut std::collections::VecDeque<_>| {
                // What was not told yet is lost with the old watch; the list brings the state.
                pending.clear();
                pending.push_back(watcher::Event::Init);
                for (i, state) in truth.iter().enumerate() {
                    if let Some(r) = state {
                        pending.push_back(watcher::Event::InitApply(object(&name(i), (*r).into())));
                    }
                }
                pending.push_back(watcher::Event::InitDone);
            };
            relist(&truth, &mut pending);
            for step in steps {
                match step {
                    Step::Write(i, state) => {
                        match (truth[i], state) {
                            (_, Some(r)) => pending.push_back(watcher::Event::Apply(object(&name(i), r.into()))),
                            (Some(r), None) => pending.push_back(watcher::Event::Delete(object(&name(i), r.into()))),
                            (None, None) => {}
                        }
                        truth[i] = state;
                    }
                    Step::Tell => if let Some(event) = pending.pop_front() { store.apply(&event) },
                    Step::Relist => relist(&truth, &mut pending),
                    Step::Claim(i) => {
                        claims[i] += 1;
                        store.claim(&target(&name(i)));
                        if let Lookup::Unknown(ticket) = store.lookup(&target(&name(i))) {
                            reads.push_back((i, ticket, truth[i]));
                        }
                    }
                    Step::Release(i) => if claims[i] > 0 {
                        claims[i] -= 1;
                        store.release(&target(&name(i)));
                    },
                    Step::Return => if let Some((i, ticket, read)) = reads.pop_front() {
                        fill(&store, &name(i), ticket, read);
                    },
                }
            }
            // The watch tells everything, the reads return, in either order.
            while let Some(event) = pending.pop_front() {
                store.apply(&event);
                if let Some((i, ticket, read)) = reads.pop_front() {
                    fill(&store, &name(i), ticket, read);
                }
            }
            while let Some((i, ticket, read)) = reads.pop_front() {
                fill(&store, &name(i), ticket, read);
            }
            for i in 0..4 {
                let lookup = store.lookup(&target(&name(i)));
                if claims[i] > 0 {
                    prop_assert_eq!(replicas(lookup), Some(truth[i]), "t{} claimed {} times", i, claims[i]);
                } else {
                    prop_assert_eq!(lookup, Lookup::Unclaimed, "t{} is claimed by nobody", i);
                }
            }
            prop_assert_eq!(store.len(), claims.iter().filter(|c| **c > 0).count());
        }
    }
}
