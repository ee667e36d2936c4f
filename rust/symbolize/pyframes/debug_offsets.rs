//! CPython 3.13 and 3.14's `_Py_DebugOffsets`: the table at the very start
//! of `_PyRuntime` in which the interpreter says, for out-of-process tools,
//! where the fields of its own structures are (`offsetof` and `sizeof`,
//! each a `uint64_t`), after the cookie `xdebugpy`, its `PY_VERSION_HEX`
//! and whether it is a free-threaded build.
//!
//! The table itself changes from minor version to minor version (3.14 added
//! fields in the middle of it), so where each entry is in the table is
//! known here by version (3.13's `pycore_runtime.h`, 3.14's
//! `pycore_debug_offsets.h`); the offsets are the target's. Everything read
//! is checked: the cookie, the version (the same minor as the module's
//! `Py_Version`), not free-threaded (its frames and objects are other
//! structures, not tested), and every offset inside the size the table
//! gives its structure; a table that fails is a reason, never a guess.

use super::layout::{CurrentFrame, Entry, Gil, Layout};
use super::{hex, PyError, ReadMemory, Reader};

/// The cookie at `_PyRuntime`'s first byte.
pub const COOKIE: &[u8; 8] = b"xdebugpy";

/// The largest structure size believed (`_PyRuntimeState` and
/// `PyInterpreterState` are some hundreds of KiB).
const MAX_STRUCT: u64 = 16 << 20;

/// The table's entries, in its order, up to the str object's (those after
/// are not read): (structure, its fields), one `uint64_t` each; the
/// cookie's 8 bytes count as one.
type Table = &'static [(&'static str, &'static [&'static str])];

/// `code_object`'s entries: 3.13's, then those 3.14 adds.
macro_rules! code_fields {
    ($($added:literal),*) => {
        &[
            "size",
            "filename",
            "name",
            "qualname",
            "linetable",
            "firstlineno",
            "argcount",
            "localsplusnames",
            "localspluskinds",
            "co_code_adaptive",
            $($added),*
        ]
    };
}

const TABLE_313: Table = &[
    ("", &["cookie", "version", "free_threaded"]),
    ("runtime_state", &["size", "finalizing", "interpreters_head"]),
    (
        "interpreter_state",
        &[
            "size",
            "id",
            "next",
            "threads_head",
            "gc",
            "imports_modules",
            "sysdict",
            "builtins",
            "ceval_gil",
            "gil_runtime_state",
            "gil_runtime_state_enabled",
            "gil_runtime_state_locked",
            "gil_runtime_state_holder",
        ],
    ),
    THREAD_STATE,
    ("interpreter_frame", &["size", "previous", "executable", "instr_ptr", "localsplus", "owner"]),
    ("code_object", code_fields!()),
    ("pyobject", &["size", "ob_type"]),
    TYPE_OBJECT,
    ("tuple_object", &["size", "ob_item", "ob_size"]),
    ("list_object", &["size", "ob_item", "ob_size"]),
    ("dict_object", &["size", "ma_keys", "ma_values"]),
    ("float_object", &["size", "ob_fval"]),
    ("long_object", &["size", "lv_tag", "ob_digit"]),
    BYTES_OBJECT,
    UNICODE_OBJECT,
];

const TABLE_314: Table = &[
    ("", &["cookie", "version", "free_threaded"]),
    ("runtime_state", &["size", "finalizing", "interpreters_head"]),
    (
        "interpreter_state",
        &[
            "size",
            "id",
            "next",
            "threads_head",
            "threads_main",
            "gc",
            "imports_modules",
            "sysdict",
            "builtins",
            "ceval_gil",
            "gil_runtime_state",
            "gil_runtime_state_enabled",
            "gil_runtime_state_locked",
            "gil_runtime_state_holder",
            "code_object_generation",
            "tlbc_generation",
        ],
    ),
    THREAD_STATE,
    (
        "interpreter_frame",
        &[
            "size",
            "previous",
            "executable",
            "instr_ptr",
            "localsplus",
            "owner",
            "stackpointer",
            "tlbc_index",
        ],
    ),
    ("code_object", code_fields!("co_tlbc")),
    ("pyobject", &["size", "ob_type"]),
    TYPE_OBJECT,
    ("tuple_object", &["size", "ob_item", "ob_size"]),
    ("list_object", &["size", "ob_item", "ob_size"]),
    ("set_object", &["size", "used", "table", "mask"]),
    ("dict_object", &["size", "ma_keys", "ma_values"]),
    ("float_object", &["size", "ob_fval"]),
    ("long_object", &["size", "lv_tag", "ob_digit"]),
    BYTES_OBJECT,
    UNICODE_OBJECT,
];

