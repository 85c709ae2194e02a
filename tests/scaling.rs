//! The controller against the real control plane (full profile: Deployments get Ready pods from
//! kwok) and a real Prometheus scraping an exporter whose values each test sets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::Operator;
use common::env::{Env, WAIT};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use llmscaleoperator::api::ScaleToZeroStatus;
use serde_json::json;

/// A Deployment at 1 and a scaler whose metric (2.0 against 0.8) asks for 3: returns once the
/// Deployment runs 3 ready replicas and the scaler's status says so.
async fn scaled_up_to_three(env: &Env) {
    env.deployment("vllm", 1).await;
    env.set("kv", 2.0).await;
    // maxReplicas 3: the exporter's per-replica value does not fall as replicas are added, so
    // without a bound the ratio would keep compounding (3 ready × 2.0 / 0.8 = 8).
    env.scaler(
        "hot",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "name": "kv-cache", "query": env.query("kv"), "target": "0.8" }],
            // A window keeps a recommendation history in status: steady, it must not change.
            "scaleDown": { "stabilizationWindowSeconds": 60 }
        }),
    )
    .await;
    // ceil(1 × 2.0 / 0.8) = 3
    env.wait_ready("vllm", 3).await;
    common::eventually("status to show 3/3", WAIT, || async {
        let s = env.scalers().get("hot").await.ok()?.status?;
        (s.current_replicas == 3 && s.desired_replicas == 3).then_some(s)
    })
    .await;
}

#[tokio::test]
async fn scales_up_from_one_on_a_hot_metric() {
    let env = Env::new("scale-up").await;
    let operator = Operator::start(&env.client, &env.ns);
    scaled_up_to_three(&env).await;
    let note = env.wait_event("hot", "ScaledUp", "from 1 to 3").await;
    assert!(
        note.contains("metric kv-cache = 2 recommended 3"),
        "names the metric that drove it: {note}"
    );
    let (status, reason, _) = env.condition("hot", "ScalingActive").await.unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "ValidMetric"));

    // The cache the external metrics API reads holds what the controller acted on.
    let cached = operator
        .cache
        .get(&llmscaleoperator::metric_cache::ScalerKey {
            namespace: env.ns.clone(),
            name: "hot".into(),
        })
        .unwrap();
    assert_eq!(cached.metrics[0].value, Some(2.0));
    assert_eq!(cached.desired_replicas, 3);
    operator.stop().await;
    env.done().await;
}

