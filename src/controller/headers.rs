//! The headers a scaler sends to its server: spec.serverHeaders and, with serverHeadersFrom, the
//! keys of a Secret in its namespace. Every value is marked sensitive, and text a server sends
//! back is scrubbed of them (`http::redact`), so a credential reaches no log, event or status.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use thiserror::Error;

use crate::api::LLMScaler;
use crate::signals::http::{self, HttpError};

/// How long a Secret read is reused: a rotated credential is sent within this time, and a steady
/// scaler costs one read per Secret per period instead of one per sync.
pub const SECRET_REFRESH: Duration = Duration::from_secs(30);

#[derive(Debug, Error)]
pub enum HeadersError {
    #[error(transparent)]
    Spec(#[from] HttpError),
    #[error("serverHeadersFrom: cannot read Secret {name}: {source}")]
    Secret {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("serverHeadersFrom: key {key:?} of Secret {secret} is not a valid HTTP header name")]
    KeyName { secret: String, key: String },
    #[error(
        "serverHeadersFrom: the value of key {key:?} of Secret {secret} is not a valid HTTP header value"
    )]
    KeyValue { secret: String, key: String },
    #[error("header {name:?} is set both in serverHeaders and in Secret {secret}: keep one")]
    Both { name: String, secret: String },
}

type SecretData = BTreeMap<String, ByteString>;

/// Secrets read recently, by (namespace, name); a read older than [`SECRET_REFRESH`] is
/// forgotten, so a Secret that no scaler names any more does not stay in memory.
pub struct SecretCache {
    read: moka::sync::Cache<(String, String), SecretData>,
}

impl Default for SecretCache {
    fn default() -> Self {
        Self {
            read: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(SECRET_REFRESH)
                .build(),
        }
    }
}

impl SecretCache {
    async fn data(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
    ) -> Result<SecretData, HeadersError> {
        let key = (namespace.to_owned(), name.to_owned());
        if let Some(data) = self.read.get(&key) {
            return Ok(data);
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let secret = api.get(name).await.map_err(|source| HeadersError::Secret {
            name: name.to_owned(),
            source,
        })?;
        let data = secret.data.unwrap_or_default();
        self.read.insert(key, data.clone());
        Ok(data)
    }
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
        let data = secrets.data(client, namespace, &from.secret_name).await?;
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
            crate::controller::SyncError::from(name).reason(),
            crate::controller::FailureReason::InvalidSpec
        );
    }
}
