//! The address space of a snapshot — a core, a minidump, a live process —
//! its modules found on this machine, checked against what the snapshot
//! recorded, and placed.
//!
//! Modules come from the file mappings the source lists (`NT_FILE`, a
//! minidump's maps stream, `/proc/PID/maps`); a source without them (a core
//! qemu-user wrote) has them read through the dynamic linker's link map in
//! its memory. Each module's file is looked for by [`FileFinder`]; a file
//! whose identity differs from the one recorded is not used (as if missing,
//! with a warning) unless mismatches are allowed; a file found where
//! nothing was recorded to check it by is used, its frames doubtful. Files
//! missing here, and the DWARF of those without it, are fetched by build id
//! through the host (debuginfod), several at once. Where a module has no
//! file, the unwinder is told where its code is, so that return addresses
//! into it are taken and the walk goes on past it; executable memory in no
//! module (a JIT's code) likewise. The unwinder itself is the caller's, behind
//! [`Host`]: this stage only decides.

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::arch::Arch;
use crate::source::corefile::LinkMapEntry;
use crate::source::memory::SegmentMemory;
use crate::source::minidump::basename;
use crate::space::debuginfod::{fetch_missing, Kind, Wanted};
use crate::space::elf::ElfSummary;
use crate::space::finder::{hex, FileFinder, Identity, Located};
use crate::space::symserver::{elf_debug_id, Stores};
use crate::space::{place, Mapping, Segment, PF_X};

mod apple;
mod linkmap;
mod windows;

const AT_PHDR: u64 = 3;
const AT_ENTRY: u64 = 9;
const AT_EXECFN: u64 = 31;
const AT_SYSINFO_EHDR: u64 = 33;
/// Bytes of a module's first mapping read for its ELF headers.
const HEADER_IMAGE_LIMIT: usize = 1 << 16;
/// Addresses from here up are the kernel's (x86_64's `[vsyscall]` page is
/// dumped in cores).
const KERNEL_HALF: u64 = 1 << 56;
/// `pr_fname`'s length without its NUL.
const FNAME_MAX: usize = 15;

/// A file mapping the source lists: runtime `start..end` showing the file
/// at `path` from byte `offset` on.
#[derive(Clone, Debug)]
pub struct FileMapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub path: PathBuf,
}

/// What the address space is built from: the source's facts.
pub struct Facts<'a> {
    pub arch: Arch,
    pub page: u64,
    /// The memory the source holds: (start, end, `p_flags`).
    pub segments: &'a [(u64, u64, u32)],
    /// The file mappings, where the source lists them.
    pub files: Option<&'a [FileMapping]>,
    pub auxv: &'a BTreeMap<u64, u64>,
    /// The process's name (`NT_PRPSINFO`'s `pr_fname`, 15 bytes at most).
    pub fname: Option<&'a str>,
    pub memory: &'a SegmentMemory,
    /// The dynamic linker's link map, for an executable whose `PT_DYNAMIC`
    /// is at this runtime address: its entries, and what could not be read.
    pub link_map: &'a dyn Fn(u64) -> (Vec<LinkMapEntry>, Vec<String>),
    /// What the source records of the module that starts at an address
    /// where its ELF headers are not in its memory (a minidump's module
    /// list).
    pub recorded: &'a dyn Fn(u64) -> Option<Identity>,
    /// Whether the source lists every mapping that holds code (a live
    /// process's maps do; a core's segments may leave file-backed ones out).
    pub code_mappings_known: bool,
    /// What messages call the source: "core", "minidump".
    pub kind: &'a str,
    /// The system of a dump whose modules are not ELF files (Windows,
    /// macOS): none is looked for here.
    pub foreign: Option<&'a str>,
    /// Modules known by their path and bias alone (a capture of the format
    /// before mappings were recorded, or through qemu's gdb stub): each
    /// placed where its file's segments go at that bias.
    pub at_bias: &'a [(PathBuf, u64)],
    /// The snapshot was taken on this machine and its paths are the files
    /// the process mapped, read then (a capture, whose gdb read them): a
    /// file is used without an identity to check it by, and is not doubtful.
    pub files_here: bool,
    /// The Breakpad ids (debug file, debug id) the source lists for the
    /// modules starting at each address (a minidump's module list), by
    /// which symbol stores file their `.sym` files.
    pub symbol_ids: &'a [(u64, String, String)],
    /// The code file and Breakpad code id the source lists for the modules
    /// starting at each address (a Windows dump's: a PE file's name, time
    /// stamp and image size), by which their PE files are found.
    pub code_ids: &'a [(u64, String, String)],
}

