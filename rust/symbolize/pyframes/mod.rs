//! Python frames: the threads of a CPython interpreter read from a
//! process's memory (a core, a live process's snapshot, a minidump with the
//! memory it needs), each with its Python call stack (function, file, line)
//! and whether it holds the GIL, as `pystack` shows them.
//!
//! From `_PyRuntime` (found by [`locate`] in the dynamic symbols of the
//! python3 executable or libpython) to its interpreters, their thread
//! states (each with the OS thread id it runs on), each thread's current
//! frame (3.11 and 3.12: `tstate->cframe->current_frame`; 3.13+:
//! `tstate->current_frame`; 3.10: `tstate->frame`, a frame object) and the
//! chain of frames before it (`previous`; 3.10: `f_back`), each naming its
//! code object. The first frame that a
//! native `_PyEval_EvalFrameDefault` call ran is its entry frame (3.11:
//! marked `is_entry`; 3.12+: the frame before the shim frame that the call
//! pushes on the C stack, which runs no code and is not shown; 3.10: every
//! frame, each run by a call of its own): the frames
//! up to it (innermost first) belong to the innermost eval call of the
//! native stack, the next ones to the next, so that Python frames can be
//! put among the native ones.
//!
//! Memory is whatever the source captured, read through [`ReadMemory`]:
//! garbage there (a core whose heap is missing or zeroed, a race in a live
//! process) stops a thread's walk with a reason, never a panic or a
//! confident wrong frame: every pointer must be readable, code and str
//! objects must have their types (where the module exports them), and
//! every loop is bounded (interpreters, threads, frames; a chain that comes
//! back on itself stops).
//!
//! Versions: 3.10, 3.11 and 3.12 (their offsets built in, see [`layout`]), 3.13 and 3.14
//! (their offsets read from the target's `_Py_DebugOffsets`, see
//! [`debug_offsets`]), the ones tested here.

pub mod debug_offsets;
pub mod layout;
pub mod linetable;
pub mod locate;

use std::collections::{HashMap, HashSet};
use std::fmt;

pub use layout::Layout;
pub use locate::Symbols;

/// The most interpreters, threads per interpreter and frames per thread read.
pub const MAX_INTERPRETERS: usize = 256;
pub const MAX_THREADS: usize = 4096;
pub const MAX_FRAMES: usize = 100_000;
/// The longest str (in characters) and line table (in bytes) read.
const MAX_STR: u64 = 1 << 16;
const MAX_LINETABLE: u64 = 1 << 20;

pub use crate::source::memory::ReadMemory;

/// One Python frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyFrame {
    /// `co_name` (what tracebacks and pystack show) and `co_qualname`.
    pub function: String,
    pub qualname: String,
    pub file: String,
    /// None where the code says the instruction has no line.
    pub line: Option<i64>,
    /// The first frame its native `_PyEval_EvalFrameDefault` call ran.
    pub entry: bool,
    /// Still being set up: its instruction is before its code's first
    /// `RESUME` (`_PyFrame_IsIncomplete`: a call caught between pushing the
    /// frame and running it, `MAKE_CELL` and `COPY_FREE_VARS` first).
    /// CPython's tracebacks, `sys._getframe` and pystack leave it out; it is
    /// kept only to tell which native eval call ran it, when it is one's
    /// first frame.
    pub incomplete: bool,
    /// Address of the `_PyInterpreterFrame`.
    pub address: u64,
}

/// One thread state and its frames, innermost first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyThread {
    /// The OS thread id (`native_thread_id`) and `threading.get_ident()`'s.
    pub native_tid: u64,
    pub thread_id: u64,
    pub holds_gil: bool,
    pub interpreter: usize,
    pub frames: Vec<PyFrame>,
    /// Why the frames end before the bottom of the stack, if they do.
    pub stop: Option<String>,
}

