//! A fake Kubernetes API server for the labeller and the DRA driver: HTTPS with a test CA
//! (`fixtures/tls/`, made by `fixtures/tls/generate.sh`), bearer-token authentication, and
//! what their ClusterRoles allow them to need:
//!
//! - Nodes (with `metadata.uid`): `GET /api/v1/nodes/{name}` and `PATCH` of the same path
//!   with a JSON merge patch (RFC 7386) that may only touch `metadata.labels`;
//! - `resource.k8s.io` ResourceSlices in every version the release it acts as serves
//!   ([`FakeApiServer::act_as`], [`release`]: `v1`, `v1beta2`, `v1beta1` with its `basic`
//!   devices; fields of gates that are off dropped on write; `GET /version` and the group's
//!   discovery document `GET /apis/resource.k8s.io`): list (with the field selectors the
//!   real API supports: `spec.nodeName`, `spec.driver`, `metadata.name`), get, create
//!   (honouring `metadata.generateName` as the API server's name generator does), update
//!   (`PUT`, 409 on a stale `resourceVersion`), delete (with `uid`/`resourceVersion`
//!   preconditions);
//! - Events: `POST /api/v1/namespaces/{ns}/events` (stored with a generated name, as the
//!   API server does; [`FakeApiServer::events`]); Node annotations set by
//!   [`FakeApiServer::annotate`] come back in `GET`;
//! - ResourceClaims: get, in `v1`, `v1beta2` and `v1beta1` (claims are added by
//!   [`FakeApiServer::add_claim`]; [`FakeApiServer::serve_resource_versions`] makes versions
//!   unserved, as on an older cluster).
//!
//! Answers as the API does: `kind`/`apiVersion` on returned objects (not on list items), a
//! `Status` object with `message`, `reason`, `details` and `code` for errors; a path the
//! server does not serve gets its 404 ("the server could not find the requested resource",
//! empty `details`). Every request is recorded.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

pub mod release;
mod resources;
pub use resources::uid_for;

/// The token the fake accepts.
pub const TOKEN: &str = "test-token-of-the-node-labeller";

/// One request the fake received.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// The raw query string (`fieldSelector=…`), if any.
    pub query: Option<String>,
    pub content_type: Option<String>,
    pub body: Option<Value>,
}

#[derive(Default)]
struct State {
    nodes: BTreeMap<String, BTreeMap<String, String>>,
    node_uids: BTreeMap<String, String>,
    annotations: BTreeMap<String, BTreeMap<String, String>>,
    events: Vec<Value>,
    requests: Vec<Recorded>,
    fail_next: usize,
    forbidden: bool,
    resources: resources::Resources,
}

/// The fake, serving until dropped.
pub struct FakeApiServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
    dir: tempfile::TempDir,
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/tls")
        .join(name)
}

fn status(code: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": message, "code": code.as_u16()});
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = code;
    r
}

fn node_json(
    name: &str,
    uid: Option<&String>,
    labels: &BTreeMap<String, String>,
    annotations: Option<&BTreeMap<String, String>>,
) -> Response<Full<Bytes>> {
    let mut metadata = json!({"name": name, "uid": uid, "labels": labels});
    if let Some(a) = annotations.filter(|a| !a.is_empty()) {
        metadata["annotations"] = json!(a);
    }
    let body = json!({"kind": "Node", "apiVersion": "v1", "metadata": metadata});
    Response::new(Full::new(Bytes::from(body.to_string())))
}