#[tokio::test]
async fn a_settled_scaler_keeps_syncing_and_does_not_rewrite_its_status() {
    let env = Env::new("settled").await;
    let operator = Operator::start(&env.client, &env.ns);
    scaled_up_to_three(&env).await;
    let version = env.scalers().get("hot").await.unwrap().resource_version();
    let syncs = || {
        let text = operator.metrics.encode().unwrap();
        text.lines()
            .filter(|l| l.starts_with("llmscaleoperator_syncs_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    // Three more syncs (one a second) see the same fleet and the same signal...
    let before = syncs();
    common::eventually("three more syncs", WAIT, || async {
        (syncs() >= before + 3.0).then_some(())
    })
    .await;
    // ...and none of them wrote the status.
    assert_eq!(
        env.scalers().get("hot").await.unwrap().resource_version(),
        version,
        "an unchanged status is not written"
    );
    operator.stop().await;
    env.done().await;
}

#[tokio::test]
async fn owns_only_spec_replicas_of_its_target() {
    let env = Env::new("owns").await;
    let _operator = Operator::start(&env.client, &env.ns);
    scaled_up_to_three(&env).await;
    // Server-side apply: our manager owns spec.replicas and nothing else; the rest is untouched.
    let d = env.deployments().get("vllm").await.unwrap();
    let ours: Vec<_> = d
        .managed_fields()
        .iter()
        .filter(|m| m.manager.as_deref() == Some("llmscaleoperator"))
        .collect();
    assert_eq!(ours.len(), 1, "{:?}", d.managed_fields());
    assert_eq!(ours[0].operation.as_deref(), Some("Apply"));
    let fields = ours[0].fields_v1.as_ref().unwrap().0.clone();
    assert_eq!(
        fields,
        json!({ "f:spec": { "f:replicas": {} } }),
        "only spec.replicas is in the apply set"
    );
    assert_eq!(d.labels().get("owner").map(String::as_str), Some("helm"));
    assert_eq!(
        d.annotations().get("note").map(String::as_str),
        Some("keep")
    );
    let template = d.spec.unwrap().template;
    assert_eq!(
        template.spec.unwrap().containers[0].image.as_deref(),
        Some("registry.k8s.io/pause:3.10")
    );
    env.done().await;
}

#[tokio::test]
async fn scales_to_zero_on_an_idle_metric_and_wakes_from_zero() {
    let env = Env::new("scale-zero").await;
    env.deployment("vllm", 3).await;
    env.set("queue", 0.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "idle",
        "vllm",
        json!({
            "minReplicas": 0, "maxReplicas": 5,
            "metrics": [{ "name": "queue", "query": env.query("queue"), "target": "1" }]
        }),
    )
    .await;
    env.wait_ready("vllm", 0).await;
    env.wait_event("idle", "ScaledDown", "from 3 to 0").await;

    // At zero there is no per-replica value: ceil(2.5 / 1) from a single-replica baseline.
    env.set("queue", 2.5).await;
    env.wait_ready("vllm", 3).await;
    env.done().await;
}

/// With scaleToZero, a router-style activation metric (it exists without pods) wakes the fleet
/// from zero, where the per-pod query has nothing to measure; once woken, the fleet stays up for
/// the minimum time awake although every signal has dropped, and goes to zero after it.
#[tokio::test]
async fn scale_to_zero_wakes_on_the_activation_metric_and_stays_up_for_the_minimum_time() {
    const MIN_AWAKE: u64 = 30;
    // Pods turn Ready this long after they are created, as a model loads: the scaler says
    // Waking meanwhile.
    const READY_AFTER: Duration = Duration::from_secs(5);
    let env = Env::new("zero-wake").await;
    env.create_slow_deployment("vllm", 0, READY_AFTER).await;
    env.wait_ready("vllm", 0).await;
    env.set("router_rps", 0.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    scale_to_zero_scaler(&env, 2, MIN_AWAKE).await;
    common::eventually("the scaler to say AtZero", WAIT, || async {
        let (status, reason, _) = env.condition("z", "ScalingActive").await?;
        (status == "True" && reason == "AtZero" && zero_status(&env).await?.phase == "AtZero")
            .then_some(())
    })
    .await;
    env.stays("vllm", 0, Duration::from_secs(3)).await;
    assert!(
        env.events("z", "MetricSkipped").await.is_empty(),
        "a per-pod metric with no series at zero is expected, not a warning"
    );

    // Demand at the router: one sync (1 s) later the target asks for a replica. The wake-up
    // happens after `asked` (and may come before the test sees Prometheus serve the value).
    let asked = Instant::now();
    env.set("router_rps", 3.0).await;
    let served = Instant::now();
    common::eventually("the wake-up write", Duration::from_secs(5), || async {
        (env.spec_replicas("vllm").await >= 1).then_some(())
    })
    .await;
    let woke_in = served.elapsed();
    assert!(
        woke_in < Duration::from_secs(4),
        "woken {woke_in:?} after Prometheus served the demand"
    );
    env.wait_event(
        "z",
        "ScaledUp",
        "woken from zero: activation 3 is above the threshold 0",
    )
    .await;
    common::eventually("the scaler to say Waking", WAIT, || async {
        let (status, reason, message) = env.condition("z", "ScalingActive").await?;
        (status == "True"
            && reason == "Waking"
            && message.contains("woken from zero")
            && zero_status(&env).await?.phase == "Waking")
            .then_some(())
    })
    .await;
    env.wait_ready("vllm", 1).await;
    common::eventually("the scaler to say Awake", WAIT, || async {
        (zero_status(&env).await?.phase == "Awake").then_some(())
    })
    .await;

    // Every signal drops at once: the per-pod metric appears at 0, the router goes quiet.
    env.set("waiting", 0.0).await;
    env.set("router_rps", 0.0).await;
    common::eventually("KeptAwake for the minimum time awake", WAIT, || async {
        let (_, reason, message) = env.condition("z", "ScalingLimited").await?;
        (reason == "KeptAwake" && message.contains(&format!("minAwakeSeconds {MIN_AWAKE}")))
            .then_some(())
    })
    .await;
    let awake_for = served.elapsed();
    let remaining =
        Duration::from_secs(MIN_AWAKE).saturating_sub(awake_for + Duration::from_secs(2));
    assert!(
        remaining >= Duration::from_secs(5),
        "the test needs time left to watch ({awake_for:?} already awake)"
    );
    env.stays("vllm", 1, remaining).await;

    // Past the minimum: to zero, and the scaler says so.
    env.wait_ready("vllm", 0).await;
    env.wait_event(
        "z",
        "ScaledDown",
        "to zero: no demand above the activation threshold",
    )
    .await;
    assert!(
        asked.elapsed() >= Duration::from_secs(MIN_AWAKE),
        "went to zero {:?} after the demand came",
        asked.elapsed()
    );
    common::eventually("the scaler to say AtZero again", WAIT, || async {
        (zero_status(&env).await?.phase == "AtZero").then_some(())
    })
    .await;
    env.done().await;
}

/// Scaler `z` on Deployment `vllm`: a per-pod metric `waiting` (no series until pods exist, the
/// way a per-pod vLLM query behaves at zero) and scaleToZero woken by `router_rps`.
async fn scale_to_zero_scaler(env: &Env, idle_seconds: u64, min_awake_seconds: u64) {
    env.scaler(
        "z",
        "vllm",
        json!({
            "minReplicas": 0, "maxReplicas": 4,
            "metrics": [{ "name": "waiting", "query": env.query("waiting"), "target": "1" }],
            "scaleToZero": {
                "activationQuery": format!("sum({})", env.series("router_rps")),
                "idleSeconds": idle_seconds,
                "minAwakeSeconds": min_awake_seconds,
            }
        }),
    )
    .await;
}

/// status.scaleToZero of scaler `z`, once written.
async fn zero_status(env: &Env) -> Option<ScaleToZeroStatus> {
    env.scalers()
        .get("z")
        .await
        .ok()?
        .status?
        .scale_to_zero
        .map(|z| *z)
}

/// Demand that returns during the idle period stops its timer, in the stored status too: the next
/// quiet spell waits a whole idle period again. (A merge patch that only left the field out kept
/// the old idleSince in the object, so the second quiet spell went to zero at once.)
#[tokio::test]
async fn demand_that_returns_restarts_the_idle_period() {
    const IDLE: u64 = 15;
    let env = Env::new("zero-idle").await;
    env.deployment("vllm", 1).await;
    env.set("waiting", 0.0).await;
    env.set("router_rps", 0.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    scale_to_zero_scaler(&env, IDLE, 0).await;
    // Quiet: the idle timer starts.
    common::eventually("status.scaleToZero.idleSince", WAIT, || async {
        zero_status(&env).await?.idle_since.map(|_| ())
    })
    .await;
    // Demand returns before the idle period is over: the timer is gone from the stored status.
    env.set("router_rps", 3.0).await;
    common::eventually("idleSince removed from the status", WAIT, || async {
        (zero_status(&env).await.map(|z| z.idle_since) == Some(None)).then_some(())
    })
    .await;
    // Busy for longer than an idle period, then quiet again: the fleet stays up while the new
    // quiet spell is younger than idleSeconds (an old timer would put it to zero at once).
    env.stays("vllm", 1, Duration::from_secs(IDLE + 1)).await;
    env.set("router_rps", 0.0).await;
    let quiet = Instant::now();
    common::eventually("the new idle timer", WAIT, || async {
        zero_status(&env).await?.idle_since.map(|_| ())
    })
    .await;
    let left = Duration::from_secs(IDLE).saturating_sub(quiet.elapsed() + Duration::from_secs(3));
    assert!(
        left >= Duration::from_secs(5),
        "the test needs time left to watch ({:?} since the quiet began)",
        quiet.elapsed()
    );
    env.stays("vllm", 1, left).await;
    // And after a whole quiet idle period, to zero.
    env.wait_ready("vllm", 0).await;
    assert!(
        quiet.elapsed() >= Duration::from_secs(IDLE),
        "went to zero {:?} into the quiet spell",
        quiet.elapsed()
    );
    env.done().await;
}

/// A lost signal holds by default; with a fallback, after failureThreshold syncs the fleet runs at
/// least fallback.replicas, and the first good reading hands control back to the signal.
#[tokio::test]
async fn a_fallback_raises_a_fleet_whose_signal_is_lost_and_ends_on_the_first_good_reading() {
    let env = Env::new("fallback").await;
    env.deployment("vllm", 2).await;
    env.set("kv", 1.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "fb",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 6,
            "metrics": [{ "name": "kv", "query": env.query("kv"), "target": "1" }],
            "fallback": { "failureThreshold": 3, "replicas": 4 }
        }),
    )
    .await;
    common::eventually("a good sync", WAIT, || async {
        let (_, reason, _) = env.condition("fb", "ScalingActive").await?;
        (reason == "ValidMetric").then_some(())
    })
    .await;

    // The series goes away: no usable signal.
    env.exporter().remove(&env.series("kv"));
    env.prometheus().wait_for_empty(&env.query("kv")).await;
    env.wait_ready("vllm", 4).await;
    let (status, reason, message) = env.condition("fb", "ScalingActive").await.unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "FallbackActive")
    );
    assert!(message.contains("fallback.replicas 4"), "{message}");
    let lost = env.scalers().get("fb").await.unwrap().status.unwrap();
    assert!(lost.syncs_without_signal.unwrap_or(0) >= 3, "{lost:?}");
    env.wait_event("fb", "FallbackActive", "runs at no fewer than 4")
        .await;
    env.assert_told_once("fb", "FallbackActive").await;

    // The first good reading: 4 ready × 0.5 / 1 = 2.
    env.set("kv", 0.5).await;
    env.wait_ready("vllm", 2).await;
    let (_, reason, _) = env.condition("fb", "ScalingActive").await.unwrap();
    assert_eq!(reason, "ValidMetric");
    let back = env.scalers().get("fb").await.unwrap().status.unwrap();
    assert_eq!(back.syncs_without_signal, None);
    env.done().await;
}

#[tokio::test]
async fn scales_down_to_min_and_a_step_cap_walks_the_fleet_down() {
    let env = Env::new("step-cap").await;
    env.deployment("vllm", 10).await;
    env.set("kv", 0.0).await;
    let operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "walk",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{ "query": env.query("kv"), "target": "0.8" }],
            "scaleDown": { "maxStepReplicas": 2 }
        }),
    )
    .await;
    // Record every spec.replicas value the Deployment passes through.
    let mut seen = vec![10];
    let deadline = Instant::now() + WAIT;
    while seen.last() != Some(&1) {
        assert!(
            Instant::now() < deadline,
            "the fleet did not reach minReplicas: {seen:?}"
        );
        let r = env.spec_replicas("vllm").await;
        if seen.last() != Some(&r) {
            seen.push(r);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen,
        [10, 8, 6, 4, 2, 1],
        "one capped step per settled sync"
    );
    let note = env.wait_event("walk", "ScaledDown", "from 10 to 8").await;
    assert!(note.contains("on the way to 1"), "{note}");
    let status = env.scalers().get("walk").await.unwrap().status.unwrap();
    assert_eq!(status.desired_replicas, 1);
    // The unnamed metric goes by its position, in status and in the external metrics API.
    let names: Vec<_> = status
        .current_metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(names, ["metric-0"]);
    let selector =
        llmscaleoperator::extmetrics::selector::LabelSelector::parse("llmscaler=walk").unwrap();
    let served = llmscaleoperator::extmetrics::values::metric_values(
        &operator.cache,
        &env.ns,
        "metric-0",
        &selector,
        k8s_openapi::jiff::Timestamp::now(),
    )
    .unwrap();
    let served = String::from_utf8(served).unwrap();
    assert!(served.contains(r#""metricName":"metric-0""#), "{served}");
    env.done().await;
}

#[tokio::test]
async fn an_unmeasurable_metric_holds_and_a_guardrail_nan_does_not_drive() {
    let env = Env::new("hold").await;
    // The fleet starts where kv puts it (ceil(8 × 0.1 / 0.1) = 8), a fixed point of the ratio:
    // from anywhere else a constant kv keeps moving the fleet, and a sync that lands between
    // reaching a size and the series' removal below would move it on.
    env.deployment("vllm", 8).await;
    env.set("kv", 0.1).await;
    env.set("p99", f64::NAN).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "guard",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [
                { "name": "kv", "query": env.query("kv"), "target": "0.1" },
                { "name": "latency", "query": env.query("p99"), "target": "2" }
            ]
        }),
    )
    .await;
    // kv holds the fleet at 8; the NaN guardrail contributes nothing (read as "very high" it
    // would take the fleet to maxReplicas, read as a failure it would hold the whole sync).
    env.wait_event("guard", "MetricSkipped", "metric latency skipped this sync")
        .await;
    env.stays("vllm", 8, Duration::from_secs(3)).await;

    // Now every metric fails: the series disappear. The fleet holds instead of reading zero.
    env.exporter().remove(&env.series("kv"));
    env.prometheus().wait_for_empty(&env.query("kv")).await;
    env.wait_event("guard", "ScalingHeld", "no metric could be measured")
        .await;
    env.stays("vllm", 8, Duration::from_secs(4)).await;
    let (status, reason, _) = env.condition("guard", "ScalingActive").await.unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NoUsableMetric")
    );
    env.done().await;
}

