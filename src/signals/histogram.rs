//! A histogram read back from Prometheus. `sum by (le) (increase(<name>_bucket[1m]))` answers one
//! series per bucket bound; this turns them into the cumulative `(le, count)` list, ascending,
//! that the capacity estimate reads (`scaling::share_above` checks it is cumulative and ends at
//! +Inf). Anything that is not one series per bound is an error naming the series, never a
//! guess: a query left without `sum by (le)` returns a bound once per pod.

use thiserror::Error;

use super::prometheus::{Series, label_set};

#[derive(Debug, Clone, PartialEq, Error)]
pub enum BucketsError {
    #[error("the histogram query returned no series")]
    Empty,
    #[error("a series has no le label ({labels}): aggregate the buckets with sum by (le) (...)")]
    NoBound { labels: String },
    #[error(
        "a series carries labels besides le ({labels}): aggregate the buckets with sum by (le) (...) so that each bound has one series"
    )]
    OtherLabels { labels: String },
    #[error("le={le:?} is not a number")]
    BadBound { le: String },
    #[error("two series have le={le:?}")]
    DuplicateBound { le: String },
}

/// `(le, observations ≤ le)` in ascending `le` from one series per bound.
pub fn cumulative(series: &[Series]) -> Result<Vec<(f64, f64)>, BucketsError> {
    if series.is_empty() {
        return Err(BucketsError::Empty);
    }
    let mut buckets = Vec::with_capacity(series.len());
    for one in series {
        let Some(le) = one.labels.get("le") else {
            return Err(BucketsError::NoBound {
                labels: label_set(&one.labels),
            });
        };
        if one.labels.len() > 1 {
            return Err(BucketsError::OtherLabels {
                labels: label_set(&one.labels),
            });
        }
        // Prometheus writes the last bound "+Inf"; Rust's parser reads it (and "Inf", "inf").
        let bound: f64 = le
            .parse()
            .ok()
            .filter(|b: &f64| !b.is_nan())
            .ok_or_else(|| BucketsError::BadBound { le: le.clone() })?;
        buckets.push((bound, one.value, le));
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let Some(pair) = buckets.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(BucketsError::DuplicateBound {
            le: pair[1].2.clone(),
        });
    }
    Ok(buckets
        .into_iter()
        .map(|(le, count, _)| (le, count))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(labels: &[(&str, &str)], value: f64) -> Series {
        Series {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            value,
        }
    }

    #[test]
    fn one_series_per_bound_becomes_an_ascending_cumulative_list() {
        // Prometheus orders the series as it likes.
        let answer = [
            series(&[("le", "+Inf")], 100.0),
            series(&[("le", "1.0")], 90.0),
            series(&[("le", "2.5")], 98.0),
            series(&[("le", "0.5")], 60.0),
        ];
        assert_eq!(
            cumulative(&answer).unwrap(),
            vec![
                (0.5, 60.0),
                (1.0, 90.0),
                (2.5, 98.0),
                (f64::INFINITY, 100.0)
            ]
        );
    }

    #[test]
    fn anything_but_one_series_per_bound_is_an_error_naming_it() {
        assert_eq!(cumulative(&[]), Err(BucketsError::Empty));
        let per_pod = [
            series(&[("le", "1.0"), ("pod", "a")], 3.0),
            series(&[("le", "1.0"), ("pod", "b")], 4.0),
        ];
        let error = cumulative(&per_pod).unwrap_err();
        assert!(matches!(error, BucketsError::OtherLabels { .. }));
        assert!(
            error.to_string().contains(r#"{le="1.0", pod="a"}"#),
            "{error}"
        );
        assert!(error.to_string().contains("sum by (le)"), "{error}");
        assert!(matches!(
            cumulative(&[series(&[("pod", "a")], 1.0)]),
            Err(BucketsError::NoBound { .. })
        ));
        assert_eq!(
            cumulative(&[series(&[("le", "fast")], 1.0)]),
            Err(BucketsError::BadBound { le: "fast".into() })
        );
        assert_eq!(
            cumulative(&[series(&[("le", "NaN")], 1.0)]),
            Err(BucketsError::BadBound { le: "NaN".into() })
        );
        assert_eq!(
            cumulative(&[series(&[("le", "1")], 1.0), series(&[("le", "1.0")], 2.0)]),
            Err(BucketsError::DuplicateBound { le: "1.0".into() })
        );
    }
}
