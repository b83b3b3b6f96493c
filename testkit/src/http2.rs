//! HTTP/2 framing for the test doubles and the tests' hand-made inputs, written from RFC 9113
//! (§3.4 preface, §4.1 frame layout, §6.2 HEADERS, §6.10 CONTINUATION) and independent of the
//! plugin's own frame code, which is what those tests check.

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length (24 bits), type, flags, reserved bit and stream identifier (RFC 9113 §4.1).
pub const FRAME_HEADER_LEN: usize = 9;
/// Frame types (§6.2, §6.10).
pub const TYPE_HEADERS: u8 = 0x1;
pub const TYPE_CONTINUATION: u8 = 0x9;
/// HEADERS / CONTINUATION flags (§6.2).
pub const FLAG_END_STREAM: u8 = 0x1;
pub const FLAG_END_HEADERS: u8 = 0x4;
pub const FLAG_PADDED: u8 = 0x8;
pub const FLAG_PRIORITY: u8 = 0x20;

/// A frame header declaring `len` payload bytes (§4.1), which a test may make disagree with
/// the payload that follows. Panics when `len` does not fit 24 bits.
pub fn frame_header(len: usize, kind: u8, flags: u8, stream_id: u32) -> [u8; FRAME_HEADER_LEN] {
    let len = u32::try_from(len).expect("frame payload fits 24 bits");
    assert!(len < 1 << 24, "frame payload fits 24 bits");
    let [_, l0, l1, l2] = len.to_be_bytes();
    let [s0, s1, s2, s3] = (stream_id & 0x7fff_ffff).to_be_bytes();
    [l0, l1, l2, kind, flags, s0, s1, s2, s3]
}

/// Appends one frame: its header and `payload`.
pub fn write_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream_id: u32, payload: &[u8]) {
    out.extend_from_slice(&frame_header(payload.len(), kind, flags, stream_id));
    out.extend_from_slice(payload);
}
