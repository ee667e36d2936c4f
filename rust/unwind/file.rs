//! A module's file opened for unwinding: its headers read, the separate
//! debug file's `.debug_frame` found when it has none of its own, its CFI
//! indexed. One way for every caller: the Python unwinder's `add_module`
//! and `add_module_image`, and a perf recording's files.

use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use crate::arch::Arch;
use crate::source::memory::Data;
use crate::space::elf::read_elf;
use crate::unwind::cfi::UnwindInfo;

/// A module's file with its CFI indexed.
pub struct IndexedFile {
    pub arch: Arch,
    pub info: Arc<UnwindInfo>,
    /// The loadable segments' span, in ELF addresses.
    pub range: Range<u64>,
    /// The separate debug file whose `.debug_frame` it uses.
    pub debug_path: Option<String>,
}

/// Why a file cannot be unwound through.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileError {
    /// An ELF file of a machine no unwinder is for (its e_machine).
    OtherMachine(u16),
    /// No usable ELF file, or CFI that cannot be indexed: why.
    Unreadable(String),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::OtherMachine(machine) => write!(f, "the file is for e_machine {machine}"),
            FileError::Unreadable(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for FileError {}

/// Read the module file `data` for unwinding. `debug`: the file's path and
/// the root to look for its separate debug file under, when the file has
/// no `.debug_frame` (`.eh_frame` may lack functions); None: not looked for.
pub fn index_file(
    data: Arc<Data>,
    debug: Option<(&Path, &Path)>,
) -> Result<IndexedFile, FileError> {
    let elf = read_elf(&data).map_err(|e| FileError::Unreadable(e.to_string()))?;
    let Some(arch) = Arch::from_elf_machine(elf.machine) else {
        return Err(FileError::OtherMachine(elf.machine));
    };
    let separate = match (debug, elf.sections.debug_frame) {
        (Some((path, root)), None) => {
            crate::space::debugfile::separate_debug_frame(&data, Some(path), root)
        }
        _ => None,
    };
    let debug_path = separate.as_ref().map(|(_, _, _, p)| p.to_string_lossy().into_owned());
    let separate = separate.map(|(bytes, section, compression, _)| (bytes, section, compression));
    let info = UnwindInfo::with_debug_file(arch, data, elf.sections, separate)
        .map_err(|e| FileError::Unreadable(e.to_string()))?;
    Ok(IndexedFile { arch, info: Arc::new(info), range: elf.range, debug_path })
}
