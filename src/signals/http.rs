//! The HTTP client shared by the signal sources: one connection pool, a timeout on every request,
//! bounded response bodies, and user headers that never reach a log line.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use thiserror::Error;

use super::gate;

/// Largest response body read from a signal source. A PromQL result for one aggregated series is
/// a few hundred bytes; anything near this is a query that forgot to aggregate.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Default per-request timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Error)]
pub enum HttpError {
    #[error("cannot build the HTTP client")]
    Build(#[source] reqwest::Error),
    // Only the header's name: its value may be a credential.
    #[error("serverHeaders: {name:?} is not a valid HTTP header name")]
    HeaderName { name: String },
    #[error("serverHeaders: the value of {name:?} is not a valid HTTP header value")]
    HeaderValue { name: String },
    #[error("request to {url} failed: {reason}")]
    Transport { url: String, reason: String },
    #[error("request to {url} timed out")]
    Timeout { url: String },
    #[error("response from {url} is larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    #[error(
        "no request to {url} could start: the {limit} allowed in flight to that server did not finish in time"
    )]
    Saturated { url: String, limit: usize },
}

/// Builds the process-wide client. Redirects are not followed: a signal source that redirects
/// is misconfigured, and following would resend the user's headers elsewhere.
pub fn client() -> Result<reqwest::Client, HttpError> {
    client_with_timeout(REQUEST_TIMEOUT)
}

/// [`client`] with another per-request timeout.
pub fn client_with_timeout(timeout: Duration) -> Result<reqwest::Client, HttpError> {
    client_builder(timeout).build().map_err(HttpError::Build)
}

/// The settings every signal client shares (no redirects, the timeouts), for a client that adds
/// its own TLS roots or identity.
pub fn client_builder(timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
}

/// Turns spec.serverHeaders into request headers, each marked sensitive so that reqwest and
/// hyper redact it from their Debug output.
pub fn headers(spec: Option<&BTreeMap<String, String>>) -> Result<HeaderMap, HttpError> {
    let mut map = HeaderMap::new();
    for (name, value) in spec.into_iter().flatten() {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| HttpError::HeaderName { name: name.clone() })?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| HttpError::HeaderValue { name: name.clone() })?;
        value.set_sensitive(true);
        map.insert(header, value);
    }
    Ok(map)
}

/// An error as it may be shown: its whole chain of sources, with every credential of the
/// request's headers redacted, made when the error is read (the credentials are not kept to
/// redact it later).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Redacted(String);

