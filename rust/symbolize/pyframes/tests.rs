//! The walk over interpreter memory built byte by byte (3.11's layout):
//! what a real interpreter cannot be made to show on demand: loops, zeroed
//! and missing memory, objects of the wrong type.

use super::layout::PY311 as L;
use super::layout::PY311 as PY311_LAYOUT;
use super::*;

/// Sparse memory: writes of little-endian values at addresses.
#[derive(Default, Clone)]
struct Mem(std::collections::BTreeMap<u64, u8>);

impl Mem {
    fn put(&mut self, at: u64, bytes: &[u8]) {
        for (i, b) in bytes.iter().enumerate() {
            self.0.insert(at + i as u64, *b);
        }
    }
    fn u64(&mut self, at: u64, v: u64) {
        self.put(at, &v.to_le_bytes());
    }
    fn u32(&mut self, at: u64, v: u32) {
        self.put(at, &v.to_le_bytes());
    }
}

impl ReadMemory for &Mem {
    fn read(&mut self, address: u64, buf: &mut [u8]) -> bool {
        for (i, b) in buf.iter_mut().enumerate() {
            match self.0.get(&(address + i as u64)) {
                Some(v) => *b = *v,
                None => return false,
            }
        }
        true
    }
}

const RUNTIME: u64 = 0x10_0000;
const INTERP: u64 = 0x20_0000;
const TSTATE: u64 = 0x30_0000;
const CFRAME: u64 = 0x40_0000;
const CODE_TYPE: u64 = 0x50_0000;
const STR_TYPE: u64 = 0x50_1000;
const BYTES_TYPE: u64 = 0x50_2000;

fn symbols() -> Symbols {
    Symbols {
        version: (3, 11),
        runtime: RUNTIME,
        code_type: Some(CODE_TYPE),
        unicode_type: Some(STR_TYPE),
        bytes_type: Some(BYTES_TYPE),
        frame_type: None,
    }
}

fn ascii(m: &mut Mem, at: u64, s: &str) {
    ascii_in(&L, m, at, s);
}

/// A compact ASCII str `s` at `at`, in `layout`'s str object.
fn ascii_in(layout: &Layout, m: &mut Mem, at: u64, s: &str) {
    m.u64(at + layout.object_type, STR_TYPE);
    m.u64(at + layout.unicode_length, s.len() as u64);
    m.u32(at + layout.unicode_state, 0xe4);
    m.put(at + layout.unicode_ascii_data, s.as_bytes());
}

/// A code object `name` at `at`, first line `first`, whose table says
/// each code unit is one line further.
fn code(m: &mut Mem, at: u64, name: &str, first: u32) {
    m.u64(at + L.object_type, CODE_TYPE);
    ascii(m, at + 0x1000, name);
    ascii(m, at + 0x2000, &format!("C.{name}"));
    ascii(m, at + 0x3000, "/src/prog.py");
    m.u64(at + L.code_name, at + 0x1000);
    m.u64(at + L.code_qualname.unwrap(), at + 0x2000);
    m.u64(at + L.code_filename, at + 0x3000);
    let table = at + 0x4000;
    m.u64(table + L.object_type, BYTES_TYPE);
    // 8 entries of one code unit, each "line + 1" (kind 13, svarint 2)
    let bytes: Vec<u8> = (0..8).flat_map(|_| [0x80 | (13 << 3), 2]).collect();
    m.u64(table + L.var_size, bytes.len() as u64);
    m.put(table + L.bytes_data, &bytes);
    m.u64(at + L.code_linetable, table);
    m.u32(at + L.code_firstlineno, first);
    m.u32(at + L.code_first_traceable.unwrap(), 0);
}

/// 3.11's GIL (last holder, locked), `is_entry` and cframe offsets.
fn gil() -> (u64, u64) {
    let layout::Gil::Runtime { last_holder, locked } = L.gil else { unreachable!() };
    (last_holder, locked)
}

fn is_entry() -> u64 {
    let layout::Entry::Flag { is_entry } = L.entry else { unreachable!() };
    is_entry
}

fn frame(m: &mut Mem, at: u64, code: u64, unit: u64, previous: u64, entry: bool) {
    m.u64(at + L.frame_code, code);
    m.u64(at + L.frame_previous, previous);
    m.u64(at + L.frame_instr, code + L.code_instructions + 2 * unit);
    m.put(at + is_entry(), &[u8::from(entry), 0]);
}

