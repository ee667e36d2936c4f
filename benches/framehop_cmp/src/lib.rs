//! One captured stack (a `stackwalk capture` file) loaded into both unwinders: stackwalk's
//! [`_core::unwind::Unwinder`] and framehop's `UnwinderX86_64`, each module placed where the
//! capture's mappings put it (the one placement rule, [`_core::space::place`]), so that both
//! walk the same stack bytes with the same modules.

use std::ops::Range;
use std::sync::Arc;

use _core::arch::registers::Registers;
use _core::arch::Arch;
use _core::source::memory::Data;
use _core::source::memory::Regions;
use _core::space::{self, Mapping};
use _core::unwind::cfi::{Module, UnwindInfo};
use _core::unwind::{End, Frame, Unwinder};
use base64::Engine;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Unwinder as _};
use object::read::elf::ElfFile64;
use object::{LittleEndian, Object, ObjectSection};
use serde_json::Value;

pub type Error = Box<dyn std::error::Error>;

const PAGE_SIZE: u64 = 4096;

/// A captured stack and both unwinders over its modules.
pub struct Stack {
    pub name: String,
    pub pc: u64,
    pub regs: Registers,
    framehop_regs: UnwindRegsX86_64,
    /// (start address, bytes), sorted.
    pub memory: Vec<(u64, Vec<u8>)>,
    pub gdb_pcs: Vec<u64>,
    pub stackwalk: Unwinder,
    pub framehop: UnwinderX86_64<Vec<u8>>,
}

fn field<'a>(doc: &'a Value, key: &str) -> Result<&'a Value, Error> {
    doc.get(key).ok_or_else(|| format!("no {key:?}").into())
}

fn word(value: &Value, what: &str) -> Result<u64, Error> {
    // Biases may be negative: taken modulo 2^64, as stackwalk takes them.
    value
        .as_u64()
        .or_else(|| value.as_i64().map(|v| v as u64))
        .ok_or_else(|| format!("{what}: not a 64-bit integer").into())
}

fn base64(value: &Value, what: &str) -> Result<Vec<u8>, Error> {
    let text = value.as_str().ok_or_else(|| format!("{what}: not a string"))?;
    Ok(base64::engine::general_purpose::STANDARD.decode(text)?)
}

fn array<'a>(value: &'a Value, what: &str) -> Result<&'a Vec<Value>, Error> {
    value.as_array().ok_or_else(|| format!("{what}: not an array").into())
}

impl Stack {
    /// Read the capture file at `path` (an x86_64 one) and add its modules and vdso to both
    /// unwinders. A module whose file cannot be read is left out of both.
    pub fn load(name: &str, path: &std::path::Path) -> Result<Stack, Error> {
        let doc: Value = serde_json::from_slice(&std::fs::read(path)?)?;
        let arch = field(&doc, "arch")?.as_str().unwrap_or_default();
        if arch != "x86_64" {
            return Err(
                format!("{}: arch {arch:?}, only x86_64 is compared", path.display()).into()
            );
        }
        let mut regs = Registers::new();
        let mut pc = None;
        let regs_doc = field(&doc, "regs")?.as_object().ok_or("regs: not an object")?;
        for (reg, value) in regs_doc {
            match Arch::X86_64.register_by_name(reg) {
                Some(Some(col)) => regs.set(col, word(value, reg)?),
                Some(None) => pc = Some(word(value, reg)?),
                None => {}
            }
        }
        let pc = pc.ok_or("regs: no rip")?;
        let (sp, bp) = (regs.get(7).ok_or("regs: no rsp")?, regs.get(6).unwrap_or(0));
        let mut memory = Vec::new();
        for region in array(field(&doc, "memory")?, "memory")? {
            let start = word(&region[0], "memory start")?;
            memory.push((start, base64(&region[1], "memory bytes")?));
        }
        memory.sort_by_key(|(start, _)| *start);
        let gdb_pcs = array(field(&doc, "gdb_frames")?, "gdb_frames")?
            .iter()
            .map(|f| word(field(f, "pc")?, "gdb_frames pc"))
            .collect::<Result<_, _>>()?;
        let mut stack = Stack {
            name: name.to_owned(),
            pc,
            regs,
            framehop_regs: UnwindRegsX86_64::new(pc, sp, bp),
            memory,
            gdb_pcs,
            stackwalk: Unwinder::new(Arch::X86_64),
            framehop: UnwinderX86_64::new(),
        };
        for module in array(field(&doc, "modules")?, "modules")? {
            let path = field(module, "path")?.as_str().ok_or("module path: not a string")?;
            let Ok(bytes) = std::fs::read(path) else {
                eprintln!("{name}: {path} not found, left out of both unwinders");
                continue;
            };
            let mut mappings = Vec::new();
            let mut code = Vec::new();
            for m in array(field(module, "mappings")?, "mappings")? {
                let (start, end) = (word(&m[0], "mapping start")?, word(&m[1], "mapping end")?);
                mappings.push(Mapping { start, end, offset: word(&m[2], "mapping offset")? });
                if m[3].as_str().is_some_and(|perms| perms.contains('x')) {
                    code.push(start..end);
                }
            }
            let segments: Vec<_> = _core::space::elf::summarize(&bytes)?.segments().collect();
            let is_code = |r: &Range<u64>| code.iter().any(|c| c.start < r.end && r.start < c.end);
            let placements = space::place(&segments, &mappings, PAGE_SIZE, is_code);
            let placements = if placements.is_empty() {
                // No mappings (a capture of format 1): the loadable segments at the bias.
                let bias = word(field(module, "bias")?, "bias")?;
                let range = _core::space::elf::read_elf(&bytes)?.range;
                let runtime = range.start.wrapping_add(bias)..range.end.wrapping_add(bias);
                vec![(bias, Vec::from([runtime]))]
            } else {
                placements.into_iter().map(|p| (p.bias, p.ranges)).collect()
            };
            stack.add_module(path, bytes, &placements)?;
        }
        if let Some(vdso) = field(&doc, "vdso")?.as_array() {
            let address = word(&vdso[0], "vdso address")?;
            let image = base64(&vdso[1], "vdso image")?;
            let summary = _core::space::elf::summarize(&image)?;
            let low = summary.loads.iter().map(|l| l.0).min().ok_or("vdso: no PT_LOAD")?;
            let bias = address.wrapping_sub(low);
            let range = _core::space::elf::read_elf(&image)?.range;
            let runtime = range.start.wrapping_add(bias)..range.end.wrapping_add(bias);
            stack.add_module("[vdso]", image, &[(bias, Vec::from([runtime]))])?;
        }
        Ok(stack)
    }

