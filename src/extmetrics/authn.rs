//! Authentication as an aggregated API server does it.
//!
//! The kube-apiserver's aggregator calls us with its front-proxy client certificate and puts the
//! real caller in headers. Those headers count only when the certificate verifies against the
//! `requestheader-client-ca-file` of `kube-system/extension-apiserver-authentication` (with the
//! clientAuth usage, and a CN in `requestheader-allowed-names` when that list is not empty).
//! Anyone else presents a bearer token, checked with a TokenReview.
//!
//! TLS accepts any client certificate (or none); the checks happen per request, against the CA
//! in force at that moment, so a rotated front-proxy CA needs no new TLS configuration.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::HeaderMap;
use rustls::DistinguishedName;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use thiserror::Error;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum AuthnError {
    #[error(
        "the client certificate is not signed by the front-proxy CA or not valid for client authentication: {0}"
    )]
    UntrustedCertificate(String),
    #[error("the client certificate's common name {0:?} is not in requestheader-allowed-names")]
    NameNotAllowed(String),
    #[error("the front-proxy request names no user")]
    NoUser,
    #[error("no credentials: present a bearer token")]
    NoCredentials,
    #[error("the bearer token was not accepted")]
    BadToken,
}

/// Why the front-proxy settings of kube-system/extension-apiserver-authentication cannot be used.
#[derive(Debug, Error)]
pub enum RequestHeaderError {
    #[error("the ConfigMap has no requestheader-client-ca-file")]
    NoCa,
    #[error("{key} is not a JSON list of strings")]
    List {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("requestheader-client-ca-file: cannot read its PEM")]
    CaPem(#[source] rustls::pki_types::pem::Error),
    #[error("requestheader-client-ca-file: a certificate cannot be trusted")]
    CaRoot(#[source] rustls::Error),
    #[error("requestheader-client-ca-file: cannot verify client certificates with it")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
}

/// The request-header settings published in kube-system/extension-apiserver-authentication.
pub struct RequestHeader {
    verifier: Arc<dyn ClientCertVerifier>,
    /// Leaf certificates already checked against this CA, with the outcome: the aggregator
    /// sends the same one on every request, and a chain check per request would dominate.
    /// A rotated CA builds a new RequestHeader, so nothing stale survives a rotation.
    checked: moka::sync::Cache<Vec<u8>, Result<(), AuthnError>>,
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
}

impl std::fmt::Debug for RequestHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHeader")
            .field("allowed_names", &self.allowed_names)
            .field("username_headers", &self.username_headers)
            .finish_non_exhaustive()
    }
}

impl RequestHeader {
    /// From the ConfigMap's data: the CA bundle (PEM) and the JSON-encoded lists.
    pub fn from_config_map(data: &BTreeMap<String, String>) -> Result<Self, RequestHeaderError> {
        let ca = data
            .get("requestheader-client-ca-file")
            .ok_or(RequestHeaderError::NoCa)?;
        let list = |key: &str| -> Result<Vec<String>, RequestHeaderError> {
            match data.get(key) {
                None => Ok(Vec::new()),
                Some(raw) if raw.trim().is_empty() => Ok(Vec::new()),
                Some(raw) => serde_json::from_str(raw).map_err(|source| RequestHeaderError::List {
                    key: key.to_owned(),
                    source,
                }),
            }
        };
        Self::new(
            ca.as_bytes(),
            list("requestheader-allowed-names")?,
            list("requestheader-username-headers")?,
            list("requestheader-group-headers")?,
            list("requestheader-extra-headers-prefix")?,
        )
    }

