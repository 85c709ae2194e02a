//! Stabilization windows: a scale-down goes no lower than the highest recommendation of its
//! window, a scale-up no higher than the lowest of its window.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// One recommendation and when it was made.
///
/// The last entry of a history is the recommendation in force: made at `at` and at every sync
/// since, so it never expires, and a steady recommendation leaves the history (and the status it
/// is stored in) unchanged: a steady fleet costs no API writes. When a different recommendation
/// replaces it, its time becomes the replacement's, which errs late by at most one sync period:
/// the fleet is held that much longer, never released early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub at: Timestamp,
    pub replicas: i32,
}

/// Most entries kept (and persisted in status). Compaction below keeps the history within it
/// without ever letting the fleet shrink earlier than the full history would have.
pub const MAX_HISTORY: usize = 128;

fn alive(entry: &Entry, window: SignedDuration, now: Timestamp) -> bool {
    // An entry exactly `window` old has expired. One from the future (a leader with a skewed
    // clock wrote it) still counts: holding is the safe side.
    now.duration_since(entry.at) < window
}

/// The entries that still count at `now`: those inside the window, and the one in force.
fn counting(
    history: &[Entry],
    window: SignedDuration,
    now: Timestamp,
) -> impl Iterator<Item = &Entry> {
    let last = history.len().saturating_sub(1);
    history
        .iter()
        .enumerate()
        .filter(move |(i, e)| *i == last || alive(e, window, now))
        .map(|(_, e)| e)
}

/// Which way a window holds the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// The scale-down window: no lower than the highest recommendation inside it.
    Highest,
    /// The scale-up window: no higher than the lowest recommendation inside it.
    Lowest,
}

impl Hold {
    /// Whether `a` holds the fleet at least as firmly as `b` (and so outlives its use).
    fn covers(self, a: i32, b: i32) -> bool {
        match self {
            Hold::Highest => a >= b,
            Hold::Lowest => a <= b,
        }
    }

    fn firmer(self, a: i32, b: i32) -> i32 {
        match self {
            Hold::Highest => a.max(b),
            Hold::Lowest => a.min(b),
        }
    }
}

/// The replica count to move to for `recommendation`, given where the fleet is (`current`) and
/// the recent recommendations. A `Highest` window only slows scale-down: it stops at the highest
/// recommendation still inside the window, never above `current`. A `Lowest` window only slows
/// scale-up: it stops at the lowest, never below `current`.
pub fn stabilized(
    hold: Hold,
    recommendation: i32,
    current: i32,
    history: &[Entry],
    window_seconds: i32,
    now: Timestamp,
) -> i32 {
    let moving_away = match hold {
        Hold::Highest => recommendation < current,
        Hold::Lowest => recommendation > current,
    };
    if !moving_away || window_seconds <= 0 {
        return recommendation;
    }
    let window = SignedDuration::from_secs(i64::from(window_seconds));
    let held = counting(history, window, now)
        .map(|e| e.replicas)
        .fold(recommendation, |a, b| hold.firmer(a, b));
    match hold {
        Hold::Highest => held.min(current),
        Hold::Lowest => held.max(current),
    }
}

/// The history after recording `entry`: a repeat of the recommendation in force changes nothing;
/// a new one closes it (timed now) and becomes the one in force. Expired entries and entries
/// that can never again decide the hold are dropped, and at most [`MAX_HISTORY`] entries kept.
pub fn record(hold: Hold, history: &[Entry], entry: Entry, window_seconds: i32) -> Vec<Entry> {
    if window_seconds <= 0 {
        return Vec::new();
    }
    let window = SignedDuration::from_secs(i64::from(window_seconds));
    let now = entry.at;
    let mut entries = history.to_vec();
    match entries.last_mut() {
        Some(last) if last.replicas == entry.replicas => {}
        Some(last) => {
            last.at = last.at.max(now);
            entries.push(entry);
        }
        None => entries.push(entry),
    }
    let in_force = entries.len() - 1;
    let mut kept: Vec<Entry> = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        if i != in_force && !alive(e, window, now) {
            continue;
        }
        // An older entry no firmer than a newer one expires first, so it never decides anything.
        while kept
            .last()
            .is_some_and(|last| hold.covers(e.replicas, last.replicas) && last.at <= e.at)
        {
            kept.pop();
        }
        kept.push(*e);
    }
    while kept.len() > MAX_HISTORY {
        merge_closest_pair(hold, &mut kept);
    }
    kept
}

