//! The old kubelet's `:authority` on the fake kubelet's client connections.
//!
//! Kubelets before 1.26 dialed device plugins through gRPC-go with the bare socket path as
//! target, so every request carried that path as HTTP/2 `:authority`. tonic/h2 build
//! `:authority` from an `http::Uri`, which cannot hold a path, so [`AuthorityOverride`]
//! rewrites the header blocks h2 writes.
//!
//! The HTTP/2 framing here ([`crate::http2`]) is written from RFC 9113 on purpose, independent
//! of the plugin's frame reader: the plugin's `:authority` shim is the code under test, and a
//! framing bug shared by the fake and the plugin would pass unnoticed. HPACK (RFC 7541) is the `loona-hpack` crate.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http2::{
    write_frame, FLAG_END_HEADERS, FLAG_END_STREAM, FLAG_PADDED, FLAG_PRIORITY, FRAME_HEADER_LEN,
    PREFACE, TYPE_CONTINUATION, TYPE_HEADERS,
};

/// The initial SETTINGS_MAX_FRAME_SIZE, which every peer accepts (RFC 9113 §4.2), so the
/// re-encoded blocks need not know the server's settings.
const MAX_PAYLOAD: usize = 1 << 14;

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("fake kubelet HTTP/2: {what}"),
    )
}

/// A header block being collected: one HEADERS, then CONTINUATIONs up to END_HEADERS.
struct OpenBlock {
    stream_id: u32,
    end_stream: bool,
    /// Stream dependency and weight of a HEADERS with PRIORITY, sent on unchanged.
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

/// The client→server byte stream with `:authority` replaced in every header block.
struct HeaderRewriter {
    authority: Vec<u8>,
    /// Received bytes that do not yet form the whole preface or a whole frame.
    pending: Vec<u8>,
    preface_done: bool,
    open: Option<OpenBlock>,
    decoder: loona_hpack::Decoder<'static>,
    /// One encoder for the connection, so the server's HPACK dynamic table stays in step.
    encoder: loona_hpack::Encoder<'static>,
}

impl HeaderRewriter {
    fn new(authority: Vec<u8>) -> Self {
        HeaderRewriter {
            authority,
            pending: Vec::new(),
            preface_done: false,
            open: None,
            decoder: loona_hpack::Decoder::new(),
            encoder: loona_hpack::Encoder::new(),
        }
    }

    /// Takes the next bytes the client wrote; whole frames go to `out`.
    fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        self.pending.extend_from_slice(data);
        let pending = std::mem::take(&mut self.pending);
        let mut at = 0;
        let result = (|| {
            if !self.preface_done {
                if pending.len() < PREFACE.len() {
                    return Ok(());
                }
                if !pending.starts_with(PREFACE) {
                    return Err(invalid("the connection does not start with the preface"));
                }
                out.extend_from_slice(PREFACE);
                at = PREFACE.len();
                self.preface_done = true;
            }
            loop {
                let rest = &pending[at..];
                if rest.len() < FRAME_HEADER_LEN {
                    return Ok(());
                }
                let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
                if rest.len() < FRAME_HEADER_LEN + len {
                    return Ok(());
                }
                let frame = &rest[..FRAME_HEADER_LEN + len];
                at += frame.len();
                self.on_frame(frame, out)?;
            }
        })();
        self.pending = pending;
        self.pending.drain(..at);
        result
    }

    fn on_frame(&mut self, frame: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let (kind, flags) = (frame[3], frame[4]);
        let stream_id = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[FRAME_HEADER_LEN..];
        if let Some(open) = &mut self.open {
            // Nothing may come between a HEADERS and its last CONTINUATION (§6.10).
            if kind != TYPE_CONTINUATION || stream_id != open.stream_id {
                return Err(invalid("a header block was interrupted"));
            }
            open.fragment.extend_from_slice(payload);
            if flags & FLAG_END_HEADERS != 0 {
                let block = self.open.take().expect("open block");
                self.write_block(block, out)?;
            }
            return Ok(());
        }
        match kind {
            TYPE_HEADERS => {
                let mut rest = payload;
                let mut pad = 0;
                if flags & FLAG_PADDED != 0 {
                    let (&n, after) = rest
                        .split_first()
                        .ok_or_else(|| invalid("HEADERS too short"))?;
                    pad = usize::from(n);
                    rest = after;
                }
                let mut priority = None;
                if flags & FLAG_PRIORITY != 0 {
                    if rest.len() < 5 {
                        return Err(invalid("HEADERS too short"));
                    }
                    let (fields, after) = rest.split_at(5);
                    priority = Some(fields.try_into().expect("five bytes"));
                    rest = after;
                }
                if pad > rest.len() {
                    return Err(invalid("HEADERS padding longer than the frame"));
                }
                let block = OpenBlock {
                    stream_id,
                    end_stream: flags & FLAG_END_STREAM != 0,
                    priority,
                    fragment: rest[..rest.len() - pad].to_vec(),
                };
                if flags & FLAG_END_HEADERS != 0 {
                    self.write_block(block, out)?;
                } else {
                    self.open = Some(block);
                }
            }
            TYPE_CONTINUATION => return Err(invalid("CONTINUATION without HEADERS")),
            _ => out.extend_from_slice(frame),
        }
        Ok(())
    }

