//! A fake Kubernetes API server for the labeller: HTTPS with a test CA
//! (`fixtures/tls/`, made by `fixtures/tls/generate.sh`), bearer-token authentication,
//! `GET /api/v1/nodes/{name}` and `PATCH` of the same path with a JSON merge patch
//! (RFC 7386) that may only touch `metadata.labels` — what the labeller's ClusterRole allows
//! it to need. Answers errors as the API does (a `Status` object with a `message`).

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

/// The token the fake accepts.
pub const TOKEN: &str = "test-token-of-the-node-labeller";

/// One request the fake received.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub content_type: Option<String>,
    pub body: Option<Value>,
}

#[derive(Default)]
struct State {
    nodes: BTreeMap<String, BTreeMap<String, String>>,
    requests: Vec<Recorded>,
    fail_next: usize,
    forbidden: bool,
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

fn node_json(name: &str, labels: &BTreeMap<String, String>) -> Response<Full<Bytes>> {
    let body = json!({"kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "labels": labels}});
    Response::new(Full::new(Bytes::from(body.to_string())))
}

async fn answer(state: Arc<Mutex<State>>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
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
        Method::GET => node_json(&name, labels),
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
            node_json(&name, labels)
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

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
