//! Why a query matched no series. "No usable metric" alone sends a user hunting; the usual cause
//! is a label the scrape does not carry (vLLM exports `model_name` and `engine` only: `namespace`,
//! `pod` and `app` come from the scrape). So each selector of the query is asked again with its
//! matchers added one at a time, and the answer names the first matcher that leaves no series,
//! with the values that label takes on the series that are there.
//!
//! Only an empty answer pays for this: at most one query per matcher of each selector, plus one
//! for the values.

use std::collections::BTreeSet;
use std::fmt;

use promql_parser::label::Matcher;
use promql_parser::parser::{self, Expr};
use promql_parser::util::{ExprVisitor, walk_expr};
use reqwest::header::HeaderMap;

use super::prometheus::{self, QueryError};

/// The most selectors of one query that are looked into, and the most label values listed.
const MAX_SELECTORS: usize = 4;
const MAX_VALUES: usize = 5;

/// What the diagnosis found, one entry per selector that matches nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Diagnosis {
    /// The selectors that match nothing, and why.
    Selectors(Vec<Finding>),
    /// Every selector matches series: the expression around them (a join on labels that
    /// differ, a comparison, a filter) removes them all.
    EverySelectorMatches(Vec<String>),
    /// The diagnosis itself could not be made (the query does not parse here, or a probe failed).
    Unknown,
}

/// Why one selector matches no series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// No series has this metric name at all.
    NoMetric { name: String },
    /// Series of `matched` exist, but none of them also satisfies `matcher`.
    NoMatch {
        /// The selector up to the matcher that empties it, e.g. `vllm:x{namespace="a"}`.
        matched: String,
        /// The matcher, as written: `app="vllm"`.
        matcher: String,
        /// Its label.
        label: String,
        /// The values that label takes on the matched series (at most [`MAX_VALUES`]); empty
        /// when none carries the label.
        values: Vec<String>,
        /// Whether more values exist than are listed.
        more: bool,
    },
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Selectors(findings) => {
                for (i, finding) in findings.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{finding}")?;
                }
                Ok(())
            }
            Self::EverySelectorMatches(selectors) => write!(
                f,
                "each of {} matches series, so the expression around them removes them all (a join on labels that differ, a comparison)",
                selectors.join(", ")
            ),
            Self::Unknown => {
                f.write_str("check that its selectors match the labels the scrape sets")
            }
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoMetric { name } => write!(
                f,
                "no series is named {name} (is it scraped, under this name? scraping /metrics/ with a trailing slash stores vllm_* names)"
            ),
            Self::NoMatch {
                matched,
                matcher,
                label,
                values,
                more,
            } => {
                write!(f, "no series of {matched} carries {matcher}")?;
                if values.is_empty() {
                    write!(
                        f,
                        " (none has the label {label}: does the scrape set it? see config/prometheus/)"
                    )
                } else {
                    let listed: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
                    let more = if *more { ", ..." } else { "" };
                    write!(f, " ({label} is {}{more} there)", listed.join(", "))
                }
            }
        }
    }
}

/// One selector of a query: its metric name (if written before the braces) and its matchers in
/// the order written.
#[derive(Debug, Clone, PartialEq)]
pub struct Selector {
    name: Option<String>,
    matchers: Vec<Matcher>,
}

impl Selector {
    /// The selector with its name and the first `n` matchers.
    fn prefix(&self, n: usize) -> String {
        let matchers: Vec<String> = self.matchers[..n].iter().map(ToString::to_string).collect();
        match (&self.name, matchers.is_empty()) {
            (Some(name), true) => name.clone(),
            (Some(name), false) => format!("{name}{{{}}}", matchers.join(", ")),
            (None, _) => format!("{{{}}}", matchers.join(", ")),
        }
    }

    fn whole(&self) -> String {
        self.prefix(self.matchers.len())
    }
}

