//! PE files (Windows executables and DLLs): what the address space needs of
//! one, read once from its headers with the `object` crate — its machine,
//! the identity a minidump records of it (Breakpad's code id: the header's
//! time stamp and image size), its sections by relative virtual address
//! (RVA, an offset from where the loader placed the image), and where its
//! function table (`.pdata`) is.

use std::path::Path;
use std::sync::Arc;

use object::pe::{
    IMAGE_DIRECTORY_ENTRY_EXCEPTION, IMAGE_FILE_MACHINE_AMD64, IMAGE_FILE_MACHINE_I386,
    IMAGE_SCN_MEM_EXECUTE,
};
use object::read::pe::{ImageNtHeaders, ImageOptionalHeader, PeFile};
use object::LittleEndian as LE;

use crate::arch::Arch;
use crate::source::memory::Data;
use crate::space::sections::CodeSegment;

/// A section of a PE image: `rva..rva + size` in the image, the first
/// `file_size` bytes of which are at `file_offset` in the file (the rest
/// read as zeros).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeSection {
    pub rva: u32,
    pub size: u32,
    pub file_offset: u32,
    pub file_size: u32,
    pub executable: bool,
}

/// The headers of a PE file, checked to lie in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeHeaders {
    pub arch: Arch,
    /// `IMAGE_FILE_HEADER.TimeDateStamp`.
    pub timestamp: u32,
    /// `IMAGE_OPTIONAL_HEADER.SizeOfImage`.
    pub image_size: u32,
    /// `IMAGE_OPTIONAL_HEADER.ImageBase`: where the file's addresses (its
    /// DWARF's, its symbols') have the image loaded.
    pub image_base: u64,
    /// Sorted by RVA.
    pub sections: Vec<PeSection>,
    /// The exception directory (the x64 function table, `.pdata`): RVA and
    /// size.
    pub exception: Option<(u32, u32)>,
}

impl PeHeaders {
    /// Breakpad's code id of the file, as a minidump's module list gives
    /// it (`minidump-stackwalk`, symbol servers): the time stamp in eight
    /// upper-case hex digits, then the image size in lower-case hex.
    pub fn code_id(&self) -> String {
        format!("{:08X}{:x}", self.timestamp, self.image_size)
    }

    /// The file's bytes at `rva` to the end of the section holding it
    /// (what the file holds of it: not the zeros past a section's raw
    /// data), None where no section holds it or the headers lie.
    pub fn bytes_at<'d>(&self, data: &'d [u8], rva: u32) -> Option<&'d [u8]> {
        let i = self.sections.partition_point(|s| s.rva <= rva).checked_sub(1)?;
        let s = &self.sections[i];
        let into = rva - s.rva;
        if into >= s.size.min(s.file_size) {
            return None;
        }
        let start = usize::try_from(s.file_offset.checked_add(into)?).ok()?;
        let end = usize::try_from(u64::from(s.file_offset) + u64::from(s.file_size.min(s.size)))
            .ok()?
            .min(data.len());
        data.get(start..end)
    }

    /// The function table (the exception directory: x64's `RUNTIME_FUNCTION`
    /// entries of 12 bytes) in the file `data`, the whole entries it holds.
    pub fn function_table<'d>(&self, data: &'d [u8]) -> &'d [u8] {
        let table = self.exception.and_then(|(rva, size)| {
            let bytes = self.bytes_at(data, rva)?;
            Some(&bytes[..bytes.len().min(size as usize)])
        });
        let table = table.unwrap_or(&[]);
        &table[..table.len() - table.len() % 12]
    }

    /// Each function-table entry's RVA range, in the table's order.
    pub fn function_ranges<'d>(&self, data: &'d [u8]) -> impl Iterator<Item = (u32, u32)> + 'd {
        self.function_table(data).chunks_exact(12).map(|entry| {
            let word =
                |i: usize| u32::from_le_bytes([entry[i], entry[i + 1], entry[i + 2], entry[i + 3]]);
            (word(0), word(4))
        })
    }

    /// The executable sections' RVA ranges.
    pub fn code(&self) -> impl Iterator<Item = std::ops::Range<u64>> + '_ {
        self.sections
            .iter()
            .filter(|s| s.executable && s.size > 0)
            .map(|s| u64::from(s.rva)..u64::from(s.rva) + u64::from(s.size))
    }
}

