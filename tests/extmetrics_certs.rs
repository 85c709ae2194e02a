//! The serving certificate of the external metrics API: one Secret shared by every replica,
//! renewed before it expires and served again without a restart; someone else's Secret is
//! served and followed but never written.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::env::{Env, WAIT};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, PostParams};
use llmscaleoperator::tls::{self, CaPem, CertifiedPem};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

const MANAGED: &str = "llmscaleoperator-extmetrics-tls";
const DAY: Duration = Duration::from_secs(86_400);

/// The operator binary scoped to the namespace, serving on `port` with the given certificate
/// options.
fn spawn(env: &Env, port: u16, certificate: &[&str], stderr: Stdio) -> common::Spawned {
    let kubeconfig = common::kubeconfig_path();
    let child = Command::new(env!("CARGO_BIN_EXE_llmscaleoperator"))
        .args(["run", "--kubeconfig", kubeconfig.to_str().unwrap()])
        .args(["--namespace", &env.ns])
        .args([
            "--health-address",
            &format!("127.0.0.1:{}", common::free_port()),
        ])
        .args(["--extmetrics-address", &format!("127.0.0.1:{port}")])
        .args(["--extmetrics-service-namespace", &env.ns])
        .args(certificate)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    common::Spawned::new(child)
}

/// The leaf certificate a server presents in a TLS handshake for `localhost`, verified against
/// `ca_pem`; None while it is not reachable or not trusted by that CA.
async fn presented(port: u16, ca_pem: &str) -> Option<Vec<u8>> {
    let ca_pem = ca_pem.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert.ok()?).ok()?;
        }
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = "localhost".try_into().ok()?;
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
        let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        socket.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        while conn.is_handshaking() {
            conn.complete_io(&mut socket).ok()?;
        }
        Some(conn.peer_certificates()?.first()?.to_vec())
    })
    .await
    .unwrap()
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

fn strings(secret: &Secret) -> BTreeMap<String, String> {
    secret
        .data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect()
}

fn bytes(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect()
}

async fn rewrite(secrets: &Api<Secret>, name: &str, data: BTreeMap<String, ByteString>) {
    let mut secret = secrets.get(name).await.unwrap();
    secret.data = Some(data);
    secrets
        .replace(name, &PostParams::default(), &secret)
        .await
        .unwrap();
}

/// Waits until every port presents exactly the Secret's `tls.crt`, trusted by its `ca.crt`,
/// and until `check` holds for the Secret; returns its contents.
async fn all_serve_the_secret(
    secrets: &Api<Secret>,
    name: &str,
    ports: &[u16],
    what: &str,
    check: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    common::eventually(what, WAIT, || async {
        let data = strings(&secrets.get_opt(name).await.ok()??);
        if !check(&data) {
            return None;
        }
        let want = der(data.get("tls.crt")?);
        for port in ports {
            if presented(*port, data.get("ca.crt")?).await? != want {
                return None;
            }
        }
        Some(data)
    })
    .await
}

fn still_running(children: &mut [common::Spawned]) {
    for child in children {
        assert!(
            child.try_wait().unwrap().is_none(),
            "an operator process exited"
        );
    }
}

