//! The committed CRD manifest is exactly what the types generate.

#![allow(clippy::unwrap_used)]

mod common;

#[test]
fn committed_crd_matches_the_types() {
    let path =
        common::repo_root().join("config/crd/bases/autoscaling.modelsphere.dev_llmscalers.yaml");
    let committed = std::fs::read_to_string(&path).unwrap();
    let generated = llmscaleoperator::api::crd_yaml().unwrap();
    assert!(
        committed == generated,
        "{} is out of date with src/api: run `make crd` and commit the result",
        path.display()
    );
}
