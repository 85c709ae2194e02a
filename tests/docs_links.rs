//! The documentation's relative links hold: every `](path)`, `](path#anchor)` and `](#anchor)` in
//! README.md, CONTRIBUTING.md, SECURITY.md, CHANGELOG.md, docs/*.md and chart/README.md names a
//! file (or directory) that exists, and where an anchor is given, a heading of that file (GitHub's
//! rule: lowercase, spaces to `-`, punctuation dropped, `-1`, `-2` … for repeats) or an explicit
//! `<a id="…">`. Links to other sites are not followed. Also: the README stays a front door,
//! and its first scalers are the samples they name.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// The README is the front door; the rest lives in docs/.
const README_MAX_BYTES: usize = 14_000;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents whose links are checked, relative to the repository root.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = [
        "README.md",
        "CONTRIBUTING.md",
        "SECURITY.md",
        "CHANGELOG.md",
        "chart/README.md",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| PathBuf::from("docs").join(path.file_name().unwrap()))
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

/// The lines of a markdown file outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` without its inline code spans (a link inside backticks is not a link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    // A link in a heading counts by its text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// Every anchor a markdown file offers: its headings' slugs (repeats numbered as GitHub does) and
/// its explicit `<a id="…">` / `<a name="…">` anchors.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(line[hashes..].trim().trim_end_matches('#'));
            let n = seen.entry(base.clone()).or_insert(0);
            found.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        for attr in ["id=\"", "name=\""] {
            for (at, _) in line.match_indices(&format!("<a {attr}")) {
                let start = at + 3 + attr.len();
                if let Some(end) = line[start..].find('"') {
                    found.insert(line[start..start + end].to_owned());
                }
            }
        }
    }
    found
}

/// The targets of the inline links (and images) of a line: what stands between `](` and `)`,
/// without a title.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut out = Vec::new();
    for (at, _) in line.match_indices("](") {
        let rest = &line[at + 2..];
        let Some(end) = rest.find(')') else { continue };
        let target = rest[..end].trim();
        let target = target.split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(|c| c == '<' || c == '>').to_owned());
    }
    // Reference-style definitions: `[label]: target`.
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(at) = trimmed.find("]: ")
        && let Some(target) = trimmed[at + 3..].split_whitespace().next()
    {
        out.push(target.to_owned());
    }
    out
}

/// `base` joined with `relative`, `..` and `.` resolved without touching the file system.
fn normalized(base: &Path, relative: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for part in base.join(relative).components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// What is wrong with the relative links of one document, one line each.
fn broken_links(doc: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(doc))
        .unwrap_or_else(|e| panic!("{} cannot be read: {e}", doc.display()));
    let dir = doc.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for (number, line) in prose_lines(&text) {
        for target in link_targets(line) {
            if target.is_empty() || is_external(&target) {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                doc.to_path_buf()
            } else {
                normalized(dir, path)
            };
            let at = format!("{}:{number}: `{target}`", doc.display());
            let on_disk = root().join(&file);
            if !on_disk.exists() {
                broken.push(format!("{at}: {} does not exist", file.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if file.extension().is_none_or(|ext| ext != "md") {
                broken.push(format!(
                    "{at}: an anchor on {}, which is not markdown",
                    file.display()
                ));
                continue;
            }
            let offered = anchors(&std::fs::read_to_string(&on_disk).unwrap());
            if !offered.contains(anchor) {
                broken.push(format!(
                    "{at}: {} has no heading or anchor `{anchor}`",
                    file.display()
                ));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_names_an_existing_file_and_heading() {
    let docs = documents();
    assert!(
        docs.iter().any(|d| d.starts_with("docs")),
        "docs/ holds the documentation beyond the README"
    );
    let broken: Vec<String> = docs.iter().flat_map(|doc| broken_links(doc)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_a_front_door() {
    let size = std::fs::metadata(root().join("README.md")).unwrap().len() as usize;
    assert!(
        size < README_MAX_BYTES,
        "README.md is {size} bytes, the limit is {README_MAX_BYTES}: move the detail to docs/"
    );
}

/// The YAML blocks of `text` after the heading `section`, in order, up to the next heading of
/// the same level.
fn yaml_blocks<'a>(text: &'a str, section: &str) -> Vec<&'a str> {
    let start = text
        .find(section)
        .unwrap_or_else(|| panic!("no {section:?}"));
    let body = &text[start + section.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    body.split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .collect()
}

#[test]
fn the_readmes_first_scalers_are_the_samples_they_name() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks = yaml_blocks(&readme, "## A first LLMScaler");
    let parse = |text: &str| -> serde_json::Value { serde_norway::from_str(text).unwrap() };
    let sample =
        |name: &str| -> serde_json::Value { common::read_yaml(&format!("config/samples/{name}")) };
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    // The objective, whole; then a known target, its spec less the fields left at their
    // defaults.
    assert_eq!(
        parse(blocks[0]),
        sample("autoscaling_v1alpha1_llmscaler_objective.yaml")
    );
    let shown = parse(blocks[1]);
    let known = sample("autoscaling_v1alpha1_llmscaler.yaml");
    let fields = shown["spec"].as_object().unwrap();
    assert!(fields.len() >= 6, "{shown}");
    for (field, value) in fields {
        assert_eq!(value, &known["spec"][field], "spec.{field}");
    }
    for name in [
        "autoscaling_v1alpha1_llmscaler_objective.yaml",
        "autoscaling_v1alpha1_llmscaler.yaml",
    ] {
        assert!(
            readme.contains(&format!("`config/samples/{name}`")),
            "{name}"
        );
    }
}

#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(
        slug("Prerequisite: scrape vLLM with the labels the queries use"),
        "prerequisite-scrape-vllm-with-the-labels-the-queries-use"
    );
    assert_eq!(
        slug("Scaling quality: how it compares"),
        "scaling-quality-how-it-compares"
    );
    assert_eq!(
        slug("Waking from zero: the router's metric"),
        "waking-from-zero-the-routers-metric"
    );
    assert_eq!(slug("`spec` and [its fields](x.md)"), "spec-and-its-fields");
    assert_eq!(slug("Argo CD / Flux"), "argo-cd--flux");
    let text = "# A\n\n## A\n\n```\n# not a heading\n```\n<a id=\"rbac\"></a>**RBAC.**\n";
    let found = anchors(text);
    assert!(found.contains("a") && found.contains("a-1") && found.contains("rbac"));
    assert!(!found.contains("not-a-heading"));
    assert_eq!(
        link_targets("see [x](docs/a.md#b \"title\"), `[y](no.md)` and ![p](lab/p.svg)"),
        vec!["docs/a.md#b", "lab/p.svg"]
    );
    assert_eq!(
        normalized(Path::new("docs"), "../config/prometheus/README.md"),
        PathBuf::from("config/prometheus/README.md")
    );
}
