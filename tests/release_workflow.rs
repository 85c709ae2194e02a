//! The release and CI workflows, read as data: the chart cannot be pushed onto the image's
//! reference, nothing is pushed before the tests and the chart lint pass, every action is pinned
//! to a commit, secrets never reach a script line, only the signing jobs may mint an OIDC token,
//! and the plain install manifests a release attaches render from the chart.
//!
//! Pure: no cluster, no registry. The scripts run as the release runs them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

const RELEASE: &str = ".github/workflows/release.yml";
const CI: &str = ".github/workflows/ci.yml";

fn read(relative: &str) -> String {
    let path = common::repo_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn parse(relative: &str) -> Value {
    serde_norway::from_str(&read(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Every workflow file, by its path relative to the repository.
fn workflows() -> Vec<String> {
    let dir = common::repo_root().join(".github/workflows");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yml") || n.ends_with(".yaml"))
        .map(|n| format!(".github/workflows/{n}"))
        .collect();
    names.sort();
    assert!(
        names.contains(&RELEASE.to_owned()) && names.contains(&CI.to_owned()),
        "{names:?}"
    );
    names
}

fn jobs(workflow: &Value) -> &serde_json::Map<String, Value> {
    workflow["jobs"].as_object().expect("a jobs map")
}

fn steps(job: &Value) -> Vec<&Value> {
    job["steps"]
        .as_array()
        .map(|s| s.iter().collect())
        .unwrap_or_default()
}

/// The scripts of a job's `run:` steps.
fn runs(job: &Value) -> Vec<&str> {
    steps(job)
        .into_iter()
        .filter_map(|s| s["run"].as_str())
        .collect()
}

fn runs_containing(job: &Value, needle: &str) -> bool {
    step_running(job, needle).is_some()
}

/// The first step of `job` whose `run:` script contains `needle`.
fn step_running<'a>(job: &'a Value, needle: &str) -> Option<&'a Value> {
    steps(job)
        .into_iter()
        .find(|s| s["run"].as_str().is_some_and(|r| r.contains(needle)))
}

fn uses_action(job: &Value, action: &str) -> bool {
    steps(job).into_iter().any(|s| {
        s["uses"]
            .as_str()
            .is_some_and(|u| u.starts_with(&format!("{action}@")))
    })
}

/// A job's direct `needs` (a string or a list).
fn needs(job: &Value) -> Vec<String> {
    match &job["needs"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(list) => list
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect(),
        _ => Vec::new(),
    }
}

/// Every job `name` waits for, directly or through other jobs.
fn transitive_needs(jobs: &serde_json::Map<String, Value>, name: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = needs(&jobs[name]);
    while let Some(next) = todo.pop() {
        assert!(jobs.contains_key(&next), "{name} needs unknown job {next}");
        if seen.insert(next.clone()) {
            todo.extend(needs(&jobs[&next]));
        }
    }
    seen
}

/// Runs scripts/`name` with `args` and `env`: whether it succeeded, and what it printed.
fn script(name: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(common::repo_root().join("scripts").join(name))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(common::repo_root())
        .output()
        .unwrap_or_else(|e| panic!("scripts/{name}: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A fresh scratch directory under target/, named after the test.
fn scratch(name: &str) -> PathBuf {
    let dir = common::repo_root()
        .join("target/test-tmp")
        .join(format!("release-workflow-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The release workflow's text with the top-level env line of `key` replaced by `value`.
fn release_with_env(key: &str, value: &str) -> String {
    let text = read(RELEASE);
    let prefix = format!("  {key}: ");
    let mut replaced = 0;
    let edited: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with(&prefix) {
                replaced += 1;
                format!("{prefix}{value}")
            } else {
                l.to_owned()
            }
        })
        .collect();
    assert_eq!(replaced, 1, "one top-level {key} line in {RELEASE}");
    edited.join("\n") + "\n"
}

fn check_refs(workflow: &Path) -> (bool, String) {
    script(
        "check-release-refs.sh",
        &[workflow.to_str().unwrap(), "1.2.3"],
        &[],
    )
}

/// The reference a registry sees: Docker Hub's aliases as docker.io, no oci:// scheme.
fn normalise(reference: &str) -> String {
    let r = reference.trim_start_matches("oci://").trim_end_matches('/');
    let r = r
        .strip_prefix("registry-1.docker.io/")
        .or_else(|| r.strip_prefix("index.docker.io/"))
        .map(|rest| format!("docker.io/{rest}"))
        .unwrap_or_else(|| r.to_owned());
    r.to_lowercase()
}

#[test]
fn the_chart_cannot_overwrite_the_image() {
    let workflow = parse(RELEASE);
    let env = &workflow["env"];
    let image = env["IMAGE"].as_str().expect("env.IMAGE");
    let registry = env["CHART_REGISTRY"].as_str().expect("env.CHART_REGISTRY");
    let chart: Value = parse("chart/Chart.yaml");
    let name = chart["name"].as_str().unwrap();
    // What `helm push` makes of CHART_REGISTRY: the chart's name appended, its version the tag.
    let image_ref = format!("{}:1.2.3", normalise(image));
    let chart_ref = format!("{}/{name}:1.2.3", normalise(registry));
    assert_ne!(image_ref, chart_ref, "the chart would overwrite the image");

    let (ok, said) = check_refs(&common::repo_root().join(RELEASE));
    assert!(ok, "{said}");
    assert!(
        said.contains(&image_ref) && said.contains(&chart_ref),
        "the script reads the same references: {said}"
    );

    // The script is what stops a release; it must refuse the references that collide.
    let dir = scratch("refs");
    let chart_repo = normalise(registry);
    let image_namespace = image_ref
        .trim_start_matches("docker.io/")
        .rsplit_once('/')
        .map(|(namespace, _)| namespace.to_owned())
        .unwrap();
    for (what, key, value, collided) in [
        (
            "the first release's chart registry",
            "CHART_REGISTRY",
            "oci://registry-1.docker.io/4pdosc".to_owned(),
            &image_ref,
        ),
        (
            "the image moved onto the chart's repository",
            "IMAGE",
            format!("{chart_repo}/{name}"),
            &chart_ref,
        ),
        (
            "the same registry through another Docker Hub alias",
            "CHART_REGISTRY",
            format!("\"oci://index.docker.io/{image_namespace}\""),
            &image_ref,
        ),
    ] {
        let copy = dir.join(format!("{key}.yml"));
        std::fs::write(&copy, release_with_env(key, &value)).unwrap();
        let (ok, said) = check_refs(&copy);
        assert!(!ok, "{what} ({key}: {value}) must be refused: {said}");
        assert!(
            said.contains("overwrite the image") && said.contains(collided.as_str()),
            "{what}: the message names the reference: {said}"
        );
    }

    // Docker Hub has no third path level: a chart registry under the image's namespace fails
    // to push (401) even though the references differ.
    let copy = dir.join("three-levels.yml");
    std::fs::write(
        &copy,
        release_with_env("CHART_REGISTRY", "oci://registry-1.docker.io/4pdosc/charts"),
    )
    .unwrap();
    let (ok, said) = check_refs(&copy);
    assert!(!ok, "a three-level Docker Hub name must be refused: {said}");
    assert!(said.contains("third level"), "{said}");
}

#[test]
fn every_action_is_pinned_to_a_commit() {
    let mut pins: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in workflows() {
        let workflow = parse(&file);
        let mut from_yaml = 0;
        for (name, job) in jobs(&workflow) {
            let mut uses: Vec<&str> = steps(job)
                .into_iter()
                .filter_map(|s| s["uses"].as_str())
                .collect();
            // A job may call a reusable workflow instead of having steps.
            uses.extend(job["uses"].as_str());
            for reference in uses {
                from_yaml += 1;
                let (action, sha) = reference
                    .split_once('@')
                    .unwrap_or_else(|| panic!("{file} {name}: {reference} has no @ref"));
                assert!(
                    sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_hexdigit()),
                    "{file} {name}: {reference} is not pinned to a 40-hex commit SHA"
                );
                pins.entry(action.to_owned())
                    .or_default()
                    .insert(sha.to_owned());
            }
        }
        // Each pin names its tag, so a reader (and an updater) knows what the SHA is.
        let text = read(&file);
        let mut from_text = 0;
        for line in text.lines().filter(|l| {
            let t = l.trim_start().trim_start_matches("- ");
            t.starts_with("uses:")
        }) {
            from_text += 1;
            let comment = line
                .split_once(" # ")
                .map(|(_, c)| c.trim())
                .unwrap_or_else(|| panic!("{file}: `{}` has no # vX.Y.Z comment", line.trim()));
            let version = comment.strip_prefix('v').unwrap_or("");
            assert!(
                version.split('.').count() == 3
                    && version
                        .split('.')
                        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())),
                "{file}: `{}`: the comment is not # vX.Y.Z",
                line.trim()
            );
        }
        assert_eq!(
            from_yaml, from_text,
            "{file}: every `uses:` line is a step or job the YAML has"
        );
        assert!(from_yaml > 0, "{file} uses no action at all");
    }
    // One version of each action across the workflows, so an update cannot miss a copy.
    for (action, shas) in &pins {
        assert_eq!(
            shas.len(),
            1,
            "{action} is pinned to several commits: {shas:?}"
        );
    }
}

#[test]
fn secrets_reach_scripts_only_through_env() {
    let mut secret_inputs = 0;
    for file in workflows() {
        let workflow = parse(&file);
        for (name, job) in jobs(&workflow) {
            for run in runs(job) {
                assert!(
                    !run.contains("secrets."),
                    "{file} {name}: a run line interpolates a secret: {run}"
                );
            }
            for step in steps(job) {
                for key in ["env", "with"] {
                    if let Some(map) = step[key].as_object() {
                        secret_inputs += map
                            .values()
                            .filter(|v| v.as_str().is_some_and(|s| s.contains("secrets.")))
                            .count();
                    }
                }
            }
        }
    }
    // The release does log in with secrets: they are there, only never in a script line.
    assert!(secret_inputs > 0, "no secret is passed at all");
    let release = parse(RELEASE);
    let chart = &jobs(&release)["chart"];
    let login = step_running(chart, "helm registry login").expect("the chart job logs helm in");
    assert!(
        login["run"].as_str().unwrap().contains("--password-stdin"),
        "the token is not on helm's command line"
    );
    assert!(
        login["env"].as_object().is_some_and(|env| env
            .values()
            .any(|v| v.as_str().unwrap().contains("secrets."))),
        "the chart login takes its token from env"
    );
}

/// The job that gates the release: tag, references, chart lint and the whole test suite.
fn gate(jobs: &serde_json::Map<String, Value>) -> String {
    let gates: Vec<&String> = jobs
        .iter()
        .filter(|(_, job)| {
            runs_containing(job, ".ci/run")
                && runs_containing(job, "helm lint --strict chart")
                && runs_containing(job, "scripts/check-release-refs.sh")
                && runs_containing(job, "scripts/check-release-tag.sh")
        })
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        gates.len(),
        1,
        "one job runs .ci/run, the chart lint and both release checks: {gates:?}"
    );
    gates[0].clone()
}

/// Whether a job publishes anything: an image, a manifest list, a chart, a signature or a release.
fn pushes(job: &Value) -> bool {
    uses_action(job, "docker/build-push-action")
        || [
            "helm push",
            "imagetools create",
            "cosign sign",
            "gh release",
        ]
        .iter()
        .any(|cmd| runs_containing(job, cmd))
}

#[test]
fn nothing_is_pushed_before_the_tests_and_the_chart_lint() {
    let release = parse(RELEASE);
    let jobs = jobs(&release);
    let gate = gate(jobs);
    assert!(!pushes(&jobs[&gate]), "{gate} must push nothing");
    assert!(
        !uses_action(&jobs[&gate], "docker/login-action")
            && !runs_containing(&jobs[&gate], "registry login"),
        "{gate} has no registry credentials"
    );
    // The gate runs the tests as CI does, not some subset of them.
    let ci_command = ci_test_command();
    assert!(
        runs(&jobs[&gate]).contains(&ci_command.as_str()),
        "{gate} runs `{ci_command}` like ci.yml"
    );

    let push_jobs: Vec<&String> = jobs
        .iter()
        .filter(|(_, job)| pushes(job))
        .map(|(name, _)| name)
        .collect();
    let image = jobs
        .iter()
        .find(|(_, j)| uses_action(j, "docker/build-push-action"))
        .map(|(n, _)| n)
        .expect("a job builds and pushes the image");
    let chart = jobs
        .iter()
        .find(|(_, j)| runs_containing(j, "helm push"))
        .map(|(n, _)| n)
        .expect("a job pushes the chart");
    for name in &push_jobs {
        assert!(
            transitive_needs(jobs, name).contains(&gate),
            "{name} pushes without waiting for {gate}"
        );
    }
    assert!(push_jobs.contains(&image) && push_jobs.contains(&chart));
    // The chart defaults to the image, so it is pushed only once the image (manifest list) is.
    let manifest_list = jobs
        .iter()
        .find(|(_, j)| runs_containing(j, "imagetools create"))
        .map(|(n, _)| n)
        .expect("a job joins the per-architecture images");
    assert!(transitive_needs(jobs, chart).contains(manifest_list));
    assert!(transitive_needs(jobs, manifest_list).contains(image));
}

#[test]
fn the_image_is_native_multi_arch_cached_attested_and_labelled() {
    let release = parse(RELEASE);
    let jobs = jobs(&release);
    let (name, job) = jobs
        .iter()
        .find(|(_, j)| uses_action(j, "docker/build-push-action"))
        .unwrap();
    // One runner per architecture, not QEMU.
    assert!(
        !jobs
            .values()
            .any(|j| uses_action(j, "docker/setup-qemu-action")),
        "no emulation"
    );
    let runners: BTreeSet<&str> = job["strategy"]["matrix"]["include"]
        .as_array()
        .unwrap_or_else(|| panic!("{name} has a matrix of platforms"))
        .iter()
        .map(|entry| entry["runner"].as_str().unwrap())
        .collect();
    assert_eq!(
        runners,
        BTreeSet::from(["ubuntu-24.04", "ubuntu-24.04-arm"]),
        "{name}"
    );
    assert_eq!(job["runs-on"], "${{ matrix.runner }}");
    let build = steps(job)
        .into_iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("docker/build-push-action@"))
        })
        .unwrap();
    let with = &build["with"];
    assert_eq!(with["sbom"], true, "an SBOM attestation");
    assert_eq!(with["provenance"], "mode=max", "max-mode provenance");
    for key in ["cache-from", "cache-to"] {
        assert!(
            with[key]
                .as_str()
                .is_some_and(|c| c.starts_with("type=gha")),
            "{key}: the GitHub Actions cache"
        );
    }
    assert_eq!(with["labels"], "${{ steps.meta.outputs.labels }}");
    let meta = steps(job)
        .into_iter()
        .find(|s| s["id"] == "meta")
        .expect("a metadata step");
    assert!(
        meta["uses"]
            .as_str()
            .unwrap()
            .starts_with("docker/metadata-action@")
    );
    let labels = meta["with"]["labels"].as_str().unwrap();
    for label in ["title", "description", "licenses=Apache-2.0"] {
        assert!(
            labels.contains(&format!("org.opencontainers.image.{label}")),
            "{label}"
        );
    }
    // metadata-action adds source, version and revision itself; the manifest list gets them as
    // annotations.
    let list = jobs
        .values()
        .find(|j| runs_containing(j, "imagetools create"))
        .unwrap();
    for annotation in ["source", "version", "revision", "licenses", "title"] {
        assert!(
            runs_containing(
                list,
                &format!("index:org.opencontainers.image.{annotation}=")
            ),
            "the manifest list carries {annotation}"
        );
    }
}

