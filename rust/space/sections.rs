//! Where a file's sections and code are, as its reader found them, and
//! compressed sections' bytes decompressed within what their format can
//! hold: what the unwinder, the symbolizer and the debug-file finder share.

/// A section as found by the ELF reader: where its bytes are in the file
/// and the address it is loaded at (ELF virtual address, before bias).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionInfo {
    pub file_offset: u64,
    pub size: u64,
    pub address: u64,
}

/// An executable PT_LOAD segment: ELF addresses `address..address + size`,
/// the first `file_size` bytes of which are at `file_offset` in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeSegment {
    pub address: u64,
    pub size: u64,
    pub file_offset: u64,
    pub file_size: u64,
}

/// How a section is compressed: its format and its size decompressed; None
/// where it is not.
pub type Compression = Option<(object::CompressionFormat, u64)>;

/// The `full` bytes a compressed section's `stream` (`format`) holds; None
/// where the stream is damaged or cut, gives other than `full` bytes, or
/// claims more than its format can expand it to (a damaged header: nothing
/// is allocated for it).
pub fn decompress_section(
    format: object::CompressionFormat,
    stream: &[u8],
    full: u64,
) -> Option<Vec<u8>> {
    if !plausible(format, stream.len(), full) {
        return None;
    }
    let compressed = object::CompressedData { format, data: stream, uncompressed_size: full };
    let bytes = compressed.decompress().ok()?.into_owned();
    (bytes.len() as u64 == full).then_some(bytes)
}

/// The pieces of an ELF file the unwinder needs.
#[derive(Clone, Debug, Default)]
pub struct ModuleSections {
    pub eh_frame: Option<SectionInfo>,
    pub eh_frame_hdr: Option<SectionInfo>,
    pub debug_frame: Option<SectionInfo>,
    /// 32-bit ARM's unwind tables (EHABI): `.ARM.exidx` (or, without
    /// section headers, its `PT_ARM_EXIDX` segment) and `.ARM.extab`.
    pub arm_exidx: Option<SectionInfo>,
    pub arm_extab: Option<SectionInfo>,
    /// The Simple Frame table (`.sframe`, or without section headers its
    /// `PT_GNU_SFRAME` segment): the rules where no FDE covers a pc.
    pub sframe: Option<SectionInfo>,
    /// `.debug_frame` is compressed (`SHF_COMPRESSED`, as `-gz` and Go's
    /// linker leave it, or a GNU `.zdebug_frame`): `debug_frame` is then its
    /// stream, in this format, of this many bytes decompressed.
    pub debug_frame_compression: Compression,
    pub text: Option<u64>,
    pub got: Option<u64>,
    /// The executable segments, for the checks of the frame-pointer walk
    /// and stack scanning. Empty: unknown, the whole module counts as code
    /// and no code bytes are checked.
    pub code: Vec<CodeSegment>,
    /// The entry point (`e_entry`), where there is one (not 0): the
    /// function holding it is the outermost frame of the stack it starts.
    pub entry: Option<u64>,
    /// A Go program (`.gopclntab` or `.go.buildinfo`): see
    /// [`UnwindInfo::in_go_sigpanic`].
    pub go: bool,
}

/// The most zlib can expand its input (deflate's limit is 1032:1): a
/// section that says it decompresses to more is damaged (see [`plausible`]).
const MAX_RATIO: usize = 1032;

/// The most zstd can expand its input: a block of 128 KiB repeating one
/// byte (RLE) takes 4 bytes.
const MAX_RATIO_ZSTD: usize = 32 << 10;

/// Whether a compressed section of `stream` bytes (`format`) can hold the
/// `full` bytes its header says it does: not where that is more than its
/// format can expand it to (a damaged header, which would have the whole
/// claim allocated before the first byte is read).
pub fn plausible(format: object::CompressionFormat, stream: usize, full: u64) -> bool {
    let ratio = match format {
        object::CompressionFormat::None => return true,
        object::CompressionFormat::Zstandard => MAX_RATIO_ZSTD,
        _ => MAX_RATIO,
    };
    usize::try_from(full)
        .is_ok_and(|full| full <= stream.saturating_mul(ratio).saturating_add(1 << 12))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_compressed_section_is_read_only_whole_and_as_claimed() {
        let bytes: Vec<u8> = (0..5000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&bytes).unwrap();
        let stream = enc.finish().unwrap();
        let zlib = object::CompressionFormat::Zlib;
        let full = bytes.len() as u64;
        assert!(decompress_section(zlib, &stream, full) == Some(bytes.clone()));
        // A larger size than the stream's, the stream cut short or damaged: nothing.
        assert!(decompress_section(zlib, &stream, full + 1).is_none());
        assert!(decompress_section(zlib, &stream[..stream.len() / 2], full).is_none());
        let mut damaged = stream.clone();
        damaged[stream.len() / 2] ^= 0xff;
        assert!(decompress_section(zlib, &damaged, full).is_none());
        // A smaller one: no more than it claims, the section's first bytes.
        let short = decompress_section(zlib, &stream, full - 100);
        assert!(short.is_none_or(|b| b[..] == bytes[..bytes.len() - 100]));
        // A size the stream could never hold is not even allocated for.
        assert!(decompress_section(zlib, &stream, 1 << 60).is_none());
        let zstd = object::CompressionFormat::Zstandard;
        assert!(decompress_section(zstd, &stream, full).is_none());
    }
}
