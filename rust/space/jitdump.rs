//! jitdump files (`jit-PID.dump`): what a JIT tells perf about the code it
//! makes, in perf's format (tools/perf/util/jitdump.h), as CPython 3.13+
//! (`-X perf_jit`), V8 (`--perf-prof`) and the JVM's agents write them: a
//! 40-byte header (magic `JiTD`, version 1, its size, the ELF machine, the
//! pid, a timestamp, flags), then records, each a 16-byte header (id, total
//! size, timestamp) and its body:
//! - `JIT_CODE_LOAD` (0): pid, tid, vma, code address, code size, code index,
//!   the function's name (NUL-terminated), then the code's bytes;
//! - `JIT_CODE_MOVE` (1): pid, tid, vma, old and new address, size, index;
//! - `JIT_CODE_DEBUG_INFO` (2): source lines (not read);
//! - `JIT_CODE_CLOSE` (3): the end;
//! - `JIT_CODE_UNWINDING_INFO` (4): the size of the unwind data, of its
//!   `.eh_frame_hdr` part, and the size perf maps it in; then the data:
//!   `.eh_frame`, then `.eh_frame_hdr`. It is for the code load after it.
//!
//! The unwind data's addresses are relative to its own place (pcrel and
//! datarel encodings), as the JIT laid it out after the code: where it lies
//! is found from its first FDE, which must start at the code's address.
//!
//! A later load of the same addresses wins (code freed and made again), as
//! perf's own `perf inject --jit` has it.

use std::ops::Range;
use std::sync::Arc;

use crate::source::bytes::{le_u32 as u32_at, le_u64 as u64_at};
use crate::source::memory::Data;

const MAGIC: u32 = 0x4a69_5444;
const HEADER: usize = 40;
const RECORD_HEADER: usize = 16;
const CODE_LOAD: u32 = 0;
const CODE_MOVE: u32 = 1;
const CODE_CLOSE: u32 = 3;
const UNWINDING_INFO: u32 = 4;
/// The most code loads read (as a perf map's lines: a hostile or damaged
/// file cannot make the reader keep more).
pub const MAX_LOADS: usize = 4 << 20;

/// Unwind data a code load comes with: the byte ranges of its `.eh_frame`
/// and `.eh_frame_hdr` in the dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unwinding {
    pub eh_frame: Range<usize>,
    pub eh_frame_hdr: Range<usize>,
}

/// A piece of code the JIT made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeLoad {
    pub timestamp: u64,
    /// Its runtime addresses.
    pub start: u64,
    pub size: u64,
    pub name: Box<str>,
    /// Where its bytes are in the dump.
    pub code: Range<usize>,
    pub unwinding: Option<Unwinding>,
}

/// A jitdump file, read.
pub struct JitDump {
    pub data: Arc<Data>,
    pub machine: u32,
    pub pid: u32,
    /// In the order the JIT wrote them.
    pub loads: Vec<CodeLoad>,
}

/// Whether `data` starts as a jitdump does (its `JiTD` magic, little-endian).
pub fn has_magic(data: &[u8]) -> bool {
    u32_at(data, 0) == Some(MAGIC)
}

/// Whether a file's name is a jitdump's (`jit-PID.dump`), which a JIT maps
/// executable so that perf records where it is: data, not code.
pub fn is_jitdump_name(name: &[u8]) -> bool {
    let name = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    name.strip_prefix(b"jit-")
        .and_then(|rest| rest.strip_suffix(b".dump"))
        .is_some_and(|pid| !pid.is_empty() && pid.iter().all(u8::is_ascii_digit))
}

/// [`is_jitdump_name`] of a path.
pub fn is_jitdump_path(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    is_jitdump_name(path.as_os_str().as_bytes())
}

