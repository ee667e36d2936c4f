//! Compressed cores: systemd-coredump writes its cores as zstd (its
//! default), xz or lz4 files, and a core kept by hand is often gzipped.
//! A file is recognised by its magic bytes, whatever its name, and
//! decompressed into memory by the pure-Rust decoders (ruzstd, lzma-rs,
//! lz4_flex, flate2), at most a given size: a file that would decompress
//! to more (a decompression bomb, or a core larger than asked for) is an
//! error, found before more than that size is held.

use std::fmt;
use std::io::{self, Read, Write};

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

/// Why a compressed file could not be decompressed.
#[derive(Debug)]
#[non_exhaustive]
pub enum DecompressError {
    /// It decompresses to more than the limit (the limit, in bytes).
    TooLarge(u64),
    /// The compressed data is damaged or cut short.
    Corrupt(String),
}

impl fmt::Display for DecompressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecompressError::TooLarge(limit) => {
                write!(f, "decompresses to more than {limit} bytes (the limit on a core's size)")
            }
            DecompressError::Corrupt(why) => write!(f, "damaged or cut short ({why})"),
        }
    }
}

/// A sink that holds at most `limit` bytes: one more is an error.
struct Bounded {
    data: Vec<u8>,
    limit: u64,
    over: bool,
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.limit.saturating_sub(self.data.len() as u64);
        if buf.len() as u64 > room {
            self.over = true;
            return Err(io::Error::other("over the limit"));
        }
        self.data.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Bounded {
    /// Everything `reader` gives, through this sink.
    fn drain(&mut self, reader: &mut impl Read) -> io::Result<()> {
        io::copy(reader, self).map(|_| ())
    }

    fn finish(self, result: Result<(), String>) -> Result<Vec<u8>, DecompressError> {
        match result {
            _ if self.over => Err(DecompressError::TooLarge(self.limit)),
            Err(why) => Err(DecompressError::Corrupt(why)),
            Ok(()) => Ok(self.data),
        }
    }
}

/// `data`, a `kind` file, decompressed: at most `limit` bytes of it.
pub fn decompress(kind: Compression, data: &[u8], limit: u64) -> Result<Vec<u8>, DecompressError> {
    let mut out = Bounded { data: Vec::new(), limit, over: false };
    let result = match kind {
        Compression::Zstd => zstd_frames(data, &mut out),
        Compression::Xz => lzma_rs::xz_decompress(&mut io::BufReader::new(data), &mut out)
            .map_err(|e| e.to_string()),
        Compression::Lz4 => {
            out.drain(&mut lz4_flex::frame::FrameDecoder::new(data)).map_err(|e| e.to_string())
        }
        Compression::Lz4Legacy => lz4_legacy(data, &mut out),
        Compression::Gzip => {
            out.drain(&mut flate2::read::MultiGzDecoder::new(data)).map_err(|e| e.to_string())
        }
    };
    out.finish(result)
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

    /// lz4's legacy format, made by hand: the magic, then each block after
    /// its compressed size; two streams one after another.
    #[test]
    fn lz4_legacy_streams_and_their_damage() {
        let (a, b) = (vec![7u8; 100_000], b"core".repeat(5000));
        let mut file = Vec::new();
        for part in [&a[..], &b[..]] {
            let block = lz4_flex::block::compress(part);
            file.extend_from_slice(LZ4_LEGACY_MAGIC);
            file.extend_from_slice(&(block.len() as u32).to_le_bytes());
            file.extend_from_slice(&block);
        }
        let whole = decompress(Compression::Lz4Legacy, &file, 1 << 20).unwrap();
        assert_eq!(whole, [a.clone(), b].concat());
        assert!(matches!(
            decompress(Compression::Lz4Legacy, &file, 100_001),
            Err(DecompressError::TooLarge(100_001))
        ));
        let cut = decompress(Compression::Lz4Legacy, &file[..file.len() - 1], 1 << 20);
        assert!(matches!(cut, Err(DecompressError::Corrupt(_))), "{cut:?}");
        let tail = [&file[..], &[1, 2]].concat();
        let extra = decompress(Compression::Lz4Legacy, &tail, 1 << 20);
        assert!(matches!(extra, Err(DecompressError::Corrupt(_))), "{extra:?}");
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
                Err(DecompressError::Corrupt(_)) => {}
                other => panic!("{kind:?}: {other:?}"),
            }
        }
    }
}
