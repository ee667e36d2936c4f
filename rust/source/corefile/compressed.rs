//! Compressed cores: systemd-coredump writes its cores as zstd (its
//! default), xz or lz4 files, and a core kept by hand is often gzipped.
//! A file is recognised by its magic bytes, whatever its name, and
//! decompressed by the pure-Rust decoders (ruzstd, xz4rust, lz4_flex,
//! flate2) as a stream, into an unlinked temporary file (in `$TMPDIR`)
//! that is then mapped: the process holds the decoders' state alone (their
//! windows are bounded: zstd's at 100 MiB by ruzstd, xz's dictionary at
//! [`XZ_MAX_DICT`] here, lz4's blocks at 8 MiB, deflate's at 32 KiB), never
//! the core, so a decompression bomb costs at most the limit in disk, and
//! a file that would decompress to more than the limit (a bomb, or a core
//! larger than asked for) is an error found when the limit is reached.

use std::fmt;
use std::io::{self, Read, Write};

use crate::source::memory::Data;

/// The compressed formats read, by their magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Zstd,
    Xz,
    Lz4,
    /// lz4's legacy format (`lz4 -l`): 8 MiB blocks, each after its size.
    Lz4Legacy,
    Gzip,
}

const LZ4_LEGACY_MAGIC: &[u8] = b"\x02\x21\x4c\x18";

const MAGICS: [(&[u8], Compression); 5] = [
    (b"\x28\xb5\x2f\xfd", Compression::Zstd),
    (b"\xfd7zXZ\x00", Compression::Xz),
    (b"\x04\x22\x4d\x18", Compression::Lz4),
    (LZ4_LEGACY_MAGIC, Compression::Lz4Legacy),
    (b"\x1f\x8b\x08", Compression::Gzip), // gzip with deflate, the one method defined
];

impl Compression {
    /// The format whose magic bytes `data` starts with, if any.
    pub fn detect(data: &[u8]) -> Option<Compression> {
        MAGICS.iter().find(|(magic, _)| data.starts_with(magic)).map(|&(_, kind)| kind)
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
            Compression::Lz4 => "lz4",
            Compression::Lz4Legacy => "lz4-legacy",
            Compression::Gzip => "gzip",
        }
    }
}

/// The largest xz dictionary decoded: xz's own presets use at most 64 MiB
/// (`-9`; systemd-coredump's `-6` 8 MiB). A file whose header asks for more
/// is refused rather than given the memory (a bomb may ask for 1.5 GiB).
pub const XZ_MAX_DICT: usize = 64 << 20;

/// Why a compressed file could not be decompressed.
#[derive(Debug)]
#[non_exhaustive]
pub enum DecompressError {
    /// It decompresses to more than the limit (the limit, in bytes).
    TooLarge(u64),
    /// The compressed data is damaged or cut short.
    Corrupt(String),
    /// The decompressed bytes could not be written to, or mapped from, a
    /// temporary file (the disk full, `$TMPDIR` not writable).
    TempFile(io::Error),
    /// Its first bytes are not an ELF core's (why): nothing more is read.
    NotCore(String),
    /// It decompresses to more than the core its own program headers
    /// describe (that size): a bomb behind a core's headers.
    LongerThanCore(u64),
}

impl fmt::Display for DecompressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecompressError::TooLarge(limit) => {
                write!(f, "decompresses to more than {limit} bytes (the limit on a core's size)")
            }
            DecompressError::Corrupt(why) => write!(f, "damaged or cut short ({why})"),
            DecompressError::NotCore(why) => write!(f, "does not hold an ELF core ({why})"),
            DecompressError::LongerThanCore(size) => write!(
                f,
                "decompresses to more than the {size} bytes its core's own headers describe"
            ),
            DecompressError::TempFile(e) => write!(
                f,
                "cannot hold it decompressed in a temporary file in {}: {}",
                std::env::temp_dir().display(),
                crate::source::corefile::os_message(e)
            ),
        }
    }
}

/// A sink that takes at most `limit` bytes, into an unlinked temporary
/// file: one more is an error. Runs of zeros (a core's untouched pages, a
/// bomb's usual filling) are left as holes in the file, costing no disk.
struct Bounded {
    file: std::fs::File,
    buf: Vec<u8>,
    written: u64,
    limit: u64,
    over: bool,
    /// The file's own error (the disk full), not the data's.
    failed: Option<io::Error>,
    /// What the first bytes say: not a core (why), or the core's size by its
    /// headers; None until they are read.
    head: Option<Result<u64, String>>,
    /// It went on past that size.
    longer: bool,
}

