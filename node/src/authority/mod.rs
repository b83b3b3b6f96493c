//! Accepting the socket path that old kubelets send as HTTP/2 `:authority`.
//!
//! Kubelets before ~1.26 (kubernetes PR #112597; k3s v1.18–v1.25 on many Jetson images)
//! dial the plugin with the bare socket path as gRPC target, so every request carries
//! `:authority: /var/lib/kubelet/device-plugins/x.sock`. h2's server parses `:authority`
//! as a URI authority, finds the `/` and resets the stream with `PROTOCOL_ERROR`
//! (hyperium/h2 #442, #487 — still open; hyper #3750, tonic #243), so `Register` fails in
//! the kubelet's dial-back. h2 has no option to relax this.
//!
//! Fix: [`AuthorityShim`] sits between the accepted unix connection and tonic's server
//! and rewrites the client→server byte stream at the HTTP/2 frame level:
//! - the 24-byte preface and every frame other than HEADERS/CONTINUATION pass through
//!   untouched (payloads are streamed, never buffered whole);
//! - each header block (HEADERS + CONTINUATIONs) is collected and HPACK-decoded with the
//!   `loona-hpack` crate (Huffman strings, dynamic table and table-size updates), so the shim
//!   always knows the client's dynamic table;
//! - when the connection's first header block has a valid URI authority (new kubelets
//!   send `localhost`), it and everything after it pass through byte for byte without
//!   further parsing: gRPC clients (grpc-go, tonic) keep one authority per connection,
//!   and decoding every block would cost more than the rest of an `Allocate` call;
//! - a block that needs a fix switches the connection to *re-encoding*: that
//!   block and all later ones are re-encoded as literals without indexing (never touching
//!   the server's dynamic table, whose older entries are then simply never referenced),
//!   with an invalid `:authority` replaced by `localhost`.
//!
//! So new kubelets (authority `localhost`) see a pure pass-through after one decoded
//! block, and only connections that need it are rewritten. Anything the shim cannot parse
//! is passed through verbatim from then on, and h2 reports the protocol error itself; no
//! input makes the shim panic (tests/authority_fuzz.rs). The server→client direction is
//! never touched.
//!
//! [`frames`] splits the byte stream into header blocks (HTTP/2 framing); [`policy`] decides
//! what each block becomes (HPACK, `:authority`).

pub mod frames;
pub mod policy;

pub use policy::{is_valid_authority, AuthorityRewriter, REPLACEMENT_AUTHORITY};

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tonic::transport::server::Connected;

/// An accepted connection whose client→server bytes go through an [`AuthorityRewriter`].
pub struct AuthorityShim<S> {
    inner: S,
    rewriter: AuthorityRewriter,
    ready: Vec<u8>,
    ready_pos: usize,
    read_buf: Box<[u8]>,
    eof: bool,
}

