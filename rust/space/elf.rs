//! Finding what unwinding needs in an ELF file: the loadable address range,
//! the machine, and where `.eh_frame`, `.eh_frame_hdr` and `.debug_frame`
//! are. The `object` crate reads only the headers, in place, so adding a
//! module costs microseconds whatever the size of its CFI.

use std::fmt;
use std::ops::Range;

use object::elf::{FileHeader32, FileHeader64, PT_GNU_EH_FRAME, PT_GNU_SFRAME, PT_LOAD};
use object::read::elf::{ElfFile, FileHeader, ProgramHeader};
use object::{LittleEndian, Object, ObjectSection};

use crate::space::sections::{CodeSegment, Compression, ModuleSections, SectionInfo};

/// What an ELF file offers the unwinder.
#[derive(Clone, Debug)]
pub struct ElfInfo {
    /// `e_machine`.
    pub machine: u16,
    /// ELF address range of the PT_LOAD segments.
    pub range: Range<u64>,
    pub sections: ModuleSections,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElfError {
    /// Not a little-endian ELF file, or its headers are damaged.
    Parse(String),
    /// No PT_LOAD segment with a size.
    NoLoadSegment,
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfError::Parse(e) => write!(f, "not a readable little-endian ELF file: {e}"),
            ElfError::NoLoadSegment => f.write_str("no loadable segment (PT_LOAD)"),
        }
    }
}

impl std::error::Error for ElfError {}

/// Whether `data` starts like an ELF file of class ELFCLASS32 (byte 4 = 1).
/// Anything else is read as 64-bit, and rejected there if it is not.
pub(crate) fn is_elf32(data: &[u8]) -> bool {
    data.len() > 4 && data[..4] == object::elf::ELFMAG && data[4] == object::elf::ELFCLASS32
}

/// What unwinding needs from an ELF file, 64-bit or 32-bit (i386).
pub fn read_elf(data: &[u8]) -> Result<ElfInfo, ElfError> {
    if is_elf32(data) {
        read_elf_class::<FileHeader32<LittleEndian>>(data)
    } else {
        read_elf_class::<FileHeader64<LittleEndian>>(data)
    }
}

fn read_elf_class<Elf: FileHeader<Endian = LittleEndian>>(
    data: &[u8],
) -> Result<ElfInfo, ElfError> {
    let file = ElfFile::<Elf, &[u8]>::parse(data).map_err(|e| ElfError::Parse(e.to_string()))?;
    let endian = file.endian();
    let machine = file.elf_header().e_machine(endian);
    let (mut start, mut end) = (u64::MAX, 0u64);
    let mut hdr_segment = None;
    let mut exidx_segment = None;
    let mut sframe_segment = None;
    let mut code = Vec::new();
    for ph in file.elf_program_headers() {
        let (vaddr, memsz) = (ph.p_vaddr(endian).into(), ph.p_memsz(endian).into());
        match ph.p_type(endian) {
            PT_LOAD if memsz > 0 => {
                start = start.min(vaddr);
                end = end.max(vaddr.saturating_add(memsz));
                if ph.p_flags(endian) & object::elf::PF_X != 0 {
                    code.push(CodeSegment {
                        address: vaddr,
                        // A damaged header's segment may run past the end of the address
                        // space: it ends there.
                        size: memsz.min(u64::MAX - vaddr),
                        file_offset: ph.p_offset(endian).into(),
                        file_size: ph.p_filesz(endian).into(),
                    });
                }
            }
            PT_GNU_EH_FRAME => {
                hdr_segment = Some(SectionInfo {
                    file_offset: ph.p_offset(endian).into(),
                    size: ph.p_filesz(endian).into(),
                    address: vaddr,
                })
            }
            PT_GNU_SFRAME => {
                sframe_segment = Some(SectionInfo {
                    file_offset: ph.p_offset(endian).into(),
                    size: ph.p_filesz(endian).into(),
                    address: vaddr,
                })
            }
            object::elf::PT_ARM_EXIDX if machine == object::elf::EM_ARM => {
                exidx_segment = Some(SectionInfo {
                    file_offset: ph.p_offset(endian).into(),
                    size: ph.p_filesz(endian).into(),
                    address: vaddr,
                })
            }
            _ => {}
        }
    }
    if start >= end {
        return Err(ElfError::NoLoadSegment);
    }
    let section = |name: &str| {
        let s = file.section_by_name(name)?;
        let (file_offset, size) = s.file_range()?; // None for SHT_NOBITS
        (size > 0).then_some(SectionInfo { file_offset, size, address: s.address() })
    };
    let address = |name: &str| file.section_by_name(name).map(|s| s.address());
    let (debug_frame, debug_frame_compression) = debug_frame_of(&file);
    let sections = ModuleSections {
        eh_frame: section(".eh_frame"),
        // Files without section headers still have PT_GNU_EH_FRAME.
        eh_frame_hdr: section(".eh_frame_hdr").or(hdr_segment),
        debug_frame,
        debug_frame_compression,
        arm_exidx: section(".ARM.exidx").or(exidx_segment),
        arm_extab: section(".ARM.extab"),
        sframe: section(".sframe").or(sframe_segment),
        text: address(".text"),
        got: address(".got"),
        code,
        entry: Some(file.elf_header().e_entry(endian).into()).filter(|&e: &u64| e != 0),
        go: file.section_by_name(".gopclntab").is_some()
            || file.section_by_name(".go.buildinfo").is_some(),
    };
    Ok(ElfInfo { machine, range: start..end, sections })
}

