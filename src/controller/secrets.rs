//! Secrets a scaler names (serverHeadersFrom, serverTLS, serverAuth), read through a short-lived
//! cache: a rotated credential is used within [`SECRET_REFRESH`], and a steady scaler costs one
//! read per Secret per period instead of one per sync. Values never reach an error message.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use thiserror::Error;

/// How long a Secret read is reused.
pub const SECRET_REFRESH: Duration = Duration::from_secs(30);

pub type SecretData = BTreeMap<String, ByteString>;

#[derive(Debug, Error)]
pub enum SecretError {
    #[error("{field}: cannot read Secret {name}")]
    Read {
        field: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("{field}: Secret {name} has no key {key:?}")]
    MissingKey {
        field: &'static str,
        name: String,
        key: String,
    },
}

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
    /// Every key of Secret `name`; `field` names the spec field that asked for it.
    pub async fn data(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
        field: &'static str,
    ) -> Result<SecretData, SecretError> {
        let key = (namespace.to_owned(), name.to_owned());
        if let Some(data) = self.read.get(&key) {
            return Ok(data);
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let secret = api.get(name).await.map_err(|source| SecretError::Read {
            field,
            name: name.to_owned(),
            source,
        })?;
        let data = secret.data.unwrap_or_default();
        self.read.insert(key, data.clone());
        Ok(data)
    }

    /// One key of Secret `name`.
    pub async fn key(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
        key: &str,
        field: &'static str,
    ) -> Result<Vec<u8>, SecretError> {
        let data = self.data(client, namespace, name, field).await?;
        data.get(key)
            .map(|v| v.0.clone())
            .ok_or_else(|| SecretError::MissingKey {
                field,
                name: name.to_owned(),
                key: key.to_owned(),
            })
    }
}
