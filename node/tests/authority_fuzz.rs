//! Property tests of the `:authority` shim on hostile input: whatever a client sends —
//! truncated or corrupted HPACK blocks, frames whose lengths lie, CONTINUATIONs out of
//! place, any chunking — the shim must not panic (the programs run with `panic = "abort"`),
//! must pass through byte for byte what it does not rewrite, and must not depend on how
//! the bytes were split into reads.
//!
//! `PROPTEST_CASES=100000 cargo test -p edgegpu-node --test authority_fuzz` searches
//! deeper than the default run.

use edgegpu_node::authority::AuthorityRewriter;
// The input is framed by the test doubles' RFC 9113 code, not the shim's own, so that a
// framing bug cannot hide on both sides.
use edgegpu_testkit::http2::{
    frame_header, write_frame, FLAG_END_HEADERS, FLAG_PADDED, FLAG_PRIORITY, PREFACE,
    TYPE_CONTINUATION, TYPE_HEADERS,
};
use proptest::prelude::*;

const PATH_AUTHORITY: &[u8] = b"/var/lib/kubelet/device-plugins/nvidia-gpu.sock";

fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_frame(&mut out, kind, flags, stream_id, payload);
    out
}

/// A gRPC request's header block as a client encodes it (Huffman off, dynamic table on).
fn request_block(encoder: &mut loona_hpack::Encoder<'_>, authority: &[u8]) -> Vec<u8> {
    encoder.encode([
        (&b":method"[..], &b"POST"[..]),
        (&b":scheme"[..], &b"http"[..]),
        (&b":path"[..], &b"/v1beta1.DevicePlugin/Allocate"[..]),
        (&b":authority"[..], authority),
        (&b"content-type"[..], &b"application/grpc"[..]),
        (&b"te"[..], &b"trailers"[..]),
    ])
}

/// Runs the rewriter over `input` in reads of `chunk` bytes.
fn rewrite(input: &[u8], chunk: usize) -> (Vec<u8>, u64) {
    let mut rewriter = AuthorityRewriter::new();
    let mut out = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        rewriter.feed(piece, &mut out);
    }
    rewriter.finish(&mut out);
    (out, rewriter.rewritten_blocks())
}

/// A header block damaged the ways a fuzzer would: cut short, bytes flipped, garbage
/// appended — including every HPACK integer prefix (`0x3f`: a table-size update whose
/// integer continues past the end, the input that made `hpack` 0.3 panic).
fn damaged_block() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        0usize..160,
        prop::collection::vec((0usize..160, any::<u8>()), 0..3),
        prop::collection::vec(
            prop_oneof![
                Just(0x3fu8),
                Just(0x7f),
                Just(0xff),
                Just(0x1f),
                any::<u8>()
            ],
            0..8,
        ),
    )
        .prop_map(|(path, cut, flips, tail)| {
            let mut encoder = loona_hpack::Encoder::new();
            let authority: &[u8] = if path { PATH_AUTHORITY } else { b"localhost" };
            let mut block = request_block(&mut encoder, authority);
            block.truncate(cut);
            for (at, mask) in flips {
                if !block.is_empty() {
                    let n = block.len();
                    block[at % n] ^= mask;
                }
            }
            block.extend(tail);
            block
        })
}

/// Any frame, biased towards header frames; its declared length may lie.
fn any_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![
            Just(TYPE_HEADERS),
            Just(TYPE_CONTINUATION),
            Just(0x0u8),
            Just(0x4u8),
            any::<u8>()
        ],
        prop_oneof![
            Just(FLAG_END_HEADERS),
            Just(FLAG_END_HEADERS | FLAG_PADDED),
            Just(FLAG_END_HEADERS | FLAG_PRIORITY),
            Just(0u8),
            any::<u8>()
        ],
        0u32..4,
        prop_oneof![damaged_block(), prop::collection::vec(any::<u8>(), 0..40)],
        prop_oneof![3 => Just(None), 1 => (0usize..20_000).prop_map(Some)],
    )
        .prop_map(|(kind, flags, stream, payload, declared)| {
            let mut out =
                frame_header(declared.unwrap_or(payload.len()), kind, flags, stream).to_vec();
            out.extend_from_slice(&payload);
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A damaged header block, first on its connection or after a block that switched the
    /// connection to re-encoding: no panic, and nothing changes unless a block was rewritten.
    #[test]
    fn damaged_header_blocks_pass_through(
        after_old_kubelet_block in any::<bool>(),
        damaged in damaged_block(),
        chunk in 1usize..64,
    ) {
        let mut input = PREFACE.to_vec();
        if after_old_kubelet_block {
            let mut encoder = loona_hpack::Encoder::new();
            input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &request_block(&mut encoder, PATH_AUTHORITY)));
        }
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &damaged));
        let (out, rewritten) = rewrite(&input, chunk);
        prop_assert!(out.starts_with(PREFACE));
        if rewritten == 0 {
            prop_assert_eq!(&out, &input);
        }
    }

    /// Any sequence of frames: no panic, and the output does not depend on the reads.
    #[test]
    fn any_frames_in_any_reads(
        frames in prop::collection::vec(any_frame(), 0..6),
        chunk in 1usize..64,
    ) {
        let mut input = PREFACE.to_vec();
        for f in frames {
            input.extend(f);
        }
        let (whole, rewritten_whole) = rewrite(&input, input.len());
        let (chunked, rewritten_chunked) = rewrite(&input, chunk);
        prop_assert_eq!(whole, chunked);
        prop_assert_eq!(rewritten_whole, rewritten_chunked);
    }
}

/// The input that made `hpack` 0.3 panic, as a fixed case: a table-size update whose
/// integer is cut off at the end of the block.
#[test]
fn truncated_table_size_update_is_passed_through() {
    for block in [&[0x3f][..], &[0x3f, 0xff], &[0x3f, 0xff, 0xff, 0xff, 0xff]] {
        let mut input = PREFACE.to_vec();
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, block));
        let (out, rewritten) = rewrite(&input, 1);
        assert_eq!((out, rewritten), (input, 0), "{block:02x?}");
    }
}
