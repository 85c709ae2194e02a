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
    render_as("t", "ops", sets)
}

/// `helm template` of release `release` in namespace `ns`.
fn render_as(release: &str, ns: &str, sets: &[&str]) -> Result<Vec<Value>, String> {
    let mut args = vec!["template", release, CHART, "--namespace", ns];
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

/// The container arguments of the chart's one Deployment, whatever its name.
fn args(objects: &[Value]) -> Vec<String> {
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    args_of(objects, deployment["metadata"]["name"].as_str().unwrap())
}

/// The container arguments of Deployment `name`.
fn args_of(objects: &[Value], name: &str) -> Vec<String> {
    let deployment = find(objects, "Deployment", name).unwrap();
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
    &["leaderElection.shards=6", "manager.replicas=3"],
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
    &["nameOverride=scaler"],
    &["fullnameOverride=ops-autoscaler"],
    &["commonLabels.team=ml", "commonAnnotations.owner=platform"],
    &["podDisruptionBudget.enabled=false"],
    &["podDisruptionBudget.minAvailable=50%"],
    &["manager.hostNetwork=true"],
    &["rbac.aggregateToDefaultRoles=true"],
    &["rbac.secretHeaders=true", "rbac.secretNames={vllm-token}"],
    &[
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.namespace=monitoring",
        "metrics.serviceMonitor.scrapeTimeout=10s",
        "metrics.serviceMonitor.relabelings[0].targetLabel=team",
        "metrics.serviceMonitor.relabelings[0].replacement=ml",
    ],
    &[
        "metrics.secure.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.authorization.secretName=prometheus-token",
    ],
    &[
        "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.namespace=monitoring",
    ],
    &[
        "manager.deploymentAnnotations.a=b",
        "manager.serviceAnnotations.c=d",
        "manager.revisionHistoryLimit=3",
        "manager.extraVolumes[0].name=ca",
        "manager.extraVolumes[0].configMap.name=ca-bundle",
        "manager.extraVolumeMounts[0].name=ca",
        "manager.extraVolumeMounts[0].mountPath=/etc/ca",
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
    // A token from a Secret (authorization), never a file of Prometheus's pod.
    assert!(endpoint.get("bearerTokenFile").is_none(), "{endpoint}");
    assert_eq!(
        endpoint["authorization"]["credentials"],
        serde_json::json!({ "name": "t-llmscaleoperator-metrics-scraper", "key": "token" })
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
        (
            vec!["commonLabels.app\\.kubernetes\\.io/part-of=platform"],
            "commonLabels.app.kubernetes.io/part-of: the chart sets this label itself",
        ),
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
        (
            vec!["rbac.secretNames={vllm-token}"],
            "rbac.secretNames limits rbac.secretHeaders",
        ),
        (
            vec!["rbac.secretHeaders=true", "rbac.secretNames={Not_A_Name}"],
            "/rbac/secretNames/0",
        ),
        (vec!["manager.dnsPolicy=Cluster"], "/manager/dnsPolicy"),
        (
            vec!["podDisruptionBudget.maxUnavailable=half"],
            "/podDisruptionBudget/maxUnavailable",
        ),
        (
            vec!["metrics.serviceMonitor.scrapeTimeout=10"],
            "/metrics/serviceMonitor/scrapeTimeout",
        ),
        (
            vec!["metrics.serviceMonitor.authorization.file=/token"],
            "additional properties 'file' not allowed",
        ),
        (
            vec!["metrics.prometheusRule.alerts.LLMScaleOperatorNoLeader.for=soon"],
            "/metrics/prometheusRule/alerts/LLMScaleOperatorNoLeader/for",
        ),
        (vec!["nameOverride=1"], "/nameOverride"),
        (vec!["leaderElection.shards=0"], "/leaderElection/shards"),
        (vec!["leaderElection.shards=65"], "/leaderElection/shards"),
        (
            vec![
                "leaderElection.shards=2",
                "leaderElection.enabled=false",
                "manager.replicas=1",
            ],
            "leaderElection.shards > 1 needs leaderElection.enabled",
        ),
    ] {
        let error = render(&sets).expect_err(&format!("{sets:?} must be refused"));
        assert!(error.contains(fragment), "{sets:?}: {error}");
    }
}

/// Shards: the flag reaches the operator, and the leader Role lets it list the Leases and write
/// the shard and member Leases (names it cannot know in advance: pod names); without shards the
/// Role stays on the one Lease by name.
#[test]
fn shards_reach_the_operator_with_the_leases_they_need() {
    let objects = render(&["leaderElection.shards=6", "manager.replicas=3"]).unwrap();
    let sharded = args(&objects);
    assert!(sharded.contains(&"--shards=6".to_owned()), "{sharded:?}");
    assert!(
        sharded.contains(&"--leader-elect".to_owned()),
        "{sharded:?}"
    );
    let leader = find(&objects, "Role", "t-llmscaleoperator-leader").unwrap();
    assert_eq!(
        leader["rules"],
        serde_json::json!([
            { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"] },
            { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
              "verbs": ["list", "update", "delete"] }
        ])
    );

    let objects = render(&[]).unwrap();
    assert!(
        !args(&objects).iter().any(|a| a.starts_with("--shards")),
        "one shard is the operator's default: no flag"
    );
    let leader = find(&objects, "Role", "t-llmscaleoperator-leader").unwrap();
    assert_eq!(
        leader["rules"][1]["resourceNames"],
        serde_json::json!(["t-llmscaleoperator"])
    );
    assert_eq!(
        leader["rules"][1]["verbs"],
        serde_json::json!(["get", "update"])
    );
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

/// The names of every rendered object.
fn names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn name_overrides_rename_every_object() {
    // nameOverride replaces the chart's name: in the full name and in the name label.
    let objects = render(&["nameOverride=scaler"]).unwrap();
    let deployment = find(&objects, "Deployment", "t-scaler")
        .unwrap_or_else(|| panic!("no Deployment t-scaler in {:?}", kinds(&objects)));
    assert_eq!(
        deployment["metadata"]["labels"]["app.kubernetes.io/name"],
        "scaler"
    );
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "scaler"
    );
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
        "scaler"
    );
    assert!(args_of(&objects, "t-scaler").contains(&"--leader-elect-lease=t-scaler".to_owned()));
    let service = find(&objects, "Service", "t-scaler").unwrap();
    assert_eq!(
        service["spec"]["selector"]["app.kubernetes.io/name"],
        "scaler"
    );

    // fullnameOverride replaces the whole name; nothing keeps the default one.
    let objects = render(&["fullnameOverride=ops-autoscaler"]).unwrap();
    for name in names(&objects) {
        assert!(
            !name.contains("llmscaleoperator"),
            "{name} keeps the default name: {:?}",
            kinds(&objects)
        );
    }
    for (kind, name) in [
        ("Deployment", "ops-autoscaler"),
        ("Service", "ops-autoscaler"),
        ("ServiceAccount", "ops-autoscaler"),
        ("ClusterRole", "ops-autoscaler"),
        ("Role", "ops-autoscaler-leader"),
        ("Role", "ops-autoscaler-certificate"),
        ("PodDisruptionBudget", "ops-autoscaler"),
    ] {
        assert!(
            find(&objects, kind, name).is_some(),
            "{kind}/{name} missing from {:?}",
            kinds(&objects)
        );
    }
    let args = args_of(&objects, "ops-autoscaler");
    for flag in [
        "--leader-elect-lease=ops-autoscaler",
        "--extmetrics-service=ops-autoscaler",
        "--extmetrics-tls-secret=ops-autoscaler-extmetrics-tls",
    ] {
        assert!(args.contains(&flag.to_owned()), "{flag} missing: {args:?}");
    }
    let apiservice = find(&objects, "APIService", "v1beta1.external.metrics.k8s.io").unwrap();
    assert_eq!(apiservice["spec"]["service"]["name"], "ops-autoscaler");
    let leader = find(&objects, "Role", "ops-autoscaler-leader").unwrap();
    assert_eq!(
        leader["rules"][1]["resourceNames"],
        serde_json::json!(["ops-autoscaler"])
    );
}

#[test]
fn common_labels_and_annotations_reach_every_object() {
    // As many objects as the chart makes.
    let objects = render(&[
        "commonLabels.team=ml",
        "commonAnnotations.owner=platform",
        "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn",
        "metrics.secure.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
        "dashboard.enabled=true",
        "networkPolicy.enabled=true",
        "rbac.aggregateToDefaultRoles=true",
    ])
    .unwrap();
    let kinds_seen: std::collections::BTreeSet<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "CustomResourceDefinition",
        "Deployment",
        "Service",
        "ServiceAccount",
        "Secret",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceMonitor",
        "PrometheusRule",
        "ConfigMap",
        "APIService",
    ] {
        assert!(kinds_seen.contains(kind), "no {kind} in {kinds_seen:?}");
    }
    for object in &objects {
        let meta = &object["metadata"];
        assert_eq!(meta["labels"]["team"], "ml", "{}", meta);
        assert_eq!(meta["annotations"]["owner"], "platform", "{}", meta);
        // The chart's own labels stay.
        assert_eq!(
            meta["labels"]["app.kubernetes.io/instance"], "t",
            "{}",
            meta
        );
    }
    // An object's own annotations stay next to the common ones.
    let crd = find(
        &objects,
        "CustomResourceDefinition",
        "llmscalers.autoscaling.modelsphere.dev",
    )
    .unwrap();
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let sa = find(&objects, "ServiceAccount", "t-llmscaleoperator").unwrap();
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn"
    );
    // And the pods carry the labels too.
    let deployment = find(&objects, "Deployment", "t-llmscaleoperator").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["labels"]["team"],
        "ml"
    );
    // A pod label of the same key wins on the pods (one key, not two).
    let pods = render(&["commonLabels.team=ml", "manager.podLabels.team=serving"]).unwrap();
    let deployment = find(&pods, "Deployment", "t-llmscaleoperator").unwrap();
    assert_eq!(deployment["metadata"]["labels"]["team"], "ml");
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["labels"]["team"],
        "serving"
    );
    let injected = render(&[
        "commonAnnotations.owner=platform",
        "externalMetrics.certificate.source=existingSecret",
        "externalMetrics.certificate.existingSecret=from-cert-manager",
        "externalMetrics.certificate.certManagerInjectFrom=ops/extmetrics",
    ])
    .unwrap();
    let apiservice = find(&injected, "APIService", "v1beta1.external.metrics.k8s.io").unwrap();
    assert_eq!(
        apiservice["metadata"]["annotations"],
        serde_json::json!({ "cert-manager.io/inject-ca-from": "ops/extmetrics", "owner": "platform" })
    );
}