/// Whether a job signs with cosign (keyless: it needs an OIDC token).
fn signs(job: &Value) -> bool {
    runs(job).iter().any(|r| r.contains("cosign sign"))
}

#[test]
fn only_the_signing_jobs_may_mint_an_oidc_token() {
    for file in workflows() {
        let workflow = parse(&file);
        let top = workflow["permissions"]
            .as_object()
            .unwrap_or_else(|| panic!("{file}: top-level permissions are an explicit map"));
        assert_eq!(top.get("contents"), Some(&Value::from("read")), "{file}");
        for (scope, level) in top {
            assert!(
                level == "read" || level == "none",
                "{file}: top-level {scope}: {level} must be read-only"
            );
        }
        for (name, job) in jobs(&workflow) {
            let permissions = job["permissions"].as_object();
            let granted = |scope: &str| {
                permissions.is_some_and(|p| p.get(scope) == Some(&Value::from("write")))
            };
            assert_eq!(
                granted("id-token"),
                signs(job),
                "{file} {name}: id-token: write exactly when the job signs with cosign"
            );
            for (scope, level) in permissions.into_iter().flatten() {
                if level != "write" {
                    continue;
                }
                let why = match scope.as_str() {
                    "id-token" => signs(job),
                    "contents" => runs_containing(job, "gh release create"),
                    "packages" => runs_containing(job, "helm push"),
                    _ => false,
                };
                assert!(why, "{file} {name}: {scope}: write is not needed there");
            }
        }
    }
    // Both artifacts are signed, by digest.
    let release = parse(RELEASE);
    let jobs = jobs(&release);
    for (pushed_by, what) in [("imagetools create", "image"), ("helm push", "chart")] {
        let job = jobs
            .values()
            .find(|j| runs_containing(j, pushed_by))
            .unwrap();
        assert!(signs(job), "the {what} is signed");
        assert!(uses_action(job, "sigstore/cosign-installer"));
        assert!(
            runs(job)
                .iter()
                .any(|r| r.contains("cosign sign --yes") && r.contains("@${DIGEST}")),
            "the {what} is signed by its digest"
        );
    }
}

