//! Decompressed debug sections kept on disk, by the debug file's build id,
//! as gdb keeps its index cache: a distribution's debug file compresses
//! each section as one zlib stream, which every process that needs lines or
//! inline frames would decompress again (libc6-dbg's `.debug_info`, 5.8 MB,
//! is most of the cost of inline frames in a short profile; python3's, 50 ms
//! of a core's processing). Once decompressed, a section is stored here and
//! later processes map it.
//!
//! Where: `$STACKWALK_CACHE_DIR` (set and empty: no cache), else
//! `$XDG_CACHE_HOME/stackwalk`, else `~/.cache/stackwalk`; entries
//! `sections/BUILDID/NAME-STREAMSIZE-SIZE-ADLER32-b`, written whole to a
//! temporary file and renamed into place, so that a reader never sees a
//! part of one. An entry is the section's bytes after a table of the
//! Adler-32 of each of its blocks of 64 KiB ([`Blocks`]), checked when made
//! against the one the zlib stream ends with (the checksum of the whole
//! decompressed section). A reader checks the blocks it reads, when it first
//! reads them: the partial reader of `.debug_info` a few units' blocks, the
//! other readers every block as the entry is mapped. A damaged or truncated
//! entry is removed: a reader that meets it as it maps it decompresses the
//! section and stores it again; the partial reader, meeting a damaged block
//! later, reads on from the zlib stream, and leaves the entry to the next
//! process to make. At most `$STACKWALK_CACHE_MAX` bytes (default 1 GiB) are
//! kept, those used longest ago removed first.
//!
//! Sections compressed otherwise (zstd) are kept the same way, as
//! `NAME-STREAMSIZE-SIZE-FORMAT`, checked as the derived tables below are
//! ([`SectionCache::decompressed`]).
//!
//! Tables derived from a file with a build id live there too
//! ([`SectionCache::derived`]): the kernel's symbols made from perf's copy of
//! kallsyms, `sections/BUILDID/kallsyms-SIZE-MTIME`, and a large ELF file's
//! function symbols, `sections/BUILDID/symbols4-{symtab,dynsym}-SIZE`, each
//! checked by the length and Adler-32 in its header.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use super::SectionBytes;
use crate::source::memory::Data;
use crate::space::debuginfod::tempfile_like::TempFile;

/// Below this size a section costs less to decompress than to look up (an
/// entry's lookup, mapping, check and mark of use take some 30 us; zlib-rs
/// makes 0.3-0.5 MB a millisecond: libc6-dbg's `.debug_str`, `.debug_rnglists`,
/// `.debug_aranges` and `.debug_line_str`, 485 KB in all, took 1.2 ms of each
/// `stackwalk perf --inline` when only sections of 256 KiB and more were kept).
const MIN_CACHED: u64 = 32 << 10;

const DEFAULT_MAX: u64 = 1 << 30;

/// The cache directory and its size limit.
#[derive(Debug)]
pub struct SectionCache {
    dir: PathBuf,
    max: u64,
    /// Whether entries can be written there, found at the first miss: where
    /// they cannot, a section missing from the cache is the caller's to read
    /// (as far as it needs), not decompressed whole for nothing.
    writable: OnceLock<bool>,
    /// The cache's size in bytes as this process knows it (see
    /// [`SectionCache::added`]), None before its first store.
    size: std::sync::Mutex<Option<u64>>,
}

impl PartialEq for SectionCache {
    fn eq(&self, other: &Self) -> bool {
        (&self.dir, self.max) == (&other.dir, other.max)
    }
}

