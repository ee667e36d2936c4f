//! PDB files (Microsoft's program databases, MSF 7.00: what MSVC's and
//! lld's `/DEBUG` write), read with `pdb-addr2line` (on the maintained
//! `pdb2` reader): a Windows module's functions (procedures and public
//! symbols, MSVC-decorated names undecorated), source lines and inlined
//! functions (`S_INLINESITE`), and an x86 module's frame data (its FPO and
//! frame data streams: the `STACK WIN` records `dump_syms` would write, see
//! [`crate::unwind::frame_data`]), for a module whose PDB is at hand instead
//! of its Breakpad symbol file. A file is opened once per process
//! (`crate::symbolize::symbols_file`); its function table and frame data are read then, its
//! lines and inline sites as addresses ask for them.
//!
//! Its identity is the debug id a dump's CodeView record names: the PDB
//! information stream's GUID and the DBI stream's age (its own where the
//! DBI stream has none), as Breakpad prints them.
//!
//! The reader is another project's, fuzzed here (the `pdb` target): a panic
//! in it on a damaged file (its fuzzing found an addition that overflows in
//! builds with overflow checks) is caught here and makes the file unusable
//! (or the lookup empty), as any error of the reader does.

use std::collections::HashMap;
use std::io::Cursor;
use std::ops::Range;
use std::sync::Mutex;

use pdb_addr2line::pdb::{FallibleIterator, FrameType, PDB};
use pdb_addr2line::ContextPdbData;

use crate::arch::Arch;
use crate::source::memory::Data;
use crate::symbolize::lines::SourceFrame;
use crate::symbolize::stack_win::{find_win_frame, push_win_frame, WinFrame};
use crate::unwind::cfi::{LookupError, Row};
use crate::unwind::frame_data::FrameData;

pub use crate::space::symserver::{is_pdb_file as is_pdb, PDB_MAGIC as MAGIC};

/// A file's bytes as the PDB reader reads them.
struct Bytes(Data);

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes", self.0.len())
    }
}

type Reader = ContextPdbData<'static, 'static, Cursor<Bytes>>;

/// One PDB's symbols.
pub struct PdbSymbols {
    debug_id: String,
    /// (start RVA, end RVA, name) of every function, sorted by start.
    functions: Vec<(u32, u32, Box<str>)>,
    /// Frame data: [programs, FPO], as a `.sym` file's `STACK WIN` records
    /// (each program an index into `programs`).
    win: [Vec<WinFrame<u32>>; 2],
    programs: Vec<Box<str>>,
    reader: Mutex<Reader>,
    /// The frames found at an RVA (innermost first), kept.
    frames: Mutex<HashMap<u32, Vec<SourceFrame>>>,
}

fn error(e: impl std::fmt::Display) -> String {
    format!("not a PDB file that can be read: {e}")
}

/// `f`, or `panicked` where the PDB reader panics in it.
fn guarded<T>(panicked: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(panicked)
}

impl PdbSymbols {
    /// The PDB in `data`.
    pub fn parse(data: Data) -> Result<PdbSymbols, String> {
        let failed = Err("a damaged PDB file (the reader failed on it)".to_owned());
        guarded(failed, || PdbSymbols::read(data))
    }

    fn read(data: Data) -> Result<PdbSymbols, String> {
        if !data.starts_with(MAGIC) {
            return Err("not a PDB file (no MSF 7.00 header)".to_owned());
        }
        let mut pdb = PDB::open(Cursor::new(Bytes(data))).map_err(error)?;
        let info = pdb.pdb_information().map_err(error)?;
        let age = pdb.debug_information().ok().and_then(|d| d.age()).unwrap_or(info.age);
        let debug_id = breakpad_id(info.guid.as_fields(), age);
        // A PDB without frame data (any x64 one) has no such stream.
        let (win, programs) = frame_data(&mut pdb).unwrap_or_default();
        let reader = ContextPdbData::try_from_pdb(pdb).map_err(error)?;
        let functions = {
            let context = reader.make_context().map_err(error)?;
            let mut all: Vec<(u32, Option<u32>, Box<str>)> = context
                .functions()
                .map(|f| (f.start_rva, f.end_rva, undecorated(f.name.as_deref().unwrap_or(""))))
                .collect();
            all.sort_by_key(|f| f.0);
            all.dedup_by_key(|f| f.0);
            // A function without an end (a public symbol) reaches the next one.
            let starts: Vec<u32> = all.iter().map(|f| f.0).collect();
            all.into_iter()
                .enumerate()
                .map(|(i, (start, end, name))| {
                    let next = starts.get(i + 1).copied().unwrap_or(start.saturating_add(1));
                    (start, end.unwrap_or(next).max(start.saturating_add(1)), name)
                })
                .collect()
        };
        Ok(PdbSymbols {
            debug_id,
            functions,
            win,
            programs,
            reader: Mutex::new(reader),
            frames: Mutex::new(HashMap::new()),
        })
    }

    /// The debug id of the module this file is the PDB of.
    pub fn debug_id(&self) -> &str {
        &self.debug_id
    }

    fn function(&self, address: u64) -> Option<&(u32, u32, Box<str>)> {
        let rva = u32::try_from(address).ok()?;
        let i = self.functions.partition_point(|f| f.0 <= rva).checked_sub(1)?;
        let f = &self.functions[i];
        (rva < f.1).then_some(f)
    }

    /// The function at `address` (an RVA) and its start.
    pub fn lookup(&self, address: u64) -> Option<(&str, u64)> {
        self.function(address).map(|f| (&*f.2, u64::from(f.0)))
    }

