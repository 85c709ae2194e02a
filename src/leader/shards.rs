//! Which replica leads which shard, decided from what the Leases show: pure functions, no I/O.
//!
//! A scaler belongs to the shard a stable hash of its uid picks. Each replica decides what to
//! campaign for from the same facts every other replica sees (the live members and who holds
//! each shard), so they agree without talking: a shard held stays with its holder while the
//! holder is within its fair share (⌈N/k⌉ of N shards among k members), a holder above it, or
//! above ⌊N/k⌋ while another member is below, hands shards back, and a free shard goes to the
//! member with the fewest (ties by rendezvous hashing). What is decided here is only what each
//! replica campaigns for; who writes is still decided by each shard's own Lease (see
//! [`super::elector`]), so two replicas that briefly disagree can both want a shard but never
//! both hold it.

use std::hash::Hasher;
use std::time::Duration;

/// The shard of the scaler whose uid is `key`, in `[0, shards)`.
pub fn shard_of(key: &str, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    // FNV-1a, stable across processes and releases (std's hasher promises neither); a prefix
    // keeps the shard independent of the sync phase, which hashes the bare uid.
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(b"shard/");
    hasher.write(key.as_bytes());
    u32::try_from(hasher.finish() % u64::from(shards)).unwrap_or(0)
}

/// How much `member` wants `shard`: the rendezvous score, the same on every replica.
fn score(shard: u32, member: &str) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(member.as_bytes());
    hasher.write(b"/");
    hasher.write(&shard.to_le_bytes());
    // FNV's low bits mix poorly for inputs differing only at the end: finish with a
    // multiply-xorshift (splitmix64's), so scores of one member spread over the shards.
    let mut z = hasher.finish().wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The most shards one of `members` members leads once balanced: ⌈N/k⌉.
pub fn fair_share(shards: usize, members: usize) -> usize {
    shards.div_ceil(members.max(1))
}

/// What this replica's look at a shard's Lease showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// We hold it.
    Mine,
    /// Nobody holds it (absent, released, or expired), for this long as far as we have seen.
    Free { for_: Duration },
    /// Another replica holds it and renews it.
    Held { by: String },
}

/// What to do about one shard this round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Ours and staying: renew it.
    Renew,
    /// Free: take it.
    Acquire,
    /// Ours but one too many: stop writing, then release it.
    HandOver,
    /// Nothing to do.
    Leave,
}

/// This round's act for each shard, for the replica `me` among the live `members` (`me`
/// included; order and repeats do not matter), given what it saw of each shard's Lease.
///
/// - Shards stay with their holder while it is within the fair share: a member joining or
///   leaving moves only the shards it must.
/// - A member above the fair share hands back its excess; while a member is below ⌊N/k⌋ and
///   no shard is free, the members with the most shards hand back one each, as many as are
///   missing (every replica computes the same donors). The shard handed back is the one its
///   holder scores lowest.
/// - Each free shard goes to the member with the fewest shards below the fair share, ties
///   broken by rendezvous score; one left free for a whole lease (its member is gone, or
///   cannot take it) is taken by anyone below the fair share.
pub fn plan(me: &str, members: &[String], looks: &[Look], lease: Duration) -> Vec<Act> {
    let mut set: Vec<&str> = members.iter().map(String::as_str).collect();
    set.push(me);
    set.sort_unstable();
    set.dedup();
    let n = looks.len();
    let cap = fair_share(n, set.len());
    let floor = n / set.len();
    let mut counts: std::collections::BTreeMap<&str, usize> = set.iter().map(|m| (*m, 0)).collect();
    for look in looks {
        let holder = match look {
            Look::Mine => me,
            Look::Held { by } => by.as_str(),
            Look::Free { .. } => continue,
        };
        if let Some(count) = counts.get_mut(holder) {
            *count += 1;
        }
    }
    let mine = counts.get(me).copied().unwrap_or(0);
    let missing: usize = counts.values().map(|c| floor.saturating_sub(*c)).sum();
    let free = looks
        .iter()
        .filter(|l| matches!(l, Look::Free { .. }))
        .count();
    let release = if mine > cap {
        mine - cap
    } else if missing > 0 && free == 0 && mine > floor {
        // The donors: the members above ⌊N/k⌋ with the most shards, by name on a tie.
        let mut donors: Vec<(&str, usize)> = counts
            .iter()
            .filter(|(_, c)| **c > floor)
            .map(|(m, c)| (*m, *c))
            .collect();
        donors.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        usize::from(donors.iter().take(missing).any(|(m, _)| *m == me))
    } else {
        0
    };
    let mut acts: Vec<Act> = looks
        .iter()
        .map(|l| match l {
            Look::Mine => Act::Renew,
            _ => Act::Leave,
        })
        .collect();
    let mut held: Vec<usize> = (0..n).filter(|i| looks[*i] == Look::Mine).collect();
    held.sort_by_key(|i| (score(shard_index(*i), me), *i));
    for i in held.into_iter().take(release) {
        acts[i] = Act::HandOver;
    }
    let mut kept = mine - release.min(mine);

    // Free shards, in order, each to the member with the fewest as counted so far.
    let mut planned = counts.clone();
    for (i, look) in looks.iter().enumerate() {
        let Look::Free { for_ } = look else {
            continue;
        };
        let shard = shard_index(i);
        let chosen = set
            .iter()
            .filter(|m| planned.get(*m).copied().unwrap_or(0) < cap)
            .min_by(|a, b| {
                let (ca, cb) = (planned[*a], planned[*b]);
                ca.cmp(&cb)
                    .then(score(shard, b).cmp(&score(shard, a)))
                    .then(a.cmp(b))
            })
            .copied();
        if let Some(m) = chosen
            && let Some(count) = planned.get_mut(m)
        {
            *count += 1;
        }
        let take = chosen == Some(me) || (*for_ >= lease && kept < cap);
        if take && kept < cap {
            acts[i] = Act::Acquire;
            kept += 1;
        }
    }
    acts
}

