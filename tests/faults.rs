//! Fault injection on the signal path: the Prometheus server or the decision server stops,
//! answers slower than the timeout, answers 500, garbage, a truncated body or a body of a GiB.
//! Each time the fleet holds at its count, the ScalingActive condition says why, and the first
//! good answer moves the fleet again. The servers are real HTTP/1.1 servers on loopback, written
//! byte by byte so that each fault is exactly the one named.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Operator;
use common::env::{Env, WAIT};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The operator's per-request timeout in these tests; a slow answer takes three times longer.
const TIMEOUT: Duration = Duration::from_secs(1);
const SLOW: Duration = Duration::from_secs(3);
const SERVICE_ID: &str = "llama-70b";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// A good answer with this value (a per-replica load, or an absolute count).
    Good(f64),
    /// Nothing listens on the port any more.
    Stopped,
    Slow,
    Status500,
    Garbage,
    /// Content-Length promises more than is sent before the connection closes.
    Truncated,
    /// A chunked body that would go on for a GiB.
    Huge,
}

impl Fault {
    /// What the ScalingActive condition must say while this fault lasts.
    fn says(self) -> &'static str {
        match self {
            Fault::Good(_) => unreachable!(),
            Fault::Stopped => "failed",
            Fault::Slow => "timed out",
            Fault::Status500 => "HTTP 500",
            Fault::Garbage => "not valid JSON",
            Fault::Truncated => "failed",
            Fault::Huge => "larger than 4194304 bytes",
        }
    }
}

/// One server for both providers: `/api/v1/query` answers as Prometheus, any other path as a
/// decision server.
struct FaultServer {
    port: u16,
    fault: Arc<Mutex<Fault>>,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl FaultServer {
    async fn start(fault: Fault) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut server = Self {
            port,
            fault: Arc::new(Mutex::new(fault)),
            accept: None,
        };
        server.serve(listener);
        server
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn serve(&mut self, listener: TcpListener) {
        let fault = self.fault.clone();
        self.accept = Some(tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let fault = *fault.lock().unwrap();
                tokio::spawn(answer(stream, fault));
            }
        }));
    }

    /// Switches the fault. Stopped closes the listener; leaving Stopped listens again on the
    /// same port.
    async fn set(&mut self, fault: Fault) {
        let was = std::mem::replace(&mut *self.fault.lock().unwrap(), fault);
        if fault == Fault::Stopped {
            if let Some(accept) = self.accept.take() {
                accept.abort();
                let _ = accept.await;
            }
        } else if was == Fault::Stopped {
            let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
            self.serve(listener);
        }
    }
}

async fn answer(mut stream: TcpStream, fault: Fault) {
    // Read the request head; no request here has a body.
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let prometheus = head.starts_with(b"GET /api/v1/query");
    let good = |value: f64| {
        let body = if prometheus {
            json!({ "status": "success", "data": { "resultType": "vector",
                "result": [ { "metric": {}, "value": [1_700_000_000.0, value.to_string()] } ] } })
        } else {
            json!({ "apiVersion": "llmscaling.inference.x-k8s.io/v1alpha1", "decisions": [
                { "namespace": "faults", "serviceId": SERVICE_ID, "replicas": { "active": value as i64 } } ] })
        };
        body.to_string()
    };
    let response = |status: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let _ = match fault {
        Fault::Good(value) => {
            stream
                .write_all(response("200 OK", &good(value)).as_bytes())
                .await
        }
        Fault::Stopped => Ok(()),
        Fault::Slow => {
            tokio::time::sleep(SLOW).await;
            stream
                .write_all(response("200 OK", &good(1.0)).as_bytes())
                .await
        }
        Fault::Status500 => {
            stream
                .write_all(response("500 Internal Server Error", "oops").as_bytes())
                .await
        }
        Fault::Garbage => {
            stream
                .write_all(response("200 OK", "<html>maintenance</html>").as_bytes())
                .await
        }
        Fault::Truncated => {
            let body = good(1.0);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len() + 100
            );
            let half = &body.as_bytes()[..body.len() / 2];
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(half).await
        }
        Fault::Huge => huge(&mut stream).await,
    };
    let _ = stream.shutdown().await;
}

