//! chart/: lints strictly, renders what each value asks for, refuses bad values at install time,
//! passes its flags to a binary that accepts them, and installs into the real apiserver.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

const CHART: &str = "chart";

/// `helm template` with `--set` values: the rendered objects, or helm's error.
fn render(sets: &[&str]) -> Result<Vec<Value>, String> {
    let mut args = vec!["template", "t", CHART, "--namespace", "ops"];
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = common::helm(&args);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).unwrap();
    Ok(serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect())
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

fn args(objects: &[Value]) -> Vec<String> {
    let deployment = find(objects, "Deployment", "t-llmscaleoperator").unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// Each toggle the chart offers, as `--set` values.
const TOGGLES: &[&[&str]] = &[
    &[],
    &["crd.enabled=false"],
    &["crd.keep=false"],
    &["rbac.namespaced=true", "watch.namespaces={ml,serving}"],
    &["rbac.create=false"],
    &[
        "serviceAccount.create=false",
        "serviceAccount.name=existing",
    ],
    &["externalMetrics.enabled=false"],
    &["externalMetrics.apiService.enabled=false"],
    &[
        "externalMetrics.certificate.source=existingSecret",
        "externalMetrics.certificate.existingSecret=from-cert-manager",
        "externalMetrics.certificate.certManagerInjectFrom=ops/extmetrics",
    ],
    &["metrics.serviceMonitor.enabled=true"],
    &["leaderElection.enabled=false", "manager.replicas=1"],
    &["networkPolicy.enabled=true"],
    &["metrics.secure.enabled=true"],
    &[
        "metrics.secure.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "networkPolicy.enabled=true",
        "externalMetrics.enabled=false",
    ],
    &["rbac.secretHeaders=true"],
    &[
        "rbac.secretHeaders=true",
        "rbac.namespaced=true",
        "watch.namespaces={ml,serving}",
    ],
    &[
        "manager.image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ],
];

#[test]
fn the_chart_lints_strictly_with_every_toggle() {
    for sets in TOGGLES {
        let mut args = vec!["lint", "--strict", CHART];
        for set in *sets {
            args.extend(["--set", set]);
        }
        let out = common::helm(&args);
        assert!(
            out.status.success(),
            "helm lint --strict {sets:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        render(sets).unwrap_or_else(|e| panic!("helm template {sets:?}: {e}"));
    }
}

#[test]
fn the_defaults_install_the_whole_operator() {
    let objects = render(&[]).unwrap();
    let names = kinds(&objects);
    for wanted in [
        "CustomResourceDefinition/llmscalers.autoscaling.modelsphere.dev",
        "ServiceAccount/t-llmscaleoperator",
        "ClusterRole/t-llmscaleoperator",
        "ClusterRoleBinding/t-llmscaleoperator",
        "Role/t-llmscaleoperator-certificate",
        "Role/t-llmscaleoperator-leader",
        "RoleBinding/t-llmscaleoperator-leader",
        "RoleBinding/t-llmscaleoperator-certificate",
        "ClusterRoleBinding/t-llmscaleoperator-auth-delegator",
        "RoleBinding/t-llmscaleoperator-auth-reader",
        "ClusterRole/t-llmscaleoperator-apiservice",
        "Deployment/t-llmscaleoperator",
        "PodDisruptionBudget/t-llmscaleoperator",
        "Service/t-llmscaleoperator",
        "APIService/v1beta1.external.metrics.k8s.io",
    ] {
        assert!(
            names.contains(&wanted.to_owned()),
            "{wanted} missing from {names:?}"
        );
    }
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("ServiceMonitor/") || n.starts_with("NetworkPolicy/"))
    );

    // The CRD is the one the types generate, kept on uninstall.
    let crd = find(
        &objects,
        "CustomResourceDefinition",
        "llmscalers.autoscaling.modelsphere.dev",
    )
    .unwrap();
    let generated: Value =
        serde_norway::from_str(&llmscaleoperator::api::crd_yaml().unwrap()).unwrap();
    assert_eq!(crd["spec"], generated["spec"]);
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );

    // The image follows appVersion; the pod runs locked down.
    let chart: Value = serde_norway::from_str(
        &std::fs::read_to_string(common::repo_root().join("chart/Chart.yaml")).unwrap(),
    )
    .unwrap();
    let deployment = find(&objects, "Deployment", "t-llmscaleoperator").unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        format!(
            "4pdosc/llmscaleoperator:{}",
            chart["appVersion"].as_str().unwrap()
        )
    );
    // One identity: the image the chart pulls and the one Artifact Hub lists are the chart's
    // name at its appVersion.
    let listed = chart["annotations"]["artifacthub.io/images"]
        .as_str()
        .unwrap();
    assert!(
        listed.contains(&format!(
            "docker.io/4pdosc/llmscaleoperator:{}",
            chart["appVersion"].as_str().unwrap()
        )),
        "artifacthub.io/images is not the appVersion's image: {listed}"
    );
    // On the Deployment and on its pods (what a PodMonitor or a log query selects on).
    for labels in [
        &deployment["metadata"]["labels"],
        &deployment["spec"]["template"]["metadata"]["labels"],
    ] {
        assert_eq!(labels["app.kubernetes.io/component"], "controller");
        assert_eq!(labels["app.kubernetes.io/part-of"], "llmscaleoperator");
    }
    // Two replicas: spread over nodes by default, never two on one node.
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(spread["whenUnsatisfiable"], "DoNotSchedule");
    assert_eq!(spread["nodeTaintsPolicy"], "Honor");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );

    // The operator keeps its certificate in a Secret, registers the chart's APIService and
    // points it at the chart's Service.
    let args = args(&objects);
    assert_eq!(
        deployment["spec"]["replicas"], 2,
        "two replicas, one leader"
    );
    for flag in [
        "--leader-elect",
        "--leader-elect-lease=t-llmscaleoperator",
        "--leader-elect-lease-seconds=15",
        "--extmetrics-tls-secret=t-llmscaleoperator-extmetrics-tls",
        "--register-apiservice",
        "--extmetrics-service=t-llmscaleoperator",
        "--extmetrics-service-port=443",
    ] {
        assert!(
            args.contains(&flag.to_owned()),
            "{flag} missing from {args:?}"
        );
    }
    let apiservice = find(&objects, "APIService", "v1beta1.external.metrics.k8s.io").unwrap();
    assert_eq!(
        apiservice["metadata"]["labels"]["autoscaling.modelsphere.dev/apiservice-owner"],
        "llmscaleoperator"
    );
    assert_eq!(apiservice["spec"]["service"]["name"], "t-llmscaleoperator");
    assert_eq!(apiservice["spec"]["service"]["namespace"], "ops");
    assert_eq!(
        llmscaleoperator::extmetrics::registration::OWNER_LABEL,
        "autoscaling.modelsphere.dev/apiservice-owner"
    );
    // Secrets only by name, in the operator's namespace.
    let role = find(&objects, "Role", "t-llmscaleoperator-certificate").unwrap();
    assert_eq!(role["metadata"]["namespace"], "ops");
    assert_eq!(
        role["rules"][1]["resourceNames"][0],
        "t-llmscaleoperator-extmetrics-tls"
    );
    let reader = find(&objects, "RoleBinding", "t-llmscaleoperator-auth-reader").unwrap();
    assert_eq!(reader["metadata"]["namespace"], "kube-system");
    assert_eq!(
        reader["roleRef"]["name"],
        "extension-apiserver-authentication-reader"
    );
}