#[tokio::test]
async fn a_multi_series_query_holds_with_the_reason_in_an_event() {
    let env = Env::new("multi").await;
    env.deployment("vllm", 2).await;
    env.exporter()
        .set(&format!("kv{{test=\"{}\",pod=\"a\"}}", env.ns), 0.1);
    env.exporter()
        .set(&format!("kv{{test=\"{}\",pod=\"b\"}}", env.ns), 0.1);
    let raw = format!("kv{{test=\"{}\"}}", env.ns);
    env.prometheus()
        .wait_for_value(&format!("count({raw})"), 2.0)
        .await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "multi",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{ "name": "kv", "query": raw, "target": "0.8" }]
        }),
    )
    .await;
    let note = env
        .wait_event(
            "multi",
            "MetricSkipped",
            "aggregate them with avg(...) or sum(...)",
        )
        .await;
    assert!(
        note.contains("pod=\"a\"") && note.contains("pod=\"b\""),
        "names the label sets: {note}"
    );
    env.stays("vllm", 2, Duration::from_secs(3)).await;
    env.done().await;
}

#[tokio::test]
async fn prometheus_down_holds_the_fleet() {
    let mut env = Env::new("prom-down").await;
    env.deployment("vllm", 2).await;
    env.set("kv", 0.8).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "down",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{ "name": "kv", "query": env.query("kv"), "target": "0.8" }]
        }),
    )
    .await;
    common::eventually("a first healthy sync", WAIT, || async {
        let (status, _, _) = env.condition("down", "ScalingActive").await?;
        (status == "True").then_some(())
    })
    .await;
    env.prometheus_mut().stop();
    env.wait_event("down", "MetricSkipped", "request to").await;
    env.wait_event("down", "ScalingHeld", "stays at 2").await;
    env.stays("vllm", 2, Duration::from_secs(3)).await;
    env.done().await;
}