#[tokio::test]
async fn replicas_share_one_certificate_and_renew_it_without_a_restart() {
    tls::install_crypto_provider().unwrap();
    let env = Env::without_prometheus("certs").await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let ports = [common::free_port(), common::free_port()];
    let mut replicas: Vec<common::Spawned> = ports
        .iter()
        .map(|port| {
            spawn(
                &env,
                *port,
                &["--extmetrics-tls-secret", MANAGED],
                Stdio::null(),
            )
        })
        .collect();

    // Both replicas start at once; one creates the Secret and both serve what it holds.
    let first = all_serve_the_secret(
        &secrets,
        MANAGED,
        &ports,
        "both replicas to serve the Secret",
        |d| d.contains_key("ca.key"),
    )
    .await;
    let secret = secrets.get(MANAGED).await.unwrap();
    assert_eq!(
        secret
            .labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("llmscaleoperator")
    );
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let leaf = tls::inspect(&first["tls.crt"]).unwrap();
    assert!(
        leaf.dns_names
            .contains(&format!("llmscaleoperator.{}.svc", env.ns)),
        "{leaf:?}"
    );

    // Time passes: the serving certificate has an hour left. Renewed under the same CA, and
    // served by both replicas without a restart.
    let ca = CaPem {
        cert_pem: first["ca.crt"].clone(),
        key_pem: first["ca.key"].clone(),
    };
    let expiring = tls::issue_serving(&ca, &leaf.dns_names, Duration::from_secs(3600)).unwrap();
    rewrite(
        &secrets,
        MANAGED,
        bytes(&[
            ("ca.crt", &first["ca.crt"]),
            ("ca.key", &first["ca.key"]),
            ("tls.crt", &expiring.cert_pem),
            ("tls.key", &expiring.key_pem),
        ]),
    )
    .await;
    let renewed = all_serve_the_secret(
        &secrets,
        MANAGED,
        &ports,
        "a renewed serving certificate",
        |d| {
            d.get("tls.crt")
                .and_then(|c| tls::inspect(c).ok())
                .is_some_and(|info| info.not_after > time::OffsetDateTime::now_utc() + DAY * 300)
        },
    )
    .await;
    assert_eq!(renewed["ca.crt"], first["ca.crt"], "the CA is kept");
    assert_ne!(renewed["tls.crt"], first["tls.crt"]);
    still_running(&mut replicas);

    // The CA has two days left: a new CA, the old one kept in the bundle while it is valid.
    let short_ca = tls::new_ca(DAY * 2).unwrap();
    let short_leaf = tls::issue_serving(&short_ca, &leaf.dns_names, DAY).unwrap();
    rewrite(
        &secrets,
        MANAGED,
        bytes(&[
            ("ca.crt", &short_ca.cert_pem),
            ("ca.key", &short_ca.key_pem),
            ("tls.crt", &short_leaf.cert_pem),
            ("tls.key", &short_leaf.key_pem),
        ]),
    )
    .await;
    let rotated = all_serve_the_secret(&secrets, MANAGED, &ports, "a new CA", |d| {
        d.get("ca.crt")
            .and_then(|c| tls::inspect_all(c).ok())
            .is_some_and(|cas| cas.len() == 2)
    })
    .await;
    let cas = tls::inspect_all(&rotated["ca.crt"]).unwrap();
    assert_eq!(cas[1], tls::inspect(&short_ca.cert_pem).unwrap());
    assert!(cas[0].not_after > time::OffsetDateTime::now_utc() + DAY * 3000);
    assert_eq!(
        tls::inspect(&rotated["tls.crt"]).unwrap().issuer,
        cas[0].subject
    );
    still_running(&mut replicas);

    for mut replica in replicas {
        assert!(common::interrupt(&mut replica, WAIT).await.success());
    }
    env.done().await;
}

#[tokio::test]
async fn someone_elses_secret_is_served_followed_and_never_written() {
    tls::install_crypto_provider().unwrap();
    let env = Env::without_prometheus("certs-existing").await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let names = ["localhost".to_owned()];
    let one = tls::ca_and_serving(&names, DAY).unwrap();
    let contents = |pki: &tls::ServingPki| {
        bytes(&[
            ("tls.crt", &pki.serving.cert_pem),
            ("tls.key", &pki.serving.key_pem),
            ("ca.crt", &pki.ca.cert_pem),
        ])
    };
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("from-cert-manager".to_owned()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(contents(&one)),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let port = common::free_port();
    let mut operator = spawn(
        &env,
        port,
        &["--extmetrics-tls-existing-secret", "from-cert-manager"],
        Stdio::null(),
    );
    common::eventually("the existing certificate to be served", WAIT, || async {
        (presented(port, &one.ca.cert_pem).await? == der(&one.serving.cert_pem)).then_some(())
    })
    .await;

    // Renewed by its owner: served without a restart.
    let two = tls::ca_and_serving(&names, DAY).unwrap();
    rewrite(&secrets, "from-cert-manager", contents(&two)).await;
    common::eventually("the renewed certificate to be served", WAIT, || async {
        (presented(port, &two.ca.cert_pem).await? == der(&two.serving.cert_pem)).then_some(())
    })
    .await;

    // A broken update (a key of another certificate) is not served; the last good one stays.
    let broken = CertifiedPem {
        cert_pem: one.serving.cert_pem.clone(),
        key_pem: two.serving.key_pem.clone(),
    };
    let mut half = contents(&two);
    half.insert("tls.crt".into(), ByteString(broken.cert_pem.into_bytes()));
    rewrite(&secrets, "from-cert-manager", half.clone()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        assert_eq!(
            presented(port, &two.ca.cert_pem).await,
            Some(der(&two.serving.cert_pem)),
            "the last good certificate stays"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        secrets.get("from-cert-manager").await.unwrap().data,
        Some(half),
        "the operator never writes someone else's Secret"
    );
    assert!(operator.try_wait().unwrap().is_none());
    assert!(common::interrupt(&mut operator, WAIT).await.success());
    env.done().await;
}

#[tokio::test]
async fn a_foreign_secret_under_the_managed_name_stops_start_up_and_is_left_alone() {
    let env = Env::without_prometheus("certs-foreign").await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let data = bytes(&[("password", "hunter2")]);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(MANAGED.to_owned()),
            ..Default::default()
        },
        data: Some(data.clone()),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let child = spawn(
        &env,
        common::free_port(),
        &["--extmetrics-tls-secret", MANAGED],
        Stdio::piped(),
    );
    let child = child.into_inner();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!("Secret {}/{MANAGED}", env.ns))
            && stderr.contains("not labelled app.kubernetes.io/managed-by=llmscaleoperator"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"));
    assert_eq!(secrets.get(MANAGED).await.unwrap().data, Some(data));
    env.done().await;
}