const THREAD_STATE: (&str, &[&str]) = (
    "thread_state",
    &[
        "size",
        "prev",
        "next",
        "interp",
        "current_frame",
        "thread_id",
        "native_thread_id",
        "datastack_chunk",
        "status",
    ],
);
const TYPE_OBJECT: (&str, &[&str]) = ("type_object", &["size", "tp_name", "tp_repr", "tp_flags"]);
const BYTES_OBJECT: (&str, &[&str]) = ("bytes_object", &["size", "ob_size", "ob_sval"]);
const UNICODE_OBJECT: (&str, &[&str]) =
    ("unicode_object", &["size", "state", "length", "asciiobject_size"]);

/// The table of CPython `major.minor`, if stackwalk knows where its entries are.
fn table(major: u8, minor: u8) -> Option<Table> {
    match (major, minor) {
        (3, 13) => Some(TABLE_313),
        (3, 14) => Some(TABLE_314),
        _ => None,
    }
}

/// What the table does not say, by minor version: (the least and the most
/// `_PyInterpreterFrame.owner` of a frame that runs no code, the tag bits of
/// `f_executable`, `sizeof(PyCompactUnicodeObject) - sizeof(PyASCIIObject)`).
/// 3.13: `FRAME_OWNED_BY_CSTACK` 3 (pycore_frame.h), a plain pointer; 3.14:
/// `FRAME_OWNED_BY_INTERPRETER` 3 and `FRAME_OWNED_BY_CSTACK` 4
/// (pycore_interpframe_structs.h), a `_PyStackRef` (pycore_stackref.h: with
/// the GIL, `Py_TAG_BITS` 3). Both: utf8_length and utf8 after the
/// PyASCIIObject (cpython/unicodeobject.h).
pub(super) fn constants(minor: u8) -> (u8, u8, u64, u64) {
    match minor {
        13 => (3, 3, 0, 16),
        _ => (3, 4, 3, 16),
    }
}

/// The table's entries, read: each looked up by "structure.field".
struct Entries {
    names: Vec<(&'static str, &'static str)>,
    values: Vec<u64>,
}

impl Entries {
    fn get(&self, structure: &str, field: &str) -> u64 {
        let i = self.names.iter().position(|&(s, f)| s == structure && f == field);
        // The names asked for are those of the tables above (a test reads each).
        i.and_then(|i| self.values.get(i).copied()).unwrap_or(u64::MAX)
    }

    /// `structure.field`, checked to lie inside `structure`'s size with
    /// `width` bytes to read there.
    fn offset(&self, structure: &str, field: &str, width: u64) -> Result<u64, PyError> {
        let size = self.get(structure, "size");
        let at = self.get(structure, field);
        if size > MAX_STRUCT || at.checked_add(width).is_none_or(|end| end > size) {
            return Err(bad(format!("{structure}.{field} is {at} in a structure of {size} bytes")));
        }
        Ok(at)
    }
}

fn bad(what: String) -> PyError {
    PyError::State(format!("_Py_DebugOffsets: {what}"))
}