    /// The functions at `address` (an RVA), innermost first: the innermost
    /// at its line, each next one (the function it was inlined into) at the
    /// call site.
    pub fn frames(&self, address: u64) -> Vec<SourceFrame> {
        let Ok(rva) = u32::try_from(address) else { return Vec::new() };
        let mut cache = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(frames) = cache.get(&rva) {
            return frames.clone();
        }
        let frames = self.read_frames(rva);
        cache.insert(rva, frames.clone());
        frames
    }

    fn read_frames(&self, rva: u32) -> Vec<SourceFrame> {
        guarded(Vec::new(), || self.read_frames_unguarded(rva))
    }

    fn read_frames_unguarded(&self, rva: u32) -> Vec<SourceFrame> {
        let reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let Ok(context) = reader.make_context() else { return Vec::new() };
        let Ok(Some(found)) = context.find_frames(rva) else { return Vec::new() };
        found
            .frames
            .into_iter()
            .map(|f| SourceFrame {
                function: f.function.as_deref().map(undecorated).map(String::from),
                file: f.file.map(|s| s.into_owned()),
                line: f.line,
                column: None,
            })
            .collect()
    }
}

/// Frame data records: [programs, FPO], each program an index.
type WinFrames = [Vec<WinFrame<u32>>; 2];

/// The PDB's frame data records, as [`PdbSymbols::win`] keeps them: the
/// frame data stream's (its programs: type 4) and the FPO stream's (type
/// 0), at their RVAs, overlapping records handled as a `.sym` file's are.
fn frame_data(
    pdb: &mut PDB<'static, Cursor<Bytes>>,
) -> pdb_addr2line::pdb::Result<(WinFrames, Vec<Box<str>>)> {
    let table = pdb.frame_table()?;
    let map = pdb.address_map()?;
    let strings = pdb.string_table().ok();
    let mut records: Vec<(usize, WinFrame<u32>)> = Vec::new();
    let mut programs: Vec<Box<str>> = Vec::new();
    let mut iter = table.iter();
    while let Some(f) = iter.next()? {
        let Some(rva) = f.code_start.to_rva(&map) else { continue };
        let list = match f.ty {
            FrameType::FrameData => 0,
            FrameType::FPO => 1,
            _ => continue,
        };
        let text = f.program.and_then(|r| Some(strings.as_ref()?.get(r).ok()?.to_string()));
        let program = text.filter(|t| !t.trim().is_empty()).map(|t| {
            programs.push(t.trim().into());
            programs.len() as u32 - 1
        });
        let frame = WinFrame {
            address: u64::from(rva.0),
            size: u64::from(f.code_size),
            params: f.params_size,
            saved: u32::from(f.saved_regs_size),
            locals: f.locals_size,
            program,
            allocates_base_pointer: f.uses_base_pointer,
        };
        records.push((list, frame));
    }
    // In address order, as a `.sym` file lists them.
    records.sort_by_key(|(_, f)| f.address);
    let mut win: [Vec<WinFrame<u32>>; 2] = [Vec::new(), Vec::new()];
    for (list, frame) in records {
        push_win_frame(&mut win[list], frame);
    }
    Ok((win, programs))
}

/// Breakpad's debug id of a PDB: its GUID's fields as Windows prints them,
/// then the age in hex.
fn breakpad_id((d1, d2, d3, d4): (u32, u16, u16, &[u8; 8]), age: u32) -> String {
    let rest: String = d4.iter().map(|b| format!("{b:02X}")).collect();
    format!("{d1:08X}{d2:04X}{d3:04X}{rest}{age:X}")
}

/// An MSVC-decorated name (`?name@@...`) undecorated as `llvm-undname`
/// prints it; others as they are.
fn undecorated(name: &str) -> Box<str> {
    if name.starts_with('?') {
        if let Ok(plain) = msvc_demangler::demangle(name, msvc_demangler::DemangleFlags::llvm()) {
            return plain.into();
        }
    }
    name.into()
}

impl crate::unwind::cfi::ForeignCfi for PdbSymbols {
    fn row(
        &self,
        _arch: Arch,
        _offset: u64,
        _exact: bool,
    ) -> Result<(Row, Range<u64>), LookupError> {
        Err(LookupError::NoFde)
    }

    fn function_start(&self, offset: u64) -> bool {
        self.function(offset).is_some_and(|f| u64::from(f.0) == offset)
    }

    fn functions(&self) -> Vec<Range<u64>> {
        self.functions.iter().map(|f| u64::from(f.0)..u64::from(f.1)).collect()
    }

    fn frame_data(&self, offset: u64) -> Option<FrameData<'_>> {
        let w = find_win_frame(&self.win, offset)?;
        Some(w.data(|i| self.programs.get(i as usize).map_or("", |p| &**p)))
    }

    fn parameter_size(&self, offset: u64) -> Option<u32> {
        find_win_frame(&self.win, offset).map(|w| w.params)
    }
}

impl PdbSymbols {
    /// Whether the PDB has x86 frame data.
    pub fn has_frame_data(&self) -> bool {
        self.win.iter().any(|list| !list.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names() {
        let d4 = [0x4c, 0x4c, 0x44, 0x20, 0x50, 0x44, 0x42, 0x2e];
        let id = breakpad_id((0x503b_df83, 0x77ce, 0x170c, &d4), 1);
        assert_eq!(id, "503BDF8377CE170C4C4C44205044422E1");
        assert_eq!(&*undecorated("?f@@YAHH@Z"), "int __cdecl f(int)");
        assert_eq!(&*undecorated("recurse(int)"), "recurse(int)");
        let bad = PdbSymbols::parse(Data::Owned(
            b"Microsoft C/C++ MSF 7.00\r\n\x1aDS\0\0\0junk".to_vec(),
        ));
        assert!(bad.is_err());
        assert!(PdbSymbols::parse(Data::Owned(b"MODULE windows x86 0 a.pdb\n".to_vec())).is_err());
    }
}
