//! What the shim does with each header block (see the module docs of `authority`): decode
//! it, and either pass it on byte for byte or re-encode it with `localhost` in place of a
//! path-shaped `:authority`.
//!
//! HPACK decoding is network input: it uses `loona-hpack`, whose decoder returns an error
//! for every malformed block (integers, lengths, Huffman, indices, table-size updates) where
//! `hpack` 0.3 panicked on a truncated integer. A block it refuses is passed through raw and
//! the connection goes verbatim, so h2 answers it with its own protocol error.

use loona_hpack::encoder::encode_integer;
use tonic::codegen::http::uri::Authority;

use super::frames::{BlockSplitter, HeaderBlock};

/// The authority put in place of a path-shaped one.
pub const REPLACEMENT_AUTHORITY: &str = "localhost";
/// SETTINGS_HEADER_TABLE_SIZE of the server (h2's default): a client may not ask for a
/// larger dynamic table (RFC 7541 §4.2), so the decoder refuses one.
const HEADER_TABLE_SIZE: usize = 4_096;

/// Whether `value` is acceptable to h2 as `:authority`.
pub fn is_valid_authority(value: &[u8]) -> bool {
    Authority::try_from(value).is_ok()
}

/// Sans-IO rewriter of the client→server HTTP/2 byte stream: frames are split by
/// [`BlockSplitter`], each header block is judged here.
pub struct AuthorityRewriter {
    frames: BlockSplitter,
    policy: Policy,
}

struct Policy {
    decoder: loona_hpack::Decoder<'static>,
    /// Set by the first block that needed a fix: from then on every block is re-encoded.
    reencode: bool,
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
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        AuthorityRewriter {
            frames: BlockSplitter::default(),
            policy: Policy {
                decoder,
                reencode: false,
                rewritten_blocks: 0,
            },
        }
    }

    /// How many header blocks had their `:authority` replaced so far.
    pub fn rewritten_blocks(&self) -> u64 {
        self.policy.rewritten_blocks
    }

    /// Feeds bytes read from the client; appends what the server should see to `out`.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let policy = &mut self.policy;
        self.frames
            .feed(data, out, &mut |block, out| policy.on_block(block, out));
    }

    /// The client closed its side: whatever is still held goes out verbatim.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.frames.finish(out);
    }
}

impl Policy {
    /// Appends what the server gets for `block`; `false`: pass the rest through unparsed.
    fn on_block(&mut self, block: HeaderBlock, out: &mut Vec<u8>) -> bool {
        let headers = match self.decoder.decode(&block.fragment) {
            Ok(headers) => headers,
            Err(e) => {
                tracing::debug!("header block not decodable ({e}); passing the connection through");
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
            // (HPACK decoding costs more than the rest of an `Allocate` call).
            return false;
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
        block.write_with(&encoded, out);
        true
    }
}

/// "Literal Header Field without Indexing — New Name" (RFC 7541 §6.2.2), raw strings:
/// adds nothing to the server's dynamic table.
fn encode_literal_without_indexing(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x00);
    out.extend(encode_integer(name.len(), 7));
    out.extend_from_slice(name);
    out.extend(encode_integer(value.len(), 7));
    out.extend_from_slice(value);
}
