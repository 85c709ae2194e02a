//! `--allowed-server-address`: which hosts a scaler's serverAddress may name. Whoever may create
//! an LLMScaler makes the operator send requests, with the scaler's headers, to the URL they
//! write; in a cluster where that right is wider than trust in the network, this list narrows
//! where those requests can go (the default, no pattern, allows every address).

use reqwest::Url;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum AllowError {
    #[error(
        "--allowed-server-address {0:?} is not a host pattern: write a host (prometheus.monitoring.svc), \
         a wildcard domain (*.monitoring.svc) or *, each optionally with :port"
    )]
    BadPattern(String),
    #[error(
        "serverAddress {address} is not allowed by the operator's --allowed-server-address ({allowed})"
    )]
    NotAllowed { address: String, allowed: String },
    #[error("serverAddress {0} has no host")]
    NoHost(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Any,
    /// `*.domain`: any name strictly under the domain.
    Under(String),
    Exact(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    host: Host,
    port: Option<u16>,
    text: String,
}

/// The allowed server addresses; empty allows all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList(Vec<Pattern>);

impl AllowList {
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<Self, AllowError> {
        patterns
            .iter()
            .map(|p| parse_pattern(p.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    pub fn allows_all(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `address` (a serverAddress) may be called.
    pub fn check(&self, address: &str) -> Result<(), AllowError> {
        if self.allows_all() {
            return Ok(());
        }
        let url = Url::parse(address).map_err(|_| AllowError::NoHost(address.to_owned()))?;
        let host = url
            .host_str()
            .ok_or_else(|| AllowError::NoHost(address.to_owned()))?
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let port = url.port_or_known_default();
        let allowed = self.0.iter().any(|p| {
            let host_ok = match &p.host {
                Host::Any => true,
                Host::Exact(h) => *h == host,
                Host::Under(domain) => host
                    .strip_suffix(domain.as_str())
                    .is_some_and(|rest| !rest.is_empty()),
            };
            host_ok && p.port.is_none_or(|want| Some(want) == port)
        });
        if allowed {
            Ok(())
        } else {
            Err(AllowError::NotAllowed {
                address: address.to_owned(),
                allowed: self
                    .0
                    .iter()
                    .map(|p| p.text.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    }
}

fn parse_pattern(text: &str) -> Result<Pattern, AllowError> {
    let bad = || AllowError::BadPattern(text.to_owned());
    let trimmed = text.trim();
    // A bracketed IPv6 literal keeps its colons inside the brackets.
    let (host, port) = match trimmed.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => {
            (host, Some(port.parse::<u16>().map_err(|_| bad())?))
        }
        _ => (trimmed, None),
    };
    let host = host.to_ascii_lowercase();
    let valid_name = |name: &str| {
        !name.is_empty()
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            })
    };
    let host = if host == "*" {
        Host::Any
    } else if let Some(domain) = host.strip_prefix("*.") {
        if !valid_name(domain) {
            return Err(bad());
        }
        Host::Under(format!(".{domain}"))
    } else if (host.starts_with('[') && host.ends_with(']')) || valid_name(&host) {
        Host::Exact(host)
    } else {
        return Err(bad());
    };
    Ok(Pattern {
        host,
        port,
        text: trimmed.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(patterns: &[&str]) -> AllowList {
        AllowList::parse(patterns).unwrap()
    }

    #[test]
    fn no_pattern_allows_everything() {
        assert!(
            AllowList::default()
                .check("http://169.254.169.254/")
                .is_ok()
        );
    }

    #[test]
    fn hosts_wildcards_and_ports() {
        let allowed = list(&[
            "*.monitoring.svc",
            "prometheus.example.com:9090",
            "127.0.0.1",
        ]);
        assert!(
            allowed
                .check("http://prometheus-operated.monitoring.svc:9090")
                .is_ok()
        );
        assert!(allowed.check("https://a.b.monitoring.svc/").is_ok());
        assert!(
            allowed
                .check("http://Prometheus.Example.com:9090/x")
                .is_ok()
        );
        assert!(allowed.check("http://127.0.0.1:1234").is_ok());
        for denied in [
            "http://monitoring.svc",          // the domain itself is not under it
            "http://evilmonitoring.svc",      // a suffix that is not a label boundary
            "http://prometheus.example.com",  // port 80, not 9090
            "https://prometheus.example.com", // port 443
            "http://169.254.169.254/latest/meta-data",
            "http://127.0.0.2",
        ] {
            let err = allowed.check(denied).unwrap_err();
            assert!(
                matches!(&err, AllowError::NotAllowed { address, .. } if address == denied),
                "{denied}: {err}"
            );
            assert!(
                err.to_string()
                    .contains("*.monitoring.svc, prometheus.example.com:9090, 127.0.0.1")
            );
        }
        assert!(list(&["*"]).check("http://anything:1").is_ok());
        assert!(list(&["*:9090"]).check("http://anything:1").is_err());
        assert!(list(&["[::1]:9090"]).check("http://[::1]:9090").is_ok());
    }

    #[test]
    fn bad_patterns_are_refused_at_start() {
        for bad in [
            "",
            "http://x",
            "*.",
            "a..b",
            "host:port",
            "host:99999",
            "a/b",
            "*x.y",
        ] {
            assert_eq!(
                AllowList::parse(&[bad]),
                Err(AllowError::BadPattern(bad.to_owned())),
                "{bad:?}"
            );
        }
    }
}
