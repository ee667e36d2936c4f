//! The `pdb` fuzz target: see `harness/pdb.rs`, which
//! `rust/tests/regressions.rs` also runs on every reproducer kept.
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(
    init: {
        // A panic in a crate of the registry (the PDB reader, which
        // `PdbSymbols` runs under `catch_unwind`) unwinds to that guard, and
        // the input reads as a damaged file; any other panic aborts, as
        // libFuzzer's own hook has it, and is a crash found.
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let registry = info.location().is_some_and(|l| l.file().contains("/.cargo/registry/"));
            if !registry {
                abort(info);
            }
        }));
    },
    |data: &[u8]| {
        harness::pdb::run(data);
    }
);