#[test]
fn the_pod_disruption_budget_follows_its_values() {
    let pdb = |sets: &[&str]| {
        find(
            &render(sets).unwrap(),
            "PodDisruptionBudget",
            "t-llmscaleoperator",
        )
        .map(|p| p["spec"].clone())
    };
    let default = pdb(&[]).unwrap();
    assert_eq!(default["maxUnavailable"], 1);
    assert!(default.get("minAvailable").is_none());
    assert!(pdb(&["podDisruptionBudget.enabled=false"]).is_none());
    assert!(
        pdb(&["manager.replicas=1"]).is_none(),
        "one replica: nothing to keep"
    );
    let min = pdb(&["podDisruptionBudget.minAvailable=1"]).unwrap();
    assert_eq!(min["minAvailable"], 1);
    assert!(min.get("maxUnavailable").is_none(), "{min}");
    let percent = pdb(&["podDisruptionBudget.maxUnavailable=50%"]).unwrap();
    assert_eq!(percent["maxUnavailable"], "50%");
}

#[test]
fn host_network_runs_in_the_nodes_network_with_cluster_dns() {
    let pod = |sets: &[&str]| {
        find(&render(sets).unwrap(), "Deployment", "t-llmscaleoperator").unwrap()["spec"]
            ["template"]["spec"]
            .clone()
    };
    let default = pod(&[]);
    assert!(default.get("hostNetwork").is_none());
    assert!(default.get("dnsPolicy").is_none());
    let host = pod(&["manager.hostNetwork=true"]);
    assert_eq!(host["hostNetwork"], true);
    assert_eq!(host["dnsPolicy"], "ClusterFirstWithHostNet");
    let chosen = pod(&["manager.hostNetwork=true", "manager.dnsPolicy=Default"]);
    assert_eq!(chosen["dnsPolicy"], "Default");
    let dns_only = pod(&["manager.dnsPolicy=None"]);
    assert!(dns_only.get("hostNetwork").is_none());
    assert_eq!(dns_only["dnsPolicy"], "None");
}