#[tokio::test]
async fn a_statefulset_target_is_scaled_generically() {
    let env = Env::new("sts").await;
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": { "name": "vllm" },
        "spec": {
            "replicas": 1,
            "serviceName": "vllm",
            "selector": { "matchLabels": { "app": "vllm" } },
            "template": {
                "metadata": { "labels": { "app": "vllm" } },
                "spec": { "containers": [{ "name": "vllm", "image": "registry.k8s.io/pause:3.10" }] }
            }
        }
    }))
    .unwrap();
    let api: Api<StatefulSet> = Api::namespaced(env.client.clone(), &env.ns);
    api.create(&PostParams::default(), &sts).await.unwrap();
    env.set("kv", 1.5).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "sts",
        "vllm",
        json!({
            "targetRef": { "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm" },
            "minReplicas": 1, "maxReplicas": 4,
            "metrics": [{ "query": env.query("kv"), "target": "1" }]
        }),
    )
    .await;
    common::eventually("the StatefulSet to be scaled to 2", WAIT, || async {
        (api.get("vllm").await.ok()?.spec?.replicas? == 2).then_some(())
    })
    .await;
    env.done().await;
}

#[tokio::test]
async fn a_paused_rollout_defers_scaling() {
    let env = Env::new("rollout").await;
    env.deployment("vllm", 2).await;
    // Pause, then change the template: the rollout cannot progress.
    env.deployments()
        .patch(
            "vllm",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "paused": true } })),
        )
        .await
        .unwrap();
    env.deployments()
        .patch(
            "vllm",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "template": { "metadata": { "annotations": { "rev": "2" } } } } })),
        )
        .await
        .unwrap();
    env.set("kv", 4.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "guarded",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{ "query": env.query("kv"), "target": "1" }]
        }),
    )
    .await;
    env.wait_event("guarded", "ScalingDeferred", "mid-rollout")
        .await;
    let (status, _, message) = env.condition("guarded", "RolloutInProgress").await.unwrap();
    assert_eq!(status, "True", "{message}");
    env.stays("vllm", 2, Duration::from_secs(3)).await;

    // Resume: the rollout completes and the deferred scale-up happens.
    env.deployments()
        .patch(
            "vllm",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "paused": false } })),
        )
        .await
        .unwrap();
    env.wait_ready("vllm", 8).await;
    env.done().await;
}

