//! The `sframe` fuzz target: see `harness/sframe.rs`, which
//! `rust/tests/regressions.rs` also runs on every reproducer kept.
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::sframe::run(data);
});
