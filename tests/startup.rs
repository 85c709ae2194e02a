//! Start-up awareness on the real control plane: pods that become Ready only seconds after they
//! are created (a kwok stage with a delay, as a model loads), a real Prometheus, the controller.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::Operator;
use common::env::{Env, WAIT};
use serde_json::json;

/// Seconds between a pod's creation and its Ready condition (kwok's pod-ready-delayed stage).
const READY_AFTER: u64 = 6;

#[tokio::test]
async fn a_step_with_slow_pods_is_one_scale_up_to_the_right_size_not_a_cascade() {
    let env = Env::new("startup").await;
    env.create_slow_deployment("slow", 2, Duration::from_secs(READY_AFTER))
        .await;
    env.wait_ready("slow", 2).await;
    // A fleet total (requests in flight over every pod) against 8 per replica: 16 needs 2.
    env.set("inflight", 16.0).await;
    let _operator = Operator::start(&env.client, &env.ns);
    env.scaler(
        "slow",
        "slow",
        json!({
            "minReplicas": 1, "maxReplicas": 20,
            "metrics": [{ "name": "in-flight", "query": env.query("inflight"), "target": "8",
                          "targetType": "AverageValue" }],
        }),
    )
    .await;

    // The start-up delay is learned from the two pods already there.
    let learned = common::eventually("status.startup learned from the pods", WAIT, || async {
        env.scalers().get("slow").await.ok()?.status?.startup
    })
    .await;
    assert!(
        (READY_AFTER as i32 - 1..=READY_AFTER as i32 + 4).contains(&learned.observed_seconds),
        "learned {learned:?}, pods take {READY_AFTER} s"
    );
    assert_eq!(env.spec_replicas("slow").await, 2, "settled: nothing to do");

    // The step: 48 in flight needs 6. One scale-up, straight to 6.
    env.set("inflight", 48.0).await;
    common::eventually("the scale-up to 6", WAIT, || async {
        (env.spec_replicas("slow").await == 6).then_some(())
    })
    .await;
    // While the four new pods load, the syncs (one a second) count them as capacity coming and
    // add nothing.
    let note = env
        .wait_event(
            "slow",
            "StartingCounted",
            "4 pods starting counted as capacity",
        )
        .await;
    assert!(note.contains("stays at 6"), "{note}");
    env.stays("slow", 6, Duration::from_secs(READY_AFTER - 2))
        .await;
    env.wait_ready("slow", 6).await;
    env.stays("slow", 6, Duration::from_secs(3)).await;
    // Told once, not patched at every sync while the pods loaded.
    env.assert_told_once("slow", "StartingCounted").await;
    let ups = env.events("slow", "ScaledUp").await;
    assert_eq!(ups.len(), 1, "one scale-up, not a cascade: {ups:?}");
    assert!(ups[0].contains("from 2 to 6"), "{}", ups[0]);

    // The four new pods are learned too.
    common::eventually("six pods learned", WAIT, || async {
        let startup = env.scalers().get("slow").await.ok()?.status?.startup?;
        (startup.samples >= 6).then_some(())
    })
    .await;
    env.done().await;
}