/// The script line ci.yml runs the tests with.
fn ci_test_command() -> String {
    let ci = parse(CI);
    let mut commands: Vec<String> = jobs(&ci)
        .values()
        .flat_map(|job| runs(job).into_iter().map(str::to_owned).collect::<Vec<_>>())
        .filter(|r| r.contains(".ci/run"))
        .collect();
    assert_eq!(commands.len(), 1, "ci.yml runs .ci/run once: {commands:?}");
    commands.pop().unwrap()
}

#[test]
fn ci_runs_the_project_tests_on_pull_requests_and_main() {
    let ci = parse(CI);
    let on = &ci["on"];
    assert!(
        on.get("pull_request").is_some(),
        "ci.yml runs on pull requests"
    );
    assert!(
        on["push"]["branches"]
            .as_array()
            .is_some_and(|b| b.contains(&Value::from("main"))),
        "ci.yml runs on pushes to main"
    );
    let command = ci_test_command();
    assert!(command.trim_end().ends_with(".ci/run"), "{command}");
    let (_, job) = jobs(&ci)
        .iter()
        .find(|(_, j)| runs_containing(j, ".ci/run"))
        .unwrap();
    assert_eq!(job["runs-on"], "ubuntu-latest");
    assert!(uses_action(job, "actions/setup-go"), "Go for tests/cluster");
    assert!(
        steps(job).into_iter().any(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/cache@"))
                && s["with"]["path"]
                    .as_str()
                    .is_some_and(|p| p.contains(".cargo/registry"))
        }),
        "the cargo cache"
    );
    // .ci/run needs a Rust toolchain with rustfmt and clippy (`make test` checks both).
    assert!(
        runs_containing(job, "rustup") && runs_containing(job, "clippy"),
        "rust stable with clippy"
    );
}