/// The distinct selectors of `query`, in the order they appear (at most [`MAX_SELECTORS`]);
/// `None` when the query does not parse here. A selector with `or` matchers is left out: its
/// matchers do not form one chain to walk.
pub fn selectors(query: &str) -> Option<Vec<Selector>> {
    struct Collect(Vec<Selector>);
    impl ExprVisitor for Collect {
        type Error = std::convert::Infallible;
        fn pre_visit(&mut self, expr: &Expr) -> Result<bool, Self::Error> {
            let vs = match expr {
                Expr::VectorSelector(vs) => vs,
                Expr::MatrixSelector(ms) => &ms.vs,
                _ => return Ok(true),
            };
            if !vs.matchers.or_matchers.is_empty() {
                return Ok(true);
            }
            // The parser keeps the metric name both as `name` and as a `__name__` matcher.
            let matchers: Vec<Matcher> = vs
                .matchers
                .matchers
                .iter()
                .filter(|m| !(vs.name.is_some() && m.name == "__name__"))
                .cloned()
                .collect();
            let selector = Selector {
                name: vs.name.clone(),
                matchers,
            };
            if !self.0.contains(&selector) {
                self.0.push(selector);
            }
            Ok(true)
        }
    }
    let expr = parser::parse(query).ok()?;
    let mut collect = Collect(Vec::new());
    let Ok(_) = walk_expr(&mut collect, &expr);
    collect.0.truncate(MAX_SELECTORS);
    Some(collect.0)
}

/// Asks Prometheus why `query` matched nothing.
pub async fn diagnose(
    client: &reqwest::Client,
    server: &str,
    headers: &HeaderMap,
    query: &str,
) -> Diagnosis {
    let Some(selectors) = selectors(query) else {
        return Diagnosis::Unknown;
    };
    let probe = |promql: String| async move {
        prometheus::query_vector(client, server, headers, &promql).await
    };
    let mut findings = Vec::new();
    for selector in &selectors {
        match find(selector, probe).await {
            Ok(Some(finding)) => findings.push(finding),
            Ok(None) => {}
            Err(_) => return Diagnosis::Unknown,
        }
    }
    if findings.is_empty() {
        Diagnosis::EverySelectorMatches(selectors.iter().map(Selector::whole).collect())
    } else {
        Diagnosis::Selectors(findings)
    }
}

