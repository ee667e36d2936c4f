//! A macOS or iOS dump's modules: their Mach-O files and dSYM bundles,
//! looked for in the search directories and used only where their
//! `LC_UUID` is the one the dump records (see `crate::space::macho`,
//! `crate::unwind::compact`).

use std::path::{Path, PathBuf};

use super::{Builder, ForeignFiles, ImageKind, Module};
use crate::arch::Arch;
use crate::space::macho::{self, MachoHeaders};
use crate::space::symserver::{unified_path, UNIFIED_LEAVES};

/// Files that may be a module's, each with whether it is named for it.
type Candidates = Vec<(PathBuf, bool)>;

/// Where a dSYM bundle keeps its DWARF file, under the bundle.
const DSYM_DWARF: &str = "Contents/Resources/DWARF";

impl Builder<'_, '_, '_> {
    /// Whether the source's modules are Apple ones (x86_64, arm64), whose
    /// Mach-O files and dSYMs are looked for.
    pub(super) fn looks_for_macho(&self) -> bool {
        matches!(self.facts.arch, Arch::X86_64 | Arch::Aarch64)
            && matches!(self.facts.foreign, Some("Mac OS X" | "iOS"))
            && !self.facts.code_ids.is_empty()
    }

    /// An Apple module's files: the Mach-O file (its code, its compact
    /// unwind info and `__eh_frame`) and the dSYM (its symbols, lines and
    /// inline frames), each found by name in the search directories —
    /// `DIR/NAME`, `DIR/NAME.dSYM`, and any other bundle `DIR/*.dSYM`
    /// whose DWARF file has the module's UUID (an app's dSYM is named for
    /// the app) — or by UUID in the symbol stores (see [`in_store`]) and
    /// servers, and used only where its UUID is the code id the dump
    /// records. A file of another build is a warning, used with
    /// `allow_mismatch`.
    pub(super) fn macho_files(&mut self, module: &Module) -> Option<ForeignFiles> {
        if !self.looks_for_macho() {
            return None;
        }
        let ids = self.facts.code_ids.iter();
        let (_, name, code_id) = ids.into_iter().find(|(base, ..)| *base == module.start)?;
        let (binaries, dwarf) = self.candidates(module, name, code_id);
        let mut binary = self.best(module, binaries, code_id);
        let mut dsym = self.best(module, dwarf, code_id);
        if (binary.is_none() || dsym.is_none()) && !self.stores.urls.is_empty() {
            let (served_binary, served_dsym) = self.served(code_id);
            let named = |p: Option<PathBuf>| p.into_iter().map(|p| (p, true)).collect();
            if binary.is_none() {
                binary = self.best(module, named(served_binary), code_id);
            }
            if dsym.is_none() {
                dsym = self.best(module, named(served_dsym), code_id);
            }
        }
        let (file, headers) = match (&binary, &dsym) {
            (Some(b), _) => b.clone(),
            (None, Some(d)) => d.clone(),
            (None, None) => {
                self.no_own_file.push(name.clone());
                return None;
            }
        };
        let code = headers.code().map(|r| {
            r.start.wrapping_sub(headers.text_address)..r.end.wrapping_sub(headers.text_address)
        });
        Some(ForeignFiles {
            code_file: binary.map(|(path, _)| path),
            kind: ImageKind::MachO,
            code: code.collect(),
            image_base: headers.text_address,
            symbols: dsym.map_or(file, |(path, _)| path),
        })
    }

    /// The places the files of module `name` (UUID `code_id`) may be on
    /// this machine (see [`Builder::macho_files`]): (executables, dSYM DWARF
    /// files), each with whether it is named for the module (only such a
    /// file of another build is a mismatch).
    fn candidates(&self, module: &Module, name: &str, code_id: &str) -> (Candidates, Candidates) {
        let mut binaries = Candidates::new();
        let mut dwarf = Candidates::new();
        let own_bundle = format!("{name}.dSYM");
        for dir in &self.options.finder.search {
            binaries.push((dir.join(name), true));
            dwarf.extend(dwarf_files(&dir.join(&own_bundle), name));
            let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
            let bundles = entries.map(|e| e.path()).filter(|p| {
                p.extension() == Some("dSYM".as_ref()) && p.file_name() != Some(own_bundle.as_ref())
            });
            for bundle in bundles {
                dwarf.extend(dwarf_files(&bundle, name).into_iter().map(|(p, _)| (p, false)));
            }
        }
        if let Some(root) = &self.options.finder.sysroot {
            let path = root.join(module.path.strip_prefix("/").unwrap_or(&module.path));
            binaries.push((path, true));
        }
        // Symbol stores (--symbols-path) by the UUID: a bundle named for it, and Sentry's
        // "unified" layout.
        for store in &self.stores.paths {
            let (found_binaries, found_dwarf) = in_store(store, code_id, name);
            binaries.extend(found_binaries.into_iter().map(|p| (p, true)));
            dwarf.extend(found_dwarf.into_iter().map(|p| (p, true)));
        }
        (binaries, dwarf)
    }

    /// The executable and dSYM of UUID `code_id` from the symbol servers
    /// (--symbols-url): the first module that asks asks for the files of
    /// every module of the dump at once, but those whose file is in a
    /// search directory by name.
    fn served(&mut self, code_id: &str) -> (Option<PathBuf>, Option<PathBuf>) {
        let here = |name: &str| self.options.finder.search.iter().any(|d| d.join(name).is_file());
        let every: Vec<String> = match self.stores.apple_asked() {
            true => Vec::new(),
            false => self
                .facts
                .code_ids
                .iter()
                .filter(|(_, name, _)| !here(name))
                .map(|(_, _, id)| id.clone())
                .collect(),
        };
        let mut warnings = Vec::new();
        let files = self.stores.apple_files(code_id, &every, &mut warnings);
        self.warnings.extend(warnings);
        files
    }

    /// The first of `candidates` that is a Mach-O file of the dump's
    /// architecture whose UUID is `code_id`; else, where mismatches are
    /// allowed, the first of another build, with a warning either way.
    fn best(
        &mut self,
        module: &Module,
        candidates: Candidates,
        code_id: &str,
    ) -> Option<(PathBuf, MachoHeaders)> {
        let arch = self.facts.arch;
        let mut other = None;
        for (candidate, named) in candidates.into_iter().filter(|(c, _)| c.is_file()) {
            let Ok(data) = crate::source::files::map(&candidate) else { continue };
            let Ok(headers) = macho::headers(&data, Some(arch)) else { continue };
            if headers.code_id().is_some_and(|id| id.eq_ignore_ascii_case(code_id)) {
                return Some((candidate, headers));
            }
            if named {
                other.get_or_insert((candidate, headers));
            }
        }
        let (file, headers) = other?;
        let kind = self.facts.kind;
        self.mismatched.insert(module.path.clone(), None);
        let using = self.mismatch_use();
        let theirs = headers.code_id().unwrap_or_else(|| "no UUID".to_owned());
        self.warnings.push(format!(
            "UUID mismatch for {}: {kind} has {code_id}, {} has {theirs}; {using}",
            module.path.display(),
            file.display(),
        ));
        self.options.allow_mismatch.then_some((file, headers))
    }
}

