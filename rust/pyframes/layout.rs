//! Where CPython keeps what a stack walk reads, by version: byte offsets
//! into `_PyRuntime`, the interpreter and thread states, frames, code,
//! bytes and str objects (x86_64 and aarch64, LP64).
//!
//! Only 3.11 is implemented, and it is the version tested here: its offsets
//! are those of Debian's python3.11 (3.11.7) headers, `offsetof` of each
//! field with `Py_BUILD_CORE` (the tests check them against the installed
//! headers when they are there). Other versions are refused by name rather
//! than read with a layout that is not theirs.

/// Offsets of one CPython version's structures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: (u8, u8),
    /// `_PyRuntimeState.interpreters.head`
    pub runtime_interpreters_head: u64,
    /// `_PyRuntimeState.ceval.gil.last_holder` and `.locked`
    pub runtime_gil_last_holder: u64,
    pub runtime_gil_locked: u64,
    /// `PyInterpreterState.next`, `.threads.head`
    pub interp_next: u64,
    pub interp_threads_head: u64,
    /// `PyThreadState.next`, `.interp`, `.cframe`, `.thread_id`, `.native_thread_id`
    pub tstate_next: u64,
    pub tstate_interp: u64,
    pub tstate_cframe: u64,
    pub tstate_thread_id: u64,
    pub tstate_native_thread_id: u64,
    /// `_PyCFrame.current_frame`
    pub cframe_current_frame: u64,
    /// `_PyInterpreterFrame.f_code`, `.previous`, `.prev_instr`, `.is_entry`, `.owner`
    pub frame_code: u64,
    pub frame_previous: u64,
    pub frame_prev_instr: u64,
    pub frame_is_entry: u64,
    pub frame_owner: u64,
    /// `PyCodeObject.co_filename`, `.co_name`, `.co_qualname`,
    /// `.co_linetable`, `.co_firstlineno`, `.co_code_adaptive`
    pub code_filename: u64,
    pub code_name: u64,
    pub code_qualname: u64,
    pub code_linetable: u64,
    pub code_firstlineno: u64,
    pub code_instructions: u64,
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
    runtime_gil_last_holder: 368,
    runtime_gil_locked: 376,
    interp_next: 0,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_interp: 16,
    tstate_cframe: 56,
    tstate_thread_id: 152,
    tstate_native_thread_id: 160,
    cframe_current_frame: 8,
    frame_code: 32,
    frame_previous: 48,
    frame_prev_instr: 56,
    frame_is_entry: 68,
    frame_owner: 69,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    code_firstlineno: 72,
    code_instructions: 184,
    object_type: 8,
    var_size: 16,
    bytes_data: 32,
    unicode_length: 16,
    unicode_state: 32,
    unicode_ascii_data: 48,
    unicode_compact_data: 72,
};

/// The layout of CPython `major.minor`, if stackwalk knows it.
pub fn for_version(major: u8, minor: u8) -> Option<&'static Layout> {
    match (major, minor) {
        (3, 11) => Some(&PY311),
        _ => None,
    }
}

/// The offsets by field name, as the tests compare them with the C
/// headers' `offsetof`.
pub fn fields(layout: &Layout) -> Vec<(&'static str, u64)> {
    vec![
        ("_PyRuntimeState.interpreters.head", layout.runtime_interpreters_head),
        ("_PyRuntimeState.ceval.gil.last_holder", layout.runtime_gil_last_holder),
        ("_PyRuntimeState.ceval.gil.locked", layout.runtime_gil_locked),
        ("PyInterpreterState.next", layout.interp_next),
        ("PyInterpreterState.threads.head", layout.interp_threads_head),
        ("PyThreadState.next", layout.tstate_next),
        ("PyThreadState.interp", layout.tstate_interp),
        ("PyThreadState.cframe", layout.tstate_cframe),
        ("PyThreadState.thread_id", layout.tstate_thread_id),
        ("PyThreadState.native_thread_id", layout.tstate_native_thread_id),
        ("_PyCFrame.current_frame", layout.cframe_current_frame),
        ("_PyInterpreterFrame.f_code", layout.frame_code),
        ("_PyInterpreterFrame.previous", layout.frame_previous),
        ("_PyInterpreterFrame.prev_instr", layout.frame_prev_instr),
        ("_PyInterpreterFrame.is_entry", layout.frame_is_entry),
        ("_PyInterpreterFrame.owner", layout.frame_owner),
        ("PyCodeObject.co_filename", layout.code_filename),
        ("PyCodeObject.co_name", layout.code_name),
        ("PyCodeObject.co_qualname", layout.code_qualname),
        ("PyCodeObject.co_linetable", layout.code_linetable),
        ("PyCodeObject.co_firstlineno", layout.code_firstlineno),
        ("PyCodeObject.co_code_adaptive", layout.code_instructions),
        ("PyObject.ob_type", layout.object_type),
        ("PyVarObject.ob_size", layout.var_size),
        ("PyBytesObject.ob_sval", layout.bytes_data),
        ("PyASCIIObject.length", layout.unicode_length),
        ("PyASCIIObject.state", layout.unicode_state),
        ("sizeof(PyASCIIObject)", layout.unicode_ascii_data),
        ("sizeof(PyCompactUnicodeObject)", layout.unicode_compact_data),
    ]
}