/// What [`Bounded`] gathers before it writes, and the unit it leaves a hole
/// for where it is all zeros.
const SINK_BUFFER: usize = 1 << 20;
const HOLE: usize = 64 << 10;

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.limit.saturating_sub(self.written);
        if buf.len() as u64 > room {
            self.over = true;
            return Err(io::Error::other("over the limit"));
        }
        if let Some(Ok(size)) = self.head {
            if self.written.saturating_add(buf.len() as u64) > size {
                self.longer = true;
                return Err(io::Error::other("longer than the core"));
            }
        }
        self.buf.extend_from_slice(buf);
        self.written += buf.len() as u64;
        if self.buf.len() >= SINK_BUFFER {
            self.read_head();
            if let Some(Err(_)) = self.head {
                return Err(io::Error::other("not a core"));
            }
            self.spill()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.spill()
    }
}

impl Bounded {
    fn new(limit: u64) -> Result<Self, DecompressError> {
        let file = tempfile::tempfile().map_err(DecompressError::TempFile)?;
        let buf = Vec::with_capacity(SINK_BUFFER + HOLE);
        let (written, over, failed, head, longer) = (0, false, None, None, false);
        Ok(Bounded { file, buf, written, limit, over, failed, head, longer })
    }

    /// Where the file's first bytes are in the buffer (before the first
    /// spill), what they say: a core stops being read where it is not
    /// one, or where it goes on past the size its headers give.
    fn read_head(&mut self) {
        if self.head.is_none() && self.written == self.buf.len() as u64 {
            let said = crate::source::corefile::core_extent(&self.buf);
            self.head = said.map(|r| r.map_err(|e| e.to_string()));
            if self.head.is_none() {
                // The headers lie past the first megabyte (a core of very
                // many segments): the limit alone bounds it.
                self.head = Some(Ok(u64::MAX));
            }
        }
    }

    /// The buffer into the file: a hole for each all-zero unit, its bytes
    /// for the others.
    fn spill(&mut self) -> io::Result<()> {
        use std::io::Seek;
        let result: io::Result<()> = (|| {
            for unit in self.buf.chunks(HOLE) {
                if unit.iter().all(|&b| b == 0) {
                    self.file.seek(io::SeekFrom::Current(unit.len() as i64))?;
                } else {
                    self.file.write_all(unit)?;
                }
            }
            Ok(())
        })();
        self.buf.clear();
        if let Err(e) = result {
            let kind = e.kind();
            self.failed = Some(e);
            return Err(io::Error::new(kind, "cannot write the temporary file"));
        }
        Ok(())
    }

    /// Everything `reader` gives, through this sink.
    fn drain(&mut self, reader: &mut impl Read) -> io::Result<()> {
        io::copy(reader, self).map(|_| ())
    }

    /// The bytes written, mapped; or why there are none.
    fn finish(mut self, result: Result<(), String>) -> Result<Data, DecompressError> {
        if self.over {
            return Err(DecompressError::TooLarge(self.limit));
        }
        self.read_head();
        match &self.head {
            Some(Err(why)) => return Err(DecompressError::NotCore(why.clone())),
            Some(Ok(size)) if self.longer || self.written > *size => {
                return Err(DecompressError::LongerThanCore(*size));
            }
            _ => {}
        }
        if result.is_ok() {
            let _ = self.spill();
        }
        if let Some(e) = self.failed {
            return Err(DecompressError::TempFile(e));
        }
        result.map_err(DecompressError::Corrupt)?;
        if self.written == 0 {
            return Ok(Data::Owned(Vec::new()));
        }
        // The trailing holes: the file is as long as what was written.
        self.file.set_len(self.written).map_err(DecompressError::TempFile)?;
        crate::source::files::map_file(&self.file)
            .map(Data::Mapped)
            .map_err(DecompressError::TempFile)
    }
}

/// `data`, a `kind` file, decompressed: at most `limit` bytes of it, in a
/// temporary file, mapped (see the module's documentation).
pub fn decompress(kind: Compression, data: &[u8], limit: u64) -> Result<Data, DecompressError> {
    let mut out = Bounded::new(limit)?;
    let result = match kind {
        Compression::Zstd => zstd_frames(data, &mut out),
        Compression::Xz => xz_streams(data, &mut out),
        Compression::Lz4 => lz4_frames(data, out.by_ref()),
        Compression::Lz4Legacy => lz4_legacy(data, &mut out),
        Compression::Gzip => {
            out.drain(&mut flate2::read::MultiGzDecoder::new(data)).map_err(|e| e.to_string())
        }
    };
    out.finish(result)
}

