//! Arbitrary bytes as a compressed core, through each decoder (zstd, xz,
//! lz4's two formats, gzip) with a small limit (seeded with a real core,
//! compressed by each format's own tool, and with bombs: zeros, and a core's
//! headers followed by zeros, compressed): the first byte picks the decoder
//! and a limit of 1 KiB to 1 MiB, the rest is the file. Whatever the input,
//! a result is at most the limit, and the decoders' memory stays bounded
//! (libFuzzer's -rss_limit_mb); errors are fine, panics and hangs are not.

use _core::source::corefile::{decompress, Compression};

const KINDS: [Compression; 5] = [
    Compression::Zstd,
    Compression::Xz,
    Compression::Lz4,
    Compression::Lz4Legacy,
    Compression::Gzip,
];

pub fn run(data: &[u8]) {
    let Some((&selector, file)) = data.split_first() else { return };
    let kind = KINDS[usize::from(selector) % KINDS.len()];
    let limit = 1u64 << (10 + (u32::from(selector) / 5) % 11);
    if let Ok(out) = decompress(kind, file, limit) {
        assert!(out.len() as u64 <= limit, "{kind:?}: {} bytes past the limit {limit}", out.len());
    }
}
