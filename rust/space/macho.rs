//! Mach-O files (macOS and iOS executables and dylibs, and the DWARF files
//! of dSYM bundles): what the address space needs of one, read once from
//! its load commands with the `object` crate — its architecture, its
//! identity (`LC_UUID`, which a dump's module list records as the module's
//! debug id with age 0 and as its code id), its segments by address, and
//! where its unwind tables are (`__TEXT,__unwind_info`, Apple's compact
//! unwind format, and `__TEXT,__eh_frame`; see `crate::unwind::compact`).
//!
//! A universal ("fat") file holds one Mach-O file per architecture: the
//! slice of the architecture asked for is read, its file offsets made the
//! whole file's.
//!
//! Addresses are the file's own (its `__TEXT` segment at, for a program,
//! 0x100000000); the loader slides the whole image, so that a module the
//! dump lists at `start` has its addresses at `start - text_address`.

use std::path::Path;
use std::sync::Arc;

use object::macho::{CPU_TYPE_ARM64, CPU_TYPE_X86_64, VM_PROT_EXECUTE};
use object::read::macho::{FatArch, MachOFatFile32, MachOFatFile64};
use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};

use crate::arch::Arch;
use crate::source::memory::Data;
use crate::space::sections::{CodeSegment, SectionInfo};

/// A segment of a Mach-O file: `address..address + size` in the image, the
/// first `file_size` bytes of which are at `file_offset` in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachoSegment {
    pub name: String,
    pub address: u64,
    pub size: u64,
    pub file_offset: u64,
    pub file_size: u64,
    pub executable: bool,
}

/// The headers of a Mach-O file (of one architecture's slice of a fat
/// file), checked to lie in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachoHeaders {
    pub arch: Arch,
    /// `LC_UUID`: the build's identity.
    pub uuid: Option<[u8; 16]>,
    /// The `__TEXT` segment's address: the Mach header's, where a dump's
    /// module list places the module.
    pub text_address: u64,
    /// Sorted by address; file offsets are the whole file's.
    pub segments: Vec<MachoSegment>,
    /// `__TEXT,__unwind_info` (file offsets the whole file's).
    pub unwind_info: Option<SectionInfo>,
    /// `__TEXT,__eh_frame`.
    pub eh_frame: Option<SectionInfo>,
    /// Where each function starts (the file's addresses, ascending), from
    /// `LC_FUNCTION_STARTS`, which linkers write and `strip` keeps: what a
    /// frame 0's prologue is read from (compact unwind merges neighbours
    /// with one encoding into one entry, whose start is the first's).
    pub function_starts: Vec<u64>,
}

impl MachoHeaders {
    /// The code id a dump records of the module (`minidump-stackwalk`'s,
    /// symbol servers'): the UUID in lower-case hex.
    pub fn code_id(&self) -> Option<String> {
        self.uuid.map(|u| u.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The executable segments' address ranges (the file's addresses).
    pub fn code(&self) -> impl Iterator<Item = std::ops::Range<u64>> + '_ {
        let code = self.segments.iter().filter(|s| s.executable && s.size > 0);
        code.map(|s| s.address..s.address.saturating_add(s.size))
    }

    /// The span of the segments the loader maps (all but `__PAGEZERO`,
    /// which maps nothing, and `__LINKEDIT`'s tables past the code), from
    /// the Mach header: the module's size where a dump does not say it.
    pub fn image_end(&self) -> u64 {
        let mapped = self.segments.iter().filter(|s| s.name != "__PAGEZERO" && s.size > 0);
        mapped.map(|s| s.address.saturating_add(s.size)).max().unwrap_or(self.text_address)
    }

    /// The file's bytes at address `address` to the end of the segment
    /// holding it (what the file holds of it), None where no segment holds
    /// it in the file or the headers lie.
    pub fn bytes_at<'d>(&self, data: &'d [u8], address: u64) -> Option<&'d [u8]> {
        let s = self
            .segments
            .iter()
            .find(|s| s.address <= address && address - s.address < s.file_size.min(s.size))?;
        let start = usize::try_from(s.file_offset.checked_add(address - s.address)?).ok()?;
        let end = usize::try_from(s.file_offset.checked_add(s.file_size.min(s.size))?).ok()?;
        data.get(start..end.min(data.len()))
    }

    /// The bytes of a section the headers located.
    pub fn section<'d>(&self, data: &'d [u8], section: SectionInfo) -> &'d [u8] {
        let start = usize::try_from(section.file_offset).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(section.size).unwrap_or(usize::MAX));
        data.get(start..end).unwrap_or(&[])
    }
}

