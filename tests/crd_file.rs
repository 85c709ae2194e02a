//! The committed CRD manifests (plain and in the chart) are exactly what the types generate.

#![allow(clippy::unwrap_used)]

mod common;

#[test]
fn committed_crds_match_the_types() {
    let generated = llmscaleoperator::api::crd_yaml().unwrap();
    for relative in [
        "config/crd/bases/autoscaling.modelsphere.dev_llmscalers.yaml",
        "chart/files/llmscalers.yaml",
    ] {
        let path = common::repo_root().join(relative);
        let committed = std::fs::read_to_string(&path).unwrap();
        assert!(
            committed == generated,
            "{} is out of date with src/api: run `make crd` and commit the result",
            path.display()
        );
    }
}
