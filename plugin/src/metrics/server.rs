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

/// Parses `--metrics-bind-address`: `HOST:PORT`, `[IPv6]:PORT`, or `:PORT` (every IPv4
/// address, as Go programs such as dcgm-exporter read it).
pub fn parse_bind_address(text: &str) -> anyhow::Result<SocketAddr> {
    let text = text.trim();
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_string(),
    };
    full.parse().map_err(|_| {
        anyhow::anyhow!(
            "invalid --metrics-bind-address `{text}`: expected HOST:PORT, [IPv6]:PORT or :PORT"
        )
    })
}

/// Binds the metrics address (before anything else starts, so a bad address ends the plugin
/// with a clear message).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen for metrics on {addr}: {e}"))?;
    tracing::info!(
        "Serving metrics on http://{}/metrics",
        listener.local_addr()?
    );
    Ok(listener)
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
            "0.0.0.0:9400".parse().unwrap()
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:0").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(
            parse_bind_address("[::]:9400").unwrap(),
            "[::]:9400".parse().unwrap()
        );
        let err = parse_bind_address("localhost").unwrap_err().to_string();
        assert!(err.contains("`localhost`"), "{err}");
        assert!(parse_bind_address(":x").is_err());
    }
}