#[test]
fn the_deployment_and_service_take_their_annotations_history_and_volumes() {
    let objects = render(&[
        "manager.deploymentAnnotations.reloader\\.stakater\\.com/search=enabled",
        "manager.serviceAnnotations.service\\.beta\\.kubernetes\\.io/topology=auto",
        "manager.revisionHistoryLimit=3",
        "manager.extraVolumes[0].name=ca",
        "manager.extraVolumes[0].configMap.name=ca-bundle",
        "manager.extraVolumeMounts[0].name=ca",
        "manager.extraVolumeMounts[0].mountPath=/etc/ca",
        "manager.extraVolumeMounts[0].readOnly=true",
    ])
    .unwrap();
    let deployment = find(&objects, "Deployment", "t-llmscaleoperator").unwrap();
    assert_eq!(
        deployment["metadata"]["annotations"],
        serde_json::json!({ "reloader.stakater.com/search": "enabled" })
    );
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 3);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"],
        serde_json::json!([{ "name": "ca", "configMap": { "name": "ca-bundle" } }])
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        serde_json::json!([{ "name": "ca", "mountPath": "/etc/ca", "readOnly": true }])
    );
    assert!(
        deployment["spec"]["template"]["metadata"]
            .get("annotations")
            .is_none(),
        "deployment annotations are not pod annotations"
    );
    let service = find(&objects, "Service", "t-llmscaleoperator").unwrap();
    assert_eq!(
        service["metadata"]["annotations"],
        serde_json::json!({ "service.beta.kubernetes.io/topology": "auto" })
    );

    let default = render(&[]).unwrap();
    let deployment = find(&default, "Deployment", "t-llmscaleoperator").unwrap();
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 10);
    assert!(deployment["metadata"].get("annotations").is_none());
    assert!(
        deployment["spec"]["template"]["spec"]
            .get("volumes")
            .is_none()
    );
    assert!(
        find(&default, "Service", "t-llmscaleoperator").unwrap()["metadata"]
            .get("annotations")
            .is_none()
    );
}

