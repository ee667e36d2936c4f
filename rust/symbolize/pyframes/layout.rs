//! Where CPython keeps what a stack walk reads, by version: byte offsets
//! into `_PyRuntime`, the interpreter and thread states, frames, code,
//! bytes and str objects (x86_64 and aarch64, LP64).
//!
//! 3.10's, 3.11's and 3.12's offsets are built in: those of pyenv's 3.10.13,
//! Debian's python3.11 (3.11.7) and pyenv's 3.12.1 headers, `offsetof` of each field with
//! `Py_BUILD_CORE` (the tests check them against the installed headers). 3.13 and 3.14
//! say theirs in the target's own memory, the `_Py_DebugOffsets` table at
//! the start of `_PyRuntime` ([`super::debug_offsets`] reads it into a
//! [`Layout`]). Other versions are refused by name rather than read with a
//! layout that is not theirs.

/// Offsets of one CPython version's structures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: (u8, u8),
    /// `_PyRuntimeState.interpreters.head`
    pub runtime_interpreters_head: u64,
    /// Where the GIL's `locked` and `last_holder` are.
    pub gil: Gil,
    /// `PyInterpreterState.next`, `.threads.head`
    pub interp_next: u64,
    pub interp_threads_head: u64,
    /// `PyThreadState.next`, `.interp`, `.thread_id`, `.native_thread_id`
    /// (3.11+; 3.10's OS thread id is found through its `pthread_t`,
    /// `thread_id`: see [`super::read_state`])
    pub tstate_next: u64,
    pub tstate_interp: u64,
    pub tstate_thread_id: u64,
    pub tstate_native_thread_id: Option<u64>,
    /// How a thread state leads to its innermost frame.
    pub current_frame: CurrentFrame,
    /// `_PyInterpreterFrame.f_code` (3.13+: `.f_executable`), `.previous`,
    /// `.prev_instr` (3.13+: `.instr_ptr`, the same place for a line:
    /// the instruction being run, or the call being made), `.owner`; 3.10
    /// ([`Entry::FrameObject`]): `PyFrameObject.f_code`, `.f_back`,
    /// `.f_lasti` (an `int`: the index of the code unit last run), no owner
    pub frame_code: u64,
    pub frame_previous: u64,
    pub frame_instr: u64,
    pub frame_owner: u64,
    /// How the frames a native eval call runs are told apart.
    pub entry: Entry,
    /// Low bits of `f_executable` that are tags, not address (3.14's
    /// `_PyStackRef`: `Py_TAG_BITS`, 3 with the GIL); 0 before.
    pub code_tag_bits: u64,
    /// `PyCodeObject.co_filename`, `.co_name`, `.co_qualname` (3.11+),
    /// `.co_linetable`, `.co_firstlineno`, `.co_code_adaptive` (3.11+: 3.10's
    /// frames give an index, not an address)
    pub code_filename: u64,
    pub code_name: u64,
    pub code_qualname: Option<u64>,
    pub code_linetable: u64,
    pub code_firstlineno: u64,
    pub code_instructions: u64,
    /// `PyCodeObject._co_firsttraceable` (an int: the code unit of the
    /// first `RESUME`; a frame whose instruction is before it is still
    /// being set up, and CPython shows it nowhere), where the layout says
    /// it.
    pub code_first_traceable: Option<u64>,
    /// `PyObject.ob_type`
    pub object_type: u64,
    /// `PyVarObject.ob_size`, `PyBytesObject.ob_sval`
    pub var_size: u64,
    pub bytes_data: u64,
    /// `PyASCIIObject.length`, `.state`; `sizeof(PyASCIIObject)` and
    /// `sizeof(PyCompactUnicodeObject)`: where a compact str's characters
    /// start (ASCII, else one, two or four bytes each).
    pub unicode_length: u64,
    pub unicode_state: u64,
    pub unicode_ascii_data: u64,
    pub unicode_compact_data: u64,
}

/// Where the GIL is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gil {
    /// 3.11: one GIL in the runtime, `_PyRuntimeState.ceval.gil.last_holder`
    /// and `.locked`.
    Runtime { last_holder: u64, locked: u64 },
    /// 3.12+: each interpreter's `ceval.gil` points at the GIL it uses (its
    /// own, or the main interpreter's), where `locked` and `last_holder` are
    /// at these offsets.
    Interpreter { ceval_gil: u64, locked: u64, last_holder: u64 },
}

/// How a thread state leads to its innermost frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CurrentFrame {
    /// 3.11: `tstate->cframe->current_frame`.
    Cframe { tstate_cframe: u64, cframe_current_frame: u64 },
    /// 3.13+: `tstate->current_frame`.
    Direct { tstate_current_frame: u64 },
}