/// Every thread of every interpreter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyState {
    pub version: (u8, u8),
    pub threads: Vec<PyThread>,
    /// Why some of it could not be read (interpreters or threads past a
    /// bad pointer), if anything could not.
    pub warnings: Vec<String>,
}

/// Why no thread could be read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PyError {
    /// A version whose structures stackwalk does not know.
    Version(u8, u8),
    /// The interpreter's state is not in the memory, or makes no sense.
    State(String),
}

impl fmt::Display for PyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PyError::Version(a, b) => write!(
                f,
                "CPython {a}.{b}: Python frames are read for CPython 3.10 to 3.14 only \
                 (the versions tested here)"
            ),
            PyError::State(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for PyError {}

/// Reads of typed values, with the address in the error.
struct Reader<M> {
    mem: M,
}

impl<M: ReadMemory> Reader<M> {
    fn u64(&mut self, address: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.mem.read(address, &mut b).then(|| u64::from_le_bytes(b))
    }

    fn u32(&mut self, address: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.mem.read(address, &mut b).then(|| u32::from_le_bytes(b))
    }

    fn u8(&mut self, address: u64) -> Option<u8> {
        let mut b = [0u8; 1];
        self.mem.read(address, &mut b).then_some(b[0])
    }

    fn bytes(&mut self, address: u64, len: u64) -> Option<Vec<u8>> {
        let mut b = vec![0u8; usize::try_from(len).ok()?];
        self.mem.read(address, &mut b).then_some(b)
    }
}

/// A code object's names and line table, read once per code object.
struct Code {
    name: String,
    qualname: String,
    file: String,
    first_line: i64,
    linetable: Vec<u8>,
    /// `_co_firsttraceable`, where the layout says where it is.
    first_traceable: Option<i64>,
}

struct Walker<M> {
    r: Reader<M>,
    layout: Layout,
    symbols: Symbols,
    codes: HashMap<u64, Code>,
}

/// The Python threads' state read from a live process while it is stopped
/// ([`crate::source::process::WhileStopped`]): the interpreter found among
/// its mappings before the stop, its state read through the stopped
/// process's memory (the pages read are copied into the snapshot, where the
/// frames are read again from the copy).
#[derive(Default)]
pub struct LiveState {
    symbols: Option<Symbols>,
}

impl crate::source::process::WhileStopped for LiveState {
    fn prepare(&mut self, files: &[(&[u8], &str, u64, u64)], page: u64) -> bool {
        self.symbols = locate::in_mappings(files.iter().copied(), page);
        self.symbols.is_some()
    }

    fn read(&mut self, memory: &mut dyn ReadMemory, tids: &[u64]) {
        if let Some(symbols) = &self.symbols {
            let _ = read_state(memory, symbols, tids);
        }
    }
}

/// Read every thread of the interpreter whose symbols (at run-time
/// addresses) are `symbols`. `tids` are the process's OS thread ids, which
/// 3.10's thread states do not hold: each is found in glibc's `struct
/// pthread` at the thread state's `thread_id` (its `pthread_t`), at the
/// offset where every thread state's has one of them (see [`os_tids`]).
pub fn read_state<M: ReadMemory>(
    mem: M,
    symbols: &Symbols,
    tids: &[u64],
) -> Result<PyState, PyError> {
    let (major, minor) = symbols.version;
    let mut r = Reader { mem };
    let layout = match layout::for_version(major, minor) {
        Some(built_in) => *built_in,
        None => debug_offsets::read(&mut r, symbols.runtime, symbols.version)?,
    };
    let mut w = Walker { r, layout, symbols: *symbols, codes: HashMap::new() };
    let mut state = w.state()?;
    if layout.tstate_native_thread_id.is_none() {
        os_tids(&mut w.r, &mut state, tids);
    }
    Ok(state)
}

/// The furthest into glibc's `struct pthread` its `tid` is looked for
/// (720 bytes in on x86_64 with glibc 2.36; found, not assumed).
const MAX_TID_OFFSET: u64 = 2048;

/// 3.10: each thread's OS thread id, from the `struct pthread` its
/// `thread_id` points at, at the first offset where every thread state's
/// holds a distinct one of `tids` (a thread state whose thread has gone
/// keeps 0, as do all when no offset fits: a warning says so).
fn os_tids<M: ReadMemory>(r: &mut Reader<M>, state: &mut PyState, tids: &[u64]) {
    if state.threads.is_empty() {
        return;
    }
    let known: HashSet<u64> = tids.iter().copied().collect();
    let mut best: Option<(usize, Vec<Option<u64>>)> = None;
    for offset in (0..MAX_TID_OFFSET).step_by(4) {
        let found: Vec<Option<u64>> = state
            .threads
            .iter()
            .map(|t| {
                let tid = r.u32(t.thread_id.wrapping_add(offset)).map(u64::from)?;
                (tid != 0 && known.contains(&tid)).then_some(tid)
            })
            .collect();
        let matched: HashSet<u64> = found.iter().flatten().copied().collect();
        if matched.len() != found.iter().flatten().count() {
            continue; // two thread states on one OS thread: not the field
        }
        if best.as_ref().is_none_or(|(n, _)| matched.len() > *n) {
            let all = matched.len() == found.len();
            best = Some((matched.len(), found));
            if all {
                break;
            }
        }
    }
    match best {
        Some((n, found)) if n > 0 && 2 * n > state.threads.len() => {
            for (t, tid) in state.threads.iter_mut().zip(found) {
                t.native_tid = tid.unwrap_or(0);
            }
            if n < state.threads.len() {
                state.warnings.push(format!(
                    "{} thread states have no OS thread (found by their pthread_t)",
                    state.threads.len() - n
                ));
            }
        }
        _ => state.warnings.push(
            "the thread states' OS threads are not found (3.10 keeps only a pthread_t, and no \
             glibc struct pthread at it holds one of the process's thread ids)"
                .to_owned(),
        ),
    }
}

fn hex(a: u64) -> String {
    format!("{a:#x}")
}

impl<M: ReadMemory> Walker<M> {
    fn state(&mut self) -> Result<PyState, PyError> {
        let l = self.layout;
        let runtime = self.symbols.runtime;
        let head = self.r.u64(runtime + l.runtime_interpreters_head).ok_or_else(|| {
            PyError::State(format!("_PyRuntime at {} is not in the memory captured", hex(runtime)))
        })?;
        if head == 0 {
            return Err(PyError::State(
                "no interpreter: _PyRuntime.interpreters.head is NULL (not yet initialized, \
                 finalized, or the memory is zeroed)"
                    .to_owned(),
            ));
        }
        let mut out = PyState { version: l.version, threads: Vec::new(), warnings: Vec::new() };
        let mut seen = HashSet::new();
        let mut interp = head;
        for index in 0..MAX_INTERPRETERS {
            if interp == 0 {
                break;
            }
            if !seen.insert(interp) {
                out.warnings.push(format!("interpreter list loops back to {}", hex(interp)));
                break;
            }
            let Some(first) = self.r.u64(interp + l.interp_threads_head) else {
                out.warnings
                    .push(format!("interpreter {index} at {} is not in the memory", hex(interp)));
                break;
            };
            let holder = self.gil_holder(interp);
            self.threads(index, first, holder, &mut out);
            match self.r.u64(interp + l.interp_next) {
                Some(next) => interp = next,
                None => break,
            }
            if index + 1 == MAX_INTERPRETERS && interp != 0 {
                out.warnings.push(format!("more than {MAX_INTERPRETERS} interpreters"));
            }
        }
        if out.threads.is_empty() && !out.warnings.is_empty() {
            return Err(PyError::State(out.warnings.join("; ")));
        }
        Ok(out)
    }

    /// The thread state that holds the GIL `interp` uses, if it is held.
    fn gil_holder(&mut self, interp: u64) -> Option<u64> {
        let (gil, locked, last_holder) = match self.layout.gil {
            layout::Gil::Runtime { last_holder, locked } => {
                (self.symbols.runtime, locked, last_holder)
            }
            layout::Gil::Interpreter { ceval_gil, locked, last_holder } => {
                (self.r.u64(interp + ceval_gil).filter(|&g| g != 0)?, locked, last_holder)
            }
        };
        let locked = self.r.u32(gil + locked).unwrap_or(0) != 0;
        self.r.u64(gil + last_holder).filter(|_| locked)
    }

    fn threads(&mut self, index: usize, first: u64, holder: Option<u64>, out: &mut PyState) {
        let l = self.layout;
        let mut seen = HashSet::new();
        let mut tstate = first;
        let mut count = 0;
        while tstate != 0 {
            if count == MAX_THREADS {
                out.warnings.push(format!("interpreter {index}: more than {MAX_THREADS} threads"));
                return;
            }
            count += 1;
            if !seen.insert(tstate) {
                out.warnings.push(format!("interpreter {index}: thread list loops"));
                return;
            }
            let native = match l.tstate_native_thread_id {
                Some(offset) => self.r.u64(tstate + offset),
                None => Some(0), // 3.10: found after (os_tids)
            };
            let fields = (
                self.r.u64(tstate + l.tstate_interp),
                native,
                self.r.u64(tstate + l.tstate_thread_id),
                self.r.u64(tstate + l.tstate_next),
            );
            let (Some(_), Some(native_tid), Some(thread_id), Some(next)) = fields else {
                out.warnings.push(format!(
                    "interpreter {index}: thread state at {} is not in the memory",
                    hex(tstate)
                ));
                return;
            };
            let (frames, stop) = self.frames(tstate);
            out.threads.push(PyThread {
                native_tid,
                thread_id,
                holds_gil: holder == Some(tstate),
                interpreter: index,
                frames,
                stop,
            });
            tstate = next;
        }
    }

    /// The thread's frames, innermost first, and why they end early.
    fn frames(&mut self, tstate: u64) -> (Vec<PyFrame>, Option<String>) {
        let l = self.layout;
        let mut frames: Vec<PyFrame> = Vec::new();
        let mut frame = match l.current_frame {
            layout::CurrentFrame::Cframe { tstate_cframe, cframe_current_frame } => {
                let Some(cframe) = self.r.u64(tstate + tstate_cframe) else {
                    return (frames, Some(format!("thread state {}: no cframe", hex(tstate))));
                };
                if cframe == 0 {
                    return (frames, None);
                }
                let Some(frame) = self.r.u64(cframe + cframe_current_frame) else {
                    return (
                        frames,
                        Some(format!("cframe at {} is not in the memory", hex(cframe))),
                    );
                };
                frame
            }
            layout::CurrentFrame::Direct { tstate_current_frame } => {
                let Some(frame) = self.r.u64(tstate + tstate_current_frame) else {
                    return (frames, Some(format!("thread state {}: no frame", hex(tstate))));
                };
                frame
            }
        };
        let mut seen = HashSet::new();
        while frame != 0 {
            if frames.len() == MAX_FRAMES {
                return (frames, Some(format!("more than {MAX_FRAMES} frames")));
            }
            if !seen.insert(frame) {
                return (frames, Some(format!("the frame chain loops back to {}", hex(frame))));
            }
            match self.frame(frame) {
                Ok((Some(f), previous)) => {
                    frames.push(f);
                    frame = previous;
                }
                Ok((None, previous)) => {
                    // A native eval call's shim: the frame before it is the
                    // first that call ran.
                    if let Some(last) = frames.last_mut() {
                        last.entry = true;
                    }
                    frame = previous;
                }
                Err(why) => return (frames, Some(why)),
            }
        }
        (frames, None)
    }

    /// The frame at `address` (None: a native eval call's shim frame, 3.13+)
    /// and the address of the one before it.
    fn frame(&mut self, address: u64) -> Result<(Option<PyFrame>, u64), String> {
        let l = self.layout;
        let missing = || format!("frame at {} is not in the memory", hex(address));
        let previous = self.r.u64(address + l.frame_previous).ok_or_else(missing)?;
        let owner = match l.entry {
            layout::Entry::FrameObject => layout::FRAME_OWNED_BY_THREAD, // 3.10: no owner
            _ => self.r.u8(address + l.frame_owner).ok_or_else(missing)?,
        };
        let entry = match l.entry {
            layout::Entry::Flag { is_entry } => {
                let entry = self.r.u8(address + is_entry).ok_or_else(missing)?;
                if entry > 1 || owner > layout::FRAME_OWNED_BY_FRAME_OBJECT {
                    return Err(format!(
                        "frame at {} is not a frame (is_entry {entry}, owner {owner})",
                        hex(address)
                    ));
                }
                entry == 1
            }
            layout::Entry::FrameObject => {
                self.check_type(address, self.symbols.frame_type)
                    .map_err(|e| format!("frame object at {}: {e}", hex(address)))?;
                true
            }
            layout::Entry::Shim { min_owner, max_owner } => {
                if owner > max_owner {
                    return Err(format!(
                        "frame at {} is not a frame (owner {owner})",
                        hex(address)
                    ));
                }
                if owner >= min_owner {
                    return Ok((None, previous));
                }
                false // marked when the shim before it is read
            }
        };
        let code = self.r.u64(address + l.frame_code).ok_or_else(missing)? & !l.code_tag_bits;
        let instr = match l.entry {
            layout::Entry::FrameObject => self.r.u32(address + l.frame_instr).map(u64::from),
            _ => self.r.u64(address + l.frame_instr),
        };
        let instr = instr.ok_or_else(missing)?;
        self.code(code)?;
        let Some(c) = self.codes.get(&code) else {
            return Err(format!("frame at {}: code object unread", hex(address)));
        };
        let (units, line) = match l.entry {
            layout::Entry::FrameObject => {
                // f_lasti: the index of the code unit last run (-1: none yet)
                let units = i64::from(instr as u32 as i32);
                (units, linetable::line_of_310(&c.linetable, c.first_line, units * 2))
            }
            _ => {
                // prev_instr points at the code unit before the next
                // instruction (2 bytes each): the instruction being run, or
                // the call being made.
                let first = code + l.code_instructions;
                let units = (instr as i64).wrapping_sub(first as i64) / 2;
                (units, linetable::line_of(&c.linetable, c.first_line, units.saturating_mul(2)))
            }
        };
        let incomplete = owner != layout::FRAME_OWNED_BY_GENERATOR
            && c.first_traceable.is_some_and(|first| units < first);
        let frame = PyFrame {
            function: c.name.clone(),
            qualname: c.qualname.clone(),
            file: c.file.clone(),
            line,
            entry,
            incomplete,
            address,
        };
        Ok((Some(frame), previous))
    }

    /// Read the code object at `address` into the cache.
    fn code(&mut self, address: u64) -> Result<(), String> {
        if self.codes.contains_key(&address) {
            return Ok(());
        }
        let l = self.layout;
        let bad = |what: &str| format!("code object at {}: {what}", hex(address));
        self.check_type(address, self.symbols.code_type).map_err(|e| bad(&e))?;
        let field = |r: &mut Reader<M>, off: u64| r.u64(address + off);
        // 3.10's code objects have no qualified name: co_name stands for it
        let (Some(name), Some(qualname), Some(file), Some(table), Some(first_line)) = (
            field(&mut self.r, l.code_name),
            field(&mut self.r, l.code_qualname.unwrap_or(l.code_name)),
            field(&mut self.r, l.code_filename),
            field(&mut self.r, l.code_linetable),
            self.r.u32(address + l.code_firstlineno),
        ) else {
            return Err(bad("not in the memory"));
        };
        let name = self.string(name).map_err(|e| bad(&format!("co_name: {e}")))?;
        let qualname = self.string(qualname).map_err(|e| bad(&format!("co_qualname: {e}")))?;
        let file = self.string(file).map_err(|e| bad(&format!("co_filename: {e}")))?;
        let linetable = self.bytes_object(table).map_err(|e| bad(&format!("co_linetable: {e}")))?;
        let first_traceable = l
            .code_first_traceable
            .map(|offset| self.r.u32(address + offset).ok_or_else(|| bad("not in the memory")))
            .transpose()?
            .map(|first| i64::from(first as i32));
        let code = Code {
            name,
            qualname,
            file,
            first_line: i64::from(first_line as i32),
            linetable,
            first_traceable,
        };
        self.codes.insert(address, code);
        Ok(())
    }

    /// That the object at `address` has the type at `expected` (when known).
    fn check_type(&mut self, address: u64, expected: Option<u64>) -> Result<(), String> {
        let ty = self
            .r
            .u64(address + self.layout.object_type)
            .ok_or_else(|| format!("{} is not in the memory", hex(address)))?;
        match expected {
            Some(t) if t != ty => Err(format!("wrong type ({} is not {})", hex(ty), hex(t))),
            _ => Ok(()),
        }
    }

    /// A bytes object's contents.
    fn bytes_object(&mut self, address: u64) -> Result<Vec<u8>, String> {
        self.check_type(address, self.symbols.bytes_type)?;
        let l = self.layout;
        let size = self.r.u64(address + l.var_size).ok_or("not in the memory")?;
        if size > MAX_LINETABLE {
            return Err(format!("{size} bytes long"));
        }
        self.r
            .bytes(address + l.bytes_data, size)
            .ok_or_else(|| "contents not in the memory".into())
    }

    /// A str object (compact: the only kind code objects hold).
    fn string(&mut self, address: u64) -> Result<String, String> {
        self.check_type(address, self.symbols.unicode_type)?;
        let l = self.layout;
        let (Some(length), Some(state)) =
            (self.r.u64(address + l.unicode_length), self.r.u32(address + l.unicode_state))
        else {
            return Err("not in the memory".into());
        };
        if length > MAX_STR {
            return Err(format!("{length} characters long"));
        }
        let kind = (state >> 2) & 7;
        let compact = state & (1 << 5) != 0;
        let ascii = state & (1 << 6) != 0;
        if !compact {
            return Err("not a compact str".into());
        }
        let (data, width) = if ascii {
            (address + l.unicode_ascii_data, 1)
        } else {
            match kind {
                1 | 2 | 4 => (address + l.unicode_compact_data, u64::from(kind)),
                _ => return Err(format!("str of kind {kind}")),
            }
        };
        let raw = self.r.bytes(data, length * width).ok_or("characters not in the memory")?;
        let text = match width {
            1 => raw.iter().map(|&b| char::from(b)).collect(),
            2 => raw
                .chunks_exact(2)
                .map(|c| {
                    char::from_u32(u32::from(u16::from_le_bytes([c[0], c[1]])))
                        .unwrap_or('\u{fffd}')
                })
                .collect(),
            _ => raw
                .chunks_exact(4)
                .map(|c| {
                    char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .unwrap_or('\u{fffd}')
                })
                .collect(),
        };
        Ok(text)
    }
}

/// The thread's frames split by native eval call, innermost first: each
/// group is the frames one `_PyEval_EvalFrameDefault` call runs, its entry
/// frame last. Frames after the last entry frame (a chain cut short) form
/// a last group of their own.
pub fn split_by_entry(frames: &[PyFrame]) -> Vec<&[PyFrame]> {
    let mut groups = Vec::new();
    let mut start = 0;
    for (i, f) in frames.iter().enumerate() {
        if f.entry {
            groups.push(&frames[start..=i]);
            start = i + 1;
        }
    }
    if start < frames.len() {
        groups.push(&frames[start..]);
    }
    groups
}

#[cfg(test)]
mod tests;
