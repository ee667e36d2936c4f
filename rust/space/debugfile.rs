//! Separate debug files: where gdb and eu-stack look for the debug info a
//! stripped ELF file left elsewhere, and the `.debug_frame` found there.
//!
//! In order: `DEBUG_ROOT/.build-id/xx/yyyy.debug` by the file's build id;
//! then the name in its `.gnu_debuglink` section next to the file, in a
//! `.debug/` directory next to it, and under `DEBUG_ROOT/<the file's
//! directory>/`. A build-id candidate must carry the same build id; a
//! debuglink candidate the same build id, or, when either file has none, the
//! CRC-32 the link records (gdb's checks). Last, debuginfod's cache
//! (`crate::space::debuginfod::cached`), by build id.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectSection};

use crate::source::memory::Data;
use crate::space::sections::{Compression, SectionInfo};

/// `DEBUG_ROOT/.build-id/xx/yyyy.debug` for a build id (None if it is too
/// short to split).
pub fn build_id_path(build_id: &[u8], debug_root: &Path) -> Option<PathBuf> {
    let hex = crate::space::finder::hex(build_id);
    (hex.len() > 2)
        .then(|| debug_root.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..])))
}

/// The file name and CRC-32 of an ELF file's `.gnu_debuglink` section: a
/// NUL-terminated name, padding to 4 bytes, the CRC (little-endian here).
pub fn debuglink(data: &[u8]) -> Option<(String, u32)> {
    let file = object::read::elf::ElfFile64::<object::LittleEndian, &[u8]>::parse(data).ok()?;
    let bytes = file.section_by_name(".gnu_debuglink")?.data().ok()?;
    let nul = bytes.iter().position(|&b| b == 0)?;
    let crc_at = (nul + 1).next_multiple_of(4);
    let crc = bytes.get(crc_at..crc_at + 4)?;
    let name = std::str::from_utf8(&bytes[..nul]).ok()?;
    // A name, not a path: nothing may lead out of the directories searched.
    if name.is_empty() || name.contains('/') || name == ".." {
        return None;
    }
    Some((name.to_owned(), u32::from_le_bytes(crc.try_into().ok()?)))
}

/// CRC-32 (IEEE 802.3, as zlib's `crc32` and `.gnu_debuglink` use it).
pub fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    !bytes.iter().fold(!0u32, |c, &b| TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8))
}

fn build_id(data: &[u8]) -> Option<Vec<u8>> {
    crate::space::elf::summarize(data).ok()?.build_id
}

/// A regular file, mapped read-only (never opened if it is not one).
pub fn map(path: &Path) -> Option<Data> {
    crate::source::files::map(path).ok()
}

/// The separate debug file of the ELF file `data` (found at `path`, if it
/// came from a file), checked to belong to it: by build id under
/// `debug_root`, by `.gnu_debuglink`, then in debuginfod's cache.
pub fn find(data: &[u8], path: Option<&Path>, debug_root: &Path) -> Option<(PathBuf, Data)> {
    let own_id = build_id(data);
    if let Some(candidate) = own_id.as_deref().and_then(|id| build_id_path(id, debug_root)) {
        if let Some(debug) = map(&candidate) {
            if build_id(&debug) == own_id {
                return Some((candidate, debug));
            }
        }
    }
    if let Some(found) = by_debuglink(data, path, debug_root, own_id.as_deref()) {
        return Some(found);
    }
    let id = own_id?;
    let cached = crate::space::debuginfod::cached(&id, crate::space::debuginfod::Kind::Debuginfo)?;
    let debug = map(&cached)?;
    (build_id(&debug).as_deref() == Some(&*id)).then_some((cached, debug))
}

/// The file `.gnu_debuglink` names, next to the file, in `.debug/` next to
/// it, or under `debug_root`: with the same build id, or the link's CRC.
fn by_debuglink(
    data: &[u8],
    path: Option<&Path>,
    debug_root: &Path,
    own_id: Option<&[u8]>,
) -> Option<(PathBuf, Data)> {
    let (name, crc) = debuglink(data)?;
    let dir = path?.parent()?;
    let mut candidates = vec![dir.join(&name), dir.join(".debug").join(&name)];
    if let Ok(absolute) = std::path::absolute(dir) {
        let relative = absolute.strip_prefix("/").unwrap_or(&absolute);
        candidates.push(debug_root.join(relative).join(&name));
    }
    let own = path.and_then(|p| std::fs::canonicalize(p).ok());
    candidates.into_iter().find_map(|candidate| {
        if own.is_some() && std::fs::canonicalize(&candidate).ok() == own {
            return None; // the link names the file itself
        }
        let debug = map(&candidate)?;
        let ids_match = own_id.is_some() && build_id(&debug).as_deref() == own_id;
        (ids_match || crc32(&debug) == crc).then_some((candidate, debug))
    })
}

/// A `.debug_frame` that holds bytes in `data`, if the ELF file has one:
/// where they are, and how they are compressed (see
/// [`crate::space::elf::debug_frame_of`]).
pub fn debug_frame_section(data: &[u8]) -> Option<(SectionInfo, Compression)> {
    let file = object::read::elf::ElfFile64::<object::LittleEndian, &[u8]>::parse(data).ok()?;
    let (section, compression) = crate::space::elf::debug_frame_of(&file);
    Some((section?, compression))
}

/// The `.debug_frame` of the separate debug file of `data` (see [`find`]):
/// the debug file's bytes, where the section is in them (distributions
/// compress their debug files: how), and its path.
pub fn separate_debug_frame(
    data: &[u8],
    path: Option<&Path>,
    debug_root: &Path,
) -> Option<(Arc<Data>, SectionInfo, Compression, PathBuf)> {
    let (found, debug) = find(data, path, debug_root)?;
    let (section, compression) = debug_frame_section(&debug)?;
    Some((Arc::new(debug), section, compression, found))
}

/// Whether the ELF file has a `.debug_info` with bytes (a stripped file's
/// section headers may remain, with none: NOBITS).
pub fn has_debug_info(file: &object::File<'_>) -> bool {
    let info = file.section_by_name(".debug_info");
    info.and_then(|s| s.file_range()).is_some_and(|(_, size)| size > 0)
}

/// Whether the ELF file `data` (at `path`) has DWARF here: its own, or its
/// separate debug file's where `crate::symbolize::lines::DebugInfo::load` finds it, without
/// reading it.
pub fn has_dwarf(data: &[u8], path: Option<&Path>, debug_root: Option<&Path>) -> bool {
    let own = |data: &[u8]| object::File::parse(data).is_ok_and(|f| has_debug_info(&f));
    own(data)
        || debug_root.and_then(|root| find(data, path, root)).is_some_and(|(_, debug)| own(&debug))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b"The quick brown fox jumps over the lazy dog"), 0x414f_a339);
    }

    #[test]
    fn build_id_paths() {
        let root = Path::new("/r");
        assert_eq!(
            build_id_path(&[0xab, 0xcd, 0xef], root),
            Some(PathBuf::from("/r/.build-id/ab/cdef.debug"))
        );
        assert_eq!(build_id_path(&[0xab], root), None);
    }

    #[test]
    fn damaged_files_have_no_link() {
        assert_eq!(debuglink(b""), None);
        assert_eq!(debuglink(b"\x7fELF not really"), None);
        assert!(find(b"garbage", Some(Path::new("/nonexistent/x")), Path::new("/nonexistent"))
            .is_none());
    }
}
