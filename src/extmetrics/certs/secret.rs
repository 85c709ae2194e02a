//! The serving certificate kept in a Secret: the operator's own (created, shared by replicas,
//! renewed) or someone else's (read and watched).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use super::plan::{self, Observed, Plan, Policy};
use super::{CertError, Material, SecretProblem, publish, usable};
use crate::error_chain::Chain;
use crate::supervisor::Supervisor;
use crate::tls::{self, CaPem, CertifiedPem};

const TLS_CRT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
const CA_CRT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const US: &str = crate::names::OPERATOR;
/// After a failed look at the Secret, the next one comes this much later.
const RETRY: Duration = Duration::from_secs(15);
/// Writes lost to another replica before giving up for this round.
const MAX_RACES: usize = 5;

type Data = BTreeMap<String, ByteString>;

fn text<'a>(data: &'a Data, key: &'static str) -> Result<&'a str, DataError> {
    let value = data.get(key).ok_or(DataError::Missing(key))?;
    std::str::from_utf8(&value.0).map_err(|_| DataError::NotText(key))
}

/// What is wrong with a key of the Secret's data.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("no {0}")]
    Missing(&'static str),
    #[error("{0} is not PEM text")]
    NotText(&'static str),
}

/// Reads what an operator-managed Secret holds.
pub fn observe(data: Option<&Data>) -> Observed {
    let Some(data) = data else {
        return Observed::Missing;
    };
    let read = || -> Result<Observed, String> {
        let text = |key| text(data, key).map_err(|e| e.to_string());
        let (ca_crt, ca_key) = (text(CA_CRT)?, text(CA_KEY)?);
        let ca = tls::inspect(ca_crt).map_err(|e| format!("{CA_CRT}: {}", Chain(&e)))?;
        if !tls::key_matches(ca_crt, ca_key) {
            return Err(format!("{CA_KEY} does not belong to {CA_CRT}"));
        }
        let serving = (|| {
            let (tls_crt, tls_key) = (text(TLS_CRT)?, text(TLS_KEY)?);
            let serving = tls::inspect(tls_crt).map_err(|e| format!("{TLS_CRT}: {}", Chain(&e)))?;
            if !tls::key_matches(tls_crt, tls_key) {
                return Err(format!("{TLS_KEY} does not belong to {TLS_CRT}"));
            }
            Ok(serving)
        })();
        Ok(Observed::Usable { ca, serving })
    };
    read().unwrap_or_else(Observed::Unusable)
}

fn material(data: &Data) -> Result<Material, DataError> {
    Ok(Material {
        serving: CertifiedPem {
            cert_pem: text(data, TLS_CRT)?.to_owned(),
            key_pem: text(data, TLS_KEY)?.to_owned(),
        },
        ca_bundle: data
            .get(CA_CRT)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned()),
    })
}

/// The contents after a renewal the plan asked for.
fn renewed(
    plan: &Plan,
    data: Option<&Data>,
    names: &[String],
    policy: &Policy,
) -> Result<Data, CertError> {
    let now = time::OffsetDateTime::now_utc();
    let (ca, bundle) = match (plan, data) {
        (Plan::RenewServing(_), Some(data)) => {
            let ca = CaPem {
                cert_pem: text(data, CA_CRT).map_err(CertError::Data)?.to_owned(),
                key_pem: text(data, CA_KEY).map_err(CertError::Data)?.to_owned(),
            };
            let bundle = ca.cert_pem.clone();
            (ca, bundle)
        }
        _ => {
            let ca = tls::new_ca(policy.ca_validity)?;
            let old = data.and_then(|d| text(d, CA_CRT).ok());
            let bundle = plan::next_bundle(&ca.cert_pem, old, now);
            (ca, bundle)
        }
    };
    let serving = tls::issue_serving(&ca, names, policy.serving_validity)?;
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    Ok([
        (CA_CRT.to_owned(), bytes(&bundle)),
        (CA_KEY.to_owned(), bytes(&ca.key_pem)),
        (TLS_CRT.to_owned(), bytes(&serving.cert_pem)),
        (TLS_KEY.to_owned(), bytes(&serving.key_pem)),
    ]
    .into())
}

struct Managed {
    api: Api<Secret>,
    namespace: String,
    name: String,
    names: Vec<String>,
    policy: Policy,
}