#[tokio::test]
async fn bad_targets_and_queries_are_reported_and_other_scalers_keep_working() {
    let env = Env::new("bad-input").await;
    env.deployment("vllm", 1).await;
    // Its own target: two scalers of one target would be a conflict.
    env.deployment("other", 1).await;
    env.set("kv", 2.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler("missing", "no-such-deployment", json!({
        "minReplicas": 1, "maxReplicas": 5, "metrics": [{ "query": env.query("kv"), "target": "1" }]
    }))
    .await;
    env.scaler("no-replicas", "cm", json!({
        "targetRef": { "apiVersion": "v1", "kind": "ConfigMap", "name": "cm" },
        "minReplicas": 1, "maxReplicas": 5, "metrics": [{ "query": env.query("kv"), "target": "1" }]
    }))
    .await;
    let cm: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "cm" } })).unwrap();
    Api::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    env.scaler("unknown-kind", "x", json!({
        "targetRef": { "apiVersion": "example.com/v1", "kind": "Widget", "name": "x" },
        "minReplicas": 1, "maxReplicas": 5, "metrics": [{ "query": env.query("kv"), "target": "1" }]
    }))
    .await;
    env.scaler("bad-promql", "other", json!({
        "minReplicas": 1, "maxReplicas": 5, "metrics": [{ "name": "broken", "query": "avg(kv{", "target": "1" }]
    }))
    .await;
    env.scaler("good", "vllm", json!({
        "minReplicas": 1, "maxReplicas": 5, "metrics": [{ "query": env.query("kv"), "target": "1" }]
    }))
    .await;

    // The good scaler is not disturbed by its broken neighbours.
    env.wait_ready("vllm", 2).await;
    for (scaler, reason, fragment) in [
        (
            "missing",
            "TargetNotFound",
            "Deployment no-such-deployment not found",
        ),
        (
            "no-replicas",
            "InvalidTarget",
            "ConfigMap cm has no integer spec.replicas",
        ),
        (
            "unknown-kind",
            "UnknownTargetKind",
            "does not serve kind Widget in example.com/v1",
        ),
    ] {
        common::eventually(&format!("{scaler}: Ready=False {reason}"), WAIT, || async {
            let (status, r, message) = env.condition(scaler, "Ready").await?;
            (status == "False" && r == reason && message.contains(fragment)).then_some(())
        })
        .await;
        env.wait_event(scaler, reason, fragment).await;
    }
    env.wait_event(
        "bad-promql",
        "MetricSkipped",
        "Prometheus rejected the query (bad_data)",
    )
    .await;
    let (status, reason, _) = env.condition("bad-promql", "ScalingActive").await.unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NoUsableMetric")
    );
    env.done().await;
}

#[tokio::test]
async fn stabilization_pins_the_fleet_for_the_window_then_releases_it() {
    let env = Env::new("stabilize").await;
    env.deployment("vllm", 4).await;
    env.set("kv", 1.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "calm",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{ "query": env.query("kv"), "target": "1" }],
            "scaleDown": { "stabilizationWindowSeconds": 8 }
        }),
    )
    .await;
    common::eventually("a steady sync at 4", WAIT, || async {
        let (status, _, message) = env.condition("calm", "ScalingActive").await?;
        (status == "True" && message.contains("recommends 4")).then_some(())
    })
    .await;

    env.set("kv", 0.25).await;
    env.wait_event("calm", "ScaleDownStabilized", "held at 4")
        .await;
    // A brief dip does not shrink the fleet...
    env.stays("vllm", 4, Duration::from_secs(3)).await;
    // ...but once the window has passed, it does.
    env.wait_ready("vllm", 1).await;
    env.done().await;
}

#[tokio::test]
async fn the_stabilization_history_survives_an_operator_restart() {
    let env = Env::new("restart").await;
    env.deployment("vllm", 4).await;
    env.set("kv", 1.0).await;
    let first = Operator::start(&env.client, &env.ns);
    env.scaler(
        "durable",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{ "query": env.query("kv"), "target": "1" }],
            "scaleDown": { "stabilizationWindowSeconds": 25 }
        }),
    )
    .await;
    let uid = env.scalers().get("durable").await.unwrap().uid().unwrap();
    common::eventually("the high recommendation to be persisted", WAIT, || async {
        let history = stored_history(&env, "durable").await?;
        (history.uid == uid && history.entries.iter().any(|e| e.replicas == 4)).then_some(())
    })
    .await;
    env.set("kv", 0.25).await;
    env.wait_event("durable", "ScaleDownStabilized", "held at 4")
        .await;

    // A new operator process (a restart, or a new leader) remembers the window.
    first.stop().await;
    let _second = Operator::start(&env.client, &env.ns);
    env.stays("vllm", 4, Duration::from_secs(6)).await;
    env.wait_ready("vllm", 1).await;
    env.done().await;
}