impl<S> AuthorityShim<S> {
    /// Wraps a freshly accepted connection.
    pub fn new(inner: S) -> Self {
        AuthorityShim {
            inner,
            rewriter: AuthorityRewriter::new(),
            ready: Vec::new(),
            ready_pos: 0,
            read_buf: vec![0u8; 16 * 1024].into_boxed_slice(),
            eof: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityShim<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready_pos < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.ready_pos);
                buf.put_slice(&this.ready[this.ready_pos..this.ready_pos + n]);
                this.ready_pos += n;
                if this.ready_pos == this.ready.len() {
                    this.ready.clear();
                    this.ready_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.read_buf);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            let filled = read.filled().len();
            if filled == 0 {
                this.eof = true;
                this.rewriter.finish(&mut this.ready);
            } else {
                this.rewriter
                    .feed(&this.read_buf[..filled], &mut this.ready);
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityShim<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl Connected for AuthorityShim<UnixStream> {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

#[cfg(test)]
mod tests {
    use super::frames::*;
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_frame(&mut out, kind, flags, stream, payload);
        out
    }

    fn request_block(encoder: &mut loona_hpack::Encoder<'_>, authority: &[u8]) -> Vec<u8> {
        encoder.encode(vec![
            (&b":method"[..], &b"POST"[..]),
            (&b":scheme"[..], &b"http"[..]),
            (&b":path"[..], &b"/v1beta1.DevicePlugin/Allocate"[..]),
            (&b":authority"[..], authority),
            (&b"content-type"[..], &b"application/grpc"[..]),
        ])
    }

    /// Splits the rewriter's output back into frames (after the preface).
    fn frames(mut out: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        assert!(out.starts_with(PREFACE));
        out = &out[PREFACE.len()..];
        let mut frames = Vec::new();
        while !out.is_empty() {
            let len = u32::from_be_bytes([0, out[0], out[1], out[2]]) as usize;
            let id = u32::from_be_bytes([out[5], out[6], out[7], out[8]]);
            frames.push((out[3], out[4], id, out[9..9 + len].to_vec()));
            out = &out[9 + len..];
        }
        frames
    }

    fn run(input: &[u8], chunk: usize) -> (Vec<u8>, u64) {
        let mut rewriter = AuthorityRewriter::new();
        let mut out = Vec::new();
        for piece in input.chunks(chunk) {
            rewriter.feed(piece, &mut out);
        }
        rewriter.finish(&mut out);
        (out, rewriter.rewritten_blocks())
    }

    #[test]
    fn valid_authority_passes_through_byte_for_byte() {
        let mut enc = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[])); // SETTINGS
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            1,
            &request_block(&mut enc, b"localhost"),
        ));
        input.extend(frame(0x0, FLAG_END_STREAM, 1, b"\0\0\0\0\0"));
        for chunk in [1, 7, 4096] {
            let (out, rewritten) = run(&input, chunk);
            assert_eq!(out, input, "chunk size {chunk}");
            assert_eq!(rewritten, 0);
        }
    }

    #[test]
    fn path_authority_is_replaced_and_later_blocks_reencoded() {
        let path = b"/var/lib/kubelet/device-plugins/nvidia-gpu-1-0.sock";
        let mut enc = loona_hpack::Encoder::new();
        let first = request_block(&mut enc, path);
        // The second block relies on the client's dynamic table.
        let second = request_block(&mut enc, path);
        let mut input = PREFACE.to_vec();
        // First block split over HEADERS + CONTINUATION, with padding and priority.
        let (a, b) = first.split_at(first.len() / 2);
        let mut headers_payload = vec![3u8];
        headers_payload.extend_from_slice(&[0, 0, 0, 0, 15]);
        headers_payload.extend_from_slice(a);
        headers_payload.extend_from_slice(&[0, 0, 0]);
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_PADDED | FLAG_PRIORITY,
            1,
            &headers_payload,
        ));
        input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, b));
        input.extend(frame(0x0, FLAG_END_STREAM, 1, b"\0\0\0\0\0"));
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS | FLAG_END_STREAM,
            3,
            &second,
        ));
        for chunk in [1, 5, 100_000] {
            let (out, rewritten) = run(&input, chunk);
            assert_eq!(rewritten, 2);
            let frames = frames(&out);
            assert_eq!(frames.len(), 3, "{frames:?}");
            let mut server = loona_hpack::Decoder::new();
            let (kind, flags, id, payload) = &frames[0];
            assert_eq!((*kind, *id), (TYPE_HEADERS, 1));
            assert_eq!(*flags, FLAG_PRIORITY | FLAG_END_HEADERS);
            assert_eq!(&payload[..5], &[0, 0, 0, 0, 15]);
            let headers = server.decode(&payload[5..]).unwrap();
            assert!(headers.contains(&(b":authority".to_vec(), b"localhost".to_vec())));
            assert!(headers.contains(&(
                b":path".to_vec(),
                b"/v1beta1.DevicePlugin/Allocate".to_vec()
            )));
            assert_eq!(frames[1].0, 0x0);
            let (kind, flags, id, payload) = &frames[2];
            assert_eq!(
                (*kind, *flags, *id),
                (TYPE_HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, 3)
            );
            let headers = server.decode(payload).unwrap();
            assert!(headers.contains(&(b":authority".to_vec(), b"localhost".to_vec())));
        }
    }

    #[test]
    fn a_valid_first_authority_makes_the_connection_verbatim() {
        let mut enc = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            1,
            &request_block(&mut enc, b"localhost"),
        ));
        // Later blocks are not even parsed (this one is not valid HPACK).
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            3,
            &[0xff, 0xff, 0xff],
        ));
        let (out, rewritten) = run(&input, 3);
        assert_eq!(out, input);
        assert_eq!(rewritten, 0);
    }

    #[test]
    fn malformed_input_is_passed_through_verbatim() {
        // A truncated table-size update (hpack 0.3 panicked on it) and a CONTINUATION
        // without HEADERS: both reach h2 unchanged, which rejects them.
        let mut input = PREFACE.to_vec();
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &[0x3f, 0xff]));
        input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 3, &[0x82]));
        let (out, _) = run(&input, 3);
        assert_eq!(out, input);
        let garbage = b"GET / HTTP/1.1\r\n\r\n".to_vec();
        assert_eq!(run(&garbage, 2).0, garbage);
    }

    #[test]
    fn large_blocks_are_split_at_the_frame_size() {
        let mut enc = loona_hpack::Encoder::new();
        let big = vec![b'x'; 40_000];
        let block = enc.encode(vec![
            (&b":authority"[..], &b"/a/b.sock"[..]),
            (&b"x-big"[..], &big[..]),
        ]);
        let mut input = PREFACE.to_vec();
        for (i, part) in block.chunks(MAX_FRAME_SIZE).enumerate() {
            let last = (i + 1) * MAX_FRAME_SIZE >= block.len();
            let kind = if i == 0 {
                TYPE_HEADERS
            } else {
                TYPE_CONTINUATION
            };
            input.extend(frame(
                kind,
                if last { FLAG_END_HEADERS } else { 0 },
                1,
                part,
            ));
        }
        let (out, rewritten) = run(&input, 1000);
        assert_eq!(rewritten, 1);
        let frames = frames(&out);
        assert!(frames.iter().all(|f| f.3.len() <= MAX_FRAME_SIZE));
        let block: Vec<u8> = frames.iter().flat_map(|f| f.3.clone()).collect();
        let headers = loona_hpack::Decoder::new().decode(&block).unwrap();
        assert_eq!(headers[0], (b":authority".to_vec(), b"localhost".to_vec()));
        assert_eq!(headers[1].1.len(), 40_000);
    }

    #[test]
    fn authority_validity_matches_h2() {
        assert!(is_valid_authority(b"localhost"));
        assert!(is_valid_authority(b"[::1]:50051"));
        assert!(!is_valid_authority(
            b"/var/lib/kubelet/device-plugins/x.sock"
        ));
    }
}
