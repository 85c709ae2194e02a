//! Metric values as Kubernetes quantities ("850m", "12", "100u"), the form the HPA parses.

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
#[error("{0} cannot be written as a quantity")]
pub struct NotAQuantity(pub f64);

/// The shortest exact quantity for `value` among the plain, milli, micro and nano scales;
/// finer detail than a nano is rounded, as Kubernetes itself does.
pub fn format_quantity(value: f64) -> Result<String, NotAQuantity> {
    if !value.is_finite() {
        return Err(NotAQuantity(value));
    }
    if value == 0.0 {
        return Ok("0".to_owned());
    }
    const SCALES: [(f64, &str); 4] = [(1.0, ""), (1e3, "m"), (1e6, "u"), (1e9, "n")];
    // Beyond 2^53 a float holds no fraction anyway; write it in exponent form.
    if value.abs() >= 9.007_199_254_740_992e15 {
        return Ok(exponent_form(value));
    }
    for (factor, suffix) in SCALES {
        let scaled = value * factor;
        let rounded = scaled.round();
        let exact = (scaled - rounded).abs() <= 1e-9 * rounded.abs().max(1.0);
        if rounded != 0.0 && scaled.abs() < 9.007_199_254_740_992e15 && exact {
            return Ok(format!("{}{suffix}", rounded as i64));
        }
    }
    let nanos = (value * 1e9).round();
    if nanos == 0.0 {
        // Smaller than a nano: Kubernetes would round it up to 1n; say so rather than 0.
        return Ok(if value > 0.0 {
            "1n".to_owned()
        } else {
            "-1n".to_owned()
        });
    }
    Ok(format!("{}n", nanos as i64))
}

fn exponent_form(value: f64) -> String {
    let exponent = value.abs().log10().floor() as i32;
    let mantissa = value / 10f64.powi(exponent);
    let mut mantissa = format!("{mantissa:.6}");
    while mantissa.ends_with('0') {
        mantissa.pop();
    }
    if mantissa.ends_with('.') {
        mantissa.pop();
    }
    format!("{mantissa}e{exponent}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_values() {
        for (v, want) in [
            (0.8, "800m"),
            (12.0, "12"),
            (0.0001, "100u"),
            (1e12, "1000000000000"),
            (0.0, "0"),
            (2.5, "2500m"),
            (-0.25, "-250m"),
            (0.123456789, "123456789n"),
            (1e-12, "1n"),
            (1e20, "1e20"),
            (1.5e18, "1.5e18"),
        ] {
            assert_eq!(format_quantity(v).as_deref(), Ok(want), "{v}");
        }
    }

    #[test]
    fn never_nan_or_infinite() {
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(format_quantity(v).is_err());
        }
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// A Kubernetes quantity as the HPA reads one: an optional sign, digits with at most one
    /// point, then a decimal suffix or an exponent.
    fn parse_quantity(text: &str) -> Option<f64> {
        let (number, factor) = if let Some((mantissa, exponent)) = text.split_once(['e', 'E']) {
            (mantissa, 10f64.powi(exponent.parse::<i32>().ok()?))
        } else {
            let digits_end = text
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
                .unwrap_or(text.len());
            let factor = match &text[digits_end..] {
                "" => 1.0,
                "m" => 1e-3,
                "u" => 1e-6,
                "n" => 1e-9,
                "k" => 1e3,
                "M" => 1e6,
                "G" => 1e9,
                "T" => 1e12,
                "P" => 1e15,
                "E" => 1e18,
                _ => return None,
            };
            (&text[..digits_end], factor)
        };
        Some(number.parse::<f64>().ok()? * factor)
    }

    proptest! {
        #[test]
        fn every_finite_value_is_a_quantity_that_reads_back_to_its_precision(value in any::<f64>()) {
            match format_quantity(value) {
                Ok(text) => {
                    prop_assert!(value.is_finite());
                    prop_assert!(text.len() <= 32, "{text} is longer than a quantity needs");
                    let read = parse_quantity(&text);
                    prop_assert!(read.is_some(), "{text} is not a quantity");
                    let read = read.unwrap();
                    // Exact to a nano or to nine significant digits, whichever is coarser; beyond
                    // 2^53 the exponent form keeps seven significant digits.
                    let relative = if value.abs() >= 9.007_199_254_740_992e15 { 1e-6 } else { 1e-9 };
                    let tolerance = 1e-9_f64.max(value.abs() * relative);
                    prop_assert!((read - value).abs() <= tolerance, "{value} written {text} reads {read}");
                }
                Err(NotAQuantity(v)) => prop_assert!(!v.is_finite()),
            }
        }
    }
}