/// Every xz stream of `data`, one after another (`xz` writes one;
/// concatenated files hold several, with zero padding between them), each
/// with a dictionary of at most [`XZ_MAX_DICT`].
fn xz_streams(mut data: &[u8], out: &mut dyn Write) -> Result<(), String> {
    use xz4rust::XzNextBlockResult::{EndOfStream, NeedMoreData};
    let mut decoder =
        xz4rust::XzDecoder::in_heap_with_alloc_dict_size(xz4rust::DICT_SIZE_PROFILE_0, XZ_MAX_DICT);
    let mut buf = vec![0u8; 256 << 10];
    while !data.is_empty() {
        loop {
            let step = decoder.decode(data, &mut buf).map_err(|e| format!("{e:?}"))?;
            let (used, made, end) = match step {
                NeedMoreData(used, made) => (used, made, false),
                EndOfStream(used, made) => (used, made, true),
            };
            out.write_all(&buf[..made]).map_err(|e| e.to_string())?;
            data = data.get(used..).unwrap_or_default();
            if end {
                break;
            }
            if used == 0 && made == 0 {
                return Err("cut short".to_owned());
            }
        }
        decoder.reset();
        // Stream padding: zeros, in words of four, then maybe another stream.
        let zeros = data.iter().take_while(|&&b| b == 0).count();
        if zeros % 4 != 0 {
            return Err(format!("{zeros} bytes of padding after a stream"));
        }
        data = &data[zeros..];
    }
    Ok(())
}