/// Walks one selector's matchers; `None` when the whole selector matches series.
async fn find<F, Fut>(selector: &Selector, probe: F) -> Result<Option<Finding>, QueryError>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<Vec<prometheus::Series>, QueryError>>,
{
    let matches = |n: usize| {
        let promql = format!("count({})", selector.prefix(n));
        let probe = &probe;
        async move { Ok::<bool, QueryError>(!probe(promql).await?.is_empty()) }
    };
    if matches(selector.matchers.len()).await? {
        return Ok(None);
    }
    let start = match &selector.name {
        Some(name) => {
            if !matches(0).await? {
                return Ok(Some(Finding::NoMetric { name: name.clone() }));
            }
            0
        }
        // A selector without a name has at least one matcher: the first alone may match nothing.
        None => {
            if !matches(1).await? {
                let first = &selector.matchers[0];
                return Ok(Some(Finding::NoMatch {
                    matched: "{}".to_owned(),
                    matcher: first.to_string(),
                    label: first.name.clone(),
                    values: Vec::new(),
                    more: false,
                }));
            }
            1
        }
    };
    for n in start + 1..=selector.matchers.len() {
        if matches(n).await? {
            continue;
        }
        let matcher = &selector.matchers[n - 1];
        let matched = selector.prefix(n - 1);
        let label = &matcher.name;
        let values: BTreeSet<String> = probe(format!("count by ({label}) ({matched})"))
            .await?
            .into_iter()
            .filter_map(|s| s.labels.get(label).cloned())
            .collect();
        let more = values.len() > MAX_VALUES;
        return Ok(Some(Finding::NoMatch {
            matched,
            matcher: matcher.to_string(),
            label: label.clone(),
            values: values.into_iter().take(MAX_VALUES).collect(),
            more,
        }));
    }
    // Each prefix matched but the whole did not: only a race with the scrape gets here.
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use promql_parser::label::MatchOp;

    use super::*;
    use crate::signals::prometheus::Series;

    fn names(query: &str) -> Vec<String> {
        selectors(query)
            .unwrap()
            .iter()
            .map(Selector::whole)
            .collect()
    }

    #[test]
    fn every_selector_of_a_query_once_in_order() {
        assert_eq!(
            names(
                r#"sum(vllm:num_requests_running{namespace="prod", app="x"} + vllm:num_requests_waiting{namespace="prod", app="x"}) / sum(vllm:num_requests_running{namespace="prod", app="x"})"#
            ),
            [
                r#"vllm:num_requests_running{namespace="prod", app="x"}"#,
                r#"vllm:num_requests_waiting{namespace="prod", app="x"}"#,
            ]
        );
        assert_eq!(
            names(r#"avg(avg_over_time(vllm:kv_cache_usage_perc{app=~"a|b"}[2m]))"#),
            [r#"vllm:kv_cache_usage_perc{app=~"a|b"}"#]
        );
        assert_eq!(
            names(r#"{__name__="up", job!="x"}"#),
            [r#"{__name__="up", job!="x"}"#]
        );
        assert_eq!(names("vector(0)"), Vec::<String>::new());
        assert!(selectors("sum(").is_none());
    }

    /// A fake Prometheus over a fixed set of series that understands `count(SEL)` and
    /// `count by (L) (SEL)` for equality matchers: enough to drive the walk.
    struct Fake {
        series: Vec<BTreeMap<String, String>>,
        asked: RefCell<Vec<String>>,
    }

    impl Fake {
        fn new(series: &[&[(&str, &str)]]) -> Self {
            Self {
                series: series
                    .iter()
                    .map(|s| {
                        s.iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect()
                    })
                    .collect(),
                asked: RefCell::new(Vec::new()),
            }
        }

        fn answer(&self, promql: &str) -> Vec<Series> {
            self.asked.borrow_mut().push(promql.to_owned());
            let (by, selector) = match promql.strip_prefix("count by (") {
                Some(rest) => {
                    let (label, sel) = rest.split_once(") (").unwrap();
                    (Some(label.to_owned()), sel.strip_suffix(')').unwrap())
                }
                None => (
                    None,
                    promql
                        .strip_prefix("count(")
                        .unwrap()
                        .strip_suffix(')')
                        .unwrap(),
                ),
            };
            let selector = &selectors(selector).unwrap()[0];
            let hits: Vec<&BTreeMap<String, String>> = self
                .series
                .iter()
                .filter(|s| {
                    selector
                        .name
                        .as_ref()
                        .is_none_or(|n| s.get("__name__") == Some(n))
                        && selector.matchers.iter().all(|m| {
                            assert!(matches!(m.op, MatchOp::Equal), "the fake knows only =");
                            s.get(&m.name).map(String::as_str).unwrap_or("") == m.value
                        })
                })
                .collect();
            match by {
                None if hits.is_empty() => Vec::new(),
                None => vec![Series {
                    labels: BTreeMap::new(),
                    value: hits.len() as f64,
                }],
                Some(label) => {
                    let groups: BTreeSet<Option<&String>> =
                        hits.iter().map(|s| s.get(&label)).collect();
                    groups
                        .into_iter()
                        .map(|v| Series {
                            labels: v
                                .map(|v| BTreeMap::from([(label.clone(), v.clone())]))
                                .unwrap_or_default(),
                            value: 1.0,
                        })
                        .collect()
                }
            }
        }

        fn find(&self, selector: &str) -> Option<Finding> {
            let selector = selectors(selector).unwrap().remove(0);
            let probe = |promql: String| {
                let answer = self.answer(&promql);
                async move { Ok::<_, QueryError>(answer) }
            };
            futures::executor::block_on(find(&selector, probe)).unwrap()
        }
    }

    const KV: &str = "vllm:kv_cache_usage_perc";

    fn scraped() -> Fake {
        // What a default ServiceMonitor stores: namespace and pod, no app.
        Fake::new(&[
            &[
                ("__name__", KV),
                ("namespace", "prod"),
                ("pod", "a"),
                ("engine", "0"),
            ],
            &[
                ("__name__", KV),
                ("namespace", "prod"),
                ("pod", "b"),
                ("engine", "0"),
            ],
            &[
                ("__name__", KV),
                ("namespace", "dev"),
                ("pod", "c"),
                ("engine", "0"),
            ],
        ])
    }

    #[test]
    fn a_label_the_scrape_does_not_set_is_named_as_missing() {
        let fake = scraped();
        let finding = fake.find(r#"vllm:kv_cache_usage_perc{namespace="prod", app="vllm"}"#);
        assert_eq!(
            finding,
            Some(Finding::NoMatch {
                matched: r#"vllm:kv_cache_usage_perc{namespace="prod"}"#.to_owned(),
                matcher: r#"app="vllm""#.to_owned(),
                label: "app".to_owned(),
                values: Vec::new(),
                more: false,
            })
        );
        assert_eq!(
            finding.unwrap().to_string(),
            r#"no series of vllm:kv_cache_usage_perc{namespace="prod"} carries app="vllm" (none has the label app: does the scrape set it? see config/prometheus/)"#
        );
    }

    #[test]
    fn a_wrong_value_lists_the_values_there_are() {
        let fake = scraped();
        let finding = fake
            .find(r#"vllm:kv_cache_usage_perc{namespace="staging"}"#)
            .unwrap();
        assert_eq!(
            finding.to_string(),
            r#"no series of vllm:kv_cache_usage_perc carries namespace="staging" (namespace is "dev", "prod" there)"#
        );
    }

    #[test]
    fn a_missing_metric_is_named_and_nothing_more_is_asked() {
        let fake = scraped();
        let finding = fake.find(r#"vllm:gpu_cache_usage_perc{namespace="prod"}"#);
        assert_eq!(
            finding,
            Some(Finding::NoMetric {
                name: "vllm:gpu_cache_usage_perc".to_owned()
            })
        );
        assert_eq!(fake.asked.borrow().len(), 2, "{:?}", fake.asked.borrow());
    }

    #[test]
    fn a_selector_that_matches_costs_one_query_and_finds_nothing() {
        let fake = scraped();
        assert_eq!(
            fake.find(r#"vllm:kv_cache_usage_perc{namespace="prod", pod="a"}"#),
            None
        );
        assert_eq!(fake.asked.borrow().len(), 1);
    }

    #[test]
    fn a_selector_without_a_name_walks_from_its_first_matcher() {
        let fake = scraped();
        let finding = fake.find(r#"{namespace="prod", pod="z"}"#).unwrap();
        assert_eq!(
            finding.to_string(),
            r#"no series of {namespace="prod"} carries pod="z" (pod is "a", "b" there)"#
        );
    }

    #[test]
    fn many_values_are_cut_short() {
        let series: Vec<Vec<(&str, &str)>> = ["p1", "p2", "p3", "p4", "p5", "p6", "p7"]
            .iter()
            .map(|p| vec![("__name__", KV), ("pod", *p)])
            .collect();
        let refs: Vec<&[(&str, &str)]> = series.iter().map(Vec::as_slice).collect();
        let fake = Fake::new(&refs);
        let text = fake
            .find(r#"vllm:kv_cache_usage_perc{pod="x"}"#)
            .unwrap()
            .to_string();
        assert!(
            text.ends_with(r#"(pod is "p1", "p2", "p3", "p4", "p5", ... there)"#),
            "{text}"
        );
    }

    #[test]
    fn diagnoses_join_into_one_sentence() {
        let d = Diagnosis::Selectors(vec![
            Finding::NoMetric { name: "a".into() },
            Finding::NoMetric { name: "b".into() },
        ]);
        assert!(
            d.to_string().contains("named a (") && d.to_string().contains("; no series is named b")
        );
        let every = Diagnosis::EverySelectorMatches(vec!["x".into(), "y".into()]);
        assert!(every.to_string().starts_with("each of x, y matches series"));
    }
}
