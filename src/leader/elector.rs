//! Who may write, decided from what the Lease shows: a pure state machine fed by observations,
//! in the manner of client-go's leader election.
//!
//! Expiry is judged by the local monotonic clock, never by comparing clocks across machines: a
//! standby takes over only after it has seen the Lease unchanged for a whole lease duration, and a
//! holder stops writing `renew_deadline` after the start of its last successful renewal. Because
//! `renew_deadline` is shorter than the lease duration, the old holder has stopped before anyone
//! else can start.

use std::time::{Duration, Instant};

/// The election's clock settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease not renewed stays valid for the others.
    pub lease: Duration,
    /// How long after the start of its last successful renewal the holder goes on writing.
    pub renew_deadline: Duration,
    /// Pause between two looks at the Lease.
    pub retry: Duration,
}

impl Timing {
    /// Renewal deadline at two thirds of the lease, a look every seventh of it (15 s gives the
    /// usual 10 s and 2 s).
    pub fn for_lease(lease: Duration) -> Self {
        Self {
            lease,
            renew_deadline: lease * 2 / 3,
            retry: (lease / 7).max(Duration::from_millis(200)),
        }
    }
}

/// The parts of a Lease the election reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// Empty or absent when nobody holds it (e.g. released on shutdown).
    pub holder: Option<String>,
    /// Changes on every write, renewals included.
    pub resource_version: String,
}

/// What to do after a look at the Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Create the Lease, or take over a free or expired one.
    Acquire,
    /// We hold it: write a new renewTime.
    Renew,
    /// Someone else holds it and it is alive.
    Wait,
}

#[derive(Debug)]
pub struct Elector {
    identity: String,
    timing: Timing,
    /// The other holder's record as last seen, and when it was first seen in that state.
    seen: Option<(String, Instant)>,
    /// Writes are allowed until then.
    leading_until: Option<Instant>,
}

impl Elector {
    pub fn new(identity: impl Into<String>, timing: Timing) -> Self {
        Self {
            identity: identity.into(),
            timing,
            seen: None,
            leading_until: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Decides from a Lease read at `now` (`None`: there is no Lease yet).
    pub fn observe(&mut self, lease: Option<&LeaseView>, now: Instant) -> Step {
        let Some(lease) = lease else {
            self.leading_until = None;
            return Step::Acquire;
        };
        match lease.holder.as_deref().filter(|h| !h.is_empty()) {
            None => {
                self.leading_until = None;
                Step::Acquire
            }
            Some(holder) if holder == self.identity => Step::Renew,
            Some(_) => {
                // Someone else holds it: whatever we had is gone.
                self.leading_until = None;
                match &self.seen {
                    Some((version, since)) if *version == lease.resource_version => {
                        if now.duration_since(*since) >= self.timing.lease {
                            Step::Acquire
                        } else {
                            Step::Wait
                        }
                    }
                    _ => {
                        self.seen = Some((lease.resource_version.clone(), now));
                        Step::Wait
                    }
                }
            }
        }
    }

    /// An Acquire or Renew that started at `started` was written.
    pub fn written(&mut self, started: Instant) {
        self.seen = None;
        self.leading_until = Some(started + self.timing.renew_deadline);
    }

    /// Gives up at once (shutdown): no write after this.
    pub fn resign(&mut self) {
        self.leading_until = None;
    }

    /// Whether this process may write at `now`.
    pub fn may_write(&self, now: Instant) -> bool {
        self.leading_until.is_some_and(|until| now < until)
    }

    /// Until when writes are allowed, if they are.
    pub fn leading_until(&self) -> Option<Instant> {
        self.leading_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing::for_lease(Duration::from_secs(15))
    }

    fn held_by(holder: &str, version: &str) -> LeaseView {
        LeaseView {
            holder: Some(holder.to_owned()),
            resource_version: version.to_owned(),
        }
    }

    #[test]
    fn the_usual_timing_follows_the_lease() {
        let t = timing();
        assert_eq!(t.renew_deadline, Duration::from_secs(10));
        assert!(t.retry >= Duration::from_secs(2) && t.retry < Duration::from_millis(2200));
        assert!(t.renew_deadline < t.lease);
    }

    #[test]
    fn no_lease_or_a_released_one_is_taken() {
        let mut me = Elector::new("a", timing());
        let now = Instant::now();
        assert_eq!(me.observe(None, now), Step::Acquire);
        let released = LeaseView {
            holder: Some(String::new()),
            resource_version: "7".into(),
        };
        assert_eq!(me.observe(Some(&released), now), Step::Acquire);
        assert!(
            !me.may_write(now),
            "nothing is written before the Lease says so"
        );
        me.written(now);
        assert!(me.may_write(now));
        assert_eq!(me.observe(Some(&held_by("a", "8")), now), Step::Renew);
    }

    #[test]
    fn a_holder_that_cannot_renew_stops_writing_before_anyone_can_take_over() {
        let t = timing();
        let mut holder = Elector::new("a", t);
        let mut standby = Elector::new("b", t);
        let start = Instant::now();
        holder.written(start);
        // The standby sees the renewal right away.
        assert_eq!(standby.observe(Some(&held_by("a", "1")), start), Step::Wait);
        // The holder is cut off: no renewal lands. It stops at the renew deadline...
        let stop = start + t.renew_deadline;
        assert!(holder.may_write(stop - Duration::from_millis(1)));
        assert!(!holder.may_write(stop));
        // ...and the standby, still seeing the same record, may only take over a lease later.
        let before = start + t.lease - Duration::from_millis(1);
        assert_eq!(
            standby.observe(Some(&held_by("a", "1")), before),
            Step::Wait
        );
        let after = start + t.lease;
        assert_eq!(
            standby.observe(Some(&held_by("a", "1")), after),
            Step::Acquire
        );
        assert!(stop < after);
    }

    #[test]
    fn renewals_seen_by_a_standby_keep_it_waiting() {
        let t = timing();
        let mut standby = Elector::new("b", t);
        let start = Instant::now();
        for i in 0..20u32 {
            let now = start + t.retry * i;
            let version = (i / 3).to_string(); // renewed every third look
            assert_eq!(
                standby.observe(Some(&held_by("a", &version)), now),
                Step::Wait,
                "look {i}"
            );
        }
    }

    #[test]
    fn losing_the_lease_to_another_stops_writes_at_once() {
        let mut me = Elector::new("a", timing());
        let now = Instant::now();
        me.written(now);
        assert!(me.may_write(now));
        assert_eq!(me.observe(Some(&held_by("b", "9")), now), Step::Wait);
        assert!(!me.may_write(now));
        me.written(now);
        me.resign();
        assert!(!me.may_write(now));
    }
}
