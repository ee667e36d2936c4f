//! The file's header: the event attributes, and the feature sections perf
//! stores after the data (build ids, host, architecture, command line).

use crate::arch::Arch;

use super::abi::{
    ATTR_FLAG_SAMPLE_ID_ALL, ATTR_SIZE_VER0, BUILD_ID_MAX, HEADER_ARCH, HEADER_BUILD_ID,
    HEADER_CMDLINE, HEADER_HOSTNAME, HEADER_OSRELEASE, HEADER_VERSION, MAGIC, MAX_BUILD_IDS,
    PERF_RECORD_MISC_BUILD_ID_SIZE,
};
use super::bytes::{read_u16, read_u32, read_u64, until_nul, Fields};
use super::PerfError;

/// One `perf_event_attr`: what an event sampled, and so how its records read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub type_: u32,
    pub config: u64,
    /// The sample period, or the frequency when `freq` is set in `flags`.
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    /// The attribute's flag bits (`disabled`, `inherit`, ... as one word).
    pub flags: u64,
    pub sample_id_all: bool,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    /// The ids the kernel gave this event's instances (one per cpu or thread).
    pub ids: Vec<u64>,
}

/// An entry of the `HEADER_BUILD_ID` feature: the build id of a file that
/// samples hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildIdEntry {
    /// -1 for the host (`perf` files all modules under the host machine).
    pub pid: i32,
    /// The cpumode (`PERF_RECORD_MISC_KERNEL` / `_USER`) in the low bits.
    pub misc: u16,
    pub build_id: Vec<u8>,
    pub filename: String,
}

/// What the file's header and feature sections say.
#[derive(Debug, Default)]
pub struct PerfHeader {
    /// Written by `perf record -o -`: no sections, attributes sent as records.
    pub pipe_mode: bool,
    pub attrs: Vec<Attr>,
    /// `HEADER_ARCH`, `uname -m` of the recording machine (e.g. "x86_64").
    pub arch: Option<String>,
    pub hostname: Option<String>,
    pub os_release: Option<String>,
    pub perf_version: Option<String>,
    /// `HEADER_CMDLINE`: perf's argv (the first entry is perf itself).
    pub cmdline: Option<Vec<String>>,
    pub build_ids: Vec<BuildIdEntry>,
    pub data_offset: u64,
    /// As the header gives it: 0 when `perf record` did not finish writing
    /// the file; the data then runs to the end of the file.
    pub data_size: u64,
    /// The feature bitmap (`HEADER_*` bit numbers; 256 bits).
    pub features: [u64; 4],
    /// The first error met reading the feature sections (a file truncated
    /// in its data loses them): the data can still be read.
    pub feature_error: Option<PerfError>,
}

impl PerfHeader {
    /// The recording machine's architecture: `HEADER_ARCH` when the file
    /// has it, otherwise a guess from the user-register mask perf asks for
    /// by default on each architecture (x86_64 `0xff0fff`; aarch64 x0-x30,
    /// sp, pc: 33 bits).
    pub fn arch(&self) -> Option<Arch> {
        if let Some(name) = &self.arch {
            return name.parse().ok();
        }
        let mask = self.attrs.first()?.sample_regs_user;
        match mask {
            0xff_0fff => Some(Arch::X86_64),
            0x1_ffff_ffff => Some(Arch::Aarch64),
            _ => None,
        }
    }

    pub fn has_feature(&self, feature: u32) -> bool {
        feature < 256 && self.features[(feature / 64) as usize] & (1 << (feature % 64)) != 0
    }
}

pub(super) fn check_magic(magic: &[u8; 8]) -> Result<(), PerfError> {
    if magic == MAGIC {
        return Ok(());
    }
    let mut swapped = *MAGIC;
    swapped.reverse();
    if *magic == swapped {
        return Err(PerfError::Unsupported { offset: 0, what: "big-endian perf.data" });
    }
    if magic == b"PERFFILE" {
        return Err(PerfError::Unsupported { offset: 0, what: "version 1 perf.data (PERFFILE)" });
    }
    Err(PerfError::BadMagic { magic: *magic })
}

