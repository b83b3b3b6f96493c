//! The HTTP side of `/metrics`: hyper's HTTP/1 server (already in the plugin through tonic),
//! one task per connection, no state between requests.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::MetricsSource;

/// The text format's content type (what dcgm-exporter and Prometheus' client libraries send).
const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// A client must send its request headers within this time (slow clients cannot pile up).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Where `/metrics` listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindAddress {
    /// `:PORT`: every address, IPv6 and IPv4, as Go programs such as dcgm-exporter read it
    /// (Go's `net.Listen("tcp", ":PORT")` opens a dual-stack socket).
    AnyAddress(u16),
    /// `HOST:PORT` or `[IPv6]:PORT`, exactly.
    Exact(SocketAddr),
}

impl std::str::FromStr for BindAddress {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        parse_bind_address(text)
    }
}

/// Parses `--metrics-bind-address`: `HOST:PORT`, `[IPv6]:PORT`, or `:PORT` (every address).
pub fn parse_bind_address(text: &str) -> anyhow::Result<BindAddress> {
    let text = text.trim();
    let invalid = || {
        anyhow::anyhow!(
            "invalid --metrics-bind-address `{text}`: expected HOST:PORT, [IPv6]:PORT or :PORT"
        )
    };
    match text.strip_prefix(':') {
        Some(port) => port
            .parse()
            .map(BindAddress::AnyAddress)
            .map_err(|_| invalid()),
        None => text.parse().map(BindAddress::Exact).map_err(|_| invalid()),
    }
}

/// Binds the metrics address (before anything else starts, so a bad address ends the plugin
/// with a clear message). `:PORT` binds `[::]:PORT` with IPV6_V6ONLY off (IPv4 clients too,
/// whatever `net.ipv6.bindv6only` says), or `0.0.0.0:PORT` where the host has no IPv6
/// (`ipv6.disable=1`).
pub async fn bind(addr: BindAddress) -> anyhow::Result<TcpListener> {
    let listener = match addr {
        BindAddress::Exact(addr) => TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen for metrics on {addr}: {e}"))?,
        BindAddress::AnyAddress(port) => match dual_stack(port) {
            Ok(listener) => listener,
            Err(e) => {
                let v4 = SocketAddr::from(([0, 0, 0, 0], port));
                tracing::info!("no IPv6 listener for metrics ({e}); IPv4 only");
                TcpListener::bind(v4)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot listen for metrics on {v4}: {e}"))?
            }
        },
    };
    tracing::info!(
        "Serving metrics on http://{}/metrics",
        listener.local_addr()?
    );
    Ok(listener)
}

/// A listener on `[::]:port` that accepts IPv4 clients too.
fn dual_stack(port: u16) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    // As tokio's TcpListener::bind does: a restarted plugin rebinds at once.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)).into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// Serves `GET /metrics` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    source: Arc<MetricsSource>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // E.g. EMFILE: do not spin.
                tracing::warn!("metrics: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let source = source.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let source = source.clone();
                async move { Ok::<_, Infallible>(respond(&source, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                tracing::debug!("metrics connection ended: {e}");
            }
        });
    }
}

async fn respond(source: &MetricsSource, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD are allowed\n".into(),
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match request.uri().path() {
        "/metrics" => {
            let mut response = text(StatusCode::OK, source.render().await);
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_TEXT));
            response
        }
        "/" => text(
            StatusCode::OK,
            "edgegpu device plugin: metrics at /metrics\n".into(),
        ),
        other => text(
            StatusCode::NOT_FOUND,
            format!("{other}: not found; try /metrics\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses() {
        assert_eq!(
            parse_bind_address(":9400").unwrap(),
            BindAddress::AnyAddress(9400)
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:0").unwrap(),
            BindAddress::Exact("127.0.0.1:0".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("[::]:9400").unwrap(),
            BindAddress::Exact("[::]:9400".parse().unwrap())
        );
        let err = parse_bind_address("localhost").unwrap_err().to_string();
        assert!(err.contains("`localhost`"), "{err}");
        assert!(parse_bind_address(":x").is_err());
        assert!(parse_bind_address(":").is_err());
    }

    /// `:PORT` answers on IPv4 and, where the host has IPv6, on IPv6 too.
    #[tokio::test]
    async fn any_address_is_dual_stack() {
        let host_has_ipv6 = std::net::TcpListener::bind("[::1]:0").is_ok();
        let listener = bind(BindAddress::AnyAddress(0)).await.unwrap();
        let local = listener.local_addr().unwrap();
        assert_eq!(local.is_ipv6(), host_has_ipv6, "{local}");
        let port = local.port();
        let accept = tokio::spawn(async move {
            for _ in 0..2 {
                let _ = listener.accept().await.unwrap();
            }
        });
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("IPv4 client");
        if local.is_ipv6() {
            tokio::net::TcpStream::connect(("::1", port))
                .await
                .expect("IPv6 client");
        } else {
            // No IPv6 on this host: the IPv4 fallback served the first; connect again.
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap();
        }
        accept.await.unwrap();
    }
}