/// How the frames of one native `_PyEval_EvalFrameDefault` call are marked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// 3.11: the first frame the call ran has `is_entry` (a byte) set.
    Flag { is_entry: u64 },
    /// 3.12+: each call pushes a frame of its own on the C stack, a shim that
    /// runs no code, before the frames it runs; a frame whose `owner` is at
    /// least `min_owner` is one (3.13: `FRAME_OWNED_BY_CSTACK` 3; 3.14:
    /// `FRAME_OWNED_BY_INTERPRETER` 3 and `FRAME_OWNED_BY_CSTACK` 4), and the
    /// most an owner can be is `max_owner`.
    Shim { min_owner: u8, max_owner: u8 },
    /// 3.10: frames are `PyFrameObject`s, and each is run by a native eval
    /// call of its own (`_PyEval_EvalFrameDefault(tstate, f, throwflag)`).
    /// Lines come from 3.10's line table ([`super::linetable::line_of_310`]).
    FrameObject,
}

/// `_PyInterpreterFrame.owner`: a frame of a thread's stack.
pub const FRAME_OWNED_BY_THREAD: u8 = 0;
/// A generator's or coroutine's frame, run by a thread's frame.
pub const FRAME_OWNED_BY_GENERATOR: u8 = 1;
/// A frame kept alive by a frame object after it returned.
pub const FRAME_OWNED_BY_FRAME_OBJECT: u8 = 2;

/// CPython 3.11 (checked against 3.11.7's headers).
pub const PY311: Layout = Layout {
    version: (3, 11),
    runtime_interpreters_head: 40,
    gil: Gil::Runtime { last_holder: 368, locked: 376 },
    interp_next: 0,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_interp: 16,
    tstate_thread_id: 152,
    tstate_native_thread_id: Some(160),
    current_frame: CurrentFrame::Cframe { tstate_cframe: 56, cframe_current_frame: 8 },
    frame_code: 32,
    frame_previous: 48,
    frame_instr: 56,
    frame_owner: 69,
    entry: Entry::Flag { is_entry: 68 },
    code_tag_bits: 0,
    code_filename: 112,
    code_name: 120,
    code_qualname: Some(128),
    code_linetable: 136,
    code_firstlineno: 72,
    code_instructions: 184,
    code_first_traceable: Some(168),
    object_type: 8,
    var_size: 16,
    bytes_data: 32,
    unicode_length: 16,
    unicode_state: 32,
    unicode_ascii_data: 48,
    unicode_compact_data: 72,
};

/// CPython 3.12 (checked against 3.12.1's headers): the GIL is the
/// interpreter's, `cframe` has lost `use_tracing` (its current frame comes
/// first), the frame its code, and each native eval call pushes a shim frame
/// (`FRAME_OWNED_BY_CSTACK`, 3) instead of marking its first frame;
/// `PyASCIIObject` has lost `wstr`.
pub const PY312: Layout = Layout {
    version: (3, 12),
    runtime_interpreters_head: 40,
    gil: Gil::Interpreter { ceval_gil: 384, locked: 16, last_holder: 8 },
    interp_next: 0,
    interp_threads_head: 72,
    tstate_next: 8,
    tstate_interp: 16,
    tstate_thread_id: 136,
    tstate_native_thread_id: Some(144),
    current_frame: CurrentFrame::Cframe { tstate_cframe: 56, cframe_current_frame: 0 },
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_owner: 70,
    entry: Entry::Shim { min_owner: 3, max_owner: 3 },
    code_tag_bits: 0,
    code_filename: 112,
    code_name: 120,
    code_qualname: Some(128),
    code_linetable: 136,
    code_firstlineno: 68,
    code_instructions: 192,
    code_first_traceable: Some(176),
    object_type: 8,
    var_size: 16,
    bytes_data: 32,
    unicode_length: 16,
    unicode_state: 32,
    unicode_ascii_data: 40,
    unicode_compact_data: 56,
};

/// CPython 3.10 (checked against 3.10.13's headers): frame objects,
/// `tstate->frame`, one GIL in the runtime, no native thread id, no
/// qualified names.
pub const PY310: Layout = Layout {
    version: (3, 10),
    runtime_interpreters_head: 32,
    gil: Gil::Runtime { last_holder: 360, locked: 368 },
    interp_next: 0,
    interp_threads_head: 8,
    tstate_next: 8,
    tstate_interp: 16,
    tstate_thread_id: 176,
    tstate_native_thread_id: None,
    current_frame: CurrentFrame::Direct { tstate_current_frame: 24 },
    frame_code: 32,
    frame_previous: 24,
    frame_instr: 96,
    frame_owner: 0,
    entry: Entry::FrameObject,
    code_tag_bits: 0,
    code_filename: 104,
    code_name: 112,
    code_qualname: None,
    code_linetable: 120,
    code_firstlineno: 40,
    code_instructions: 0,
    code_first_traceable: None,
    object_type: 8,
    var_size: 16,
    bytes_data: 32,
    unicode_length: 16,
    unicode_state: 32,
    unicode_ascii_data: 48,
    unicode_compact_data: 72,
};

