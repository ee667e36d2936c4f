//! The inputs the fuzz targets (`fuzz/`) failed on, kept in
//! `rust/tests/regressions/<target>/` once the bug was fixed, and a slice of
//! each target's corpus (`rust/tests/fuzz_corpus/<target>/`: the smallest
//! inputs of a campaign, each kept by libFuzzer because it reached code or
//! states no other input had), run through the same harness as the fuzz
//! target (`fuzz/harness/`): a fixed bug stays fixed, and the paths the
//! fuzzer explored stay panic-free, in `cargo test`. Each input must give an
//! error or a clean stop, never a panic.

#[path = "../../fuzz/harness/mod.rs"]
mod harness;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system's allocator, noting the largest single request (of any test
/// thread): a damaged size believed is an allocation of it, which a machine
/// may or may not refuse.
struct LargestRequest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for LargestRequest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: LargestRequest = LargestRequest;

fn reproducers(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rust/tests");
    let mut out = Vec::new();
    for dir in [root.join("regressions").join(target), root.join("fuzz_corpus").join(target)] {
        // A target that has found nothing has no regressions directory.
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for path in entries.map(|entry| entry.unwrap().path()).filter(|p| p.is_file()) {
            let data = std::fs::read(&path).unwrap();
            out.push((path, data));
        }
    }
    out.sort();
    out
}

fn run_all<T>(target: &str, run: fn(&[u8]) -> T) {
    let mut failed = Vec::new();
    for (path, data) in reproducers(target) {
        if std::panic::catch_unwind(|| run(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "panicked on {failed:?}");
}

#[test]
fn cfi() {
    run_all("cfi", harness::cfi::run);
}

#[test]
fn pe() {
    run_all("pe", harness::pe::run);
}

#[test]
fn macho() {
    run_all("macho", harness::macho::run);
}

#[test]
fn jitdump() {
    run_all("jitdump", harness::jitdump::run);
}

#[test]
fn sframe() {
    run_all("sframe", harness::sframe::run);
}

#[test]
fn pdb() {
    run_all("pdb", harness::pdb::run);
}

#[test]
fn unwind() {
    run_all("unwind", harness::unwind::run);
}

#[test]
fn perf() {
    run_all("perf", harness::perf::run);
}

#[test]
fn core() {
    run_all("core", harness::corefile::run);
}

#[test]
fn decompress() {
    run_all("decompress", harness::decompress::run);
}

#[test]
fn minidump() {
    run_all("minidump", harness::minidump::run);
}

#[test]
fn lines() {
    run_all("lines", harness::lines::run);
}

/// A compressed debug section whose header claims 432 PB (found by the fuzz
/// target `lines`, where the sanitizer's allocator aborts on the request) is
/// not believed: nothing near its claim is asked of the allocator.
#[test]
fn a_claimed_section_size_is_not_allocated() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rust/tests/regressions/lines");
    let data = std::fs::read(root.join("claimed-size")).unwrap();
    harness::lines::run(&data);
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(largest < 1 << 30, "an allocation of {largest} bytes was asked for");
}

#[test]
fn breakpad() {
    run_all("breakpad", harness::breakpad::run);
}

#[test]
fn perfmap() {
    run_all("perfmap", harness::perfmap::run);
}

/// The lines harness on a real file: this test's own executable (built with
/// DWARF), whose functions' lookups must nearly all find a function.
#[test]
fn lines_harness_on_this_executable() {
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let symbols = _core::symbolize::symbols::SymbolTable::from_elf(&exe).unwrap();
    let lookups = (symbols.len() * 3).min(harness::lines::MAX_LOOKUPS);
    let found = harness::lines::run(&exe);
    assert!(found >= lookups / 2, "{found} of {lookups} lookups found a function");
}

/// The breakpad harness on a small `.sym` file as `dump_syms` writes them:
/// every function's address, and its lines', must be found.
#[test]
fn breakpad_harness_on_a_sym_file() {
    let sym = "MODULE Linux x86_64 0123456789ABCDEF0123456789ABCDEF0 demo\n\
               FILE 0 demo.c\n\
               INLINE_ORIGIN 0 helper\n\
               FUNC 1130 20 0 main\n\
               INLINE 0 7 0 0 1134 8\n\
               1130 4 5 0\n\
               1134 8 12 0\n\
               113c 14 6 0\n\
               PUBLIC 1200 0 _start\n\
               STACK CFI INIT 1130 20 .cfa: $rsp 8 + .ra: .cfa -8 + ^\n\
               STACK CFI 1131 .cfa: $rsp 16 +\n";
    // Each address once as written, once past it: main's (3 records), 1134's and 113c's
    // lines, _start's, and the CFI's own.
    let found = harness::breakpad::run(sym.as_bytes());
    assert!(found >= 8, "{found} lookups found a function");
}

/// The breakpad harness on Windows x86 frame data: the programs run (the
/// made-up stack gives each `^` a word), whatever they compute.
#[test]
fn breakpad_harness_on_frame_data() {
    let sym = "MODULE windows x86 5A9832E5287241C1838ED98914E9B7FF1 test_app.pdb\n\
               FUNC 1000 40 8 f\n\
               STACK WIN 4 1000 20 3 0 8 4 10 0 1 $T0 .raSearch = $eip $T0 ^ = $esp $T0 4 + =\n\
               STACK WIN 0 1020 20 3 0 8 4 10 0 0 1\n";
    assert!(harness::breakpad::run(sym.as_bytes()) >= 2);
}

/// The perfmap harness on a map as V8 writes them: each range's start is
/// found, under the name of the last line that covers it.
#[test]
fn perfmap_harness_on_a_map() {
    let map = "7f3a40004000 3c Builtin:ArgumentsAdaptorTrampoline\n\
               7f3a40004040 1a0 LazyCompile:~outer /app.js:3\n\
               7f3a400041e0 80 JS:*inner /app.js:12\n\
               7f3a40004040 60 JS:*outer /app.js:3\n";
    // The four starts, each also one byte on; the sizes' words mostly fall outside.
    assert!(harness::perfmap::run(map.as_bytes()) >= 8);
}

/// The harness itself on a real file: this test's own executable as an ELF
/// image, looked up at each of its FDEs, which must nearly all be found.
#[test]
fn cfi_harness_on_this_executable() {
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let mut input = vec![0u8];
    input.extend(&exe);
    let found = harness::cfi::run(&input);
    let elf = _core::space::elf::read_elf(&exe).unwrap();
    let eh = elf.sections.eh_frame.unwrap();
    // Lookups go to MAX_LOOKUPS at most; an FDE holds at least 16 bytes.
    let fdes = (eh.size as usize / 16).min(harness::cfi::MAX_LOOKUPS / 3);
    assert!(found >= fdes / 2, "{found} rows found, {fdes} FDEs at least");
}
