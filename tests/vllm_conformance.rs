//! Conformance with a real vLLM scrape, against a vLLM-compatible server this project did not
//! write: two llm-d inference simulators (v0.10.2, built from their Go module by
//! `tests/cluster/build.sh inference-sim`) stand for the pods of one fleet, and a server of the
//! vLLM 0.33.0 exposition fixture (two `engine` series per family, as a data-parallel pod exports)
//! for a pod of another. The real Prometheus finds them through Kubernetes service discovery on
//! the real apiserver and the documented scrape (`config/prometheus/scrape-config.yaml`, loaded
//! as shipped). Then:
//! - every query of `config/samples/` and of the README's and `docs/*.md`'s examples, names and
//!   namespace adjusted,
//!   returns exactly one series on each fleet (one per pod for a deletion-cost query);
//! - the latency histograms the capacity estimate reads come back through the operator's own
//!   client as one cumulative histogram per fleet, and a query without `sum by (le)` is refused;
//! - an LLMScaler made from the in-flight sample scales its Deployment when requests are sent to
//!   the simulators.
//!
//! The simulators listen on every address, so they run in a network namespace of this test that
//! has only `lo`; the scrape and the requests reach them through relays on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use common::Operator;
use common::env::{Env, WAIT};
use common::netns::NetNs;
use common::prometheus::Prometheus;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";
/// The `app` of the simulators' pods, and of the data-parallel pod.
const FLEET: &str = "llama-fleet";
const DP_FLEET: &str = "llama-dp";
const SAMPLES: [&str; 4] = [
    "config/samples/autoscaling_v1alpha1_llmscaler.yaml",
    "config/samples/autoscaling_v1alpha1_llmscaler_customprovider.yaml",
    "config/samples/autoscaling_v1alpha1_llmscaler_inflight.yaml",
    "config/samples/autoscaling_v1alpha1_llmscaler_scaletozero.yaml",
];

fn simulator_binary() -> PathBuf {
    let path = common::repo_root().join("target/cluster/bin/llm-d-inference-sim");
    assert!(
        path.exists(),
        "{} is missing: run tests/cluster/build.sh inference-sim (make test does)",
        path.display()
    );
    path
}

/// One simulator inside `ns` on `port`, with a latency that lets requests pile up.
async fn start_simulator(ns: &mut NetNs, port: u16) -> (tokio::process::Child, SocketAddr) {
    let child = ns
        .command(&simulator_binary())
        .args([
            "--port",
            &port.to_string(),
            "--model",
            MODEL,
            "--max-num-seqs",
            "2",
            "--time-to-first-token",
            "50ms",
            "--inter-token-latency",
            "50ms",
            "--force-dummy-tokenizer",
            "-v",
            "0",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let relayed = ns.relay(SocketAddr::from(([127, 0, 0, 1], port))).await;
    // Its exit code says nothing (0 on a bad flag or a taken port): readiness does.
    let http = reqwest::Client::new();
    common::eventually("the simulator ready", WAIT, || async {
        let answer = http
            .get(format!("http://{relayed}/health/ready"))
            .send()
            .await
            .ok()?;
        answer.status().is_success().then_some(())
    })
    .await;
    (child, relayed)
}

/// Serves the vLLM 0.33.0 exposition fixture at /metrics, as a data-parallel pod with two
/// engines would.
async fn serve_fixture() -> (tokio::task::JoinHandle<()>, SocketAddr) {
    let text = std::fs::read_to_string(
        common::repo_root().join("sim/tests/fixtures/vllm-0.33.0-metrics.txt"),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let text = text.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    text.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(text.as_bytes()).await;
            });
        }
    });
    (task, addr)
}

