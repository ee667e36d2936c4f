//! stackwalk's native core: DWARF CFI unwinding over captured memory.
//!
//! Everything here is plain Rust except `python`, the one PyO3 binding
//! module, compiled only with the `python` feature (maturin turns it on).

#[cfg(feature = "python")]
mod python;

pub mod arch;
pub mod breakpad;
pub mod cfi;
pub mod codemap;
pub mod corefile;
pub mod debugfile;
pub mod debuginfod;
pub mod elf;
pub mod expr;
pub mod fallback;
pub mod files;
pub mod gopclntab;
pub mod lines;
pub mod memory;
pub mod minidump;
pub mod modules;
pub mod perf;
pub mod perfmap;
pub mod plt;
pub mod process;
pub mod profile;
pub mod pyframes;
pub mod registers;
pub mod rule_cache;
mod sigframe;
pub mod space;
pub mod stackdb;
pub mod symbolize;
pub mod symbols;
pub mod symserver;
pub mod threads;
pub mod unwind;
