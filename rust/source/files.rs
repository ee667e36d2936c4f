//! Opening and mapping the files an input names: one way for every path that
//! comes from a user, a core's `NT_FILE` note, a perf.data `MMAP2` record or
//! a debug link, so that no such path can stall or kill the process.
//!
//! - [`open_regular`] opens only regular files. A FIFO would block `open()`
//!   until a writer comes (forever, in a `core --dir` run), a device may
//!   never end; they are refused with what they are ("is a FIFO"), found
//!   with `stat` before the open and checked again with `fstat` after it
//!   (opened `O_NONBLOCK`, so a FIFO swapped in between cannot block).
//! - [`map`] maps a file read-only, guarded: a file that shrinks while it is
//!   mapped (a library rewritten in place, a perf.data cut short) makes the
//!   next read of a page past its new end a SIGBUS, which would kill the
//!   process. For a guarded mapping the signal's handler (`guard`) maps
//!   zeros over the rest of it instead and marks it cut
//!   ([`Mapped::cut_at`]); the readers see bytes that parse as damage (the
//!   perf.data reader checks the mark and reports the file cut short).
//!   Reading the files instead (`pread` into memory of our own) was measured
//!   and costs too much: 0.2–0.9 ms per library added (25 µs mapped), three
//!   to eight times the whole run for a perf.data file (its pages faulted
//!   into fresh memory, where a mapping shares the page cache's).

use std::fs::{File, FileType, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::source::memory::Data;

mod cache;
mod guard;

pub use cache::FileCache;

/// What a file that is not a regular file is, for its error message.
fn kind(file_type: FileType) -> &'static str {
    if file_type.is_dir() {
        "is a directory"
    } else if file_type.is_fifo() {
        "is a FIFO"
    } else if file_type.is_char_device() {
        "is a character device"
    } else if file_type.is_block_device() {
        "is a block device"
    } else if file_type.is_socket() {
        "is a socket"
    } else {
        "is not a regular file"
    }
}

fn not_regular(file_type: FileType) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, kind(file_type))
}

/// The user's cache directory, as the XDG base directories have it:
/// `$XDG_CACHE_HOME`, else `$HOME/.cache` (a variable set empty counts as
/// unset); `var` reads the environment.
pub fn cache_home(var: &impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("XDG_CACHE_HOME").or_else(|| set("HOME").map(|home| home.join(".cache")))
}

/// An environment of these (name, value) pairs, as the readers of one take
/// it ([`cache_home`]'s `var`): for their tests.
#[cfg(test)]
pub fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
}

/// Open the regular file at `path` (following symbolic links) for reading;
/// anything else is an error saying what it is, and is never opened in a
/// way that can block.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file_type = std::fs::metadata(path)?.file_type();
    if !file_type.is_file() {
        return Err(not_regular(file_type));
    }
    open_checked(path, 0)
}

/// A cache's own entry at `path`, mapped as [`map`] maps a file, but
/// neither the entry nor its directory may be a symbolic link: in a cache
/// another user can write to, a link would make the entry any file.
pub fn map_entry(path: &Path) -> io::Result<Data> {
    if !path.parent().is_some_and(is_real_dir) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a symbolic link for a directory"));
    }
    map_file(&open_checked(path, libc::O_NOFOLLOW)?).map(Data::Mapped)
}

