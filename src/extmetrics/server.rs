//! The HTTPS server: routes, per-request authentication and authorization, JSON answers.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::extract::{Path, Query, Request, State};
use axum::http::HeaderMap;
use axum::http::header::CONTENT_TYPE;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use axum_server::tls::TlsInfo;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::json;
use thiserror::Error;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::authn::{self, AuthnError, DeferredClientAuth, RequestHeader, UserInfo};
use super::certs::Material;
use super::review::{Access, Reviewer};
use super::selector::LabelSelector;
use super::status_response::ApiError;
use super::values::metric_values;
use crate::error_chain::Chain;
use crate::metric_cache::MetricCache;
use crate::tls::CertifiedPem;

pub const GROUP: &str = "external.metrics.k8s.io";
pub const VERSION: &str = "v1beta1";
/// `/apis/{GROUP}/{VERSION}/namespaces/`, spelled out so no request has to format it.
const NAMESPACED_PREFIX: &str = "/apis/external.metrics.k8s.io/v1beta1/namespaces/";
const AUTH_CONFIG_MAP: &str = "extension-apiserver-authentication";

#[derive(Debug, Error)]
pub enum ServeError {
    #[error("external metrics TLS certificate: cannot read its PEM")]
    CertificatePem(#[source] rustls::pki_types::pem::Error),
    #[error("external metrics TLS certificate: no rustls crypto provider is installed")]
    NoCryptoProvider,
    #[error("external metrics TLS certificate: cannot configure TLS with it")]
    Tls(#[source] rustls::Error),
    #[error("external metrics server on {addr}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Everything a request needs.
#[derive(Clone)]
pub struct ApiState {
    cache: MetricCache,
    reviewer: Arc<Reviewer>,
    /// The front-proxy settings currently in force, refreshed by a watch.
    request_header: Arc<RwLock<Option<Arc<RequestHeader>>>>,
}

impl ApiState {
    pub fn new(client: Client, cache: MetricCache) -> Self {
        Self {
            cache,
            reviewer: Arc::new(Reviewer::new(client)),
            request_header: Arc::default(),
        }
    }

    fn request_header(&self) -> Option<Arc<RequestHeader>> {
        self.request_header
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the front-proxy settings (the watch does this; benchmarks set them directly).
    pub fn set_request_header(&self, value: Option<Arc<RequestHeader>>) {
        *self
            .request_header
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = value;
    }
}

/// Keeps the front-proxy settings in step with kube-system/extension-apiserver-authentication,
/// so a rotated front-proxy CA is honoured without a restart.
pub async fn watch_request_header(client: Client, state: ApiState, shutdown: CancellationToken) {
    let api: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    let config = watcher::Config::default().fields(&format!("metadata.name={AUTH_CONFIG_MAP}"));
    let stream = watcher(api, config).default_backoff().applied_objects();
    let run = stream.for_each(|event| {
        match event {
            Ok(cm) => match RequestHeader::from_config_map(&cm.data.unwrap_or_default()) {
                Ok(settings) => {
                    tracing::info!(allowed_names = ?settings.allowed_names, "front-proxy settings loaded");
                    state.set_request_header(Some(Arc::new(settings)));
                }
                Err(error) => {
                    tracing::warn!(error = %Chain(&error), "front-proxy settings unusable; only bearer tokens are accepted");
                    state.set_request_header(None);
                }
            },
            Err(error) => tracing::warn!(error = %crate::error_chain::Chain(&error), "cannot watch {AUTH_CONFIG_MAP}"),
        }
        futures::future::ready(())
    });
    tokio::select! {
        () = run => {}
        () = shutdown.cancelled() => {}
    }
}

/// The routes, with authentication and authorization in front of all but the probes.
pub fn router(state: ApiState) -> Router {
    let api = Router::new()
        .route("/apis", get(group_list))
        .route(&format!("/apis/{GROUP}"), get(group))
        .route(&format!("/apis/{GROUP}/{VERSION}"), get(resources))
        .route(
            &format!("/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{{metric}}"),
            get(values),
        )
        .fallback(|| async { ApiError::not_found("the requested path is not served here") })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state);
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .merge(api)
}

/// Authenticates the caller, then asks whether they may do this.
async fn guard(
    State(state): State<ApiState>,
    tls: Option<Extension<Arc<TlsInfo>>>,
    request: Request,
    next: Next,
) -> Response {
    let certs: Vec<rustls::pki_types::CertificateDer<'_>> = tls
        .as_ref()
        .map(|t| {
            t.peer_certificates
                .iter()
                .map(|c| rustls::pki_types::CertificateDer::from(c.as_slice()))
                .collect()
        })
        .unwrap_or_default();
    let user = match authenticate(&state, &certs, request.headers()).await {
        Ok(user) => user,
        Err(error) => return error.into_response(),
    };
    let path = request.uri().path();
    let access = metric_access(path).unwrap_or_else(|| Access::Path(path.to_owned()));
    match state.reviewer.allowed(&user, &access).await {
        Ok(true) => next.run(request).await,
        Ok(false) => ApiError::forbidden(format!(
            "user {:?} may not read {}",
            user.name,
            describe(&access)
        ))
        .into_response(),
        Err(error) => {
            ApiError::internal(format!("cannot check access: {}", Chain(&error))).into_response()
        }
    }
}

async fn authenticate(
    state: &ApiState,
    certs: &[rustls::pki_types::CertificateDer<'_>],
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let unauthorized = |e: AuthnError| ApiError::unauthorized(e.to_string());
    // As at kube-apiserver, each credential gets its chance: a certificate that is not the
    // front proxy's does not keep a valid bearer token from counting (its headers never do).
    let mut certificate_refused = None;
    if !certs.is_empty() {
        match state.request_header() {
            Some(settings) => match settings.authenticate(certs, headers) {
                Ok(Some(user)) => return Ok(user),
                Ok(None) => {}
                Err(error) => certificate_refused = Some(unauthorized(error)),
            },
            None => {
                certificate_refused = Some(ApiError::unauthorized(
                    "client certificates cannot be checked yet: the front-proxy CA is unknown",
                ));
            }
        }
    }
    let Some(token) = authn::bearer(headers) else {
        return Err(certificate_refused.unwrap_or_else(|| unauthorized(AuthnError::NoCredentials)));
    };
    match state.reviewer.user_of(token).await {
        Ok(Some(user)) => Ok(user),
        Ok(None) => Err(unauthorized(AuthnError::BadToken)),
        Err(error) => Err(ApiError::internal(format!(
            "cannot review the token: {}",
            Chain(&error)
        ))),
    }
}

fn metric_access(path: &str) -> Option<Access> {
    let rest = path.strip_prefix(NAMESPACED_PREFIX)?;
    let (namespace, metric) = rest.split_once('/')?;
    (!metric.is_empty() && !metric.contains('/')).then(|| Access::Metric {
        namespace: namespace.to_owned(),
        metric: metric.to_owned(),
    })
}

fn describe(access: &Access) -> String {
    match access {
        Access::Metric { namespace, metric } => {
            format!("external metric {metric:?} in namespace {namespace:?}")
        }
        Access::Path(path) => path.clone(),
    }
}

async fn group_list() -> Json<serde_json::Value> {
    Json(json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": [group_body()] }))
}

async fn group() -> Json<serde_json::Value> {
    let mut body = group_body();
    body["kind"] = json!("APIGroup");
    body["apiVersion"] = json!("v1");
    Json(body)
}

fn group_body() -> serde_json::Value {
    let version = json!({ "groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION });
    json!({ "name": GROUP, "versions": [version], "preferredVersion": version })
}

async fn resources() -> Json<serde_json::Value> {
    Json(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{GROUP}/{VERSION}"),
        "resources": [{
            "name": "externalmetrics",
            "singularName": "",
            "namespaced": true,
            "kind": "ExternalMetricValueList",
            "verbs": ["get"],
        }],
    }))
}

async fn values(
    State(state): State<ApiState>,
    Path((namespace, metric)): Path<(String, String)>,
    Query(query): Query<SelectorQuery>,
) -> Result<Response, ApiError> {
    let selector = LabelSelector::parse(query.label_selector.as_deref().unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let body = metric_values(
        &state.cache,
        &namespace,
        &metric,
        &selector,
        Timestamp::now(),
    )?;
    Ok(([(CONTENT_TYPE, "application/json")], body).into_response())
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SelectorQuery {
    label_selector: Option<String>,
}

/// Serves the API over TLS on `listener` until `shutdown` fires.
pub async fn serve(
    listener: std::net::TcpListener,
    mut certificates: watch::Receiver<Material>,
    state: ApiState,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let addr = listener.local_addr().map_err(|source| ServeError::Serve {
        addr: ([0, 0, 0, 0], 0).into(),
        source,
    })?;
    let first = certificates.borrow_and_update().serving.clone();
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(server_config(&first)?));
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    let reloaded = tls.clone();
    // Runs alongside the server, in the same task: it ends at shutdown, and so does the server.
    let reload = async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                changed = certificates.changed() => {
                    if changed.is_err() {
                        // The source is gone (it only stops at shutdown): keep what we serve.
                        shutdown.cancelled().await;
                        break;
                    }
                    let serving = certificates.borrow_and_update().serving.clone();
                    // New handshakes get the new certificate; open connections keep theirs.
                    match server_config(&serving) {
                        Ok(config) => reloaded.reload_from_config(Arc::new(config)),
                        Err(error) => tracing::warn!(error = %crate::error_chain::Chain(&error), "cannot use the new serving certificate; serving the previous one"),
                    }
                }
            }
        }
        stopper.graceful_shutdown(Some(std::time::Duration::from_secs(5)));
    };
    let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls)
        .map_err(|source| ServeError::Serve { addr, source })?
        .handle(handle)
        .serve(router(state).into_make_service());
    let (served, ()) = tokio::join!(server, reload);
    served.map_err(|source| ServeError::Serve { addr, source })
}

/// TLS 1.2+ with any (or no) client certificate; trust is decided per request.
pub fn server_config(certificate: &CertifiedPem) -> Result<rustls::ServerConfig, ServeError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(certificate.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(ServeError::CertificatePem)?;
    let key = PrivateKeyDer::from_pem_slice(certificate.key_pem.as_bytes())
        .map_err(ServeError::CertificatePem)?;
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .ok_or(ServeError::NoCryptoProvider)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(ServeError::Tls)?
        .with_client_cert_verifier(Arc::new(DeferredClientAuth::new(provider)))
        .with_single_cert(chain, key)
        .map_err(ServeError::Tls)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_paths_are_collection_reads() {
        assert_eq!(
            NAMESPACED_PREFIX,
            format!("/apis/{GROUP}/{VERSION}/namespaces/")
        );
        assert_eq!(
            metric_access("/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/kv-cache"),
            Some(Access::Metric {
                namespace: "ml".into(),
                metric: "kv-cache".into()
            })
        );
        assert_eq!(metric_access("/apis/external.metrics.k8s.io/v1beta1"), None);
        assert_eq!(
            metric_access("/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/a/b"),
            None
        );
    }
}