/// An ELF file's `.debug_frame` (or GNU `.zdebug_frame`): where its bytes
/// are in the file, and, where it is compressed, where its stream is, its
/// format and its size decompressed. None where it has no bytes in the file.
pub fn debug_frame_of<'data, F: Object<'data>>(file: &F) -> (Option<SectionInfo>, Compression) {
    let Some(s) = file.section_by_name(".debug_frame") else { return (None, None) };
    let Ok(range) = s.compressed_file_range() else { return (None, None) };
    let info = |size| SectionInfo { file_offset: range.offset, size, address: s.address() };
    match range.format {
        object::CompressionFormat::None if range.compressed_size > 0 => {
            (Some(info(range.compressed_size)), None)
        }
        object::CompressionFormat::None => (None, None),
        format => (Some(info(range.compressed_size)), Some((format, range.uncompressed_size))),
    }
}

/// The ELF address (`sh_addr`) of the section called `name` in a 64-bit or
/// 32-bit (i386) ELF file; None if it has no such section.
pub fn section_address(data: &[u8], name: &str) -> Result<Option<u64>, ElfError> {
    fn find<Elf: FileHeader<Endian = LittleEndian>>(
        data: &[u8],
        name: &str,
    ) -> Result<Option<u64>, ElfError> {
        let file =
            ElfFile::<Elf, &[u8]>::parse(data).map_err(|e| ElfError::Parse(e.to_string()))?;
        Ok(file.section_by_name(name).map(|s| s.address()))
    }
    if is_elf32(data) {
        find::<FileHeader32<LittleEndian>>(data, name)
    } else {
        find::<FileHeader64<LittleEndian>>(data, name)
    }
}

/// The ELF address ranges of the sections called one of `names` (none for a
/// file that does not parse).
pub fn section_ranges(data: &[u8], names: &[&str]) -> Vec<Range<u64>> {
    fn find<Elf: FileHeader<Endian = LittleEndian>>(
        data: &[u8],
        names: &[&str],
    ) -> Vec<Range<u64>> {
        let Ok(file) = ElfFile::<Elf, &[u8]>::parse(data) else { return Vec::new() };
        file.sections()
            .filter(|s| s.name().is_ok_and(|n| names.contains(&n)) && s.size() > 0)
            .map(|s| s.address()..s.address().saturating_add(s.size()))
            .collect()
    }
    if is_elf32(data) {
        find::<FileHeader32<LittleEndian>>(data, names)
    } else {
        find::<FileHeader64<LittleEndian>>(data, names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_is_not_elf() {
        assert!(matches!(read_elf(b"not an ELF file"), Err(ElfError::Parse(_))));
        assert!(matches!(read_elf(&[]), Err(ElfError::Parse(_))));
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(b"\x7fELF");
        assert!(read_elf(&header).is_err(), "class and data bytes unset");
    }

    #[test]
    fn the_interpreter_is_the_dynamic_linker_that_runs_us() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let path = summarize(&exe).unwrap().interpreter.expect("a dynamically linked test");
        let path = std::fs::canonicalize(String::from_utf8(path).unwrap()).unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(maps.lines().any(|l| l.ends_with(path.to_str().unwrap())), "{path:?}\n{maps}");
        let mut cut = exe.clone();
        cut.truncate(4096); // the headers of a module's first page in a core
        assert!(summarize(&cut).is_ok());
    }

    #[test]
    fn section_addresses() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let text = section_address(&exe, ".text").unwrap();
        assert_eq!(text, read_elf(&exe).unwrap().sections.text);
        assert!(text.is_some());
        assert_eq!(section_address(&exe, ".no-such-section"), Ok(None));
        assert!(section_address(b"not ELF", ".text").is_err());
    }

    #[test]
    fn reads_its_own_executable() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let info = read_elf(&exe).unwrap();
        assert!(info.range.start < info.range.end);
        let eh = info.sections.eh_frame.expect("rustc emits .eh_frame");
        assert!(eh.file_offset + eh.size <= exe.len() as u64);
        assert!(info.sections.eh_frame_hdr.is_some());
        assert!(info.sections.text.is_some());
        // The test binary starts at the C runtime's `_start`.
        let entry = info.sections.entry.expect("an executable has an entry point");
        let symbols = crate::symbolize::symbols::SymbolTable::from_elf(&exe).unwrap();
        assert_eq!(symbols.lookup(entry), Some(("_start", 0)));
    }
}

