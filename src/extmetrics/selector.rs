//! Label selectors as the aggregator forwards them: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
//! `a notin (x)`, `a`, `!a`, joined by commas.

use std::collections::BTreeMap;

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    pub selector: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let fail = |reason: &str| SelectorError {
            selector: text.to_owned(),
            reason: reason.to_owned(),
        };
        let mut requirements = Vec::new();
        for part in split_top_level(text).map_err(|r| fail(&r))? {
            let part = part.trim();
            if part.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(fail("empty requirement"));
            }
            requirements.push(parse_requirement(part).map_err(|r| fail(&r))?);
        }
        Ok(Self(requirements))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key).map(String::as_str))
    }

    /// Like [`Self::matches`], reading labels through `get` so a caller need not build a map.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|l| !vs.iter().any(|v| v == l)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".to_owned());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::NotExists(key_of(key)?));
    }
    for (op, build) in [
        (
            "==",
            Requirement::Equals as fn(String, String) -> Requirement,
        ),
        ("!=", Requirement::NotEquals),
        ("=", Requirement::Equals),
    ] {
        if let Some((key, value)) = part.split_once(op) {
            return Ok(build(key_of(key)?, value_of(value)?));
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words.as_slice() {
        let rest = rest.trim_start();
        let (negated, list) = if let Some(list) = rest.strip_prefix("notin") {
            (true, list)
        } else if let Some(list) = rest.strip_prefix("in") {
            (false, list)
        } else {
            return Err(format!("unknown operator in {part:?}"));
        };
        let list = list.trim();
        let inner = list
            .strip_prefix('(')
            .and_then(|l| l.strip_suffix(')'))
            .ok_or_else(|| format!("expected a parenthesised list in {part:?}"))?;
        let values = inner
            .split(',')
            .map(value_of)
            .collect::<Result<Vec<_>, _>>()?;
        let key = key_of(key)?;
        return Ok(if negated {
            Requirement::NotIn(key, values)
        } else {
            Requirement::In(key, values)
        });
    }
    Ok(Requirement::Exists(key_of(part)?))
}

fn key_of(key: &str) -> Result<String, String> {
    let key = key.trim();
    let valid = !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    valid
        .then(|| key.to_owned())
        .ok_or_else(|| format!("invalid label key {key:?}"))
}

fn value_of(value: &str) -> Result<String, String> {
    let value = value.trim();
    let valid = value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    valid
        .then(|| value.to_owned())
        .ok_or_else(|| format!("invalid label value {value:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_whole_grammar() {
        let l = labels(&[("llmscaler", "hot"), ("metric", "kv-cache")]);
        for (selector, want) in [
            ("", true),
            ("llmscaler=hot", true),
            ("llmscaler==hot", true),
            ("llmscaler!=hot", false),
            ("llmscaler=cold", false),
            ("llmscaler in (hot, cold)", true),
            ("llmscaler in (cold)", false),
            ("llmscaler notin (cold)", true),
            ("llmscaler notin (hot,cold)", false),
            ("metric", true),
            ("!metric", false),
            ("!absent", true),
            ("absent", false),
            ("llmscaler=hot,metric=kv-cache", true),
            ("llmscaler=hot, metric in (a,kv-cache), !absent", true),
            ("llmscaler=hot,metric=other", false),
            ("absent notin (x)", true),
        ] {
            assert_eq!(
                LabelSelector::parse(selector).unwrap().matches(&l),
                want,
                "{selector}"
            );
        }
    }

    #[test]
    fn malformed_selectors_are_errors() {
        for bad in [
            "a in (x",
            "a in x",
            "a=b)",
            "a=b,,c=d",
            "a between (x)",
            "=b",
            "a=b c",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn arbitrary_text_never_panics_and_an_error_names_the_selector(text in "\\PC{0,64}") {
            match LabelSelector::parse(&text) {
                Ok(selector) => {
                    // Whatever parsed can be evaluated against any label set.
                    let labels = BTreeMap::from([("llmscaler".to_owned(), "a".to_owned())]);
                    let _ = selector.matches(&labels);
                }
                Err(e) => prop_assert_eq!(e.selector, text),
            }
        }

        #[test]
        fn grammar_shaped_text_never_panics(
            parts in proptest::collection::vec(
                prop_oneof![
                    "[a-z]{1,5}",
                    "!?[a-z]{1,5}",
                    "[a-z]{1,5} ?(=|==|!=) ?[a-z0-9]{0,5}",
                    "[a-z]{1,5} (in|notin) \\(([a-z]{0,3}(, ?)?){0,3}\\)?",
                    "[(),=! ]{0,4}",
                ],
                0..5,
            )
        ) {
            let text = parts.join(",");
            if let Ok(selector) = LabelSelector::parse(&text) {
                let _ = selector.matches(&BTreeMap::new());
            }
        }
    }
}
