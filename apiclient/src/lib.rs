//! A small Kubernetes API client for edgegpu's node agents: requests over HTTPS with the pod's
//! service-account token, JSON in and out. The labeller reads its Node and merge-patches its
//! labels; the DRA driver publishes ResourceSlices and reads ResourceClaims.
//!
//! Hand-written on hyper's HTTP/1 client and rustls rather than with kube-rs + k8s-openapi:
//! those add ~130 crates and made a minimal node-patching binary 4.9 MB (measured, release
//! profile, x86_64; docs/labels.md) for a handful of requests whose shapes are fixed by the
//! API (`GET /api/v1/nodes/{name}`, `PATCH` with `application/merge-patch+json`, …).

pub mod args;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
/// The request methods and answer statuses of [`ApiServer::json`].
pub use hyper::{Method, StatusCode};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Map, Value};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Where a pod finds its service account's token and the cluster CA
/// (Kubernetes docs, "Accessing the Kubernetes API from a Pod").
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// How old the token read from its file may get before it is read again.
const TOKEN_REREAD: Duration = Duration::from_secs(60);
/// One request (connect, TLS, answer) must not hang the labeller.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// A Node object is a few KiB; refuse to buffer more than this.
const MAX_BODY: usize = 4 << 20;

/// An API server and the credentials to use there.
pub struct ApiServer {
    /// `host:port` to connect to.
    authority: String,
    server_name: ServerName<'static>,
    /// The bearer token and when it was read: projected service-account tokens are rotated by
    /// the kubelet (at 80% of their lifetime, an hour by default), so a long-running program
    /// reads the file again (as client-go does, every minute).
    token: std::sync::Mutex<(String, std::time::Instant)>,
    token_file: std::path::PathBuf,
    token_reread: Duration,
    tls: TlsConnector,
    /// What a 403 answer means for this program (which role must allow what).
    forbidden_hint: String,
}

/// The API server of the cluster this pod runs in: `KUBERNETES_SERVICE_HOST` and
/// `KUBERNETES_SERVICE_PORT` (set in every pod), as an `https://` URL.
pub fn in_cluster_url() -> Option<String> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
    Some(if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    })
}

