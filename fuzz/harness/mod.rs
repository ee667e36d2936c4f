//! What each fuzz target does with its input, as plain functions: the fuzz
//! targets (`fuzz_targets/`) call them, and so does `rust/tests/regressions.rs`
//! on the reproducers of the bugs found, so a fixed bug stays fixed in
//! `cargo test`. A panic is a failure; so is a hang or an allocation without
//! bound (libFuzzer's -timeout and -rss_limit_mb catch those).
#![allow(dead_code)]

pub mod breakpad;
pub mod cfi;
pub mod corefile;
pub mod decompress;
pub mod jitdump;
pub mod lines;
pub mod macho;
pub mod minidump;
pub mod pdb;
pub mod pe;
pub mod perf;
pub mod perfmap;
pub mod sframe;
pub mod unwind;

/// The hex words of an input read as text (a `.sym` file's addresses, a perf
/// map's), at most `most`: the addresses a harness looks up.
pub fn hex_words(data: &[u8], most: usize) -> Vec<u64> {
    let text = String::from_utf8_lossy(data);
    let words = text.split(|c: char| !c.is_ascii_hexdigit()).filter(|w| !w.is_empty());
    words.filter_map(|w| u64::from_str_radix(w, 16).ok()).take(most).collect()
}