/// One interpreter, one thread (tid 77) holding the GIL, running
/// inner (unit 3) <- middle (unit 0, entry) <- outer (unit 5, entry).
fn interpreter() -> Mem {
    let mut m = Mem::default();
    m.u64(RUNTIME + L.runtime_interpreters_head, INTERP);
    m.u64(RUNTIME + gil().0, TSTATE);
    m.u32(RUNTIME + gil().1, 1);
    m.u64(INTERP + L.interp_next, 0);
    m.u64(INTERP + L.interp_threads_head, TSTATE);
    m.u64(TSTATE + L.tstate_next, 0);
    m.u64(TSTATE + L.tstate_interp, INTERP);
    let layout::CurrentFrame::Cframe { tstate_cframe, cframe_current_frame } = L.current_frame
    else {
        unreachable!()
    };
    m.u64(TSTATE + tstate_cframe, CFRAME);
    m.u64(TSTATE + L.tstate_thread_id, 0x7f00);
    m.u64(TSTATE + L.tstate_native_thread_id.unwrap(), 77);
    m.u64(CFRAME + cframe_current_frame, 0x60_0000);
    code(&mut m, 0x70_0000, "inner", 10);
    code(&mut m, 0x80_0000, "middle", 20);
    code(&mut m, 0x90_0000, "outer", 30);
    frame(&mut m, 0x60_0000, 0x70_0000, 3, 0x61_0000, false);
    frame(&mut m, 0x61_0000, 0x80_0000, 0, 0x62_0000, true);
    frame(&mut m, 0x62_0000, 0x90_0000, 5, 0, true);
    m
}

fn names(t: &PyThread) -> Vec<(&str, Option<i64>, bool)> {
    t.frames.iter().map(|f| (f.function.as_str(), f.line, f.entry)).collect()
}

#[test]
fn a_frame_before_its_first_resume_is_incomplete() {
    // inner (at unit 3) has MAKE_CELL and COPY_FREE_VARS before its RESUME (unit 4): still
    // being set up. A generator's frame is never incomplete (it is set up when made).
    let mut m = interpreter();
    m.u32(0x70_0000 + L.code_first_traceable.unwrap(), 4);
    let incomplete = |m: &Mem| -> Vec<bool> {
        let state = read_state(m, &symbols(), &[]).unwrap();
        state.threads[0].frames.iter().map(|f| f.incomplete).collect()
    };
    assert_eq!(incomplete(&m), [true, false, false]);
    m.u32(0x70_0000 + L.code_first_traceable.unwrap(), 3);
    assert_eq!(incomplete(&m), [false, false, false], "at its RESUME it is complete");
    m.u32(0x70_0000 + L.code_first_traceable.unwrap(), 4);
    m.put(0x60_0000 + L.frame_owner, &[layout::FRAME_OWNED_BY_GENERATOR]);
    assert_eq!(incomplete(&m), [false, false, false]);
    // the code object cut short before its _co_firsttraceable: a reason, as for its other fields
    let mut m = interpreter();
    m.0.remove(&(0x70_0000 + L.code_first_traceable.unwrap()));
    let t = &read_state(&m, &symbols(), &[]).unwrap().threads[0];
    assert!(t.frames.is_empty(), "{:?}", t.frames);
    assert_eq!(t.stop.as_deref(), Some("code object at 0x700000: not in the memory"));
}

#[test]
fn reads_threads_frames_lines_and_the_gil() {
    let m = interpreter();
    the_one_thread(&read_state(&m, &symbols(), &[]).unwrap(), 11);
}

/// The state that [`interpreter`] and [`with_table`] build, read: tid 77
/// holding the GIL, inner <- middle (entry) <- outer (entry).
fn the_one_thread(state: &PyState, minor: u8) {
    assert_eq!(state.version, (3, minor));
    assert!(state.warnings.is_empty());
    let [t] = &state.threads[..] else { panic!("{:?}", state.threads) };
    assert_eq!(
        (t.native_tid, t.thread_id, t.holds_gil, t.stop.as_deref()),
        (77, 0x7f00, true, None)
    );
    assert_eq!(
        names(t),
        [("inner", Some(14), false), ("middle", Some(21), true), ("outer", Some(36), true)]
    );
    assert_eq!(t.frames[0].qualname, "C.inner");
    assert_eq!(t.frames[0].file, "/src/prog.py");
    let groups: Vec<usize> = split_by_entry(&t.frames).iter().map(|g| g.len()).collect();
    assert_eq!(groups, [2, 1]);
}

#[test]
fn gil_released_is_held_by_none() {
    let mut m = interpreter();
    m.u32(RUNTIME + gil().1, 0);
    let state = read_state(&m, &symbols(), &[]).unwrap();
    assert!(!state.threads[0].holds_gil);
}