#[tokio::test]
async fn a_recreated_target_does_not_inherit_the_old_targets_hold() {
    let env = Env::new("recreated").await;
    env.deployment("vllm", 3).await;
    env.set("kv", 1.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "phoenix",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{ "query": env.query("kv"), "target": "1" }],
            "scaleDown": { "stabilizationWindowSeconds": 300 }
        }),
    )
    .await;
    let first_uid = env.deployments().get("vllm").await.unwrap().uid().unwrap();
    common::eventually("a history recorded for the first target", WAIT, || async {
        let history = stored_history(&env, "phoenix").await?;
        (history.target_uid.as_deref() == Some(first_uid.as_str())).then_some(())
    })
    .await;
    env.set("kv", 0.2).await;
    env.wait_event("phoenix", "ScaleDownStabilized", "held at 3")
        .await;

    // The Deployment is deleted and created again under the same name (a reinstall): its history
    // was the old fleet's, so the new one follows the metric without waiting out 300 s.
    env.deployments()
        .delete("vllm", &Default::default())
        .await
        .unwrap();
    common::eventually("the old Deployment to be gone", WAIT, || async {
        env.deployments()
            .get_opt("vllm")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let recreated = k8s_openapi::jiff::Timestamp::now();
    env.create_deployment("vllm", 3).await;
    let second_uid = common::eventually("the new Deployment", WAIT, || async {
        env.deployments().get("vllm").await.ok()?.uid()
    })
    .await;
    assert_ne!(first_uid, second_uid);
    // The history is the new target's alone: it starts from the count the new Deployment has
    // (a new target, like a new scaler, is not shrunk before a window has passed), and nothing
    // recorded for the old one is kept.
    let history = common::eventually("a history recorded for the new target", WAIT, || async {
        let history = stored_history(&env, "phoenix").await?;
        (history.target_uid.as_deref() == Some(second_uid.as_str())).then_some(history)
    })
    .await;
    assert!(
        history
            .entries
            .iter()
            .all(|e| e.time.0 >= recreated - k8s_openapi::jiff::SignedDuration::from_secs(1)),
        "an entry of the old target survived: {history:?}"
    );
    env.done().await;
}

#[tokio::test]
async fn a_leaderworkerset_shaped_target_is_scaled_and_scale_down_waits_until_settled() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let env = Env::new("lws").await;
    common::install_leaderworkerset_crd(&env.client).await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
        "leaderworkersets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.ns, &resource);
    let lws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": { "name": "vllm" },
        "spec": { "replicas": 1, "leaderWorkerTemplate": { "size": 2 } }
    }))
    .unwrap();
    // Creating the object right after the CRD became established can race its discovery.
    common::eventually("the LeaderWorkerSet to be created", WAIT, || async {
        api.create(&PostParams::default(), &lws).await.ok()
    })
    .await;
    let set_ready = |ready: i64| {
        let api = api.clone();
        async move {
            api.patch_status(
                "vllm",
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": { "readyReplicas": ready } })),
            )
            .await
            .unwrap();
        }
    };
    let replicas = || {
        let api = api.clone();
        async move {
            api.get("vllm").await.unwrap().data["spec"]["replicas"]
                .as_i64()
                .unwrap()
        }
    };
    set_ready(1).await;
    env.set("kv", 3.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler("lws", "vllm", json!({
        "targetRef": { "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "vllm" },
        "minReplicas": 1, "maxReplicas": 4,
        "metrics": [{ "query": env.query("kv"), "target": "1" }]
    }))
    .await;
    common::eventually("the LeaderWorkerSet to be scaled to 3", WAIT, || async {
        (replicas().await == 3).then_some(())
    })
    .await;
    let lws_now = api.get("vllm").await.unwrap();
    assert_eq!(
        lws_now.data["spec"]["leaderWorkerTemplate"]["size"], 2,
        "the rest of the spec is untouched"
    );

    // The metric collapses while only some of the 3 are ready: the scale-down waits for the fleet
    // to settle. (Metric first: with a high metric, 2 ready would rightly scale up.)
    env.set("kv", 0.0).await;
    set_ready(2).await;
    env.wait_event(
        "lws",
        "ScalingDeferred",
        "waits until all 3 replicas are ready (2 are)",
    )
    .await;
    assert_eq!(replicas().await, 3);
    set_ready(3).await;
    common::eventually(
        "the LeaderWorkerSet to be scaled down to 1",
        WAIT,
        || async { (replicas().await == 1).then_some(()) },
    )
    .await;
    env.done().await;
}

#[tokio::test]
async fn preemption_is_accepted_and_reported_as_having_no_effect() {
    let env = Env::new("preempt").await;
    env.deployment("vllm", 1).await;
    env.set("kv", 1.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "pre",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{ "query": env.query("kv"), "target": "1" }],
            "preemption": { "enable": true, "priorityClass": "high" }
        }),
    )
    .await;
    env.wait_event("pre", "PreemptionIgnored", "has no effect yet")
        .await;
    // Several syncs later (a scale-up, its pods Ready, and a sync that sees them), the notice is
    // still one event: told once per scaler, not patched into a series at every sync.
    env.set("kv", 3.0).await;
    env.wait_ready("vllm", 3).await;
    common::eventually("a sync that sees 3 ready replicas", WAIT, || async {
        let status = env.scalers().get("pre").await.ok()?.status?;
        (status.current_replicas == 3).then_some(())
    })
    .await;
    env.assert_told_once("pre", "PreemptionIgnored").await;
    env.done().await;
}

