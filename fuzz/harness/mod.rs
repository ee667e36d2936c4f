//! What each fuzz target does with its input, as plain functions: the fuzz
//! targets (`fuzz_targets/`) call them, and so does `rust/tests/regressions.rs`
//! on the reproducers of the bugs found, so a fixed bug stays fixed in
//! `cargo test`. A panic is a failure; so is a hang or an allocation without
//! bound (libFuzzer's -timeout and -rss_limit_mb catch those).
#![allow(dead_code)]

pub mod breakpad;
pub mod cfi;
pub mod corefile;
pub mod lines;
pub mod minidump;
pub mod perf;
pub mod perfmap;
pub mod unwind;
