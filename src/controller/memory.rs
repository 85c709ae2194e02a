//! What this process remembers of each scaler between syncs besides its status: one record per
//! scaler incarnation (its uid), made at first use and dropped in one step when the scaler goes
//! (the lifecycle of KEDA's ScalersCache), instead of a map per concern each cleaned by hand.
//!
//! None of it needs to survive a restart: what is told once is told once more, marks are looked
//! for again, and the demand samples are refitted within one start-up delay.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};

use crate::scaling::Sample;

#[derive(Default)]
pub struct Memories(Mutex<HashMap<String, Record>>);

/// One scaler incarnation's memory.
#[derive(Default)]
struct Record {
    /// Topics already told once, each with the value it was told for (if per value).
    told: HashSet<(&'static str, Option<String>)>,
    /// The digest of the last message told per topic, for notices told again only when what
    /// they say changes.
    last_told: HashMap<&'static str, u64>,
    /// Known to have left no deletion-cost marks behind. Unknown (a new record, e.g. after a
    /// restart) counts as "may have marks", so the first sync checks.
    unmarked: bool,
    /// Recent demand, which the look-ahead fits its trend to. It changes every sync, so it is
    /// not worth a status write.
    samples: Vec<Sample>,
}

impl Memories {
    fn with<T>(&self, uid: &str, f: impl FnOnce(&mut Record) -> T) -> T {
        let mut records = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(records.entry(uid.to_owned()).or_default())
    }

    /// True the first time it is asked about this topic for this scaler.
    pub fn first_time(&self, topic: &'static str, uid: &str) -> bool {
        self.with(uid, |r| r.told.insert((topic, None)))
    }

    /// True the first time it is asked about this topic and this `value` for this scaler (told
    /// once per value, e.g. per replica count asked for).
    pub fn first_time_for(&self, topic: &'static str, uid: &str, value: String) -> bool {
        self.with(uid, |r| r.told.insert((topic, Some(value))))
    }

    /// True when `message` differs from what was last told about this topic for this scaler
    /// (and remembers it): a state that lasts many syncs is told when it begins and when it
    /// changes, not folded into an event series at every sync.
    pub fn changed(&self, topic: &'static str, uid: &str, message: &str) -> bool {
        let mut hasher = DefaultHasher::new();
        message.hash(&mut hasher);
        let digest = hasher.finish();
        self.with(uid, |r| r.last_told.insert(topic, digest) != Some(digest))
    }

    /// Forgets what was last told about this topic, once the state it described has ended: the
    /// same state beginning again is news again.
    pub fn ended(&self, topic: &'static str, uid: &str) {
        self.with(uid, |r| {
            r.last_told.remove(topic);
        });
    }

    pub fn may_have_marks(&self, uid: &str) -> bool {
        self.with(uid, |r| !r.unmarked)
    }

    pub fn set_may_have_marks(&self, uid: &str, may: bool) {
        self.with(uid, |r| r.unmarked = !may);
    }

    /// The demand samples remembered for a scaler.
    pub fn samples(&self, uid: &str) -> Vec<Sample> {
        self.with(uid, |r| r.samples.clone())
    }

    pub fn set_samples(&self, uid: &str, samples: Vec<Sample>) {
        self.with(uid, |r| r.samples = samples);
    }

    /// Drops everything remembered of a scaler incarnation that is gone, in one step.
    pub fn forget(&self, uid: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }

    /// How many scalers are remembered (deleted ones must not accumulate).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_made_at_first_use_and_dropped_whole() {
        let memories = Memories::default();
        assert!(memories.first_time("A", "u1"));
        assert!(!memories.first_time("A", "u1"));
        assert!(memories.first_time_for("A", "u1", "3".into()));
        assert!(!memories.first_time_for("A", "u1", "3".into()));
        assert!(memories.first_time_for("A", "u1", "4".into()));
        assert!(memories.first_time("A", "u2"), "per scaler");
        assert!(memories.changed("B", "u1", "x"));
        assert!(!memories.changed("B", "u1", "x"));
        assert!(memories.changed("B", "u1", "y"));
        memories.ended("B", "u1");
        assert!(memories.changed("B", "u1", "y"), "news again once ended");
        assert!(memories.may_have_marks("u1"));
        memories.set_may_have_marks("u1", false);
        assert!(!memories.may_have_marks("u1"));
        assert_eq!(memories.len(), 2);
        memories.forget("u1");
        assert_eq!(memories.len(), 1);
        assert!(
            memories.first_time("A", "u1"),
            "a new incarnation starts afresh"
        );
        assert!(memories.may_have_marks("u1"));
    }
}
