//! Where a module's file is on this machine: one list of places for every
//! source — the path under a sysroot (another machine's files copied
//! here), the path itself, then each search directory by the file's name —
//! and one rule for which of them is the file the crash or the recording
//! mapped: the first whose build id is the recorded one (a file without a
//! build id cannot be told apart, and is taken).

use std::path::{Path, PathBuf};

use crate::source::memory::Data;

/// The places to look for files, as the options give them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileFinder {
    /// Prefixed to every absolute path (`--sysroot`).
    pub sysroot: Option<PathBuf>,
    /// Directories where a file is looked for by its name
    /// (`--lib-search-path`).
    pub search: Vec<PathBuf>,
}

/// What [`FileFinder::find`] found.
pub enum Found {
    /// The file, its bytes.
    File(PathBuf, Data),
    /// Only files of other builds: the first, and its build id.
    OtherBuild(PathBuf, Vec<u8>),
    /// Nothing readable at any of the places.
    Missing,
}

impl FileFinder {
    /// Where the file mapped at `path` may be, in the order they are tried,
    /// each once. A path that is not absolute (`[vdso]`, a JIT's name) is
    /// only itself; a deleted file (`/lib/x.so (deleted)`) is looked for at
    /// its path.
    pub fn candidates(&self, path: &str) -> Vec<PathBuf> {
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        if !path.starts_with('/') {
            return vec![PathBuf::from(path)];
        }
        let mut out = Vec::new();
        if let Some(root) = &self.sysroot {
            out.push(root.join(path.trim_start_matches('/')));
        }
        out.push(PathBuf::from(path));
        if let Some(name) = Path::new(path).file_name() {
            out.extend(self.search.iter().map(|dir| dir.join(name)));
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|p| seen.insert(p.clone()));
        out
    }

    /// The file mapped at `path` whose build id is `want` (None: any file),
    /// from the first of [`FileFinder::candidates`] that is one.
    pub fn find(&self, path: &str, want: Option<&[u8]>) -> Found {
        let mut other = None;
        for candidate in self.candidates(path) {
            let Ok(data) = crate::source::files::map(&candidate) else { continue };
            let Some(want) = want.filter(|w| !w.is_empty()) else {
                return Found::File(candidate, data);
            };
            let theirs = crate::space::elf::summarize(&data).ok().and_then(|s| s.build_id);
            match theirs {
                Some(theirs) if !same_build_id(want, &theirs) => {
                    other.get_or_insert((candidate, theirs));
                }
                _ => return Found::File(candidate, data),
            }
        }
        match other {
            Some((path, id)) => Found::OtherBuild(path, id),
            None => Found::Missing,
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
        let Some(id) = crate::space::elf::summarize(&data).unwrap().build_id else {
            return; // a test binary linked without a build id: nothing to tell apart
        };
        let dir = tempfile::tempdir().unwrap();
        let name = exe.file_name().unwrap();
        let copy = dir.path().join("usr").join(name);
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::copy(&exe, &copy).unwrap();
        let path = format!("/usr/{}", name.to_string_lossy());
        let finder = FileFinder { sysroot: Some(dir.path().into()), search: vec![] };
        assert!(matches!(finder.find(&path, Some(&id)), Found::File(p, _) if p == copy));
        let mut padded = id.clone();
        padded.resize(20.max(id.len()), 0);
        assert!(matches!(finder.find(&path, Some(&padded)), Found::File(p, _) if p == copy));
        let other = vec![0xab; id.len()];
        assert!(
            matches!(finder.find(&path, Some(&other)), Found::OtherBuild(p, t) if p == copy && t == id)
        );
        assert!(matches!(finder.find("/no/such/file", Some(&id)), Found::Missing));
    }
}
