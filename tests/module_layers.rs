//! The layering DESIGN.md promises, held against the sources: nothing below `controller/`
//! imports it, no two modules of the crate import each other, and no two files of one module
//! do (a shared type goes into a file of its own instead, as `scaling/types.rs`). Test modules
//! are left out: a test may reach anywhere.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A source without its `#[cfg(test)] mod tests { ... }` (always last in a file here).
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at])
}

/// The names a file reaches through `prefix` (`super::x`, `crate::x`, `super::{x, y::z}`).
fn reached(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let after = &rest[at + prefix.len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.insert(name);
        }
        rest = after;
    }
    names
}

fn modules(src: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "lib" && n != "main")
        .collect();
    names.sort();
    names
}

/// Every file of a module (a directory, or one file), its text without tests.
fn texts(src: &Path, module: &str) -> BTreeMap<String, String> {
    let dir = src.join(module);
    let mut out = BTreeMap::new();
    if dir.is_dir() {
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let name = path
                        .strip_prefix(&dir)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    out.insert(name, without_tests(&text).to_owned());
                }
            }
        }
    } else {
        let text = std::fs::read_to_string(src.join(format!("{module}.rs"))).unwrap();
        out.insert(format!("{module}.rs"), without_tests(&text).to_owned());
    }
    out
}

#[test]
fn the_crate_is_layered() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    assert!(modules.contains(&"controller".to_owned()) && modules.contains(&"scaling".to_owned()));
    let mut uses: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for module in &modules {
        let files = texts(&src, module);
        let mut reach = BTreeSet::new();
        for text in files.values() {
            reach.extend(
                reached(text, "crate::")
                    .into_iter()
                    .filter(|n| n != module && modules.contains(n)),
            );
        }
        uses.insert(module, reach);

        // Files of one directory that import each other.
        let siblings: BTreeMap<String, BTreeSet<String>> = files
            .iter()
            .filter(|(name, _)| !name.contains('/'))
            .map(|(name, text)| {
                let stem = name.trim_end_matches(".rs").to_owned();
                let mut reach = reached(text, "super::");
                reach.extend(reached(text, &format!("crate::{module}::")));
                reach.remove(&stem);
                (stem, reach)
            })
            .collect();
        for (a, reach) in &siblings {
            for b in reach {
                if a < b && a != "mod" && siblings.get(b).is_some_and(|r| r.contains(a)) {
                    problems.push(format!(
                        "{module}/{a}.rs and {module}/{b}.rs import each other"
                    ));
                }
            }
        }
    }
    for (module, reach) in &uses {
        if *module != "controller" && reach.contains("controller") {
            problems.push(format!("{module} imports controller, which is above it"));
        }
        for other in reach {
            if module < &other.as_str()
                && uses
                    .get(other.as_str())
                    .is_some_and(|r| r.contains(*module))
            {
                problems.push(format!("{module} and {other} import each other"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