impl SectionCache {
    /// As the environment says (see the module's documentation), read once.
    pub fn from_env() -> Option<&'static SectionCache> {
        static CACHE: OnceLock<Option<SectionCache>> = OnceLock::new();
        CACHE.get_or_init(|| SectionCache::configured(&|name| std::env::var(name).ok())).as_ref()
    }

    fn configured(var: &impl Fn(&str) -> Option<String>) -> Option<SectionCache> {
        let root = match var("STACKWALK_CACHE_DIR") {
            Some(dir) if dir.is_empty() => return None,
            Some(dir) => PathBuf::from(dir),
            None => crate::source::files::cache_home(var)?.join("stackwalk"),
        };
        let max = var("STACKWALK_CACHE_MAX").and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_MAX);
        Some(SectionCache::in_dir(root.join("sections"), max))
    }

    fn in_dir(dir: PathBuf, max: u64) -> SectionCache {
        SectionCache { dir, max, writable: OnceLock::new(), size: std::sync::Mutex::new(None) }
    }

    /// A cache in `dir` (its `sections` directory) of at most `max` bytes.
    #[cfg(test)]
    pub fn at(dir: &Path, max: u64) -> SectionCache {
        SectionCache::in_dir(dir.join("sections"), max)
    }

    /// The decompressed bytes of section `name` of the file with `build_id`,
    /// whose bytes are the zlib `stream` of a section of `full` bytes: the
    /// cache's entry, else the stream decompressed whole (and stored). None
    /// where the section is too small to be worth it, or the stream does
    /// not decompress to its `full` bytes, or it is not cached and cannot be
    /// (the caller reads it its own way, which keeps what a damaged stream
    /// holds).
    pub fn zlib(
        &self,
        build_id: &[u8],
        name: &str,
        stream: &[u8],
        full: u64,
    ) -> Option<SectionBytes> {
        let (bytes, blocks) = self.zlib_blocks(build_id, name, stream, full)?;
        if let Some(mut blocks) = blocks {
            if !blocks.check_all() {
                // Removed, and decompressed (and stored) again.
                blocks.discard();
                return self.fresh(&blocks.path, stream, full);
            }
        }
        Some(bytes)
    }

    /// As [`SectionCache::zlib`], the entry's blocks not checked yet: the
    /// caller checks those it reads ([`Blocks::check`]), and discards the
    /// entry where one is damaged. None for `blocks` where the bytes were
    /// decompressed here.
    pub fn zlib_blocks(
        &self,
        build_id: &[u8],
        name: &str,
        stream: &[u8],
        full: u64,
    ) -> Option<(SectionBytes, Option<Blocks>)> {
        // (The names are this crate's own; one with a '/' would not be an entry's.)
        if full < MIN_CACHED || build_id.is_empty() || stream.len() < 6 || name.contains('/') {
            return None;
        }
        let adler = u32::from_be_bytes(stream[stream.len() - 4..].try_into().ok()?);
        let id = crate::space::finder::hex(build_id);
        let file =
            format!("{}-{}-{full}-{adler:08x}-b", name.trim_start_matches('.'), stream.len());
        let entry = self.dir.join(id).join(file);
        if let Some((bytes, blocks)) = Blocks::read(&entry, full) {
            return Some((bytes, Some(blocks)));
        }
        Some((self.fresh(&entry, stream, full)?, None))
    }

    /// The zlib `stream` decompressed whole to its `full` bytes, stored as
    /// `entry`; None where it cannot be stored (the caller reads the stream
    /// as far as it needs) or does not decompress to `full` bytes.
    fn fresh(&self, entry: &Path, stream: &[u8], full: u64) -> Option<SectionBytes> {
        if !*self.writable.get_or_init(|| self.can_write()) {
            return None;
        }
        let mut out = Vec::new();
        out.try_reserve_exact(usize::try_from(full).ok()?).ok()?;
        let mut inflater = flate2::Decompress::new(true);
        let done = inflater.decompress_vec(stream, &mut out, flate2::FlushDecompress::Finish);
        // The stream's end reached: its Adler-32 is its content's (zlib checks it there).
        if !matches!(done, Ok(flate2::Status::StreamEnd)) || out.len() as u64 != full {
            return None;
        }
        let table = Blocks::table(&out);
        if self.store_parts(entry, &[&table, &out]).is_ok() {
            self.added(full + table.len() as u64);
        }
        Some(SectionBytes::whole(out))
    }

    /// The decompressed bytes of section `name` of the file with `build_id`,
    /// compressed other than by zlib (`format`: zstd), its stream of
    /// `stream_len` bytes making `full`, as `decompress` makes them: the
    /// cache's entry, else made (and stored). A zstd stream need not carry a
    /// checksum of its content, so the entry is checked as a derived table
    /// is ([`SectionCache::derived`]). None where the section is too small
    /// to be worth it, or does not decompress to its `full` bytes.
    pub fn decompressed(
        &self,
        build_id: &[u8],
        (name, format): (&str, &str),
        (stream_len, full): (usize, u64),
        decompress: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Option<SectionBytes> {
        if full < MIN_CACHED || name.contains('/') {
            return None;
        }
        let entry = format!("{}-{stream_len}-{full}-{format}", name.trim_start_matches('.'));
        self.derived(build_id, &entry, || decompress().filter(|b| b.len() as u64 == full))
    }

    /// The bytes `make` derives from a file with `build_id` (a table built
    /// from it), kept as entry `name`, which must name the version of the
    /// file they come from: the stored entry where it is whole, else what
    /// `make` gives, stored when it can be. An entry is the bytes after a
    /// header of 8: their Adler-32 and their length, each as 4 bytes (little
    /// endian), so that a damaged or cut entry is made again.
    pub fn derived(
        &self,
        build_id: &[u8],
        name: &str,
        make: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Option<SectionBytes> {
        if build_id.is_empty() || name.contains('/') {
            return make().map(SectionBytes::whole);
        }
        let id = crate::space::finder::hex(build_id);
        let entry = self.dir.join(id).join(name);
        if let Some(bytes) = read_derived(&entry) {
            return Some(bytes);
        }
        let bytes = make()?;
        let len = u32::try_from(bytes.len()).ok();
        if let Some(len) = len.filter(|_| *self.writable.get_or_init(|| self.can_write())) {
            let adler = zlib_rs::adler32::adler32(1, &bytes);
            let header = [adler.to_le_bytes(), len.to_le_bytes()].concat();
            if self.store_parts(&entry, &[&header, &bytes]).is_ok() {
                self.added(u64::from(len) + 8);
            }
        }
        Some(SectionBytes::whole(bytes))
    }

    /// Whether a file can be made in the cache directory (made if missing).
    fn can_write(&self) -> bool {
        std::fs::create_dir_all(&self.dir).is_ok() && TempFile::new(&self.dir).is_ok()
    }

    /// `parts`, one after another, written to `entry`, whole or not at all.
    fn store_parts(&self, entry: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
        use std::io::Write;
        let dir = entry.parent().unwrap_or(&self.dir);
        std::fs::create_dir_all(dir)?;
        if !crate::source::files::is_real_dir(dir) {
            return Err(std::io::Error::other("the entry's directory is a symbolic link"));
        }
        let mut file = TempFile::new(dir)?;
        for part in parts {
            file.writer().write_all(part)?;
        }
        file.persist(entry)
    }

    /// An entry of `len` bytes stored: the cache trimmed if it may now be
    /// past its limit. Its size is found by listing it at a process's first
    /// store (and at each trim), then kept by adding what the process
    /// stores, so that a process storing many entries (a spool of cores of
    /// many builds) does not list the whole cache at every one. Other
    /// processes' entries are counted at the next listing.
    fn added(&self, len: u64) {
        let mut size = self.size.lock().unwrap_or_else(|e| e.into_inner());
        let now = match *size {
            Some(known) => known.saturating_add(len),
            None => self.entries().iter().map(|e| e.1).sum(),
        };
        *size = Some(if now > self.max { self.trim() } else { now });
    }

    /// Every entry: when it was last used (its modification time, set when it
    /// is used), its size and its path.
    fn entries(&self) -> Vec<(SystemTime, u64, PathBuf)> {
        let mut entries = Vec::new();
        let Ok(ids) = std::fs::read_dir(&self.dir) else { return entries };
        for id in ids.flatten() {
            let Ok(files) = std::fs::read_dir(id.path()) else { continue };
            for file in files.flatten() {
                let Ok(meta) = file.metadata() else { continue };
                let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                entries.push((used, meta.len(), file.path()));
            }
        }
        entries
    }

    /// The entries beyond the size limit removed, those used longest ago
    /// first; the size left.
    fn trim(&self) -> u64 {
        let mut entries = self.entries();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
                if let Some(dir) = path.parent() {
                    let _ = std::fs::remove_dir(dir); // only if empty
                }
            }
        }
        total
    }
}

