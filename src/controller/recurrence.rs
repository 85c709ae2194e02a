//! The recurrence's memory as status keeps it: the load of each stretch of the period, so a
//! restart or a new leader keeps the days it has seen. Only finished stretches are written: the
//! one under way changes at every sync, and a status write per sync per scaler is not worth the
//! few minutes of one stretch a restart would lose (the process keeps it meanwhile). Written by
//! the operator alone; a value it cannot read back (an edit by hand) counts as a stretch not
//! measured, never as zero.

use k8s_openapi::jiff::Timestamp;

use crate::api::RecurrenceStatus;
use crate::scaling::{Profile, RECURRING_BINS, Recurrence, Running, recurring_position};

/// Decimals kept of a stretch's load.
const DECIMALS: i32 = 3;

fn number(value: f64) -> String {
    let scale = 10f64.powi(DECIMALS);
    let rounded = (value * scale).round() / scale;
    format!("{rounded}")
}

fn load(text: &str) -> Option<f64> {
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// The status form of `profile`, the load of the target `target_uid`, at `now` (whose stretch is
/// left out, as under way); none before anything was measured.
pub fn render(profile: &Profile, target_uid: &str, now: Timestamp) -> Option<RecurrenceStatus> {
    if profile.current.is_empty() {
        return None;
    }
    let rules = Recurrence {
        period_seconds: profile.period_seconds,
        days: 1,
    };
    let under_way = recurring_position(rules, now)
        .filter(|(index, _)| *index == profile.index)
        .map(|(_, bin)| bin);
    let current = profile
        .current
        .iter()
        .enumerate()
        .map(|(bin, r)| {
            if r.count == 0 || under_way == Some(bin) {
                "-".to_owned()
            } else {
                format!("{}/{}", number(r.sum / f64::from(r.count)), r.count)
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    let before = profile
        .past
        .iter()
        .map(|day| {
            day.iter()
                .map(|v| v.map_or_else(|| "-".to_owned(), number))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    Some(RecurrenceStatus {
        target_uid: target_uid.to_owned(),
        period_seconds: profile.period_seconds,
        period: profile.index,
        current,
        before,
    })
}

/// The profile status holds for the target `target_uid`; an empty one (which starts afresh)
/// when there is none, it is another target's, or its stretches do not number
/// [`RECURRING_BINS`].
pub fn stored(status: Option<&RecurrenceStatus>, target_uid: &str) -> Profile {
    let Some(status) = status.filter(|s| s.target_uid == target_uid) else {
        return Profile::default();
    };
    let current: Vec<Running> = status
        .current
        .split_whitespace()
        .map(|cell| {
            cell.split_once('/')
                .and_then(|(mean, count)| Some((load(mean)?, count.parse::<u32>().ok()?)))
                .map_or_else(Running::default, |(mean, count)| Running {
                    sum: mean * f64::from(count),
                    count,
                })
        })
        .collect();
    let past: Vec<Vec<Option<f64>>> = status
        .before
        .iter()
        .map(|day| day.split_whitespace().map(load).collect())
        .collect();
    if current.len() != RECURRING_BINS || past.iter().any(|d| d.len() != RECURRING_BINS) {
        return Profile::default();
    }
    Profile {
        period_seconds: status.period_seconds,
        index: status.period,
        current,
        past,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::{Recurrence, record};
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn a_profile_survives_status() {
        let rules = Recurrence {
            period_seconds: 3600,
            days: 2,
        };
        let mut p = Profile::default();
        for i in 0..700 {
            let at = Timestamp::from_second(1_800_000_000 + i * 15).unwrap();
            p = record(&p, rules, at, f64::from((i % 97) as i32) / 7.0);
        }
        // Rendered at the start of the next period: every stretch of this one is finished.
        let next = Timestamp::from_second(1_800_000_000 + 3 * 3600).unwrap();
        let status = render(&p, "t", next).unwrap();
        assert_eq!(status.before.len(), 2);
        let back = stored(Some(&status), "t");
        assert_eq!(stored(Some(&status), "another"), Profile::default());
        assert_eq!(back.index, p.index);
        assert_eq!(back.past.len(), 2);
        for (a, b) in back.past.iter().flatten().zip(p.past.iter().flatten()) {
            match (a, b) {
                (Some(a), Some(b)) => assert!((a - b).abs() < 1e-3, "{a} vs {b}"),
                (a, b) => assert_eq!(a.is_some(), b.is_some()),
            }
        }
        for (a, b) in back.current.iter().zip(&p.current) {
            assert_eq!(a.count, b.count);
            assert!((a.sum - b.sum).abs() < 1e-3 * f64::from(b.count.max(1)));
        }
        // Written again, it is the same text: a sync with nothing new writes nothing new.
        assert_eq!(render(&back, "t", next), Some(status));
        // Rendered within the period, the stretch under way is left out.
        let within = Timestamp::from_second(1_800_000_000 + 7600).unwrap();
        let partial = render(&p, "t", within).unwrap();
        let cells: Vec<&str> = partial.current.split(' ').collect();
        assert_eq!(cells[(7600 - 7200) * 96 / 3600], "-");
        assert_ne!(partial.current, render(&p, "t", next).unwrap().current);
    }

    #[test]
    fn what_cannot_be_read_back_is_unmeasured_or_starts_afresh() {
        let cells = |c: &str| vec![c; RECURRING_BINS].join(" ");
        let mut status = RecurrenceStatus {
            target_uid: "t".into(),
            period_seconds: 86_400,
            period: 20_000,
            current: cells("-"),
            before: vec![cells("2.5")],
        };
        status.before[0] = status.before[0].replacen("2.5", "x", 1);
        let p = stored(Some(&status), "t");
        assert_eq!(p.past[0][0], None);
        assert_eq!(p.past[0][1], Some(2.5));
        status.current = cells("-") + " 1/1";
        assert_eq!(stored(Some(&status), "t"), Profile::default());
    }
}
