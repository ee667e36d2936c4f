//! The walk over interpreter memory built byte by byte (3.11's layout):
//! what a real interpreter cannot be made to show on demand: loops, zeroed
//! and missing memory, objects of the wrong type.

use super::layout::PY311 as L;
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
    }
}

fn ascii(m: &mut Mem, at: u64, s: &str) {
    m.u64(at + L.object_type, STR_TYPE);
    m.u64(at + L.unicode_length, s.len() as u64);
    m.u32(at + L.unicode_state, 0xe4);
    m.put(at + L.unicode_ascii_data, s.as_bytes());
}

/// A code object `name` at `at`, first line `first`, whose table says
/// each code unit is one line further.
fn code(m: &mut Mem, at: u64, name: &str, first: u32) {
    m.u64(at + L.object_type, CODE_TYPE);
    ascii(m, at + 0x1000, name);
    ascii(m, at + 0x2000, &format!("C.{name}"));
    ascii(m, at + 0x3000, "/src/prog.py");
    m.u64(at + L.code_name, at + 0x1000);
    m.u64(at + L.code_qualname, at + 0x2000);
    m.u64(at + L.code_filename, at + 0x3000);
    let table = at + 0x4000;
    m.u64(table + L.object_type, BYTES_TYPE);
    // 8 entries of one code unit, each "line + 1" (kind 13, svarint 2)
    let bytes: Vec<u8> = (0..8).flat_map(|_| [0x80 | (13 << 3), 2]).collect();
    m.u64(table + L.var_size, bytes.len() as u64);
    m.put(table + L.bytes_data, &bytes);
    m.u64(at + L.code_linetable, table);
    m.u32(at + L.code_firstlineno, first);
}

fn frame(m: &mut Mem, at: u64, code: u64, unit: u64, previous: u64, entry: bool) {
    m.u64(at + L.frame_code, code);
    m.u64(at + L.frame_previous, previous);
    m.u64(at + L.frame_prev_instr, code + L.code_instructions + 2 * unit);
    m.put(at + L.frame_is_entry, &[u8::from(entry), 0]);
}

/// One interpreter, one thread (tid 77) holding the GIL, running
/// inner (unit 3) <- middle (unit 0, entry) <- outer (unit 5, entry).
fn interpreter() -> Mem {
    let mut m = Mem::default();
    m.u64(RUNTIME + L.runtime_interpreters_head, INTERP);
    m.u64(RUNTIME + L.runtime_gil_last_holder, TSTATE);
    m.u32(RUNTIME + L.runtime_gil_locked, 1);
    m.u64(INTERP + L.interp_next, 0);
    m.u64(INTERP + L.interp_threads_head, TSTATE);
    m.u64(TSTATE + L.tstate_next, 0);
    m.u64(TSTATE + L.tstate_interp, INTERP);
    m.u64(TSTATE + L.tstate_cframe, CFRAME);
    m.u64(TSTATE + L.tstate_thread_id, 0x7f00);
    m.u64(TSTATE + L.tstate_native_thread_id, 77);
    m.u64(CFRAME + L.cframe_current_frame, 0x60_0000);
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
fn reads_threads_frames_lines_and_the_gil() {
    let m = interpreter();
    let state = read_state(&m, &symbols()).unwrap();
    assert_eq!(state.version, (3, 11));
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
    m.u32(RUNTIME + L.runtime_gil_locked, 0);
    let state = read_state(&m, &symbols()).unwrap();
    assert!(!state.threads[0].holds_gil);
}

#[test]
fn a_frame_chain_that_loops_stops_with_its_reason() {
    let mut m = interpreter();
    m.u64(0x62_0000 + L.frame_previous, 0x60_0000);
    let state = read_state(&m, &symbols()).unwrap();
    let t = &state.threads[0];
    assert_eq!(t.frames.len(), 3);
    assert_eq!(t.stop.as_deref(), Some("the frame chain loops back to 0x600000"));
}

#[test]
fn a_thread_list_that_loops_is_read_once() {
    let mut m = interpreter();
    m.u64(TSTATE + L.tstate_next, TSTATE);
    let state = read_state(&m, &symbols()).unwrap();
    assert_eq!(state.threads.len(), 1);
    assert_eq!(state.warnings, ["interpreter 0: thread list loops"]);
}

#[test]
fn a_code_object_of_the_wrong_type_stops_the_thread() {
    let mut m = interpreter();
    m.u64(0x80_0000 + L.object_type, 0x1234);
    let state = read_state(&m, &symbols()).unwrap();
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
    let e = read_state(&empty, &symbols()).unwrap_err();
    assert_eq!(e.to_string(), "_PyRuntime at 0x100000 is not in the memory captured");
    let mut zeroed = interpreter();
    zeroed.u64(RUNTIME + L.runtime_interpreters_head, 0);
    let e = read_state(&zeroed, &symbols()).unwrap_err();
    assert!(e.to_string().starts_with("no interpreter: _PyRuntime.interpreters.head is NULL"));
    // the thread state's memory zeroed: no frames, no panic
    let mut m = interpreter();
    m.put(TSTATE, &[0; 256]);
    let state = read_state(&m, &symbols()).unwrap();
    assert_eq!(state.threads.len(), 1);
    assert!(state.threads[0].frames.is_empty());
    // the frame's memory zeroed: code NULL is no code object
    let mut m = interpreter();
    m.put(0x61_0000, &[0; 80]);
    let state = read_state(&m, &symbols()).unwrap();
    assert_eq!(state.threads[0].frames.len(), 1);
    assert_eq!(
        state.threads[0].stop.as_deref(),
        Some("code object at 0x0: 0x0 is not in the memory")
    );
}

#[test]
fn other_versions_are_refused_by_name() {
    let m = interpreter();
    let e = read_state(&m, &Symbols { version: (3, 9), ..symbols() }).unwrap_err();
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
            let _ = read_state(&m, &symbols());
        }
    }
}

/// The 3.11 layout is `offsetof` of each field in the installed CPython 3.11 headers (Debian's
/// python3.11-dev, which .ci/setup installs), compiled with `Py_BUILD_CORE` by the C compiler.
#[test]
fn the_311_layout_is_the_headers() {
    let include = std::path::Path::new("/usr/include/python3.11");
    assert!(
        include.join("internal/pycore_frame.h").exists(),
        "the CPython 3.11 headers are needed (apt-get install python3-dev)"
    );
    let dir = std::env::temp_dir().join(format!("stackwalk-pylayout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fields = layout::fields(&L);
    let mut c = String::from(
        "#define Py_BUILD_CORE 1\n#include <Python.h>\n#include <internal/pycore_runtime.h>\n\
         #include <internal/pycore_interp.h>\n#include <internal/pycore_frame.h>\n\
         #include <stddef.h>\n#include <stdio.h>\nint main(void) {\n",
    );
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
    c.push_str("  return 0;\n}\n");
    std::fs::write(dir.join("layout.c"), c).unwrap();
    let exe = dir.join("layout");
    let cc = std::process::Command::new("cc")
        .arg(format!("-I{}", include.display()))
        .arg(dir.join("layout.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let out = std::process::Command::new(&exe).output().unwrap();
    let printed: Vec<u64> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    let _ = std::fs::remove_dir_all(&dir);
    let ours: Vec<(&str, u64)> = fields.iter().map(|(n, v)| (*n, *v)).collect();
    let theirs: Vec<(&str, u64)> = fields.iter().map(|(n, _)| *n).zip(printed).collect();
    assert_eq!(ours, theirs);
}
