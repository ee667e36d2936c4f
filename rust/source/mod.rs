//! The first stage: what a crash or a profile gives — threads with their
//! registers, readable memory, the files mapped and the process's facts —
//! read from ELF cores, minidumps, live processes, captures and perf.data
//! recordings; which thread crashed, and by which signal; the kernel's
//! signal frame layout; and the memory and file primitives every later
//! stage reads through.

pub mod bytes;
pub mod capture;
pub mod corefile;
pub mod files;
pub mod memory;
pub mod minidump;
pub mod perf;
pub mod process;
pub(crate) mod sigframe;
pub mod signal;