/// A `perf_event_attr` at the start of `bytes`, and its size.
pub(super) fn parse_attr(bytes: &[u8]) -> Option<(Attr, usize)> {
    let size = match read_u32(bytes, 4)? as usize {
        0 => ATTR_SIZE_VER0,
        n if n < ATTR_SIZE_VER0 => return None,
        n => n,
    };
    let attr = bytes.get(..size)?;
    let word = |at: usize| read_u64(attr, at).unwrap_or(0);
    let flags = word(40);
    let stack_user = read_u32(attr, 88).unwrap_or(0);
    Some((
        Attr {
            type_: read_u32(attr, 0)?,
            config: word(8),
            sample_period: word(16),
            sample_type: word(24),
            read_format: word(32),
            flags,
            sample_id_all: flags & ATTR_FLAG_SAMPLE_ID_ALL != 0,
            branch_sample_type: word(72),
            sample_regs_user: word(80),
            sample_stack_user: stack_user,
            ids: Vec::new(),
        },
        size,
    ))
}

/// Decode one feature section's contents into the header (features this
/// reader has no use for are ignored).
pub(super) fn decode_feature(
    header: &mut PerfHeader,
    feature: u32,
    data: &[u8],
) -> Result<(), &'static str> {
    let mut fields = Fields::new(data, 0);
    match feature {
        HEADER_BUILD_ID => {
            let mut at = 0;
            while at < data.len() {
                let size = read_u16(data, at + 6).ok_or("truncated build-id entry")?;
                let entry =
                    data.get(at..at + usize::from(size)).ok_or("truncated build-id entry")?;
                let parsed = parse_build_id(entry).ok_or("malformed build-id entry")?;
                if header.build_ids.len() >= MAX_BUILD_IDS {
                    return Err("too many build ids");
                }
                header.build_ids.push(parsed);
                at += usize::from(size);
            }
        }
        HEADER_HOSTNAME => header.hostname = Some(perf_string(&mut fields)?),
        HEADER_OSRELEASE => header.os_release = Some(perf_string(&mut fields)?),
        HEADER_VERSION => header.perf_version = Some(perf_string(&mut fields)?),
        HEADER_ARCH => header.arch = Some(perf_string(&mut fields)?),
        HEADER_CMDLINE => {
            let n = fields.u32().ok_or("truncated string list")?;
            // Every string takes at least its 4-byte length.
            if n as usize > data.len() / 4 {
                return Err("impossible string count");
            }
            let list = (0..n).map(|_| perf_string(&mut fields)).collect::<Result<_, _>>()?;
            header.cmdline = Some(list);
        }
        _ => {}
    }
    Ok(())
}

/// A `perf_header_string`: u32 length, then that many bytes, NUL-padded.
fn perf_string(fields: &mut Fields<'_>) -> Result<String, &'static str> {
    let len = fields.u32().ok_or("truncated string")?;
    let bytes = fields.take(u64::from(len)).ok_or("truncated string")?;
    Ok(String::from_utf8_lossy(until_nul(bytes)).into_owned())
}

/// A `build_id_event`: header, pid, 24 bytes of build id (20 used; the
/// 21st is its size when `PERF_RECORD_MISC_BUILD_ID_SIZE` is set), filename.
pub(super) fn parse_build_id(entry: &[u8]) -> Option<BuildIdEntry> {
    let misc = read_u16(entry, 4)?;
    let pid = read_u32(entry, 8)? as i32;
    let id = entry.get(12..12 + BUILD_ID_MAX)?;
    let len = if misc & PERF_RECORD_MISC_BUILD_ID_SIZE != 0 {
        usize::from(*entry.get(12 + BUILD_ID_MAX)?).min(BUILD_ID_MAX)
    } else {
        BUILD_ID_MAX
    };
    let filename = entry.get(36..)?;
    Some(BuildIdEntry {
        pid,
        misc,
        build_id: id[..len].to_vec(),
        filename: String::from_utf8_lossy(until_nul(filename)).into_owned(),
    })
}