/// What the program headers of an ELF file or image say: enough to place a
/// module from a core file and to check its build id. Reads no section
/// headers, so it also works on the first page of a module dumped in a core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfSummary {
    pub machine: u16,
    pub e_type: u16,
    pub entry: u64,
    pub build_id: Option<Vec<u8>>,
    /// PT_LOAD segments in file order: (p_vaddr, p_memsz, p_offset, p_filesz, p_flags).
    pub loads: Vec<(u64, u64, u64, u64, u32)>,
    /// p_vaddr of PT_DYNAMIC.
    pub dynamic: Option<u64>,
    /// (e_phoff, e_phnum).
    pub phdr: (u64, u16),
    /// The path in PT_INTERP (the program's dynamic linker), if it has one
    /// and the bytes given hold it.
    pub interpreter: Option<Vec<u8>>,
    /// The file's identity as Breakpad's `FileID` (its Linux client, writing
    /// each module's CodeView record) and `dump_syms` compute it: the GNU
    /// build id, else the first page of `.text` hashed (see `text_hash`).
    /// A dump's debug id is made of its first 16 bytes, so a local file is
    /// compared with a dump's module by this, whichever form the dump
    /// recorded. None where neither is in the bytes given.
    pub file_id: Option<Vec<u8>>,
    /// The other identity a minidump writer records for a file without a
    /// build id: minidump-writer (0.13) hashes the first page of the first
    /// executable section, `.init` where there is one, not `.text`. None
    /// where that is `.text`, or the file has a build id.
    pub other_file_id: Option<Vec<u8>>,
}

impl ElfSummary {
    /// The PT_LOAD segments, as placing a mapping needs them.
    pub fn segments(&self) -> impl Iterator<Item = crate::space::Segment> + '_ {
        self.loads.iter().map(crate::space::Segment::from_load)
    }
}

/// The C string PT_INTERP holds (its first 4096 bytes at most); None if
/// empty or not in the bytes given.
fn interpreter(segment: Option<&[u8]>) -> Option<Vec<u8>> {
    let bytes = segment?;
    let bytes = &bytes[..bytes.len().min(4096)];
    let path = &bytes[..memchr::memchr(0, bytes).unwrap_or(bytes.len())];
    (!path.is_empty()).then(|| path.to_vec())
}

/// A shared library's `DT_SONAME` (the name Breakpad's and Crashpad's
/// writers give its module, and `dump_syms` its symbol file).
pub fn soname(data: &[u8]) -> Option<String> {
    if is_elf32(data) {
        soname_class::<FileHeader32<LittleEndian>>(data)
    } else {
        soname_class::<FileHeader64<LittleEndian>>(data)
    }
}

fn soname_class<Elf: FileHeader<Endian = LittleEndian>>(data: &[u8]) -> Option<String> {
    use object::read::elf::Dyn;
    let header = Elf::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, data).ok()?;
    let (entries, link) = sections.dynamic(endian, data).ok()??;
    let strings = sections.strings(endian, data, link).ok()?;
    let entry = entries.iter().find(|d| d.tag32(endian) == Some(object::elf::DT_SONAME))?;
    let name = entry.string(endian, strings).ok()?;
    Some(String::from_utf8_lossy(name).into_owned())
}

/// The program headers of a 64-bit or 32-bit (i386) ELF file or image.
pub fn summarize(data: &[u8]) -> Result<ElfSummary, ElfError> {
    if is_elf32(data) {
        summarize_class::<FileHeader32<LittleEndian>>(data)
    } else {
        summarize_class::<FileHeader64<LittleEndian>>(data)
    }
}