#[test]
fn a_frame_chain_that_loops_stops_with_its_reason() {
    let mut m = interpreter();
    m.u64(0x62_0000 + L.frame_previous, 0x60_0000);
    let state = read_state(&m, &symbols(), &[]).unwrap();
    let t = &state.threads[0];
    assert_eq!(t.frames.len(), 3);
    assert_eq!(t.stop.as_deref(), Some("the frame chain loops back to 0x600000"));
}

#[test]
fn a_thread_list_that_loops_is_read_once() {
    let mut m = interpreter();
    m.u64(TSTATE + L.tstate_next, TSTATE);
    let state = read_state(&m, &symbols(), &[]).unwrap();
    assert_eq!(state.threads.len(), 1);
    assert_eq!(state.warnings, ["interpreter 0: thread list loops"]);
}

#[test]
fn a_code_object_of_the_wrong_type_stops_the_thread() {
    let mut m = interpreter();
    m.u64(0x80_0000 + L.object_type, 0x1234);
    let state = read_state(&m, &symbols(), &[]).unwrap();
    let t = &state.threads[0];
    assert_eq!(names(t), [("inner", Some(14), false)]);
    assert_eq!(
        t.stop.as_deref(),
        Some("code object at 0x800000: wrong type (0x1234 is not 0x500000)")
    );
}

#[test]
fn missing_and_zeroed_memory_are_errors_with_reasons() {
    let empty = Mem::default();
    let e = read_state(&empty, &symbols(), &[]).unwrap_err();
    assert_eq!(e.to_string(), "_PyRuntime at 0x100000 is not in the memory captured");
    let mut zeroed = interpreter();
    zeroed.u64(RUNTIME + L.runtime_interpreters_head, 0);
    let e = read_state(&zeroed, &symbols(), &[]).unwrap_err();
    assert!(e.to_string().starts_with("no interpreter: _PyRuntime.interpreters.head is NULL"));
    // the thread state's memory zeroed: no frames, no panic
    let mut m = interpreter();
    m.put(TSTATE, &[0; 256]);
    let state = read_state(&m, &symbols(), &[]).unwrap();
    assert_eq!(state.threads.len(), 1);
    assert!(state.threads[0].frames.is_empty());
    // the frame's memory zeroed: code NULL is no code object
    let mut m = interpreter();
    m.put(0x61_0000, &[0; 80]);
    let state = read_state(&m, &symbols(), &[]).unwrap();
    assert_eq!(state.threads[0].frames.len(), 1);
    assert_eq!(
        state.threads[0].stop.as_deref(),
        Some("code object at 0x0: 0x0 is not in the memory")
    );
}

#[test]
fn other_versions_are_refused_by_name() {
    let m = interpreter();
    let e = read_state(&m, &Symbols { version: (3, 9), ..symbols() }, &[]).unwrap_err();
    assert_eq!(e, PyError::Version(3, 9));
}

#[test]
fn every_byte_of_the_state_garbled_never_panics() {
    let base = interpreter();
    let keys: Vec<u64> = base.0.keys().copied().collect();
    for (n, &k) in keys.iter().enumerate().filter(|(n, _)| n % 3 == 0) {
        for v in [0x00, 0xff, 0x41] {
            let mut m = base.clone();
            m.put(k, &[v ^ (n as u8)]);
            let _ = read_state(&m, &symbols(), &[]);
        }
    }
}

/// The numbers, one a line, that the C program `source` prints, compiled to
/// `exe` with the headers of `includes`.
fn numbers_printed_by(
    exe: &std::path::Path,
    source: &str,
    includes: &[&std::path::Path],
) -> Vec<u64> {
    let src = exe.with_extension("c");
    std::fs::write(&src, source).unwrap();
    let cc = std::process::Command::new("cc")
        .args(includes.iter().map(|i| format!("-I{}", i.display())))
        .arg(&src)
        .arg("-o")
        .arg(exe)
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let out = std::process::Command::new(exe).output().unwrap();
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect()
}

/// pyenv's CPython `3.minor` headers, when pyenv is here (`$PYENV_ROOT`,
/// default `~/.pyenv`): None without pyenv; with it, the version must be there.
pub(crate) fn pyenv_include(minor: u8) -> Option<std::path::PathBuf> {
    let root = std::env::var_os("PYENV_ROOT")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".pyenv")))?;
    let versions = root.join("versions");
    if !versions.is_dir() {
        return None;
    }
    let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(&versions)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|d| {
            let name = d.file_name().unwrap().to_string_lossy().into_owned();
            name.strip_prefix(&format!("3.{minor}.")).is_some_and(|r| r.parse::<u32>().is_ok())
        })
        .map(|d| d.join(format!("include/python3.{minor}")))
        .filter(|i| i.join("internal").is_dir())
        .collect();
    found.sort();
    assert!(!found.is_empty(), "pyenv is at {} but has no CPython 3.{minor}", root.display());
    found.pop()
}

