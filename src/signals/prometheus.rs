//! Instant PromQL queries against `{serverAddress}/api/v1/query`.
//!
//! A query yields one number or a reason why it cannot: the controller skips a metric with a
//! reason and never reads a failure as zero. NaN and infinities are passed through as values; the
//! pure core decides they are unusable, so that rule lives in one place.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use reqwest::header::HeaderMap;
use serde::Deserialize;
use thiserror::Error;

use super::http::{self, HttpError};

#[derive(Debug, Error)]
pub enum QueryError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("Prometheus rejected the query ({error_type}): {error}")]
    Rejected { error_type: String, error: String },
    #[error("Prometheus answered HTTP {status} without an error body")]
    Status { status: u16 },
    #[error("the Prometheus response is not valid JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("cannot decode the Prometheus response: {0}")]
    Decode(serde_json::Error),
    #[error("cannot decode the Prometheus response: a success response without data")]
    NoData,
    #[error("the query returned no series (an empty vector)")]
    Empty,
    #[error(
        "the query returned {count} series ({first}, {second}, ...) but must return one: aggregate them with avg(...) or sum(...)"
    )]
    MultipleSeries {
        count: usize,
        first: String,
        second: String,
    },
    #[error(
        "the query returned a {0} result; only an instant vector with one series or a scalar is a value"
    )]
    UnsupportedResult(String),
    #[error("sample value {0:?} is not a number")]
    BadValue(String),
}

/// One series of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Runs `query` and returns its single value.
pub async fn query_value(
    client: &reqwest::Client,
    server: &str,
    headers: &HeaderMap,
    query: &str,
) -> Result<f64, QueryError> {
    let (status, body) = fetch(client, server, headers, query).await?;
    single_value(status.as_u16(), &body)
}

/// Runs `query` and returns every series of its instant vector (for per-pod queries, and the
/// probes of `no_series`).
pub async fn query_vector(
    client: &reqwest::Client,
    server: &str,
    headers: &HeaderMap,
    query: &str,
) -> Result<Vec<Series>, QueryError> {
    let (status, body) = fetch(client, server, headers, query).await?;
    vector(status.as_u16(), &body)
}