    /// Re-encodes a complete block with `:authority` replaced (request blocks have one;
    /// trailers have none and keep none), as one HEADERS and as many CONTINUATIONs as needed.
    fn write_block(&mut self, block: OpenBlock, out: &mut Vec<u8>) -> io::Result<()> {
        let fields = self
            .decoder
            .decode(&block.fragment)
            .map_err(|e| invalid(&format!("HPACK: {e:?}")))?;
        let fields: Vec<(Vec<u8>, Vec<u8>)> = fields
            .into_iter()
            .map(|(name, value)| {
                if name == b":authority" {
                    (name, self.authority.clone())
                } else {
                    (name, value)
                }
            })
            .collect();
        let encoded = self
            .encoder
            .encode(fields.iter().map(|(n, v)| (&n[..], &v[..])));

        let mut first = Vec::with_capacity(MAX_PAYLOAD);
        let mut flags = 0;
        if block.end_stream {
            flags |= FLAG_END_STREAM;
        }
        if let Some(priority) = block.priority {
            flags |= FLAG_PRIORITY;
            first.extend_from_slice(&priority);
        }
        let take = encoded.len().min(MAX_PAYLOAD - first.len());
        first.extend_from_slice(&encoded[..take]);
        let mut rest = &encoded[take..];
        if rest.is_empty() {
            flags |= FLAG_END_HEADERS;
        }
        write_frame(out, TYPE_HEADERS, flags, block.stream_id, &first);
        while !rest.is_empty() {
            let (piece, after) = rest.split_at(rest.len().min(MAX_PAYLOAD));
            rest = after;
            let flags = if rest.is_empty() { FLAG_END_HEADERS } else { 0 };
            write_frame(out, TYPE_CONTINUATION, flags, block.stream_id, piece);
        }
        Ok(())
    }
}

/// A client connection whose outgoing header blocks carry `authority` as `:authority`
/// (when set), like an old kubelet dialing with the socket path as target. The
/// server→client direction is never touched.
pub struct AuthorityOverride<S> {
    inner: S,
    rewriter: Option<HeaderRewriter>,
    /// Rewritten bytes not yet written to `inner`.
    output: Vec<u8>,
}

impl<S> AuthorityOverride<S> {
    /// Wraps a client connection; `None` passes everything through.
    pub fn new(inner: S, authority: Option<String>) -> Self {
        AuthorityOverride {
            inner,
            rewriter: authority.map(|a| HeaderRewriter::new(a.into_bytes())),
            output: Vec::new(),
        }
    }
}