/// The blocks of a cached section, each checked against its Adler-32 in
/// the entry's table when first read: an entry is `BLOCKS_MAGIC`, the
/// block size, the count of blocks and the Adler-32 of their table (each 4
/// bytes, little endian), the table (a block's Adler-32 each), then the
/// section's bytes.
pub struct Blocks {
    data: Arc<Data>,
    path: PathBuf,
    /// Where the section's bytes start in the entry, and their length.
    start: usize,
    len: usize,
    /// A block's state: 0 not checked yet, 1 whole, 2 damaged.
    state: Vec<u8>,
}

const BLOCKS_MAGIC: &[u8; 4] = b"SWB1";
const BLOCK: usize = 64 << 10;
const BLOCKS_HEADER: usize = 16;

impl Blocks {
    /// The header and table of an entry for `bytes`.
    fn table(bytes: &[u8]) -> Vec<u8> {
        let sums: Vec<u8> = bytes
            .chunks(BLOCK)
            .flat_map(|b| zlib_rs::adler32::adler32(1, b).to_le_bytes())
            .collect();
        let count = u32::try_from(sums.len() / 4).unwrap_or(u32::MAX);
        let mut out = Vec::with_capacity(BLOCKS_HEADER + sums.len());
        out.extend_from_slice(BLOCKS_MAGIC);
        out.extend_from_slice(&(BLOCK as u32).to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        out.extend_from_slice(&zlib_rs::adler32::adler32(1, &sums).to_le_bytes());
        out.extend_from_slice(&sums);
        out
    }

    /// The entry at `path`, mapped, if its header and table are whole and it
    /// holds `full` bytes after them (its blocks not checked yet); an entry
    /// that is not is removed.
    fn read(path: &Path, full: u64) -> Option<(SectionBytes, Blocks)> {
        let data = crate::source::files::map_entry(path).ok()?;
        let Some((start, len, count)) = Self::header(&data, full) else {
            let _ = std::fs::remove_file(path);
            return None;
        };
        touch(path);
        let data = Arc::new(data);
        let bytes = SectionBytes { data: data.clone(), range: start..start + len };
        let state = vec![0; count];
        Some((bytes, Blocks { data, path: path.to_owned(), start, len, state }))
    }

    /// Where an entry's bytes start, their length and the count of blocks,
    /// if its header and table are whole and `full` bytes follow.
    fn header(entry: &[u8], full: u64) -> Option<(usize, usize, usize)> {
        let field = |at: usize| le_u32(entry, at);
        let len = usize::try_from(full).ok()?;
        let count = len.div_ceil(BLOCK);
        let start = BLOCKS_HEADER.checked_add(count.checked_mul(4)?)?;
        let whole = entry.get(..4)? == BLOCKS_MAGIC
            && field(4)? as usize == BLOCK
            && field(8)? as usize == count
            && entry.len() == start.checked_add(len)?
            && zlib_rs::adler32::adler32(1, entry.get(BLOCKS_HEADER..start)?) == field(12)?;
        whole.then_some((start, len, count))
    }

    /// Whether the section's bytes in `range` (clamped to them) are as the
    /// entry's table says: each block checked once.
    pub fn check(&mut self, range: std::ops::Range<usize>) -> bool {
        let end = range.end.min(self.len);
        if range.start >= end {
            return true;
        }
        (range.start / BLOCK..end.div_ceil(BLOCK)).all(|i| self.block(i))
    }

    /// Whether every block is whole.
    pub fn check_all(&mut self) -> bool {
        self.check(0..self.len)
    }

    fn block(&mut self, i: usize) -> bool {
        match self.state.get(i) {
            Some(1) => return true,
            Some(0) => {}
            _ => return false,
        }
        let at = self.start + i * BLOCK;
        let bytes = self.data.get(at..(at + BLOCK).min(self.start + self.len));
        let sum = le_u32(&self.data, BLOCKS_HEADER + 4 * i);
        let whole =
            bytes.zip(sum).is_some_and(|(bytes, sum)| zlib_rs::adler32::adler32(1, bytes) == sum);
        self.state[i] = if whole { 1 } else { 2 };
        whole
    }

    /// The entry, found damaged, removed (a later process makes it again).
    pub fn discard(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A derived entry at `path` ([`SectionCache::derived`]), mapped, if its
/// header's length and Adler-32 are its bytes'; a damaged entry is removed.
fn read_derived(path: &Path) -> Option<SectionBytes> {
    read_checked(path, 8, |entry| Some((u64::from(le_u32(entry, 4)?), le_u32(entry, 0)?)))
}

/// The little-endian u32 at `at` of an entry's header.
fn le_u32(entry: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(entry.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// The entry at `path`, mapped, its bytes from `start` on if they are as
/// many and of the Adler-32 that `expected` gives (from the entry, where
/// its header says); a damaged entry is removed, and one used is touched.
fn read_checked(
    path: &Path,
    start: usize,
    expected: impl FnOnce(&[u8]) -> Option<(u64, u32)>,
) -> Option<SectionBytes> {
    let data = crate::source::files::map_entry(path).ok()?;
    let whole = data.get(start..).zip(expected(&data)).is_some_and(|(bytes, (len, adler))| {
        bytes.len() as u64 == len && zlib_rs::adler32::adler32(1, bytes) == adler
    });
    if !whole {
        let _ = std::fs::remove_file(path);
        return None;
    }
    touch(path);
    let len = data.len();
    Some(SectionBytes { data: Arc::new(data), range: start..len })
}

/// An entry marked used now: the last to go when the cache is trimmed.
fn touch(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let open = std::fs::File::options().write(true).custom_flags(libc::O_NOFOLLOW).open(path);
    if let Ok(file) = open {
        let _ = file.set_modified(SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::files::vars;
    use std::io::Write;

    #[test]
    fn where_the_environment_puts_it() {
        let at = |pairs: &[(&str, &str)]| SectionCache::configured(&vars(pairs));
        let home = at(&[("HOME", "/home/u")]).expect("a cache");
        assert_eq!(home.dir, PathBuf::from("/home/u/.cache/stackwalk/sections"));
        assert_eq!(home.max, DEFAULT_MAX);
        let xdg = at(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")]).expect("a cache");
        assert_eq!(xdg.dir, PathBuf::from("/x/stackwalk/sections"));
        let own = at(&[("STACKWALK_CACHE_DIR", "/c"), ("STACKWALK_CACHE_MAX", "5")]);
        assert_eq!(own, Some(SectionCache::at(Path::new("/c"), 5)));
        assert_eq!(at(&[("HOME", "/home/u"), ("STACKWALK_CACHE_DIR", "")]), None);
        assert_eq!(at(&[]), None);
    }

    fn section(seed: u64) -> Vec<u8> {
        // Compressible, and different for each seed.
        (0..(600u64 << 10)).map(|i| ((i / 7) ^ seed).wrapping_mul(31) as u8 % 13).collect()
    }

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).expect("compressed");
        enc.finish().expect("compressed")
    }

    fn entries(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for id in std::fs::read_dir(dir.join("sections")).into_iter().flatten().flatten() {
            found.extend(
                std::fs::read_dir(id.path()).into_iter().flatten().flatten().map(|f| f.path()),
            );
        }
        found.sort();
        found
    }

    #[test]
    fn stored_once_then_mapped_and_checked() {
        let dir = std::env::temp_dir().join(format!("section-cache-{}", std::process::id()));
        let cache = SectionCache::at(&dir, DEFAULT_MAX);
        let (plain, stream) = (section(1), zlib(&section(1)));
        let full = plain.len() as u64;
        let first = cache.zlib(b"\xab\xcd", ".debug_info", &stream, full).expect("decompressed");
        assert_eq!(&*first, &plain[..]);
        assert!(matches!(*first.data, Data::Owned(_)), "decompressed the first time");
        let stored = entries(&dir);
        assert_eq!(stored.len(), 1);
        assert!(stored[0].starts_with(dir.join("sections/abcd")), "{stored:?}");
        let again = cache.zlib(b"\xab\xcd", ".debug_info", &stream, full).expect("cached");
        assert!(matches!(*again.data, Data::Mapped(_)), "mapped the second time");
        assert_eq!(&*again, &plain[..]);

        // An entry damaged in place (same size) or cut short is not believed: the
        // stream is decompressed again and the entry made anew.
        for damage in [|b: &mut Vec<u8>| b[1000] ^= 1, |b: &mut Vec<u8>| b.truncate(4096)] {
            let mut bytes = std::fs::read(&stored[0]).expect("the entry");
            damage(&mut bytes);
            std::fs::write(&stored[0], &bytes).expect("damaged");
            let read = cache.zlib(b"\xab\xcd", ".debug_info", &stream, full).expect("read");
            assert!(matches!(*read.data, Data::Owned(_)));
            assert_eq!(&*read, &plain[..]);
            let entry = std::fs::read(&stored[0]).expect("stored again");
            assert!(entry.ends_with(&plain), "the section after its blocks' table");
        }

        // A damaged stream is the caller's to read: nothing is stored for it. Nor for one whose
        // Adler-32 is not its content's (zlib's own check at the stream's end).
        let mut broken = zlib(&section(2));
        broken[100] ^= 0xff;
        assert!(cache.zlib(b"\x01", ".debug_info", &broken, full).is_none());
        let mut unchecked = zlib(&section(2));
        *unchecked.last_mut().expect("a stream") ^= 1;
        assert!(cache.zlib(b"\x01", ".debug_info", &unchecked, full).is_none());
        // Too small to be worth it, or no build id: not cached.
        assert!(cache.zlib(b"\x01", ".debug_line", &zlib(&[7; 1000]), 1000).is_none());
        assert!(cache.zlib(b"", ".debug_info", &stream, full).is_none());
        assert_eq!(entries(&dir).len(), 1);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// An entry's blocks are each checked once, when first read: a damaged
    /// one is found where it is read, not before; the whole entry checked
    /// finds it, and the section is decompressed (and stored) again.
    #[test]
    fn an_entry_behind_a_symbolic_link_is_neither_read_nor_written_through() {
        let dir = std::env::temp_dir().join(format!("section-links-{}", std::process::id()));
        let cache = SectionCache::at(&dir, DEFAULT_MAX);
        let (plain, stream) = (section(7), zlib(&section(7)));
        let full = plain.len() as u64;
        let read = |id: &[u8]| cache.zlib(id, ".debug_info", &stream, full).expect("bytes");
        read(b"\x07");
        let stored = entries(&dir).pop().expect("stored");
        // Another id's entry, a link to the good one: not mapped (decompressed, and stored
        // in place of the link).
        let other = dir.join("sections/08");
        std::fs::create_dir_all(&other).unwrap();
        let link = other.join(stored.file_name().unwrap());
        std::os::unix::fs::symlink(&stored, &link).unwrap();
        assert!(matches!(*read(b"\x08").data, Data::Owned(_)), "not read through the link");
        assert!(!std::fs::symlink_metadata(&link).unwrap().is_symlink(), "replaced by an entry");
        // An id's directory that is a link elsewhere: nothing read or written there.
        let elsewhere = dir.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::copy(&stored, elsewhere.join(stored.file_name().unwrap())).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join("sections/09")).unwrap();
        assert!(matches!(*read(b"\x09").data, Data::Owned(_)));
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 1, "nothing written there");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn blocks_checked_as_read() {
        let dir = std::env::temp_dir().join(format!("section-blocks-{}", std::process::id()));
        let cache = SectionCache::at(&dir, DEFAULT_MAX);
        let (plain, stream) = (section(5), zlib(&section(5)));
        let full = plain.len() as u64;
        let get = || cache.zlib_blocks(b"\x05", ".debug_info", &stream, full).expect("read");
        assert!(get().1.is_none(), "decompressed the first time");
        let (bytes, blocks) = get();
        assert!(blocks.is_some() && bytes[..] == plain[..], "mapped the second time");
        let stored = entries(&dir);
        let mut entry = std::fs::read(&stored[0]).expect("the entry");
        let start = entry.len() - plain.len();
        entry[start + 5 * BLOCK + 7] ^= 1;
        std::fs::write(&stored[0], &entry).expect("damaged");
        let (_, blocks) = get();
        let mut blocks = blocks.expect("its header and table whole: believed until read");
        assert!(blocks.check(0..5 * BLOCK), "the blocks before the damaged one");
        assert!(blocks.check(6 * BLOCK..plain.len() + 100), "and after it, clamped");
        assert!(!blocks.check(5 * BLOCK + 100..5 * BLOCK + 101), "the damaged one");
        assert!(!blocks.check_all());
        assert!(blocks.check(0..5 * BLOCK), "still whole");
        // Through zlib, which checks every block: the section, decompressed and stored again.
        let again = cache.zlib(b"\x05", ".debug_info", &stream, full).expect("read");
        assert!(matches!(*again.data, Data::Owned(_)) && again[..] == plain[..]);
        assert!(std::fs::read(&stored[0]).expect("stored again").ends_with(&plain));
        let (_, blocks) = get();
        assert!(blocks.expect("mapped").check_all());
        // A damaged table, or an entry cut short: not believed, removed.
        for damage in
            [|b: &mut Vec<u8>| b[BLOCKS_HEADER + 2] ^= 1, |b: &mut Vec<u8>| b.truncate(b.len() - 1)]
        {
            let mut entry = std::fs::read(&stored[0]).expect("the entry");
            damage(&mut entry);
            std::fs::write(&stored[0], &entry).expect("damaged");
            assert!(get().1.is_none(), "decompressed again");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn derived_bytes_made_once_then_mapped_and_checked() {
        let dir = std::env::temp_dir().join(format!("derived-cache-{}", std::process::id()));
        let cache = SectionCache::at(&dir, DEFAULT_MAX);
        let table = section(4);
        let made = std::cell::Cell::new(0);
        let get = |id: &[u8]| {
            cache.derived(id, "table-1-2", || {
                made.set(made.get() + 1);
                Some(table.clone())
            })
        };
        let first = get(b"\xab").expect("made");
        assert_eq!((&*first, made.get()), (&table[..], 1));
        let again = get(b"\xab").expect("mapped");
        assert_eq!((&*again, made.get()), (&table[..], 1), "not made again");
        assert!(matches!(*again.data, Data::Mapped(_)));
        let stored = entries(&dir);
        assert_eq!(stored, [dir.join("sections/ab/table-1-2")]);
        // Damaged in place, cut short, or only a header's worth: made again, and stored.
        let damages: [fn(&mut Vec<u8>); 3] =
            [|b| b[1000] ^= 1, |b| b.truncate(4096), |b| b.truncate(6)];
        for (i, damage) in damages.into_iter().enumerate() {
            let mut bytes = std::fs::read(&stored[0]).expect("the entry");
            damage(&mut bytes);
            std::fs::write(&stored[0], &bytes).expect("damaged");
            assert_eq!(&*get(b"\xab").expect("made again"), &table[..]);
            assert_eq!(made.get(), 2 + i);
            assert_eq!(&*get(b"\xab").expect("mapped"), &table[..]);
            assert_eq!(made.get(), 2 + i);
        }
        // With no build id, or a name that would be a path, made and not stored.
        assert_eq!(&*get(b"").expect("made"), &table[..]);
        assert!(cache.derived(b"\x01", "a/b", || Some(vec![1])).is_some());
        assert_eq!(entries(&dir), stored);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn where_nothing_can_be_written_the_caller_reads_the_stream() {
        // A directory that cannot be made (under a regular file), whoever runs this.
        let file = std::env::temp_dir().join(format!("section-cache-file-{}", std::process::id()));
        std::fs::write(&file, b"not a directory").expect("a file");
        let cache = SectionCache::at(&file.join("cache"), DEFAULT_MAX);
        let stream = zlib(&section(3));
        assert!(cache.zlib(b"\x01", ".debug_info", &stream, section(3).len() as u64).is_none());
        std::fs::remove_file(&file).ok();
    }

    #[test]
    fn trimmed_to_its_limit_the_least_recently_used_first() {
        let dir = std::env::temp_dir().join(format!("section-trim-{}", std::process::id()));
        // Room for two sections of 600 KiB, not three.
        let cache = SectionCache::at(&dir, 1300 << 10);
        let streams: Vec<_> = (10..13).map(|seed| zlib(&section(seed))).collect();
        let full = section(0).len() as u64;
        let get = |i: usize| cache.zlib(&[i as u8 + 1], ".debug_info", &streams[i], full);
        get(0).expect("first");
        std::thread::sleep(std::time::Duration::from_millis(20));
        get(1).expect("second");
        std::thread::sleep(std::time::Duration::from_millis(20));
        // The first, used again, is now the most recent.
        assert!(matches!(*get(0).expect("first again").data, Data::Mapped(_)));
        std::thread::sleep(std::time::Duration::from_millis(20));
        get(2).expect("third");
        let kept: Vec<String> = entries(&dir)
            .iter()
            .map(|p| p.parent().and_then(|d| d.file_name()).unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(kept, ["01", "03"], "the second, used longest ago, removed");
        assert!(!dir.join("sections/02").exists(), "its directory too");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_process_storing_many_entries_keeps_the_cache_under_its_limit() {
        let dir = std::env::temp_dir().join(format!("section-many-{}", std::process::id()));
        // Another process's entry, there before this one's first store.
        let other = SectionCache::at(&dir, 1 << 30);
        other.derived(b"\xff", "table", || Some(vec![7; 500 << 10])).expect("stored");
        // Room for three tables of 400 KiB; this process stores ten, one after another.
        let cache = SectionCache::at(&dir, 1300 << 10);
        for i in 0..10u8 {
            cache.derived(&[i], "table", || Some(vec![i; 400 << 10])).expect("made");
            let total: u64 = entries(&dir).iter().map(|p| p.metadata().unwrap().len()).sum();
            assert!(total <= 1300 << 10, "{total} bytes after {} stores", i + 1);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let kept: Vec<String> = entries(&dir)
            .iter()
            .map(|p| p.parent().and_then(|d| d.file_name()).unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(kept, ["07", "08", "09"], "the last three stored");
        std::fs::remove_dir_all(&dir).ok();
    }
}
