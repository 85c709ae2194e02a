//! Where the serving certificate of the external metrics API comes from, and keeping it fresh.
//!
//! The certificate is published on a watch channel; the server swaps it into its TLS
//! configuration without dropping connections, and registration rewrites the APIService's
//! caBundle when the CA changes.

pub mod plan;
mod secret;

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use thiserror::Error;
use tokio::sync::watch;

pub use plan::Policy;

use crate::supervisor::Supervisor;
use crate::tls::{self, CertifiedPem, TlsError};

/// What the server presents, and the CA bundle that trusts it (when known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    pub serving: CertifiedPem,
    pub ca_bundle: Option<String>,
}

#[derive(Debug, Clone)]
pub enum Source {
    /// A CA and certificate made in memory at start: one replica, out of cluster, tests.
    Ephemeral { names: Vec<String> },
    /// PEM files (e.g. a mounted cert-manager Secret), read again when they change.
    Files {
        cert: PathBuf,
        key: PathBuf,
        ca: Option<PathBuf>,
    },
    /// A Secret the operator creates, shares between its replicas and renews.
    ManagedSecret {
        namespace: String,
        name: String,
        names: Vec<String>,
        policy: Policy,
    },
    /// A Secret someone else keeps (`tls.crt`, `tls.key`, optional `ca.crt`), watched.
    ExistingSecret { namespace: String, name: String },
}

#[derive(Debug, Error)]
pub enum CertError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{path}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("Secret {namespace}/{name}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Secret {namespace}/{name}")]
    Secret {
        namespace: String,
        name: String,
        #[source]
        source: SecretProblem,
    },
    #[error("the private key does not belong to the certificate")]
    KeyMismatch,
    #[error(transparent)]
    Data(#[from] secret::DataError),
}

/// How often PEM files are read again: a mounted Secret changes on disk about a minute after
/// the Secret does.
const FILE_POLL: Duration = Duration::from_secs(10);

/// Loads the first certificate (an error stops start-up) and keeps it fresh until `shutdown`.
pub async fn start(
    source: Source,
    client: Client,
    supervisor: &Supervisor,
) -> Result<watch::Receiver<Material>, CertError> {
    match source {
        Source::Ephemeral { names } => {
            let pki = tls::ca_and_serving(&names, Policy::default().serving_validity)?;
            let (_, rx) = watch::channel(Material {
                serving: pki.serving,
                ca_bundle: Some(pki.ca.cert_pem),
            });
            Ok(rx)
        }
        Source::Files { cert, key, ca } => {
            let first = read_files(&cert, &key, ca.as_ref())?;
            let (tx, rx) = watch::channel(first);
            let shutdown = supervisor.shutdown();
            supervisor.spawn_service("serving certificate file poll", async move {
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(FILE_POLL) => {}
                    }
                    match read_files(&cert, &key, ca.as_ref()) {
                        Ok(material) => publish(&tx, material),
                        Err(error) => {
                            tracing::warn!(error = %crate::error_chain::Chain(&error), "cannot read the serving certificate files; serving the previous one");
                        }
                    }
                }
            });
            Ok(rx)
        }
        Source::ManagedSecret {
            namespace,
            name,
            names,
            policy,
        } => secret::managed(client, namespace, name, names, policy, supervisor).await,
        Source::ExistingSecret { namespace, name } => {
            secret::existing(client, namespace, name, supervisor).await
        }
    }
}

fn read_files(cert: &PathBuf, key: &PathBuf, ca: Option<&PathBuf>) -> Result<Material, CertError> {
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|source| CertError::File {
            path: path.display().to_string(),
            source,
        })
    };
    usable(Material {
        serving: CertifiedPem {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        },
        ca_bundle: ca.map(read).transpose()?,
    })
}

/// What is wrong with the certificate's Secret.
#[derive(Debug, Error)]
pub enum SecretProblem {
    #[error("not found")]
    NotFound,
    #[error(
        "exists and is not labelled {label}={value}; it is left alone (serve it with --extmetrics-tls-existing-secret)"
    )]
    NotOurs {
        label: &'static str,
        value: &'static str,
    },
    #[error("lost {0} writes in a row to other writers")]
    LostRaces(usize),
    #[error(transparent)]
    Data(#[from] secret::DataError),
    #[error(transparent)]
    Unusable(Box<CertError>),
}

/// Refuses a certificate that could not be served, so a half-written update never replaces a
/// working one.
fn usable(material: Material) -> Result<Material, CertError> {
    tls::inspect(&material.serving.cert_pem)?;
    if !tls::key_matches(&material.serving.cert_pem, &material.serving.key_pem) {
        return Err(CertError::KeyMismatch);
    }
    if let Some(bundle) = &material.ca_bundle {
        tls::inspect(bundle)?;
    }
    Ok(material)
}

fn publish(tx: &watch::Sender<Material>, material: Material) {
    tx.send_if_modified(|current| {
        if *current == material {
            return false;
        }
        let not_after = tls::inspect(&material.serving.cert_pem)
            .map(|info| info.not_after.unix_timestamp())
            .unwrap_or_default();
        tracing::info!(not_after, "serving a new certificate");
        *current = material;
        true
    });
}

/// A certificate that never changes (benchmarks and tests).
pub fn fixed(serving: CertifiedPem) -> watch::Receiver<Material> {
    watch::channel(Material {
        serving,
        ca_bundle: None,
    })
    .1
}
