//! A Windows dump's modules: their PE files, looked for by name in the
//! search directories and checked by the code id the dump records (see
//! `crate::space::pe`, `crate::unwind::pe`).

use std::path::PathBuf;

use super::{Builder, ForeignFiles, ImageKind, Module};
use crate::arch::Arch;
use crate::space::pe::{PeHeaders, PeImage};

impl Builder<'_, '_, '_> {
    /// A Windows module's PE file: looked for by its name (as the dump
    /// spells it, then in lower case, as Wine installs its DLLs) in each
    /// search directory, and used only if its header's time stamp and
    /// image size are the code id the dump records: its code (for the
    /// checks of return addresses) and names, and for an x64 file its
    /// unwind tables (see `crate::unwind::pe`; an x86 file has none: its
    /// PDB's frame data, in its symbol file, unwinds it). Files of another
    /// build are a warning, used with `allow_mismatch`.
    pub(super) fn pe_file(&mut self, module: &Module) -> Option<ForeignFiles> {
        if !self.looks_for_pe() {
            return None;
        }
        let ids = self.facts.code_ids.iter();
        let (_, name, code_id) = ids.into_iter().find(|(base, ..)| *base == module.start)?;
        let Some((file, headers)) = self.pe_file_named(module, name, code_id) else {
            self.no_own_file.push(name.clone());
            return None;
        };
        Some(ForeignFiles {
            code_file: Some(file.clone()),
            kind: ImageKind::Pe,
            code: headers.code().collect(),
            image_base: headers.image_base,
            symbols: file,
        })
    }

    /// Whether the source's modules are Windows x64 or x86 ones, whose PE files are looked for.
    pub(super) fn looks_for_pe(&self) -> bool {
        matches!(self.facts.arch, Arch::X86_64 | Arch::I386)
            && !self.facts.code_ids.is_empty()
            && self.facts.foreign == Some("Windows NT")
    }

    fn pe_file_named(
        &mut self,
        module: &Module,
        name: &str,
        code_id: &str,
    ) -> Option<(PathBuf, PeHeaders)> {
        let mut other = None;
        let mut unreadable = Vec::new();
        for dir in &self.options.finder.search {
            let mut names = vec![dir.join(name), dir.join(name.to_lowercase())];
            names.dedup();
            for candidate in names.into_iter().filter(|c| c.exists()) {
                let headers = match PeImage::open(&candidate) {
                    Ok(image) => image.headers,
                    Err(why) => {
                        unreadable.push(why);
                        continue;
                    }
                };
                if headers.arch != self.facts.arch {
                    continue;
                }
                if headers.code_id().eq_ignore_ascii_case(code_id) {
                    return Some((candidate, headers));
                }
                other.get_or_insert((candidate, headers));
            }
        }
        let shown = module.path.display();
        let Some((file, headers)) = other else {
            if !unreadable.is_empty() {
                self.warnings
                    .push(format!("module {shown} not unwound: {}", unreadable.join("; ")));
            }
            return None;
        };
        let kind = self.facts.kind;
        self.mismatched.insert(module.path.clone(), None);
        let using = self.mismatch_use();
        self.warnings.push(format!(
            "code id mismatch for {shown}: {kind} has {code_id}, {} has {}; {using}",
            file.display(),
            headers.code_id()
        ));
        self.options.allow_mismatch.then_some((file, headers))
    }

    /// One warning naming the modules whose own files (PE, Mach-O) were not
    /// found.
    pub(super) fn say_missing_own_files(&mut self) {
        if self.no_own_file.is_empty() {
            return;
        }
        let (os, count) = (self.facts.foreign.unwrap_or("Windows"), self.no_own_file.len());
        let apple = self.looks_for_macho();
        let mut searched = match self.options.finder.search.is_empty() {
            true => "no --lib-search-path given".to_owned(),
            false => "not found by name in --lib-search-path".to_owned(),
        };
        if apple {
            searched.push_str(match self.stores.urls.is_empty() {
                true => ", none by UUID in --symbols-path",
                false => ", none by UUID in --symbols-path or on the --symbols-url servers",
            });
        }
        let (files, records) = match apple {
            true => ("Mach-O files (or dSYMs)", "STACK CFI"),
            false => ("PE files", "STACK CFI or STACK WIN"),
        };
        let modules = if count == 1 { "module" } else { "modules" };
        self.warnings.push(format!(
            "the {files} of {count} {modules} of the {os} dump are missing ({searched}): they \
             are unwound by {records} where --symbols-path has their symbol files, else by \
             frame pointers and scanning: {}",
            self.no_own_file.join(", ")
        ));
    }
}