    pub fn new(
        ca_pem: &[u8],
        allowed_names: Vec<String>,
        username_headers: Vec<String>,
        group_headers: Vec<String>,
        extra_prefixes: Vec<String>,
    ) -> Result<Self, RequestHeaderError> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(RequestHeaderError::CaPem)?;
            roots.add(cert).map_err(RequestHeaderError::CaRoot)?;
        }
        let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
            .build()
            .map_err(RequestHeaderError::Verifier)?;
        Ok(Self {
            verifier,
            // A leaf keeps its verdict for a minute (a revocation by CA rotation is still
            // honoured within that minute's precision).
            checked: moka::sync::Cache::builder()
                .max_capacity(1024)
                .time_to_live(std::time::Duration::from_secs(60))
                .build(),
            allowed_names,
            username_headers,
            group_headers,
            extra_prefixes,
        })
    }

    /// The user a verified front proxy speaks for. `Ok(None)`: no client certificate, so this is
    /// not the front proxy (and its headers mean nothing).
    pub fn authenticate(
        &self,
        certs: &[CertificateDer<'_>],
        headers: &HeaderMap,
    ) -> Result<Option<UserInfo>, AuthnError> {
        let Some((leaf, intermediates)) = certs.split_first() else {
            return Ok(None);
        };
        self.check_certificate(leaf, intermediates)?;
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_owned)
                .collect()
        };
        let name = self
            .username_headers
            .iter()
            .flat_map(|h| values(h))
            .find(|v| !v.is_empty())
            .ok_or(AuthnError::NoUser)?;
        let mut groups: Vec<String> = self.group_headers.iter().flat_map(|h| values(h)).collect();
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".to_owned());
        }
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in headers {
            let header = header.as_str();
            for prefix in &self.extra_prefixes {
                if let Some(key) = header.strip_prefix(&prefix.to_ascii_lowercase())
                    && let Ok(value) = value.to_str()
                {
                    extra
                        .entry(unescape(key))
                        .or_default()
                        .push(value.to_owned());
                }
            }
        }
        Ok(Some(UserInfo {
            name,
            groups,
            extra,
        }))
    }
}

impl RequestHeader {
    /// Chain, clientAuth usage and allowed name, remembered for a minute per leaf (expiry is
    /// still honoured within that minute's precision).
    fn check_certificate(
        &self,
        leaf: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
    ) -> Result<(), AuthnError> {
        let key = leaf.as_ref().to_vec();
        if intermediates.is_empty()
            && let Some(outcome) = self.checked.get(&key)
        {
            return outcome;
        }
        let outcome = self.verify(leaf, intermediates);
        self.checked.insert(key, outcome.clone());
        outcome
    }

    fn verify(
        &self,
        leaf: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
    ) -> Result<(), AuthnError> {
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| AuthnError::UntrustedCertificate(e.to_string()))?;
        if !self.allowed_names.is_empty() {
            let cn = common_name(leaf).unwrap_or_default();
            if !self.allowed_names.contains(&cn) {
                return Err(AuthnError::NameNotAllowed(cn));
            }
        }
        Ok(())
    }
}

/// Extra keys arrive percent-encoded in header names.
fn unescape(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = key
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).to_lowercase()
}

fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = parsed
        .subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_owned();
    Some(cn)
}

/// A bearer token from the Authorization header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

/// Accepts any client certificate at the TLS layer (proof of key possession is still checked);
/// whether it is trusted is decided per request by [`RequestHeader::authenticate`].
#[derive(Debug)]
pub struct DeferredClientAuth {
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl DeferredClientAuth {
    pub fn new(provider: Arc<rustls::crypto::CryptoProvider>) -> Self {
        Self { provider }
    }
}

impl ClientCertVerifier for DeferredClientAuth {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };

    struct Ca {
        issuer: Issuer<'static, KeyPair>,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    fn client(
        ca: &Ca,
        cn: &str,
        usage: Option<ExtendedKeyUsagePurpose>,
    ) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = usage.into_iter().collect();
        params.signed_by(&key, &ca.issuer).unwrap().der().clone()
    }

    fn request_header(ca: &Ca, allowed: &[&str]) -> RequestHeader {
        crate::tls::install_crypto_provider().unwrap();
        RequestHeader::new(
            ca.pem.as_bytes(),
            allowed.iter().map(|s| (*s).to_owned()).collect(),
            vec!["X-Remote-User".into()],
            vec!["X-Remote-Group".into()],
            vec!["X-Remote-Extra-".into()],
        )
        .unwrap()
    }

    fn headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", HeaderValue::from_static("alice"));
        h.append("x-remote-group", HeaderValue::from_static("team-a"));
        h.append("x-remote-group", HeaderValue::from_static("team-b"));
        h.insert(
            "x-remote-extra-scopes%2Fread",
            HeaderValue::from_static("yes"),
        );
        h
    }

    #[test]
    fn a_verified_front_proxy_speaks_for_the_user_in_its_headers() {
        let front = ca("front-proxy-ca");
        let auth = request_header(&front, &["front-proxy-client"]);
        let cert = client(
            &front,
            "front-proxy-client",
            Some(ExtendedKeyUsagePurpose::ClientAuth),
        );
        let user = auth.authenticate(&[cert], &headers()).unwrap().unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["team-a", "team-b", "system:authenticated"]);
        assert_eq!(user.extra["scopes/read"], ["yes"]);
    }

    #[test]
    fn the_decision_table() {
        let front = ca("front-proxy-ca");
        let other = ca("someone-else");
        let auth = request_header(&front, &["front-proxy-client"]);
        let good = Some(ExtendedKeyUsagePurpose::ClientAuth);

        // No certificate: not the front proxy; its headers are ignored.
        assert_eq!(auth.authenticate(&[], &headers()), Ok(None));
        // Another CA.
        let foreign = client(&other, "front-proxy-client", good.clone());
        assert!(matches!(
            auth.authenticate(&[foreign], &headers()),
            Err(AuthnError::UntrustedCertificate(_))
        ));
        // No clientAuth usage.
        let server_only = client(
            &front,
            "front-proxy-client",
            Some(ExtendedKeyUsagePurpose::ServerAuth),
        );
        assert!(matches!(
            auth.authenticate(&[server_only], &headers()),
            Err(AuthnError::UntrustedCertificate(_))
        ));
        // A name outside requestheader-allowed-names.
        let stranger = client(&front, "not-the-proxy", good.clone());
        assert_eq!(
            auth.authenticate(std::slice::from_ref(&stranger), &headers()),
            Err(AuthnError::NameNotAllowed("not-the-proxy".into()))
        );
        // ...which is fine when the list is empty.
        let open = request_header(&front, &[]);
        assert_eq!(
            open.authenticate(&[stranger], &headers())
                .unwrap()
                .unwrap()
                .name,
            "alice"
        );
        // A verified proxy that names nobody.
        let proxy = client(&front, "front-proxy-client", good);
        assert_eq!(
            auth.authenticate(&[proxy], &HeaderMap::new()),
            Err(AuthnError::NoUser)
        );
    }

    #[test]
    fn bearer_tokens() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert("authorization", HeaderValue::from_static("Bearer abc.def"));
        assert_eq!(bearer(&h), Some("abc.def"));
        h.insert("authorization", HeaderValue::from_static("Basic Zm9v"));
        assert_eq!(bearer(&h), None);
        h.insert("authorization", HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&h), None);
    }

    #[test]
    fn the_config_map_is_read() {
        let front = ca("front-proxy-ca");
        let data = BTreeMap::from([
            ("requestheader-client-ca-file".to_owned(), front.pem.clone()),
            (
                "requestheader-allowed-names".to_owned(),
                r#"["front-proxy-client"]"#.to_owned(),
            ),
            (
                "requestheader-username-headers".to_owned(),
                r#"["X-Remote-User"]"#.to_owned(),
            ),
            (
                "requestheader-group-headers".to_owned(),
                r#"["X-Remote-Group"]"#.to_owned(),
            ),
            (
                "requestheader-extra-headers-prefix".to_owned(),
                r#"["X-Remote-Extra-"]"#.to_owned(),
            ),
        ]);
        crate::tls::install_crypto_provider().unwrap();
        let auth = RequestHeader::from_config_map(&data).unwrap();
        assert_eq!(auth.allowed_names, ["front-proxy-client"]);
        assert!(RequestHeader::from_config_map(&BTreeMap::new()).is_err());
    }
}
