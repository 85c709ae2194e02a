//! The binary as a user meets it: clear errors instead of panics, and a clean stop on Ctrl-C.
//!
//! The only test binary that removes the CRD; cargo runs test binaries one at a time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use llmscaleoperator::api::LLMScaler;

const BIN: &str = env!("CARGO_BIN_EXE_llmscaleoperator");

fn operator(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Collects a child's stdout and stderr lines as they arrive.
fn capture(child: &mut Child) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    for stream in [
        Box::new(out) as Box<dyn std::io::Read + Send>,
        Box::new(err),
    ] {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
    }
    lines
}

#[test]
fn crd_and_version_subcommands() {
    let crd = operator(&["crd"]).output().unwrap();
    assert!(crd.status.success());
    let text = String::from_utf8(crd.stdout).unwrap();
    assert!(
        text.contains("name: llmscalers.autoscaling.modelsphere.dev"),
        "{text}"
    );

    let version = operator(&["version"]).output().unwrap();
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8(version.stdout).unwrap().trim(),
        format!("llmscaleoperator {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn unreachable_cluster_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("llmscaler-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    // Port 1 on loopback: nothing listens there.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
         contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: t}\n",
    )
    .unwrap();
    let out = operator(&[
        "run",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--health-address",
        "127.0.0.1:0",
    ])
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: cannot reach the Kubernetes API server at https://127.0.0.1:1/"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let missing = operator(&["--kubeconfig", dir.join("nope").to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: cannot load the Kubernetes client configuration"),
        "{stderr}"
    );
}

#[tokio::test]
async fn missing_crd_is_a_clear_error_then_the_operator_runs_and_stops_on_ctrl_c() {
    let client = common::client().await;
    let kubeconfig = common::kubeconfig_path();
    let kubeconfig = kubeconfig.to_str().unwrap();

    // Without the CRD the operator refuses to start and says how to install it.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let _ = crds
        .delete(LLMScaler::crd_name(), &DeleteParams::default())
        .await;
    common::eventually("the CRD to be gone", Duration::from_secs(60), || async {
        crds.get_opt(LLMScaler::crd_name())
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let out = operator(&[
        "run",
        "--kubeconfig",
        kubeconfig,
        "--health-address",
        "127.0.0.1:0",
    ])
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the LLMScaler CRD (llmscalers.autoscaling.modelsphere.dev) is not installed in this cluster: install it with `llmscaleoperator crd | kubectl apply --server-side -f -`"),
        "{stderr}"
    );

    // With the CRD it runs, reports ready, reconciles a scaler, and stops cleanly on SIGINT.
    common::ensure_crd(&client).await;
    let ns = common::namespace(&client, "operator-cli").await;
    let scalers: Api<LLMScaler> = Api::namespaced(client.clone(), &ns);
    let sample: LLMScaler = common::read_yaml("config/samples/autoscaling_v1alpha1_llmscaler.yaml");
    scalers
        .create(&PostParams::default(), &sample)
        .await
        .unwrap();

    let port = common::free_port();
    let extmetrics_port = common::free_port();
    let mut child = operator(&[
        "run",
        "--kubeconfig",
        kubeconfig,
        "--namespace",
        &ns,
        "--health-address",
        &format!("127.0.0.1:{port}"),
        "--extmetrics-address",
        &format!("127.0.0.1:{extmetrics_port}"),
    ])
    .spawn()
    .unwrap();
    let lines = capture(&mut child);
    let readyz = format!("http://127.0.0.1:{port}/readyz");
    let http = reqwest::Client::new();
    common::eventually("/readyz to answer 200", Duration::from_secs(30), || async {
        let response = http.get(&readyz).send().await.ok()?;
        (response.status() == 200).then_some(())
    })
    .await;
    // Its Deployment does not exist here: the operator says so on the scaler instead of failing.
    common::eventually(
        "the sample scaler to report its missing target",
        Duration::from_secs(30),
        || async {
            let scaler = scalers.get("llmscaler-sample").await.ok()?;
            let ready = scaler
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (ready.status == "False"
                && ready.reason == "TargetNotFound"
                && ready.message.contains("Deployment vllm-opt-125m not found"))
            .then_some(())
        },
    )
    .await;
    // The sync is counted just after its status is written: poll for it.
    let series = format!(
        r#"llmscaleoperator_syncs_total{{namespace="{ns}",scaler="llmscaler-sample",result="failed"}}"#
    );
    common::eventually(
        "the failed sync on /metrics",
        Duration::from_secs(30),
        || async {
            let text = http
                .get(format!("http://127.0.0.1:{port}/metrics"))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            text.contains(&series).then_some(())
        },
    )
    .await;

    let status = common::interrupt(&mut child, Duration::from_secs(20)).await;
    let log = lines.lock().unwrap().join("\n");
    assert!(status.success(), "exit status {status}:\n{log}");
    common::eventually("the stop to be logged", Duration::from_secs(5), || async {
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("operator stopped"))
            .then_some(())
    })
    .await;
    assert!(!log.contains("panicked"), "{log}");

    common::delete_namespace(&client, &ns).await;
}