/// `data`, an xz file, decompressed in memory: at most `limit` bytes (a
/// small file's, as MiniDebugInfo's `.gnu_debugdata`).
pub fn xz_bytes(data: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    struct Capped(Vec<u8>, usize);
    impl Write for Capped {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if buf.len() > self.1 - self.0.len() {
                return Err(io::Error::other(format!("more than {} bytes", self.1)));
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut out = Capped(Vec::new(), limit);
    xz_streams(data, &mut out)?;
    Ok(out.0)
}

/// Every lz4 frame of `data`, one after another (`lz4` writes one;
/// concatenated files hold several: the lz4 tool reads them all).
fn lz4_frames(mut data: &[u8], out: &mut Bounded) -> Result<(), String> {
    while !data.is_empty() {
        let mut frame = lz4_flex::frame::FrameDecoder::new(data);
        out.drain(&mut frame).map_err(|e| e.to_string())?;
        data = frame.into_inner();
    }
    Ok(())
}

/// lz4's legacy format: the magic, then blocks, each its compressed size
/// (u32, little-endian) and an LZ4 block of at most 8 MiB decompressed; a
/// magic where a size would be starts another stream (files concatenated).
fn lz4_legacy(mut data: &[u8], out: &mut Bounded) -> Result<(), String> {
    const BLOCK: usize = 8 << 20;
    let mut block = vec![0u8; BLOCK];
    while let Some((head, rest)) = data.split_first_chunk::<4>() {
        data = rest;
        if head == LZ4_LEGACY_MAGIC {
            continue;
        }
        let size = u32::from_le_bytes(*head) as usize;
        let Some(compressed) = data.get(..size) else {
            return Err(format!("a block of {size} bytes, {} left", data.len()));
        };
        data = &data[size..];
        let n =
            lz4_flex::block::decompress_into(compressed, &mut block).map_err(|e| e.to_string())?;
        out.write_all(&block[..n]).map_err(|e| e.to_string())?;
    }
    if !data.is_empty() {
        return Err(format!("{} bytes after the last block", data.len()));
    }
    Ok(())
}

/// Every zstd frame of `data`, one after another (`zstd` writes one;
/// concatenated files hold several).
fn zstd_frames(mut data: &[u8], out: &mut Bounded) -> Result<(), String> {
    while !data.is_empty() {
        let mut frame = ruzstd::decoding::StreamingDecoder::new(data).map_err(|e| e.to_string())?;
        out.drain(&mut frame).map_err(|e| e.to_string())?;
        data = frame.into_inner();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decompressed bytes, or the error's words.
    fn bytes(kind: Compression, data: &[u8], limit: u64) -> Result<Vec<u8>, String> {
        decompress(kind, data, limit).map(|d| d.to_vec()).map_err(|e| e.to_string())
    }

    /// An x86_64 core of `size` bytes by its headers: an ELF header, one
    /// PT_LOAD over the rest, zeros.
    fn core_of(size: usize) -> Vec<u8> {
        core_claiming(size, size)
    }

    /// The first `len` bytes of a core of `size` bytes (see `core_of`).
    fn core_claiming(size: usize, len: usize) -> Vec<u8> {
        let mut core = vec![0u8; len];
        core[..4].copy_from_slice(b"\x7fELF");
        core[4] = 2; // ELFCLASS64
        core[5] = 1; // little-endian
        core[6] = 1;
        core[16..18].copy_from_slice(&4u16.to_le_bytes()); // ET_CORE
        core[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        core[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        core[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        core[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        core[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
        let phdr = &mut core[64..120];
        phdr[..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        phdr[8..16].copy_from_slice(&120u64.to_le_bytes()); // p_offset
        phdr[32..40].copy_from_slice(&(size as u64 - 120).to_le_bytes()); // p_filesz
        core
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    }

    fn lz4(data: &[u8]) -> Vec<u8> {
        let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// lz4's legacy format, made by hand: the magic, then each block after
    /// its compressed size; two streams one after another.
    #[test]
    fn lz4_legacy_streams_and_their_damage() {
        let core = core_of(200_000);
        let (a, b) = core.split_at(100_000);
        let mut file = Vec::new();
        for part in [a, b] {
            let block = lz4_flex::block::compress(part);
            file.extend_from_slice(LZ4_LEGACY_MAGIC);
            file.extend_from_slice(&(block.len() as u32).to_le_bytes());
            file.extend_from_slice(&block);
        }
        assert_eq!(bytes(Compression::Lz4Legacy, &file, 1 << 20).unwrap(), core);
        assert!(matches!(
            decompress(Compression::Lz4Legacy, &file, 100_001),
            Err(DecompressError::TooLarge(100_001))
        ));
        let cut = decompress(Compression::Lz4Legacy, &file[..file.len() - 1], 1 << 20);
        assert!(matches!(cut, Err(DecompressError::Corrupt(_))));
        let tail = [&file[..], &[1, 2]].concat();
        let extra = decompress(Compression::Lz4Legacy, &tail, 1 << 20);
        assert!(matches!(extra, Err(DecompressError::Corrupt(_))));
    }

    /// Bombs, as gzip members and lz4 frames one after another: a core's
    /// headers then zeros past the limit (the limit holds), past the size
    /// the headers give (it stops there), or no core at all (it stops at the
    /// first megabyte). The output goes to the temporary file, a hole for
    /// the zeros, never to memory.
    #[test]
    fn a_bomb_stops_at_the_limit_or_the_cores_size() {
        let core = core_of(4 << 20);
        let zeros = vec![0u8; 4 << 20];
        for (kind, pack) in
            [(Compression::Gzip, gzip as fn(&[u8]) -> Vec<u8>), (Compression::Lz4, lz4)]
        {
            let whole = pack(&core);
            assert_eq!(bytes(kind, &whole, 8 << 20).unwrap(), core, "{kind:?}");
            let bomb = [whole.clone(), pack(&zeros).repeat(8)].concat();
            let claims_more = [pack(&core_claiming(1 << 30, 4 << 20)), pack(&zeros).repeat(8)];
            match decompress(kind, &claims_more.concat(), 8 << 20) {
                Err(DecompressError::TooLarge(limit)) => assert_eq!(limit, 8 << 20),
                other => panic!("{kind:?}: {:?}", other.map(|d| d.len())),
            }
            match decompress(kind, &bomb, 1 << 30) {
                Err(DecompressError::LongerThanCore(size)) => assert_eq!(size, 4 << 20),
                other => panic!("{kind:?}: {:?}", other.map(|d| d.len())),
            }
            let no_core = pack(&zeros).repeat(8);
            match decompress(kind, &no_core, 1 << 30) {
                Err(DecompressError::NotCore(_)) => {}
                other => panic!("{kind:?}: {:?}", other.map(|d| d.len())),
            }
        }
    }

    #[test]
    fn detects_by_magic_alone() {
        assert_eq!(Compression::detect(b"\x28\xb5\x2f\xfd\x04"), Some(Compression::Zstd));
        assert_eq!(Compression::detect(b"\xfd7zXZ\x00\x00"), Some(Compression::Xz));
        assert_eq!(Compression::detect(b"\x04\x22\x4d\x18\x64"), Some(Compression::Lz4));
        assert_eq!(Compression::detect(b"\x02\x21\x4c\x18\x10"), Some(Compression::Lz4Legacy));
        assert_eq!(Compression::detect(b"\x1f\x8b\x08\x00"), Some(Compression::Gzip));
        assert_eq!(Compression::detect(b"\x7fELF\x02\x01"), None);
        assert_eq!(Compression::detect(b"\x28\xb5"), None);
    }

    #[test]
    fn damaged_data_is_an_error() {
        for (magic, kind) in MAGICS {
            let mut data = magic.to_vec();
            data.extend_from_slice(&[0xa5; 64]);
            match decompress(kind, &data, 1 << 20) {
                Err(DecompressError::Corrupt(_) | DecompressError::NotCore(_)) => {}
                other => panic!("{kind:?}: {:?}", other.map(|d| d.len())),
            }
        }
    }
}
