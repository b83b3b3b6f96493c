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
//!   `hpack` crate (Huffman strings, dynamic table and table-size updates), so the shim
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
//! block, and only connections that need it are rewritten. Anything the shim cannot parse is passed through verbatim
//! from then on, and h2 reports the protocol error itself. The server→client direction is
//! never touched.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tonic::codegen::http::uri::Authority;
use tonic::transport::server::Connected;

/// The client connection preface of HTTP/2 (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The authority put in place of a path-shaped one.
pub const REPLACEMENT_AUTHORITY: &str = "localhost";

const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// SETTINGS_MAX_FRAME_SIZE of the server (h2's default; tonic does not change it).
const MAX_FRAME_SIZE: usize = 16_384;
/// SETTINGS_HEADER_TABLE_SIZE of the server (h2's default).
const HEADER_TABLE_SIZE: usize = 4_096;
/// A header block larger than this is not collected (h2 would refuse it anyway).
const MAX_HEADER_BLOCK: usize = 256 * 1024;

/// Whether `value` is acceptable to h2 as `:authority`.
pub fn is_valid_authority(value: &[u8]) -> bool {
    Authority::try_from(value).is_ok()
}

#[derive(Debug)]
enum State {
    /// Still reading the client preface; holds how many bytes were seen.
    Preface(usize),
    /// At a frame boundary.
    FrameStart,
    /// Forwarding the rest of a non-header frame's payload.
    Forward(usize),
    /// Unparseable input: everything passes through verbatim from now on.
    Verbatim,
}

#[derive(Debug)]
struct PendingBlock {
    /// The raw frames as received, emitted verbatim when no rewrite is needed.
    raw: Vec<u8>,
    stream_id: u32,
    /// END_STREAM / PRIORITY flags of the HEADERS frame.
    flags: u8,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

/// Sans-IO rewriter of the client→server HTTP/2 byte stream (see the module docs).
pub struct AuthorityRewriter {
    state: State,
    input: Vec<u8>,
    decoder: hpack::Decoder<'static>,
    reencode: bool,
    pending: Option<PendingBlock>,
    rewritten_blocks: u64,
}

impl Default for AuthorityRewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl AuthorityRewriter {
    /// A rewriter for a fresh connection (expects the preface first).
    pub fn new() -> Self {
        AuthorityRewriter {
            state: State::Preface(0),
            input: Vec::new(),
            decoder: hpack::Decoder::new(),
            reencode: false,
            pending: None,
            rewritten_blocks: 0,
        }
    }

    /// How many header blocks had their `:authority` replaced so far.
    pub fn rewritten_blocks(&self) -> u64 {
        self.rewritten_blocks
    }

