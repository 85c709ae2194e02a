//! What this process remembers of each scaler between syncs besides its status: one record per
//! scaler incarnation (its uid), made at first use and dropped in one step when the scaler goes
//! (the lifecycle of KEDA's ScalersCache), instead of a map per concern each cleaned by hand.
//!
//! None of it needs to survive a restart: what is told once is told once more, marks are looked
//! for again, the demand and admission samples are refitted within one start-up delay, the
//! objective's load curve, which only ever caps the learned capacity, fills again from the next
//! windows, and the recurrence's stretch under way starts again from status, which holds the
//! finished ones.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::watched_target::OwnWrite;
use crate::scaling::{LoadCurve, Profile, Sample};

/// [`Memories::first_time`] topic of a scaler's first sight in this process: a scaler seen for
/// the first time since a start waits for its own slot (see `reconcile`), one taken over from
/// another shard's leader does not.
pub const FIRST_SIGHT: &str = "first sight";

#[derive(Default)]
pub struct Memories(Mutex<HashMap<String, Record>>);

/// One scaler incarnation's memory.
#[derive(Default)]
struct Record {
    /// Topics already told once, each with the value it was told for (if per value). A few per
    /// scaler: a list costs less than a set's table, which a fleet pays 20,000 times.
    told: Vec<(&'static str, Option<String>)>,
    /// The digest of the last message told per topic, for notices told again only when what
    /// they say changes.
    last_told: Vec<(&'static str, u64)>,
    /// Known to have left no deletion-cost marks behind. Unknown (a new record, e.g. after a
    /// restart) counts as "may have marks", so the first sync checks.
    unmarked: bool,
    /// Recent demand, which the look-ahead fits its trend to. It changes every sync, so it is
    /// not worth a status write.
    samples: Vec<Sample>,
    /// The requests admitted a second at recent syncs, under an objective: likewise.
    admissions: Vec<Sample>,
    /// The objective's load curve: it too changes every sync.
    curve: LoadCurve,
    /// The recurrence's memory and the target it is of: its stretch under way changes every
    /// sync, so status gets it only when the stretch is over.
    recurring: Option<(String, Profile)>,
    /// The instant the next sync is due (wall clock), as last requeued: how late it runs is the
    /// operator's `sync_lateness_seconds`.
    due: Option<SystemTime>,
    /// The events told about it lately, for a repeat to add to its series (see event_writer).
    events: Vec<RecentEvent>,
    /// Its last write of the target's spec.replicas, until the target watch shows it.
    written: Option<OwnWrite>,
}

impl Record {
    /// True when `told` was not told before (and remembers it).
    fn tell(&mut self, told: (&'static str, Option<String>)) -> bool {
        if self.told.contains(&told) {
            return false;
        }
        // One or two a scaler: exactly as many as told (a push would make room for four).
        self.told.reserve_exact(1);
        self.told.push(told);
        true
    }
}

/// An event told about a scaler: which (by its type, reason and action), under what name, how
/// many times and when last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentEvent {
    pub key: u64,
    pub name: String,
    pub count: i32,
    pub last: Timestamp,
}

impl Memories {
    fn with<T>(&self, uid: &str, f: impl FnOnce(&mut Record) -> T) -> T {
        let mut records = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Asked several times per sync: the uid is copied only for a new record.
        if let Some(record) = records.get_mut(uid) {
            return f(record);
        }
        f(records.entry(uid.to_owned()).or_default())
    }

    /// True the first time it is asked about this topic for this scaler.
    pub fn first_time(&self, topic: &'static str, uid: &str) -> bool {
        self.with(uid, |r| r.tell((topic, None)))
    }

    /// True the first time it is asked about this topic and this `value` for this scaler (told
    /// once per value, e.g. per replica count asked for).
    pub fn first_time_for(&self, topic: &'static str, uid: &str, value: String) -> bool {
        self.with(uid, |r| r.tell((topic, Some(value))))
    }

    /// True when `message` differs from what was last told about this topic for this scaler
    /// (and remembers it): a state that lasts many syncs is told when it begins and when it
    /// changes, not folded into an event series at every sync.
    pub fn changed(&self, topic: &'static str, uid: &str, message: &str) -> bool {
        let mut hasher = DefaultHasher::new();
        message.hash(&mut hasher);
        let digest = hasher.finish();
        self.with(uid, |r| {
            match r.last_told.iter_mut().find(|(t, _)| *t == topic) {
                Some((_, last)) => std::mem::replace(last, digest) != digest,
                None => {
                    r.last_told.reserve_exact(1);
                    r.last_told.push((topic, digest));
                    true
                }
            }
        })
    }

    /// Forgets what was last told about this topic, once the state it described has ended: the
    /// same state beginning again is news again.
    pub fn ended(&self, topic: &'static str, uid: &str) {
        self.with(uid, |r| {
            r.last_told.retain(|(t, _)| *t != topic);
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

    /// The admission samples remembered for a scaler (under an objective).
    pub fn admissions(&self, uid: &str) -> Vec<Sample> {
        self.with(uid, |r| r.admissions.clone())
    }

    pub fn set_admissions(&self, uid: &str, admissions: Vec<Sample>) {
        self.with(uid, |r| r.admissions = admissions);
    }

    /// The objective's load curve remembered for a scaler (empty for a new one).
    pub fn curve(&self, uid: &str) -> LoadCurve {
        self.with(uid, |r| r.curve.clone())
    }

    pub fn set_curve(&self, uid: &str, curve: LoadCurve) {
        self.with(uid, |r| r.curve = curve);
    }

    /// The recurrence's memory of the target `target_uid`, if this process has one.
    pub fn recurring(&self, uid: &str, target_uid: &str) -> Option<Profile> {
        self.with(uid, |r| {
            r.recurring
                .as_ref()
                .filter(|(of, _)| of == target_uid)
                .map(|(_, p)| p.clone())
        })
    }

    pub fn set_recurring(&self, uid: &str, target_uid: &str, profile: Profile) {
        self.with(uid, |r| {
            r.recurring = (!profile.current.is_empty()).then(|| (target_uid.to_owned(), profile));
        });
    }

    /// The scaler's last write of its target's spec.replicas, if the watch may not show it yet.
    pub fn written(&self, uid: &str) -> Option<OwnWrite> {
        self.with(uid, |r| r.written.clone())
    }

    pub fn set_written(&self, uid: &str, written: Option<OwnWrite>) {
        self.with(uid, |r| r.written = written);
    }

    /// Remembers when the scaler's next sync is due.
    pub fn set_due(&self, uid: &str, at: SystemTime) {
        self.with(uid, |r| r.due = Some(at));
    }

    /// When the sync starting now was due, if one was requeued (taken: a sync brought forward by
    /// a change is followed by a new requeue).
    pub fn take_due(&self, uid: &str) -> Option<SystemTime> {
        self.with(uid, |r| r.due.take())
    }

    /// The event of this `key` told about the scaler within `window` before `now`, if any; the
    /// ones told earlier are forgotten.
    pub fn recent_event(
        &self,
        uid: &str,
        key: u64,
        now: Timestamp,
        window: SignedDuration,
    ) -> Option<RecentEvent> {
        self.with(uid, |r| {
            r.events.retain(|e| e.last + window > now);
            r.events.iter().find(|e| e.key == key).cloned()
        })
    }

    /// Remembers an event just told (a new one, or a repeat added to its series).
    pub fn told_event(&self, uid: &str, event: RecentEvent) {
        self.with(uid, |r| {
            match r.events.iter_mut().find(|e| e.key == event.key) {
                Some(known) => *known = event,
                None => {
                    r.events.reserve_exact(1);
                    r.events.push(event);
                }
            }
        });
    }

    /// Keeps only the scaler incarnations (by uid) `keep` says to.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|uid, _| keep(uid));
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

    #[test]
    fn the_remembered_days_belong_to_one_target_and_an_empty_profile_is_none() {
        let memories = Memories::default();
        let rules = crate::scaling::Recurrence {
            period_seconds: 3600,
            days: 1,
        };
        let at = |s: i64| k8s_openapi::jiff::Timestamp::from_second(s).unwrap();
        let profile = crate::scaling::record(&Profile::default(), rules, at(0), 12.0);
        memories.set_recurring("u1", "target-a", profile.clone());
        assert_eq!(memories.recurring("u1", "target-a"), Some(profile.clone()));
        assert_eq!(
            memories.recurring("u1", "target-b"),
            None,
            "another target's load is not this one's"
        );
        assert_eq!(memories.recurring("u2", "target-a"), None, "per scaler");
        // A profile with nothing under way is not kept: status holds the finished stretches.
        memories.set_recurring("u1", "target-a", Profile::default());
        assert_eq!(memories.recurring("u1", "target-a"), None);
        memories.set_recurring("u1", "target-a", profile);
        memories.forget("u1");
        assert_eq!(memories.recurring("u1", "target-a"), None);
    }

    #[test]
    fn a_told_event_is_recent_for_its_window_only() {
        let memories = Memories::default();
        let window = SignedDuration::from_mins(6);
        let at = Timestamp::from_second(1_700_000_000).unwrap();
        assert_eq!(memories.recent_event("u1", 7, at, window), None);
        let told = RecentEvent {
            key: 7,
            name: "s.1".into(),
            count: 1,
            last: at,
        };
        memories.told_event("u1", told.clone());
        let later = at + SignedDuration::from_mins(5);
        assert_eq!(memories.recent_event("u1", 7, later, window), Some(told));
        assert_eq!(
            memories.recent_event("u1", 8, later, window),
            None,
            "by key"
        );
        assert_eq!(
            memories.recent_event("u2", 7, later, window),
            None,
            "by scaler"
        );
        let repeat = RecentEvent {
            count: 2,
            last: later,
            ..memories.recent_event("u1", 7, later, window).unwrap()
        };
        memories.told_event("u1", repeat.clone());
        let much_later = later + SignedDuration::from_mins(5);
        assert_eq!(
            memories.recent_event("u1", 7, much_later, window),
            Some(repeat),
            "the window runs from the last repeat"
        );
        let gone = much_later + SignedDuration::from_mins(6);
        assert_eq!(memories.recent_event("u1", 7, gone, window), None);
        memories.told_event(
            "u1",
            RecentEvent {
                key: 9,
                name: "s.2".into(),
                count: 1,
                last: gone,
            },
        );
        assert_eq!(
            memories.with("u1", |r| r.events.len()),
            1,
            "the expired one is dropped"
        );
    }

    #[test]
    fn a_due_instant_is_taken_once() {
        let memories = Memories::default();
        assert_eq!(memories.take_due("u1"), None);
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        memories.set_due("u1", at);
        assert_eq!(memories.take_due("u1"), Some(at));
        assert_eq!(memories.take_due("u1"), None, "taken");
    }
}