/// The YAML documents of a multi-document file, empty ones left out.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

fn manifests(version: &str, digest: Option<&str>, dir: &Path) -> (bool, String) {
    let helm = common::repo_root().join("target/cluster/bin/helm");
    assert!(
        helm.exists(),
        "no {} (`make test` builds it: tests/cluster/build.sh helm)",
        helm.display()
    );
    let mut env = vec![("HELM", helm.to_str().unwrap().to_owned())];
    if let Some(digest) = digest {
        env.push(("IMAGE_DIGEST", digest.to_owned()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    script(
        "release-manifests.sh",
        &[version, dir.to_str().unwrap()],
        &env,
    )
}

#[test]
fn the_release_attaches_plain_install_manifests() {
    let dir = scratch("manifests");
    let digest = format!("sha256:{}", "ab".repeat(32));
    let (ok, said) = manifests("0.1.0-rc.1", Some(&digest), &dir);
    assert!(ok, "{said}");

    let crd = documents(&dir.join("crd.yaml"));
    assert_eq!(crd.len(), 1, "crd.yaml is the CRD alone");
    assert_eq!(crd[0]["kind"], "CustomResourceDefinition");
    assert_eq!(
        crd[0]["metadata"]["name"],
        "llmscalers.autoscaling.modelsphere.dev"
    );

    let install = documents(&dir.join("install.yaml"));
    let kinds: BTreeSet<&str> = install
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
    ] {
        assert!(
            kinds.contains(kind),
            "install.yaml has no {kind}: {kinds:?}"
        );
    }
    assert!(
        install.contains(&crd[0]),
        "install.yaml carries the same CRD as crd.yaml"
    );
    let namespace =
        install.iter().find(|d| d["kind"] == "Namespace").unwrap()["metadata"]["name"].clone();
    assert_eq!(namespace, "llmscaleoperator");
    let deployment = install.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert_eq!(deployment["metadata"]["namespace"], namespace);
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert!(
        containers
            .iter()
            .any(|c| c["image"] == format!("docker.io/4pdosc/llmscaleoperator@{digest}")),
        "the Deployment pulls the pushed digest: {containers:?}"
    );
    // Every object is labelled with the released chart, pre-release suffix included.
    assert!(
        install
            .iter()
            .filter(|d| d["kind"] != "Namespace")
            .all(|d| { d["metadata"]["labels"]["helm.sh/chart"] == "llmscaleoperator-0.1.0-rc.1" }),
        "the manifests come from the chart packaged at the release's version"
    );

    // Without a digest the Deployment runs the release's tag.
    let plain = scratch("manifests-tag");
    let (ok, said) = manifests("0.1.0", None, &plain);
    assert!(ok, "{said}");
    let install = documents(&plain.join("install.yaml"));
    let deployment = install.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "docker.io/4pdosc/llmscaleoperator:0.1.0"
    );

    for (version, digest) in [("v0.1.0", None), ("0.1.0", Some("sha256:short"))] {
        let (ok, said) = manifests(version, digest, &scratch("manifests-bad"));
        assert!(!ok, "{version} {digest:?} must be refused: {said}");
    }

    // The release renders them with the pushed digest and attaches them.
    let release = parse(RELEASE);
    let job = jobs(&release)
        .values()
        .find(|j| runs_containing(j, "gh release create"))
        .expect("a job creates the GitHub release");
    let render = step_running(job, "scripts/release-manifests.sh")
        .expect("the release job renders the manifests");
    assert!(
        render["env"]["IMAGE_DIGEST"]
            .as_str()
            .is_some_and(|d| d.contains("needs.image.outputs.digest")),
        "the manifests pin the manifest list's digest"
    );
    let out_dir = render["run"].as_str().unwrap().split_whitespace().last();
    assert!(
        runs_containing(job, &format!("{}/*", out_dir.unwrap())),
        "the release uploads what the script rendered"
    );
}