/// The built-in layout of CPython `major.minor`, if stackwalk has one
/// (3.13 and 3.14 are read from the target: [`super::debug_offsets`]).
pub fn for_version(major: u8, minor: u8) -> Option<&'static Layout> {
    match (major, minor) {
        (3, 10) => Some(&PY310),
        (3, 11) => Some(&PY311),
        (3, 12) => Some(&PY312),
        _ => None,
    }
}

/// The offsets by field name, as the tests compare them with the C
/// headers' `offsetof` (3.11's names; for a 3.13+ layout, the fields of
/// the same meaning).
pub fn fields(layout: &Layout) -> Vec<(&'static str, u64)> {
    let objects = layout.entry == Entry::FrameObject; // 3.10
    let mut out = vec![("_PyRuntimeState.interpreters.head", layout.runtime_interpreters_head)];
    match layout.gil {
        Gil::Runtime { last_holder, locked } => out.extend([
            ("_PyRuntimeState.ceval.gil.last_holder", last_holder),
            ("_PyRuntimeState.ceval.gil.locked", locked),
        ]),
        Gil::Interpreter { ceval_gil, locked, last_holder } => out.extend([
            ("PyInterpreterState.ceval.gil", ceval_gil),
            ("struct _gil_runtime_state.locked", locked),
            ("struct _gil_runtime_state.last_holder", last_holder),
        ]),
    }
    let threads_head = match objects {
        true => "PyInterpreterState.tstate_head",
        false => "PyInterpreterState.threads.head",
    };
    out.extend([
        ("PyInterpreterState.next", layout.interp_next),
        (threads_head, layout.interp_threads_head),
        ("PyThreadState.next", layout.tstate_next),
        ("PyThreadState.interp", layout.tstate_interp),
        ("PyThreadState.thread_id", layout.tstate_thread_id),
    ]);
    if let Some(native) = layout.tstate_native_thread_id {
        out.push(("PyThreadState.native_thread_id", native));
    }
    match layout.current_frame {
        CurrentFrame::Cframe { tstate_cframe, cframe_current_frame } => out.extend([
            ("PyThreadState.cframe", tstate_cframe),
            ("_PyCFrame.current_frame", cframe_current_frame),
        ]),
        CurrentFrame::Direct { tstate_current_frame } if objects => {
            out.push(("PyThreadState.frame", tstate_current_frame))
        }
        CurrentFrame::Direct { tstate_current_frame } => {
            out.push(("PyThreadState.current_frame", tstate_current_frame))
        }
    }
    let [code, previous, instr] = match (objects, layout.version < (3, 13)) {
        (true, _) => ["PyFrameObject.f_code", "PyFrameObject.f_back", "PyFrameObject.f_lasti"],
        (false, true) => [
            "_PyInterpreterFrame.f_code",
            "_PyInterpreterFrame.previous",
            "_PyInterpreterFrame.prev_instr",
        ],
        (false, false) => [
            "_PyInterpreterFrame.f_executable",
            "_PyInterpreterFrame.previous",
            "_PyInterpreterFrame.instr_ptr",
        ],
    };
    out.extend([
        (code, layout.frame_code),
        (previous, layout.frame_previous),
        (instr, layout.frame_instr),
    ]);
    if let Entry::Flag { is_entry } = layout.entry {
        out.push(("_PyInterpreterFrame.is_entry", is_entry));
    }
    if !objects {
        out.push(("_PyInterpreterFrame.owner", layout.frame_owner));
    }
    out.extend([
        ("PyCodeObject.co_filename", layout.code_filename),
        ("PyCodeObject.co_name", layout.code_name),
    ]);
    if let Some(qualname) = layout.code_qualname {
        out.push(("PyCodeObject.co_qualname", qualname));
    }
    out.extend([
        ("PyCodeObject.co_linetable", layout.code_linetable),
        ("PyCodeObject.co_firstlineno", layout.code_firstlineno),
    ]);
    if !objects {
        out.push(("PyCodeObject.co_code_adaptive", layout.code_instructions));
    }
    out.extend([
        ("PyObject.ob_type", layout.object_type),
        ("PyVarObject.ob_size", layout.var_size),
        ("PyBytesObject.ob_sval", layout.bytes_data),
        ("PyASCIIObject.length", layout.unicode_length),
        ("PyASCIIObject.state", layout.unicode_state),
        ("sizeof(PyASCIIObject)", layout.unicode_ascii_data),
        ("sizeof(PyCompactUnicodeObject)", layout.unicode_compact_data),
    ]);
    if let Some(first) = layout.code_first_traceable {
        out.push(("PyCodeObject._co_firsttraceable", first));
    }
    out
}
