//! Where a module's file is on this machine: one list of places for every
//! source — the path under a sysroot (another machine's files copied
//! here), the path itself, then each search directory by the file's name —
//! and one rule for which of them is the file the crash or the recording
//! mapped: the first whose identity (build id, Breakpad file id or GUID) is
//! the recorded one (a file without a build id cannot be told apart from a
//! recording's, and is taken).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::arch::Arch;
use crate::source::files::FileCache;
use crate::space::elf::ElfSummary;

/// The places to look for files, as the options give them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileFinder {
    /// Prefixed to every absolute path (`--sysroot`).
    pub sysroot: Option<PathBuf>,
    /// Directories where a file is looked for by its name
    /// (`--lib-search-path`).
    pub search: Vec<PathBuf>,
    /// Where a module's file is read when its path cannot be (a live
    /// process's library deleted since it was mapped, read through
    /// `/proc/PID/map_files/`): the module's path, the file.
    pub stand_ins: HashMap<PathBuf, PathBuf>,
}

/// What a crash records of a module's file, to check a file found for it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// Its GNU build id (the ELF headers in a core's memory).
    BuildId(Vec<u8>),
    /// Breakpad's `FileID` of it (a minidump's `BpEL` record): the build id,
    /// or where the file has none, the hash of the first page of `.text`
    /// (of its first executable section, as minidump-writer hashes it).
    FileId(Vec<u8>),
    /// The first 16 bytes of a `FileID` as a GUID, and the age (the `RSDS`
    /// record Breakpad's Linux client wrote before it recorded build ids,
    /// with age 0; a GUID with an age is a PDB's or a Mach-O UUID, which no
    /// ELF file has).
    Guid(Vec<u8>, u32),
}

impl Identity {
    /// Whether the file `summary` is of is the one recorded, its identity
    /// computed the same way.
    pub fn matches(&self, summary: &ElfSummary) -> bool {
        let file_ids = || [&summary.file_id, &summary.other_file_id].into_iter().flatten();
        match self {
            Identity::BuildId(id) => {
                summary.build_id.as_deref().is_some_and(|b| same_build_id(id, b))
            }
            Identity::FileId(id) => file_ids().any(|f| f == id),
            Identity::Guid(guid, 0) => file_ids().any(|f| guid_of(f) == *guid),
            Identity::Guid(..) => false,
        }
    }

    /// The build id recorded, where the record holds one (a GUID is a part
    /// of one only).
    pub fn build_id(&self) -> Option<&[u8]> {
        match self {
            Identity::BuildId(id) | Identity::FileId(id) => Some(id),
            Identity::Guid(..) => None,
        }
    }

    /// A file's identity as this one is written, for a message.
    pub fn of_file(&self, summary: &ElfSummary) -> String {
        let theirs = match self {
            Identity::BuildId(_) => &summary.build_id,
            _ => &summary.file_id,
        };
        match (theirs, self) {
            (None, _) => "no build id".to_owned(),
            (Some(id), Identity::Guid(..)) => format!("GUID {}", hex(&guid_of(id))),
            (Some(id), _) => hex(id),
        }
    }

    /// The kind of identity, as messages name it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Identity::Guid(..) => "debug-id",
            _ => "build-id",
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::BuildId(id) | Identity::FileId(id) => f.write_str(&hex(id)),
            Identity::Guid(guid, age) => write!(f, "GUID {} (age {age})", hex(guid)),
        }
    }
}

/// The first 16 bytes of a file id, zero-padded: its GUID.
fn guid_of(id: &[u8]) -> Vec<u8> {
    let mut guid: Vec<u8> = id.iter().copied().take(16).collect();
    guid.resize(16, 0);
    guid
}

/// Bytes as lowercase hex, as build ids and file ids are written.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What [`FileFinder::locate`] found for a module.
#[derive(Debug, Default)]
pub struct Located {
    /// The file and its summary: the first of the recorded identity, else
    /// (none recorded, or none of the candidates has it) the first ELF file
    /// of the architecture.
    pub file: Option<(PathBuf, Arc<ElfSummary>)>,
    /// Why files found were not taken (another architecture; not a regular
    /// file: a FIFO, a device, never opened).
    pub rejected: Vec<String>,
}

static SUMMARIES: FileCache<Result<Arc<ElfSummary>, String>> = FileCache::new(1024);

/// Drop the summaries used longest ago (see `FileCache::trim`).
pub fn trim_caches(keep: f64) -> usize {
    SUMMARIES.trim(keep)
}