/// A gate in front of Prometheus that only answers requests carrying the expected credential.
async fn authenticating_proxy(upstream: String, token: &'static str) -> String {
    use axum::extract::RawQuery;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/api/v1/query",
        get(move |headers: HeaderMap, RawQuery(query): RawQuery| {
            let upstream = upstream.clone();
            async move {
                let expected = format!("Bearer {token}");
                if headers.get("authorization").and_then(|v| v.to_str().ok())
                    != Some(expected.as_str())
                {
                    return (StatusCode::UNAUTHORIZED, String::from("unauthorized"));
                }
                let url = format!("{upstream}/api/v1/query?{}", query.unwrap_or_default());
                let body = reqwest::get(url).await.unwrap().text().await.unwrap();
                (StatusCode::OK, body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test]
async fn server_headers_are_sent_and_never_shown() {
    const TOKEN: &str = "s3cret-token-value";
    let env = Env::new("headers").await;
    env.deployment("authed", 1).await;
    env.deployment("anon", 1).await;
    env.set("kv", 2.0).await;
    let proxy = authenticating_proxy(env.prometheus().url.clone(), TOKEN).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "authed",
        "authed",
        json!({
            "serverAddress": proxy,
            "serverHeaders": { "Authorization": format!("Bearer {TOKEN}") },
            "minReplicas": 1, "maxReplicas": 2,
            "metrics": [{ "query": env.query("kv"), "target": "1" }]
        }),
    )
    .await;
    env.scaler(
        "anon",
        "anon",
        json!({
            "serverAddress": proxy,
            "minReplicas": 1, "maxReplicas": 2,
            "metrics": [{ "query": env.query("kv"), "target": "1" }]
        }),
    )
    .await;
    env.wait_ready("authed", 2).await;
    env.wait_event("anon", "MetricSkipped", "HTTP 401").await;
    assert_eq!(env.spec_replicas("anon").await, 1);

    // The credential appears in no event and no status.
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let all =
        serde_json::to_string(&events.list(&ListParams::default()).await.unwrap().items).unwrap();
    assert!(!all.contains(TOKEN), "an event leaks the credential");
    for name in ["authed", "anon"] {
        let status = serde_json::to_string(&env.scalers().get(name).await.unwrap().status).unwrap();
        assert!(
            !status.contains(TOKEN),
            "the status of {name} leaks the credential"
        );
    }
    env.done().await;
}

#[tokio::test]
async fn a_dry_run_scaler_decides_and_reports_but_writes_nothing() {
    let env = Env::new("dry-run").await;
    env.deployment("vllm", 1).await;
    env.set("kv", 3.0).await;
    let operator = Operator::start(&env.client, &env.ns);
    // Annotated from the start, so no sync can write before the annotation is seen.
    let scaler: llmscaleoperator::api::LLMScaler = serde_json::from_value(json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": { "name": "observer", "annotations": { "autoscaling.modelsphere.dev/dry-run": "true" } },
        "spec": {
            "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm" },
            "serverAddress": env.prometheus().url, "syncPeriodSeconds": 1,
            "minReplicas": 1, "maxReplicas": 5,
            "metrics": [{ "name": "kv", "query": env.query("kv"), "target": "1" }]
        }
    }))
    .unwrap();
    env.scalers()
        .create(&PostParams::default(), &scaler)
        .await
        .unwrap();
    env.wait_event(
        "observer",
        "WouldScaleUp",
        "would scale Deployment/vllm from 1 to 3",
    )
    .await;
    common::eventually("status to show the recommendation", WAIT, || async {
        let s = env.scalers().get("observer").await.ok()?.status?;
        (s.desired_replicas == 3).then_some(())
    })
    .await;
    env.stays("vllm", 1, Duration::from_secs(2)).await;
    let d = env.deployments().get("vllm").await.unwrap();
    assert!(
        d.managed_fields()
            .iter()
            .all(|m| m.manager.as_deref() != Some("llmscaleoperator")),
        "nothing written: {:?}",
        d.managed_fields()
    );
    // Published all the same, for an HPA in advisory mode.
    let cached = operator
        .cache
        .get(&llmscaleoperator::metric_cache::ScalerKey {
            namespace: env.ns.clone(),
            name: "observer".into(),
        })
        .unwrap();
    assert_eq!(cached.desired_replicas, 3);
    env.done().await;
}

#[tokio::test]
async fn only_the_watched_namespaces_are_reconciled() {
    let mut env = Env::new("scope").await;
    let home = env.ns.clone();
    let other = common::namespace(&env.client, "scope-other").await;
    let outside = common::namespace(&env.client, "scope-outside").await;
    env.set("load", 3.0).await;
    let spec = json!({
        "minReplicas": 1, "maxReplicas": 3,
        "metrics": [{ "query": env.query("load"), "target": "1" }]
    });
    for ns in [&home, &other, &outside] {
        env.ns = ns.clone();
        env.deployment("vllm", 1).await;
        env.scaler("vllm", "vllm", spec.clone()).await;
    }
    env.ns = home.clone();
    let _operator = Operator::builder(&env.client)
        .scope(llmscaleoperator::controller::Scope::namespaces([
            home.clone(),
            other.clone(),
        ]))
        .start();
    let replicas = |ns: String| {
        let client = env.client.clone();
        async move {
            let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client, &ns);
            api.get("vllm").await.ok()?.spec?.replicas
        }
    };
    common::eventually("both watched namespaces at 3", WAIT, || async {
        (replicas(home.clone()).await == Some(3) && replicas(other.clone()).await == Some(3))
            .then_some(())
    })
    .await;
    // Meanwhile the third namespace, not ours, is left alone.
    env.ns = outside.clone();
    env.stays("vllm", 1, Duration::from_secs(3)).await;
    env.ns = home.clone();
    let unwatched: Api<llmscaleoperator::api::LLMScaler> =
        Api::namespaced(env.client.clone(), &outside);
    assert!(
        unwatched.get("vllm").await.unwrap().status.is_none(),
        "a scaler outside the scope gets no status"
    );
    common::delete_namespace(&env.client, &other).await;
    common::delete_namespace(&env.client, &outside).await;
    env.done().await;
}

