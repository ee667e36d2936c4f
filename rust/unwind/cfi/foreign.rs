//! Rules kept outside a module's own file: the trait the unwinder asks
//! through (a Breakpad symbol file's `STACK CFI`, a PE file's or a Mach-O
//! file's tables, a jitdump's), and the lookup placing their offsets.

use std::ops::Range;

use super::{LookupError, Row};
use crate::arch::Arch;

/// Unwind rules kept outside a module's file, for a module whose file is
/// missing: the `STACK CFI` records of its Breakpad symbol file, which
/// `crate::symbolize::breakpad` reads and answers this for. The unwinder asks
/// through this trait and never reads a symbol file itself.
pub trait ForeignCfi: Send + Sync {
    /// The rules at module offset `offset` and the offsets they hold over;
    /// `LookupError::NoFde` where no record covers it. `exact`: the offset
    /// is a pc (frame 0's, an interrupted frame's), not a return address
    /// less one.
    fn row(&self, arch: Arch, offset: u64, exact: bool) -> Result<(Row, Range<u64>), LookupError>;
    /// Whether a function the rules' file names starts at module offset
    /// `offset`.
    fn function_start(&self, offset: u64) -> bool;
    /// The extents of the functions the rules' file knows (module
    /// offsets): the module's code map where its file is missing.
    fn functions(&self) -> Vec<Range<u64>> {
        Vec::new()
    }
    /// Windows x86 frame data at module offset `offset` (a Breakpad symbol
    /// file's `STACK WIN` records), which the walk takes before [`row`]'s.
    ///
    /// [`row`]: ForeignCfi::row
    fn frame_data(&self, offset: u64) -> Option<crate::unwind::frame_data::FrameData<'_>> {
        let _ = offset;
        None
    }
    /// The bytes of parameters the function at module offset `offset` takes
    /// (what a Windows x86 `__stdcall` function pops), where known.
    fn parameter_size(&self, offset: u64) -> Option<u32> {
        let _ = offset;
        None
    }
}

/// The foreign rules at runtime address `address` of a module at `base`.
pub(super) fn foreign_row(
    rules: &dyn ForeignCfi,
    arch: Arch,
    base: u64,
    address: u64,
    exact: bool,
) -> Result<(Row, Range<u64>), LookupError> {
    let (row, range) = rules.row(arch, address.wrapping_sub(base), exact)?;
    Ok((row, range.start.wrapping_add(base)..range.end.wrapping_add(base)))
}
