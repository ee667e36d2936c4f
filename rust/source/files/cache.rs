//! What was read of files in this process, kept per file while the file is
//! unchanged: a directory of cores (or a long-lived Python program) names
//! the same libraries again and again, and each is read once.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use rustc_hash::FxHashMap;

/// What tells a file from the one that was at its path before: (device,
/// inode, size, modification time in ns).
type Identity = (u64, u64, u64, i128);

/// A file's path and the debug root its entry was completed from.
type FileKey = (PathBuf, Option<PathBuf>);

/// Per file: its identity when read, what was read, and when it was last
/// used.
struct Entries<T> {
    map: FxHashMap<FileKey, (Identity, T, u64)>,
    /// Bumped at each use; the entry used longest ago goes first.
    clock: u64,
}

/// What `read` made of files (see [`FileCache::get`]), for `max` files at
/// most, the one used longest ago dropped first.
pub struct FileCache<T> {
    entries: OnceLock<Mutex<Entries<T>>>,
    max: usize,
}

/// What the cache holds for a file, or what reading it needs.
enum Lookup<T> {
    Hit(T),
    Miss(std::fs::File, FileKey, Identity),
}

impl<T: Clone> FileCache<T> {
    pub const fn new(max: usize) -> Self {
        FileCache { entries: OnceLock::new(), max }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries<T>> {
        let entries = self
            .entries
            .get_or_init(|| Mutex::new(Entries { map: FxHashMap::default(), clock: 0 }));
        entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `read` makes of the file at `path` (opened as a regular file),
    /// read once per process and file: a later call for the same path (and
    /// debug root) gives the same while the file is unchanged (same device,
    /// inode, size and modification time), and reads it again once it was
    /// replaced. The error of opening it, if it cannot be opened.
    pub fn get(
        &self,
        path: &Path,
        debug_root: Option<&Path>,
        read: impl FnOnce(&std::fs::File) -> T,
    ) -> io::Result<T> {
        let (file, key, identity) = match self.lookup(path, debug_root)? {
            Lookup::Hit(value) => return Ok(value),
            Lookup::Miss(file, key, identity) => (file, key, identity),
        };
        // Read without the lock: another thread may read another file meanwhile.
        let value = read(&file);
        let mut entries = self.entries();
        let Entries { map, clock } = &mut *entries;
        if map.len() >= self.max && !map.contains_key(&key) {
            let oldest = map.iter().min_by_key(|(_, (_, _, used))| *used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                map.remove(&oldest);
            }
        }
        map.insert(key, (identity, value.clone(), *clock));
        Ok(value)
    }

    /// `f` on each value held (under the cache's lock: `f` must not use it).
    pub fn for_each(&self, mut f: impl FnMut(&T)) {
        for (_, value, _) in self.entries().map.values() {
            f(value);
        }
    }

    /// Drop the entries used longest ago until at most `keep` (0 to 1) of
    /// them are left: how many were dropped. (What a caller still holds of
    /// one stays alive until it lets go.)
    pub fn trim(&self, keep: f64) -> usize {
        let mut entries = self.entries();
        let left = (entries.map.len() as f64 * keep.clamp(0.0, 1.0)) as usize;
        let before = entries.map.len();
        if left < before {
            let mut used: Vec<u64> = entries.map.values().map(|(_, _, used)| *used).collect();
            used.sort_unstable();
            let oldest_kept = used.get(before - left).copied().unwrap_or(u64::MAX);
            entries.map.retain(|_, (_, _, used)| *used >= oldest_kept);
        }
        before - entries.map.len()
    }

    /// Whether [`get`](FileCache::get) would answer without reading: the
    /// file is held unchanged, or cannot be opened.
    pub fn at_hand(&self, path: &Path, debug_root: Option<&Path>) -> bool {
        self.peek(path, debug_root).is_some()
    }

    /// What [`get`](FileCache::get) would answer without reading the file;
    /// None when it would read it.
    pub fn peek(&self, path: &Path, debug_root: Option<&Path>) -> Option<io::Result<T>> {
        match self.lookup(path, debug_root) {
            Ok(Lookup::Hit(value)) => Some(Ok(value)),
            Ok(Lookup::Miss(..)) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// A file held unchanged costs one `stat`; only one to read is opened
    /// (and its identity taken from the open file).
    fn lookup(&self, path: &Path, debug_root: Option<&Path>) -> io::Result<Lookup<T>> {
        let meta = std::fs::metadata(path)?;
        if !meta.is_file() {
            return Err(super::not_regular(meta.file_type()));
        }
        let key = (path.to_path_buf(), debug_root.map(Path::to_path_buf));
        {
            let mut entries = self.entries();
            let Entries { map, clock } = &mut *entries;
            *clock += 1;
            if let Some((id, value, used)) = map.get_mut(&key) {
                if *id == identity(&meta) {
                    *used = *clock;
                    return Ok(Lookup::Hit(value.clone()));
                }
            }
        }
        let file = super::open_checked(path, 0)?;
        let identity = identity(&file.metadata()?);
        Ok(Lookup::Miss(file, key, identity))
    }
}

fn identity(meta: &std::fs::Metadata) -> Identity {
    use std::os::unix::fs::MetadataExt;
    let mtime = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
    (meta.dev(), meta.ino(), meta.size(), mtime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The file's bytes, as `get` reads them, counting the reads.
    fn read_counted(cache: &FileCache<Vec<u8>>, path: &Path, reads: &mut u32) -> Vec<u8> {
        cache
            .get(path, None, |mut file| {
                *reads += 1;
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).unwrap();
                bytes
            })
            .unwrap()
    }

    #[test]
    fn a_file_is_read_once_until_it_is_replaced() {
        let dir = std::env::temp_dir().join(format!("stackwalk-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (path, other) = (dir.join("lib.so"), dir.join("new.so"));
        std::fs::write(&path, b"first").unwrap();
        let cache = FileCache::new(8);
        let mut reads = 0;
        assert_eq!(read_counted(&cache, &path, &mut reads), b"first");
        assert!(cache.at_hand(&path, None));
        assert_eq!(read_counted(&cache, &path, &mut reads), b"first");
        assert_eq!(reads, 1);
        // Another root is another entry.
        assert!(!cache.at_hand(&path, Some(Path::new("/usr/lib/debug"))));
        // Replaced by rename, as package managers do: another inode.
        std::fs::write(&other, b"second").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert!(!cache.at_hand(&path, None));
        assert_eq!(read_counted(&cache, &path, &mut reads), b"second");
        assert_eq!(reads, 2);
        // Gone: the open's error, and nothing to read.
        std::fs::remove_file(&path).unwrap();
        assert!(cache.at_hand(&path, None));
        let e = cache.get(&path, None, |_| unreachable!()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn trimming_drops_the_entries_used_longest_ago() {
        let dir = std::env::temp_dir().join(format!("stackwalk-trim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("f{i}"))).collect();
        let cache = FileCache::new(8);
        let mut reads = 0;
        for p in &paths {
            std::fs::write(p, b"x").unwrap();
            read_counted(&cache, p, &mut reads);
        }
        read_counted(&cache, &paths[0], &mut reads); // 1 and 2 are now the oldest
        assert_eq!(cache.trim(0.5), 2);
        let held: Vec<bool> = paths.iter().map(|p| cache.at_hand(p, None)).collect();
        assert_eq!(held, [true, false, false, true]);
        assert_eq!(cache.trim(1.0), 0);
        assert_eq!(cache.trim(0.0), 2);
        assert!(paths.iter().all(|p| !cache.at_hand(p, None)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_entry_used_longest_ago_goes_first() {
        let dir = std::env::temp_dir().join(format!("stackwalk-lru-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("f{i}"))).collect();
        for p in &paths {
            std::fs::write(p, p.as_os_str().as_encoded_bytes()).unwrap();
        }
        let cache = FileCache::new(2);
        let mut reads = 0;
        read_counted(&cache, &paths[0], &mut reads);
        read_counted(&cache, &paths[1], &mut reads);
        read_counted(&cache, &paths[0], &mut reads); // 1 is now the oldest
        read_counted(&cache, &paths[2], &mut reads);
        assert_eq!(reads, 3);
        assert!(cache.at_hand(&paths[0], None) && cache.at_hand(&paths[2], None));
        assert!(!cache.at_hand(&paths[1], None));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