impl Redacted {
    pub fn new(error: &(dyn std::error::Error + 'static), headers: &HeaderMap) -> Self {
        Self(redact(&crate::error_chain::render(error), headers))
    }
}

/// `text` with every header value of `headers` (and the credential after an auth scheme, as in
/// "Bearer <token>") replaced by "[redacted]": a server that echoes a credential back in an error
/// must not get it into a status, an event or a log line through us.
pub fn redact(text: &str, headers: &HeaderMap) -> String {
    // Values this short are not credentials, and replacing them would mangle ordinary text.
    const SHORTEST: usize = 6;
    let mut secrets: Vec<&str> = Vec::new();
    for value in headers.values() {
        let Ok(value) = value.to_str() else { continue };
        secrets.push(value);
        if let Some((_, credential)) = value.split_once(' ') {
            secrets.push(credential.trim());
        }
    }
    // Longest first, so a whole value is replaced before a part of it.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_owned();
    for secret in secrets.into_iter().filter(|s| s.len() >= SHORTEST) {
        out = out.replace(secret, "[redacted]");
    }
    out
}

/// Sends `request` and reads at most [`MAX_BODY_BYTES`] of the answer, within the process's
/// bound on requests in flight to that server, retrying an overloaded answer (429, 503) within
/// [`gate::RETRY_BUDGET`] (see [`gate`]).
pub async fn send(
    request: reqwest::RequestBuilder,
    url: &str,
) -> Result<(reqwest::StatusCode, Vec<u8>), HttpError> {
    send_within(request, url, gate::RETRY_BUDGET).await
}

/// [`send`] with another retry budget.
pub async fn send_within(
    request: reqwest::RequestBuilder,
    url: &str,
    budget: Duration,
) -> Result<(reqwest::StatusCode, Vec<u8>), HttpError> {
    let started = std::time::Instant::now();
    let origin = gate::origin(url);
    let mut attempt = 0;
    let mut request = request;
    loop {
        // A request that cannot be copied (a streamed body) is sent once.
        let again = request.try_clone();
        let Some(permit) = gate::enter(&origin, REQUEST_TIMEOUT).await else {
            return Err(HttpError::Saturated {
                url: url.to_owned(),
                limit: gate::per_server(),
            });
        };
        let (status, retry_after, body) = send_once(request, url).await?;
        drop(permit);
        if !gate::overloaded(status.as_u16()) {
            return Ok((status, body));
        }
        let remaining = budget.saturating_sub(started.elapsed());
        match (
            again,
            gate::backoff(attempt, retry_after, remaining, fastrand::f64()),
        ) {
            (Some(again), Some(wait)) => {
                tracing::debug!(%url, status = status.as_u16(), attempt, wait_ms = wait.as_millis(), "server overloaded; retrying");
                tokio::time::sleep(wait).await;
                attempt += 1;
                request = again;
            }
            _ => return Ok((status, body)),
        }
    }
}

async fn send_once(
    request: reqwest::RequestBuilder,
    url: &str,
) -> Result<(reqwest::StatusCode, Option<Duration>, Vec<u8>), HttpError> {
    let transport = |e: reqwest::Error| {
        if e.is_timeout() {
            HttpError::Timeout {
                url: url.to_owned(),
            }
        } else {
            HttpError::Transport {
                url: url.to_owned(),
                reason: describe(&e),
            }
        }
    };
    let mut response = request.send().await.map_err(transport)?;
    let status = response.status();
    let retry_after = gate::retry_after(response.headers().get(reqwest::header::RETRY_AFTER));
    if response
        .content_length()
        .is_some_and(|n| n > MAX_BODY_BYTES as u64)
    {
        return Err(HttpError::TooLarge {
            url: url.to_owned(),
            limit: MAX_BODY_BYTES,
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(HttpError::TooLarge {
                url: url.to_owned(),
                limit: MAX_BODY_BYTES,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, retry_after, body))
}

/// reqwest's Display stops at "error sending request"; the cause (connection refused, DNS) is
/// what a user needs.
pub fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod redact_tests {
    use super::*;

    #[test]
    fn echoed_credentials_are_redacted() {
        let headers = headers(Some(&BTreeMap::from([
            ("Authorization".to_owned(), "Bearer tok-123456".to_owned()),
            ("X-Short".to_owned(), "1".to_owned()),
        ])))
        .unwrap();
        assert_eq!(
            redact(
                "bad credential Bearer tok-123456 (tok-123456), 1 try",
                &headers
            ),
            "bad credential [redacted] ([redacted]), 1 try"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use axum::{Router, routing::get};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A real HTTP server on loopback with a huge answer and one that never comes.
    async fn server() -> String {
        let app = Router::new()
            .route("/huge", get(|| async { "x".repeat(MAX_BODY_BYTES + 1) }))
            .route(
                "/stream",
                get(|| async {
                    let chunks =
                        (0..5).map(|_| Ok::<_, std::io::Error>(vec![b'y'; MAX_BODY_BYTES / 4]));
                    axum::body::Body::from_stream(futures::stream::iter(chunks))
                }),
            )
            .route(
                "/slow",
                get(|| async { futures::future::pending::<&str>().await }),
            )
            .route("/ok", get(|| async { "fine" }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn bodies_are_bounded_and_requests_time_out() {
        crate::tls::install_crypto_provider().unwrap();
        let base = server().await;
        let client = client_with_timeout(Duration::from_millis(500)).unwrap();
        let get = |path: &str| {
            let url = format!("{base}{path}");
            let request = client.get(&url);
            async move { send(request, &url).await }
        };
        let (status, body) = get("/ok").await.unwrap();
        assert_eq!(
            (status.as_u16(), body.as_slice()),
            (200, b"fine".as_slice())
        );
        assert!(
            matches!(get("/huge").await, Err(HttpError::TooLarge { .. })),
            "declared length"
        );
        assert!(
            matches!(get("/stream").await, Err(HttpError::TooLarge { .. })),
            "streamed, no length"
        );
        let slow = get("/slow").await.unwrap_err();
        assert!(matches!(slow, HttpError::Timeout { .. }), "{slow}");
        let refused = send(client.get("http://127.0.0.1:1/"), "http://127.0.0.1:1/")
            .await
            .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("request to http://127.0.0.1:1/ failed"),
            "{refused}"
        );
    }

    #[test]
    fn header_values_are_sensitive_and_errors_name_only_the_header() {
        let spec = BTreeMap::from([("Authorization".to_owned(), "Bearer s3cret".to_owned())]);
        let map = headers(Some(&spec)).unwrap();
        assert!(map["authorization"].is_sensitive());
        assert!(!format!("{map:?}").contains("s3cret"));

        let bad = BTreeMap::from([("X-Token".to_owned(), "line\nbreak s3cret".to_owned())]);
        let err = headers(Some(&bad)).unwrap_err().to_string();
        assert!(err.contains("X-Token") && !err.contains("s3cret"), "{err}");
        let bad = BTreeMap::from([("bad header".to_owned(), "v".to_owned())]);
        assert!(
            headers(Some(&bad))
                .unwrap_err()
                .to_string()
                .contains("\"bad header\"")
        );
    }

    /// A server that is overloaded for its first `busy` answers, then answers "fine"; and
    /// one that holds each request 100 ms, counting how many it holds at once.
    async fn loaded_server(busy: usize) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let seen = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let now = Arc::new(AtomicUsize::new(0));
        let (seen2, most2) = (seen.clone(), most.clone());
        let app = Router::new()
            .route(
                "/busy",
                get(move || {
                    let n = seen2.fetch_add(1, Ordering::SeqCst);
                    async move {
                        if n < busy {
                            (StatusCode::SERVICE_UNAVAILABLE, "too many queries").into_response()
                        } else {
                            "fine".into_response()
                        }
                    }
                }),
            )
            .route(
                "/held",
                get(move || {
                    let (now, most) = (now.clone(), most2.clone());
                    async move {
                        let inside = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(inside, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        now.fetch_sub(1, Ordering::SeqCst);
                        "held"
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("http://{addr}"), seen, most)
    }

    #[tokio::test]
    async fn overloaded_answers_are_retried_within_the_budget() {
        crate::tls::install_crypto_provider().unwrap();
        let client = client().unwrap();
        let (base, seen, _) = loaded_server(2).await;
        let url = format!("{base}/busy");
        let (status, body) = send(client.get(&url), &url).await.unwrap();
        assert_eq!(
            (status.as_u16(), body.as_slice()),
            (200, b"fine".as_slice())
        );
        assert_eq!(seen.load(Ordering::SeqCst), 3, "two 503s, then the answer");

        // Overloaded for good: the last answer is reported once the budget is spent.
        let (base, seen, _) = loaded_server(usize::MAX).await;
        let url = format!("{base}/busy");
        let started = std::time::Instant::now();
        let (status, _) = send_within(client.get(&url), &url, Duration::from_millis(700))
            .await
            .unwrap();
        assert_eq!(status.as_u16(), 503);
        assert!(seen.load(Ordering::SeqCst) >= 2, "retried at least once");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn requests_in_flight_to_one_server_are_bounded() {
        crate::tls::install_crypto_provider().unwrap();
        let client = client().unwrap();
        let (base, _, most) = loaded_server(0).await;
        let url = format!("{base}/held");
        let all = (0..40).map(|_| {
            let request = client.get(&url);
            let url = url.clone();
            async move { send(request, &url).await }
        });
        let answers = futures::future::join_all(all).await;
        assert!(
            answers
                .iter()
                .all(|a| a.as_ref().is_ok_and(|(s, _)| s.as_u16() == 200))
        );
        let most = most.load(Ordering::SeqCst);
        assert!(
            most <= gate::per_server() && most >= 2,
            "at most {} at once, saw {most}",
            gate::per_server()
        );
    }
}