impl ApiServer {
    /// `url` (`https://host[:port]`), the bearer token in `token_file` and the CA bundle (PEM)
    /// the server's certificate must chain to.
    pub fn new(url: &str, token_file: &Path, ca_file: &Path) -> anyhow::Result<Self> {
        let uri: Uri = url
            .parse()
            .with_context(|| format!("invalid API server URL `{url}`"))?;
        anyhow::ensure!(
            uri.scheme_str() == Some("https"),
            "API server URL `{url}` must start with https://"
        );
        let host = uri
            .host()
            .with_context(|| format!("API server URL `{url}` has no host"))?;
        let port = uri.port_u16().unwrap_or(443);
        let bare_host = host.trim_start_matches('[').trim_end_matches(']');
        let server_name = ServerName::try_from(bare_host.to_string())
            .with_context(|| format!("`{bare_host}` is neither a DNS name nor an IP address"))?;
        let authority = if bare_host.contains(':') {
            format!("[{bare_host}]:{port}")
        } else {
            format!("{bare_host}:{port}")
        };
        let token = std::fs::read_to_string(token_file)
            .with_context(|| format!("cannot read the token {}", token_file.display()))?
            .trim()
            .to_string();
        anyhow::ensure!(
            !token.is_empty(),
            "the token {} is empty",
            token_file.display()
        );
        let pem = std::fs::read(ca_file)
            .with_context(|| format!("cannot read the CA bundle {}", ca_file.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        let mut count = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.with_context(|| format!("{}: invalid PEM", ca_file.display()))?;
            roots
                .add(cert)
                .with_context(|| format!("{}: unusable CA certificate", ca_file.display()))?;
            count += 1;
        }
        anyhow::ensure!(count > 0, "{} holds no certificate", ca_file.display());
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .context("TLS setup")?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(ApiServer {
            authority,
            server_name,
            token: std::sync::Mutex::new((token, std::time::Instant::now())),
            token_file: token_file.to_path_buf(),
            token_reread: TOKEN_REREAD,
            tls: TlsConnector::from(Arc::new(config)),
            forbidden_hint: String::new(),
        })
    }

    /// The token, read again from its file when the copy is older than [`TOKEN_REREAD`]; an
    /// unreadable or empty file keeps the old token (logged).
    fn current_token(&self) -> String {
        let mut token = self.token.lock().unwrap_or_else(|p| p.into_inner());
        if token.1.elapsed() >= self.token_reread {
            match std::fs::read_to_string(&self.token_file) {
                Ok(text) if !text.trim().is_empty() => {
                    *token = (text.trim().to_string(), std::time::Instant::now())
                }
                Ok(_) => tracing::warn!(
                    "the token {} is empty; keeping the one read before",
                    self.token_file.display()
                ),
                Err(e) => tracing::warn!(
                    "cannot read the token {}: {e}; keeping the one read before",
                    self.token_file.display()
                ),
            }
        }
        token.0.clone()
    }

    /// Adds `hint` to the message of every 403 answer, e.g. "the ClusterRole X must allow get
    /// and patch on nodes".
    pub fn with_forbidden_hint(mut self, hint: impl Into<String>) -> Self {
        self.forbidden_hint = hint.into();
        self
    }

    /// One request with an optional JSON body (`content_type` names its flavour:
    /// `application/json`, `application/merge-patch+json`, …); the status and the answer parsed
    /// as JSON (`Value::Null` for an empty body). Non-2xx answers are returned, not errors: see
    /// [`ApiServer::check`].
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, &Value)>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let body = match body {
            Some((content_type, value)) => Some((content_type, serde_json::to_vec(value)?)),
            None => None,
        };
        let (status, bytes) = self.request(method, path, body).await?;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .with_context(|| format!("{path}: the answer ({status}) is not JSON"))?
        };
        Ok((status, value))
    }

    /// A non-2xx answer as an error carrying the API's own message (a `Status` object) and
    /// what `what` was; `Ok` for 2xx.
    pub fn check(&self, status: StatusCode, body: &Value, what: &str) -> anyhow::Result<()> {
        check(
            status,
            &serde_json::to_vec(body).unwrap_or_default(),
            what,
            &self.forbidden_hint,
        )
    }

    /// One request; the status and body of the answer.
    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(method, path, body))
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {REQUEST_TIMEOUT:?}"))?
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let tcp = TcpStream::connect(&self.authority)
            .await
            .with_context(|| format!("cannot connect to {}", self.authority))?;
        let tls = self
            .tls
            .connect(self.server_name.clone(), tcp)
            .await
            .with_context(|| format!("TLS with {}", self.authority))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .context("HTTP handshake")?;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("API connection ended: {e}");
            }
        });
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, &self.authority)
            .header(AUTHORIZATION, format!("Bearer {}", self.current_token()))
            .header(ACCEPT, "application/json");
        let payload = match body {
            Some((content_type, bytes)) => {
                request = request.header(CONTENT_TYPE, content_type);
                Bytes::from(bytes)
            }
            None => Bytes::new(),
        };
        let response = sender
            .send_request(request.body(Full::new(payload))?)
            .await
            .context("request failed")?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?
            .to_bytes();
        driver.abort();
        Ok((status, body))
    }

    /// The labels of Node `name`.
    pub async fn node_labels(&self, name: &str) -> anyhow::Result<BTreeMap<String, String>> {
        let (status, body) = self
            .request(Method::GET, &node_path(name), None)
            .await
            .with_context(|| format!("GET node {name}"))?;
        check(
            status,
            &body,
            &format!("GET node {name}"),
            &self.forbidden_hint,
        )?;
        let node: Value = serde_json::from_slice(&body).context("the Node is not JSON")?;
        let labels = node
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Ok(labels)
    }

    /// Sets (a string) or removes (`null`) each of `labels` on Node `name` with one JSON merge
    /// patch (RFC 7386), which leaves every other label alone.
    pub async fn patch_node_labels(
        &self,
        name: &str,
        labels: &Map<String, Value>,
    ) -> anyhow::Result<()> {
        let body = serde_json::to_vec(&serde_json::json!({ "metadata": { "labels": labels } }))?;
        let (status, answer) = self
            .request(
                Method::PATCH,
                &node_path(name),
                Some(("application/merge-patch+json", body)),
            )
            .await
            .with_context(|| format!("PATCH node {name}"))?;
        check(
            status,
            &answer,
            &format!("PATCH node {name}"),
            &self.forbidden_hint,
        )
    }
}

fn node_path(name: &str) -> String {
    format!("/api/v1/nodes/{name}")
}

/// A non-2xx answer as an error carrying the API's own message (a `Status` object).
fn check(status: StatusCode, body: &[u8], what: &str, forbidden_hint: &str) -> anyhow::Result<()> {
    if status.is_success() {
        return Ok(());
    }
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
    let hint = match status {
        StatusCode::UNAUTHORIZED => " (the service-account token was refused)".to_string(),
        StatusCode::FORBIDDEN if !forbidden_hint.is_empty() => format!(" ({forbidden_hint})"),
        _ => String::new(),
    };
    anyhow::bail!("{what}: {status}: {message}{hint}")
}

