//! Which pods go when the fleet shrinks, and the deletion costs that make the ReplicaSet agree.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::jiff::Timestamp;
use thiserror::Error;

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

/// Why a deletion-cost answer cannot rank the pods. Any pick among several series of one pod
/// would be arbitrary (the first engine's cache, or the last's), so none is made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WarmthError {
    /// A pod has more than one series: one per engine of a data-parallel pod, typically.
    #[error(
        "pod {pod} has {count} series, which differ in {differing}: the query must return one series per pod (aggregate with avg by (namespace, pod) (...))"
    )]
    SeveralSeries {
        pod: String,
        count: usize,
        differing: LabelValues,
    },
    /// No series names a pod, so none can be matched to one.
    #[error(
        "none of its {count} series has a pod label: the query must return one series per pod, labelled pod (and namespace)"
    )]
    NoPodLabel { count: usize },
}

/// The labels in which some series differ, each with the values seen (`-` where a series lacks
/// it), rendered as `engine ("0", "1")`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelValues(pub Vec<(String, Vec<String>)>);

impl fmt::Display for LabelValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (label, values)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            let values: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
            write!(f, "{label} ({})", values.join(", "))?;
        }
        Ok(())
    }
}

/// Each pod's warmth from the series of a deletion-cost answer: one series per pod, named by its
/// `pod` label; a series of another namespace (when it carries one) is not ours. A pod with
/// several series is an error naming the pod and the labels that differ, never a pick.
pub fn warmth_by_pod<'a>(
    series: impl IntoIterator<Item = (&'a BTreeMap<String, String>, f64)>,
    namespace: &str,
) -> Result<BTreeMap<String, f64>, WarmthError> {
    type Answer<'s> = Vec<(&'s BTreeMap<String, String>, f64)>;
    let mut by_pod: BTreeMap<&str, Answer> = BTreeMap::new();
    let mut count = 0;
    for (labels, value) in series {
        count += 1;
        if labels.get("namespace").is_some_and(|ns| ns != namespace) {
            continue;
        }
        if let Some(pod) = labels.get("pod") {
            by_pod.entry(pod).or_default().push((labels, value));
        }
    }
    if by_pod.is_empty() && count > 0 {
        return Err(WarmthError::NoPodLabel { count });
    }
    let mut warmth = BTreeMap::new();
    for (pod, series) in by_pod {
        match series.as_slice() {
            [(_, value)] => {
                warmth.insert(pod.to_owned(), *value);
            }
            _ => {
                return Err(WarmthError::SeveralSeries {
                    pod: pod.to_owned(),
                    count: series.len(),
                    differing: differing(series.iter().map(|(labels, _)| *labels)),
                });
            }
        }
    }
    Ok(warmth)
}

/// The labels whose values are not the same on every one of `series`.
fn differing<'a>(
    series: impl Iterator<Item = &'a BTreeMap<String, String>> + Clone,
) -> LabelValues {
    let names: BTreeSet<&String> = series.clone().flat_map(BTreeMap::keys).collect();
    let mut out = Vec::new();
    for name in names {
        let values: Vec<Option<&String>> = series.clone().map(|s| s.get(name)).collect();
        if values.iter().all(|v| *v == values[0]) {
            continue;
        }
        let seen: BTreeSet<String> = values
            .into_iter()
            .map(|v| v.cloned().unwrap_or_else(|| "-".to_owned()))
            .collect();
        out.push((name.clone(), seen.into_iter().collect()));
    }
    LabelValues(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn one_series_per_pod_gives_each_pod_its_warmth() {
        let a = labels(&[("namespace", "ml"), ("pod", "a")]);
        let b = labels(&[("pod", "b")]);
        let other = labels(&[("namespace", "dev"), ("pod", "a")]);
        let warmth = warmth_by_pod([(&a, 40.0), (&b, 10.0), (&other, 99.0)], "ml").unwrap();
        assert_eq!(
            warmth,
            BTreeMap::from([("a".into(), 40.0), ("b".into(), 10.0)])
        );
        assert_eq!(warmth_by_pod([], "ml").unwrap(), BTreeMap::new());
    }

    #[test]
    fn several_series_of_one_pod_name_the_pod_and_what_differs() {
        let e0 = labels(&[
            ("namespace", "ml"),
            ("pod", "a"),
            ("engine", "0"),
            ("model_name", "m"),
        ]);
        let e1 = labels(&[
            ("namespace", "ml"),
            ("pod", "a"),
            ("engine", "1"),
            ("model_name", "m"),
        ]);
        let b = labels(&[("namespace", "ml"), ("pod", "b"), ("engine", "0")]);
        // In either order: never the first or the last of them.
        for order in [
            [(&e0, 46.7), (&e1, 57.0), (&b, 1.0)],
            [(&e1, 57.0), (&e0, 46.7), (&b, 1.0)],
        ] {
            let err = warmth_by_pod(order, "ml").unwrap_err();
            assert_eq!(
                err,
                WarmthError::SeveralSeries {
                    pod: "a".into(),
                    count: 2,
                    differing: LabelValues(vec![("engine".into(), vec!["0".into(), "1".into()])]),
                }
            );
            assert!(
                err.to_string()
                    .starts_with(r#"pod a has 2 series, which differ in engine ("0", "1"): "#),
                "{err}"
            );
        }
        let with = labels(&[("pod", "a"), ("le", "1")]);
        let without = labels(&[("pod", "a")]);
        let err = warmth_by_pod([(&with, 1.0), (&without, 2.0)], "ml").unwrap_err();
        assert!(
            err.to_string().contains(r#"differ in le ("-", "1")"#),
            "{err}"
        );
    }

    #[test]
    fn an_answer_without_pods_is_an_error_not_an_unknown_for_everyone() {
        let fleet = labels(&[("namespace", "ml")]);
        assert_eq!(
            warmth_by_pod([(&fleet, 0.4)], "ml"),
            Err(WarmthError::NoPodLabel { count: 1 })
        );
    }

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