impl<'a> Facts<'a> {
    /// The facts of a snapshot that has only these: no file mappings, no
    /// link map, nothing recorded of its modules, a core's words.
    pub fn of(
        arch: Arch,
        page: u64,
        segments: &'a [(u64, u64, u32)],
        auxv: &'a BTreeMap<u64, u64>,
        memory: &'a SegmentMemory,
    ) -> Facts<'a> {
        Facts {
            arch,
            page,
            segments,
            files: None,
            auxv,
            fname: None,
            memory,
            link_map: &no_link_map,
            recorded: &nothing_recorded,
            code_mappings_known: false,
            kind: "core",
            foreign: None,
            at_bias: &[],
            files_here: false,
            symbol_ids: &[],
            code_ids: &[],
        }
    }
}

fn no_link_map(_: u64) -> (Vec<LinkMapEntry>, Vec<String>) {
    (Vec::new(), Vec::new())
}

fn nothing_recorded(_: u64) -> Option<Identity> {
    None
}

/// How files are found and checked.
#[derive(Default)]
pub struct Options {
    pub finder: FileFinder,
    /// The program's file as the user gave it.
    pub executable: Option<PathBuf>,
    /// Use a file of another build than the one recorded (with a warning).
    pub allow_mismatch: bool,
    /// Where separate debug files are looked for (None: they are not).
    pub debug_root: Option<PathBuf>,
    /// Whether missing files are fetched (debuginfod servers to ask).
    pub fetch: bool,
    /// Where Breakpad symbol files are looked for.
    pub symbol_stores: Stores,
}

/// What the address space is built into: the unwinder, the symbol files,
/// the downloads. Each `add` is refused with the reason (not ELF, another
/// architecture, over another module).
pub trait Host {
    fn add_file(
        &mut self,
        file: &Path,
        bias: u64,
        ranges: Option<&[Range<u64>]>,
    ) -> Result<(), String>;
    fn add_image(&mut self, name: &str, image: &[u8], bias: u64) -> Result<(), String>;
    /// A module without an ELF file: where it is, which of it is code, the
    /// Breakpad symbol file whose `STACK CFI` (or x86 `STACK WIN`) unwinds
    /// it, or the PE file whose x64 unwind tables do (the address their
    /// offsets are from: the module's start), and whose code is the
    /// module's; `jit`: a JIT's code.
    fn add_missing(
        &mut self,
        name: &Path,
        spans: &[Range<u64>],
        code: &[Range<u64>],
        rules: Rules<'_>,
        jit: bool,
    ) -> Result<(), String>;
    /// Whether the Breakpad symbol file at `path` can be used as the one of
    /// debug id `debug_id` (it parses, its `MODULE` names that id); the
    /// error says why not. Yes by default.
    fn sym_file_usable(&mut self, _path: &Path, _debug_id: &str) -> Result<(), String> {
        Ok(())
    }
    /// Files fetched by build id (hex), in the order asked: each the file in
    /// the cache or why none came.
    fn fetch(&mut self, requests: &[(String, Kind)]) -> Vec<Result<PathBuf, String>>;
}

/// Where a module without an ELF file has unwind rules from, if anywhere,
/// and the runtime address their offsets are from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rules<'a> {
    /// Its Breakpad symbol file (`STACK CFI`, x86's `STACK WIN`).
    pub sym: Option<&'a Path>,
    /// Its own file, a Windows or Apple one: its code, and its unwind
    /// tables (x64's `.pdata`; Mach-O's compact unwind and `__eh_frame`),
    /// which win over the symbol file.
    pub image: Option<(&'a Path, ImageKind)>,
    pub base: u64,
}

/// The kind of a module's own file that is not an ELF file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    Pe,
    MachO,
}