/// The rules of every Role and ClusterRole of `objects` that name Secrets, but for the chart's
/// own certificate Role.
fn secret_rules(objects: &[Value]) -> Vec<(String, Value)> {
    objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .filter(|o| {
            !o["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-certificate")
        })
        .flat_map(|o| {
            o["rules"]
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
                .map(|r| {
                    (
                        o["metadata"]["name"].as_str().unwrap().to_owned(),
                        r.clone(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn secret_reads_can_be_limited_to_named_secrets() {
    let any = secret_rules(&render(&["rbac.secretHeaders=true"]).unwrap());
    assert_eq!(
        any,
        vec![(
            "t-llmscaleoperator".to_owned(),
            serde_json::json!({ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get"] })
        )]
    );
    let named = secret_rules(
        &render(&[
            "rbac.secretHeaders=true",
            "rbac.secretNames={vllm-token,tls}",
        ])
        .unwrap(),
    );
    assert_eq!(
        named,
        vec![(
            "t-llmscaleoperator".to_owned(),
            serde_json::json!({
                "apiGroups": [""], "resources": ["secrets"],
                "resourceNames": ["vllm-token", "tls"], "verbs": ["get"]
            })
        )]
    );
    // With namespaced Roles: the names in each watched namespace.
    let namespaced = render(&[
        "rbac.secretHeaders=true",
        "rbac.secretNames={vllm-token}",
        "rbac.namespaced=true",
        "watch.namespaces={ml,serving}",
    ])
    .unwrap();
    let rules = secret_rules(&namespaced);
    assert_eq!(rules.len(), 2, "{rules:?}");
    for (_, rule) in rules {
        assert_eq!(rule["resourceNames"], serde_json::json!(["vllm-token"]));
        assert_eq!(rule["verbs"], serde_json::json!(["get"]));
    }
}

#[test]
fn aggregated_cluster_roles_let_namespace_users_manage_llmscalers() {
    let default = render(&[]).unwrap();
    assert!(find(&default, "ClusterRole", "t-llmscaleoperator-view").is_none());
    assert!(find(&default, "ClusterRole", "t-llmscaleoperator-edit").is_none());
    let no_rbac = render(&["rbac.aggregateToDefaultRoles=true", "rbac.create=false"]).unwrap();
    assert!(find(&no_rbac, "ClusterRole", "t-llmscaleoperator-view").is_none());

    let objects = render(&["rbac.aggregateToDefaultRoles=true"]).unwrap();
    let verbs_on_llmscalers = |role: &Value| -> Vec<String> {
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["apiGroups"] == serde_json::json!(["autoscaling.modelsphere.dev"])
                    && r["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|x| x == "llmscalers")
            })
            .flat_map(|r| r["verbs"].as_array().unwrap().clone())
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let view = find(&objects, "ClusterRole", "t-llmscaleoperator-view").unwrap();
    let labels = &view["metadata"]["labels"];
    assert_eq!(
        labels["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    assert!(
        labels
            .get("rbac.authorization.k8s.io/aggregate-to-edit")
            .is_none()
    );
    assert_eq!(verbs_on_llmscalers(view), ["get", "list", "watch"]);

    let edit = find(&objects, "ClusterRole", "t-llmscaleoperator-edit").unwrap();
    let labels = &edit["metadata"]["labels"];
    assert_eq!(
        labels["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );
    assert_eq!(
        labels["rbac.authorization.k8s.io/aggregate-to-admin"],
        "true"
    );
    let verbs = verbs_on_llmscalers(edit);
    for verb in [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ] {
        assert!(
            verbs.contains(&verb.to_owned()),
            "edit lacks {verb}: {verbs:?}"
        );
    }
}

#[test]
fn the_service_monitor_takes_its_scrape_settings() {
    let plain = render(&[
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.namespace=monitoring",
        "metrics.serviceMonitor.scrapeTimeout=10s",
        "metrics.serviceMonitor.relabelings[0].targetLabel=team",
        "metrics.serviceMonitor.relabelings[0].replacement=ml",
        "metrics.serviceMonitor.metricRelabelings[0].action=drop",
        "metrics.serviceMonitor.metricRelabelings[0].sourceLabels={__name__}",
        "metrics.serviceMonitor.metricRelabelings[0].regex=go_.*",
    ])
    .unwrap();
    let monitor = find(&plain, "ServiceMonitor", "t-llmscaleoperator").unwrap();
    assert_eq!(monitor["metadata"]["namespace"], "monitoring");
    // Still the release's Service, from the other namespace.
    assert_eq!(
        monitor["spec"]["namespaceSelector"],
        serde_json::json!({ "matchNames": ["ops"] })
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["scrapeTimeout"], "10s");
    assert_eq!(
        endpoint["relabelings"],
        serde_json::json!([{ "targetLabel": "team", "replacement": "ml" }])
    );
    assert_eq!(
        endpoint["metricRelabelings"],
        serde_json::json!([{ "action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*" }])
    );
    assert!(
        endpoint.get("authorization").is_none(),
        "plain http: {endpoint}"
    );
    assert!(find(&plain, "Secret", "t-llmscaleoperator-metrics-scraper").is_none());

    // Defaults: the release's namespace, Prometheus's own timeout.
    let default = render(&["metrics.serviceMonitor.enabled=true"]).unwrap();
    let monitor = find(&default, "ServiceMonitor", "t-llmscaleoperator").unwrap();
    assert_eq!(monitor["metadata"]["namespace"], "ops");
    assert!(monitor["spec"].get("namespaceSelector").is_none());
    let endpoint = &monitor["spec"]["endpoints"][0];
    for absent in ["scrapeTimeout", "relabelings", "metricRelabelings"] {
        assert!(endpoint.get(absent).is_none(), "{absent}: {endpoint}");
    }

    // The secure endpoint: a token from a Secret of the chart's scraper ServiceAccount, in the
    // ServiceMonitor's namespace, that may get /metrics; tlsConfig as given.
    let secure = render(&[
        "metrics.secure.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.namespace=monitoring",
        "metrics.serviceMonitor.tlsConfig.serverName=t-llmscaleoperator.ops.svc",
        "metrics.serviceMonitor.tlsConfig.ca.secret.name=metrics-ca",
        "metrics.serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
        "metrics.serviceMonitor.scrapeTimeout=5s",
        "metrics.serviceMonitor.relabelings[0].targetLabel=team",
        "metrics.serviceMonitor.relabelings[0].replacement=ml",
        "metrics.serviceMonitor.metricRelabelings[0].action=labeldrop",
        "metrics.serviceMonitor.metricRelabelings[0].regex=pod",
    ])
    .unwrap();
    let monitor = find(&secure, "ServiceMonitor", "t-llmscaleoperator").unwrap();
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics-https");
    assert_eq!(
        endpoint["tlsConfig"],
        serde_json::json!({
            "serverName": "t-llmscaleoperator.ops.svc",
            "ca": { "secret": { "name": "metrics-ca", "key": "ca.crt" } }
        })
    );
    assert_eq!(endpoint["scrapeTimeout"], "5s");
    assert_eq!(endpoint["relabelings"][0]["targetLabel"], "team");
    assert_eq!(
        endpoint["metricRelabelings"],
        serde_json::json!([{ "action": "labeldrop", "regex": "pod" }])
    );
    assert_eq!(endpoint["authorization"]["type"], "Bearer");
    assert_eq!(
        endpoint["authorization"]["credentials"],
        serde_json::json!({ "name": "t-llmscaleoperator-metrics-scraper", "key": "token" })
    );
    let text = serde_json::to_string(&secure).unwrap();
    assert!(!text.contains("bearerTokenFile"), "no file token anywhere");
    let sa = find(
        &secure,
        "ServiceAccount",
        "t-llmscaleoperator-metrics-scraper",
    )
    .unwrap();
    assert_eq!(sa["metadata"]["namespace"], "monitoring");
    let secret = find(&secure, "Secret", "t-llmscaleoperator-metrics-scraper").unwrap();
    assert_eq!(secret["metadata"]["namespace"], "monitoring");
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "t-llmscaleoperator-metrics-scraper"
    );
    let binding = find(
        &secure,
        "ClusterRoleBinding",
        "t-llmscaleoperator-metrics-scraper",
    )
    .unwrap();
    assert_eq!(
        binding["roleRef"]["name"],
        "t-llmscaleoperator-metrics-reader"
    );
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{ "kind": "ServiceAccount", "name": "t-llmscaleoperator-metrics-scraper", "namespace": "monitoring" }])
    );
    // Without a tlsConfig: the operator's own certificate is not verified.
    let secure_default = render(&[
        "metrics.secure.enabled=true",
        "metrics.serviceMonitor.enabled=true",
    ])
    .unwrap();
    assert_eq!(
        find(&secure_default, "ServiceMonitor", "t-llmscaleoperator").unwrap()["spec"]["endpoints"]
            [0]["tlsConfig"],
        serde_json::json!({ "insecureSkipVerify": true })
    );

    // A token of the user's own: no scraper of the chart.
    let own = render(&[
        "metrics.secure.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.authorization.secretName=prometheus-token",
        "metrics.serviceMonitor.authorization.key=jwt",
    ])
    .unwrap();
    let monitor = find(&own, "ServiceMonitor", "t-llmscaleoperator").unwrap();
    assert_eq!(
        monitor["spec"]["endpoints"][0]["authorization"]["credentials"],
        serde_json::json!({ "name": "prometheus-token", "key": "jwt" })
    );
    let names = names(&own);
    assert!(
        !names.iter().any(|n| n.contains("metrics-scraper")),
        "{names:?}"
    );
}

/// The alert names of chart/files/alerts.yaml, in order.
fn alert_names() -> Vec<String> {
    let file: Value = common::read_yaml("chart/files/alerts.yaml");
    file["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect()
}

/// The alerting rules of a rendered PrometheusRule, by name.
fn rendered_alerts(rule: &Value) -> std::collections::BTreeMap<String, Value> {
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .filter_map(|r| Some((r["alert"].as_str()?.to_owned(), r)))
        .collect()
}

#[test]
fn the_prometheus_rule_goes_where_asked_and_tunes_alerts_by_name() {
    let names = alert_names();
    assert!(names.len() >= 2, "{names:?}");
    let (dropped, slowed, relabelled) = (&names[0], &names[1], &names[names.len() - 1]);
    let file: Value = common::read_yaml("chart/files/alerts.yaml");
    let file_alerts = rendered_alerts(&serde_json::json!({ "spec": file }));

    let disable = format!("metrics.prometheusRule.alerts.{dropped}.enabled=false");
    let slow = format!("metrics.prometheusRule.alerts.{slowed}.for=2h");
    let label = format!("metrics.prometheusRule.alerts.{relabelled}.labels.severity=page");
    let objects = render(&[
        "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.namespace=monitoring",
        &disable,
        &slow,
        &label,
    ])
    .unwrap();
    let rule = find(&objects, "PrometheusRule", "t-llmscaleoperator").unwrap();
    assert_eq!(rule["metadata"]["namespace"], "monitoring");
    let alerts = rendered_alerts(rule);
    assert!(!alerts.contains_key(dropped), "{dropped} is disabled");
    assert_eq!(alerts.len(), names.len() - 1);
    assert_eq!(alerts[slowed]["for"], "2h");
    assert_eq!(alerts[relabelled]["labels"]["severity"], "page");
    // Everything else as the file says.
    for (name, alert) in &alerts {
        let mut expected = file_alerts[name].clone();
        if name == slowed {
            expected["for"] = "2h".into();
        }
        if name == relabelled {
            expected["labels"]["severity"] = "page".into();
        }
        assert_eq!(alert, &expected, "{name}");
    }

    // Defaults: the release's namespace, the file's rules.
    let default = render(&["metrics.prometheusRule.enabled=true"]).unwrap();
    let rule = find(&default, "PrometheusRule", "t-llmscaleoperator").unwrap();
    assert_eq!(rule["metadata"]["namespace"], "ops");
    assert_eq!(rule["spec"]["groups"], file["groups"]);

    let error = render(&[
        "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.alerts.NoSuchAlert.enabled=false",
    ])
    .expect_err("an unknown alert name must be refused");
    assert!(
        error.contains("metrics.prometheusRule.alerts.NoSuchAlert: no such alert"),
        "{error}"
    );
}

/// In the real apiserver: the secure ServiceMonitor's token (the chart's scraper ServiceAccount
/// and its token Secret, filled by the token controller) is accepted and may get /metrics, which
/// is what the operator checks (TokenReview, SubjectAccessReview); the aggregated ClusterRoles
/// reach the built-in view, edit and admin roles, so namespace users may manage LLMScalers.
#[tokio::test]
async fn the_scraper_token_and_the_aggregated_roles_work_in_the_real_apiserver() {
    use k8s_openapi::api::authentication::v1::TokenReview;
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use kube::api::{Api, PostParams};

    let client = common::client().await;
    common::ensure_crd(&client).await;
    let ns = common::namespace(&client, "chart-scrape").await;
    // The release named after the namespace: its cluster-wide objects are this test's own.
    let objects = render_as(
        &ns,
        &ns,
        &[
            "metrics.secure.enabled=true",
            "metrics.serviceMonitor.enabled=true",
            "rbac.aggregateToDefaultRoles=true",
        ],
    )
    .unwrap();
    let fullname = format!("{ns}-llmscaleoperator");
    let scraper = format!("{fullname}-metrics-scraper");
    let wanted = [
        ("ServiceAccount", scraper.clone()),
        ("Secret", scraper.clone()),
        ("ClusterRole", format!("{fullname}-metrics-reader")),
        ("ClusterRoleBinding", scraper.clone()),
        ("ClusterRole", format!("{fullname}-view")),
        ("ClusterRole", format!("{fullname}-edit")),
    ];
    let items: Vec<Value> = wanted
        .iter()
        .map(|(kind, name)| {
            find(&objects, kind, name)
                .unwrap_or_else(|| panic!("the chart renders no {kind}/{name}"))
                .clone()
        })
        .collect();
    let file = std::env::temp_dir().join(format!("{ns}.json"));
    std::fs::write(
        &file,
        serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": items }).to_string(),
    )
    .unwrap();
    let file = file.to_str().unwrap().to_owned();
    let _cleanup = Cleanup {
        file: file.clone(),
        namespace: ns.clone(),
    };
    let out = common::kubectl(&["apply", "-f", &file]);
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The token controller fills the Secret; the API server accepts its token as the scraper.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let token = common::eventually(
        "the scraper's token Secret filled",
        Duration::from_secs(30),
        || async {
            let secret = secrets.get(&scraper).await.ok()?;
            let token = secret.data?.get("token")?.0.clone();
            String::from_utf8(token).ok()
        },
    )
    .await;
    let review: TokenReview =
        serde_json::from_value(serde_json::json!({ "spec": { "token": token } })).unwrap();
    let status = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.authenticated, Some(true), "{status:?}");
    let user = status.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some(format!("system:serviceaccount:{ns}:{scraper}").as_str())
    );

    let allowed = |spec: Value| {
        let client = client.clone();
        async move {
            let review: SubjectAccessReview =
                serde_json::from_value(serde_json::json!({ "spec": spec })).unwrap();
            Api::<SubjectAccessReview>::all(client)
                .create(&PostParams::default(), &review)
                .await
                .unwrap()
                .status
                .unwrap()
                .allowed
        }
    };
    // The operator's question for a scrape: may this user get /metrics?
    let scrape = serde_json::json!({
        "user": user.username, "groups": user.groups,
        "nonResourceAttributes": { "path": "/metrics", "verb": "get" }
    });
    common::eventually(
        "the scraper may get /metrics",
        Duration::from_secs(30),
        || {
            let spec = scrape.clone();
            let allowed = &allowed;
            async move { allowed(spec).await.then_some(()) }
        },
    )
    .await;

    // Namespace users bound to the built-in roles, as a cluster admin hands them out.
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    for (user, role) in [("viewer", "view"), ("editor", "edit"), ("owner", "admin")] {
        let binding: RoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": { "name": user },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }]
        }))
        .unwrap();
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    let on_llmscalers = |user: &str, verb: &str| {
        serde_json::json!({
            "user": user,
            "resourceAttributes": {
                "namespace": ns, "verb": verb,
                "group": "autoscaling.modelsphere.dev", "resource": "llmscalers"
            }
        })
    };
    for (user, verb) in [
        ("viewer", "list"),
        ("viewer", "get"),
        ("editor", "create"),
        ("editor", "patch"),
        ("editor", "delete"),
        ("owner", "create"),
    ] {
        let spec = on_llmscalers(user, verb);
        common::eventually(
            &format!("{user} may {verb} llmscalers"),
            Duration::from_secs(30),
            || {
                let spec = spec.clone();
                let allowed = &allowed;
                async move { allowed(spec).await.then_some(()) }
            },
        )
        .await;
    }
    // View is read-only.
    assert!(!allowed(on_llmscalers("viewer", "create")).await);
    assert!(!allowed(on_llmscalers("viewer", "delete")).await);
}

/// Deletes what a test applied from `file`, and its namespace, however the test ends: the
/// aggregated ClusterRoles must not stay folded into the cluster's view and edit roles.
struct Cleanup {
    file: String,
    namespace: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = common::kubectl(&[
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "-f",
            &self.file,
        ]);
        let _ = common::kubectl(&["delete", "namespace", &self.namespace, "--wait=false"]);
        let _ = std::fs::remove_file(&self.file);
    }
}