/// Each built-in layout is `offsetof` of each field in that version's installed headers,
/// compiled with `Py_BUILD_CORE` by the C compiler: 3.11's of Debian's python3.11-dev (which
/// .ci/setup installs), 3.12's of pyenv's CPython 3.12, where pyenv is (this machine kind has
/// it).
#[test]
fn the_built_in_layouts_are_the_headers() {
    let debian = std::path::PathBuf::from("/usr/include/python3.11");
    assert!(
        debian.join("internal/pycore_frame.h").exists(),
        "the CPython 3.11 headers are needed (apt-get install python3-dev)"
    );
    let mut versions = vec![(&PY311_LAYOUT, debian)];
    for (minor, layout) in [(10, &layout::PY310), (12, &layout::PY312)] {
        if let Some(include) = pyenv_include(minor) {
            versions.push((layout, include));
        }
    }
    let dir = std::env::temp_dir().join(format!("stackwalk-pylayout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (layout, include) in versions {
        let fields = layout::fields(layout);
        // 3.10's frames are frame objects, 3.11+'s interpreter frames
        let frames = match layout.entry {
            layout::Entry::FrameObject => "frameobject.h",
            _ => "internal/pycore_frame.h",
        };
        let c = format!(
            "#define Py_BUILD_CORE 1\n#include <Python.h>\n#include <internal/pycore_runtime.h>\n\
             #include <internal/pycore_interp.h>\n#include <{frames}>\n\
             #include <stddef.h>\n#include <stdio.h>\nint main(void) {{\n",
        );
        let mut c = c;
        for (name, _) in &fields {
            let expr = match name.strip_prefix("sizeof") {
                Some(ty) => format!("sizeof{ty}"),
                None => {
                    let (ty, member) = name.split_once('.').unwrap();
                    format!("offsetof({ty}, {member})")
                }
            };
            c.push_str(&format!("  printf(\"%zu\\n\", (size_t)({expr}));\n"));
        }
        // a shim's owner (3.12: FRAME_OWNED_BY_CSTACK), which no offset says
        let shim = match layout.entry {
            layout::Entry::Shim { min_owner, max_owner } => Some((min_owner, max_owner)),
            layout::Entry::Flag { .. } | layout::Entry::FrameObject => None,
        };
        if shim.is_some() {
            c.push_str("  printf(\"%zu\\n\", (size_t)FRAME_OWNED_BY_CSTACK);\n");
        }
        c.push_str("  return 0;\n}\n");
        let (major, minor) = layout.version;
        let exe = dir.join(format!("layout{major}{minor}"));
        let mut printed = numbers_printed_by(&exe, &c, &[&include]);
        if let Some((min_owner, max_owner)) = shim {
            let cstack = printed.pop().unwrap();
            assert_eq!((u64::from(min_owner), u64::from(max_owner)), (cstack, cstack));
        }
        let ours: Vec<(&str, u64)> = fields.iter().map(|(n, v)| (*n, *v)).collect();
        let theirs: Vec<(&str, u64)> = fields.iter().map(|(n, _)| *n).zip(printed).collect();
        assert_eq!(ours, theirs, "{major}.{minor}");
        eprintln!(
            "{major}.{minor}: {} offsets checked against {}",
            fields.len(),
            include.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 3.13 or 3.14 interpreter: the `_Py_DebugOffsets` table at `_PyRuntime`
/// (code, str and bytes objects where 3.11's are, frames and states
/// elsewhere), one thread (tid 77) holding the GIL of its interpreter, running
/// inner (unit 3) <- middle (unit 0) <- shim <- outer (unit 5) <- shim; the
/// second shim is 3.14's `FRAME_OWNED_BY_CSTACK` (4), and 3.14's
/// `f_executable` carries a tag bit.
fn with_table(minor: u8) -> Mem {
    let mut m = Mem::default();
    const GIL: u64 = 0x21_0000;
    for (i, name) in debug_offsets::entry_names(3, minor).iter().enumerate() {
        let value = match name.as_str() {
            ".cookie" => u64::from_le_bytes(*debug_offsets::COOKIE),
            ".version" => 0x0300_05f0 | u64::from(minor) << 16,
            "runtime_state.interpreters_head" => 0x800,
            "interpreter_state.threads_head" => 16,
            "interpreter_state.ceval_gil" => 0x100,
            "interpreter_state.gil_runtime_state" => 0x200,
            "interpreter_state.gil_runtime_state_locked" => 0x208,
            "interpreter_state.gil_runtime_state_holder" => 0x210,
            "thread_state.next" => 8,
            "thread_state.interp" => 16,
            "thread_state.current_frame" => 0x40,
            "thread_state.thread_id" => 0x48,
            "thread_state.native_thread_id" => 0x50,
            "interpreter_frame.previous" => 8,
            "interpreter_frame.instr_ptr" => 0x38,
            "interpreter_frame.owner" => 0x46,
            "code_object.filename" => L.code_filename,
            "code_object.name" => L.code_name,
            "code_object.qualname" => L.code_qualname.unwrap(),
            "code_object.linetable" => L.code_linetable,
            "code_object.firstlineno" => L.code_firstlineno,
            "code_object.co_code_adaptive" => L.code_instructions,
            "pyobject.ob_type" => L.object_type,
            "bytes_object.ob_size" => L.var_size,
            "bytes_object.ob_sval" => L.bytes_data,
            "unicode_object.length" => L.unicode_length,
            "unicode_object.state" => L.unicode_state,
            "unicode_object.asciiobject_size" => L.unicode_ascii_data,
            n if n.ends_with(".size") => 0x1000,
            _ => 0,
        };
        m.u64(RUNTIME + 8 * i as u64, value);
    }
    m.u64(RUNTIME + 0x800, INTERP);
    m.u64(INTERP + 16, TSTATE);
    m.u64(INTERP + 0x100, GIL);
    m.u32(GIL + 8, 1);
    m.u64(GIL + 0x10, TSTATE);
    m.u64(TSTATE + 8, 0);
    m.u64(TSTATE + 16, INTERP);
    m.u64(TSTATE + 0x40, 0x60_0000);
    m.u64(TSTATE + 0x48, 0x7f00);
    m.u64(TSTATE + 0x50, 77);
    code(&mut m, 0x70_0000, "inner", 10);
    code(&mut m, 0x80_0000, "middle", 20);
    code(&mut m, 0x90_0000, "outer", 30);
    let tag = if minor >= 14 { 1 } else { 0 };
    let mut frame = |at: u64, code: u64, unit: u64, previous: u64, owner: u8| {
        m.u64(at, if code == 0 { 0 } else { code | tag });
        m.u64(at + 8, previous);
        m.u64(at + 0x38, code + L.code_instructions + 2 * unit);
        m.put(at + 0x46, &[owner]);
    };
    frame(0x60_0000, 0x70_0000, 3, 0x61_0000, 0);
    frame(0x61_0000, 0x80_0000, 0, 0x63_0000, 0);
    frame(0x63_0000, 0, 0, 0x62_0000, 3);
    frame(0x62_0000, 0x90_0000, 5, 0x64_0000, 0);
    frame(0x64_0000, 0, 0, 0, if minor >= 14 { 4 } else { 3 });
    m
}

fn symbols_of(minor: u8) -> Symbols {
    Symbols { version: (3, minor), ..symbols() }
}

#[test]
fn the_debug_offsets_table_gives_the_layout_of_313_and_314() {
    for minor in [13, 14] {
        let m = with_table(minor);
        // the shims are not shown; the frame before each is its call's first
        the_one_thread(&read_state(&m, &symbols_of(minor), &[]).unwrap(), minor);
        let mut released = m.clone();
        released.u32(0x21_0008, 0);
        assert!(!read_state(&released, &symbols_of(minor), &[]).unwrap().threads[0].holds_gil);
    }
}

#[test]
fn a_damaged_debug_offsets_table_is_a_reason() {
    let entry = |minor: u8, name: &str| {
        let i = debug_offsets::entry_names(3, minor).iter().position(|n| n == name).unwrap();
        RUNTIME + 8 * i as u64
    };
    for minor in [13, 14] {
        let why = |m: &Mem| read_state(m, &symbols_of(minor), &[]).unwrap_err().to_string();
        let mut m = with_table(minor);
        m.put(RUNTIME, b"ydebugpy");
        assert!(why(&m).starts_with("_Py_DebugOffsets: no cookie at _PyRuntime (0x100000: "));
        let mut m = with_table(minor);
        m.u64(entry(minor, ".version"), 0x030c_05f0);
        assert_eq!(
            why(&m),
            format!("_Py_DebugOffsets: version 0x30c05f0 is not the module's CPython 3.{minor}")
        );
        let mut m = with_table(minor);
        m.u64(entry(minor, "thread_state.current_frame"), 0x1000);
        assert_eq!(
            why(&m),
            "_Py_DebugOffsets: thread_state.current_frame is 4096 in a structure of 4096 bytes"
        );
        let mut m = with_table(minor);
        m.u64(entry(minor, "interpreter_frame.size"), u64::MAX);
        assert_eq!(
            why(&m),
            "_Py_DebugOffsets: interpreter_frame.executable is 0 in a structure of \
             18446744073709551615 bytes"
        );
        // A free-threaded build: 3.13t's frames are read (its offsets are the table's), not
        // 3.14t's; any other value is damage.
        let mut m = with_table(minor);
        m.u64(entry(minor, ".free_threaded"), 1);
        match minor {
            13 => the_one_thread(&read_state(&m, &symbols_of(minor), &[]).unwrap(), minor),
            _ => assert!(why(&m).contains("free-threaded: its Python frames are not read")),
        }
        m.u64(entry(minor, ".free_threaded"), 2);
        assert_eq!(why(&m), "_Py_DebugOffsets: free_threaded is 2");
        let mut m = with_table(minor);
        m.u64(entry(minor, "runtime_state.interpreters_head"), 8);
        // the table says interpreters.head is inside itself: the cookie and version are no
        // interpreter, and the walk says so without a panic
        let _ = read_state(&m, &symbols_of(minor), &[]);
        // a table cut short
        let mut m = with_table(minor);
        m.0.remove(&entry(minor, "unicode_object.asciiobject_size"));
        assert_eq!(why(&m), "_PyRuntime at 0x100000 is not in the memory captured");
    }
}

#[test]
fn a_frame_of_an_unknown_owner_stops_the_thread() {
    let mut m = with_table(13);
    m.put(0x62_0000 + 0x46, &[4]); // 3.13 has no owner 4
    let state = read_state(&m, &symbols_of(13), &[]).unwrap();
    let t = &state.threads[0];
    assert_eq!(t.frames.len(), 2);
    assert_eq!(t.stop.as_deref(), Some("frame at 0x620000 is not a frame (owner 4)"));
}

#[test]
fn every_byte_of_a_313_and_314_state_garbled_never_panics() {
    for minor in [13, 14] {
        let base = with_table(minor);
        let keys: Vec<u64> = base.0.keys().copied().collect();
        for (n, &k) in keys.iter().enumerate().filter(|(n, _)| n % 5 == 0) {
            for v in [0x00, 0xff, 0x41] {
                let mut m = base.clone();
                m.put(k, &[v ^ (n as u8)]);
                let _ = read_state(&m, &symbols_of(minor), &[]);
            }
        }
    }
}

/// Where each entry of the `_Py_DebugOffsets` tables is read is `offsetof` in the headers of
/// the version: 3.13's of the build tests/build_cpython.sh makes, 3.14's of Debian's
/// libpython3.14-dev (unpacked by the same script), both in `$STACKWALK_CACHE` (default
/// `~/.cache/stackwalk`). With that directory there, 3.13's headers must be in it (3.14's are
/// checked when the script could download them: sid's pool files go when sid moves on).
#[test]
fn the_debug_offsets_tables_are_the_headers() {
    let cache = std::env::var_os("STACKWALK_CACHE")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache/stackwalk"))
        })
        .unwrap();
    if !cache.exists() {
        return; // tests/build_cpython.sh never ran here: the Python tests say so too
    }
    let dirs: Vec<std::path::PathBuf> =
        std::fs::read_dir(&cache).unwrap().filter_map(|e| e.ok().map(|e| e.path())).collect();
    let find = |prefix: &str, suffix: &str| {
        dirs.iter()
            .find(|d| {
                let name = d.file_name().unwrap().to_string_lossy();
                name.starts_with(prefix) && name.ends_with(suffix)
            })
            .map(|d| d.join("include"))
    };
    let include_313 = find("cpython-3.13.", "");
    assert!(
        include_313
            .as_ref()
            .is_some_and(|i| i.join("python3.13/internal/pycore_runtime.h").exists()),
        "{} exists but holds no CPython 3.13 build: run tests/build_cpython.sh 3.13",
        cache.display()
    );
    let mut versions = vec![(13, include_313.unwrap())];
    if let Some(root) = find("cpython-3.14.", "") {
        // Debian's packages unpacked: the headers under usr/include
        versions.push((14, root.parent().unwrap().join("usr/include")));
    }
    let dir = std::env::temp_dir().join(format!("stackwalk-pydebugoffsets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (minor, include) in versions {
        let names = debug_offsets::entry_names(3, minor);
        let mut c = String::from(
            "#define Py_BUILD_CORE 1\n#include <Python.h>\n#include <internal/pycore_runtime.h>\n\
             #include <internal/pycore_frame.h>\n#include <internal/pycore_stackref.h>\n\
             #include <stddef.h>\n#include <stdio.h>\nint main(void) {\n",
        );
        // what the table does not say
        let (min, max) = match minor {
            13 => ("FRAME_OWNED_BY_CSTACK", "FRAME_OWNED_BY_CSTACK"),
            _ => ("FRAME_OWNED_BY_INTERPRETER", "FRAME_OWNED_BY_CSTACK"),
        };
        let tag = if minor == 13 { "0" } else { "Py_TAG_BITS" };
        for expr in [min, max, tag, "sizeof(PyCompactUnicodeObject) - sizeof(PyASCIIObject)"] {
            c.push_str(&format!("  printf(\"%zu\\n\", (size_t)({expr}));\n"));
        }
        for name in &names {
            let member = name.trim_start_matches('.');
            c.push_str(&format!(
                "  printf(\"%zu\\n\", (size_t)offsetof(_Py_DebugOffsets, {member}) / 8);\n"
            ));
        }
        c.push_str("  return 0;\n}\n");
        let versioned = include.join(format!("python3.{minor}"));
        let mut printed: Vec<usize> =
            numbers_printed_by(&dir.join(format!("table{minor}")), &c, &[&versioned, &include])
                .into_iter()
                .map(|n| n as usize)
                .collect();
        let (min_owner, max_owner, tag_bits, compact) = debug_offsets::constants(minor);
        let constants: Vec<usize> = printed.drain(..4).collect();
        assert_eq!(
            constants,
            [min_owner.into(), max_owner.into(), tag_bits as usize, compact as usize],
            "3.{minor}"
        );
        let ours: Vec<(&str, usize)> =
            names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
        let theirs: Vec<(&str, usize)> = names.iter().map(|n| n.as_str()).zip(printed).collect();
        assert_eq!(ours, theirs, "3.{minor}");
        eprintln!("3.{minor}: {} entries checked against {}", names.len(), include.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// 3.10's thread states name their OS thread only by `pthread_t`: the tid is
/// read from glibc's `struct pthread` at the offset where every thread
/// state's holds a distinct one of the process's tids.
#[test]
fn os_tids_from_struct_pthread() {
    let thread = |thread_id| PyThread {
        native_tid: 0,
        thread_id,
        holds_gil: false,
        interpreter: 0,
        frames: Vec::new(),
        stop: None,
    };
    let state = || PyState {
        version: (3, 10),
        threads: vec![thread(0x7000_0000), thread(0x7100_0000), thread(0x7200_0000)],
        warnings: Vec::new(),
    };
    let mut m = Mem::default();
    for (i, tid) in [(0u64, 500u32), (1, 501), (2, 502)] {
        let at = 0x7000_0000 + i * 0x100_0000;
        m.put(at, &[0; 1024]);
        m.u32(at + 16, 500); // the same tid in each: not the field
        m.u32(at + 720, tid);
    }
    let mut r = Reader { mem: &m };
    let mut s = state();
    os_tids(&mut r, &mut s, &[500, 501, 502, 9]);
    assert_eq!(s.threads.iter().map(|t| t.native_tid).collect::<Vec<_>>(), [500, 501, 502]);
    assert!(s.warnings.is_empty());
    // one thread gone: the others found, and said
    let mut s = state();
    os_tids(&mut r, &mut s, &[500, 502]);
    assert_eq!(s.threads.iter().map(|t| t.native_tid).collect::<Vec<_>>(), [500, 0, 502]);
    assert_eq!(s.warnings, ["1 thread states have no OS thread (found by their pthread_t)"]);
    // no tid anywhere: none guessed
    let mut s = state();
    os_tids(&mut r, &mut s, &[42]);
    assert!(s.threads.iter().all(|t| t.native_tid == 0));
    assert_eq!(s.warnings.len(), 1);
}

const FRAME_TYPE: u64 = 0x50_3000;
const PTHREAD: u64 = 0xa0_0000;

/// A 3.10 interpreter: frame objects, 3.10's line table, a thread state
/// that names its thread by `pthread_t` only (glibc's `struct pthread`
/// holds tid 77 at 720), running inner (unit 3) <- middle (unit 0) <- outer
/// (unit 5), each in a native eval call of its own.
fn interpreter_310() -> Mem {
    use super::layout::PY310 as P;
    let mut m = Mem::default();
    let layout::Gil::Runtime { last_holder, locked } = P.gil else { unreachable!() };
    let layout::CurrentFrame::Direct { tstate_current_frame } = P.current_frame else {
        unreachable!()
    };
    m.u64(RUNTIME + P.runtime_interpreters_head, INTERP);
    m.u64(RUNTIME + last_holder, TSTATE);
    m.u32(RUNTIME + locked, 1);
    m.u64(INTERP + P.interp_next, 0);
    m.u64(INTERP + P.interp_threads_head, TSTATE);
    m.u64(TSTATE + P.tstate_next, 0);
    m.u64(TSTATE + P.tstate_interp, INTERP);
    m.u64(TSTATE + P.tstate_thread_id, PTHREAD);
    m.u64(TSTATE + tstate_current_frame, 0x60_0000);
    m.put(PTHREAD, &[0; 1024]);
    m.u32(PTHREAD + 720, 77);
    for (at, name, first) in
        [(0x70_0000, "inner", 10), (0x80_0000, "middle", 20), (0x90_0000, "outer", 30)]
    {
        m.u64(at + P.object_type, CODE_TYPE);
        ascii_in(&P, &mut m, at + 0x1000, name);
        ascii_in(&P, &mut m, at + 0x3000, "/src/prog.py");
        m.u64(at + P.code_name, at + 0x1000);
        m.u64(at + P.code_filename, at + 0x3000);
        let table = at + 0x4000;
        m.u64(table + P.object_type, BYTES_TYPE);
        // 8 ranges of one code unit (2 bytes), each a line further
        let bytes: Vec<u8> = (0..8).flat_map(|_| [2, 1]).collect();
        m.u64(table + P.var_size, bytes.len() as u64);
        m.put(table + P.bytes_data, &bytes);
        m.u64(at + P.code_linetable, table);
        m.u32(at + P.code_firstlineno, first);
    }
    for (at, code, lasti, back) in [
        (0x60_0000, 0x70_0000, 3, 0x61_0000),
        (0x61_0000, 0x80_0000, 0, 0x62_0000),
        (0x62_0000, 0x90_0000, 5, 0),
    ] {
        m.u64(at + P.object_type, FRAME_TYPE);
        m.u64(at + P.frame_code, code);
        m.u64(at + P.frame_previous, back);
        m.u32(at + P.frame_instr, lasti);
    }
    m
}

fn symbols_310() -> Symbols {
    Symbols { version: (3, 10), frame_type: Some(FRAME_TYPE), ..symbols() }
}

#[test]
fn reads_310_frame_objects_and_finds_the_os_thread() {
    let m = interpreter_310();
    let state = read_state(&m, &symbols_310(), &[5, 77]).unwrap();
    assert!(state.warnings.is_empty(), "{:?}", state.warnings);
    let [t] = &state.threads[..] else { panic!("{:?}", state.threads) };
    assert_eq!((t.native_tid, t.thread_id, t.holds_gil, &t.stop), (77, PTHREAD, true, &None));
    let got: Vec<_> = t
        .frames
        .iter()
        .map(|f| (f.function.as_str(), f.qualname.as_str(), f.line, f.entry))
        .collect();
    assert_eq!(
        got,
        [
            ("inner", "inner", Some(14), true),
            ("middle", "middle", Some(21), true),
            ("outer", "outer", Some(36), true)
        ]
    );
    // A frame object of another type ends the thread's frames with the reason.
    let mut wrong = m.clone();
    wrong.u64(0x61_0000 + 8, 0x1234);
    let t = &read_state(&wrong, &symbols_310(), &[77]).unwrap().threads[0];
    assert_eq!(t.frames.len(), 1);
    assert_eq!(
        t.stop.as_deref(),
        Some("frame object at 0x610000: wrong type (0x1234 is not 0x503000)")
    );
    // No thread id of the process in its struct pthread: none guessed, and said.
    let state = read_state(&m, &symbols_310(), &[5]).unwrap();
    assert_eq!(state.threads[0].native_tid, 0);
    assert_eq!(state.warnings.len(), 1);
}

#[test]
fn every_byte_of_a_310_state_garbled_never_panics() {
    let base = interpreter_310();
    let keys: Vec<u64> =
        base.0.keys().copied().filter(|k| !(PTHREAD..PTHREAD + 1024).contains(k)).collect();
    for (n, &k) in keys.iter().enumerate() {
        for v in [0x00, 0xff, 0x80] {
            let mut m = base.clone();
            m.put(k, &[v ^ (n as u8)]);
            let _ = read_state(&m, &symbols_310(), &[77]);
        }
    }
}
