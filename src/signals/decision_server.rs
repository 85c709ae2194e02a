//! The Custom provider: an absolute replica count from a decision server.
//!
//! `GET {serverAddress}{path}?serviceId=...` answers with a list of decisions. The reply is
//! matched, not trusted: its schema must be the one version understood here, and exactly one
//! decision must be for the service (and namespace) this scaler asked about.

use reqwest::Url;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

use super::http::{self, HttpError};

/// The only reply schema understood. A later version may give `replicas` another meaning.
pub const API_VERSION: &str = "llmscaling.inference.x-k8s.io/v1alpha1";

/// Why the decision server gave no usable count.
#[derive(Debug, Error)]
pub enum DecisionError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("serverAddress {address:?} with customProvider.path {path:?} is not a valid URL")]
    Url {
        address: String,
        path: String,
        #[source]
        source: url::ParseError,
    },
    #[error(transparent)]
    Reply(#[from] ReplyError),
}

/// What is wrong with a reply the server did send.
#[derive(Debug, Error, PartialEq)]
pub enum ReplyError {
    #[error("the decision server answered HTTP {0}")]
    Status(u16),
    #[error("the decision server's reply is not valid JSON")]
    Decode(#[source] NotJson),
    #[error("the reply has apiVersion {0}; only {API_VERSION} is understood")]
    UnknownSchema(String),
    #[error("the reply has no apiVersion; only {API_VERSION} is understood")]
    NoSchema,
    #[error("the reply has no decisions list")]
    NoDecisions,
    #[error("no decision for serviceId {service_id:?}{} among the {count} returned", namespace_clause(namespace.as_deref()))]
    NoMatch {
        service_id: String,
        namespace: Option<String>,
        count: usize,
    },
    #[error(
        "{count} decisions match serviceId {service_id:?} (namespaces {first:?} and {second:?}, ...): set customProvider.namespace to pick one"
    )]
    Ambiguous {
        service_id: String,
        count: usize,
        first: String,
        second: String,
    },
    #[error("the decision for serviceId {0:?} has no replicas.active")]
    MissingActive(String),
    #[error(
        "replicas.active {value} for serviceId {service_id:?} is not a replica count (a whole number from 0 to 2147483647)"
    )]
    BadActive { service_id: String, value: String },
}

