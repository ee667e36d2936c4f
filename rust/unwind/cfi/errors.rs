//! Why a module's unwind tables could not be used, or a row found.

use std::fmt;

#[derive(Debug)]
#[non_exhaustive]
pub enum ModuleError {
    /// A section lies (partly) outside the file.
    SectionOutOfFile { section: &'static str, offset: u64, size: u64, file_size: u64 },
    /// The address range of the module is empty or inverted.
    BadRange { start: u64, end: u64 },
}

impl fmt::Display for ModuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModuleError::SectionOutOfFile { section, offset, size, file_size } => write!(
                f,
                "section {section} at file offset {offset:#x} size {size:#x} lies outside the \
                 file ({file_size:#x} bytes)"
            ),
            ModuleError::BadRange { start, end } => {
                write!(f, "empty address range {start:#x}..{end:#x}")
            }
        }
    }
}

impl std::error::Error for ModuleError {}

/// Why no rule could be found for an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupError {
    /// No FDE covers the address.
    NoFde,
    /// The CFI is malformed (where gimli found it so).
    Cfi(gimli::Error),
    /// The return-address column is one this unwinder does not track.
    BadReturnColumn(u16),
    /// A Breakpad `STACK CFI` rule of a form a row cannot hold (this one).
    Breakpad(&'static str),
    /// A PE file's x64 unwind tables are damaged here (this way).
    Pe(&'static str),
    /// ARM's EHABI tables are damaged here, or say not to unwind.
    Ehabi(&'static str),
    /// A Mach-O file's compact unwind info is damaged here (this way).
    Compact(&'static str),
    /// The `.sframe` table is damaged here (this way).
    SFrame(&'static str),
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::NoFde => f.write_str("no FDE covers the address"),
            LookupError::Cfi(e) => write!(f, "malformed CFI: {e}"),
            LookupError::BadReturnColumn(r) => write!(f, "unsupported return-address column {r}"),
            LookupError::Breakpad(why) => write!(f, "STACK CFI rule not supported: {why}"),
            LookupError::Pe(why) => write!(f, "bad x64 unwind info: {why}"),
            LookupError::Ehabi(why) => write!(f, "bad ARM unwind table entry: {why}"),
            LookupError::Compact(why) => write!(f, "bad compact unwind info: {why}"),
            LookupError::SFrame(why) => write!(f, "bad SFrame table: {why}"),
        }
    }
}

impl From<gimli::Error> for LookupError {
    fn from(e: gimli::Error) -> Self {
        match e {
            gimli::Error::NoUnwindInfoForAddress => LookupError::NoFde,
            e => LookupError::Cfi(e),
        }
    }
}