#[test]
fn each_toggle_renders_what_it_says() {
    let no_crd = render(&["crd.enabled=false"]).unwrap();
    assert!(
        !kinds(&no_crd)
            .iter()
            .any(|k| k.starts_with("CustomResourceDefinition/"))
    );
    let not_kept = render(&["crd.keep=false"]).unwrap();
    let crd = find(
        &not_kept,
        "CustomResourceDefinition",
        "llmscalers.autoscaling.modelsphere.dev",
    )
    .unwrap();
    assert!(
        crd["metadata"]["annotations"]
            .get("helm.sh/resource-policy")
            .is_none()
    );

    // Secrets are readable only when asked for, and then only get.
    let secret_rules = |objects: &[serde_json::Value]| {
        let role = find(objects, "ClusterRole", "t-llmscaleoperator").unwrap();
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == "secrets")
            })
            .map(|r| r["verbs"].clone())
            .collect::<Vec<_>>()
    };
    assert!(secret_rules(&render(&[]).unwrap()).is_empty());
    assert_eq!(
        secret_rules(&render(&["rbac.secretHeaders=true"]).unwrap()),
        vec![serde_json::json!(["get"])]
    );
    let namespaced_secrets = render(&[
        "rbac.secretHeaders=true",
        "rbac.namespaced=true",
        "watch.namespaces={ml}",
    ])
    .unwrap();
    let role = find(&namespaced_secrets, "Role", "t-llmscaleoperator").unwrap();
    assert!(
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"] == serde_json::json!(["secrets"])
                && r["verbs"] == serde_json::json!(["get"])),
        "the watched namespace's Role may get Secrets: {role}"
    );

    let namespaced = render(&["rbac.namespaced=true", "watch.namespaces={ml}"]).unwrap();
    let names = kinds(&namespaced);
    assert!(
        !names.contains(&"ClusterRole/t-llmscaleoperator".to_owned()),
        "{names:?}"
    );
    let role = find(&namespaced, "Role", "t-llmscaleoperator").unwrap();
    assert_eq!(role["metadata"]["namespace"], "ml");
    assert!(
        args(&namespaced).contains(&"--namespace=ml".to_owned()),
        "watches only ml"
    );

    let no_api = render(&["externalMetrics.enabled=false"]).unwrap();
    assert!(args(&no_api).contains(&"--disable-extmetrics".to_owned()));
    let names = kinds(&no_api);
    assert!(
        !names.iter().any(|n| n.starts_with("APIService/")
            || n.contains("auth-")
            || n.contains("certificate")),
        "{names:?}"
    );

    let unregistered = render(&["externalMetrics.apiService.enabled=false"]).unwrap();
    assert!(!args(&unregistered).contains(&"--register-apiservice".to_owned()));
    assert!(
        find(
            &unregistered,
            "APIService",
            "v1beta1.external.metrics.k8s.io"
        )
        .is_none()
    );
    assert!(
        find(
            &unregistered,
            "ClusterRole",
            "t-llmscaleoperator-apiservice"
        )
        .is_none()
    );

    let cert_manager = render(&[
        "externalMetrics.certificate.source=existingSecret",
        "externalMetrics.certificate.existingSecret=from-cert-manager",
        "externalMetrics.certificate.certManagerInjectFrom=ops/extmetrics",
    ])
    .unwrap();
    let args_cm = args(&cert_manager);
    assert!(args_cm.contains(&"--extmetrics-tls-existing-secret=from-cert-manager".to_owned()));
    assert!(
        !args_cm.contains(&"--register-apiservice".to_owned()),
        "cert-manager injects the CA"
    );
    let apiservice = find(
        &cert_manager,
        "APIService",
        "v1beta1.external.metrics.k8s.io",
    )
    .unwrap();
    assert_eq!(
        apiservice["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "ops/extmetrics"
    );
    assert!(
        apiservice["metadata"]["labels"]
            .get("autoscaling.modelsphere.dev/apiservice-owner")
            .is_none()
    );
    let role = find(&cert_manager, "Role", "t-llmscaleoperator-certificate").unwrap();
    assert_eq!(
        role["rules"].as_array().unwrap().len(),
        1,
        "read-only: {role}"
    );
    assert_eq!(
        role["rules"][0]["verbs"],
        serde_json::json!(["get", "list", "watch"])
    );

    let monitored = render(&[
        "metrics.serviceMonitor.enabled=true",
        "networkPolicy.enabled=true",
    ])
    .unwrap();
    let monitor = find(&monitored, "ServiceMonitor", "t-llmscaleoperator").unwrap();
    // The scaler's namespace label is the operator's to say, not the scrape target's.
    assert_eq!(monitor["spec"]["endpoints"][0]["honorLabels"], true);
    assert!(find(&monitored, "NetworkPolicy", "t-llmscaleoperator").is_some());
    assert!(
        find(
            &monitored,
            "ClusterRole",
            "t-llmscaleoperator-metrics-reader"
        )
        .is_none()
    );

    // /metrics on its own authenticated port: the flag, the ports, a ServiceMonitor that shows
    // a token over https, the reader role to bind, and the reviews the operator needs even
    // without the external metrics API.
    let secure = render(&[
        "metrics.secure.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "networkPolicy.enabled=true",
        "externalMetrics.enabled=false",
    ])
    .unwrap();
    assert!(
        args(&secure).contains(&"--metrics-secure-address=0.0.0.0:8443".to_owned()),
        "{:?}",
        args(&secure)
    );
    let service = find(&secure, "Service", "t-llmscaleoperator").unwrap();
    assert_eq!(
        service["spec"]["ports"],
        serde_json::json!([{ "name": "metrics-https", "port": 8443, "targetPort": "metrics-https", "protocol": "TCP" }]),
        "the Service no longer exposes the open port"
    );
    let endpoint =
        &find(&secure, "ServiceMonitor", "t-llmscaleoperator").unwrap()["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics-https");
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["honorLabels"], true);
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    let policy = find(&secure, "NetworkPolicy", "t-llmscaleoperator").unwrap();
    assert_eq!(
        policy["spec"]["ingress"],
        serde_json::json!([{ "ports": [{ "port": "metrics-https", "protocol": "TCP" }] }])
    );
    let reader = find(&secure, "ClusterRole", "t-llmscaleoperator-metrics-reader").unwrap();
    assert_eq!(
        reader["rules"],
        serde_json::json!([{ "nonResourceURLs": ["/metrics"], "verbs": ["get"] }])
    );
    assert!(
        find(
            &secure,
            "ClusterRoleBinding",
            "t-llmscaleoperator-auth-delegator"
        )
        .is_some()
    );
    let deployment = find(&secure, "Deployment", "t-llmscaleoperator").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"],
        "metrics",
        "the probes stay on the open port"
    );

    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let pinned = render(&[&format!("manager.image.digest={digest}")]).unwrap();
    let deployment = find(&pinned, "Deployment", "t-llmscaleoperator").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("4pdosc/llmscaleoperator@{digest}")
    );
    let sa = render(&[
        "serviceAccount.create=false",
        "serviceAccount.name=existing",
    ])
    .unwrap();
    assert!(find(&sa, "ServiceAccount", "existing").is_none());
    let deployment = find(&sa, "Deployment", "t-llmscaleoperator").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "existing"
    );
}