/// Streams chunks of 1 MiB until a GiB is sent or the client hangs up.
async fn huge(stream: &mut TcpStream) -> std::io::Result<()> {
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await?;
    let chunk = vec![b'['; 1 << 20];
    for _ in 0..1024 {
        stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await?;
        stream.write_all(&chunk).await?;
        stream.write_all(b"\r\n").await?;
    }
    stream.write_all(b"0\r\n\r\n").await
}

/// Peak resident memory of this test process so far, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The ScalingActive condition's status and message.
async fn scaling_active(env: &Env, scaler: &str) -> Option<(String, String)> {
    let (status, _, message) = env.condition(scaler, "ScalingActive").await?;
    Some((status, message))
}

/// Runs every fault against one scaler: hold with the reason in the condition, then recover on
/// the first good answer, which each time asks for a different count.
async fn every_fault_holds_then_recovers(
    env: &Env,
    server: &mut FaultServer,
    good: impl Fn(i32) -> f64,
) {
    let faults = [
        Fault::Stopped,
        Fault::Slow,
        Fault::Status500,
        Fault::Garbage,
        Fault::Truncated,
        Fault::Huge,
    ];
    let mut replicas = 2;
    for (i, fault) in faults.into_iter().enumerate() {
        let peak_before = peak_rss_kib();
        server.set(fault).await;
        let message = common::eventually(
            &format!(
                "ScalingActive=False saying {:?} under {fault:?}",
                fault.says()
            ),
            WAIT,
            || async {
                let (status, message) = scaling_active(env, "faulty").await?;
                (status == "False" && message.contains(fault.says())).then_some(message)
            },
        )
        .await;
        assert!(
            message.contains("held"),
            "{fault:?}: the condition says the count is held: {message}"
        );
        // Several syncs (one a second) under the fault: the count does not move.
        env.stays("model", replicas, Duration::from_secs(3)).await;
        if fault == Fault::Huge {
            let grown = peak_rss_kib().saturating_sub(peak_before);
            assert!(
                grown < 64 * 1024,
                "a GiB reply is cut off at the cap: peak memory grew by {grown} KiB"
            );
        }

        // Alternate between 3 and 2 replicas so that each recovery is a visible move.
        replicas = if i % 2 == 0 { 3 } else { 2 };
        server.set(Fault::Good(good(replicas))).await;
        env.wait_ready("model", replicas).await;
        common::eventually(
            &format!("ScalingActive=True after {fault:?}"),
            WAIT,
            || async {
                let (status, _) = scaling_active(env, "faulty").await?;
                (status == "True").then_some(())
            },
        )
        .await;
    }
}

/// The scaler "faulty" on Deployment "model", driven by the decision server `server`.
async fn decision_scaler(env: &Env, server: &FaultServer) {
    env.scaler(
        "faulty",
        "model",
        json!({
            "metricProvider": "Custom",
            "serverAddress": server.url(),
            "customProvider": { "serviceId": SERVICE_ID, "namespace": "faults", "path": "decisions" },
            "minReplicas": 1, "maxReplicas": 10
        }),
    )
    .await;
}

/// Waits for a healthy sync and checks the fleet rests at 2 before any fault.
async fn first_good_sync_at_two(env: &Env) {
    common::eventually("a first good sync", WAIT, || async {
        let (status, _) = scaling_active(env, "faulty").await?;
        (status == "True").then_some(())
    })
    .await;
    env.stays("model", 2, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn prometheus_faults_hold_the_fleet_and_the_first_good_answer_moves_it() {
    let env = Env::without_prometheus("faults-prom").await;
    env.deployment("model", 2).await;
    // Per-replica load 0.8 against a target of 0.8 keeps 2 replicas.
    let mut server = FaultServer::start(Fault::Good(0.8)).await;
    let _operator = Operator::builder(&env.client)
        .namespace(&env.ns)
        .timeout(TIMEOUT)
        .start();
    env.scaler(
        "faulty",
        "model",
        json!({
            "serverAddress": server.url(),
            // maxReplicas 3 stops the ratio compounding on a load that does not fall as
            // replicas are added (2 ready × 2.0 / 0.8 = 5).
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "name": "load", "query": "avg(load)", "target": "0.8" }]
        }),
    )
    .await;
    first_good_sync_at_two(&env).await;

    // A load that holds the fleet at 3 (capped by maxReplicas) or at 2 (3 × 0.5 / 0.8 rounds up
    // to 2, and 2 × 0.5 / 0.8 to 2 again). A fault read as zero would drop it to minReplicas 1.
    every_fault_holds_then_recovers(
        &env,
        &mut server,
        |replicas| {
            if replicas == 3 { 2.0 } else { 0.5 }
        },
    )
    .await;
    env.done().await;
}

