//! How an error is written for a person: once, whole. Every error type of the crate says only
//! its own layer in its message and keeps what it wraps as its `source` (never both, or the
//! cause would be told twice); [`Chain`] walks that chain once, "outer: inner: innermost", where
//! an error leaves the code for a person: a condition, an event, a log line, a reading's reason.
//! (stackable's operator-rs renders its events the same way.)

use std::error::Error;
use std::fmt;

/// An error and every source under it, as one line.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

/// A layer whose message already holds its source's (errors of other crates may write theirs
/// in, kube's `Api` error among them) is not followed by it again.
impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut told = self.0.to_string();
        f.write_str(&told)?;
        let mut next = self.0.source();
        while let Some(source) = next {
            let text = source.to_string();
            if !told.contains(&text) {
                write!(f, ": {text}")?;
            }
            told = text;
            next = source.source();
        }
        Ok(())
    }
}

/// [`Chain`] as a string.
pub fn render(error: &(dyn Error + 'static)) -> String {
    Chain(error).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot set spec.replicas of Deployment vllm to 3")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("cannot list pods")]
    struct Outer2(#[source] Foreign);

    /// As kube's `Api` error is: its source written into its message.
    #[derive(Debug, thiserror::Error)]
    #[error("ApiError: not found ({0})")]
    struct Foreign(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    enum Middle {
        #[error(transparent)]
        Io(#[from] std::io::Error),
    }

    #[test]
    fn each_layer_is_told_once_in_order() {
        let error = Outer(Middle::Io(std::io::Error::other("connection refused")));
        assert_eq!(
            render(&error),
            "cannot set spec.replicas of Deployment vllm to 3: connection refused"
        );
        // A foreign layer that wrote its source in is not followed by it again.
        let foreign = Outer2(Foreign(std::io::Error::other("NotFound")));
        assert_eq!(
            render(&foreign),
            "cannot list pods: ApiError: not found (NotFound)"
        );
        let alone = std::io::Error::other("alone");
        assert_eq!(Chain(&alone).to_string(), "alone");
    }
}

/// The rule of this module, held for every error type of the crate: a message that also
/// interpolates the source it keeps would tell that cause twice once [`Chain`] walks it.
#[cfg(test)]
mod every_error_type {
    use std::path::Path;

    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Each `#[error(...)]` attribute's text and the variant or struct after it (up to the next
    /// attribute of its kind, or a closing brace at the start of a line).
    fn attributed(text: &str) -> Vec<(String, String)> {
        let mut found = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("#[error(") {
            let after = &rest[start + "#[error(".len()..];
            let message_end = after.find(")]\n").unwrap_or(after.len());
            let message = after[..message_end].to_owned();
            let body = &after[message_end..];
            let body_end = [body.find("#[error("), body.find("\n}")]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(body.len());
            found.push((message, body[..body_end].to_owned()));
            rest = &after[message_end..];
        }
        found
    }

    #[test]
    fn no_message_interpolates_the_source_it_keeps() {
        let mut paths = Vec::new();
        files(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut paths,
        );
        let mut twice = Vec::new();
        // This file's own tests model foreign errors that break the rule.
        for path in paths.iter().filter(|p| !p.ends_with("error_chain.rs")) {
            let text = std::fs::read_to_string(path).unwrap();
            for (message, body) in attributed(&text) {
                if message.trim() == "transparent" {
                    continue;
                }
                let keeps_named = body.contains("#[source]") && body.contains("source:")
                    || body.contains("#[source]\n") && !body.contains("(#[source]");
                let keeps_first = body.contains("(#[source]") || body.contains("(#[from]");
                if keeps_named && message.contains("{source}")
                    || keeps_first && message.contains("{0}")
                {
                    twice.push(format!("{}: {}", path.display(), message.trim()));
                }
            }
        }
        assert!(
            twice.is_empty(),
            "messages that repeat their source: {twice:#?}"
        );
        assert!(
            paths.len() > 50,
            "the scan found the sources: {}",
            paths.len()
        );
    }
}
