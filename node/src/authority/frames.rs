//! HTTP/2 framing as the shim needs it (RFC 9113 §4 and §6.2, §6.10): the client preface,
//! frame headers, HEADERS padding and priority, and a byte stream split into header blocks
//! while every other frame passes through untouched. Also used by the testkit's fake old
//! kubelet, which writes the frames this module reads.

/// The client connection preface of HTTP/2 (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length of a frame header (RFC 9113 §4.1).
const FRAME_HEADER_LEN: usize = 9;
pub const TYPE_HEADERS: u8 = 0x1;
pub const TYPE_CONTINUATION: u8 = 0x9;
pub const FLAG_END_STREAM: u8 = 0x1;
pub const FLAG_END_HEADERS: u8 = 0x4;
pub const FLAG_PADDED: u8 = 0x8;
pub const FLAG_PRIORITY: u8 = 0x20;
/// SETTINGS_MAX_FRAME_SIZE of the server (h2's default; tonic does not change it), and the
/// size the shim splits re-encoded blocks at.
pub const MAX_FRAME_SIZE: usize = 16_384;
/// A header block larger than this is not collected (h2 would refuse it anyway).
const MAX_HEADER_BLOCK: usize = 256 * 1024;

/// The 9-byte header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream_id: u32,
}

impl FrameHeader {
    /// The header at the start of `buf`, if `buf` holds one.
    pub fn parse(buf: &[u8]) -> Option<FrameHeader> {
        let h = buf.get(..FRAME_HEADER_LEN)?;
        Some(FrameHeader {
            len: u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize,
            kind: h[3],
            flags: h[4],
            stream_id: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    /// Appends the header to `out` (`len` must fit in 24 bits: at most [`MAX_FRAME_SIZE`]
    /// here).
    pub fn write(&self, out: &mut Vec<u8>) {
        let len = (self.len as u32).to_be_bytes();
        out.extend_from_slice(&len[1..]);
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&(self.stream_id & 0x7fff_ffff).to_be_bytes());
    }
}

/// Appends one frame: its header (with `payload`'s length) and `payload`.
pub fn write_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream_id: u32, payload: &[u8]) {
    FrameHeader {
        len: payload.len(),
        kind,
        flags,
        stream_id,
    }
    .write(out);
    out.extend_from_slice(payload);
}

/// The parts of a HEADERS frame payload: its priority fields (when `FLAG_PRIORITY`) and its
/// header block fragment without padding. `None` when padding or priority do not fit.
fn split_headers_payload(flags: u8, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut rest = payload;
    if flags & FLAG_PADDED != 0 {
        let (&pad, after) = rest.split_first()?;
        rest = after.get(..after.len().checked_sub(usize::from(pad))?)?;
    }
    let mut priority = None;
    if flags & FLAG_PRIORITY != 0 {
        let p = rest.get(..5)?;
        priority = Some([p[0], p[1], p[2], p[3], p[4]]);
        rest = &rest[5..];
    }
    Some((priority, rest))
}

/// Appends `block` as one HEADERS frame plus CONTINUATIONs, split at [`MAX_FRAME_SIZE`].
/// `flags` may carry `FLAG_END_STREAM`; `FLAG_PRIORITY` is set when `priority` is given.
fn write_header_block(
    out: &mut Vec<u8>,
    stream_id: u32,
    flags: u8,
    priority: Option<[u8; 5]>,
    block: &[u8],
) {
    let prio_len = if priority.is_some() { 5 } else { 0 };
    let first_len = block.len().min(MAX_FRAME_SIZE - prio_len);
    let mut rest = &block[first_len..];
    let mut first_flags = flags & FLAG_END_STREAM;
    if priority.is_some() {
        first_flags |= FLAG_PRIORITY;
    }
    if rest.is_empty() {
        first_flags |= FLAG_END_HEADERS;
    }
    FrameHeader {
        len: prio_len + first_len,
        kind: TYPE_HEADERS,
        flags: first_flags,
        stream_id,
    }
    .write(out);
    if let Some(p) = priority {
        out.extend_from_slice(&p);
    }
    out.extend_from_slice(&block[..first_len]);
    while !rest.is_empty() {
        let n = rest.len().min(MAX_FRAME_SIZE);
        let flags = if n == rest.len() { FLAG_END_HEADERS } else { 0 };
        write_frame(out, TYPE_CONTINUATION, flags, stream_id, &rest[..n]);
        rest = &rest[n..];
    }
}

/// One complete header block (HEADERS + CONTINUATIONs) as received.
#[derive(Debug)]
pub struct HeaderBlock {
    /// The frames as received, for passing the block on unchanged.
    pub raw: Vec<u8>,
    pub stream_id: u32,
    /// `FLAG_END_STREAM` of the HEADERS frame.
    pub end_stream: bool,
    pub priority: Option<[u8; 5]>,
    /// The concatenated header block fragments (HPACK).
    pub fragment: Vec<u8>,
}

impl HeaderBlock {
    /// Appends `fragment` in place of this block's own, with its stream, END_STREAM and
    /// priority.
    pub fn write_with(&self, fragment: &[u8], out: &mut Vec<u8>) {
        let flags = if self.end_stream { FLAG_END_STREAM } else { 0 };
        write_header_block(out, self.stream_id, flags, self.priority, fragment);
    }
}

#[derive(Debug)]
enum State {
    /// Still reading the client preface; holds how many bytes were seen.
    Preface(usize),
    /// At a frame boundary.
    FrameStart,
    /// Forwarding the rest of a non-header frame's payload.
    Forward(usize),
    /// Unparseable input, or the caller is done: everything passes through from now on.
    Verbatim,
}

/// Splits the client→server byte stream into header blocks, which go to a callback, and
/// everything else (preface, other frames), which is copied to the output as it arrives —
/// payloads are streamed, never buffered whole. Input it cannot follow (not HTTP/2, an
/// interleaved or oversized header block) is passed through verbatim from then on, so h2
/// reports the protocol error itself.
#[derive(Debug)]
pub struct BlockSplitter {
    state: State,
    input: Vec<u8>,
    pending: Option<HeaderBlock>,
}

impl Default for BlockSplitter {
    fn default() -> Self {
        BlockSplitter {
            state: State::Preface(0),
            input: Vec::new(),
            pending: None,
        }
    }
}

impl BlockSplitter {
    /// Feeds bytes from the client; appends what the server should see to `out`. Each
    /// complete header block goes to `on_block`, which appends its replacement (or the raw
    /// frames) to `out` and returns whether the rest of the stream still needs splitting.
    pub fn feed(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        on_block: &mut dyn FnMut(HeaderBlock, &mut Vec<u8>) -> bool,
    ) {
        if let State::Verbatim = self.state {
            out.extend_from_slice(data);
            return;
        }
        self.input.extend_from_slice(data);
        let used = self.process(out, on_block);
        self.input.drain(..used);
        if let State::Verbatim = self.state {
            self.finish(out);
        }
    }

