//! MiniDebugInfo (`.gnu_debugdata`): an xz-compressed ELF file inside a
//! stripped one, holding the `.symtab` entries of the functions its
//! `.dynsym` lacks, as Fedora's and RHEL's `find-debuginfo` leaves in every
//! package (gdb, elfutils, systemd-coredump and perf read it). Its symbols
//! and the file's `.dynsym` together name every function, where no debug
//! file is found.

use object::{Object, ObjectSection};

/// The most bytes the inner file is decompressed to: Fedora's largest
/// (libLLVM's) are a few MiB; a section claiming more is damaged or hostile.
const MAX_INNER: usize = 64 << 20;

/// The ELF file in `data`'s `.gnu_debugdata` section, decompressed; None
/// where there is no such section, or it does not decompress (damaged, cut
/// short, larger than [`MAX_INNER`]) to an ELF file.
pub fn inner_file(data: &[u8]) -> Option<Vec<u8>> {
    let file = object::File::parse(data).ok()?;
    let section = file.section_by_name(".gnu_debugdata")?;
    let compressed = section.data().ok()?;
    let inner = crate::source::corefile::xz_bytes(compressed, MAX_INNER).ok()?;
    inner.starts_with(b"\x7fELF").then_some(inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_section_no_file() {
        assert!(inner_file(b"not an elf file").is_none());
        assert!(inner_file(&[]).is_none());
    }
}