async fn answer(state: Arc<Mutex<State>>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().map(str::to_string);
    let auth = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    let mut s = state.lock().unwrap();
    s.requests.push(Recorded {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        content_type: content_type.clone(),
        body: body.clone(),
    });
    if s.fail_next > 0 {
        s.fail_next -= 1;
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is currently unable to handle the request",
        );
    }
    if auth.as_deref() != Some(&format!("Bearer {TOKEN}")) {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    if s.forbidden {
        return status(StatusCode::FORBIDDEN, "nodes is forbidden: User \"system:serviceaccount:kube-system:edgegpu-node-labeller\" cannot patch resource \"nodes\"");
    }
    if path == "/version" && method == Method::GET {
        let body = s.resources.release.version_object();
        return Response::new(Full::new(Bytes::from(body.to_string())));
    }
    if path == "/apis/resource.k8s.io" || path.starts_with("/apis/resource.k8s.io/") {
        let (code, body) = s
            .resources
            .answer(&method, &path, query.as_deref(), body.as_ref());
        let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
        *r.status_mut() = code;
        return r;
    }
    if let Some(namespace) = path
        .strip_prefix("/api/v1/namespaces/")
        .and_then(|rest| rest.strip_suffix("/events"))
    {
        if method != Method::POST {
            return status(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        }
        let Some(mut event) = body.filter(|b| b.get("involvedObject").is_some()) else {
            return status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "an Event needs involvedObject",
            );
        };
        let n = s.events.len();
        let prefix = event
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .unwrap_or("event-")
            .to_string();
        event["metadata"]["name"] = json!(format!("{prefix}{n:05x}"));
        event["metadata"]["namespace"] = json!(namespace);
        s.events.push(event.clone());
        let mut r = Response::new(Full::new(Bytes::from(event.to_string())));
        *r.status_mut() = StatusCode::CREATED;
        return r;
    }
    let Some(name) = path.strip_prefix("/api/v1/nodes/") else {
        return status(
            StatusCode::NOT_FOUND,
            "the server could not find the requested resource",
        );
    };
    let name = name.to_string();
    let Some(labels) = s.nodes.get_mut(&name) else {
        return status(
            StatusCode::NOT_FOUND,
            &format!("nodes \"{name}\" not found"),
        );
    };
    match method {
        Method::GET => node_json(
            &name,
            s.node_uids.get(&name),
            &s.nodes[&name],
            s.annotations.get(&name),
        ),
        Method::PATCH => {
            if content_type.as_deref() != Some("application/merge-patch+json") {
                return status(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "the body of the request was in an unknown format",
                );
            }
            // Only metadata.labels may change: anything else is refused.
            let Some(patch) = body
                .as_ref()
                .and_then(|b| b.as_object())
                .filter(|o| o.len() == 1)
                .and_then(|o| o.get("metadata"))
                .and_then(|m| m.as_object())
                .filter(|m| m.len() == 1)
                .and_then(|m| m.get("labels"))
                .and_then(|l| l.as_object())
            else {
                return status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "the fake accepts only metadata.labels",
                );
            };
            for (key, value) in patch {
                match value {
                    Value::Null => {
                        labels.remove(key);
                    }
                    Value::String(v) => {
                        labels.insert(key.clone(), v.clone());
                    }
                    other => {
                        return status(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            &format!("label {key}: {other} is not a string"),
                        )
                    }
                }
            }
            node_json(
                &name,
                s.node_uids.get(&name),
                &s.nodes[&name],
                s.annotations.get(&name),
            )
        }
        _ => status(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    }
}

