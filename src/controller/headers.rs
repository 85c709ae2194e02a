//! The headers a scaler sends to its server: spec.serverHeaders and, with serverHeadersFrom, the
//! keys of a Secret in its namespace. Every value is marked sensitive, and text a server sends
//! back is scrubbed of them (`http::redact`), so a credential reaches no log, event or status.

use kube::Client;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use thiserror::Error;

use super::secrets::{SecretCache, SecretData, SecretError};
use crate::api::LLMScaler;
use crate::signals::http::{self, HttpError};

#[derive(Debug, Error)]
pub enum HeadersError {
    #[error(transparent)]
    Spec(#[from] HttpError),
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error("serverHeadersFrom: key {key:?} of Secret {secret} is not a valid HTTP header name")]
    KeyName { secret: String, key: String },
    #[error(
        "serverHeadersFrom: the value of key {key:?} of Secret {secret} is not a valid HTTP header value"
    )]
    KeyValue { secret: String, key: String },
    #[error("header {name:?} is set both in serverHeaders and in Secret {secret}: keep one")]
    Both { name: String, secret: String },
}

/// Every header the scaler sends.
pub async fn resolve(
    secrets: &SecretCache,
    client: &Client,
    scaler: &LLMScaler,
    namespace: &str,
) -> Result<HeaderMap, HeadersError> {
    let mut headers = http::headers(scaler.spec.server_headers.as_ref())?;
    if let Some(from) = &scaler.spec.server_headers_from {
        let data = secrets
            .data(client, namespace, &from.secret_name, "serverHeadersFrom")
            .await?;
        merge(&mut headers, &data, &from.secret_name)?;
    }
    Ok(headers)
}

/// Adds a Secret's keys as headers. Surrounding whitespace of a value is dropped: a Secret made
/// from a file usually ends in a newline, which no header value may contain.
fn merge(headers: &mut HeaderMap, data: &SecretData, secret: &str) -> Result<(), HeadersError> {
    for (key, value) in data {
        let name = HeaderName::from_bytes(key.as_bytes()).map_err(|_| HeadersError::KeyName {
            secret: secret.to_owned(),
            key: key.clone(),
        })?;
        if headers.contains_key(&name) {
            return Err(HeadersError::Both {
                name: key.clone(),
                secret: secret.to_owned(),
            });
        }
        let mut value =
            HeaderValue::from_bytes(value.0.trim_ascii()).map_err(|_| HeadersError::KeyValue {
                secret: secret.to_owned(),
                key: key.clone(),
            })?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn data(pairs: &[(&str, &[u8])]) -> SecretData {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
            .collect()
    }

    #[test]
    fn keys_become_sensitive_headers_with_the_newline_dropped() {
        let mut headers = HeaderMap::new();
        merge(
            &mut headers,
            &data(&[("Authorization", b"Bearer abc\n"), ("X-Org", b"7")]),
            "auth",
        )
        .unwrap();
        assert_eq!(headers["authorization"], "Bearer abc");
        assert!(headers["authorization"].is_sensitive());
        assert_eq!(headers["x-org"], "7");
    }

    #[test]
    fn errors_name_the_key_and_never_the_value() {
        let mut spec = http::headers(Some(&BTreeMap::from([(
            "Authorization".to_owned(),
            "Bearer spec-value".to_owned(),
        )])))
        .unwrap();
        let both = merge(
            &mut spec,
            &data(&[("authorization", b"Bearer s3cret")]),
            "auth",
        )
        .unwrap_err();
        assert_eq!(
            both.to_string(),
            "header \"authorization\" is set both in serverHeaders and in Secret auth: keep one"
        );
        let bad = merge(
            &mut HeaderMap::new(),
            &data(&[("X-Token", b"s3cret\x01value")]),
            "auth",
        )
        .unwrap_err();
        assert!(!bad.to_string().contains("s3cret"), "{bad}");
        assert!(bad.to_string().contains("\"X-Token\""), "{bad}");
        let name = merge(&mut HeaderMap::new(), &data(&[("bad key", b"v")]), "auth").unwrap_err();
        assert_eq!(
            crate::controller::SyncError::from(
                crate::controller::server_access::AccessError::from(name)
            )
            .reason(),
            crate::controller::FailureReason::InvalidSpec
        );
    }
}
