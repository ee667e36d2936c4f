//! Modules placed without the source's list of file mappings: through the
//! dynamic linker's link map in the snapshot's memory (a core qemu-user
//! wrote has no `NT_FILE`), or by a path and a bias alone (a capture of the
//! format before mappings were recorded); each where its file's segments go.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Builder, Lookup, Module, AT_ENTRY, AT_EXECFN, AT_PHDR, AT_SYSINFO_EHDR};
use crate::source::corefile::LinkMapEntry;
use crate::space::elf::ElfSummary;

impl Builder<'_, '_, '_> {
    /// A module known by its path and bias alone, placed where its file's
    /// segments go; None (a warning) without its file: nothing says where it
    /// was but the bias.
    pub(super) fn module_at_bias(&mut self, path: &Path, bias: u64) -> Option<Module> {
        let lookup = self.locate(path, None, None, None);
        let Some(summary) = lookup.summary.clone() else {
            self.not_found(path, &lookup.rejected);
            return None;
        };
        let (start, end) = self.load_range(&summary, bias);
        Some(self.module(path, &lookup, (start, end, bias), None, Vec::new(), None))
    }

    pub(super) fn link_map_modules(
        &mut self,
        explicit: Option<&Path>,
    ) -> (Vec<Module>, Option<usize>) {
        let Some((exe, summary)) = self.link_map_executable(explicit) else {
            return (Vec::new(), None);
        };
        let bias = exe.bias;
        let found_exe = exe.file.is_some();
        let mut modules = vec![exe];
        let Some(summary) = summary else {
            self.warnings.push(
                "no NT_FILE note and the executable is not found: its libraries cannot be found \
                 through the link map"
                    .to_owned(),
            );
            return (modules, Some(0));
        };
        let Some(dynamic) = summary.dynamic else {
            return (modules, Some(0)); // statically linked
        };
        let dynamic = dynamic.wrapping_add(bias);
        let (entries, warnings) = (self.facts.link_map)(dynamic);
        self.warnings.extend(warnings);
        let vdso = self.auxv(AT_SYSINFO_EHDR).filter(|&a| a != 0);
        let vdso_end = vdso.and_then(|a| self.segment_end(a));
        // The dynamic linker's own name is the executable's PT_INTERP.
        let mut interpreter = summary.interpreter.clone().filter(|_| found_exe);
        for LinkMapEntry { name, bias, dynamic } in entries {
            if let (Some(v), Some(e)) = (vdso, vdso_end) {
                if v <= dynamic && dynamic < e {
                    continue; // the vdso's own entry: its image is read from the core below
                }
            }
            // (None: the dynamic linker's, pointing into the executable's .interp.)
            let Some(name) = name.or_else(|| interpreter.take()) else {
                self.warnings
                    .push(format!("link map: cannot read the name of the module at {bias:#x}"));
                continue;
            };
            let name = PathBuf::from(OsStr::from_bytes(&name));
            let mut in_core = self.header_summary(bias);
            let lookup = self.locate_or_fetch(&name, in_core.clone(), None);
            let (start, end) = if let Some(on_disk) = &lookup.summary {
                let range = self.load_range(on_disk, bias);
                if in_core.is_none() {
                    in_core = self.header_summary(range.0);
                }
                range
            } else if let Some(in_core) = &in_core {
                self.load_range(in_core, bias)
            } else {
                (bias, self.segment_end(dynamic).unwrap_or(bias))
            };
            if lookup.summary.is_none() {
                self.not_found(&name, &lookup.rejected);
            }
            let module = self.module(
                &name,
                &lookup,
                (start, end, bias),
                in_core.as_deref(),
                Vec::new(),
                None,
            );
            modules.push(module);
        }
        (modules, Some(0))
    }

    /// The executable's module and ELF summary (None: neither its file nor
    /// its headers).
    fn link_map_executable(
        &mut self,
        explicit: Option<&Path>,
    ) -> Option<(Module, Option<Arc<ElfSummary>>)> {
        let execfn = self.auxv(AT_EXECFN).filter(|&a| a != 0);
        let name = execfn
            .and_then(|a| self.facts.memory.string(a, 4096))
            .filter(|n| !n.is_empty())
            .map(|n| PathBuf::from(OsStr::from_bytes(&n)))
            .or_else(|| self.facts.fname.filter(|f| !f.is_empty()).map(PathBuf::from))
            .or_else(|| explicit.map(Path::to_path_buf));
        let Some(name) = name else {
            self.warnings
                .push("cannot tell the executable: no AT_EXECFN and no NT_PRPSINFO".into());
            return None;
        };
        let entry = self.auxv(AT_ENTRY);
        let page = self.facts.page.max(1);
        let phdr = self.auxv(AT_PHDR).filter(|&a| a != 0);
        let mut in_core = phdr.and_then(|p| self.header_summary(p - p % page));
        let lookup = self.locate_or_fetch(&name, in_core.clone(), explicit);
        if lookup.summary.is_none() {
            self.not_found(&name, &lookup.rejected);
        }
        let Some(summary) = lookup.summary.clone().or_else(|| in_core.clone()) else {
            // Only its place is known: the mapping that holds the entry point.
            let entry = entry?;
            let &(start, end, _) =
                self.facts.segments.iter().find(|s| s.0 <= entry && entry < s.1)?;
            let module =
                self.module(&name, &Lookup::default(), (start, end, start), None, Vec::new(), None);
            return Some((module, None));
        };
        let bias = match entry {
            Some(entry) => entry.wrapping_sub(summary.entry),
            None if summary.e_type == object::elf::ET_EXEC => 0,
            None => {
                let shown = name.display();
                self.warnings
                    .push(format!("cannot place {shown} in memory: the core has no AT_ENTRY"));
                return None;
            }
        };
        let (start, end) = self.load_range(&summary, bias);
        if in_core.is_none() {
            in_core = self.header_summary(start);
        }
        let module =
            self.module(&name, &lookup, (start, end, bias), in_core.as_deref(), Vec::new(), None);
        Some((module, Some(summary)))
    }

    /// The runtime range the PT_LOAD segments of `summary` take at `bias`,
    /// page-aligned.
    pub(super) fn load_range(&self, summary: &ElfSummary, bias: u64) -> (u64, u64) {
        let loads = summary.loads.iter().filter(|l| l.1 != 0).map(|l| (l.0, l.0.wrapping_add(l.1)));
        let (Some(start), Some(end)) = (loads.clone().map(|l| l.0).min(), loads.map(|l| l.1).max())
        else {
            return (bias, bias);
        };
        let page = self.facts.page.max(1);
        let up = end.div_ceil(page).wrapping_mul(page);
        (bias.wrapping_add(start - start % page), bias.wrapping_add(up))
    }

    /// The file of one module (see `locate`), else fetched by its build id.
    fn locate_or_fetch(
        &mut self,
        name: &Path,
        in_core: Option<Arc<ElfSummary>>,
        given: Option<&Path>,
    ) -> Lookup {
        let lookup = self.locate(name, in_core.as_deref(), given, None);
        let asked = [(in_core, lookup.file.clone())];
        match self.fetch(std::slice::from_ref(&name.to_path_buf()), &asked).pop().flatten() {
            Some(got) => self.fetched_file(got),
            None => lookup,
        }
    }
}
