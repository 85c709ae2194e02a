//! How a scaler talks to its serverAddress: the HTTP client (the shared one, or one that trusts
//! the scaler's private CA and presents its client certificate) and the headers (serverHeaders,
//! serverHeadersFrom, and the Authorization of serverAuth). Resolved once per sync from Secrets
//! read through the [`SecretCache`]; clients are reused while the Secrets' content is unchanged,
//! so a rotated certificate gets a new client (and new connections) within the refresh period.

use std::hash::{Hash, Hasher};

use base64::Engine;
use kube::Client;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use thiserror::Error;

use super::headers::{self, HeadersError};
use super::secrets::{SecretCache, SecretError};
use crate::api::{LLMScaler, ServerAuth, ServerTls};
use crate::signals::http;

const DEFAULT_CA_KEY: &str = "ca.crt";
const DEFAULT_TOKEN_KEY: &str = "token";

/// The client and headers of one scaler's requests.
pub struct ServerAccess {
    pub client: reqwest::Client,
    pub headers: HeaderMap,
}

impl ServerAccess {
    /// The server at `address` (serverAddress), reached this way.
    pub fn at<'a>(&'a self, address: &'a str) -> crate::signals::read::Server<'a> {
        crate::signals::read::Server {
            client: &self.client,
            address,
            headers: &self.headers,
        }
    }
}

#[derive(Debug, Error)]
pub enum AccessError {
    #[error(transparent)]
    Headers(#[from] HeadersError),
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// What is wrong, never the value.
    #[error("{field}: key {key:?} of Secret {secret} {problem}")]
    Invalid {
        field: &'static str,
        secret: String,
        key: String,
        problem: &'static str,
    },
    #[error(
        "serverAuth sets the Authorization header, and serverHeaders or serverHeadersFrom set it too: keep one"
    )]
    AuthorizationTwice,
    #[error("serverTLS: cannot build a TLS client from Secret {secret}: {reason}")]
    Client { secret: String, reason: String },
}

/// Clients built for private CAs and client certificates, by the digest of what they were built
/// from; one not used for a while is dropped.
pub struct TlsClients {
    built: moka::sync::Cache<u64, reqwest::Client>,
}

impl Default for TlsClients {
    fn default() -> Self {
        Self {
            built: moka::sync::Cache::builder()
                .max_capacity(1_000)
                .time_to_idle(std::time::Duration::from_secs(600))
                .build(),
        }
    }
}

/// Resolves how `scaler` reaches its server.
pub async fn resolve(
    secrets: &SecretCache,
    clients: &TlsClients,
    shared: &reqwest::Client,
    client: &Client,
    scaler: &LLMScaler,
    namespace: &str,
) -> Result<ServerAccess, AccessError> {
    let mut headers = headers::resolve(secrets, client, scaler, namespace).await?;
    if let Some(auth) = &scaler.spec.server_auth {
        if headers.contains_key(AUTHORIZATION) {
            return Err(AccessError::AuthorizationTwice);
        }
        let value = authorization(secrets, client, namespace, auth).await?;
        headers.insert(AUTHORIZATION, value);
    }
    let client = match &scaler.spec.server_tls {
        Some(tls) => tls_client(secrets, clients, client, namespace, tls).await?,
        None => shared.clone(),
    };
    Ok(ServerAccess { client, headers })
}

async fn authorization(
    secrets: &SecretCache,
    client: &Client,
    namespace: &str,
    auth: &ServerAuth,
) -> Result<HeaderValue, AccessError> {
    let (field, secret, raw) = if let Some(basic) = &auth.basic {
        let name = &basic.secret_name;
        let field = "serverAuth.basic";
        let user = secrets
            .key(client, namespace, name, "username", field)
            .await?;
        let password = secrets
            .key(client, namespace, name, "password", field)
            .await?;
        // A Secret made from a file usually ends in a newline, which is not part of either.
        let pair = [user.trim_ascii(), b":", password.trim_ascii()].concat();
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
        (field, name, format!("Basic {encoded}").into_bytes())
    } else if let Some(bearer) = &auth.bearer {
        let name = &bearer.secret_name;
        let field = "serverAuth.bearer";
        let key = bearer.key.as_deref().unwrap_or(DEFAULT_TOKEN_KEY);
        let token = secrets.key(client, namespace, name, key, field).await?;
        (field, name, [b"Bearer ", token.trim_ascii()].concat())
    } else {
        // Admission requires exactly one; an object from before the rule sends nothing.
        return Ok(HeaderValue::from_static(""));
    };
    let mut value = HeaderValue::from_bytes(&raw).map_err(|_| AccessError::Invalid {
        field,
        secret: secret.clone(),
        key: if field == "serverAuth.basic" {
            "username/password".to_owned()
        } else {
            "token".to_owned()
        },
        problem: "cannot be sent in an HTTP header",
    })?;
    value.set_sensitive(true);
    Ok(value)
}

async fn tls_client(
    secrets: &SecretCache,
    clients: &TlsClients,
    client: &Client,
    namespace: &str,
    tls: &ServerTls,
) -> Result<reqwest::Client, AccessError> {
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    let mut builder = http::client_builder(http::REQUEST_TIMEOUT);
    let mut named = Vec::new();
    if let Some(ca) = &tls.ca {
        let key = ca.key.as_deref().unwrap_or(DEFAULT_CA_KEY);
        let pem = secrets
            .key(client, namespace, &ca.secret_name, key, "serverTLS.ca")
            .await?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .ok()
            .filter(|certs| !certs.is_empty())
            .ok_or_else(|| AccessError::Invalid {
                field: "serverTLS.ca",
                secret: ca.secret_name.clone(),
                key: key.to_owned(),
                problem: "holds no PEM certificate",
            })?;
        ("ca", &pem).hash(&mut digest);
        builder = builder.tls_certs_only(certs);
        named.push(ca.secret_name.clone());
    }
    if let Some(cert) = &tls.client_certificate {
        let name = &cert.secret_name;
        let field = "serverTLS.clientCertificate";
        let crt = secrets
            .key(client, namespace, name, "tls.crt", field)
            .await?;
        let key = secrets
            .key(client, namespace, name, "tls.key", field)
            .await?;
        let pem = [crt.as_slice(), b"\n", key.as_slice()].concat();
        let identity = reqwest::Identity::from_pem(&pem).map_err(|_| AccessError::Invalid {
            field,
            secret: name.clone(),
            key: "tls.crt/tls.key".to_owned(),
            problem: "is not a PEM certificate and private key",
        })?;
        ("identity", &pem).hash(&mut digest);
        builder = builder.identity(identity);
        named.push(name.clone());
    }
    let digest = digest.finish();
    if let Some(built) = clients.built.get(&digest) {
        return Ok(built);
    }
    let built = builder.build().map_err(|e| AccessError::Client {
        secret: named.join(", "),
        reason: http::describe(&e),
    })?;
    clients.built.insert(digest, built.clone());
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_secret_and_key_never_the_value() {
        let e = AccessError::Invalid {
            field: "serverTLS.ca",
            secret: "prom-ca".into(),
            key: "ca.crt".into(),
            problem: "holds no PEM certificate",
        };
        assert_eq!(
            e.to_string(),
            "serverTLS.ca: key \"ca.crt\" of Secret prom-ca holds no PEM certificate"
        );
    }
}