impl Managed {
    fn api_error(&self, source: kube::Error) -> CertError {
        CertError::Api {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    fn secret_error(&self, source: SecretProblem) -> CertError {
        CertError::Secret {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    /// Reads the Secret, renews what needs it (one replica wins each write; the others read
    /// the winner's), and says what to serve and when to look again.
    async fn reconcile(&self) -> Result<(Material, Duration), CertError> {
        for _ in 0..MAX_RACES {
            let secret = self
                .api
                .get_opt(&self.name)
                .await
                .map_err(|e| self.api_error(e))?;
            if let Some(secret) = &secret
                && secret.labels().get(MANAGED_BY).map(String::as_str) != Some(US)
            {
                return Err(self.secret_error(SecretProblem::NotOurs {
                    label: MANAGED_BY,
                    value: US,
                }));
            }
            let data = secret.as_ref().map(|s| s.data.clone().unwrap_or_default());
            let observed = observe(data.as_ref());
            let now = time::OffsetDateTime::now_utc();
            let step = plan::plan(&observed, &self.names, &self.policy, now);
            let reason = match &step {
                Plan::Serve { recheck_in } => {
                    let data = data.unwrap_or_default();
                    let material = material(&data).map_err(|m| self.secret_error(m.into()))?;
                    return Ok((material, *recheck_in));
                }
                Plan::RenewServing(reason) | Plan::NewCa(reason) => reason.clone(),
            };
            let contents = renewed(&step, data.as_ref(), &self.names, &self.policy)?;
            let written = match secret {
                None => {
                    let fresh = Secret {
                        metadata: ObjectMeta {
                            name: Some(self.name.clone()),
                            namespace: Some(self.namespace.clone()),
                            labels: Some([(MANAGED_BY.to_owned(), US.to_owned())].into()),
                            ..Default::default()
                        },
                        type_: Some("kubernetes.io/tls".to_owned()),
                        data: Some(contents),
                        ..Default::default()
                    };
                    self.api.create(&PostParams::default(), &fresh).await
                }
                Some(mut existing) => {
                    // resourceVersion makes this a compare-and-swap between replicas.
                    existing.data = Some(contents);
                    existing.string_data = None;
                    self.api
                        .replace(&self.name, &PostParams::default(), &existing)
                        .await
                }
            };
            match written {
                Ok(_) => {
                    let new_ca = matches!(step, Plan::NewCa(_));
                    tracing::info!(secret = %self.name, %reason, new_ca, "issued the serving certificate");
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    tracing::debug!(secret = %self.name, "another replica wrote the certificate first");
                }
                Err(error) => return Err(self.api_error(error)),
            }
        }
        Err(self.secret_error(SecretProblem::LostRaces(MAX_RACES)))
    }
}

fn name_watch(api: Api<Secret>, name: &str) -> impl futures::Stream<Item = ()> + Send + use<> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(api, config)
        .default_backoff()
        .filter_map(|event| async move {
            match event {
                Ok(_) => Some(()),
                Err(error) => {
                    tracing::debug!(error = %crate::error_chain::Chain(&error), "certificate Secret watch interrupted");
                    None
                }
            }
        })
}

pub async fn managed(
    client: Client,
    namespace: String,
    name: String,
    names: Vec<String>,
    policy: Policy,
    supervisor: &Supervisor,
) -> Result<watch::Receiver<Material>, CertError> {
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let managed = Managed {
        api: api.clone(),
        namespace,
        name,
        names,
        policy,
    };
    let (first, mut recheck_in) = managed.reconcile().await?;
    let (tx, rx) = watch::channel(first);
    let shutdown = supervisor.shutdown();
    supervisor.spawn_service("managed serving certificate Secret watch", async move {
        let mut changes = Box::pin(name_watch(api, &managed.name));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(recheck_in) => {}
                Some(()) = changes.next() => {}
            }
            match managed.reconcile().await {
                Ok((material, next)) => {
                    publish(&tx, material);
                    recheck_in = next;
                }
                Err(error) => {
                    tracing::warn!(error = %Chain(&error), "cannot keep the serving certificate; serving the previous one");
                    recheck_in = RETRY;
                }
            }
        }
    });
    Ok(rx)
}

async fn read_existing(
    api: &Api<Secret>,
    namespace: &str,
    name: &str,
) -> Result<Material, CertError> {
    let secret_error = |source: SecretProblem| CertError::Secret {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    };
    let secret = api
        .get_opt(name)
        .await
        .map_err(|source| CertError::Api {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?
        .ok_or_else(|| secret_error(SecretProblem::NotFound))?;
    let data = secret.data.unwrap_or_default();
    let material = material(&data).map_err(|e| secret_error(e.into()))?;
    usable(material).map_err(|e| secret_error(SecretProblem::Unusable(Box::new(e))))
}

pub async fn existing(
    client: Client,
    namespace: String,
    name: String,
    supervisor: &Supervisor,
) -> Result<watch::Receiver<Material>, CertError> {
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let first = read_existing(&api, &namespace, &name).await?;
    let (tx, rx) = watch::channel(first);
    let shutdown = supervisor.shutdown();
    supervisor.spawn_service("serving certificate Secret watch", async move {
        let mut changes = Box::pin(name_watch(api.clone(), &name));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                Some(()) = changes.next() => {}
            }
            match read_existing(&api, &namespace, &name).await {
                Ok(material) => publish(&tx, material),
                Err(error) => {
                    tracing::warn!(error = %Chain(&error), "cannot read the serving certificate; serving the previous one");
                }
            }
        }
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> Data {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    #[test]
    fn what_a_managed_secret_holds_is_read_or_named_as_unusable() {
        assert_eq!(observe(None), Observed::Missing);
        let policy = Policy::default();
        let names = vec!["a.b.svc".to_owned()];
        let full = renewed(&Plan::NewCa("test".into()), None, &names, &policy).unwrap();
        assert!(matches!(observe(Some(&full)), Observed::Usable { .. }));
        let serving_problem = |data: &Data| match observe(Some(data)) {
            Observed::Usable { serving, .. } => serving.err(),
            other => panic!("{other:?}"),
        };
        let mut partial = full.clone();
        partial.remove(TLS_KEY);
        assert_eq!(serving_problem(&partial), Some("no tls.key".into()));
        let mut swapped = full.clone();
        swapped.insert(TLS_KEY.to_owned(), full[CA_KEY].clone());
        assert_eq!(
            serving_problem(&swapped),
            Some("tls.key does not belong to tls.crt".into())
        );
        let mut no_ca_key = full.clone();
        no_ca_key.remove(CA_KEY);
        assert_eq!(
            observe(Some(&no_ca_key)),
            Observed::Unusable("no ca.key".into())
        );
        let garbage = data(&[(CA_CRT, "x"), (CA_KEY, "x"), (TLS_CRT, "x"), (TLS_KEY, "x")]);
        assert!(
            matches!(observe(Some(&garbage)), Observed::Unusable(m) if m.starts_with("ca.crt"))
        );
    }

    #[test]
    fn a_renewal_keeps_the_ca_and_a_new_ca_keeps_the_old_one_in_the_bundle() {
        let policy = Policy::default();
        let names = vec!["a.b.svc".to_owned()];
        let first = renewed(&Plan::NewCa("test".into()), None, &names, &policy).unwrap();
        let again = renewed(
            &Plan::RenewServing("test".into()),
            Some(&first),
            &names,
            &policy,
        )
        .unwrap();
        assert_eq!(again[CA_CRT], first[CA_CRT]);
        assert_eq!(again[CA_KEY], first[CA_KEY]);
        assert_ne!(again[TLS_CRT], first[TLS_CRT]);
        let rotated = renewed(&Plan::NewCa("test".into()), Some(&again), &names, &policy).unwrap();
        let bundle = String::from_utf8(rotated[CA_CRT].0.clone()).unwrap();
        let old = String::from_utf8(first[CA_CRT].0.clone()).unwrap();
        let cas = tls::inspect_all(&bundle).unwrap();
        assert_eq!(cas.len(), 2);
        assert_eq!(cas[1], tls::inspect(&old).unwrap());
        let serving = tls::inspect(std::str::from_utf8(&rotated[TLS_CRT].0).unwrap()).unwrap();
        assert_eq!(serving.issuer, cas[0].subject);
        assert_eq!(serving.dns_names, names);
    }
}