/// The architecture of a Mach-O CPU type (x86_64, arm64 and arm64e), None
/// for one stackwalk does not unwind.
pub fn arch_of(cputype: u32) -> Option<Arch> {
    match cputype {
        CPU_TYPE_X86_64 => Some(Arch::X86_64),
        CPU_TYPE_ARM64 => Some(Arch::Aarch64),
        _ => None,
    }
}

/// Whether `data` is a Mach-O file, thin or fat.
pub fn is_macho(data: &[u8]) -> bool {
    matches!(
        object::FileKind::parse(data),
        Ok(object::FileKind::MachO32
            | object::FileKind::MachO64
            | object::FileKind::MachOFat32
            | object::FileKind::MachOFat64)
    )
}

/// The file range of the slice of fat file `data` for `arch` (the first
/// slice of an architecture stackwalk reads, where `arch` is None); the
/// whole file where it is thin.
pub fn slice(data: &[u8], arch: Option<Arch>) -> Result<std::ops::Range<usize>, String> {
    fn pick<A: FatArch>(arches: &[A], arch: Option<Arch>) -> Result<(u64, u64), String> {
        let found = arches.iter().find(|a| match (arch_of(a.cputype()), arch) {
            (Some(theirs), Some(want)) => theirs == want,
            (Some(_), None) => true,
            (None, _) => false,
        });
        let shown = arch.map_or("a readable architecture", Arch::name);
        found.map(FatArch::file_range).ok_or_else(|| format!("a universal file without {shown}"))
    }
    let (offset, size) = match object::FileKind::parse(data) {
        Ok(object::FileKind::MachOFat32) => {
            let fat = MachOFatFile32::parse(data).map_err(|e| format!("bad fat header: {e}"))?;
            pick(fat.arches(), arch)?
        }
        Ok(object::FileKind::MachOFat64) => {
            let fat = MachOFatFile64::parse(data).map_err(|e| format!("bad fat header: {e}"))?;
            pick(fat.arches(), arch)?
        }
        _ => return Ok(0..data.len()),
    };
    let start = usize::try_from(offset).map_err(|_| "a fat slice past the file")?;
    let end =
        usize::try_from(offset.saturating_add(size)).map_err(|_| "a fat slice past the file")?;
    if end > data.len() || start >= end {
        return Err(format!("a fat slice at {offset:#x} of {size:#x} bytes past the file's end"));
    }
    Ok(start..end)
}

/// The headers of the Mach-O file `data` (its slice for `arch` where it is
/// fat); why it is not one this reads.
pub fn headers(data: &[u8], arch: Option<Arch>) -> Result<MachoHeaders, String> {
    let range = slice(data, arch)?;
    let base = range.start as u64;
    let file =
        object::File::parse(&data[range.clone()]).map_err(|e| format!("not a Mach-O file: {e}"))?;
    let cputype = match &file {
        object::File::MachO64(f) => f.macho_header().cputype.get(f.endian()),
        object::File::MachO32(f) => f.macho_header().cputype.get(f.endian()),
        _ => return Err("not a Mach-O file".to_owned()),
    };
    let arch =
        arch_of(cputype).ok_or_else(|| format!("a Mach-O file for CPU type {cputype:#x}"))?;
    let size = range.len() as u64;
    let in_file = |(offset, len): (u64, u64)| offset.checked_add(len).is_some_and(|e| e <= size);
    let mut segments = Vec::new();
    for s in file.segments() {
        let (file_offset, file_size) = s.file_range();
        if !in_file((file_offset, file_size)) {
            return Err(format!("segment at {:#x} past the file's end", s.address()));
        }
        let executable = matches!(s.flags(), SegmentFlags::MachO { initprot, .. } if initprot & VM_PROT_EXECUTE != 0);
        segments.push(MachoSegment {
            name: s.name().ok().flatten().unwrap_or("").to_owned(),
            address: s.address(),
            size: s.size(),
            file_offset: base + file_offset,
            file_size,
            executable,
        });
    }
    segments.sort_by_key(|s| s.address);
    let text = segments.iter().find(|s| s.name == "__TEXT");
    let text_address =
        text.or_else(|| segments.iter().find(|s| s.executable)).map_or(0, |s| s.address);
    let section = |name: &str| {
        let s = file
            .sections()
            .find(|s| s.name() == Ok(name) && s.segment_name().ok().flatten() == Some("__TEXT"))?;
        let (offset, len) = s.file_range()?;
        in_file((offset, len)).then_some(SectionInfo {
            file_offset: base + offset,
            size: len,
            address: s.address(),
        })
    };
    let function_starts = function_starts(&file, text_address);
    Ok(MachoHeaders {
        arch,
        function_starts,
        uuid: file.mach_uuid().ok().flatten(),
        text_address,
        segments,
        unwind_info: section("__unwind_info"),
        eh_frame: section("__eh_frame"),
    })
}