/// The layout that the `_Py_DebugOffsets` table at `runtime` gives, for an
/// interpreter whose `Py_Version` is `version`.
pub(super) fn read<M: ReadMemory>(
    r: &mut Reader<M>,
    runtime: u64,
    version: (u8, u8),
) -> Result<Layout, PyError> {
    let (major, minor) = version;
    let table = table(major, minor).ok_or(PyError::Version(major, minor))?;
    let names: Vec<(&str, &str)> =
        table.iter().flat_map(|(s, fields)| fields.iter().map(move |f| (*s, *f))).collect();
    let raw = r.bytes(runtime, names.len() as u64 * 8).ok_or_else(|| {
        PyError::State(format!("_PyRuntime at {} is not in the memory captured", hex(runtime)))
    })?;
    let values: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect();
    if &raw[..8] != COOKIE {
        return Err(bad(format!(
            "no cookie at _PyRuntime ({}: {:02x?}, not \"xdebugpy\"): not a CPython {major}.{minor} \
             runtime, or its memory is damaged",
            hex(runtime),
            &raw[..8]
        )));
    }
    let e = Entries { names, values };
    let hexversion = e.get("", "version");
    if (hexversion >> 24, (hexversion >> 16) & 0xff) != (u64::from(major), u64::from(minor))
        || hexversion >> 32 != 0
    {
        return Err(bad(format!(
            "version {hexversion:#x} is not the module's CPython {major}.{minor}"
        )));
    }
    // Free-threaded builds (PEP 703, `--disable-gil`): 3.13t's objects have a longer header
    // (the table gives every offset read past it), and its code object and frames the default
    // build's fields in the same order. 3.14t's frames point into per-thread copies of the
    // bytecode (`co_tlbc`), which this reader does not follow: refused.
    match (e.get("", "free_threaded"), minor) {
        (0, _) | (1, 13) => {}
        (1, _) => {
            return Err(PyError::State(format!(
                "CPython {major}.{minor} free-threaded: its Python frames are not read (its \
                 per-thread bytecode copies; 3.13t's and the default builds' are)"
            )))
        }
        (n, _) => return Err(bad(format!("free_threaded is {n}"))),
    }
    let ptr = 8;
    let gil = e.offset("interpreter_state", "gil_runtime_state", 8)?;
    let locked = e.offset("interpreter_state", "gil_runtime_state_locked", 4)?;
    let holder = e.offset("interpreter_state", "gil_runtime_state_holder", ptr)?;
    if locked < gil || holder < gil {
        return Err(bad(format!(
            "the GIL's fields ({locked}, {holder}) are before the GIL ({gil})"
        )));
    }
    let (min_owner, max_owner, code_tag_bits, compact_extra) = constants(minor);
    let code_instructions = e.offset("code_object", "co_code_adaptive", 0)?;
    // `_co_firsttraceable` is not in the table: an int, then `co_extra` (a pointer), then
    // `co_code_adaptive`, in 3.13's and 3.14's default builds (cpython/code.h).
    let code_first_traceable = code_instructions.checked_sub(16);
    let ascii_size = e.get("unicode_object", "asciiobject_size");
    if ascii_size > e.get("unicode_object", "size") {
        return Err(bad(format!("sizeof(PyASCIIObject) is {ascii_size}")));
    }
    Ok(Layout {
        version,
        runtime_interpreters_head: e.offset("runtime_state", "interpreters_head", ptr)?,
        gil: Gil::Interpreter {
            ceval_gil: e.offset("interpreter_state", "ceval_gil", ptr)?,
            locked: locked - gil,
            last_holder: holder - gil,
        },
        interp_next: e.offset("interpreter_state", "next", ptr)?,
        interp_threads_head: e.offset("interpreter_state", "threads_head", ptr)?,
        tstate_next: e.offset("thread_state", "next", ptr)?,
        tstate_interp: e.offset("thread_state", "interp", ptr)?,
        tstate_thread_id: e.offset("thread_state", "thread_id", 8)?,
        tstate_native_thread_id: Some(e.offset("thread_state", "native_thread_id", 8)?),
        current_frame: CurrentFrame::Direct {
            tstate_current_frame: e.offset("thread_state", "current_frame", ptr)?,
        },
        frame_code: e.offset("interpreter_frame", "executable", ptr)?,
        frame_previous: e.offset("interpreter_frame", "previous", ptr)?,
        frame_instr: e.offset("interpreter_frame", "instr_ptr", ptr)?,
        frame_owner: e.offset("interpreter_frame", "owner", 1)?,
        entry: Entry::Shim { min_owner, max_owner },
        code_tag_bits,
        code_filename: e.offset("code_object", "filename", ptr)?,
        code_name: e.offset("code_object", "name", ptr)?,
        code_qualname: Some(e.offset("code_object", "qualname", ptr)?),
        code_linetable: e.offset("code_object", "linetable", ptr)?,
        code_firstlineno: e.offset("code_object", "firstlineno", 4)?,
        code_instructions,
        code_first_traceable,
        object_type: e.offset("pyobject", "ob_type", ptr)?,
        var_size: e.offset("bytes_object", "ob_size", 8)?,
        bytes_data: e.offset("bytes_object", "ob_sval", 0)?,
        unicode_length: e.offset("unicode_object", "length", 8)?,
        unicode_state: e.offset("unicode_object", "state", 4)?,
        unicode_ascii_data: ascii_size,
        unicode_compact_data: ascii_size + compact_extra,
    })
}

#[cfg(test)]
pub(super) fn entry_names(major: u8, minor: u8) -> Vec<String> {
    table(major, minor)
        .unwrap_or(&[])
        .iter()
        .flat_map(|(s, fields)| fields.iter().map(move |f| format!("{s}.{f}")))
        .collect()
}