/// A non-2xx answer of the API server: what was asked, the status and the API's own `Status`
/// object (`message`, `reason`, `details.name`). Every typed helper ([`ApiServer::get`],
/// [`ApiServer::list`], [`ApiServer::create`], [`ApiServer::replace`], [`ApiServer::delete`])
/// fails with one of these inside its `anyhow::Error`; [`api_error`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// What was asked, e.g. "create resourceslice 00000-edgegpu.io-node-a-".
    pub what: String,
    pub status: StatusCode,
    /// The `Status` object's `message` (or the start of a body that is not one).
    pub message: String,
    /// The `Status` object's `reason` (`NotFound`, `Conflict`, `AlreadyExists`, …), if any.
    pub reason: Option<String>,
    /// `details.name`: set when an object of that name is missing or conflicting; unset when
    /// the path itself is unknown (e.g. an API version the server does not serve).
    pub details_name: Option<String>,
    hint: String,
}

impl ApiError {
    fn from_answer(status: StatusCode, body: &[u8], what: &str, forbidden_hint: &str) -> Self {
        let parsed = serde_json::from_slice::<Value>(body).ok();
        let field = |pointer: &str| {
            parsed
                .as_ref()
                .and_then(|v| v.pointer(pointer))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let message = field("/message")
            .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
        let hint = match status {
            StatusCode::UNAUTHORIZED => " (the service-account token was refused)".to_string(),
            StatusCode::FORBIDDEN if !forbidden_hint.is_empty() => format!(" ({forbidden_hint})"),
            _ => String::new(),
        };
        ApiError {
            what: what.to_string(),
            status,
            message,
            reason: field("/reason"),
            details_name: field("/details/name"),
            hint,
        }
    }

    /// 409 Conflict: a stale `resourceVersion` on update, a failed delete precondition, or a
    /// name that already exists on create (`reason: AlreadyExists`).
    pub fn is_conflict(&self) -> bool {
        self.status == StatusCode::CONFLICT
    }

    /// 404 for a named object that does not exist (the API names it in `details.name`).
    pub fn is_object_not_found(&self) -> bool {
        self.status == StatusCode::NOT_FOUND && self.details_name.is_some()
    }

    /// 404 for the path itself: the server does not serve that resource or API version
    /// ("the server could not find the requested resource", no `details.name`).
    pub fn is_resource_not_served(&self) -> bool {
        self.status == StatusCode::NOT_FOUND && self.details_name.is_none()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}: {}{}",
            self.what, self.status, self.message, self.hint
        )
    }
}

impl std::error::Error for ApiError {}

/// The [`ApiError`] inside `err`, if the API server answered non-2xx.
pub fn api_error(err: &anyhow::Error) -> Option<&ApiError> {
    err.downcast_ref::<ApiError>()
}

/// Query parameters of a list request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `fieldSelector`, e.g. `spec.nodeName=node-a,spec.driver=edgegpu.io`.
    pub field_selector: Option<String>,
    /// `labelSelector`, e.g. `app=x,tier in (a,b)`.
    pub label_selector: Option<String>,
}

