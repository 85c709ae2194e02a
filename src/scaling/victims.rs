//! Which pods go when the fleet shrinks, and the deletion costs that make the ReplicaSet agree.

use std::cmp::Ordering;

use k8s_openapi::jiff::Timestamp;

/// A pod that could be removed: Ready, not terminating, of the current ReplicaSet.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub name: String,
    pub created: Option<Timestamp>,
    /// How warm its cache is (from deletionCostQuery); `None` when unknown.
    pub warmth: Option<f64>,
}

/// How candidates are ordered, coldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// By measured warmth; pods without a usable measurement count as the warmest of all.
    Measured,
    /// The newest pod is assumed to have the coldest cache.
    NewestFirst,
}

/// The `count` coldest candidates, coldest first.
pub fn pick(candidates: &[Candidate], count: usize, ranking: Ranking) -> Vec<String> {
    let mut ordered: Vec<&Candidate> = candidates.iter().collect();
    ordered.sort_by(|a, b| compare(a, b, ranking));
    ordered
        .into_iter()
        .take(count)
        .map(|c| c.name.clone())
        .collect()
}

fn compare(a: &Candidate, b: &Candidate, ranking: Ranking) -> Ordering {
    let newest_first = || b.created.cmp(&a.created).then_with(|| a.name.cmp(&b.name));
    match ranking {
        Ranking::NewestFirst => newest_first(),
        Ranking::Measured => {
            // A NaN or infinite sample says nothing about the cache: treat it as unknown.
            let known = |c: &Candidate| c.warmth.filter(|w| w.is_finite());
            match (known(a), known(b)) {
                (Some(x), Some(y)) => x.total_cmp(&y).then_with(newest_first),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => newest_first(),
            }
        }
    }
}

/// Deletion costs for `victims` (coldest first), all below every cost a kept pod carries (0 when
/// it carries none), the coldest lowest. Saturates instead of overflowing.
pub fn victim_costs(victims: usize, kept_costs: &[i32]) -> Vec<i32> {
    let floor = kept_costs.iter().copied().min().unwrap_or(0).min(0);
    let n = i32::try_from(victims).unwrap_or(i32::MAX);
    (0..n).map(|i| floor.saturating_sub(n - i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, created: i64, warmth: Option<f64>) -> Candidate {
        Candidate {
            name: name.into(),
            created: Timestamp::from_second(1_800_000_000 + created).ok(),
            warmth,
        }
    }

    #[test]
    fn the_coldest_caches_go_first() {
        let pods = [
            c("a", 0, Some(0.9)),
            c("b", 1, Some(0.2)),
            c("c", 2, Some(0.7)),
            c("d", 3, Some(0.5)),
        ];
        assert_eq!(pick(&pods, 2, Ranking::Measured), ["b", "d"]);
    }

    #[test]
    fn unknown_and_unusable_samples_are_never_the_coldest() {
        let pods = [
            c("nan", 9, Some(f64::NAN)),
            c("inf", 8, Some(f64::NEG_INFINITY)),
            c("none", 7, None),
            c("hot", 0, Some(99.0)),
        ];
        assert_eq!(pick(&pods, 1, Ranking::Measured), ["hot"]);
        // Among the unknown, the newest goes first.
        assert_eq!(
            pick(&pods, 4, Ranking::Measured),
            ["hot", "nan", "inf", "none"]
        );
    }

    #[test]
    fn without_measurements_the_newest_goes_first() {
        let pods = [
            c("old", 0, None),
            c("new", 5, None),
            c("mid", 3, None),
            c("new2", 5, None),
        ];
        assert_eq!(
            pick(&pods, 2, Ranking::NewestFirst),
            ["new", "new2"],
            "ties broken by name"
        );
        assert_eq!(pick(&pods, 10, Ranking::NewestFirst).len(), 4);
    }

    #[test]
    fn victims_cost_less_than_every_kept_pod() {
        assert_eq!(victim_costs(2, &[]), [-2, -1]);
        assert_eq!(victim_costs(2, &[5, 0]), [-2, -1]);
        assert_eq!(victim_costs(3, &[-10, 4]), [-13, -12, -11]);
        assert_eq!(victim_costs(2, &[i32::MIN]), [i32::MIN, i32::MIN]);
        assert!(victim_costs(0, &[1]).is_empty());
    }
}