#[test]
fn bad_values_are_refused_at_install_time() {
    for (sets, fragment) in [
        (
            vec!["replicas=2"],
            "additional properties 'replicas' not allowed",
        ),
        (vec!["manager.replicas=two"], "/manager/replicas"),
        (vec!["manager.logFormat=xml"], "/manager/logFormat"),
        (
            vec!["externalMetrics.certificate.source=vault"],
            "/externalMetrics/certificate/source",
        ),
        (vec!["manager.image.digest=latest"], "/manager/image/digest"),
        (
            vec!["rbac.namespaced=true"],
            "rbac.namespaced needs watch.namespaces",
        ),
        (
            vec![
                "externalMetrics.certificate.source=existingSecret",
                "externalMetrics.certificate.caBundle=Y2E=",
            ],
            "existingSecret is required",
        ),
        (
            vec![
                "externalMetrics.certificate.source=existingSecret",
                "externalMetrics.certificate.existingSecret=mine",
            ],
            "the APIService needs that certificate's CA",
        ),
        (
            vec!["serviceAccount.create=false"],
            "serviceAccount.name is required",
        ),
        (
            vec!["metrics.secure.enabled=true", "metrics.secure.port=8081"],
            "metrics.secure.port must differ from metrics.port",
        ),
        (
            vec!["metrics.secure.enabled=true", "metrics.secure.port=6443"],
            "metrics.secure.port must differ from externalMetrics.port",
        ),
        (vec!["metrics.secure.port=0"], "/metrics/secure/port"),
    ] {
        let error = render(&sets).expect_err(&format!("{sets:?} must be refused"));
        assert!(error.contains(fragment), "{sets:?}: {error}");
    }
}