fn shard_index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use proptest::prelude::*;

    const LEASE: Duration = Duration::from_secs(15);

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("llmscaleoperator-7d9f-{i}"))
            .collect()
    }

    #[test]
    fn shards_spread_scalers_evenly() {
        let mut buckets = [0u32; 6];
        for i in 0..6000 {
            let uid = format!("5f0c2a1e-0000-4000-8000-{i:012}");
            buckets[usize::try_from(shard_of(&uid, 6)).unwrap()] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (800..1200).contains(&n)),
            "{buckets:?}"
        );
        assert_eq!(shard_of("any", 1), 0);
        assert_eq!(shard_of("any", 0), 0);
    }

    #[test]
    fn the_shard_of_a_uid_is_pinned() {
        // A change of the hash would move every scaler at the upgrade.
        assert_eq!(shard_of("a-uid", 6), {
            let mut h = fnv::FnvHasher::default();
            h.write(b"shard/a-uid");
            u32::try_from(h.finish() % 6).unwrap()
        });
    }

    #[test]
    fn a_lone_replica_takes_every_free_shard_and_one_in_excess_hands_one_back() {
        let free = Look::Free {
            for_: Duration::ZERO,
        };
        let me = "a".to_owned();
        assert_eq!(
            plan(
                &me,
                std::slice::from_ref(&me),
                &[free.clone(), free.clone()],
                LEASE
            ),
            [Act::Acquire, Act::Acquire]
        );
        // Four shards, three members, two each for a and b: c gets one of a's (a sorts first).
        let held = |by: &str| Look::Held { by: by.to_owned() };
        let members = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let looks = [Look::Mine, Look::Mine, held("b"), held("b")];
        let acts = plan("a", &members, &looks, LEASE);
        assert_eq!(acts.iter().filter(|a| **a == Act::HandOver).count(), 1);
        let b_looks = [held("a"), held("a"), Look::Mine, Look::Mine];
        assert!(!plan("b", &members, &b_looks, LEASE).contains(&Act::HandOver));
    }

    /// A round-based model of the replicas and the shard Leases: a Lease is free, or held by one
    /// member; acquiring is compare-and-set, as a write with the resourceVersion read is.
    struct World {
        holders: Vec<Option<String>>,
        /// How long each shard has been free.
        free_for: Vec<Duration>,
    }

    impl World {
        fn new(shards: usize) -> Self {
            Self {
                holders: vec![None; shards],
                // Replicas starting together see every Lease free from their first look.
                free_for: vec![Duration::ZERO; shards],
            }
        }

        fn looks(&self, me: &str) -> Vec<Look> {
            self.holders
                .iter()
                .zip(&self.free_for)
                .map(|(h, f)| match h {
                    Some(h) if h == me => Look::Mine,
                    Some(h) => Look::Held { by: h.clone() },
                    None => Look::Free { for_: *f },
                })
                .collect()
        }

        /// One member's round: plans, then acts on the Leases.
        fn step(&mut self, me: &str, members: &[String]) {
            let acts = plan(me, members, &self.looks(me), LEASE);
            let planned = acts
                .iter()
                .filter(|a| matches!(a, Act::Renew | Act::Acquire))
                .count();
            assert!(
                planned <= fair_share(self.holders.len(), members.len()),
                "{me} plans {planned} shards: {acts:?}"
            );
            for (i, act) in acts.into_iter().enumerate() {
                match act {
                    Act::Acquire if self.holders[i].is_none() => {
                        self.holders[i] = Some(me.to_owned());
                    }
                    Act::HandOver => self.holders[i] = None,
                    _ => {}
                }
            }
        }

        fn tick(&mut self, by: Duration) {
            for (h, f) in self.holders.iter().zip(&mut self.free_for) {
                *f = if h.is_some() { Duration::ZERO } else { *f + by };
            }
        }

        fn led(&self) -> BTreeMap<String, usize> {
            let mut led = BTreeMap::new();
            for h in self.holders.iter().flatten() {
                *led.entry(h.clone()).or_default() += 1;
            }
            led
        }

        fn balanced(&self, members: &[String]) -> bool {
            let n = self.holders.len();
            let k = members.len();
            let led = self.led();
            self.holders.iter().all(Option::is_some)
                && members
                    .iter()
                    .all(|m| (n / k..=n.div_ceil(k)).contains(&led.get(m).copied().unwrap_or(0)))
        }
    }

    /// Rounds in the given orders until balanced; the number of rounds it took.
    fn settle(world: &mut World, members: &[String], orders: &[Vec<usize>]) -> usize {
        for (round, order) in orders.iter().enumerate() {
            if world.balanced(members) {
                return round;
            }
            for &i in order {
                world.step(&members[i % members.len()], members);
            }
            world.tick(Duration::from_secs(2));
        }
        orders.len()
    }

    proptest! {
        #[test]
        fn replicas_settle_on_a_balanced_split_and_take_over_from_one_that_dies(
            shards in 1usize..=32,
            k in 1usize..=6,
            orders in proptest::collection::vec(proptest::collection::vec(0usize..8, 0..8), 12),
        ) {
            let members = names(k);
            let mut world = World::new(shards);
            // Each round every member looks once, in a random order, some more often.
            let orders: Vec<Vec<usize>> = orders
                .into_iter()
                .map(|mut o| { o.extend(0..k); o })
                .collect();
            let rounds = settle(&mut world, &members, &orders);
            prop_assert!(world.balanced(&members), "not balanced after {rounds} rounds: {:?}", world.holders);
            prop_assert!(rounds <= 3, "{rounds} rounds");
            if k > 1 {
                // One dies: once its Leases have gone a lease unrenewed, the others see them free
                // (from then on), and it leaves the members.
                let dead = members[0].clone();
                let before = world.holders.clone();
                for (h, f) in world.holders.iter_mut().zip(&mut world.free_for) {
                    if h.as_deref() == Some(dead.as_str()) {
                        *h = None;
                        *f = Duration::ZERO;
                    }
                }
                let alive = members[1..].to_vec();
                let rounds = settle(&mut world, &alive, &orders);
                prop_assert!(world.balanced(&alive), "not balanced after {rounds} rounds: {:?}", world.holders);
                prop_assert!(rounds <= 3, "{rounds} rounds");
                prop_assert!(!world.led().contains_key(&dead));
                // The survivors lost none of theirs: only the dead one's shards moved.
                for (b, a) in before.iter().zip(&world.holders) {
                    if b.as_deref() != Some(dead.as_str()) {
                        prop_assert_eq!(b, a);
                    }
                }
            }
        }

        #[test]
        fn a_shard_left_free_for_a_lease_is_taken_by_anyone_with_room(
            shards in 1usize..=32,
            k in 2usize..=6,
        ) {
            // A member the others count in never takes what falls to it (it cannot write the
            // shard Leases): after a lease the others take those shards, none stays unled.
            let members = names(k);
            let mut world = World::new(shards);
            for _ in 0..2 {
                for m in &members[1..] {
                    world.step(m, &members);
                }
                world.tick(Duration::from_secs(2));
            }
            world.tick(LEASE);
            for m in &members[1..] {
                world.step(m, &members);
            }
            let cap = fair_share(shards, k);
            let held = world.holders.iter().filter(|h| h.is_some()).count();
            prop_assert_eq!(held, shards.min(cap * (k - 1)), "{:?}", world.holders);
        }

        #[test]
        fn a_member_the_others_do_not_know_yet_takes_nothing_held_then_gets_its_share(
            shards in 1usize..=32,
            k in 2usize..=6,
        ) {
            // The newcomer sees everyone; the others do not see it yet and keep what they hold.
            let members = names(k);
            let mut world = World::new(shards);
            let old = members[1..].to_vec();
            for _ in 0..3 {
                for m in &old {
                    world.step(m, &old);
                }
                world.tick(Duration::from_secs(2));
            }
            prop_assert!(world.balanced(&old));
            world.step(&members[0], &members);
            prop_assert_eq!(world.led().get(&members[0]).copied().unwrap_or(0), 0);
            // Once the others see it, it gets its share.
            let orders = vec![(0..k).collect::<Vec<_>>(); 6];
            let rounds = settle(&mut world, &members, &orders);
            prop_assert!(world.balanced(&members), "after {rounds} rounds: {:?}", world.holders);
        }
    }
}