    /// The client closed its side (or the caller gave up): whatever is held goes out
    /// verbatim, and so does everything fed later.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if let Some(block) = self.pending.take() {
            out.extend_from_slice(&block.raw);
        }
        out.append(&mut self.input);
        self.state = State::Verbatim;
    }

    /// Consumes what it can of `self.input`; returns how many bytes were used.
    fn process(
        &mut self,
        out: &mut Vec<u8>,
        on_block: &mut dyn FnMut(HeaderBlock, &mut Vec<u8>) -> bool,
    ) -> usize {
        let mut pos = 0;
        loop {
            let avail = &self.input[pos..];
            match self.state {
                State::Verbatim => return pos,
                State::Preface(seen) => {
                    let want = PREFACE.len() - seen;
                    let n = want.min(avail.len());
                    if avail[..n] != PREFACE[seen..seen + n] {
                        // Not HTTP/2 with prior knowledge: let h2 answer it.
                        self.state = State::Verbatim;
                        return pos;
                    }
                    out.extend_from_slice(&avail[..n]);
                    pos += n;
                    if n < want {
                        self.state = State::Preface(seen + n);
                        return pos;
                    }
                    self.state = State::FrameStart;
                }
                State::Forward(remaining) => {
                    if avail.is_empty() {
                        return pos;
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
                    let Some(header) = FrameHeader::parse(avail) else {
                        return pos;
                    };
                    if header.kind != TYPE_HEADERS && header.kind != TYPE_CONTINUATION {
                        if self.pending.is_some() {
                            // A header block must not be interleaved (RFC 9113 §4.3).
                            self.state = State::Verbatim;
                            return pos;
                        }
                        out.extend_from_slice(&avail[..FRAME_HEADER_LEN]);
                        pos += FRAME_HEADER_LEN;
                        self.state = if header.len == 0 {
                            State::FrameStart
                        } else {
                            State::Forward(header.len)
                        };
                        continue;
                    }
                    let buffered = self.pending.as_ref().map_or(0, |p| p.raw.len());
                    if header.len > MAX_FRAME_SIZE || buffered + header.len > MAX_HEADER_BLOCK {
                        self.state = State::Verbatim;
                        return pos;
                    }
                    let Some(frame) = avail.get(..FRAME_HEADER_LEN + header.len) else {
                        return pos;
                    };
                    let frame = frame.to_vec();
                    pos += frame.len();
                    if !self.on_header_frame(header, frame, out, on_block) {
                        self.state = State::Verbatim;
                        return pos;
                    }
                }
            }
        }
    }

    /// Handles one complete HEADERS or CONTINUATION frame; `false`: pass the rest through.
    fn on_header_frame(
        &mut self,
        header: FrameHeader,
        frame: Vec<u8>,
        out: &mut Vec<u8>,
        on_block: &mut dyn FnMut(HeaderBlock, &mut Vec<u8>) -> bool,
    ) -> bool {
        let payload = &frame[FRAME_HEADER_LEN..];
        if header.kind == TYPE_HEADERS {
            if self.pending.is_some() {
                // A new block before the last one ended: out of order (RFC 9113 §6.10).
                self.pending_then(frame, out);
                return false;
            }
            let Some((priority, fragment)) = split_headers_payload(header.flags, payload) else {
                out.extend_from_slice(&frame);
                return false;
            };
            self.pending = Some(HeaderBlock {
                fragment: fragment.to_vec(),
                stream_id: header.stream_id,
                end_stream: header.flags & FLAG_END_STREAM != 0,
                priority,
                raw: frame,
            });
        } else {
            match self.pending.as_mut() {
                Some(block) if block.stream_id == header.stream_id => {
                    block.fragment.extend_from_slice(payload);
                    block.raw.extend_from_slice(&frame);
                }
                // A CONTINUATION without its HEADERS, or for another stream.
                _ => {
                    self.pending_then(frame, out);
                    return false;
                }
            }
        }
        if header.flags & FLAG_END_HEADERS == 0 {
            return true;
        }
        match self.pending.take() {
            Some(block) => on_block(block, out),
            None => false,
        }
    }

    /// Emits the pending block's raw frames, then `frame`.
    fn pending_then(&mut self, frame: Vec<u8>, out: &mut Vec<u8>) {
        if let Some(block) = self.pending.take() {
            out.extend_from_slice(&block.raw);
        }
        out.extend_from_slice(&frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_payload_padding_and_priority() {
        let payload = [2u8, 0, 0, 0, 1, 15, b'a', b'b', 0, 0];
        let (prio, frag) = split_headers_payload(FLAG_PADDED | FLAG_PRIORITY, &payload).unwrap();
        assert_eq!(prio, Some([0, 0, 0, 1, 15]));
        assert_eq!(frag, b"ab");
        assert_eq!(split_headers_payload(FLAG_PADDED, &[]), None);
        assert_eq!(split_headers_payload(FLAG_PADDED, &[5, 1]), None);
        assert_eq!(split_headers_payload(FLAG_PRIORITY, &[0, 0]), None);
        assert_eq!(split_headers_payload(0, b"xy"), Some((None, &b"xy"[..])));
    }

    #[test]
    fn blocks_round_trip_through_the_writer() {
        let block = vec![7u8; 40_000];
        let mut out = PREFACE.to_vec();
        write_header_block(&mut out, 3, FLAG_END_STREAM, Some([0, 0, 0, 0, 9]), &block);
        let mut seen = Vec::new();
        let mut passed = Vec::new();
        let mut splitter = BlockSplitter::default();
        splitter.feed(&out, &mut passed, &mut |b, _| {
            seen.push(b);
            true
        });
        assert_eq!(passed, PREFACE);
        assert_eq!(seen.len(), 1);
        let b = &seen[0];
        assert_eq!(
            (b.stream_id, b.end_stream, b.priority),
            (3, true, Some([0, 0, 0, 0, 9]))
        );
        assert_eq!(b.fragment, block);
        assert_eq!(b.raw, out[PREFACE.len()..]);
    }
}