/// The headers of the PE file `data`; why it is not one this reads.
pub fn headers(data: &[u8]) -> Result<PeHeaders, String> {
    match object::FileKind::parse(data) {
        Ok(object::FileKind::Pe64) => read::<object::pe::ImageNtHeaders64>(data),
        Ok(object::FileKind::Pe32) => read::<object::pe::ImageNtHeaders32>(data),
        _ => Err("not a PE file".to_owned()),
    }
}

fn read<Pe: ImageNtHeaders>(data: &[u8]) -> Result<PeHeaders, String> {
    let file = PeFile::<Pe>::parse(data).map_err(|e| format!("not a PE file: {e}"))?;
    let nt = file.nt_headers();
    let machine = nt.file_header().machine.get(LE);
    let arch = match machine {
        IMAGE_FILE_MACHINE_AMD64 => Arch::X86_64,
        IMAGE_FILE_MACHINE_I386 => Arch::I386,
        other => return Err(format!("a PE file for machine {other:#x}, which is not read")),
    };
    let mut sections: Vec<PeSection> = file
        .section_table()
        .iter()
        .map(|s| PeSection {
            rva: s.virtual_address.get(LE),
            size: s.virtual_size.get(LE),
            file_offset: s.pointer_to_raw_data.get(LE),
            file_size: s.size_of_raw_data.get(LE),
            executable: s.characteristics.get(LE) & IMAGE_SCN_MEM_EXECUTE != 0,
        })
        .collect();
    sections.sort_by_key(|s| s.rva);
    let exception = file
        .data_directory(IMAGE_DIRECTORY_ENTRY_EXCEPTION)
        .map(|d| (d.virtual_address.get(LE), d.size.get(LE)))
        .filter(|&(rva, size)| rva != 0 && size != 0);
    Ok(PeHeaders {
        arch,
        timestamp: nt.file_header().time_date_stamp.get(LE),
        image_size: nt.optional_header().size_of_image(),
        image_base: nt.optional_header().image_base(),
        sections,
        exception,
    })
}

/// A PE file read for unwinding: its bytes and headers.
pub struct PeImage {
    pub data: Arc<Data>,
    pub headers: PeHeaders,
}

impl PeImage {
    /// The PE file at `path`, mapped; why it cannot be read as one.
    pub fn open(path: &Path) -> Result<PeImage, String> {
        let shown = path.display();
        let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
        let data = crate::source::files::map_file(&file).map_err(|e| format!("{shown}: {e}"))?;
        PeImage::from_data(Data::Mapped(data)).map_err(|e| format!("{shown}: {e}"))
    }

    /// A PE file's bytes read as one; why they cannot be.
    pub fn from_data(data: Data) -> Result<PeImage, String> {
        let headers = headers(&data)?;
        Ok(PeImage { data: Arc::new(data), headers })
    }

    /// The function table (see [`PeHeaders::function_table`]).
    pub fn function_table(&self) -> &[u8] {
        self.headers.function_table(&self.data)
    }

    /// Where the function table's entries start (RVAs), in its order: what
    /// a check of every function walks.
    pub fn functions(&self) -> impl Iterator<Item = u64> + '_ {
        self.headers.function_ranges(&self.data).map(|(start, _)| u64::from(start))
    }

    /// The executable sections of the image loaded at `base`, where their
    /// bytes are in the file.
    pub fn code_segments(&self, base: u64) -> Vec<CodeSegment> {
        let sections = self.headers.sections.iter().filter(|s| s.executable && s.size > 0);
        sections
            .map(|s| CodeSegment {
                address: base.wrapping_add(u64::from(s.rva)),
                size: u64::from(s.size),
                file_offset: u64::from(s.file_offset),
                file_size: u64::from(s.file_size.min(s.size)),
            })
            .collect()
    }

    /// The file's bytes at `rva` (see [`PeHeaders::bytes_at`]).
    pub fn bytes_at(&self, rva: u32) -> Option<&[u8]> {
        self.headers.bytes_at(&self.data, rva)
    }
}