/// The ELF summary of the file at `path` (see [`crate::space::elf::summarize`]),
/// read once per process while the file is unchanged: a directory of cores
/// checks the same libraries again and again. The outer error: it cannot be
/// opened as a regular file; the inner: it is no ELF file.
pub fn file_summary(path: &Path) -> std::io::Result<Result<Arc<ElfSummary>, String>> {
    SUMMARIES.get(path, None, |file| {
        let data = crate::source::files::map_file(file).map_err(|e| e.to_string())?;
        crate::space::elf::summarize(&data).map(Arc::new).map_err(|e| e.to_string())
    })
}

impl FileFinder {
    /// Where the file mapped at `path` may be, in the order they are tried,
    /// each once. A path that is not absolute (`[vdso]`, a JIT's name) is
    /// only itself; a deleted file (`/lib/x.so (deleted)`) is looked for at
    /// its path.
    pub fn candidates(&self, path: impl AsRef<Path>) -> Vec<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let path = path.as_ref();
        if let Some(file) = self.stand_ins.get(path) {
            return vec![file.clone()];
        }
        let bytes = path.as_os_str().as_bytes();
        let path = Path::new(std::ffi::OsStr::from_bytes(
            bytes.strip_suffix(b" (deleted)").unwrap_or(bytes),
        ));
        if !path.has_root() {
            return vec![path.to_path_buf()];
        }
        let mut out = Vec::new();
        if let Some(root) = &self.sysroot {
            out.push(root.join(path.strip_prefix("/").unwrap_or(path)));
        }
        out.push(path.to_path_buf());
        if let Some(name) = path.file_name() {
            out.extend(self.search.iter().map(|dir| dir.join(name)));
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|p| seen.insert(p.clone()));
        out
    }
}

impl FileFinder {
    /// The file mapped at `path` that a snapshot of an `arch` process
    /// recorded as `want` (None: nothing recorded, any file is taken), from
    /// the first of [`FileFinder::candidates`] that is an ELF file of the
    /// architecture; where none is of the identity, the first of another.
    pub fn locate(&self, path: &Path, want: Option<&Identity>, arch: Arch) -> Located {
        let mut other = None;
        let mut rejected = Vec::new();
        for candidate in self.candidates(path) {
            // (A FIFO or a device is a reason, given; a missing file is none.)
            if std::fs::metadata(&candidate).is_err() {
                continue;
            }
            let summary = match self.given(&candidate, arch) {
                Ok(summary) => summary,
                Err(Unusable::NotElf) => continue,
                Err(why) => {
                    rejected.push(why.to_string());
                    continue;
                }
            };
            if want.is_none_or(|w| w.matches(&summary)) {
                return Located { file: Some((candidate, summary)), rejected: Vec::new() };
            }
            other.get_or_insert((candidate, summary));
        }
        match other {
            Some(file) => Located { file: Some(file), rejected: Vec::new() },
            None => Located { file: None, rejected },
        }
    }

    /// The ELF summary of `file`, a file of an `arch` process; why it
    /// cannot be one.
    pub fn given(&self, file: &Path, arch: Arch) -> Result<Arc<ElfSummary>, Unusable> {
        let shown = file.display();
        match file_summary(file) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Unusable::Missing),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                Err(Unusable::Other(format!("{shown} {e}")))
            }
            Err(e) => Err(Unusable::Other(format!("{shown}: {e}"))),
            Ok(Err(_)) => Err(Unusable::NotElf),
            Ok(Ok(s)) if Arch::from_elf_machine(s.machine) == Some(arch) => Ok(s),
            Ok(Ok(s)) => {
                let theirs = Arch::from_elf_machine(s.machine)
                    .map_or_else(|| s.machine.to_string(), |a| a.name().to_owned());
                Err(Unusable::Other(format!("{shown} is {theirs}, not {}", arch.name())))
            }
        }
    }
}

/// Why a file given for a module cannot be its file.
#[derive(Debug, PartialEq, Eq)]
pub enum Unusable {
    Missing,
    NotElf,
    /// Another architecture's, not a regular file, not readable: the file
    /// named, and why.
    Other(String),
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unusable::Missing => f.write_str("no such file"),
            Unusable::NotElf => f.write_str("not an ELF file"),
            Unusable::Other(why) => f.write_str(why),
        }
    }
}

