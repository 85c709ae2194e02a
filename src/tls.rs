//! Process-wide TLS setup.
//!
//! Every TLS user in the graph (the kube client, reqwest, axum-server) is built on rustls with no
//! provider of its own, so exactly one provider, ring, is installed here before any of them runs.

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("a different rustls crypto provider is already installed in this process")]
    ForeignProvider,
    #[error("cannot generate a certificate")]
    Generate(#[from] rcgen::Error),
    #[error("no certificate in the PEM text")]
    NoCertificate,
    #[error("cannot read a certificate's PEM")]
    Pem(#[source] rustls::pki_types::pem::Error),
    #[error("cannot read a certificate")]
    X509(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>),
}

/// Installs ring as the process-wide rustls crypto provider. Safe to call more than once.
pub fn install_crypto_provider() -> Result<(), TlsError> {
    let ring = rustls::crypto::ring::default_provider();
    match ring.install_default() {
        Ok(()) => Ok(()),
        // Already installed: fine if it is ours (a second call, or a test harness), an error if
        // some dependency slipped its own provider in first.
        Err(existing) => {
            let ours = rustls::crypto::ring::default_provider();
            if same_provider(&existing, &ours) {
                Ok(())
            } else {
                Err(TlsError::ForeignProvider)
            }
        }
    }
}

fn same_provider(
    a: &Arc<rustls::crypto::CryptoProvider>,
    b: &rustls::crypto::CryptoProvider,
) -> bool {
    let suites = |p: &rustls::crypto::CryptoProvider| {
        p.cipher_suites
            .iter()
            .map(|s| s.suite())
            .collect::<Vec<_>>()
    };
    suites(a) == suites(b)
}

/// A PEM certificate and its private key.
#[derive(Clone, PartialEq, Eq)]
pub struct CertifiedPem {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for CertifiedPem {
    // The key must never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertifiedPem")
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// A self-signed serving certificate for the given DNS names or IP addresses.
pub fn self_signed(subject_alt_names: &[String]) -> Result<CertifiedPem, TlsError> {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(subject_alt_names.to_vec())?;
    Ok(CertifiedPem {
        cert_pem: cert.pem(),
        key_pem: signing_key.serialize_pem(),
    })
}

/// A CA certificate and its private key, both PEM.
#[derive(Clone)]
pub struct CaPem {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for CaPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaPem")
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// A serving certificate and the CA that signed it (whose PEM goes into an APIService's
/// caBundle).
#[derive(Debug, Clone)]
pub struct ServingPki {
    pub ca: CaPem,
    pub serving: CertifiedPem,
}

/// A fresh CA and a serving certificate it signs for `dns_names`, both valid for `validity`.
pub fn ca_and_serving(dns_names: &[String], validity: Duration) -> Result<ServingPki, TlsError> {
    let ca = new_ca(validity)?;
    let serving = issue_serving(&ca, dns_names, validity)?;
    Ok(ServingPki { ca, serving })
}

/// A new self-signed CA that may sign serving certificates (and nothing below them).
pub fn new_ca(validity: Duration) -> Result<CaPem, TlsError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let now = time_now();
    let key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::new())?;
    // Part of the public key in the name tells one CA from the next: a serving certificate's
    // issuer then names exactly one CA, even for two made in the same second.
    let tag: String = key
        .public_key_raw()
        .iter()
        .rev()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    ca.distinguished_name.push(
        DnType::CommonName,
        format!("llmscaleoperator external metrics CA {tag}"),
    );
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now;
    ca.not_after = now + validity;
    let cert = ca.self_signed(&key)?;
    Ok(CaPem {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A serving certificate for `dns_names` signed by `ca`, valid for `validity` but never past the
/// CA's own end.
pub fn issue_serving(
    ca: &CaPem,
    dns_names: &[String],
    validity: Duration,
) -> Result<CertifiedPem, TlsError> {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
    let now = time_now();
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let ca_end = inspect(&ca.cert_pem)?.not_after;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key)?;
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(dns_names.to_vec())?;
    leaf.distinguished_name.push(
        DnType::CommonName,
        dns_names.first().cloned().unwrap_or_default(),
    );
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = now;
    leaf.not_after = (now + validity).min(ca_end);
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(CertifiedPem {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// What a certificate says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub not_before: time::OffsetDateTime,
    pub not_after: time::OffsetDateTime,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    pub subject: String,
    pub issuer: String,
}

/// Whether `key_pem` is the private key of the first certificate in `cert_pem`.
pub fn key_matches(cert_pem: &str, key_pem: &str) -> bool {
    use rcgen::PublicKeyData;
    let Ok(key) = rcgen::KeyPair::from_pem(key_pem) else {
        return false;
    };
    let Some(Ok(der)) = pem::parse_many(cert_pem)
        .ok()
        .and_then(|blocks| blocks.into_iter().find(|b| b.tag() == "CERTIFICATE"))
        .map(|block| {
            x509_parser::parse_x509_certificate(block.contents())
                .map(|(_, cert)| cert.public_key().raw.to_vec())
        })
    else {
        return false;
    };
    key.subject_public_key_info() == der
}

/// Reads the first certificate of a PEM text.
pub fn inspect(pem: &str) -> Result<CertInfo, TlsError> {
    inspect_all(pem)?
        .into_iter()
        .next()
        .ok_or(TlsError::NoCertificate)
}

/// Reads every certificate of a PEM text, in order.
pub fn inspect_all(pem: &str) -> Result<Vec<CertInfo>, TlsError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use x509_parser::extensions::GeneralName;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|der| {
            let der = der.map_err(TlsError::Pem)?;
            let (_, cert) =
                x509_parser::parse_x509_certificate(der.as_ref()).map_err(TlsError::X509)?;
            let dns_names = cert
                .subject_alternative_name()
                .ok()
                .flatten()
                .map(|san| {
                    san.value
                        .general_names
                        .iter()
                        .filter_map(|name| match name {
                            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(CertInfo {
                not_before: cert.validity().not_before.to_datetime(),
                not_after: cert.validity().not_after.to_datetime(),
                dns_names,
                subject: cert.subject().to_string(),
                issuer: cert.issuer().to_string(),
            })
        })
        .collect()
}

fn time_now() -> time::OffsetDateTime {
    // A minute back: a peer whose clock is slightly behind must not see a future certificate.
    time::OffsetDateTime::now_utc() - Duration::from_secs(60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serving_certificate_names_its_service_and_ends_with_its_ca() {
        let names = vec!["svc.ns.svc".to_owned(), "localhost".to_owned()];
        let ca = new_ca(Duration::from_secs(3600)).unwrap();
        let leaf = issue_serving(&ca, &names, Duration::from_secs(86_400)).unwrap();
        let ca_info = inspect(&ca.cert_pem).unwrap();
        let info = inspect(&leaf.cert_pem).unwrap();
        assert_eq!(info.dns_names, names);
        assert_eq!(info.issuer, ca_info.subject);
        assert_eq!(info.not_after, ca_info.not_after);
        assert!(format!("{ca:?}{leaf:?}").contains("<redacted>"));
        assert!(!format!("{ca:?}{leaf:?}").contains("PRIVATE"));
    }

    #[test]
    fn a_bundle_lists_every_certificate_and_garbage_is_an_error() {
        let one = new_ca(Duration::from_secs(60)).unwrap();
        let two = new_ca(Duration::from_secs(120)).unwrap();
        let both = inspect_all(&format!("{}{}", one.cert_pem, two.cert_pem)).unwrap();
        assert_eq!(both.len(), 2);
        assert!(both[0].not_after < both[1].not_after);
        assert!(inspect("not a certificate").is_err());
        let leaf = issue_serving(&one, &["a".to_owned()], Duration::from_secs(60)).unwrap();
        assert!(key_matches(&leaf.cert_pem, &leaf.key_pem));
        assert!(key_matches(&one.cert_pem, &one.key_pem));
        assert!(!key_matches(&leaf.cert_pem, &one.key_pem));
        assert!(!key_matches("garbage", &one.key_pem));
        assert!(inspect("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err());
    }
}
