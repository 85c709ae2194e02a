//! The admission rules that matter to the scaling math, repeated in Rust.
//!
//! Admission (the CEL rules in `llmscaler.rs`) is the first line; this is the second, for objects
//! stored before a rule existed or written past an old CRD. Both must accept and refuse exactly
//! the same strings, which the unit tests below pin.

use thiserror::Error;

/// Why a `metrics[].target` string is not a usable per-replica target.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TargetError {
    #[error(
        "target {0:?} is a percentage: write the value on the query's own scale, \"0.8\" for a 0-1 ratio or \"80\" for a 0-100 series"
    )]
    Percentage(String),
    #[error("target {0:?} is not a positive decimal number such as \"0.8\", \"80\" or \"2.5\"")]
    NotADecimal(String),
    #[error("target {0:?} must be greater than zero")]
    NotPositive(String),
}

/// Parses a per-replica target: a plain, finite, positive decimal ("0.8", "80", "2.5", ".5").
pub fn parse_target(raw: &str) -> Result<f64, TargetError> {
    if raw.ends_with('%') {
        return Err(TargetError::Percentage(raw.to_owned()));
    }
    if !is_plain_decimal(raw) {
        return Err(TargetError::NotADecimal(raw.to_owned()));
    }
    let value: f64 = raw
        .parse()
        .map_err(|_| TargetError::NotADecimal(raw.to_owned()))?;
    if !value.is_finite() {
        return Err(TargetError::NotADecimal(raw.to_owned()));
    }
    if value <= 0.0 {
        return Err(TargetError::NotPositive(raw.to_owned()));
    }
    Ok(value)
}

/// `^([0-9]+([.][0-9]*)?|[.][0-9]+)$`, the CEL rule's shape, without a regex engine.
pub(crate) fn is_plain_decimal(raw: &str) -> bool {
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    match raw.split_once('.') {
        None => !raw.is_empty() && all_digits(raw),
        Some((int, frac)) => {
            all_digits(int) && all_digits(frac) && !(int.is_empty() && frac.is_empty())
        }
    }
}

/// Whether `name` is a DNS-1123 label, as `metrics[].name` must be.
pub fn is_dns1123_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let edge_ok = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(edge_ok)
        && bytes.last().is_some_and(edge_ok)
        && bytes.iter().all(|b| edge_ok(b) || *b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_positive_decimals() {
        for (raw, want) in [
            ("0.8", 0.8),
            ("80", 80.0),
            ("2.5", 2.5),
            (".5", 0.5),
            ("5.", 5.0),
            ("007", 7.0),
        ] {
            assert_eq!(parse_target(raw), Ok(want), "{raw}");
        }
    }

    #[test]
    fn refuses_what_admission_refuses() {
        assert!(matches!(
            parse_target("80%"),
            Err(TargetError::Percentage(_))
        ));
        for raw in [
            "", "-1", "NaN", "nan", "inf", "Infinity", "abc", "1e3", " 1", "1 ", "+1", ".",
            "1.2.3", "0x10",
        ] {
            assert!(
                matches!(parse_target(raw), Err(TargetError::NotADecimal(_))),
                "{raw:?}"
            );
        }
        for raw in ["0", "0.0", "00", ".0", "0."] {
            assert!(
                matches!(parse_target(raw), Err(TargetError::NotPositive(_))),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn percentage_error_says_what_to_write() {
        let msg = parse_target("80%").map(|_| ()).unwrap_err().to_string();
        assert!(msg.contains("\"0.8\"") && msg.contains("\"80\""), "{msg}");
    }

    #[test]
    fn dns1123_labels() {
        for ok in ["kv-cache", "a", "q1", &"a".repeat(63)] {
            assert!(is_dns1123_label(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "KV",
            "kv_cache",
            "kv.cache",
            &"a".repeat(64),
        ] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
    }
}
