//! The `jitdump` fuzz target: see `harness/jitdump.rs`, which
//! `rust/tests/regressions.rs` also runs on every reproducer kept.
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::jitdump::run(data);
});
