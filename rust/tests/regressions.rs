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

use std::path::PathBuf;

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
fn minidump() {
    run_all("minidump", harness::minidump::run);
}

/// The harness itself on a real file: this test's own executable as an ELF
/// image, looked up at each of its FDEs, which must nearly all be found.
#[test]
fn cfi_harness_on_this_executable() {
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let mut input = vec![0u8];
    input.extend(&exe);
    let found = harness::cfi::run(&input);
    let elf = _core::elf::read_elf(&exe).unwrap();
    let eh = elf.sections.eh_frame.unwrap();
    // Lookups go to MAX_LOOKUPS at most; an FDE holds at least 16 bytes.
    let fdes = (eh.size as usize / 16).min(harness::cfi::MAX_LOOKUPS / 3);
    assert!(found >= fdes / 2, "{found} rows found, {fdes} FDEs at least");
}