    /// Feeds bytes read from the client; appends what the server should see to `out`.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if let State::Verbatim = self.state {
            out.extend_from_slice(data);
            return;
        }
        self.input.extend_from_slice(data);
        self.process(out);
    }

    /// The client closed its side: whatever is still held goes out verbatim.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if let Some(block) = self.pending.take() {
            out.extend_from_slice(&block.raw);
        }
        out.append(&mut self.input);
        self.state = State::Verbatim;
    }

    fn go_verbatim(&mut self, out: &mut Vec<u8>) {
        self.finish(out);
    }

    fn process(&mut self, out: &mut Vec<u8>) {
        let mut pos = 0;
        loop {
            let avail = &self.input[pos..];
            match self.state {
                State::Verbatim => {
                    out.extend_from_slice(avail);
                    pos = self.input.len();
                    break;
                }
                State::Preface(seen) => {
                    let want = PREFACE.len() - seen;
                    let n = want.min(avail.len());
                    if avail[..n] != PREFACE[seen..seen + n] {
                        // Not HTTP/2 with prior knowledge: let h2 answer it.
                        self.state = State::Verbatim;
                        continue;
                    }
                    out.extend_from_slice(&avail[..n]);
                    pos += n;
                    if n == want {
                        self.state = State::FrameStart;
                    } else {
                        self.state = State::Preface(seen + n);
                        break;
                    }
                }
                State::Forward(remaining) => {
                    if avail.is_empty() {
                        break;
                    }
                    let n = remaining.min(avail.len());
                    out.extend_from_slice(&avail[..n]);
                    pos += n;
                    self.state = if n == remaining {
                        State::FrameStart
                    } else {
                        State::Forward(remaining - n)
                    };
                }
                State::FrameStart => {
                    if avail.len() < FRAME_HEADER_LEN {
                        break;
                    }
                    let len = u32::from_be_bytes([0, avail[0], avail[1], avail[2]]) as usize;
                    let kind = avail[3];
                    let is_header_frame = kind == TYPE_HEADERS || kind == TYPE_CONTINUATION;
                    if !is_header_frame {
                        if self.pending.is_some() {
                            // A header block must not be interleaved (RFC 9113 §4.3).
                            self.input.drain(..pos);
                            return self.go_verbatim(out);
                        }
                        out.extend_from_slice(&avail[..FRAME_HEADER_LEN]);
                        pos += FRAME_HEADER_LEN;
                        self.state = if len == 0 {
                            State::FrameStart
                        } else {
                            State::Forward(len)
                        };
                        continue;
                    }
                    let buffered = self.pending.as_ref().map_or(0, |p| p.raw.len());
                    if len > MAX_FRAME_SIZE || buffered + len > MAX_HEADER_BLOCK {
                        self.input.drain(..pos);
                        return self.go_verbatim(out);
                    }
                    if avail.len() < FRAME_HEADER_LEN + len {
                        break;
                    }
                    let frame = avail[..FRAME_HEADER_LEN + len].to_vec();
                    pos += frame.len();
                    if !self.on_header_frame(frame, out) {
                        self.input.drain(..pos);
                        return self.go_verbatim(out);
                    }
                }
            }
        }
        self.input.drain(..pos);
    }

    /// Handles one complete HEADERS or CONTINUATION frame; `false` means "cannot parse".
    fn on_header_frame(&mut self, frame: Vec<u8>, out: &mut Vec<u8>) -> bool {
        let kind = frame[3];
        let flags = frame[4];
        let stream_id = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[FRAME_HEADER_LEN..];
        if kind == TYPE_HEADERS {
            if let Some(block) = self.pending.take() {
                out.extend_from_slice(&block.raw);
                out.extend_from_slice(&frame);
                return false;
            }
            let mut start = 0;
            let mut end = payload.len();
            if flags & FLAG_PADDED != 0 {
                let Some(&pad) = payload.first() else {
                    out.extend_from_slice(&frame);
                    return false;
                };
                start = 1;
                if pad as usize > end - start {
                    out.extend_from_slice(&frame);
                    return false;
                }
                end -= pad as usize;
            }
            let mut priority = None;
            if flags & FLAG_PRIORITY != 0 {
                if end - start < 5 {
                    out.extend_from_slice(&frame);
                    return false;
                }
                let mut p = [0u8; 5];
                p.copy_from_slice(&payload[start..start + 5]);
                priority = Some(p);
                start += 5;
            }
            let block = PendingBlock {
                fragment: payload[start..end].to_vec(),
                raw: frame.clone(),
                stream_id,
                flags: flags & (FLAG_END_STREAM | FLAG_PRIORITY),
                priority,
            };
            self.pending = Some(block);
        } else {
            let Some(block) = self.pending.as_mut() else {
                out.extend_from_slice(&frame);
                return false;
            };
            if block.stream_id != stream_id {
                let raw = std::mem::take(&mut block.raw);
                self.pending = None;
                out.extend_from_slice(&raw);
                out.extend_from_slice(&frame);
                return false;
            }
            block.fragment.extend_from_slice(payload);
            block.raw.extend_from_slice(&frame);
        }
        if flags & FLAG_END_HEADERS != 0 {
            let block = self.pending.take().expect("pending block present");
            return self.finish_block(block, out);
        }
        true
    }

    fn finish_block(&mut self, block: PendingBlock, out: &mut Vec<u8>) -> bool {
        if !hpack_block_is_well_formed(&block.fragment) {
            out.extend_from_slice(&block.raw);
            return false;
        }
        let headers = match self.decoder.decode(&block.fragment) {
            Ok(headers) => headers,
            Err(_) => {
                out.extend_from_slice(&block.raw);
                return false;
            }
        };
        let needs_fix = headers
            .iter()
            .any(|(name, value)| name == b":authority" && !is_valid_authority(value));
        if !needs_fix && !self.reencode {
            out.extend_from_slice(&block.raw);
            // A gRPC client keeps one authority for the life of a connection, so a valid
            // first one means nothing on this connection needs rewriting: stop decoding
            // (HPACK decoding with `hpack` costs ~30 µs per request, ~4× tonic's own work).
            self.state = State::Verbatim;
            return true;
        }
        if needs_fix {
            self.rewritten_blocks += 1;
            tracing::debug!(
                "Replacing a path-shaped :authority (old kubelet) by '{REPLACEMENT_AUTHORITY}'"
            );
        }
        self.reencode = true;
        let mut encoded = Vec::with_capacity(block.fragment.len() + 32);
        for (name, value) in &headers {
            let value: &[u8] = if name == b":authority" && !is_valid_authority(value) {
                REPLACEMENT_AUTHORITY.as_bytes()
            } else {
                value
            };
            encode_literal_without_indexing(name, value, &mut encoded);
        }
        write_header_frames(&block, &encoded, out);
        true
    }
}