/// The DWARF files of the dSYM bundle at `bundle`: the one named `name`
/// first, then any other (a bundle holds one per binary it was made for).
/// The files a symbol store `store` holds for the Mach-O file of UUID
/// `code_id` (32 hex digits) named `name`: (executables, dSYM DWARF files).
/// Two layouts: the dSYM bundle named for the UUID as Apple's tools
/// archive them (`STORE/8C3DF1A2-....dSYM`, the UUID upper case with its
/// dashes), and Sentry's "unified" layout of symbol servers
/// (`STORE/8c/3df1a2....../executable` and `.../debuginfo`, the UUID lower
/// case without dashes, two digits then the rest).
fn in_store(store: &Path, code_id: &str, name: &str) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let hex = code_id.to_ascii_lowercase();
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return (Vec::new(), Vec::new());
    }
    let upper = hex.to_ascii_uppercase();
    let dashed = format!(
        "{}-{}-{}-{}-{}",
        &upper[..8],
        &upper[8..12],
        &upper[12..16],
        &upper[16..20],
        &upper[20..]
    );
    let [executable, debuginfo] = UNIFIED_LEAVES.map(|leaf| unified_path(store, &hex, leaf));
    let mut dwarf: Vec<PathBuf> = debuginfo.into_iter().collect();
    dwarf.extend(dwarf_files(&store.join(format!("{dashed}.dSYM")), name).into_iter().map(|d| d.0));
    (executable.into_iter().collect(), dwarf)
}

/// (Each with whether it is named for the module.)
fn dwarf_files(bundle: &Path, name: &str) -> Candidates {
    let dir = bundle.join(DSYM_DWARF);
    let mut files = vec![(dir.join(name), true)];
    let others = std::fs::read_dir(&dir).into_iter().flatten().flatten().map(|e| e.path());
    files.extend(others.filter(|p| p.file_name() != Some(name.as_ref())).map(|p| (p, false)));
    files
}
