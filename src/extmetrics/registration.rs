//! Registering the API with the aggregator through an APIService.
//!
//! Only one APIService can serve external.metrics.k8s.io in a cluster (KEDA and
//! prometheus-adapter want it too), so registration is opt-in, and an APIService this operator
//! did not create is never changed: it is reported, and the API stays reachable directly.

use k8s_openapi::ByteString;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{
    APIService, APIServiceSpec, ServiceReference,
};
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::{Client, ResourceExt};

use tokio::sync::watch;

use super::certs::Material;
use super::server::{GROUP, VERSION};
use crate::leader::Leadership;
use crate::supervisor::Supervisor;

pub const APISERVICE: &str = "v1beta1.external.metrics.k8s.io";
/// The label that makes an APIService ours: set on the ones the operator creates, and by the
/// Helm chart on the one it installs (whose `app.kubernetes.io/managed-by` is Helm's).
pub const OWNER_LABEL: &str = "autoscaling.modelsphere.dev/apiservice-owner";
const US: &str = crate::names::OPERATOR;

/// Where the aggregator should send requests.
pub struct Target<'a> {
    pub namespace: &'a str,
    pub service: &'a str,
    pub port: i32,
    /// PEM of the CA that signed the serving certificate.
    pub ca_pem: &'a str,
}

#[derive(Debug, PartialEq)]
pub enum Registration {
    Registered,
    /// Another APIService holds the group: who it sends requests to, and the object itself.
    HeldByAnother {
        holder: String,
        apiservice: Box<APIService>,
    },
}

/// Creates or updates our APIService; leaves anyone else's alone.
pub async fn register(client: &Client, target: &Target<'_>) -> Result<Registration, kube::Error> {
    let api: Api<APIService> = Api::all(client.clone());
    if let Some(existing) = api.get_opt(APISERVICE).await?
        && existing.labels().get(OWNER_LABEL).map(String::as_str) != Some(US)
    {
        let holder = existing
            .spec
            .clone()
            .and_then(|spec| spec.service)
            .map(|s| {
                format!(
                    "Service {}/{}",
                    s.namespace.unwrap_or_default(),
                    s.name.unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "the API server itself".to_owned());
        return Ok(Registration::HeldByAnother {
            holder,
            apiservice: Box::new(existing),
        });
    }
    let apiservice = APIService {
        metadata: ObjectMeta {
            name: Some(APISERVICE.to_owned()),
            labels: Some([(OWNER_LABEL.to_owned(), US.to_owned())].into()),
            ..Default::default()
        },
        spec: Some(APIServiceSpec {
            group: Some(GROUP.to_owned()),
            version: Some(VERSION.to_owned()),
            group_priority_minimum: 100,
            version_priority: 100,
            ca_bundle: Some(ByteString(target.ca_pem.as_bytes().to_vec())),
            service: Some(ServiceReference {
                namespace: Some(target.namespace.to_owned()),
                name: Some(target.service.to_owned()),
                port: Some(target.port),
            }),
            insecure_skip_tls_verify: None,
        }),
        status: None,
    };
    let mut value = serde_json::to_value(&apiservice).map_err(kube::Error::SerdeError)?;
    value["apiVersion"] = "apiregistration.k8s.io/v1".into();
    value["kind"] = "APIService".into();
    api.patch(
        APISERVICE,
        &PatchParams::apply(US).force(),
        &Patch::Apply(value),
    )
    .await?;
    Ok(Registration::Registered)
}

/// Registers the APIService for the operator's Service and reports a foreign holder.
pub struct Registrar {
    pub client: Client,
    pub namespace: String,
    pub service: String,
    pub port: i32,
}

impl Registrar {
    /// Registers once (before the operator reports ready, when it leads), then again whenever
    /// the CA bundle of the serving certificate changes or this replica becomes the leader.
    /// Only the leader writes the APIService.
    pub async fn keep_registered(
        self,
        mut certificates: watch::Receiver<Material>,
        leadership: Leadership,
        supervisor: &Supervisor,
    ) {
        let mut leading = leadership.changes();
        if leadership.may_write() {
            let first = certificates.borrow_and_update().ca_bundle.clone();
            self.register(first.as_deref()).await;
        }
        let shutdown = supervisor.shutdown();
        supervisor.spawn_service("APIService registration", async move {
            // Without an election leadership never changes, and a fixed certificate has no
            // sender: each then simply stops counting as a reason to wake up.
            let mut election = true;
            let mut rotating = true;
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    changed = certificates.changed(), if rotating => if changed.is_err() {
                        rotating = false;
                        continue;
                    },
                    changed = leading.changed(), if election => if changed.is_none() {
                        election = false;
                        continue;
                    },
                }
                if leadership.may_write() {
                    let bundle = certificates.borrow_and_update().ca_bundle.clone();
                    self.register(bundle.as_deref()).await;
                }
            }
        });
    }

    async fn register(&self, ca_bundle: Option<&str>) {
        let Some(ca_pem) = ca_bundle else {
            tracing::warn!(
                "the serving certificate has no CA bundle; the APIService is not updated"
            );
            return;
        };
        let target = Target {
            namespace: &self.namespace,
            service: &self.service,
            port: self.port,
            ca_pem,
        };
        let (namespace, service) = (&self.namespace, &self.service);
        match register(&self.client, &target).await {
            Ok(Registration::Registered) => {
                tracing::info!(apiservice = APISERVICE, service = %format!("{namespace}/{service}"), "registered with the aggregator")
            }
            Ok(Registration::HeldByAnother { holder, apiservice }) => {
                let message = format!(
                    "{APISERVICE} is served by {holder} and was left alone; external metrics of llmscaleoperator are reachable on its own Service only"
                );
                tracing::warn!(apiservice = APISERVICE, %holder, "{message}");
                let reporter = kube::runtime::events::Reporter {
                    controller: "llmscaleoperator".to_owned(),
                    instance: std::env::var("POD_NAME").ok(),
                };
                let recorder = kube::runtime::events::Recorder::new(self.client.clone(), reporter);
                let event = kube::runtime::events::Event {
                    type_: kube::runtime::events::EventType::Warning,
                    reason: "APIServiceHeldByAnother".to_owned(),
                    note: Some(message),
                    action: "Register".to_owned(),
                    secondary: None,
                };
                if let Err(error) = recorder
                    .publish(
                        &event,
                        &kube::Resource::object_ref(apiservice.as_ref(), &()),
                    )
                    .await
                {
                    tracing::warn!(error = %crate::error_chain::Chain(&error), "cannot publish the event");
                }
            }
            Err(error) => {
                tracing::warn!(error = %crate::error_chain::Chain(&error), "cannot register the APIService")
            }
        }
    }
}