fn summarize_class<Elf: FileHeader<Endian = LittleEndian>>(
    data: &[u8],
) -> Result<ElfSummary, ElfError> {
    let parse = |e: object::Error| ElfError::Parse(e.to_string());
    let header = Elf::parse(data).map_err(parse)?;
    let endian = header.endian().map_err(parse)?;
    let phdrs = header.program_headers(endian, data).map_err(parse)?;
    let mut summary = ElfSummary {
        machine: header.e_machine(endian),
        e_type: header.e_type(endian),
        entry: header.e_entry(endian).into(),
        build_id: None,
        loads: Vec::new(),
        dynamic: None,
        phdr: (header.e_phoff(endian).into(), header.e_phnum(endian)),
        interpreter: None,
        file_id: None,
        other_file_id: None,
    };
    for ph in phdrs {
        match ph.p_type(endian) {
            PT_LOAD => summary.loads.push((
                ph.p_vaddr(endian).into(),
                ph.p_memsz(endian).into(),
                ph.p_offset(endian).into(),
                ph.p_filesz(endian).into(),
                ph.p_flags(endian),
            )),
            object::elf::PT_DYNAMIC => summary.dynamic = Some(ph.p_vaddr(endian).into()),
            object::elf::PT_INTERP => summary.interpreter = interpreter(ph.data(endian, data).ok()),
            _ => {}
        }
        if summary.build_id.is_none() {
            // A note segment outside the bytes given (a partial image) is skipped.
            if let Ok(Some(mut notes)) = ph.notes(endian, data) {
                while let Ok(Some(note)) = notes.next() {
                    if note.name() == object::elf::ELF_NOTE_GNU
                        && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID
                    {
                        summary.build_id = Some(note.desc().to_vec());
                        break;
                    }
                }
            }
        }
    }
    if summary.build_id.is_none() {
        // A note section no PT_NOTE covers (perf inject's jitted-PID-N.so
        // files): read as elfutils and perf read it.
        summary.build_id = section_build_id::<Elf>(header, endian, data);
    }
    match &summary.build_id {
        Some(id) => summary.file_id = Some(id.clone()),
        None => {
            let (text, first_code) = code_hashes::<Elf>(header, endian, data);
            summary.file_id = text.map(|h| h.to_vec());
            summary.other_file_id = first_code.filter(|h| Some(h) != text.as_ref()).map(Vec::from);
        }
    }
    Ok(summary)
}

/// The GNU build id in a note section, where the file has section headers.
fn section_build_id<Elf: FileHeader<Endian = LittleEndian>>(
    header: &Elf,
    endian: LittleEndian,
    data: &[u8],
) -> Option<Vec<u8>> {
    use object::read::elf::SectionHeader;
    let sections = header.sections(endian, data).ok()?;
    for section in sections.iter() {
        let Ok(Some(mut notes)) = section.notes(endian, data) else { continue };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == object::elf::ELF_NOTE_GNU
                && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID
            {
                return Some(note.desc().to_vec());
            }
        }
    }
    None
}

/// The bytes of `.text` Breakpad's `FileID` hashes when a file has no build id.
const TEXT_HASH_SPAN: usize = 4096;
/// A GUID's size: what the hash folds `.text` into.
const GUID_SIZE: usize = 16;

/// The hashes that stand for a file's build id where it has none (see
/// [`ElfSummary::file_id`]): (Breakpad's, of `.text`; minidump-writer's, of
/// the first executable section). Each is the first page (4096 bytes) of the
/// section, 16 bytes at a time, XORed together. Breakpad's C++ reads a last
/// partial chunk whole (the bytes of the file after the section), as the
/// mapped file gives them to it; minidump-writer stops at the section's end.
/// None without section headers (an image from a core), or the section or
/// its bytes.
fn code_hashes<Elf: FileHeader<Endian = LittleEndian>>(
    header: &Elf,
    endian: LittleEndian,
    data: &[u8],
) -> (Option<[u8; GUID_SIZE]>, Option<[u8; GUID_SIZE]>) {
    use object::read::elf::SectionHeader;
    let Ok(sections) = header.sections(endian, data) else { return (None, None) };
    let hash = |section: &Elf::SectionHeader, whole_chunks: bool| {
        if section.sh_type(endian) != object::elf::SHT_PROGBITS {
            return None;
        }
        let offset = usize::try_from(section.sh_offset(endian).into()).ok()?;
        let size = usize::try_from(section.sh_size(endian).into()).ok()?.min(TEXT_HASH_SPAN);
        if size == 0 {
            return None;
        }
        let span = if whole_chunks { size.next_multiple_of(GUID_SIZE) } else { size };
        let bytes = data.get(offset..offset.checked_add(span)?)?;
        let mut hash = [0u8; GUID_SIZE];
        for chunk in bytes.chunks(GUID_SIZE) {
            hash.iter_mut().zip(chunk).for_each(|(h, b)| *h ^= b);
        }
        Some(hash)
    };
    let text = sections.section_by_name(endian, b".text").and_then(|(_, s)| hash(s, true));
    let first_code = sections
        .iter()
        .find(|s| {
            let code = u64::from(object::elf::SHF_ALLOC | object::elf::SHF_EXECINSTR);
            s.sh_type(endian) == object::elf::SHT_PROGBITS
                && s.sh_flags(endian).into() & code == code
        })
        .and_then(|s| hash(s, false));
    (text, first_code)
}