    /// Add one file, at each of its placements (bias, runtime ranges), to both unwinders.
    fn add_module(
        &mut self,
        name: &str,
        bytes: Vec<u8>,
        placements: &[(u64, Vec<Range<u64>>)],
    ) -> Result<(), Error> {
        let sections = framehop_sections(&bytes)?;
        let elf = _core::space::elf::read_elf(&bytes)?;
        let info =
            Arc::new(UnwindInfo::new(Arch::X86_64, Arc::new(Data::Owned(bytes)), elf.sections)?);
        for (bias, ranges) in placements {
            for r in ranges {
                let elf_range = r.start.wrapping_sub(*bias)..r.end.wrapping_sub(*bias);
                let module = Module::place(name.to_owned(), info.clone(), elf_range, *bias)?;
                self.stackwalk.add_module(Arc::new(module))?;
            }
            let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else { continue };
            // ELF: SVMA 0 is the image base, at the bias in the process.
            let module = framehop::Module::new(
                name.to_owned(),
                first.start..last.end,
                *bias,
                sections.clone(),
            );
            self.framehop.add_module(module);
        }
        Ok(())
    }

    /// The stack as stackwalk reads it (what `Unwinder.unwind` builds from Python).
    pub fn regions(&self) -> Regions<'_> {
        Regions::from_sorted(self.memory.iter().map(|(start, bytes)| (*start, &bytes[..])))
    }

    /// stackwalk's walk: frames (pc, sp, CFA, trust) with every callee-saved register.
    pub fn walk_stackwalk(&mut self, regions: &mut Regions<'_>, frames: &mut Vec<Frame>) -> End {
        self.stackwalk.unwind(self.pc, &self.regs, regions, None, frames)
    }

    /// framehop's walk: the pc, then return addresses, into `out`; how it ended.
    pub fn walk_framehop(
        &self,
        cache: &mut CacheX86_64,
        out: &mut Vec<u64>,
    ) -> Result<(), framehop::Error> {
        out.clear();
        let memory = &self.memory;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            memory
                .iter()
                .find_map(|(start, bytes)| {
                    let off = usize::try_from(addr.checked_sub(*start)?).ok()?;
                    let word = bytes.get(off..off.checked_add(8)?)?;
                    Some(u64::from_le_bytes(word.try_into().ok()?))
                })
                .ok_or(())
        };
        let mut frames =
            self.framehop.iter_frames(self.pc, self.framehop_regs, cache, &mut read_stack);
        while let Some(frame) = frames.next()? {
            out.push(frame.address());
        }
        Ok(())
    }
}

/// The sections framehop unwinds with, read with `object`: `.text`, `.eh_frame`,
/// `.eh_frame_hdr`, `.debug_frame`, and `.got` (for got-relative pointers).
fn framehop_sections(bytes: &[u8]) -> Result<ExplicitModuleSectionInfo<Vec<u8>>, Error> {
    let file = ElfFile64::<LittleEndian>::parse(bytes)?;
    let svma = |name: &str| {
        file.section_by_name(name).map(|s| s.address()..s.address().wrapping_add(s.size()))
    };
    let data =
        |name: &str| file.section_by_name(name).and_then(|s| s.data().ok()).map(<[u8]>::to_vec);
    Ok(ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: svma(".text"),
        text: data(".text"),
        got_svma: svma(".got"),
        eh_frame_svma: svma(".eh_frame"),
        eh_frame: data(".eh_frame"),
        eh_frame_hdr_svma: svma(".eh_frame_hdr"),
        eh_frame_hdr: data(".eh_frame_hdr"),
        debug_frame: data(".debug_frame"),
        ..Default::default()
    })
}
