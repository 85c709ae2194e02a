//! The release rule: a tag vX.Y.Z is refused unless X.Y.Z is the chart's appVersion, and the
//! binary's own version agrees with the chart; the Dockerfile builds what CI builds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

fn check(tag: &str, app_version: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("release-tag-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = dir.join("Chart.yaml");
    std::fs::write(
        &chart,
        format!(
            "apiVersion: v2\nname: llmscaleoperator\nversion: 9.9.9\nappVersion: {app_version}\n"
        ),
    )
    .unwrap();
    let said = script("check-release-tag.sh", &[tag, chart.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    said
}

/// Runs scripts/`name` with `args`: whether it succeeded, and what it printed.
fn script(name: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(common::repo_root().join("scripts").join(name))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_tag_must_name_the_charts_app_version() {
    assert!(check("v1.4.2", "\"1.4.2\"").0);
    assert!(check("v1.4.2", "1.4.2").0);
    // Pre-release suffixes compare by their core, on either side.
    assert!(check("v1.4.2-rc.1", "1.4.2").0);
    assert!(check("v1.4.2", "'1.4.2-beta.3'").0);

    let (ok, message) = check("v1.5.0", "\"1.4.2\"");
    assert!(!ok, "{message}");
    assert!(
        message.contains("bump appVersion") && message.contains("chart/Chart.yaml"),
        "{message}"
    );
    assert!(
        message.contains("1.5.0") && message.contains("1.4.2"),
        "{message}"
    );

    for bad in ["1.4.2", "v1.4", "release-1.4.2", ""] {
        let (ok, message) = check(bad, "1.4.2");
        assert!(!ok, "{bad:?} must be refused: {message}");
    }
}

#[test]
fn the_binary_and_the_chart_carry_one_version() {
    let chart: serde_json::Value = serde_norway::from_str(
        &std::fs::read_to_string(common::repo_root().join("chart/Chart.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        chart["appVersion"].as_str().unwrap(),
        env!("CARGO_PKG_VERSION"),
        "chart/Chart.yaml appVersion and Cargo.toml version must move together"
    );
    let (ok, message) = check(
        &format!("v{}", env!("CARGO_PKG_VERSION")),
        chart["appVersion"].as_str().unwrap(),
    );
    assert!(ok, "{message}");
}

#[test]
fn the_dockerfile_builds_the_locked_release_as_nonroot_on_overridable_bases() {
    let dockerfile = std::fs::read_to_string(common::repo_root().join("Dockerfile")).unwrap();
    for needle in [
        "ARG RUST_IMAGE=",
        "ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot",
        "FROM ${RUST_IMAGE} AS build",
        "FROM ${RUNTIME_IMAGE}",
        "cargo build --release --locked",
        "USER 65532",
    ] {
        assert!(dockerfile.contains(needle), "Dockerfile lacks {needle:?}");
    }
    // Every path the build copies exists, so the build context is complete.
    for line in dockerfile
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for source in &parts[1..parts.len() - 1] {
            assert!(
                common::repo_root().join(source).exists(),
                "Dockerfile copies {source}, which does not exist"
            );
        }
    }
    // Cargo reads the whole workspace: every member has to be in the build context.
    let manifest: toml_members::Members =
        toml_members::read(&common::repo_root().join("Cargo.toml"));
    for member in manifest.0 {
        assert!(
            dockerfile.contains(&format!("COPY {member} ./{member}")),
            "the Dockerfile does not copy workspace member {member}"
        );
    }
    let workflow =
        std::fs::read_to_string(common::repo_root().join(".github/workflows/release.yml")).unwrap();
    assert!(workflow.contains("scripts/check-release-tag.sh"));
    assert!(workflow.contains("linux/amd64,linux/arm64"));
    assert!(workflow.contains("helm lint --strict chart"));
}

/// The workflow's packaging step, run as written with a pre-release version: the chart carries the
/// whole version as both its version and appVersion, so it installs the image just pushed.
#[test]
fn a_pre_release_packages_a_chart_of_its_own_version() {
    let workflow =
        std::fs::read_to_string(common::repo_root().join(".github/workflows/release.yml")).unwrap();
    let step = workflow
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("- run: helm package "))
        .expect("a helm package step");
    let dir = common::repo_root().join("target/test-tmp/release-package");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let args: Vec<String> = step
        .split_whitespace()
        .map(|a| {
            a.trim_matches('"')
                .replace("${VERSION}", "0.1.0-rc.1")
                .replace("dist", dir.to_str().unwrap())
        })
        .collect();
    let mut full = vec!["package".to_owned()];
    full.extend(args);
    let out = common::helm(&full.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive = dir.join("llmscaleoperator-0.1.0-rc.1.tgz");
    assert!(
        archive.exists(),
        "the push step's file name: {}",
        archive.display()
    );
    assert!(workflow.contains("helm push \"dist/llmscaleoperator-${VERSION}.tgz\""));
    let shown = common::helm(&["show", "chart", archive.to_str().unwrap()]);
    let chart = String::from_utf8_lossy(&shown.stdout);
    assert!(chart.contains("version: 0.1.0-rc.1"), "{chart}");
    assert!(chart.contains("appVersion: 0.1.0-rc.1"), "{chart}");
}

/// The workflow sets Artifact Hub's annotations from the tag: the image it lists is the one just
/// pushed, and only a pre-release is marked as one.
#[test]
fn the_release_lists_its_own_image_and_marks_only_a_pre_release() {
    let workflow =
        std::fs::read_to_string(common::repo_root().join(".github/workflows/release.yml")).unwrap();
    assert!(
        workflow.contains("scripts/release-annotations.sh \"${VERSION}\" chart/Chart.yaml"),
        "the chart job sets the annotations"
    );
    let dir = common::repo_root().join("target/test-tmp/release-annotations");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (version, prerelease) in [("0.1.0-rc.1", "true"), ("0.1.0", "false")] {
        let chart = dir.join(format!("Chart-{version}.yaml"));
        std::fs::copy(common::repo_root().join("chart/Chart.yaml"), &chart).unwrap();
        let (ok, said) = script(
            "release-annotations.sh",
            &[version, chart.to_str().unwrap()],
        );
        assert!(ok, "{said}");
        let yaml: serde_json::Value =
            serde_norway::from_str(&std::fs::read_to_string(&chart).unwrap()).unwrap();
        let annotations = &yaml["annotations"];
        assert_eq!(
            annotations["artifacthub.io/prerelease"], prerelease,
            "{version}"
        );
        let images = annotations["artifacthub.io/images"].as_str().unwrap();
        assert!(
            images.contains(&format!(
                "image: docker.io/4pdosc/llmscaleoperator:{version}\n"
            )),
            "{version}: {images}"
        );
        assert_eq!(yaml["appVersion"], "0.1.0", "nothing else changes");
    }
    let (ok, said) = script(
        "release-annotations.sh",
        &["v1.0", dir.join("Chart-0.1.0.yaml").to_str().unwrap()],
    );
    assert!(!ok, "a version that is not X.Y.Z is refused: {said}");
}

/// The `members` of the root manifest's `[workspace]`, read without a TOML dependency: the list is
/// one line of quoted names.
mod toml_members {
    pub struct Members(pub Vec<String>);

    pub fn read(path: &std::path::Path) -> Members {
        let text = std::fs::read_to_string(path).unwrap();
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("members"))
            .expect("a [workspace] members line");
        let list = line.split_once('=').unwrap().1;
        Members(
            list.split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect(),
        )
    }
}