/// Emits HEADERS (+ CONTINUATION) frames carrying `encoded`, split at the frame size limit.
fn write_header_frames(block: &PendingBlock, encoded: &[u8], out: &mut Vec<u8>) {
    let prio_len = if block.priority.is_some() { 5 } else { 0 };
    let first_room = MAX_FRAME_SIZE - prio_len;
    let first_len = encoded.len().min(first_room);
    let mut rest = &encoded[first_len..];
    let mut flags = block.flags;
    if rest.is_empty() {
        flags |= FLAG_END_HEADERS;
    }
    write_frame_header(
        out,
        prio_len + first_len,
        TYPE_HEADERS,
        flags,
        block.stream_id,
    );
    if let Some(p) = block.priority {
        out.extend_from_slice(&p);
    }
    out.extend_from_slice(&encoded[..first_len]);
    while !rest.is_empty() {
        let n = rest.len().min(MAX_FRAME_SIZE);
        let flags = if n == rest.len() { FLAG_END_HEADERS } else { 0 };
        write_frame_header(out, n, TYPE_CONTINUATION, flags, block.stream_id);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
}

fn write_frame_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream_id: u32) {
    let len = (len as u32).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
}

/// HPACK integer with an `n`-bit prefix (RFC 7541 §5.1); `first` holds the pattern bits.
fn encode_integer(value: usize, prefix_bits: u8, first: u8, out: &mut Vec<u8>) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// "Literal Header Field without Indexing — New Name" (RFC 7541 §6.2.2), raw strings:
/// adds nothing to the server's dynamic table.
fn encode_literal_without_indexing(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x00);
    encode_integer(name.len(), 7, 0x00, out);
    out.extend_from_slice(name);
    encode_integer(value.len(), 7, 0x00, out);
    out.extend_from_slice(value);
}

/// HPACK integer decode: `(value, bytes used)`, at most 5 octets (like the `hpack` crate).
fn decode_integer(buf: &[u8], prefix_bits: u8) -> Option<(usize, usize)> {
    let max = (1usize << prefix_bits) - 1;
    let first = *buf.first()? as usize & max;
    if first < max {
        return Some((first, 1));
    }
    let mut value = max;
    for (i, &b) in buf.iter().enumerate().skip(1).take(4) {
        value += ((b & 0x7f) as usize) << (7 * (i - 1));
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Checks the structure of a header block (integers, string lengths, table-size updates)
/// before handing it to `hpack`, whose size-update path panics on a truncated integer.
fn hpack_block_is_well_formed(block: &[u8]) -> bool {
    fn string_len(buf: &[u8]) -> Option<usize> {
        let (len, used) = decode_integer(buf, 7)?;
        let total = used.checked_add(len)?;
        (total <= buf.len()).then_some(total)
    }
    let mut i = 0;
    while i < block.len() {
        let b = block[i];
        let rest = &block[i..];
        if b & 0x80 != 0 {
            let Some((_, used)) = decode_integer(rest, 7) else {
                return false;
            };
            i += used;
        } else if b & 0x20 != 0 && b & 0x40 == 0 {
            let Some((size, used)) = decode_integer(rest, 5) else {
                return false;
            };
            if size > HEADER_TABLE_SIZE {
                return false;
            }
            i += used;
        } else {
            let prefix = if b & 0x40 != 0 { 6 } else { 4 };
            let Some((index, mut used)) = decode_integer(rest, prefix) else {
                return false;
            };
            if index == 0 {
                let Some(n) = string_len(&rest[used..]) else {
                    return false;
                };
                used += n;
            }
            let Some(n) = string_len(&rest[used..]) else {
                return false;
            };
            i += used + n;
        }
    }
    true
}

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
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_frame_header(&mut out, payload.len(), kind, flags, stream);
        out.extend_from_slice(payload);
        out
    }

    fn request_block(encoder: &mut hpack::Encoder<'_>, authority: &[u8]) -> Vec<u8> {
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
        let mut enc = hpack::Encoder::new();
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
        let mut enc = hpack::Encoder::new();
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
            let mut server = hpack::Decoder::new();
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
        let mut enc = hpack::Encoder::new();
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
        // A truncated table-size update (would panic inside hpack) and a CONTINUATION
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
        let mut enc = hpack::Encoder::new();
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
        let headers = hpack::Decoder::new().decode(&block).unwrap();
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
