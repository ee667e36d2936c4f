//! stackwalk's native core: DWARF CFI unwinding over captured memory.
//!
//! Everything here is plain Rust except `python`, the one PyO3 binding
//! module, compiled only with the `python` feature (maturin turns it on).

#[cfg(feature = "python")]
mod python;

pub mod arch;
pub mod profile;
pub mod render;
pub mod source;
pub mod space;
pub mod stackdb;
pub mod symbolize;
pub mod threads;
pub mod unwind;