/// The scaler's recommendation history, once its status has one.
async fn stored_history(
    env: &Env,
    scaler: &str,
) -> Option<llmscaleoperator::api::RecommendationHistory> {
    env.scalers()
        .get(scaler)
        .await
        .ok()?
        .status?
        .recommendation_history
}

#[tokio::test]
async fn a_pause_pins_or_freezes_the_target_and_removing_it_resumes() {
    // The scale-down window: long enough to tell a scale-down at once from one a window later.
    const WINDOW: u64 = 16;
    let env = Env::new("pause").await;
    env.deployment("vllm", 2).await;
    env.set("kv", 1.0).await;
    let operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "p",
        "vllm",
        json!({
            "minReplicas": 1, "maxReplicas": 6,
            "metrics": [{ "query": env.query("kv"), "target": "1" }],
            "scaleDown": { "stabilizationWindowSeconds": WINDOW }
        }),
    )
    .await;
    common::eventually("a steady sync at 2", WAIT, || async {
        let (status, _, message) = env.condition("p", "ScalingActive").await?;
        (status == "True" && message.contains("recommends 2")).then_some(())
    })
    .await;
    let annotate = |annotations: serde_json::Value| {
        let scalers = env.scalers();
        async move {
            scalers
                .patch(
                    "p",
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "metadata": { "annotations": annotations } })),
                )
                .await
                .unwrap();
        }
    };
    const PINNED: &str = "autoscaling.modelsphere.dev/paused-replicas";
    const FROZEN: &str = "autoscaling.modelsphere.dev/paused";

    // A pin above maxReplicas is refused, named, and changes nothing.
    annotate(json!({ PINNED: "9" })).await;
    let message = common::eventually("the pin above maxReplicas refused", WAIT, || async {
        let (status, reason, message) = env.condition("p", "Ready").await?;
        (status == "False" && reason == "InvalidAnnotation").then_some(message)
    })
    .await;
    assert!(
        message.contains(PINNED) && message.contains("maxReplicas"),
        "{message}"
    );
    env.stays("vllm", 2, Duration::from_secs(3)).await;

    // Pinned at 4 while the signal asks for 2.
    annotate(json!({ PINNED: "4" })).await;
    env.wait_ready("vllm", 4).await;
    env.wait_event("p", "Paused", "Deployment/vllm pinned at 4")
        .await;
    let (status, reason, _) = env.condition("p", "ScalingActive").await.unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Paused"));
    assert!(operator.metrics.encode().unwrap().contains(&format!(
        r#"llmscaleoperator_paused{{namespace="{}",scaler="p"}} 1"#,
        env.ns
    )));

    // Frozen where it is, though the signal now asks for the maximum.
    annotate(json!({ PINNED: null, FROZEN: "true" })).await;
    env.wait_event("p", "Paused", "Deployment/vllm frozen at 4")
        .await;
    env.set("kv", 3.0).await;
    common::eventually("a sync that sees the hot signal", WAIT, || async {
        let (_, _, message) = env.condition("p", "ScalingActive").await?;
        message.contains("recommends 12").then_some(())
    })
    .await;
    env.stays("vllm", 4, Duration::from_secs(3)).await;

    // Unpaused: the signal decides again.
    annotate(json!({ FROZEN: null })).await;
    env.wait_ready("vllm", 6).await;
    let (status, _, _) = env.condition("p", "ScalingActive").await.unwrap();
    assert_eq!(status, "True");
    assert!(operator.metrics.encode().unwrap().contains(&format!(
        r#"llmscaleoperator_paused{{namespace="{}",scaler="p"}} 0"#,
        env.ns
    )));

    // Frozen again while the demand falls: the scale-down window goes on recording what the
    // signal says, so once the 6 from before the pause has left it, removing the pause scales
    // down at once, not a window later on a recommendation from before the pause.
    annotate(json!({ FROZEN: "true" })).await;
    env.wait_event("p", "Paused", "Deployment/vllm frozen at 6")
        .await;
    env.set("kv", 0.2).await;
    common::eventually(
        "the window to hold only what the frozen signal said",
        Duration::from_secs(60),
        || async {
            let history = stored_history(&env, "p").await?;
            (!history.entries.is_empty() && history.entries.iter().all(|e| e.replicas == 2))
                .then_some(())
        },
    )
    .await;
    env.stays("vllm", 6, Duration::from_secs(2)).await;
    let unpaused = Instant::now();
    annotate(json!({ FROZEN: null })).await;
    env.wait_ready("vllm", 2).await;
    assert!(
        unpaused.elapsed() < Duration::from_secs(WINDOW / 2),
        "scaled down {:?} after the pause ended",
        unpaused.elapsed()
    );
    env.done().await;
}