impl ListOptions {
    /// The query string (`?fieldSelector=…&labelSelector=…`, percent-encoded), or "" for none.
    pub fn query(&self) -> String {
        let mut pairs = Vec::new();
        if let Some(s) = &self.field_selector {
            pairs.push(format!("fieldSelector={}", percent_encode(s)));
        }
        if let Some(s) = &self.label_selector {
            pairs.push(format!("labelSelector={}", percent_encode(s)));
        }
        if pairs.is_empty() {
            String::new()
        } else {
            format!("?{}", pairs.join("&"))
        }
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, so that a selector's `=`,
/// `,`, `!`, spaces and parentheses reach the server as data, not as query syntax.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Decodes what [`percent_encode`] (or any client) encoded; `+` is a space, as in HTML forms
/// (Go's `url.ParseQuery`, which the API server uses, reads it so). `None` for a bad escape.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

impl ApiServer {
    /// One request whose non-2xx answer becomes an [`ApiError`]; the answer's JSON.
    async fn typed(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        what: &str,
    ) -> anyhow::Result<Value> {
        let body = match body {
            Some(value) => Some(("application/json", serde_json::to_vec(value)?)),
            None => None,
        };
        let (status, bytes) = self
            .request(method, path, body)
            .await
            .with_context(|| what.to_string())?;
        if !status.is_success() {
            return Err(ApiError::from_answer(status, &bytes, what, &self.forbidden_hint).into());
        }
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes)
            .with_context(|| format!("{what}: the answer ({status}) is not JSON"))
    }

    /// `GET path`: one object. `what` names it in errors ("get resourceclaim ns/name").
    pub async fn get(&self, path: &str, what: &str) -> anyhow::Result<Value> {
        self.typed(Method::GET, path, None, what).await
    }

    /// `GET path?fieldSelector=…&labelSelector=…`: a list object (`items`, `metadata`).
    pub async fn list(
        &self,
        path: &str,
        options: &ListOptions,
        what: &str,
    ) -> anyhow::Result<Value> {
        let full = format!("{path}{}", options.query());
        self.typed(Method::GET, &full, None, what).await
    }

    /// `POST collection_path` with `object`: the created object as stored (name generated
    /// from `metadata.generateName` if unset, `uid`, `resourceVersion`).
    pub async fn create(
        &self,
        collection_path: &str,
        object: &Value,
        what: &str,
    ) -> anyhow::Result<Value> {
        self.typed(Method::POST, collection_path, Some(object), what)
            .await
    }

    /// `PUT path` with `object`, whose `metadata.resourceVersion` must be the stored one:
    /// otherwise the server answers 409 Conflict ([`ApiError::is_conflict`]).
    pub async fn replace(&self, path: &str, object: &Value, what: &str) -> anyhow::Result<Value> {
        self.typed(Method::PUT, path, Some(object), what).await
    }

    /// `DELETE path`, with `preconditions` (`uid`, `resourceVersion`) when given: the server
    /// then deletes only that very version of the object (409 Conflict otherwise).
    pub async fn delete(
        &self,
        path: &str,
        preconditions: Option<(&str, &str)>,
        what: &str,
    ) -> anyhow::Result<()> {
        let options = preconditions.map(|(uid, resource_version)| {
            serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1",
                "preconditions": {"uid": uid, "resourceVersion": resource_version}})
        });
        self.typed(Method::DELETE, path, options.as_ref(), what)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod typed_tests {
    #[test]
    fn a_rotated_token_is_read_again() {
        let dir = std::env::temp_dir().join(format!("apiclient-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "first\n").unwrap();
        let ca =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testkit/fixtures/tls/ca.crt");
        let mut api = ApiServer::new("https://127.0.0.1:6443", &token, &ca).unwrap();
        assert_eq!(api.current_token(), "first");
        std::fs::write(&token, "second\n").unwrap();
        assert_eq!(
            api.current_token(),
            "first",
            "not before the re-read interval"
        );
        api.token_reread = Duration::ZERO;
        assert_eq!(api.current_token(), "second");
        // An emptied file keeps the token that worked.
        std::fs::write(&token, "").unwrap();
        assert_eq!(api.current_token(), "second");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    use super::*;

    #[test]
    fn selectors_are_percent_encoded() {
        let options = ListOptions {
            field_selector: Some("spec.nodeName=node-a,spec.driver=edgegpu.io".into()),
            label_selector: Some("tier in (a b),!x".into()),
        };
        assert_eq!(
            options.query(),
            "?fieldSelector=spec.nodeName%3Dnode-a%2Cspec.driver%3Dedgegpu.io\
             &labelSelector=tier%20in%20%28a%20b%29%2C%21x"
        );
        assert_eq!(ListOptions::default().query(), "");
        for s in ["spec.nodeName=a,b", "tier in (a b),!x", "ü=1+2"] {
            assert_eq!(percent_decode(&percent_encode(s)).as_deref(), Some(s));
        }
        assert_eq!(percent_decode("a+b%3D").as_deref(), Some("a b="));
        assert_eq!(percent_decode("%4"), None);
    }

    #[test]
    fn errors_carry_the_status_object() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Operation cannot be fulfilled on resourceslices.resource.k8s.io \"x\": the object has been modified","reason":"Conflict","details":{"name":"x","group":"resource.k8s.io","kind":"resourceslices"},"code":409}"#;
        let e = ApiError::from_answer(StatusCode::CONFLICT, body, "update resourceslice x", "");
        assert!(e.is_conflict());
        assert_eq!(e.reason.as_deref(), Some("Conflict"));
        assert!(e
            .to_string()
            .starts_with("update resourceslice x: 409 Conflict: Operation"));
        let unserved = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#;
        let e = ApiError::from_answer(StatusCode::NOT_FOUND, unserved, "get", "");
        assert!(e.is_resource_not_served() && !e.is_object_not_found());
        let e = ApiError::from_answer(StatusCode::FORBIDDEN, b"nope", "get", "grant get");
        assert_eq!(e.to_string(), "get: 403 Forbidden: nope (grant get)");
        let err: anyhow::Error = e.into();
        assert!(api_error(&err.context("more")).is_some());
    }
}