/// serde_json's word on a reply that is not JSON, compared by what it says (replies compare as
/// values in tests, and serde_json's error does not).
#[derive(Debug, Error)]
#[error(transparent)]
pub struct NotJson(#[from] serde_json::Error);

impl PartialEq for NotJson {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

fn namespace_clause(namespace: Option<&str>) -> String {
    namespace
        .map(|ns| format!(" in namespace {ns:?}"))
        .unwrap_or_default()
}

/// The reply, as loosely typed as the checks below need: a field of the wrong type is reported
/// by the check that reads it, not as a decoding failure of the whole reply.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reply {
    #[serde(default)]
    api_version: Option<Value>,
    #[serde(default)]
    decisions: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Decision {
    #[serde(default)]
    service_id: Option<Value>,
    #[serde(default)]
    namespace: Option<Value>,
    #[serde(default)]
    replicas: Option<Replicas>,
}

#[derive(Deserialize)]
struct Replicas {
    /// `null` is present (and not a count), unlike a missing field.
    #[serde(default, deserialize_with = "present")]
    active: Option<Value>,
}

fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl Decision {
    fn service_id(&self) -> Option<&str> {
        self.service_id.as_ref().and_then(Value::as_str)
    }

    fn namespace(&self) -> Option<&str> {
        self.namespace.as_ref().and_then(Value::as_str)
    }
}

/// `{serverAddress}{path}?serviceId=...`, whatever slashes the two carry.
pub fn decision_url(server: &str, path: &str, service_id: &str) -> Result<Url, DecisionError> {
    let path = if path.is_empty() { "/decisions" } else { path };
    let joined = format!(
        "{}/{}",
        server.trim_end_matches('/'),
        path.trim_start_matches('/')
    );
    let mut url = Url::parse(&joined).map_err(|source| DecisionError::Url {
        address: server.to_owned(),
        path: path.to_owned(),
        source,
    })?;
    url.query_pairs_mut().append_pair("serviceId", service_id);
    Ok(url)
}

/// Asks the decision server for `service_id`'s replica count.
pub async fn fetch_decision(
    client: &reqwest::Client,
    url: &Url,
    headers: &HeaderMap,
    service_id: &str,
    namespace: Option<&str>,
) -> Result<i32, DecisionError> {
    let request = client.get(url.clone()).headers(headers.clone());
    let (status, body) = http::send(request, url.as_str()).await?;
    Ok(parse_reply(status.as_u16(), &body, service_id, namespace)?)
}

/// The replica count in a reply, or why there is none.
pub fn parse_reply(
    status: u16,
    body: &[u8],
    service_id: &str,
    namespace: Option<&str>,
) -> Result<i32, ReplyError> {
    if status != 200 {
        return Err(ReplyError::Status(status));
    }
    let reply: Reply = serde_json::from_slice(body).map_err(|e| ReplyError::Decode(NotJson(e)))?;
    match reply.api_version {
        Some(Value::String(v)) if v == API_VERSION => {}
        Some(Value::String(v)) => return Err(ReplyError::UnknownSchema(v)),
        Some(other) => return Err(ReplyError::UnknownSchema(other.to_string())),
        None => return Err(ReplyError::NoSchema),
    }
    let decisions: Vec<Decision> = match reply.decisions {
        Some(Value::Array(items)) => items
            .into_iter()
            // An entry that is not a decision matches nothing.
            .filter_map(|item| serde_json::from_value(item).ok())
            .collect(),
        _ => return Err(ReplyError::NoDecisions),
    };
    let matching: Vec<&Decision> = decisions
        .iter()
        .filter(|d| d.service_id() == Some(service_id))
        .filter(|d| namespace.is_none_or(|ns| d.namespace() == Some(ns)))
        .collect();
    let decision = match matching.as_slice() {
        [] => {
            return Err(ReplyError::NoMatch {
                service_id: service_id.to_owned(),
                namespace: namespace.map(str::to_owned),
                count: decisions.len(),
            });
        }
        [one] => *one,
        [first, second, ..] => {
            let ns = |d: &Decision| d.namespace().unwrap_or("").to_owned();
            return Err(ReplyError::Ambiguous {
                service_id: service_id.to_owned(),
                count: matching.len(),
                first: ns(first),
                second: ns(second),
            });
        }
    };
    let active = decision
        .replicas
        .as_ref()
        .and_then(|r| r.active.as_ref())
        .ok_or_else(|| ReplyError::MissingActive(service_id.to_owned()))?;
    active
        .as_u64()
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| ReplyError::BadActive {
            service_id: service_id.to_owned(),
            value: active.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SPEC_EXAMPLE: &str = r#"{
      "apiVersion": "llmscaling.inference.x-k8s.io/v1alpha1",
      "decisions": [
        { "namespace": "modelforge", "serviceId": "fallback-modelforge-01", "replicas": { "active": 15 } }
      ]
    }"#;

    fn reply(decisions: Value) -> Vec<u8> {
        json!({ "apiVersion": API_VERSION, "decisions": decisions })
            .to_string()
            .into_bytes()
    }

    fn one(active: Value) -> Vec<u8> {
        reply(json!([{ "namespace": "ns", "serviceId": "svc", "replicas": { "active": active } }]))
    }

    #[test]
    fn the_spec_example() {
        assert_eq!(
            parse_reply(200, SPEC_EXAMPLE.as_bytes(), "fallback-modelforge-01", None),
            Ok(15)
        );
        assert_eq!(
            parse_reply(
                200,
                SPEC_EXAMPLE.as_bytes(),
                "fallback-modelforge-01",
                Some("modelforge")
            ),
            Ok(15)
        );
    }

    #[test]
    fn active_must_be_a_replica_count() {
        assert_eq!(
            parse_reply(200, &one(json!(0)), "svc", None),
            Ok(0),
            "zero is a real answer"
        );
        assert_eq!(
            parse_reply(200, &one(json!(2147483647)), "svc", None),
            Ok(i32::MAX)
        );
        for bad in [
            json!(-1),
            json!(4294967296u64),
            json!(2147483648u64),
            json!(1.5),
            json!("3"),
            json!(null),
        ] {
            assert!(
                matches!(
                    parse_reply(200, &one(bad.clone()), "svc", None),
                    Err(ReplyError::BadActive { .. })
                ),
                "{bad}"
            );
        }
        let empty = reply(json!([{ "serviceId": "svc", "replicas": {} }]));
        assert_eq!(
            parse_reply(200, &empty, "svc", None),
            Err(ReplyError::MissingActive("svc".into()))
        );
        let none = reply(json!([{ "serviceId": "svc" }]));
        assert_eq!(
            parse_reply(200, &none, "svc", None),
            Err(ReplyError::MissingActive("svc".into()))
        );
    }

    #[test]
    fn only_the_known_schema_is_read() {
        let v2 = SPEC_EXAMPLE.replace("v1alpha1", "v2");
        let err = parse_reply(200, v2.as_bytes(), "fallback-modelforge-01", None).unwrap_err();
        assert_eq!(
            err,
            ReplyError::UnknownSchema("llmscaling.inference.x-k8s.io/v2".into())
        );
        assert!(
            err.to_string()
                .contains("only llmscaling.inference.x-k8s.io/v1alpha1 is understood")
        );
        let bare = br#"{"decisions": []}"#;
        assert_eq!(
            parse_reply(200, bare, "svc", None),
            Err(ReplyError::NoSchema)
        );
        let no_list = format!(r#"{{"apiVersion": "{API_VERSION}"}}"#);
        assert_eq!(
            parse_reply(200, no_list.as_bytes(), "svc", None),
            Err(ReplyError::NoDecisions)
        );
    }

    #[test]
    fn exactly_one_decision_must_match() {
        let two = reply(json!([
            { "namespace": "a", "serviceId": "svc", "replicas": { "active": 1 } },
            { "namespace": "b", "serviceId": "svc", "replicas": { "active": 7 } },
            { "namespace": "b", "serviceId": "other", "replicas": { "active": 9 } }
        ]));
        let err = parse_reply(200, &two, "svc", None).unwrap_err();
        assert_eq!(
            err,
            ReplyError::Ambiguous {
                service_id: "svc".into(),
                count: 2,
                first: "a".into(),
                second: "b".into()
            }
        );
        assert!(
            err.to_string().contains("set customProvider.namespace"),
            "{err}"
        );
        assert_eq!(
            parse_reply(200, &two, "svc", Some("b")),
            Ok(7),
            "the namespace filter picks one"
        );
        let err = parse_reply(200, &two, "svc", Some("c")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no decision for serviceId \"svc\" in namespace \"c\" among the 3 returned"
        );
        let err = parse_reply(200, &two, "missing", None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no decision for serviceId \"missing\" among the 3 returned"
        );
    }

    #[test]
    fn transport_level_garbage_is_refused() {
        assert_eq!(
            parse_reply(502, b"<html>Bad Gateway</html>", "svc", None),
            Err(ReplyError::Status(502))
        );
        assert!(matches!(
            parse_reply(200, b"<html>Bad Gateway</html>", "svc", None),
            Err(ReplyError::Decode(_))
        ));
        assert!(matches!(
            parse_reply(200, b"", "svc", None),
            Err(ReplyError::Decode(_))
        ));
        assert!(matches!(
            parse_reply(200, b"[]", "svc", None),
            Err(ReplyError::NoSchema)
        ));
    }

    #[test]
    fn urls_are_built_whatever_the_slashes() {
        for (server, path) in [
            ("http://d:8080", "/decisions"),
            ("http://d:8080/", "/decisions"),
            ("http://d:8080", "decisions"),
            ("http://d:8080/", "decisions"),
            ("http://d:8080", ""),
        ] {
            assert_eq!(
                decision_url(server, path, "svc").unwrap().as_str(),
                "http://d:8080/decisions?serviceId=svc",
                "{server} {path}"
            );
        }
        assert_eq!(
            decision_url("http://d/", "/v2/decisions", "svc")
                .unwrap()
                .as_str(),
            "http://d/v2/decisions?serviceId=svc"
        );
        assert_eq!(
            decision_url("http://d/base/", "decisions", "svc")
                .unwrap()
                .as_str(),
            "http://d/base/decisions?serviceId=svc"
        );
        assert_eq!(
            decision_url("http://d", "/decisions", "a b&c=d/é")
                .unwrap()
                .as_str(),
            "http://d/decisions?serviceId=a+b%26c%3Dd%2F%C3%A9",
            "serviceId is query-encoded"
        );
        assert!(matches!(
            decision_url("not a url", "/decisions", "svc"),
            Err(DecisionError::Url { .. })
        ));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_never_give_a_count(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            prop_assert!(parse_reply(200, &body, "svc", None).is_err());
        }

        #[test]
        fn arbitrary_json_shapes_only_yield_a_count_from_a_valid_decision(
            version in prop_oneof![Just(API_VERSION.to_owned()), ".{0,40}"],
            service in prop_oneof![Just("svc".to_owned()), "[a-z]{0,5}"],
            active in prop_oneof![any::<i64>().prop_map(|n| serde_json::json!(n)), any::<f64>().prop_map(|f| serde_json::json!(f)), Just(serde_json::json!("7")), Just(serde_json::json!(null))],
            copies in 0usize..3,
        ) {
            let decision = serde_json::json!({ "serviceId": service, "replicas": { "active": active } });
            let body = serde_json::json!({ "apiVersion": version, "decisions": vec![decision; copies] }).to_string();
            if let Ok(n) = parse_reply(200, body.as_bytes(), "svc", None) {
                prop_assert_eq!(version.as_str(), API_VERSION);
                prop_assert_eq!(service.as_str(), "svc");
                prop_assert_eq!(copies, 1);
                prop_assert!(n >= 0);
                prop_assert_eq!(active.as_i64(), Some(i64::from(n)));
            }
        }
    }
}