/// The function starts `LC_FUNCTION_STARTS` lists: ULEB128 deltas, the
/// first from the `__TEXT` segment's address, ending at a 0 (none where the
/// file has no such command, or it lies outside the file).
fn function_starts(file: &object::File<'_>, text_address: u64) -> Vec<u64> {
    fn of<Mach: object::read::macho::MachHeader>(
        file: &object::read::macho::MachOFile<'_, Mach>,
        text_address: u64,
    ) -> Vec<u64> {
        let endian = file.endian();
        let Ok(mut commands) = file.macho_load_commands() else { return Vec::new() };
        while let Ok(Some(command)) = commands.next() {
            if command.cmd() != object::macho::LC_FUNCTION_STARTS {
                continue;
            }
            let Ok(linkedit) = command.data::<object::macho::LinkeditDataCommand<Mach::Endian>>()
            else {
                return Vec::new();
            };
            let (offset, size) = (linkedit.dataoff.get(endian), linkedit.datasize.get(endian));
            let data = file.data();
            let Some(bytes) =
                data.get(offset as usize..(offset as usize).saturating_add(size as usize))
            else {
                return Vec::new();
            };
            return uleb_deltas(bytes, text_address);
        }
        Vec::new()
    }
    match file {
        object::File::MachO64(f) => of(f, text_address),
        object::File::MachO32(f) => of(f, text_address),
        _ => Vec::new(),
    }
}

/// The running sums of the ULEB128 numbers of `bytes` from `start`, up to
/// the first 0 (or a number cut short, or past 64 bits).
fn uleb_deltas(bytes: &[u8], start: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let (mut at, mut address) = (0, start);
    while at < bytes.len() {
        let (mut value, mut shift) = (0u64, 0u32);
        loop {
            let Some(&byte) = bytes.get(at) else { return out };
            at += 1;
            if shift >= 64 {
                return out;
            }
            value |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        if value == 0 {
            break;
        }
        address = address.wrapping_add(value);
        out.push(address);
    }
    out
}

/// A Mach-O file read for unwinding: its bytes and headers.
pub struct MachoImage {
    pub data: Arc<Data>,
    pub headers: MachoHeaders,
}

impl MachoImage {
    /// The Mach-O file at `path` (its slice for `arch`), mapped; why it
    /// cannot be read as one.
    pub fn open(path: &Path, arch: Option<Arch>) -> Result<MachoImage, String> {
        let shown = path.display();
        let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
        let data = crate::source::files::map_file(&file).map_err(|e| format!("{shown}: {e}"))?;
        MachoImage::from_data(Data::Mapped(data), arch).map_err(|e| format!("{shown}: {e}"))
    }

    /// A Mach-O file's bytes read as one; why they cannot be.
    pub fn from_data(data: Data, arch: Option<Arch>) -> Result<MachoImage, String> {
        let headers = headers(&data, arch)?;
        Ok(MachoImage { data: Arc::new(data), headers })
    }

    /// The executable segments of the image whose Mach header is at
    /// runtime address `base`, where their bytes are in the file.
    pub fn code_segments(&self, base: u64) -> Vec<CodeSegment> {
        let slide = base.wrapping_sub(self.headers.text_address);
        let code = self.headers.segments.iter().filter(|s| s.executable && s.size > 0);
        code.map(|s| CodeSegment {
            address: s.address.wrapping_add(slide),
            size: s.size,
            file_offset: s.file_offset,
            file_size: s.file_size.min(s.size),
        })
        .collect()
    }

    /// The file's bytes at address `address` (see [`MachoHeaders::bytes_at`]).
    pub fn bytes_at(&self, address: u64) -> Option<&[u8]> {
        self.headers.bytes_at(&self.data, address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_starts_are_running_sums_up_to_a_zero() {
        // 0x10, then 0x90 (two bytes: 0x90 0x01), then the end; what follows is padding.
        let bytes = [0x10, 0x90, 0x01, 0x00, 0x05];
        assert_eq!(uleb_deltas(&bytes, 0x1000), vec![0x1010, 0x10a0]);
        // Cut short, or past 64 bits: what was read before.
        assert_eq!(uleb_deltas(&[0x10, 0x80], 0), vec![0x10]);
        assert_eq!(uleb_deltas(&[0x81; 12], 0), Vec::<u64>::new());
    }
}