/// A Windows or Apple module's own files, found by the identity the dump
/// records of it.
#[derive(Clone, Debug)]
pub(crate) struct ForeignFiles {
    /// The file whose code and unwind tables are the module's (a PE file, a
    /// Mach-O binary); None where only its debug file was found.
    pub code_file: Option<PathBuf>,
    pub kind: ImageKind,
    /// Its executable ranges, as offsets from the module's start.
    pub code: Vec<Range<u64>>,
    /// The file's address of the module's start (a PE file's image base, a
    /// Mach-O file's `__TEXT` segment).
    pub image_base: u64,
    /// The file it is named from: a dSYM's DWARF file where one was found,
    /// else the code file.
    pub symbols: PathBuf,
}

/// A file the process mapped, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// As the source names it, or `[vdso]`.
    pub path: PathBuf,
    /// The file used for it here.
    pub file: Option<PathBuf>,
    pub start: u64,
    pub end: u64,
    /// Runtime address − ELF address (mod 2^64).
    pub bias: u64,
    /// As the source records it.
    pub build_id: Option<Vec<u8>>,
    /// Of the file used, or of the file found and not used.
    pub file_build_id: Option<Vec<u8>>,
    /// A file (or, for the vdso, the image in the snapshot) gives its CFI
    /// and symbols.
    pub found: bool,
    /// Its own mappings (empty: the whole of start..end).
    pub ranges: Vec<Range<u64>>,
    /// Its frames are doubtful: its file is of another build, or nothing was
    /// recorded to check it by.
    pub doubtful: bool,
    /// Its file is read in place of its path (a deleted library read
    /// through `/proc/PID/map_files/`, a file fetched): named by its path.
    pub stand_in: bool,
    /// The Breakpad symbol file found for it in the symbol stores: the
    /// names and lines its file lacks, and (its file missing) its STACK CFI.
    pub sym_file: Option<PathBuf>,
}

impl Module {
    /// `ranges`, or start..end where there are none.
    pub fn spans(&self) -> Vec<Range<u64>> {
        if self.ranges.is_empty() {
            std::iter::once(self.start..self.end).collect()
        } else {
            self.ranges.clone()
        }
    }
}

/// The snapshot's modules, sorted by address.
#[derive(Debug, Default)]
pub struct AddressSpace {
    pub modules: Vec<Module>,
    /// The program's module (its index in `modules`).
    pub executable: Option<usize>,
    /// The vdso's image, read from the snapshot.
    pub vdso_image: Option<Vec<u8>>,
    pub warnings: Vec<String>,
}

/// What was found for one module's path.
#[derive(Default)]
struct Lookup {
    file: Option<PathBuf>,
    summary: Option<Arc<ElfSummary>>,
    rejected: Vec<String>,
}

/// Build the address space of the snapshot `facts` describe; the error: the
/// executable given cannot be the program's file (not an ELF file of the
/// architecture, or not there).
pub fn build(
    facts: &Facts<'_>,
    options: &Options,
    host: &mut dyn Host,
) -> Result<AddressSpace, String> {
    if let Some(exe) = &options.executable {
        let given = options.finder.given(exe, facts.arch);
        given.map_err(|why| format!("executable {}: {why}", exe.display()))?;
    }
    let builder = Builder {
        facts,
        options,
        host,
        warnings: Vec::new(),
        mismatched: BTreeMap::new(),
        unverified: HashSet::new(),
        fetched: HashSet::new(),
        foreign_said: false,
        no_own_file: Vec::new(),
        stores: options.symbol_stores.clone(),
    };
    Ok(builder.build())
}

struct Builder<'f, 'o, 'h> {
    facts: &'f Facts<'f>,
    options: &'o Options,
    host: &'h mut dyn Host,
    warnings: Vec<String>,
    /// Module path -> build id of the file found for it that is of
    /// another build.
    mismatched: BTreeMap<PathBuf, Option<Vec<u8>>>,
    /// Module paths whose file is used with nothing recorded to check it by.
    unverified: HashSet<PathBuf>,
    /// Files fetched: named in the output by the module's path.
    fetched: HashSet<PathBuf>,
    foreign_said: bool,
    /// The Windows and Apple modules whose own file (PE, Mach-O, dSYM) was
    /// not found (said once, at the end).
    no_own_file: Vec<String>,
    stores: Stores,
}

