//! When a scaler syncs next. Every scaler's syncs fall on a grid of its period shifted by a phase
//! that is a stable hash of the scaler's uid: a thousand scalers created together, or listed
//! together when the operator starts, would otherwise query their signal server in the same
//! instant of every period (a Prometheus bounds its concurrent queries and answers the excess
//! with 503). The phase depends on the uid and the wall clock only, so a restart or a failover
//! to a standby does not line the syncs up again.

use std::hash::Hasher;
use std::time::{Duration, SystemTime};

/// The scaler's offset within its period, in `[0, period)`.
pub fn phase(key: &str, period: Duration) -> Duration {
    let period_ms = period.as_millis().max(1);
    // FNV-1a: stable across processes, platforms and releases (std's hasher promises none).
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(key.as_bytes());
    let offset = u128::from(hasher.finish()) % period_ms;
    Duration::from_millis(u64::try_from(offset).unwrap_or(0))
}

/// Time from `now` (since the Unix epoch) to the first instant of the grid `phase + k·period`
/// that is at least half a period away. A sync off the grid (a watch event, the first sync after
/// a start) is followed by one back on it, never by two syncs within half a period; on the grid,
/// the next sync is exactly one period later.
pub fn until_next_slot(now: Duration, period: Duration, phase: Duration) -> Duration {
    let period_ms = period.as_millis().max(1);
    let phase_ms = phase.as_millis() % period_ms;
    let now_ms = now.as_millis();
    let earliest = now_ms + period_ms / 2;
    // The first slot >= earliest.
    let since_phase = earliest.saturating_sub(phase_ms);
    let slots = since_phase.div_ceil(period_ms);
    let slot = slots * period_ms + phase_ms;
    let wait = slot.max(earliest) - now_ms;
    Duration::from_millis(u64::try_from(wait).unwrap_or(u64::MAX))
}

/// Time from `now` to the scaler's next instant on its grid, however close (zero when `now` is
/// on it): where a scaler that already synced its spec before a restart takes up its syncs.
pub fn until_slot(now: Duration, period: Duration, phase: Duration) -> Duration {
    let period_ms = period.as_millis().max(1);
    let offset = now.as_millis() % period_ms;
    let wait = (phase.as_millis() % period_ms + period_ms - offset) % period_ms;
    Duration::from_millis(u64::try_from(wait).unwrap_or(0))
}

/// [`until_slot`] for a scaler keyed `key` at wall-clock `now`.
pub fn first_slot(key: &str, period: Duration, now: SystemTime) -> Duration {
    until_slot(since_epoch(now), period, phase(key, period))
}

fn since_epoch(now: SystemTime) -> Duration {
    now.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// The requeue delay of a scaler keyed `key` (its uid) syncing every `period`, at wall-clock
/// `now`.
pub fn next_sync(key: &str, period: Duration, now: SystemTime) -> Duration {
    until_next_slot(since_epoch(now), period, phase(key, period))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn phases_spread_over_the_period() {
        let period = 15 * SECOND;
        let mut buckets = [0u32; 15];
        for i in 0..3000 {
            let key = format!("5f0c2a1e-0000-4000-8000-{i:012}");
            let offset = phase(&key, period);
            assert!(offset < period);
            buckets[usize::try_from(offset.as_secs()).unwrap()] += 1;
        }
        // 200 expected per second of the period; no second holds more than half again.
        assert!(
            buckets.iter().all(|&n| (100..300).contains(&n)),
            "{buckets:?}"
        );
    }

    #[test]
    fn the_phase_is_stable() {
        assert_eq!(phase("a-uid", 15 * SECOND), phase("a-uid", 15 * SECOND));
        // Pinned: a change of the hash would realign every fleet once, at the upgrade.
        assert_eq!(phase("a-uid", 15 * SECOND).as_millis(), {
            let mut h = fnv::FnvHasher::default();
            h.write(b"a-uid");
            u128::from(h.finish()) % 15_000
        });
    }

    #[test]
    fn on_the_grid_the_next_sync_is_one_period_later() {
        let period = 15 * SECOND;
        let phase = Duration::from_millis(4_200);
        let slot = Duration::from_secs(1_700_000_010) + phase;
        assert_eq!(slot.as_millis() % period.as_millis(), phase.as_millis());
        assert_eq!(until_next_slot(slot, period, phase), period);
    }

    #[test]
    fn off_the_grid_it_goes_back_to_its_slot() {
        let period = 10 * SECOND;
        let phase = 3 * SECOND;
        // 1 s after a slot: the next slot is 9 s away (more than half a period).
        assert_eq!(
            until_next_slot(Duration::from_secs(1_000_004), period, phase),
            9 * SECOND
        );
        // 1 s before a slot: that slot is too close, the one after it is taken.
        assert_eq!(
            until_next_slot(Duration::from_secs(1_000_002), period, phase),
            11 * SECOND
        );
    }

    #[test]
    fn a_restarted_scaler_takes_up_its_own_slot() {
        let period = 10 * SECOND;
        let phase = 3 * SECOND;
        assert_eq!(
            until_slot(Duration::from_secs(1_000_001), period, phase),
            2 * SECOND
        );
        assert_eq!(
            until_slot(Duration::from_secs(1_000_003), period, phase),
            Duration::ZERO
        );
        assert_eq!(
            until_slot(Duration::from_secs(1_000_004), period, phase),
            9 * SECOND
        );
    }

    proptest! {
        #[test]
        fn the_first_slot_is_within_a_period_and_on_the_grid(
            now_ms in 0u64..4_000_000_000_000,
            period_s in 1u64..3_600,
            key in "[a-z0-9-]{1,36}",
        ) {
            let period = Duration::from_secs(period_s);
            let phase = phase(&key, period);
            let now = Duration::from_millis(now_ms);
            let wait = until_slot(now, period, phase);
            prop_assert!(wait < period);
            prop_assert_eq!((now + wait).as_millis() % period.as_millis(), phase.as_millis());
        }

        #[test]
        fn every_sync_lands_on_the_grid_within_half_to_one_and_a_half_periods(
            now_ms in 0u64..4_000_000_000_000,
            period_s in 1u64..3_600,
            key in "[a-z0-9-]{1,36}",
        ) {
            let period = Duration::from_secs(period_s);
            let phase = phase(&key, period);
            let now = Duration::from_millis(now_ms);
            let wait = until_next_slot(now, period, phase);
            prop_assert!(wait.as_millis() >= period.as_millis() / 2);
            prop_assert!(wait < period + period / 2 + Duration::from_millis(1));
            let at = (now + wait).as_millis();
            prop_assert_eq!(at % period.as_millis(), phase.as_millis());
        }
    }
}