/// Whether a recorded build id is `actual`: perf pads the ids it records
/// to 20 bytes where it did not record their size.
pub fn same_build_id(recorded: &[u8], actual: &[u8]) -> bool {
    recorded.starts_with(actual) && recorded[actual.len()..].iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_in_order_each_once() {
        let finder = FileFinder {
            sysroot: Some("/sys/root".into()),
            search: vec!["/lib/x".into(), "/usr/lib".into()],
            ..Default::default()
        };
        let got = finder.candidates("/usr/lib/libc.so.6 (deleted)");
        let want: Vec<PathBuf> =
            ["/sys/root/usr/lib/libc.so.6", "/usr/lib/libc.so.6", "/lib/x/libc.so.6"]
                .iter()
                .map(PathBuf::from)
                .collect();
        assert_eq!(got, want);
        assert_eq!(finder.candidates("[vdso]"), vec![PathBuf::from("[vdso]")]);
        assert_eq!(FileFinder::default().candidates("/a/b"), vec![PathBuf::from("/a/b")]);
    }

    #[test]
    fn the_recorded_build_is_preferred_then_reported() {
        let exe = std::env::current_exe().unwrap();
        let data = crate::source::files::map(&exe).unwrap();
        let summary = crate::space::elf::summarize(&data).unwrap();
        let (Some(id), Some(arch)) = (summary.build_id, Arch::from_elf_machine(summary.machine))
        else {
            return; // a test binary linked without a build id: nothing to tell apart
        };
        let dir = tempfile::tempdir().unwrap();
        let name = exe.file_name().unwrap();
        let copy = dir.path().join("usr").join(name);
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::copy(&exe, &copy).unwrap();
        let path = PathBuf::from(format!("/usr/{}", name.to_string_lossy()));
        let finder = FileFinder { sysroot: Some(dir.path().into()), ..Default::default() };
        let found = |want: &Identity| {
            let Located { file, .. } = finder.locate(&path, Some(want), arch);
            file.map(|(p, s)| (p, want.matches(&s)))
        };
        assert_eq!(found(&Identity::BuildId(id.clone())), Some((copy.clone(), true)));
        // perf pads the ids it records to 20 bytes.
        let mut padded = id.clone();
        padded.resize(20.max(id.len()), 0);
        assert_eq!(found(&Identity::BuildId(padded)), Some((copy.clone(), true)));
        // Another build: the file found, for the caller to say so.
        let other = Identity::BuildId(vec![0xab; id.len()]);
        assert_eq!(found(&other), Some((copy.clone(), false)));
        let theirs = crate::space::elf::summarize(&data).unwrap();
        assert_eq!(other.of_file(&theirs), hex(&id));
        // Another architecture's file is a reason, not a file.
        let other_arch = Arch::ALL.into_iter().find(|&a| a != arch).unwrap();
        let located = finder.locate(&path, None, other_arch);
        assert!(located.file.is_none());
        assert_eq!(located.rejected.len(), 1, "{:?}", located.rejected);
        assert!(finder.locate(Path::new("/no/such/file"), None, arch).file.is_none());
    }

    #[test]
    fn identities_match_as_they_were_recorded() {
        let summary = |build_id: Option<Vec<u8>>, file_id: Option<Vec<u8>>| ElfSummary {
            build_id,
            file_id,
            ..crate::space::elf::summarize(
                &std::fs::read(std::env::current_exe().unwrap()).unwrap(),
            )
            .unwrap()
        };
        let id: Vec<u8> = (1..=20).collect();
        let with_id = summary(Some(id.clone()), Some(id.clone()));
        assert!(Identity::BuildId(id.clone()).matches(&with_id));
        assert!(Identity::FileId(id.clone()).matches(&with_id));
        assert!(Identity::Guid(id[..16].to_vec(), 0).matches(&with_id));
        // A GUID with an age is a PDB's or a Mach-O UUID: no ELF file's.
        assert!(!Identity::Guid(id[..16].to_vec(), 1).matches(&with_id));
        // A file without a build id cannot be the one whose build id was recorded.
        let without = summary(None, Some(vec![7; 16]));
        assert!(!Identity::BuildId(id.clone()).matches(&without));
        assert_eq!(Identity::BuildId(id).of_file(&without), "no build id");
        assert!(Identity::FileId(vec![7; 16]).matches(&without));
        assert_eq!(
            Identity::Guid(vec![7; 16], 3).to_string(),
            format!("GUID {} (age 3)", "07".repeat(16))
        );
    }
}