#[tokio::test]
async fn decision_server_faults_hold_the_fleet_and_the_first_good_answer_moves_it() {
    let env = Env::without_prometheus("faults-decision").await;
    env.deployment("model", 2).await;
    let mut server = FaultServer::start(Fault::Good(2.0)).await;
    let _operator = Operator::builder(&env.client)
        .namespace(&env.ns)
        .timeout(TIMEOUT)
        .start();
    decision_scaler(&env, &server).await;
    first_good_sync_at_two(&env).await;

    every_fault_holds_then_recovers(&env, &mut server, f64::from).await;
    env.done().await;
}

#[tokio::test]
async fn another_writer_is_overruled_on_replicas_and_nothing_else() {
    use kube::api::{Patch, PatchParams};
    let env = Env::without_prometheus("faults-writers").await;
    env.deployment("model", 2).await;
    let server = FaultServer::start(Fault::Good(3.0)).await;
    let _operator = Operator::builder(&env.client)
        .namespace(&env.ns)
        .timeout(TIMEOUT)
        .start();
    decision_scaler(&env, &server).await;
    env.wait_ready("model", 3).await;

    // kubectl scale: the scale subresource.
    env.deployments()
        .patch_scale(
            "model",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 6 } })),
        )
        .await
        .unwrap();
    env.wait_ready("model", 3).await;

    // A Helm upgrade: replicas and the pod template change together.
    env.deployments()
        .patch(
            "model",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 1, "template": { "metadata": {
                "annotations": { "release": "v2" } } } } })),
        )
        .await
        .unwrap();
    env.wait_ready("model", 3).await;
    env.stays("model", 3, Duration::from_secs(3)).await;
    let template = env
        .deployments()
        .get("model")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template;
    assert_eq!(
        template
            .metadata
            .unwrap()
            .annotations
            .unwrap_or_default()
            .get("release")
            .map(String::as_str),
        Some("v2"),
        "the upgrade's template change is kept"
    );
    env.done().await;
}

/// A query whose selector asks for a label the scrape does not set matches nothing. The fleet
/// holds, and the condition says what to check: the first matcher no series carries, and the
/// values a wrong one takes, found by asking the real Prometheus again.
#[tokio::test]
async fn a_query_matching_no_series_names_the_matcher_no_series_carries() {
    let env = Env::new("faults-noseries").await;
    env.deployment("model", 2).await;
    env.set("load", 0.8).await;
    let _operator = Operator::start(&env.client, &env.ns);
    let series = env.series("load");
    let selector = series.trim_end_matches('}');
    env.scaler(
        "unlabelled",
        "model",
        json!({
            "minReplicas": 1, "maxReplicas": 4,
            "metrics": [
                { "name": "app", "query": format!("avg({selector}, app=\"vllm\"}})"), "target": "0.8" },
                { "name": "ns", "query": "sum(load{test=\"elsewhere\"})", "target": "0.8" },
            ]
        }),
    )
    .await;
    let missing = format!(
        "no series of {series} carries app=\"vllm\" (none has the label app: does the scrape set it? see config/prometheus/)"
    );
    let wrong = format!(
        "no series of load carries test=\"elsewhere\" (test is {:?}",
        env.ns
    );
    common::eventually("both reasons in the condition", WAIT, || async {
        let (status, reason, message) = env.condition("unlabelled", "ScalingActive").await?;
        (status == "False"
            && reason == "NoUsableMetric"
            && message.contains(&missing)
            && message.contains(&wrong))
        .then_some(())
    })
    .await;
    env.wait_event("unlabelled", "MetricSkipped", "carries app=\"vllm\"")
        .await;
    env.stays("model", 2, Duration::from_secs(2)).await;
    env.done().await;
}