/// A pod as the documented scrape finds it: annotated for scraping on `addr`'s port, Running
/// and Ready at `addr`'s IP. No scheduler takes it (its schedulerName is nobody's) and no
/// ReplicaSet selects it, so no controller touches its status.
async fn scraped_pod(env: &Env, name: &str, app: &str, addr: SocketAddr) {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { "app": app },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": addr.port().to_string(),
            }
        },
        "spec": {
            "schedulerName": "llmscaleoperator-test-nobody",
            "containers": [{
                "name": "vllm", "image": "vllm/vllm-openai:v0.18.0",
                "ports": [{ "name": "http", "containerPort": addr.port() }]
            }]
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let ip = addr.ip().to_string();
    let status = json!({ "status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{ "ip": ip }],
        "conditions": [{ "type": "Ready", "status": "True" }],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

/// The documented scrape job, as shipped, told to discover pods through the test cluster's
/// kubeconfig and in this test's namespace only.
fn documented_scrape(namespace: &str) -> String {
    let file: Value = common::read_yaml("config/prometheus/scrape-config.yaml");
    let jobs = file["scrape_configs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "the documented scrape is one job");
    let mut job = jobs[0].clone();
    let sd = job["kubernetes_sd_configs"].as_array_mut().unwrap();
    assert_eq!(sd.len(), 1);
    sd[0]["kubeconfig_file"] = json!(common::kubeconfig_path());
    sd[0]["namespaces"] = json!({ "names": [namespace] });
    // A guard of the test's, after the documented rules: only loopback is ever scraped (kwok
    // gives the Deployments' pods addresses of no host; the documented rules already drop them
    // for want of the scrape annotation).
    job["relabel_configs"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "source_labels": ["__address__"], "regex": "127\\.0\\.0\\.1:\\d+", "action": "keep" }));
    let yaml = serde_norway::to_string(&vec![job]).unwrap();
    yaml.lines().map(|l| format!("  {l}\n")).collect()
}

/// Every query a user copies: the samples' metric, deletion-cost and activation queries, and the
/// single-quoted ones of the README and `docs/*.md` that read vLLM series. `true` marks a
/// deletion-cost query.
fn documented_queries() -> Vec<(String, String, bool)> {
    let mut queries = Vec::new();
    for sample in SAMPLES {
        let scaler: Value = common::read_yaml(sample);
        let spec = &scaler["spec"];
        for metric in spec["metrics"].as_array().into_iter().flatten() {
            queries.push((
                sample.to_owned(),
                metric["query"].as_str().unwrap().to_owned(),
                false,
            ));
        }
        if let Some(q) = spec["scaleDown"]["deletionCostQuery"].as_str() {
            queries.push((sample.to_owned(), q.to_owned(), true));
        }
        if let Some(q) = spec["scaleToZero"]["activationQuery"].as_str() {
            queries.push((sample.to_owned(), q.to_owned(), false));
        }
    }
    let mut documents = vec!["README.md".to_owned()];
    let mut in_docs: Vec<String> = std::fs::read_dir(common::repo_root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    in_docs.sort();
    documents.extend(in_docs);
    for document in documents {
        let readme = std::fs::read_to_string(common::repo_root().join(&document)).unwrap();
        for (key, cost) in [
            ("query: '", false),
            ("activationQuery: '", false),
            ("deletionCostQuery: '", true),
        ] {
            for (at, _) in readme.match_indices(key) {
                let rest = &readme[at + key.len()..];
                let Some(end) = rest.find('\'') else { continue };
                let query = &rest[..end];
                if query.contains("vllm:") && !query.contains('\n') {
                    queries.push((document.clone(), query.to_owned(), cost));
                }
            }
        }
    }
    queries.sort();
    queries.dedup();
    queries
}

/// `query` with every `namespace` and `app` matcher set to this test's.
fn adjusted(query: &str, namespace: &str, app: &str) -> String {
    let mut out = query.to_owned();
    for (label, value) in [("namespace", namespace), ("app", app)] {
        let needle = format!("{label}=\"");
        let mut from = 0;
        while let Some(at) = out[from..].find(&needle) {
            let start = from + at + needle.len();
            // Not the tail of another label's name (e.g. exported_namespace).
            let before = out[..from + at].chars().last();
            let end = start + out[start..].find('"').unwrap();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                from = end;
                continue;
            }
            out.replace_range(start..end, value);
            from = start + value.len();
        }
    }
    out
}

/// The series `query` returns: (labels, value).
async fn evaluate(prometheus: &Prometheus, query: &str) -> Vec<Value> {
    let answer = prometheus.instant(query).await.unwrap();
    assert_eq!(answer["status"], "success", "{query}: {answer}");
    match answer["data"]["resultType"].as_str().unwrap() {
        "vector" => answer["data"]["result"].as_array().unwrap().clone(),
        "scalar" => vec![answer["data"]["result"].clone()],
        other => panic!("{query}: a {other} result"),
    }
}

/// Sends one completion of `tokens` tokens (the simulator takes 50 ms a token).
async fn complete(http: &reqwest::Client, addr: SocketAddr, tokens: u32) {
    let _ = http
        .post(format!("http://{addr}/v1/completions"))
        .json(&json!({ "model": MODEL, "prompt": "Tell me a long story.", "max_tokens": tokens, "ignore_eos": true }))
        .send()
        .await;
}

#[tokio::test]
async fn samples_and_readme_queries_read_a_real_vllm_scrape_and_scale() {
    let env = Env::without_prometheus("vllm-conformance").await;
    let mut ns = NetNs::create("llmsc-vllm");
    let (_sim_a, a) = start_simulator(&mut ns, 8001).await;
    let (_sim_b, b) = start_simulator(&mut ns, 8002).await;
    let (_fixture, dp) = serve_fixture().await;
    scraped_pod(&env, "vllm-a", FLEET, a).await;
    scraped_pod(&env, "vllm-b", FLEET, b).await;
    scraped_pod(&env, "vllm-dp-0", DP_FLEET, dp).await;
    let prometheus = Prometheus::upstream_with_scrape_configs(&documented_scrape(&env.ns)).await;

    // A simulator exports its counters and histograms from its first request on.
    let http = reqwest::Client::new();
    complete(&http, a, 2).await;
    complete(&http, b, 2).await;
    let ns_matcher = format!("namespace=\"{}\"", env.ns);
    let pods_of = |app: &str| {
        format!(
            "count by (pod) (vllm:time_to_first_token_seconds_count{{{ns_matcher}, app=\"{app}\"}})"
        )
    };
    common::eventually(
        "both fleets scraped with the documented labels",
        WAIT,
        || async {
            let fleet = evaluate(&prometheus, &pods_of(FLEET)).await.len();
            let dp = evaluate(&prometheus, &pods_of(DP_FLEET)).await.len();
            (fleet == 2 && dp == 1).then_some(())
        },
    )
    .await;
    // Rates need two scrapes of a counter in their window.
    common::eventually("two scrapes of every target", WAIT, || async {
        let q =
            format!("count(count by (pod) (count_over_time(vllm:num_requests_running{{{ns_matcher}}}[1m]) >= 2))");
        let series = evaluate(&prometheus, &q).await;
        (series.len() == 1 && series[0]["value"][1] == "3").then_some(())
    })
    .await;

    // Every documented query, on each fleet: exactly one series, or one per pod.
    let queries = documented_queries();
    let from_samples = queries
        .iter()
        .filter(|(f, _, _)| f.starts_with("config/"))
        .count();
    let from_readme = queries.len() - from_samples;
    assert!(
        from_samples >= 5 && from_readme >= 4,
        "queries found: {queries:#?}"
    );
    let mut wrong = Vec::new();
    for (file, query, cost) in &queries {
        for (app, pods) in [
            (FLEET, BTreeSet::from(["vllm-a", "vllm-b"])),
            (DP_FLEET, BTreeSet::from(["vllm-dp-0"])),
        ] {
            let q = adjusted(query, &env.ns, app);
            let series = evaluate(&prometheus, &q).await;
            let fine = if *cost {
                let named: BTreeSet<&str> = series
                    .iter()
                    .filter_map(|s| s["metric"]["pod"].as_str())
                    .collect();
                series.len() == pods.len() && named == pods
            } else {
                series.len() == 1
            };
            if !fine {
                wrong.push(format!(
                    "{file}: {q}\n  -> {} series: {series:?}",
                    series.len()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "queries that do not return what they must:\n{}",
        wrong.join("\n")
    );

    // The latency histograms the capacity estimate reads, through the operator's own client:
    // `sum by (le)` over a fleet's pods (and a data-parallel pod's engines) is one cumulative
    // histogram; without it, each pod's bounds come back and are refused, not merged by guess.
    let client = llmscaleoperator::signals::http::client().unwrap();
    let headers = reqwest::header::HeaderMap::new();
    let buckets = |query: String| {
        let (client, headers, url) = (client.clone(), headers.clone(), prometheus.url.clone());
        async move {
            let series = llmscaleoperator::signals::prometheus::query_vector(
                &client, &url, &headers, &query,
            )
            .await
            .unwrap();
            llmscaleoperator::signals::histogram::cumulative(&series)
        }
    };
    // The fixture is vLLM 0.33.0's own exposition: its per-request TPOT histogram, both engines.
    let tpot = buckets(format!(
        "sum by (le) (vllm:request_time_per_output_token_seconds_bucket{{{ns_matcher}, app=\"{DP_FLEET}\"}})"
    ))
    .await
    .unwrap();
    assert_eq!(tpot.len(), 20, "19 bounds and +Inf: {tpot:?}");
    let share = llmscaleoperator::scaling::share_above(&tpot, 0.1).unwrap();
    assert!(share.exact(), "0.1 s is one of vLLM's bounds: {share:?}");
    assert!(
        share.observations > 0.0 && share.at_least < 1.0,
        "{share:?}"
    );
    // The simulators' TTFT over the last minute, once a fresh request has been scraped.
    complete(&http, a, 2).await;
    let ttft_query = format!(
        "sum by (le) (increase(vllm:time_to_first_token_seconds_bucket{{{ns_matcher}, app=\"{FLEET}\"}}[1m]))"
    );
    let share = common::eventually("a TTFT observation in the last minute", WAIT, || async {
        let ttft = buckets(ttft_query.clone()).await.unwrap();
        llmscaleoperator::scaling::share_above(&ttft, 2.0).ok()
    })
    .await;
    assert!(share.observations > 0.0, "{share:?}");
    let per_pod = buckets(format!(
        "vllm:time_to_first_token_seconds_bucket{{{ns_matcher}, app=\"{FLEET}\"}}"
    ))
    .await;
    assert!(
        matches!(
            per_pod,
            Err(llmscaleoperator::signals::histogram::BucketsError::OtherLabels { .. })
        ),
        "{per_pod:?}"
    );

    // The queries an objective composes from its selector: on each fleet, one in-flight value,
    // one load value, one admission rate and one cumulative queue-time histogram; vLLM 0.33.0's per-request TPOT
    // histogram on the data-parallel pod, and none on the simulators.
    // A simulator observes a queue time only for a request that waited: three at once on a
    // pod that runs two.
    tokio::join!(
        complete(&http, a, 10),
        complete(&http, a, 10),
        complete(&http, a, 10)
    );
    for app in [FLEET, DP_FLEET] {
        let objective: llmscaleoperator::api::Objective =
            serde_json::from_value(json!({ "selector": format!("{ns_matcher}, app=\"{app}\"") }))
                .unwrap();
        let q = llmscaleoperator::api::objective::queries(&objective).unwrap();
        for query in [&q.in_flight, &q.load] {
            let series = evaluate(&prometheus, query).await;
            assert_eq!(series.len(), 1, "{query}: {series:?}");
        }
        // A pendingQuery (a router's queue; two series here, summed): read alone while no pod is
        // Ready, and spread over the engines beside their own requests otherwise. The fleets
        // are idle now, so the engines' part holds still between the reads.
        let mut pending = objective.clone();
        pending.pending_query =
            Some("label_replace(vector(1), \"router\", \"a\", \"\", \"\") or label_replace(vector(2), \"router\", \"b\", \"\", \"\")".into());
        let p = llmscaleoperator::api::objective::queries(&pending).unwrap();
        let value = |series: Vec<Value>| -> f64 {
            assert_eq!(series.len(), 1, "{series:?}");
            series[0]["value"][1].as_str().unwrap().parse().unwrap()
        };
        assert_eq!(value(evaluate(&prometheus, p.in_flight_at(0)).await), 3.0);
        let engines = value(
            evaluate(
                &prometheus,
                &format!("count(vllm:num_requests_running{{{ns_matcher}, app=\"{app}\"}})"),
            )
            .await,
        );
        let alone = value(evaluate(&prometheus, &q.in_flight).await);
        let with_pending = value(evaluate(&prometheus, p.in_flight_at(1)).await);
        assert!(
            (with_pending - (alone + 3.0 / engines)).abs() < 1e-9,
            "{app}: {with_pending} != {alone} + 3 / {engines}"
        );
        // An increase needs two scrapes of the series in its window.
        let queue = common::eventually("a queue-time histogram over a minute", WAIT, || async {
            buckets(q.queue.clone()).await.ok()
        })
        .await;
        assert_eq!(
            queue.last().map(|(le, _)| *le),
            Some(f64::INFINITY),
            "{queue:?}"
        );
        assert!(
            queue.iter().any(|(le, _)| *le == 1.0),
            "half the default TTFT is a bound: {queue:?}"
        );
        // The requests admitted a second: one value per fleet, above zero on the simulators that
        // served the requests above within the minute, zero on the fixture, whose counters never
        // move.
        let admitted = common::eventually("first tokens a second over a minute", WAIT, || async {
            let series = evaluate(&prometheus, &q.admitted).await;
            (series.len() == 1)
                .then(|| value(series))
                .filter(|v| (app == FLEET) == (*v > 0.0))
        })
        .await;
        assert!(admitted.is_finite(), "{app}: {admitted}");
        let tpot = buckets(q.tpot.clone()).await;
        if app == DP_FLEET {
            let tpot = tpot.unwrap();
            assert!(tpot.iter().any(|(le, _)| *le == 0.1), "{tpot:?}");
        } else {
            // The simulator (v0.10.2) exports vLLM's older per-token histogram only: no series,
            // which the controller reads as LatencyUnread, never as a met objective.
            assert_eq!(
                tpot,
                Err(llmscaleoperator::signals::histogram::BucketsError::Empty)
            );
        }
    }

    // Each Prometheus sample, names adjusted, reads its metrics on its first sync; each on a
    // Deployment of its own (two samples name the same one, and two scalers on one target
    // conflict).
    let _operator = Operator::start(&env.client, &env.ns);
    let mut inflight = None;
    for (i, sample) in SAMPLES.iter().enumerate() {
        let mut scaler: Value = common::read_yaml(sample);
        if scaler["spec"]["metricProvider"] == "Custom" {
            continue;
        }
        let spec = &mut scaler["spec"];
        let target = format!("{}-{i}", spec["targetRef"]["name"].as_str().unwrap());
        spec["targetRef"]["name"] = json!(target);
        spec["serverAddress"] = json!(prometheus.url);
        for metric in spec["metrics"].as_array_mut().unwrap() {
            metric["query"] = json!(adjusted(metric["query"].as_str().unwrap(), &env.ns, FLEET));
        }
        for (section, field) in [
            ("scaleDown", "deletionCostQuery"),
            ("scaleToZero", "activationQuery"),
        ] {
            if let Some(q) = spec[section][field].as_str() {
                spec[section][field] = json!(adjusted(q, &env.ns, FLEET));
            }
        }
        let min = spec["minReplicas"].as_i64().unwrap() as i32;
        scaler["metadata"]["namespace"] = json!(env.ns);
        let scaler: llmscaleoperator::api::LLMScaler = serde_json::from_value(scaler).unwrap();
        let name = kube::ResourceExt::name_any(&scaler);
        env.deployment(&target, min.max(1)).await;
        env.scalers()
            .create(&PostParams::default(), &scaler)
            .await
            .unwrap();
        common::eventually(
            &format!("{sample}: its metrics read on the first sync"),
            WAIT,
            || async {
                let (status, reason, message) = env.condition(&name, "ScalingActive").await?;
                assert_ne!(reason, "NoUsableMetric", "{sample}: {message}");
                (status == "True").then_some(())
            },
        )
        .await;
        assert!(
            env.events(&name, "MetricSkipped").await.is_empty(),
            "{sample}"
        );
        if sample.ends_with("_inflight.yaml") {
            inflight = Some((target, min));
        }
    }
    let (target, min) = inflight.expect("the in-flight sample");
    assert_eq!(
        env.spec_replicas(&target).await,
        min,
        "idle simulators need no more"
    );

    // 2 × 40 requests of 600 tokens (30 s each, two at a time per simulator): 80 in flight
    // against 16 per replica wants 5 replicas, and the sample's scale-up policy allows 4 more
    // a minute.
    let load: Vec<_> = (0..80)
        .map(|i| {
            let http = http.clone();
            let addr = if i % 2 == 0 { a } else { b };
            tokio::spawn(async move { complete(&http, addr, 600).await })
        })
        .collect();
    common::eventually(
        "the Deployment scaled up on the simulators' load",
        WAIT,
        || async { (env.spec_replicas(&target).await > min).then_some(()) },
    )
    .await;
    for request in load {
        request.abort();
    }
    drop(ns);
    env.done().await;
}

#[test]
fn adjusting_names_touches_only_namespace_and_app_matchers() {
    assert_eq!(
        adjusted(
            r#"sum(x{namespace="prod", app="a", exported_namespace="keep"}) + y{app="b"}"#,
            "t",
            "f"
        ),
        r#"sum(x{namespace="t", app="f", exported_namespace="keep"}) + y{app="f"}"#
    );
}