#[test]
fn the_binary_accepts_every_flag_the_chart_passes() {
    for sets in TOGGLES {
        let objects = render(sets).unwrap();
        let args = args(&objects);
        // Unreachable on purpose: parsing must succeed and stop at the connection.
        let out = Command::new(env!("CARGO_BIN_EXE_llmscaleoperator"))
            .args(&args)
            .args(["--kubeconfig", "/nonexistent/kubeconfig"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains("/nonexistent/kubeconfig") && !stderr.contains("Usage:"),
            "{sets:?} {args:?}: {stderr}"
        );
    }
}

/// `helm install` into the local control plane: every object of the chart is accepted by the real
/// apiserver (CRD, RBAC, Deployment, Service, APIService), and uninstalling keeps the CRD.
#[tokio::test]
async fn helm_install_is_accepted_by_the_real_apiserver() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
    use kube::api::Api;

    let client = common::client().await;
    common::ensure_crd(&client).await;
    let ns = common::namespace(&client, "chart-install").await;
    let kubeconfig = common::kubeconfig_path();
    let kubeconfig = kubeconfig.to_str().unwrap();
    // As the README says: make deploy. The CRD is already there, applied without Helm (the other
    // tests install it, as make demo does): the release takes it over.
    let image = "registry.local:5000/team/llmscaleoperator:v9.9.9";
    let make_with = |target: &str, image: &str| {
        Command::new("make")
            .arg(target)
            .arg(format!("IMG={image}"))
            .arg("RELEASE=chart-it")
            .arg(format!("NAMESPACE={ns}"))
            .arg("HELM=target/cluster/bin/helm")
            .env("KUBECONFIG", kubeconfig)
            .current_dir(common::repo_root())
            .output()
            .unwrap()
    };
    let make = |target: &str| make_with(target, image);
    // Another provider (here, KEDA's metrics server) holds the external metrics API: the install
    // says so and what to set, and creates nothing, instead of taking the API away from it.
    let apiservices: Api<APIService> = Api::all(client.clone());
    common::remove_apiservice(&apiservices).await;
    let foreign: APIService = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "v1beta1.external.metrics.k8s.io" },
        "spec": {
            "group": "external.metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100, "insecureSkipTLSVerify": true,
            "service": { "namespace": "keda", "name": "keda-operator-metrics-apiserver", "port": 443 }
        }
    }))
    .unwrap();
    apiservices
        .create(&kube::api::PostParams::default(), &foreign)
        .await
        .unwrap();
    let out = make("deploy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "installed over KEDA's APIService");
    assert!(
        stderr.contains("served by Service keda/keda-operator-metrics-apiserver")
            && stderr.contains("--set externalMetrics.apiService.enabled=false"),
        "{stderr}"
    );
    let held = apiservices
        .get("v1beta1.external.metrics.k8s.io")
        .await
        .unwrap();
    assert_eq!(
        held.spec.unwrap().service.unwrap().namespace.as_deref(),
        Some("keda"),
        "the other provider keeps the API"
    );
    assert!(
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .get_opt("chart-it-llmscaleoperator")
            .await
            .unwrap()
            .is_none(),
        "a refused install creates nothing"
    );
    common::remove_apiservice(&apiservices).await;

    let out = make("deploy");
    assert!(
        out.status.success(),
        "make deploy: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let notes = String::from_utf8_lossy(&out.stdout);
    assert!(
        notes.contains("kubectl get apiservice v1beta1.external.metrics.k8s.io"),
        "{notes}"
    );

    let name = "chart-it-llmscaleoperator";
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .get("llmscalers.autoscaling.modelsphere.dev")
        .await
        .unwrap();
    assert_eq!(
        crd.metadata.annotations.as_ref().unwrap()["meta.helm.sh/release-name"],
        "chart-it"
    );
    Api::<ClusterRole>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .get(&format!("{name}-auth-delegator"))
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), "kube-system")
        .get(&format!("{name}-auth-reader"))
        .await
        .unwrap();
    let deployment = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get(name)
        .await
        .unwrap();
    let spec = deployment.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(
        spec.template.spec.unwrap().containers[0].image.as_deref(),
        Some(image),
        "make deploy installs the image it was given"
    );
    // The two replicas on two nodes (the full profile has two), as the default spread says.
    let selector = spec
        .selector
        .match_labels
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    let nodes = common::eventually(
        "both replicas scheduled",
        Duration::from_secs(60),
        || async {
            let list = pods
                .list(&kube::api::ListParams::default().labels(&selector))
                .await
                .ok()?;
            let nodes: std::collections::BTreeSet<String> = list
                .items
                .iter()
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            (list.items.len() == 2
                && list
                    .items
                    .iter()
                    .all(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some())))
            .then_some(nodes)
        },
    )
    .await;
    assert_eq!(nodes.len(), 2, "two replicas on one node: {nodes:?}");

    // An image by digest.
    let pinned = format!(
        "registry.local:5000/team/llmscaleoperator@sha256:{}",
        "ab".repeat(32)
    );
    let out = make_with("deploy", &pinned);
    assert!(
        out.status.success(),
        "make deploy by digest: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deployment = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get(name)
        .await
        .unwrap();
    assert_eq!(
        deployment.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some(pinned.as_str())
    );

    Api::<Service>::namespaced(client.clone(), &ns)
        .get(name)
        .await
        .unwrap();
    let apiservice = apiservices
        .get("v1beta1.external.metrics.k8s.io")
        .await
        .unwrap();
    assert_eq!(
        apiservice
            .spec
            .unwrap()
            .service
            .unwrap()
            .namespace
            .as_deref(),
        Some(ns.as_str())
    );

    let out = make("undeploy");
    assert!(
        out.status.success(),
        "make undeploy: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        apiservices
            .get_opt("v1beta1.external.metrics.k8s.io")
            .await
            .unwrap()
            .is_none(),
        "the APIService goes with the release"
    );
    assert!(
        crds.get_opt("llmscalers.autoscaling.modelsphere.dev")
            .await
            .unwrap()
            .is_some(),
        "crd.keep leaves the CRD (and every LLMScaler) in place"
    );
    common::delete_namespace(&client, &ns).await;
}

