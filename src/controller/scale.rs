//! Writing spec.replicas: server-side apply with our own field manager and nothing else in the
//! apply set, so the operator owns exactly that field and Helm or kubectl keep the rest.

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::names::FIELD_MANAGER;

/// Sets spec.replicas of the target to `replicas`.
pub async fn write_replicas(
    client: &Client,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
    replicas: i32,
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let apply = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "replicas": replicas },
    });
    // force: take spec.replicas over from whoever set it last (kubectl scale, a Helm upgrade).
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &params, &Patch::Apply(apply)).await?;
    Ok(())
}