async fn fetch(
    client: &reqwest::Client,
    server: &str,
    headers: &HeaderMap,
    query: &str,
) -> Result<(reqwest::StatusCode, Vec<u8>), QueryError> {
    let url = format!("{}/api/v1/query", server.trim_end_matches('/'));
    let request = client
        .get(&url)
        .headers(headers.clone())
        .query(&[("query", query)]);
    Ok(http::send(request, &url).await?)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct RawSeries {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

fn data(status: u16, body: &[u8]) -> Result<Data, QueryError> {
    let envelope: Envelope = match serde_json::from_slice(body) {
        Ok(envelope) => envelope,
        Err(_) if status != 200 => return Err(QueryError::Status { status }),
        Err(e) if e.is_syntax() || e.is_eof() => return Err(QueryError::NotJson(e)),
        Err(e) => return Err(QueryError::Decode(e)),
    };
    if envelope.status != "success" {
        return Err(QueryError::Rejected {
            error_type: envelope.error_type.unwrap_or_else(|| "unknown".to_owned()),
            error: envelope.error.unwrap_or_default(),
        });
    }
    if status != 200 {
        return Err(QueryError::Status { status });
    }
    envelope.data.ok_or(QueryError::NoData)
}

fn sample(raw: &str) -> Result<f64, QueryError> {
    // Prometheus writes "NaN", "+Inf" and "-Inf"; Rust parses all three.
    raw.parse::<f64>()
        .map_err(|_| QueryError::BadValue(raw.to_owned()))
}

fn series_list(data: Data) -> Result<Vec<Series>, QueryError> {
    let raw: Vec<RawSeries> = serde_json::from_value(data.result).map_err(QueryError::Decode)?;
    raw.into_iter()
        .map(|s| {
            Ok(Series {
                labels: s.metric,
                value: sample(&s.value.1)?,
            })
        })
        .collect()
}

/// The single value of a response: a scalar, or a vector with exactly one series.
pub fn single_value(status: u16, body: &[u8]) -> Result<f64, QueryError> {
    let data = data(status, body)?;
    match data.result_type.as_str() {
        "scalar" => {
            let (_, value): (f64, String) =
                serde_json::from_value(data.result).map_err(QueryError::Decode)?;
            sample(&value)
        }
        "vector" => {
            let series = series_list(data)?;
            match series.as_slice() {
                [] => Err(QueryError::Empty),
                [one] => Ok(one.value),
                [first, second, ..] => Err(QueryError::MultipleSeries {
                    count: series.len(),
                    first: label_set(&first.labels),
                    second: label_set(&second.labels),
                }),
            }
        }
        other => Err(QueryError::UnsupportedResult(other.to_owned())),
    }
}

/// Every series of an instant-vector response.
pub fn vector(status: u16, body: &[u8]) -> Result<Vec<Series>, QueryError> {
    let data = data(status, body)?;
    match data.result_type.as_str() {
        "vector" => series_list(data),
        other => Err(QueryError::UnsupportedResult(other.to_owned())),
    }
}

/// `{a="1", b="2"}`, the way PromQL writes a label set.
pub(crate) fn label_set(labels: &BTreeMap<String, String>) -> String {
    let mut out = String::from("{");
    for (i, (name, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{name}={value:?}");
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector_body(series: &[(&str, &str)]) -> Vec<u8> {
        let result: Vec<_> = series
            .iter()
            .map(|(pod, v)| serde_json::json!({"metric": {"pod": pod}, "value": [1_700_000_000.5, v]}))
            .collect();
        serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": result}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn one_series_and_scalars_are_values() {
        assert_eq!(
            single_value(200, &vector_body(&[("a", "0.75")])).unwrap(),
            0.75
        );
        let scalar =
            br#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"42"]}}"#;
        assert_eq!(single_value(200, scalar).unwrap(), 42.0);
        let no_labels = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"3"]}]}}"#;
        assert_eq!(single_value(200, no_labels).unwrap(), 3.0);
    }

    #[test]
    fn nan_and_infinities_are_passed_through_for_the_core_to_skip() {
        assert!(
            single_value(200, &vector_body(&[("a", "NaN")]))
                .unwrap()
                .is_nan()
        );
        assert_eq!(
            single_value(200, &vector_body(&[("a", "+Inf")])).unwrap(),
            f64::INFINITY
        );
        assert_eq!(
            single_value(200, &vector_body(&[("a", "-Inf")])).unwrap(),
            f64::NEG_INFINITY
        );
    }

    #[test]
    fn empty_and_multi_series_results_are_errors() {
        assert!(matches!(
            single_value(200, &vector_body(&[])),
            Err(QueryError::Empty)
        ));
        let err =
            single_value(200, &vector_body(&[("a", "1"), ("b", "2"), ("c", "3")])).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("3 series"), "{msg}");
        assert!(
            msg.contains(r#"{pod="a"}"#) && msg.contains(r#"{pod="b"}"#),
            "{msg}"
        );
        assert!(msg.contains("avg(...) or sum(...)"), "{msg}");
    }

    #[test]
    fn matrix_and_string_results_are_refused() {
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(
            matches!(single_value(200, matrix), Err(QueryError::UnsupportedResult(t)) if t == "matrix")
        );
        let string = br#"{"status":"success","data":{"resultType":"string","result":[1,"x"]}}"#;
        assert!(
            matches!(single_value(200, string), Err(QueryError::UnsupportedResult(t)) if t == "string")
        );
    }

    #[test]
    fn prometheus_errors_carry_its_message() {
        let body =
            br#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected"}"#;
        let msg = single_value(400, body).unwrap_err().to_string();
        assert!(
            msg.contains("bad_data") && msg.contains("parse error"),
            "{msg}"
        );
        assert!(matches!(
            single_value(502, b"<html>bad gateway</html>"),
            Err(QueryError::Status { status: 502 })
        ));
        assert!(matches!(
            single_value(200, b"not json"),
            Err(QueryError::NotJson(_))
        ));
        assert!(matches!(
            single_value(
                200,
                br#"{"status":"success","data":{"resultType":"vector","result":{}}}"#
            ),
            Err(QueryError::Decode(_))
        ));
        assert!(matches!(
            single_value(200, &vector_body(&[("a", "x1")])),
            Err(QueryError::BadValue(_))
        ));
    }

    #[test]
    fn vectors_keep_every_series() {
        let series = vector(200, &vector_body(&[("a", "1"), ("b", "2.5")])).unwrap();
        assert_eq!(series.len(), 2);
        assert_eq!(series[1].labels["pod"], "b");
        assert_eq!(series[1].value, 2.5);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_never_give_a_value(
            status in any::<u16>(),
            body in proptest::collection::vec(any::<u8>(), 0..1024),
        ) {
            prop_assert!(single_value(status, &body).is_err());
            prop_assert!(vector(status, &body).is_err());
        }

        #[test]
        fn a_value_comes_only_from_one_sample_of_a_successful_vector(
            http_status in prop_oneof![Just(200u16), 400u16..600],
            status in prop_oneof![Just("success".to_owned()), "[a-z]{0,8}"],
            result_type in prop_oneof![Just("vector".to_owned()), Just("matrix".to_owned()), Just("string".to_owned()), "[a-z]{0,6}"],
            sample in prop_oneof![any::<f64>().prop_map(|f| f.to_string()), Just("NaN".to_owned()), Just("+Inf".to_owned()), ".{0,8}"],
            copies in 0usize..3,
        ) {
            let series = json!({ "metric": { "pod": "p" }, "value": [1.0, sample] });
            let body = json!({ "status": status, "data": { "resultType": result_type, "result": vec![series; copies] } })
                .to_string();
            if let Ok(value) = single_value(http_status, body.as_bytes()) {
                prop_assert_eq!(http_status, 200);
                prop_assert_eq!(status.as_str(), "success");
                prop_assert_eq!(result_type.as_str(), "vector");
                prop_assert_eq!(copies, 1);
                let expected: f64 = sample.parse().unwrap();
                prop_assert!(value == expected || (value.is_nan() && expected.is_nan()));
            }
        }
    }
}
