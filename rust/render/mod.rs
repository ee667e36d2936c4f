//! The render stage: what a report shows of the frames it was given, and
//! the writers of its text, JSON and SVG.
//!
//! - [`frame`]: the frames one unwound frame is shown as (inline frames,
//!   names, lines): one rule for every report.
//! - [`text`]: escaped names, numbers as perf script and the text reports
//!   print them.
//! - [`json`]: JSON strings and a frame's fields as every JSON report
//!   writes them.
//! - [`flamegraph`]: folded stacks drawn as an SVG.
//!
//! perf's sample writers (`crate::profile`) and the snapshot document's
//! frames (the bindings' `Symbolizer.frame_dicts`) are built on these.
//! Imports go downward only: `symbolize` and `unwind`, never the sources'
//! drivers.

pub mod flamegraph;
pub mod frame;
pub mod json;
pub mod minidump_stackwalk;
pub mod records;
pub mod snapshot;
pub mod text;