/// Whether `path` is a directory itself, not a symbolic link to one.
pub fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// `path` opened to read (with `flags` besides), refused unless a regular file.
fn open_checked(path: &Path, flags: i32) -> io::Result<File> {
    // O_NONBLOCK: if a FIFO took the file's place since the stat, the open
    // returns at once and the fstat below refuses it.
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | flags).open(path)?;
    let file_type = file.metadata()?.file_type();
    if !file_type.is_file() {
        return Err(not_regular(file_type));
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: F_GETFL/F_SETFL on a descriptor this function owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// The regular file at `path`, mapped read-only and guarded (see the
/// module's documentation).
pub fn map(path: &Path) -> io::Result<Data> {
    map_file(&open_regular(path)?).map(Data::Mapped)
}

/// A regular file already open, mapped read-only and guarded. Its size is
/// the one `fstat` gives now: the mapping never reaches past it.
pub fn map_file(file: &File) -> io::Result<Mapped> {
    // SAFETY: a read-only mapping. A file changed in place changes the bytes
    // under the readers (who treat every byte as untrusted); one that
    // shrinks reads as zeros past its end (the guard), never a signal.
    let map = unsafe { memmap2::Mmap::map(file) }?;
    let slot = guard::register(map.as_ptr() as usize, map.len());
    Ok(Mapped { map, slot, file: file.try_clone().ok() })
}

/// A guarded read-only file mapping.
pub struct Mapped {
    map: memmap2::Mmap,
    /// Its entry in the guard's table (None: the table was full, and the
    /// mapping is as unguarded as any).
    slot: Option<usize>,
    /// The file, to ask its size again (see [`Mapped::shrunk`]).
    file: Option<File>,
}

impl Mapped {
    /// Let the pages read so far leave the process's resident memory: a
    /// read-only file mapping's dropped pages are read back from the file
    /// (the page cache) when touched again, so every slice of it stays valid.
    pub fn release_resident(&self) {
        // SAFETY: as said: MADV_DONTNEED on a read-only file mapping (or the
        // guard's zero pages over a shrunk file's end, which read as zeros
        // again) changes no byte any reader sees.
        let _ = unsafe { self.map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
    }

    /// Where the file turned out to end, if it shrank while mapped and a
    /// read went past its new end: the bytes from there on are zeros.
    pub fn cut_at(&self) -> Option<usize> {
        self.slot.and_then(guard::cut_at)
    }

    /// Where the file ends now, if that is before the mapping's end: also
    /// when no read faulted, as the rest of the page holding the new end
    /// reads as zeros without one. A system call: for error paths, where
    /// bytes that look damaged may be a file cut short.
    pub fn shrunk(&self) -> Option<usize> {
        let now = self.file.as_ref()?.metadata().ok()?.len();
        let now = usize::try_from(now).unwrap_or(usize::MAX);
        self.cut_at().or((now < self.map.len()).then_some(now))
    }
}

impl std::ops::Deref for Mapped {
    type Target = memmap2::Mmap;
    fn deref(&self) -> &memmap2::Mmap {
        &self.map
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // Out of the table before the mapping goes (then the `Mmap`'s own
        // drop unmaps it, zeros included).
        if let Some(slot) = self.slot {
            guard::unregister(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("stackwalk-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let fifo = scratch("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(open_regular(&fifo).unwrap_err().to_string(), "is a FIFO");
        assert_eq!(map(&fifo).err().map(|e| e.to_string()).as_deref(), Some("is a FIFO"));
        let dir = fifo.parent().unwrap();
        assert_eq!(open_regular(dir).unwrap_err().to_string(), "is a directory");
        assert_eq!(
            open_regular(Path::new("/dev/null")).unwrap_err().to_string(),
            "is a character device"
        );
        std::fs::remove_file(&fifo).unwrap();
    }

    #[test]
    fn a_file_cut_short_while_mapped_reads_as_zeros() {
        let path = scratch("cut");
        let page = 4096 * 4;
        std::fs::write(&path, vec![0xaa; 4 * page]).unwrap();
        let mapped = map_file(&File::open(&path).unwrap()).unwrap();
        assert_eq!(mapped[page * 3], 0xaa);
        assert_eq!(mapped.cut_at(), None);
        File::options().write(true).open(&path).unwrap().set_len(page as u64 + 100).unwrap();
        // Within the file's new size: its bytes; past it, zeros, not SIGBUS.
        assert_eq!(mapped[page + 99], 0xaa);
        assert_eq!(mapped[page * 3], 0);
        assert_eq!(mapped[4 * page - 1], 0);
        let cut = mapped.cut_at().expect("marked cut");
        assert!(cut > page && cut <= 3 * page, "{cut}");
        drop(mapped);
        std::fs::remove_file(&path).unwrap();
    }
}