impl Builder<'_, '_, '_> {
    fn build(mut self) -> AddressSpace {
        let explicit = self.options.executable.clone();
        let (mut modules, exe) = match self.facts.files {
            Some(files) => self.file_modules(files, explicit.as_deref()),
            None => self.link_map_modules(explicit.as_deref()),
        };
        for (path, bias) in self.facts.at_bias {
            if let Some(module) = self.module_at_bias(path, *bias) {
                modules.push(module);
            }
        }
        let exe_start = exe.map(|i| modules[i].start);
        let exe_path = exe.map(|i| modules[i].path.clone());
        let mut vdso_image = None;
        if let Some((module, image)) = self.vdso() {
            modules.push(module);
            vdso_image = Some(image);
        }
        modules.sort_by_key(|m| m.start);
        for m in &mut modules {
            if m.sym_file.is_none() {
                m.sym_file = self.sym_file(m);
            }
            m.doubtful = m.found
                && (self.mismatched.contains_key(&m.path) || self.unverified.contains(&m.path));
            // (A Windows module's PE file, an Apple one's Mach-O file or dSYM, stands in for
            // the path the dump names.)
            let pe = self.looks_for_pe() || self.looks_for_macho();
            m.stand_in = m.file.as_ref().is_some_and(|f| {
                pe || self.fetched.contains(f)
                    || self.options.finder.stand_ins.values().any(|s| s == f)
            });
        }
        let executable = modules
            .iter()
            .position(|m| Some(m.start) == exe_start && Some(&m.path) == exe_path.as_ref());
        if self.facts.files.is_some_and(|f| !f.is_empty()) {
            self.add_jit_code(&modules);
        }
        self.say_missing_own_files();
        if explicit.is_some() && executable.is_none() {
            let given = explicit.as_deref().unwrap_or(Path::new("")).display();
            self.warnings
                .push(format!("executable {given} not used: the core does not show where"));
        }
        AddressSpace { modules, executable, vdso_image, warnings: self.warnings }
    }

    /// What is done with a file of another build than the one recorded,
    /// as the mismatch warnings say it.
    fn mismatch_use(&self) -> &'static str {
        match self.options.allow_mismatch {
            true => "using it anyway",
            false => "not used (--allow-mismatch uses it)",
        }
    }

    fn auxv(&self, key: u64) -> Option<u64> {
        self.facts.auxv.get(&key).copied()
    }

    /// The summary of the ELF headers the snapshot holds at `address`.
    fn header_summary(&self, address: u64) -> Option<Arc<ElfSummary>> {
        let image = self.facts.memory.tail(address, HEADER_IMAGE_LIMIT);
        if !image.starts_with(b"\x7fELF") {
            return None;
        }
        crate::space::elf::summarize(image).ok().map(Arc::new)
    }

    /// The end of the segment that holds `address`.
    fn segment_end(&self, address: u64) -> Option<u64> {
        self.facts.segments.iter().find(|s| s.0 <= address && address < s.1).map(|s| s.1)
    }

    fn code_segments(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.facts.segments.iter().filter(|s| s.2 & PF_X != 0).map(|s| s.0..s.1)
    }

    fn file_modules(
        &mut self,
        files: &[FileMapping],
        explicit: Option<&Path>,
    ) -> (Vec<Module>, Option<usize>) {
        // The files in the order first mapped, each with its mappings.
        let mut groups: Vec<(PathBuf, Vec<Mapping>)> = Vec::new();
        for f in files {
            let mapping = Mapping { start: f.start, end: f.end, offset: f.offset };
            match groups.iter_mut().find(|(path, _)| *path == f.path) {
                Some((_, maps)) => maps.push(mapping),
                None => groups.push((f.path.clone(), vec![mapping])),
            }
        }
        let entry = self.auxv(AT_ENTRY);
        let code: Vec<Range<u64>> = self.code_segments().collect();
        let holds_code = |maps: &[Mapping]| {
            maps.iter().any(|m| code.iter().any(|c| m.start < c.end && c.start < m.end))
        };
        if self.facts.code_mappings_known {
            // Where the source lists every mapping that holds code, a file none of whose
            // mappings does is mapped as data (a symbolizer or debugger reading a library
            // through mmap, a locale archive): no module, whose symbols (an interpreter's
            // _PyRuntime) would be taken for the loaded ones'.
            groups.retain(|(_, maps)| holds_code(maps));
        }
        // A JIT's jitdump, which it maps executable for perf to see (CPython's -X
        // perf_jit): data, read as the JIT's names (`--perf-map`), no module.
        groups.retain(|(path, _)| !crate::space::jitdump::is_jitdump_path(path));
        // Every module's file is looked for here first, then those missing fetched at once.
        struct Found {
            path: PathBuf,
            maps: Vec<Mapping>,
            in_core: Option<Arc<ElfSummary>>,
            named_exe: bool,
            lookup: Lookup,
            recorded: Option<Identity>,
        }
        let mut located = Vec::new();
        let mut named_seen = false;
        for (path, maps) in groups {
            let first = maps.iter().filter(|m| m.offset == 0).map(|m| m.start).min();
            let in_core = first.and_then(|a| self.header_summary(a));
            let named_exe =
                entry.is_none() && !named_seen && named_as(&path, explicit, self.facts.fname);
            named_seen |= named_exe;
            let holds_entry = entry.is_some_and(|e| maps.iter().any(|m| m.start <= e && e < m.end));
            let recorded = first.and_then(|a| (self.facts.recorded)(a));
            let given = explicit.filter(|_| holds_entry || named_exe);
            let lookup = self.locate(&path, in_core.as_deref(), given, recorded.as_ref());
            located.push(Found { path, maps, in_core, named_exe, lookup, recorded });
        }
        let asked: Vec<_> =
            located.iter().map(|f| (f.in_core.clone(), f.lookup.file.clone())).collect();
        let fetched =
            self.fetch(&located.iter().map(|f| f.path.clone()).collect::<Vec<_>>(), &asked);
        let mut modules = Vec::new();
        let mut exe = None;
        for (mut found, got) in located.into_iter().zip(fetched) {
            if let Some(got) = got {
                found.lookup = self.fetched_file(got);
            }
            if found.lookup.summary.is_none() {
                // Without ELF headers in the core, nor an ELF file, it is a module only if it
                // held code (else a data file: locale archive, font, database...).
                if found.in_core.is_none()
                    && found.lookup.rejected.is_empty()
                    && !holds_code(&found.maps)
                {
                    continue;
                }
                self.not_found(&found.path, &found.lookup.rejected);
            }
            let summary = found.in_core.clone().or_else(|| found.lookup.summary.clone());
            let segments: Vec<Segment> =
                summary.iter().flat_map(|s| s.loads.iter().map(Segment::from_load)).collect();
            let is_code = |r: &Range<u64>| code.iter().any(|c| r.start < c.end && c.start < r.end);
            for placement in place(&segments, &found.maps, self.facts.page, is_code) {
                let (start, end) = (placement.start(), placement.end());
                let is_exe = match entry {
                    Some(e) => placement.contains(e),
                    // The first file named as the executable given, or as the process.
                    None => found.named_exe && exe.is_none(),
                };
                let module = self.module(
                    &found.path,
                    &found.lookup,
                    (start, end, placement.bias),
                    found.in_core.as_deref(),
                    placement.ranges,
                    found.recorded.as_ref(),
                );
                modules.push(module);
                if is_exe {
                    exe = Some(modules.len() - 1);
                }
            }
        }
        (modules, exe)
    }

    fn vdso(&mut self) -> Option<(Module, Vec<u8>)> {
        let address = self.auxv(AT_SYSINFO_EHDR).filter(|&a| a != 0)?;
        let end = self.segment_end(address).unwrap_or(address);
        let kind = self.facts.kind;
        let image = self.facts.memory.tail(address, usize::try_from(end - address).unwrap_or(0));
        if image.is_empty() || (image.len() as u64) < end - address {
            self.warnings.push(format!("vdso at {address:#x} is not in the {kind}"));
            return None;
        }
        let image = image.to_vec();
        let summary = match crate::space::elf::summarize(&image) {
            Ok(summary) => summary,
            Err(e) => {
                self.warnings.push(format!("vdso at {address:#x} unusable: <image>: {e}"));
                return None;
            }
        };
        let low = summary.loads.iter().map(|l| l.0).min().unwrap_or(0);
        let bias = address.wrapping_sub(low - low % self.facts.page.max(1));
        if let Err(e) = self.host.add_image("[vdso]", &image, bias) {
            self.warnings.push(format!("vdso at {address:#x} unusable: {e}"));
            return None;
        }
        let module = Module {
            path: PathBuf::from("[vdso]"),
            file: None,
            start: address,
            end,
            bias,
            build_id: summary.build_id,
            file_build_id: None,
            found: true,
            ranges: Vec::new(),
            doubtful: false,
            stand_in: false,
            sym_file: None,
        };
        Some((module, image))
    }

    /// The file for module `path` (see the module's documentation):
    /// `in_core` its headers in the snapshot, `given` the file the user
    /// named for it, `recorded` what the source records where its headers
    /// are not in its memory.
    fn locate(
        &mut self,
        path: &Path,
        in_core: Option<&ElfSummary>,
        given: Option<&Path>,
        recorded: Option<&Identity>,
    ) -> Lookup {
        if self.facts.foreign.is_some() {
            return Lookup::default();
        }
        let want = match in_core {
            Some(h) => h.build_id.clone().filter(|b| !b.is_empty()).map(Identity::BuildId),
            None => recorded.cloned(),
        };
        let arch = self.facts.arch;
        let (file, summary, rejected) = match given {
            Some(file) => match self.options.finder.given(file, arch) {
                Ok(summary) => (file.to_path_buf(), summary, Vec::new()),
                // (Checked before the modules were looked for: see `build`.)
                Err(why) => return Lookup { rejected: vec![why.to_string()], ..Lookup::default() },
            },
            None => match self.options.finder.locate(path, want.as_ref(), arch) {
                Located { file: Some((file, summary)), rejected } => (file, summary, rejected),
                Located { file: None, rejected } => {
                    return Lookup { rejected, ..Lookup::default() }
                }
            },
        };
        let (kind, shown, file_shown) = (self.facts.kind, path.display(), file.display());
        match want {
            None => {
                if given.is_none() && !self.facts.files_here {
                    // (A file given by name is the user's word.)
                    self.unverified.insert(path.to_path_buf());
                    self.warnings.push(format!(
                        "{shown}: the {kind} records no identity (build id) to check \
                         {file_shown} by; used, its frames doubtful"
                    ));
                }
            }
            Some(want) if !want.matches(&summary) => {
                // A file without a build id cannot be the module whose build id was recorded.
                self.mismatched.insert(path.to_path_buf(), summary.build_id.clone());
                let using = self.mismatch_use();
                self.warnings.push(format!(
                    "{} mismatch for {shown}: {kind} has {want}, {file_shown} has {}; {using}",
                    want.kind_name(),
                    want.of_file(&summary)
                ));
                if !self.options.allow_mismatch {
                    let why = format!("{file_shown} has another build id");
                    return Lookup { rejected: vec![why], ..Lookup::default() };
                }
            }
            Some(_) => {}
        }
        Lookup { file: Some(file), summary: Some(summary), rejected }
    }

    /// For each module (its path; its headers in the snapshot and the file
    /// found for it here): the executable fetched by its build id where no
    /// file was found; and the DWARF of every module without it here, into
    /// debuginfod's cache, where the lookups of lines and debug files find
    /// it. Each file that no server gave is a warning.
    fn fetch(
        &mut self,
        paths: &[PathBuf],
        modules: &[(Option<Arc<ElfSummary>>, Option<PathBuf>)],
    ) -> Vec<Option<PathBuf>> {
        if !self.options.fetch {
            return vec![None; modules.len()];
        }
        // Only modules whose build id the snapshot holds.
        let with_ids: Vec<(usize, String, String)> = modules
            .iter()
            .enumerate()
            .filter_map(|(i, (h, _))| {
                let id = h.as_ref()?.build_id.as_ref().filter(|b| !b.is_empty())?;
                Some((i, paths[i].display().to_string(), hex(id)))
            })
            .collect();
        let wanted: Vec<Wanted<'_>> = with_ids
            .iter()
            .map(|(i, name, id)| Wanted { name, build_id: id, file: modules[*i].1.as_deref() })
            .collect();
        let (finder, arch) = (&self.options.finder, self.facts.arch);
        let host = &mut *self.host;
        let fetched = fetch_missing(
            &wanted,
            self.options.debug_root.as_deref(),
            &mut |requests| host.fetch(requests),
            &|path| finder.given(path, arch).is_ok(),
            &mut self.warnings,
        );
        let mut out = vec![None; modules.len()];
        for ((i, _, _), got) in with_ids.iter().zip(fetched) {
            if let Some(path) = got {
                self.fetched.insert(path.clone());
                out[*i] = Some(path);
            }
        }
        out
    }

    /// A file fetched for a module, in place of what was found here.
    fn fetched_file(&self, got: PathBuf) -> Lookup {
        let summary = self.options.finder.given(&got, self.facts.arch).ok();
        Lookup { file: Some(got), summary, rejected: Vec::new() }
    }

    fn not_found(&mut self, path: &Path, rejected: &[String]) {
        match self.facts.foreign {
            None => {
                let reason = if rejected.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", rejected.join("; "))
                };
                self.warnings.push(format!("module not found: {}{reason}", path.display()));
            }
            // A Windows module's PE file is looked for (see `pe_file`).
            Some(_) if self.foreign_said || self.looks_for_pe() || self.looks_for_macho() => {}
            Some(os) => {
                self.foreign_said = true;
                self.warnings.push(format!(
                    "the modules of a {os} dump are not looked for on this machine (only ELF \
                     files are read): they are named from symbol files (--symbols-path, \
                     --symbols-url) where those are given"
                ));
            }
        }
    }

    /// A module at `place` (start, end, bias), its file added to the host,
    /// else its code told to the host as a module without a file.
    fn module(
        &mut self,
        path: &Path,
        lookup: &Lookup,
        (start, end, bias): (u64, u64, u64),
        in_core: Option<&ElfSummary>,
        ranges: Vec<Range<u64>>,
        recorded: Option<&Identity>,
    ) -> Module {
        let mut file = lookup.file.clone();
        let mut on_disk = lookup.summary.clone();
        if let Some(f) = &file {
            let added = self.host.add_file(f, bias, (!ranges.is_empty()).then_some(&ranges[..]));
            if let Err(e) = added {
                self.warnings.push(format!("module {}: {e}", path.display()));
                (file, on_disk) = (None, None);
            }
        }
        let build_id = in_core
            .and_then(|h| h.build_id.clone())
            .or_else(|| recorded.and_then(|r| r.build_id().map(<[u8]>::to_vec)));
        let file_build_id = match &on_disk {
            Some(s) => s.build_id.clone(),
            None => self.mismatched.get(path).cloned().flatten(),
        };
        let mut module = Module {
            path: path.to_path_buf(),
            found: file.is_some(),
            file,
            start,
            end,
            bias,
            build_id,
            file_build_id,
            ranges,
            doubtful: false,
            stand_in: false,
            sym_file: None,
        };
        module.sym_file = self.sym_file(&module);
        if module.file.is_none() {
            let own = self.pe_file(&module).or_else(|| self.macho_files(&module));
            self.add_missing(&module, in_core, module.sym_file.as_deref(), own.as_ref());
            if let Some(own) = own {
                // Named from its file too (a PE file's DWARF, where it has some; a Mach-O
                // file's symbols, and its dSYM's DWARF), whose addresses are from where the
                // file would have its start.
                module.bias = module.start.wrapping_sub(own.image_base);
                (module.file, module.found) = (Some(own.symbols), true);
            }
        }
        module
    }

    /// The module's Breakpad symbol file, by the ids the source lists for
    /// it, else by its recorded build id (as `dump_syms` names an ELF
    /// file); looked for once per file.
    fn sym_file(&mut self, module: &Module) -> Option<PathBuf> {
        if self.stores.is_empty() {
            return None;
        }
        let ids = self.facts.symbol_ids;
        let (debug_file, debug_id) = match ids.iter().find(|(base, ..)| *base == module.start) {
            Some((_, file, id)) => (file.clone(), id.clone()),
            None => {
                let name = basename(&module.path.to_string_lossy()).to_owned();
                (name, elf_debug_id(module.build_id.as_deref()?))
            }
        };
        // The vdso's image is in the snapshot: its file is not fetched with the others'.
        let vdso = self.auxv(AT_SYSINFO_EHDR);
        let every = || {
            let listed = ids.iter().filter(|(base, ..)| Some(*base) != vdso);
            listed.map(|(_, file, id)| (file.clone(), id.clone())).collect()
        };
        let host = &mut *self.host;
        let mut usable = |path: &Path, id: &str| host.sym_file_usable(path, id);
        self.stores.find(&debug_file, &debug_id, &every, &mut usable, &mut self.warnings)
    }

    /// Tell the host where a module without a file has code — its
    /// executable segments as the headers in the snapshot place them, else
    /// the snapshot's executable segments within it (gdb's gcore leaves
    /// unmodified file pages out) — so that a return address into it is
    /// accepted, and the walk goes on past it by frame pointers or scanning,
    /// instead of dropping a right frame for lying in no module. A Breakpad
    /// symbol file's `STACK CFI` records (offsets from the module's start)
    /// unwind it where they cover a pc.
    fn add_missing(
        &mut self,
        module: &Module,
        in_core: Option<&ElfSummary>,
        sym: Option<&Path>,
        own: Option<&ForeignFiles>,
    ) {
        let page = self.facts.page.max(1);
        let mut segments: Vec<Range<u64>> = in_core
            .iter()
            .flat_map(|h| h.loads.iter())
            .filter(|l| l.4 & PF_X != 0 && l.1 != 0)
            .filter_map(|l| {
                let start = l.0.wrapping_add(module.bias);
                Some(start..start.checked_add(l.1)?)
            })
            .collect();
        if let Some(own) = own.filter(|o| !o.code.is_empty()) {
            // The file's executable sections, at the module's start.
            segments = own
                .code
                .iter()
                .filter_map(|r| {
                    let start = module.start.checked_add(r.start)?;
                    Some(start..module.start.checked_add(r.end)?)
                })
                .collect();
        }
        if segments.is_empty() {
            segments = self.code_segments().collect();
        }
        let spans = module.spans();
        let code: Vec<Range<u64>> = spans
            .iter()
            .flat_map(|span| {
                segments.iter().filter(move |s| s.start < span.end && span.start < s.end).map(
                    move |s| {
                        let up = s.end.div_ceil(page).saturating_mul(page);
                        span.start.max(s.start - s.start % page)..span.end.min(up)
                    },
                )
            })
            .filter(|r| r.start < r.end)
            .collect();
        // A damaged snapshot can place a module past the end of the address space.
        let spans: Vec<Range<u64>> = spans.into_iter().filter(|r| r.start < r.end).collect();
        if !code.is_empty() && !spans.is_empty() {
            let image = own.and_then(|o| Some((o.code_file.as_deref()?, o.kind)));
            let rules = Rules { sym, image, base: module.start };
            // Refused: over a module that has a file, which is kept; a PE
            // or Mach-O file that cannot be read after all, said.
            if let Err(e) = self.host.add_missing(&module.path, &spans, &code, rules, false) {
                if image.is_some() {
                    self.warnings.push(format!("module {}: {e}", module.path.display()));
                }
            }
        }
    }

    /// Executable memory in no module (a JIT's code: node's, the JVM's) told
    /// to the host as code without a file, so that a frame-pointer chain
    /// through it is followed, its return addresses taken for what they
    /// are, instead of scanned past. Only where the source lists the files
    /// mapped: without that list, a file's code would pass for a JIT's.
    fn add_jit_code(&mut self, modules: &[Module]) {
        let taken: Vec<Range<u64>> = modules.iter().flat_map(Module::spans).collect();
        let jit: Vec<Range<u64>> = self
            .code_segments()
            .filter(|s| !taken.iter().any(|t| t.start < s.end && s.start < t.end))
            // (x86_64's [vsyscall] page: the kernel's, no JIT's.)
            .filter(|s| s.start < KERNEL_HALF)
            .collect();
        for range in jit {
            // Refused: over another piece of code, known already.
            let one = std::slice::from_ref(&range);
            let none = Rules::default();
            let _ = self.host.add_missing(Path::new("[jit]"), one, one, none, true);
        }
    }
}

/// Whether `path` has the file name of `executable` or the process name
/// `fname` (`NT_PRPSINFO`'s `pr_fname`, cut to 15 bytes).
fn named_as(path: &Path, executable: Option<&Path>, fname: Option<&str>) -> bool {
    let base = path.file_name().unwrap_or(path.as_os_str());
    if executable.is_some_and(|e| e.file_name().unwrap_or(e.as_os_str()) == base) {
        return true;
    }
    let Some(fname) = fname else { return false };
    let base = base.as_bytes();
    base == fname.as_bytes() || (fname.len() == FNAME_MAX && base.starts_with(fname.as_bytes()))
}

#[cfg(test)]
mod tests;