impl JitDump {
    /// The dump in `data`; why it is none. A record cut short (the JIT
    /// still writing, or killed) ends the reading, the loads before it kept.
    pub fn parse(data: Arc<Data>) -> Result<JitDump, String> {
        let bytes: &[u8] = &data;
        match u32_at(bytes, 0) {
            Some(MAGIC) => {}
            Some(m) if m.swap_bytes() == MAGIC => return Err("a big-endian jitdump".to_owned()),
            _ => return Err("not a jitdump (no JiTD magic)".to_owned()),
        }
        let version = u32_at(bytes, 4).unwrap_or(0);
        if version != 1 {
            return Err(format!("jitdump version {version}, not 1"));
        }
        let header = u32_at(bytes, 8).map_or(0, |n| n as usize);
        if header < HEADER || header > bytes.len() {
            return Err(format!("a header of {header} bytes"));
        }
        let machine = u32_at(bytes, 12).unwrap_or(0);
        let pid = u32_at(bytes, 20).unwrap_or(0);
        let mut loads = Vec::new();
        let mut unwinding = None;
        let mut at = header;
        while let (Some(id), Some(size)) = (u32_at(bytes, at), u32_at(bytes, at + 4)) {
            let size = size as usize;
            let Some(end) =
                at.checked_add(size).filter(|&e| size >= RECORD_HEADER && e <= bytes.len())
            else {
                break;
            };
            let timestamp = u64_at(bytes, at + 8).unwrap_or(0);
            let body = at + RECORD_HEADER..end;
            match id {
                CODE_LOAD => {
                    if let Some(load) = code_load(bytes, body, timestamp, unwinding.take()) {
                        loads.push(load);
                    }
                }
                CODE_MOVE => {
                    if let Some(moved) = code_move(bytes, body, timestamp, &loads) {
                        loads.push(moved);
                    }
                }
                UNWINDING_INFO => unwinding = unwinding_info(bytes, body),
                CODE_CLOSE => break,
                _ => {}
            }
            if loads.len() >= MAX_LOADS {
                break;
            }
            at = end;
        }
        Ok(JitDump { data, machine, pid, loads })
    }

    /// The dump at `path` (a regular file, mapped), read.
    pub fn read(path: &std::path::Path) -> Result<JitDump, String> {
        let data = crate::source::files::map(path).map_err(|e| e.to_string())?;
        JitDump::parse(Arc::new(data))
    }

    /// The loads' names, as a perf map (later loads winning).
    pub fn perf_map(&self) -> crate::space::perfmap::PerfMap {
        crate::space::perfmap::PerfMap::from_entries(
            self.loads.iter().map(|l| (l.start, l.size, l.name.clone())),
        )
    }
}

/// A `JIT_CODE_LOAD` record's body at `body`.
fn code_load(
    bytes: &[u8],
    body: Range<usize>,
    timestamp: u64,
    unwinding: Option<Unwinding>,
) -> Option<CodeLoad> {
    let b = bytes.get(body.clone())?;
    let (start, size) = (u64_at(b, 16)?, u64_at(b, 24)?);
    let name_at = 40;
    let name_len = b.get(name_at..)?.iter().position(|&c| c == 0)?;
    let name = String::from_utf8_lossy(&b[name_at..name_at + name_len]).into();
    let code_at = body.start + name_at + name_len + 1;
    let code_end = code_at.checked_add(usize::try_from(size).ok()?)?;
    if size == 0 || code_end > body.end || start.checked_add(size).is_none() {
        return None;
    }
    Some(CodeLoad { timestamp, start, size, name, code: code_at..code_end, unwinding })
}

/// A `JIT_CODE_MOVE` record: the last load at the old address, now at the
/// new one.
fn code_move(
    bytes: &[u8],
    body: Range<usize>,
    timestamp: u64,
    loads: &[CodeLoad],
) -> Option<CodeLoad> {
    let b = bytes.get(body)?;
    let (old, new, size) = (u64_at(b, 16)?, u64_at(b, 24)?, u64_at(b, 32)?);
    let from = loads.iter().rev().find(|l| l.start == old)?;
    new.checked_add(size)?;
    Some(CodeLoad { timestamp, start: new, size, ..from.clone() })
}

/// A `JIT_CODE_UNWINDING_INFO` record's data.
fn unwinding_info(bytes: &[u8], body: Range<usize>) -> Option<Unwinding> {
    let b = bytes.get(body.clone())?;
    let (size, hdr) = (usize::try_from(u64_at(b, 0)?).ok()?, usize::try_from(u64_at(b, 8)?).ok()?);
    let data = body.start + 24;
    let end = data.checked_add(size).filter(|&e| e <= body.end && hdr <= size)?;
    Some(Unwinding { eh_frame: data..end - hdr, eh_frame_hdr: end - hdr..end })
}