/// apiservice/ holds, for users without Helm, the chart's external-metrics objects as rendered
/// for a release `llmscaleoperator` in namespace `llmscaleoperator`, without Helm's labels.
/// `make manifests` rewrites them (UPDATE_MANIFESTS=1); otherwise they must match the chart.
#[test]
fn the_plain_apiservice_manifests_match_the_chart() {
    let mut args = vec![
        "template",
        "llmscaleoperator",
        CHART,
        "--namespace",
        "llmscaleoperator",
    ];
    args.extend([
        "--show-only",
        "templates/apiservice.yaml",
        "--show-only",
        "templates/service.yaml",
    ]);
    args.extend(["--show-only", "templates/rbac.yaml"]);
    let out = common::helm(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let objects: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect();
    let files = [
        (
            "apiservice/apiservice.yaml",
            vec![("APIService", "v1beta1.external.metrics.k8s.io")],
        ),
        (
            "apiservice/service.yaml",
            vec![("Service", "llmscaleoperator")],
        ),
        (
            "apiservice/auth-delegator.yaml",
            vec![("ClusterRoleBinding", "llmscaleoperator-auth-delegator")],
        ),
        (
            "apiservice/auth-reader.yaml",
            vec![("RoleBinding", "llmscaleoperator-auth-reader")],
        ),
        (
            "apiservice/apiservice-rbac.yaml",
            vec![
                ("ClusterRole", "llmscaleoperator-apiservice"),
                ("ClusterRoleBinding", "llmscaleoperator-apiservice"),
            ],
        ),
    ];
    let update = std::env::var("UPDATE_MANIFESTS").as_deref() == Ok("1");
    for (file, wanted) in files {
        let expected: Vec<Value> = wanted
            .iter()
            .map(|(kind, name)| {
                let mut object = find(&objects, kind, name)
                    .unwrap_or_else(|| panic!("the chart renders no {kind}/{name}"))
                    .clone();
                let labels = object["metadata"]["labels"].as_object_mut().unwrap();
                labels.remove("helm.sh/chart");
                labels.remove("app.kubernetes.io/managed-by");
                object
            })
            .collect();
        let path = common::repo_root().join(file);
        if update {
            let mut text = String::from(
                "# Generated from chart/ by `make manifests` (release llmscaleoperator in namespace\n# llmscaleoperator): do not edit by hand.\n",
            );
            for object in &expected {
                text.push_str("---\n");
                text.push_str(&serde_norway::to_string(object).unwrap());
            }
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run `make manifests`)", path.display()));
        let committed: Vec<Value> = serde_norway::Deserializer::from_str(&committed)
            .map(|doc| Value::deserialize(doc).unwrap())
            .filter(|v| !v.is_null())
            .collect();
        assert_eq!(
            committed, expected,
            "{file} differs from the chart: run `make manifests` and commit the result"
        );
    }
}

/// chart/README.md lists every leaf of values.yaml with its default, and nothing else: a value
/// added, renamed or given a new default without its documentation fails here.
#[test]
fn the_chart_readme_lists_every_value_with_its_default() {
    fn leaves(prefix: &str, value: &Value, out: &mut std::collections::BTreeMap<String, String>) {
        match value.as_object() {
            Some(map) if !map.is_empty() => {
                for (key, child) in map {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    leaves(&path, child, out);
                }
            }
            _ => {
                out.insert(prefix.to_owned(), value.to_string());
            }
        }
    }
    let values: Value = common::read_yaml("chart/values.yaml");
    let mut expected = std::collections::BTreeMap::new();
    leaves("", &values, &mut expected);

    let readme = std::fs::read_to_string(common::repo_root().join("chart/README.md")).unwrap();
    let table = readme
        .split_once("| value | default | |")
        .expect("chart/README.md has the values table")
        .1;
    let documented: std::collections::BTreeMap<String, String> = table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (
                cells[1].trim_matches('`').to_owned(),
                cells[2].trim_matches('`').to_owned(),
            )
        })
        .collect();
    assert_eq!(documented, expected);
}
