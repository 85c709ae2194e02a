//! Process-wide TLS setup.
//!
//! Every TLS user in the graph (the kube client, reqwest, axum-server) is built on rustls with no
//! provider of its own, so exactly one provider, ring, is installed here before any of them runs.

use std::sync::Arc;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("a different rustls crypto provider is already installed in this process")]
    ForeignProvider,
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
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
#[derive(Clone)]
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

/// A serving certificate and the CA that signed it (whose PEM goes into an APIService's
/// caBundle).
#[derive(Debug, Clone)]
pub struct ServingPki {
    pub ca_pem: String,
    pub serving: CertifiedPem,
}

/// A fresh CA and a serving certificate it signs for `dns_names`, valid for `days`.
pub fn ca_and_serving(dns_names: &[String], days: i64) -> Result<ServingPki, TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let now = time_now();
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "llmscaleoperator external metrics CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now;
    ca.not_after = now + rcgen_days(days);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(dns_names.to_vec())?;
    leaf.distinguished_name.push(
        DnType::CommonName,
        dns_names.first().cloned().unwrap_or_default(),
    );
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = now;
    leaf.not_after = now + rcgen_days(days);
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(ServingPki {
        ca_pem: ca_cert.pem(),
        serving: CertifiedPem {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        },
    })
}

fn time_now() -> time::OffsetDateTime {
    // A minute back: a peer whose clock is slightly behind must not see a future certificate.
    time::OffsetDateTime::now_utc() - std::time::Duration::from_secs(60)
}

fn rcgen_days(days: i64) -> std::time::Duration {
    std::time::Duration::from_secs(u64::try_from(days.max(0)).unwrap_or(0) * 86_400)
}
