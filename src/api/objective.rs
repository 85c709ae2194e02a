//! The spec's objective, in the control law's terms: the rules it is judged and learned by, and
//! the PromQL the operator composes from its selector. The controller reads exactly these
//! queries; docs/concepts.md's objective section and `tests/vllm_conformance.rs` run them against a
//! real Prometheus.

use thiserror::Error;

use super::llmscaler::Objective;
use super::validation::is_plain_decimal;
use crate::scaling::ObjectiveRules;

/// A field that admission should have refused (the object predates the rule).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ObjectiveError {
    #[error("objective.{field} is {value:?}: write a quoted decimal {range}")]
    Decimal {
        field: &'static str,
        value: String,
        range: &'static str,
    },
    #[error(
        "objective.selector {selector:?} is not PromQL label matchers ({why}): write e.g. namespace=\"default\", model_name=\"my-model\""
    )]
    Selector { selector: String, why: String },
    #[error("objective.pendingQuery is not PromQL ({why})")]
    Pending { why: String },
}

/// Requests in flight per pod a fleet starts from without `initialRequestsPerPod`.
pub const DEFAULT_PRIOR: f64 = 4.0;

/// The rules the spec's objective sets.
pub fn rules(objective: &Objective) -> Result<ObjectiveRules, ObjectiveError> {
    let ttft = decimal(
        "ttftSeconds",
        &objective.ttft_seconds,
        |v| v > 0.0 && v <= 3600.0,
        "above 0 and at most 3600, e.g. \"2\"",
    )?;
    let tpot = decimal(
        "tpotSeconds",
        &objective.tpot_seconds,
        |v| v > 0.0 && v <= 60.0,
        "above 0 and at most 60, e.g. \"0.1\"",
    )?;
    let percentile = decimal(
        "percentile",
        &objective.percentile,
        |v| (50.0..100.0).contains(&v),
        "from 50 up to (not including) 100, e.g. \"99\"",
    )?;
    let prior = match &objective.initial_requests_per_pod {
        Some(raw) => decimal(
            "initialRequestsPerPod",
            raw,
            |v| (0.25..=256.0).contains(&v),
            "from 0.25 to 256, e.g. \"4\"",
        )?,
        None => DEFAULT_PRIOR,
    };
    queries(objective)?;
    Ok(ObjectiveRules::new(ttft, tpot, percentile, prior))
}

fn decimal(
    field: &'static str,
    raw: &str,
    in_range: impl Fn(f64) -> bool,
    range: &'static str,
) -> Result<f64, ObjectiveError> {
    is_plain_decimal(raw)
        .then(|| raw.parse::<f64>().ok())
        .flatten()
        .filter(|v| v.is_finite() && in_range(*v))
        .ok_or_else(|| ObjectiveError::Decimal {
            field,
            value: raw.to_owned(),
            range,
        })
}

/// The PromQL the operator reads an objective with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queries {
    /// Requests running and waiting per serving engine (and, with a `pendingQuery`, the requests
    /// waiting in front of the engines spread over them): the signal the fleet is sized on.
    pub in_flight: String,
    /// With a `pendingQuery`, what is read instead while no pod is Ready: the requests waiting in
    /// front of the engines, the demand of the one replica a fleet wakes from.
    pub waking: Option<String>,
    /// Requests running per engine, averaged over the last minute: the load the lesson is about.
    pub load: String,
    /// The last minute's queue times, summed over engines by bucket.
    pub queue: String,
    /// The last minute's times per output token, summed over engines by bucket.
    pub tpot: String,
    /// Requests the engines served a first token to, a second over the last minute: the
    /// demand's own trend.
    pub admitted: String,
}

impl Queries {
    /// The in-flight query to read when `ready` pods serve: at none, the requests waiting in
    /// front of the engines when the spec names them (the engines' series are gone by design).
    pub fn in_flight_at(&self, ready: i32) -> &str {
        match &self.waking {
            Some(waking) if ready <= 0 => waking,
            _ => &self.in_flight,
        }
    }
}