/// Replaces the two neighbours closest in time by the firmer (older) value living until the
/// younger one's time: the hold over any later window can only stay the same or firm up, so
/// compaction may hold the fleet a little longer, never release it early. The entry in force is
/// never merged: it never expires, so a firmer value merged into it would hold the fleet forever.
fn merge_closest_pair(hold: Hold, entries: &mut Vec<Entry>) {
    let Some(i) = (0..entries.len().saturating_sub(2))
        .min_by_key(|&i| entries[i + 1].at.duration_since(entries[i].at))
    else {
        return;
    };
    let merged = Entry {
        at: entries[i + 1].at,
        replicas: hold.firmer(entries[i].replicas, entries[i + 1].replicas),
    };
    entries[i] = merged;
    entries.remove(i + 1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::fixture::t;

    /// The scale-down window.
    fn down(
        recommendation: i32,
        current: i32,
        history: &[Entry],
        window: i32,
        now: Timestamp,
    ) -> i32 {
        stabilized(Hold::Highest, recommendation, current, history, window, now)
    }

    fn keep(history: &[Entry], entry: Entry, window: i32) -> Vec<Entry> {
        record(Hold::Highest, history, entry, window)
    }

    fn e(seconds: i64, replicas: i32) -> Entry {
        Entry {
            at: t(seconds),
            replicas,
        }
    }

    #[test]
    fn scale_up_is_never_delayed() {
        let history = [e(0, 2)];
        assert_eq!(down(9, 3, &history, 300, t(10)), 9);
    }

    #[test]
    fn scale_down_holds_at_the_window_maximum() {
        // 6 until 0, 4 until 100, 2 in force since then.
        let history = [e(0, 6), e(100, 4), e(100, 2)];
        assert_eq!(down(1, 6, &history, 300, t(200)), 6);
        assert_eq!(down(1, 6, &history, 300, t(350)), 4);
        assert_eq!(down(1, 6, &history, 300, t(450)), 2);
    }

    #[test]
    fn the_recommendation_in_force_never_expires() {
        // Recommended at every sync since 0: it still counts an hour later.
        assert_eq!(down(1, 6, &[e(0, 5)], 300, t(3600)), 5);
    }

    #[test]
    fn an_entry_exactly_window_old_has_expired() {
        let history = [e(0, 6), e(0, 1)];
        assert_eq!(down(1, 6, &history, 300, t(299)), 6);
        assert_eq!(down(1, 6, &history, 300, t(300)), 1);
    }

    #[test]
    fn never_holds_above_the_current_count() {
        let history = [e(0, 10)];
        assert_eq!(down(2, 5, &history, 300, t(10)), 5);
    }

    #[test]
    fn a_scale_up_window_holds_at_its_lowest() {
        // 3 until 0, 5 until 100, 9 in force since then.
        let history = [e(0, 3), e(100, 5), e(100, 9)];
        assert_eq!(stabilized(Hold::Lowest, 12, 3, &history, 300, t(200)), 3);
        assert_eq!(stabilized(Hold::Lowest, 12, 3, &history, 300, t(350)), 5);
        assert_eq!(stabilized(Hold::Lowest, 12, 3, &history, 300, t(450)), 9);
        // It never slows a scale-down.
        assert_eq!(stabilized(Hold::Lowest, 1, 3, &history, 300, t(200)), 1);
        // An older, higher entry never decides anything and is dropped.
        assert_eq!(
            record(Hold::Lowest, &[e(0, 9), e(10, 5)], e(20, 7), 300),
            vec![e(20, 5), e(20, 7)]
        );
    }

    #[test]
    fn window_zero_is_off() {
        let history = [e(0, 10)];
        assert_eq!(down(2, 5, &history, 0, t(1)), 2);
        assert!(keep(&history, e(1, 2), 0).is_empty());
    }

    #[test]
    fn future_entries_count() {
        assert_eq!(down(1, 5, &[e(100, 5)], 60, t(0)), 5);
    }

    #[test]
    fn record_prunes_expired_and_dominated_entries() {
        let history = [e(0, 9), e(10, 5), e(20, 7)];
        // At 305 the entry from 0 has expired; 5@10 is dominated by the younger 7, which was in
        // force until now.
        assert_eq!(keep(&history, e(305, 3), 300), vec![e(305, 7), e(305, 3)]);
        // A new maximum dominates everything older.
        assert_eq!(keep(&history, e(30, 9), 300), vec![e(30, 9)]);
    }

    #[test]
    fn a_steady_recommendation_leaves_the_history_unchanged() {
        let history = vec![e(0, 9), e(10, 4)];
        assert_eq!(keep(&history, e(20, 4), 300), history);
        assert_eq!(keep(&history, e(299, 4), 300), history);
        // Only the expiry of the older entry changes it, once.
        assert_eq!(keep(&history, e(300, 4), 300), vec![e(10, 4)]);
        assert_eq!(keep(&[e(10, 4)], e(5000, 4), 300), vec![e(10, 4)]);
    }

    #[test]
    fn record_stays_bounded_and_never_releases_early() {
        let window = 3600;
        let mut history = Vec::new();
        // A slowly falling recommendation: every entry is a new, lower value.
        for i in 0..1000 {
            history = keep(&history, e(i * 3, 2000 - i as i32), window);
            assert!(history.len() <= MAX_HISTORY);
        }
        // Compare with the exact answer from the uncompacted history at later instants.
        let exact: Vec<Entry> = (0..1000).map(|i| e(i * 3, 2000 - i as i32)).collect();
        for now in [3000, 3600, 4000, 5000, 6000, 6600] {
            let full = down(0, 5000, &exact, window, t(now));
            let compact = down(0, 5000, &history, window, t(now));
            assert!(
                compact >= full,
                "at {now}: compacted {compact} < exact {full}"
            );
        }
        // Compaction never folds an older, larger value into the one in force.
        let last = history.last().unwrap();
        assert_eq!(last.replicas, 2000 - 999);
        let steady = keep(&history, e(9000, last.replicas), window);
        assert_eq!(down(0, 5000, &steady, window, t(9000)), last.replicas);
    }
}
