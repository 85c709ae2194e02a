//! How long a pod of the target takes to become useful, learned from its own pods.
//!
//! Each pod that became Ready gives one sample: the seconds from its creation to its Ready
//! transition (image pull, model load, warm-up). The estimate is an exponentially weighted mean
//! of the samples, so it follows a model or node change within a handful of scale-ups while one
//! slow pod moves it little. It is kept in status, so a restarted operator does not start blind.

/// The learned start-up delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Learned {
    pub seconds: f64,
    /// Samples behind the estimate (saturating; only "how sure" is read from it).
    pub samples: u32,
}

/// Weight of each new sample.
const WEIGHT: f64 = 0.25;

/// Samples longer than this (a pod stuck, then fixed by hand) are not a start-up delay.
pub const MAX_STARTUP_SECONDS: f64 = 3600.0;

/// The estimate after `observed` (seconds from creation to Ready, oldest first).
pub fn learn(previous: Option<Learned>, observed: &[f64]) -> Option<Learned> {
    observed
        .iter()
        .copied()
        .filter(|s| s.is_finite() && (0.0..=MAX_STARTUP_SECONDS).contains(s))
        .fold(previous, |estimate, sample| {
            Some(match estimate {
                None => Learned {
                    seconds: sample,
                    samples: 1,
                },
                Some(e) => Learned {
                    seconds: e.seconds + WEIGHT * (sample - e.seconds),
                    samples: e.samples.saturating_add(1),
                },
            })
        })
}

/// The start-up delay to plan with: the spec's when set, else the learned one, else none (and
/// then nothing is looked ahead).
pub fn effective(spec_seconds: Option<i32>, learned: Option<Learned>) -> Option<f64> {
    match spec_seconds {
        Some(s) => Some(f64::from(s.max(0))),
        None => learned.map(|l| l.seconds),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_sample_is_the_estimate_and_later_ones_move_it_a_quarter() {
        let first = learn(None, &[200.0]).unwrap();
        assert_eq!(
            first,
            Learned {
                seconds: 200.0,
                samples: 1
            }
        );
        let next = learn(Some(first), &[100.0]).unwrap();
        assert_eq!(
            next,
            Learned {
                seconds: 175.0,
                samples: 2
            }
        );
    }

    #[test]
    fn it_converges_on_a_changed_delay() {
        let mut estimate = learn(None, &[60.0]);
        for _ in 0..20 {
            estimate = learn(estimate, &[300.0]);
        }
        let seconds = estimate.unwrap().seconds;
        assert!((seconds - 300.0).abs() < 1.0, "{seconds}");
    }

    #[test]
    fn nonsense_samples_are_ignored() {
        assert_eq!(learn(None, &[f64::NAN, -5.0, 1e9]), None);
        let e = Some(Learned {
            seconds: 90.0,
            samples: 3,
        });
        assert_eq!(learn(e, &[f64::INFINITY]), e);
    }

    #[test]
    fn the_spec_wins_over_what_was_learned() {
        let learned = Some(Learned {
            seconds: 90.0,
            samples: 3,
        });
        assert_eq!(effective(Some(240), learned), Some(240.0));
        assert_eq!(effective(None, learned), Some(90.0));
        assert_eq!(effective(None, None), None);
    }
}