/// The queries an objective's selector composes; a selector PromQL cannot parse is refused.
pub fn queries(objective: &Objective) -> Result<Queries, ObjectiveError> {
    let selector = objective.selector.trim().trim_end_matches(',').trim();
    let running = format!("vllm:num_requests_running{{{selector}}}");
    let refuse = |why: String| ObjectiveError::Selector {
        selector: objective.selector.clone(),
        why,
    };
    // It must stay one series selector: matchers cannot close the braces and add an expression.
    match promql_parser::parser::parse(&running).map_err(refuse)? {
        promql_parser::parser::Expr::VectorSelector(_) => {}
        _ => return Err(refuse("it closes the braces".to_owned())),
    }
    let waiting = format!("vllm:num_requests_waiting{{{selector}}}");
    let buckets = |name: &str| format!("sum by (le) (increase({name}_bucket{{{selector}}}[1m]))");
    // The user's query stays an operand of its own: parsed alone first, so that a query which
    // would only parse once composed (an unbalanced parenthesis closed by ours) is refused.
    let pending = match objective.pending_query.as_deref().map(str::trim) {
        Some(query) => {
            promql_parser::parser::parse(query).map_err(|why| ObjectiveError::Pending { why })?;
            Some(format!("sum({query})"))
        }
        None => None,
    };
    let in_flight = match &pending {
        // Without the engines' series the sum is empty, so is the whole value: pods that run
        // but export nothing are a missing signal, not a fleet carrying only the router's queue.
        Some(pending) => {
            format!("(sum({running}) + sum({waiting}) + {pending}) / count({running})")
        }
        None => format!("(sum({running}) + sum({waiting})) / count({running})"),
    };
    for composed in std::iter::once(&in_flight).chain(&pending) {
        promql_parser::parser::parse(composed).map_err(|why| ObjectiveError::Pending { why })?;
    }
    Ok(Queries {
        in_flight,
        waking: pending,
        load: format!("avg(avg_over_time({running}[1m]))"),
        queue: buckets("vllm:request_queue_time_seconds"),
        tpot: buckets("vllm:request_time_per_output_token_seconds"),
        admitted: format!("sum(rate(vllm:time_to_first_token_seconds_count{{{selector}}}[1m]))"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objective(selector: &str) -> Objective {
        serde_json::from_value(serde_json::json!({ "selector": selector })).unwrap()
    }

    #[test]
    fn the_defaults_are_a_2s_ttft_and_100ms_tpot_for_99_percent_from_4_per_pod() {
        let r = rules(&objective("model_name=\"m\"")).unwrap();
        assert_eq!(r, ObjectiveRules::new(2.0, 0.1, 99.0, 4.0));
    }

    #[test]
    fn the_queries_carry_the_selector_into_every_series() {
        let q = queries(&objective("namespace=\"ns\", model_name=~\"m.*\",")).unwrap();
        assert_eq!(
            q.in_flight,
            "(sum(vllm:num_requests_running{namespace=\"ns\", model_name=~\"m.*\"}) \
             + sum(vllm:num_requests_waiting{namespace=\"ns\", model_name=~\"m.*\"})) \
             / count(vllm:num_requests_running{namespace=\"ns\", model_name=~\"m.*\"})"
        );
        assert_eq!(
            q.queue,
            "sum by (le) (increase(vllm:request_queue_time_seconds_bucket{namespace=\"ns\", model_name=~\"m.*\"}[1m]))"
        );
        assert_eq!(
            q.admitted,
            "sum(rate(vllm:time_to_first_token_seconds_count{namespace=\"ns\", model_name=~\"m.*\"}[1m]))"
        );
        for query in [&q.in_flight, &q.load, &q.queue, &q.tpot, &q.admitted] {
            assert!(promql_parser::parser::parse(query).is_ok(), "{query}");
        }
    }

    #[test]
    fn pending_requests_add_to_the_engines_and_are_read_alone_while_none_is_ready() {
        let mut o = objective("model_name=\"m\"");
        let plain = queries(&o).unwrap();
        assert_eq!(plain.waking, None);
        assert_eq!(plain.in_flight_at(0), plain.in_flight);
        o.pending_query = Some(" sum(router_queue{model=\"m\"}) or vector(0) ".into());
        let q = queries(&o).unwrap();
        let waking = "sum(sum(router_queue{model=\"m\"}) or vector(0))";
        assert_eq!(q.waking.as_deref(), Some(waking));
        assert_eq!(
            q.in_flight,
            format!(
                "(sum(vllm:num_requests_running{{model_name=\"m\"}}) \
                 + sum(vllm:num_requests_waiting{{model_name=\"m\"}}) + {waking}) \
                 / count(vllm:num_requests_running{{model_name=\"m\"}})"
            )
        );
        assert_eq!(q.in_flight_at(0), waking);
        assert_eq!(q.in_flight_at(3), q.in_flight);
        for query in [&q.in_flight, waking] {
            assert!(promql_parser::parser::parse(query).is_ok(), "{query}");
        }
    }

    #[test]
    fn a_pending_query_that_is_not_promql_or_not_a_vector_is_refused() {
        let mut o = objective("model_name=\"m\"");
        // Unbalanced (it would close one of ours), not PromQL, a scalar where a vector is summed.
        for bad in ["router_queue)", "router queue", "1 +", "3"] {
            o.pending_query = Some(bad.into());
            let error = queries(&o).unwrap_err();
            assert!(
                matches!(error, ObjectiveError::Pending { .. }),
                "{bad}: {error:?}"
            );
            assert!(
                error.to_string().contains("objective.pendingQuery"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_selector_that_would_change_the_query_is_refused() {
        for bad in [
            "model_name=\"m\"}) or vector(1000",
            "model_name=m",
            "{model_name=\"m\"}",
            "model_name=\"m\"} or vector(5) or up{job=\"x\"",
        ] {
            assert!(
                matches!(
                    queries(&objective(bad)),
                    Err(ObjectiveError::Selector { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_value_admission_should_have_refused_names_its_field() {
        let mut o = objective("model_name=\"m\"");
        o.percentile = "100".into();
        let message = rules(&o).unwrap_err().to_string();
        assert!(message.contains("objective.percentile"), "{message}");
        o.percentile = "99.9".into();
        o.ttft_seconds = "2s".into();
        let message = rules(&o).unwrap_err().to_string();
        assert!(message.contains("objective.ttftSeconds"), "{message}");
    }
}