impl<S: AsyncWrite + Unpin> AuthorityOverride<S> {
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.output.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.output))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.output.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityOverride<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityOverride<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.rewriter.is_none() {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        // Back-pressure: new bytes are taken only once the earlier ones are out.
        ready!(this.poll_drain(cx))?;
        if let Some(rewriter) = &mut this.rewriter {
            rewriter.feed(buf, &mut this.output)?;
        }
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        // Whatever is left is pushed out by the next write or flush.
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &[u8] = b"/var/lib/kubelet/device-plugins/x.sock";

    /// RFC 7541 C.3.1: `:method GET`, `:scheme http`, `:path /`,
    /// `:authority www.example.com`, literal with incremental indexing.
    const RFC7541_C31: &[u8] = &[
        0x82, 0x86, 0x84, 0x41, 0x0f, b'w', b'w', b'w', b'.', b'e', b'x', b'a', b'm', b'p', b'l',
        b'e', b'.', b'c', b'o', b'm',
    ];

    /// The same request with the path as authority, as loona-hpack encodes it: three
    /// static-table indices (RFC 7541 §6.1), then the static name `:authority` (index 1)
    /// with a literal value, without indexing (§6.2.2: `0000` and a 4-bit index).
    fn expected_block() -> Vec<u8> {
        let mut block = vec![0x82, 0x86, 0x84, 0x01, PATH.len() as u8];
        block.extend_from_slice(PATH);
        block
    }

    fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        // Written out byte by byte here rather than with write_frame, which is under test.
        let len = payload.len();
        let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        out.extend_from_slice(&stream_id.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn rewrite_in_pieces(input: &[u8], piece: usize) -> io::Result<Vec<u8>> {
        let mut rewriter = HeaderRewriter::new(PATH.to_vec());
        let mut out = Vec::new();
        for chunk in input.chunks(piece) {
            rewriter.feed(chunk, &mut out)?;
        }
        assert!(rewriter.pending.is_empty() && rewriter.open.is_none());
        Ok(out)
    }

    #[test]
    fn known_block_gets_the_path_authority_and_other_frames_pass() {
        let settings = frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
        let data = frame(0x0, FLAG_END_STREAM, 1, b"hello");
        let mut input = PREFACE.to_vec();
        input.extend(&settings);
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, RFC7541_C31));
        input.extend(&data);

        let mut expected = PREFACE.to_vec();
        expected.extend(&settings);
        expected.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &expected_block()));
        expected.extend(&data);
        for piece in [1, 7, input.len()] {
            assert_eq!(
                rewrite_in_pieces(&input, piece).unwrap(),
                expected,
                "{piece}"
            );
        }
    }

    #[test]
    fn padded_prioritised_split_block_becomes_one_headers_frame() {
        let priority = [0x80, 0, 0, 3, 15];
        let mut first = vec![4];
        first.extend(priority);
        first.extend(&RFC7541_C31[..6]);
        first.extend([0; 4]);
        let mut input = PREFACE.to_vec();
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_PADDED | FLAG_PRIORITY | FLAG_END_STREAM,
            5,
            &first,
        ));
        input.extend(frame(TYPE_CONTINUATION, 0, 5, &RFC7541_C31[6..10]));
        input.extend(frame(
            TYPE_CONTINUATION,
            FLAG_END_HEADERS,
            5,
            &RFC7541_C31[10..],
        ));

        let mut payload = priority.to_vec();
        payload.extend(expected_block());
        let mut expected = PREFACE.to_vec();
        expected.extend(frame(
            TYPE_HEADERS,
            FLAG_PRIORITY | FLAG_END_STREAM | FLAG_END_HEADERS,
            5,
            &payload,
        ));
        assert_eq!(rewrite_in_pieces(&input, 3).unwrap(), expected);
    }

    #[test]
    fn broken_framing_is_an_error() {
        let mut interrupted = PREFACE.to_vec();
        interrupted.extend(frame(TYPE_HEADERS, 0, 1, &RFC7541_C31[..4]));
        interrupted.extend(frame(0x0, 0, 1, b"x"));
        let mut stray = PREFACE.to_vec();
        stray.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, RFC7541_C31));
        let no_preface = frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, RFC7541_C31).repeat(3);
        for input in [interrupted, stray, no_preface] {
            let err = rewrite_in_pieces(&input, input.len()).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        }
    }

    /// h2 as client and as server, an independent HTTP/2 implementation on both ends: the
    /// server must see the replaced authority on every request, including later blocks that
    /// use the HPACK dynamic table, bodies, and a block too big for one frame.
    #[tokio::test]
    async fn h2_server_sees_the_replaced_authority() {
        const AUTHORITY: &str = "replaced.example:8080";
        let (client_io, server_io) = tokio::io::duplex(4096);
        let big = "b".repeat(40_000);

        let expected_big = big.clone();
        let server = tokio::spawn(async move {
            let mut conn = h2::server::handshake(server_io).await.unwrap();
            let mut seen = Vec::new();
            while let Some(request) = conn.accept().await {
                let (request, mut respond) = request.unwrap();
                let authority = request.uri().authority().unwrap().to_string();
                let big = request
                    .headers()
                    .get("x-big")
                    .map(|v| v == &expected_big[..]);
                let mut body = request.into_body();
                let mut bytes = Vec::new();
                while let Some(chunk) = body.data().await {
                    let chunk = chunk.unwrap();
                    body.flow_control().release_capacity(chunk.len()).unwrap();
                    bytes.extend_from_slice(&chunk);
                }
                seen.push((authority, big, bytes));
                let response = http::Response::builder().status(200).body(()).unwrap();
                respond.send_response(response, true).unwrap();
            }
            seen
        });

        let io = AuthorityOverride::new(client_io, Some(AUTHORITY.to_string()));
        let (mut client, conn) = h2::client::handshake(io).await.unwrap();
        let conn = tokio::spawn(conn);
        for i in 0..4 {
            let mut request = http::Request::builder()
                .method(if i == 0 { "GET" } else { "POST" })
                .uri("http://localhost/v1beta1.DevicePlugin/Allocate");
            if i == 2 {
                request = request.header("x-big", &big);
            }
            let request = request.body(()).unwrap();
            client = client.ready().await.unwrap();
            let (response, mut body) = client.send_request(request, i == 0).unwrap();
            if i != 0 {
                body.send_data(format!("body {i}").into(), true).unwrap();
            }
            assert_eq!(response.await.unwrap().status(), 200);
        }
        drop(client);
        conn.await.unwrap().unwrap();

        let seen = server.await.unwrap();
        assert_eq!(seen.len(), 4);
        for (i, (authority, big, body)) in seen.into_iter().enumerate() {
            assert_eq!(authority, AUTHORITY, "request {i}");
            assert_eq!(big, (i == 2).then_some(true), "request {i}");
            let body_expected = if i == 0 {
                String::new()
            } else {
                format!("body {i}")
            };
            assert_eq!(body, body_expected.as_bytes(), "request {i}");
        }
    }
}