impl FakeApiServer {
    /// Serves one Node `node` with `labels` on 127.0.0.1.
    pub async fn start(node: &str, labels: &[(&str, &str)]) -> FakeApiServer {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(fixture("server.crt"))
                .expect("server.crt")
                .collect::<Result<_, _>>()
                .expect("server certificate");
        let key = PrivateKeyDer::from_pem_file(fixture("server.key")).expect("server.key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server TLS config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let mut state = State::default();
        state
            .node_uids
            .insert(node.to_string(), resources::uid_for(node));
        state.nodes.insert(
            node.to_string(),
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        let state = Arc::new(Mutex::new(state));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let state = shared.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |r| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(answer(state, r).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).expect("token file");
        FakeApiServer {
            addr,
            state,
            task,
            dir,
        }
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// A file holding the token the fake accepts.
    pub fn token_file(&self) -> PathBuf {
        self.dir.path().join("token")
    }

    /// The CA bundle the fake's certificate chains to.
    pub fn ca_file(&self) -> PathBuf {
        fixture("ca.crt")
    }

    /// The flags a program under test reaches this fake with: `--api-server`, `--token-file`,
    /// `--ca-file`.
    pub fn client_args(&self) -> Vec<std::ffi::OsString> {
        vec![
            "--api-server".into(),
            self.url().into(),
            "--token-file".into(),
            self.token_file().into(),
            "--ca-file".into(),
            self.ca_file().into(),
        ]
    }

    /// A node's labels now.
    pub fn labels(&self, node: &str) -> BTreeMap<String, String> {
        self.state.lock().unwrap().nodes[node].clone()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The next `n` requests answer 503.
    pub fn fail_next(&self, n: usize) {
        self.state.lock().unwrap().fail_next = n;
    }

    /// While set, authenticated requests answer 403 (RBAC missing).
    pub fn set_forbidden(&self, forbidden: bool) {
        self.state.lock().unwrap().forbidden = forbidden;
    }
}

impl FakeApiServer {
    /// Adds Node `name` (no labels).
    pub fn add_node(&self, name: &str) {
        let mut s = self.state.lock().unwrap();
        s.nodes.entry(name.to_string()).or_default();
        s.node_uids
            .insert(name.to_string(), resources::uid_for(name));
    }

    /// Sets (or, with `None`, removes) annotation `key` of Node `name`.
    pub fn annotate(&self, name: &str, key: &str, value: Option<&str>) {
        let mut s = self.state.lock().unwrap();
        let annotations = s.annotations.entry(name.to_string()).or_default();
        match value {
            Some(v) => annotations.insert(key.to_string(), v.to_string()),
            None => annotations.remove(key),
        };
    }

    /// Every Event created so far, as stored.
    pub fn events(&self) -> Vec<Value> {
        self.state.lock().unwrap().events.clone()
    }

    /// Node `name`'s `metadata.uid`.
    pub fn node_uid(&self, name: &str) -> String {
        self.state.lock().unwrap().node_uids[name].clone()
    }

    /// Every stored ResourceSlice (as a `GET` answers it), in name order.
    pub fn slices(&self) -> Vec<Value> {
        self.state.lock().unwrap().resources.slices()
    }

    /// Stores a ResourceSlice as another writer would have created it (another node's
    /// driver, an older version of this one): `metadata.generateName` or `name`, `spec`.
    /// Returns it as stored.
    pub fn insert_slice(&self, slice: Value) -> Value {
        self.state
            .lock()
            .unwrap()
            .resources
            .insert_slice(slice)
            .expect("a valid ResourceSlice")
    }

    /// Right after answering the next ResourceSlice list, every listed slice is changed by
    /// "someone else" (its `resourceVersion` moves on), so that writes based on that list
    /// meet 409 Conflict, as when two writers race on the real API server.
    pub fn modify_slices_after_next_list(&self) {
        self.state.lock().unwrap().resources.modify_after_next_list = true;
    }

    /// Allows ResourceSlice writes (create, update, delete) only for slices of `node`
    /// (`spec.nodeName`), answering 403 otherwise, as the ValidatingAdmissionPolicy that
    /// `k8s.io/dynamic-resource-allocation` recommends for kubelet plugins does; `None`:
    /// no such policy.
    pub fn restrict_slice_writes_to_node(&self, node: Option<&str>) {
        self.state.lock().unwrap().resources.writes_only_for_node = node.map(str::to_string);
    }

    /// Adds (or replaces) a ResourceClaim `namespace/name` with `uid` and, when given,
    /// `status.allocation` (`{"devices": {"results": [...], "config": [...]}}`).
    pub fn add_claim(&self, namespace: &str, name: &str, uid: &str, allocation: Option<Value>) {
        self.state
            .lock()
            .unwrap()
            .resources
            .add_claim(namespace, name, uid, allocation);
    }

    /// Removes ResourceClaim `namespace/name`.
    pub fn remove_claim(&self, namespace: &str, name: &str) {
        self.state
            .lock()
            .unwrap()
            .resources
            .claims
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Acts as Kubernetes `release` (default: 1.36 with its default gates): the
    /// `resource.k8s.io` versions served, `GET /version`, and the slice fields dropped on
    /// write ([`release::Release::drop_disabled`]).
    pub fn act_as(&self, release: release::Release) {
        self.state.lock().unwrap().resources.release = release;
    }

    /// The slice fields dropped on writes so far (`spec.devices[0].taints`, …).
    pub fn dropped_fields(&self) -> Vec<String> {
        self.state.lock().unwrap().resources.dropped.clone()
    }

    /// The `resource.k8s.io` versions served, of those the release has (default: all of
    /// them); any other answers 404 for the path, as an API server that does not serve the
    /// version.
    pub fn serve_resource_versions(&self, versions: &[&str]) {
        self.state.lock().unwrap().resources.served =
            Some(versions.iter().map(|v| v.to_string()).collect());
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
