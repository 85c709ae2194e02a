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
