//! Request traces: an arrival rate over time, linear between points.
//!
//! The file format, one point per line (blank lines and `#` comments ignored):
//!
//! ```text
//! # seconds  requests/s  [prompt tokens  output tokens]
//! 0          2           512            128
//! 60         20
//! 120        0
//! ```
//!
//! The rate moves linearly from one point to the next and holds after the last one. The token
//! columns, when given, set the request shape from that point on (default 512 and 128).

use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum TraceError {
    #[error("line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("a trace needs at least one point")]
    Empty,
}

/// The size of a request: tokens it brings and tokens it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            prompt_tokens: 512,
            output_tokens: 128,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    at: f64,
    rate: f64,
    shape: Shape,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    points: Vec<Point>,
}

impl Trace {
    /// Reads the text format described in the module documentation.
    pub fn parse(text: &str) -> Result<Self, TraceError> {
        let mut points: Vec<Point> = Vec::new();
        let mut shape = Shape::default();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let bad = |message: String| TraceError::Line { line, message };
            let fields: Vec<&str> = content.split_whitespace().collect();
            if fields.len() != 2 && fields.len() != 4 {
                return Err(bad(format!(
                    "expected `seconds rate` or `seconds rate prompt_tokens output_tokens`, got {} fields",
                    fields.len()
                )));
            }
            let number = |text: &str, what: &str| -> Result<f64, TraceError> {
                text.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| {
                        bad(format!("{what} must be a finite number >= 0, got {text:?}"))
                    })
            };
            let at = number(fields[0], "seconds")?;
            let rate = number(fields[1], "requests/s")?;
            if let Some(last) = points.last()
                && at <= last.at
            {
                return Err(bad(format!(
                    "seconds must increase: {at} comes after {}",
                    last.at
                )));
            }
            if fields.len() == 4 {
                let tokens = |text: &str, what: &str| -> Result<u32, TraceError> {
                    text.parse::<u32>().ok().filter(|v| *v > 0).ok_or_else(|| {
                        bad(format!("{what} must be a whole number > 0, got {text:?}"))
                    })
                };
                shape = Shape {
                    prompt_tokens: tokens(fields[2], "prompt tokens")?,
                    output_tokens: tokens(fields[3], "output tokens")?,
                };
            }
            points.push(Point { at, rate, shape });
        }
        if points.is_empty() {
            return Err(TraceError::Empty);
        }
        Ok(Self { points })
    }

    /// A named built-in trace, `seconds` long in all.
    pub fn builtin(name: &str, seconds: f64) -> Option<Self> {
        let s = seconds.max(1.0);
        let text = match name {
            // The same load throughout.
            "steady" => format!("0 8\n{s} 8\n"),
            // Night, a morning ramp, a plateau, an evening fall.
            "diurnal" => format!(
                "0 1\n{} 1\n{} 12\n{} 12\n{} 1\n{s} 1\n",
                s * 0.15,
                s * 0.4,
                s * 0.6,
                s * 0.85
            ),
            // Quiet, then ten times the load for a fifth of the time, then quiet again: with
            // the demo's pods, one pod carries the quiet part and the burst needs four.
            "burst" => format!(
                "0 3\n{} 3\n{} 30\n{} 30\n{} 3\n{s} 3\n",
                s * 0.3,
                s * 0.31,
                s * 0.5,
                s * 0.51
            ),
            // Some load, then nothing: room for scale-to-zero.
            "idle" => format!("0 4\n{} 4\n{} 0\n{s} 0\n", s * 0.3, s * 0.31),
            _ => return None,
        };
        Self::parse(&text).ok()
    }

    pub const BUILTINS: [&'static str; 4] = ["steady", "diurnal", "burst", "idle"];

    /// The same trace starting `by` later; its first rate holds until then.
    pub fn delayed(&self, by: Duration) -> Self {
        let by = by.as_secs_f64();
        Self {
            points: self
                .points
                .iter()
                .map(|p| Point {
                    at: p.at + by,
                    ..*p
                })
                .collect(),
        }
    }

    /// Requests per second at `at`.
    pub fn rate(&self, at: Duration) -> f64 {
        self.segment(at).0
    }

    /// The request shape in force at `at`.
    pub fn shape(&self, at: Duration) -> Shape {
        self.segment(at).1
    }

    /// When the last point is reached.
    pub fn length(&self) -> Duration {
        Duration::from_secs_f64(self.points.last().map_or(0.0, |p| p.at))
    }

    fn segment(&self, at: Duration) -> (f64, Shape) {
        let t = at.as_secs_f64();
        let Some(first) = self.points.first() else {
            return (0.0, Shape::default());
        };
        if t <= first.at {
            return (first.rate, first.shape);
        }
        for pair in self.points.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if t < b.at {
                let f = (t - a.at) / (b.at - a.at);
                return (a.rate + (b.rate - a.rate) * f, a.shape);
            }
        }
        self.points
            .last()
            .map_or((0.0, Shape::default()), |p| (p.rate, p.shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn the_rate_is_linear_between_points_and_holds_after_the_last() {
        let trace = Trace::parse("# a ramp\n0 2 100 10\n\n10 12\n20 0 # stop\n").unwrap();
        assert_eq!(trace.rate(secs(0.0)), 2.0);
        assert!((trace.rate(secs(5.0)) - 7.0).abs() < 1e-9);
        assert!((trace.rate(secs(15.0)) - 6.0).abs() < 1e-9);
        assert_eq!(trace.rate(secs(99.0)), 0.0);
        let later = trace.delayed(secs(100.0));
        assert_eq!(later.rate(secs(50.0)), 2.0);
        assert!((later.rate(secs(105.0)) - 7.0).abs() < 1e-9);
        assert_eq!(later.length(), secs(120.0));
        assert_eq!(trace.length(), secs(20.0));
        assert_eq!(
            trace.shape(secs(12.0)),
            Shape {
                prompt_tokens: 100,
                output_tokens: 10
            }
        );
    }

    #[test]
    fn bad_lines_are_named() {
        for (text, fragment) in [
            ("", "at least one point"),
            ("0 1 2\n", "line 1: expected"),
            ("0 1\n0 2\n", "line 2: seconds must increase"),
            ("0 -1\n", "requests/s must be a finite number"),
            ("0 NaN\n", "requests/s must be a finite number"),
            ("0 1 0 5\n", "prompt tokens must be a whole number > 0"),
            ("x 1\n", "seconds must be"),
        ] {
            let error = Trace::parse(text).unwrap_err().to_string();
            assert!(error.contains(fragment), "{text:?}: {error}");
        }
    }

    #[test]
    fn every_builtin_exists_and_fits_its_length() {
        for name in Trace::BUILTINS {
            let trace = Trace::builtin(name, 300.0).unwrap();
            assert_eq!(trace.length(), secs(300.0), "{name}");
        }
        let burst = Trace::builtin("burst", 100.0).unwrap();
        assert_eq!(burst.rate(secs(40.0)), 10.0 * burst.rate(secs(10.0)));
        let idle = Trace::builtin("idle", 100.0).unwrap();
        assert_eq!(idle.rate(secs(50.0)), 0.0);
        assert!(Trace::builtin("nope", 10.0).is_none());
    }
}
