//! A perf.data file read in place from memory ([`PerfFile::from_data`]),
//! and its pager: the policy, on a thread of its own, that maps the pages
//! ahead of the reading and drops those the caller has released.

use std::io::Cursor;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::source::memory::Data;

use super::reader::PerfFile;
use super::PerfError;

/// A multiple of any page size, the unit of mapping advice.
const GRAIN: usize = 1 << 20;

/// A file's bytes behind an `Arc`, readable through a `Cursor`.
#[derive(Clone)]
pub struct SharedBytes(pub Arc<Data>);

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl<R> PerfFile<R> {
    /// The file's bytes, when it was opened with [`PerfFile::from_data`].
    pub fn mapped(&self) -> Option<&Arc<Data>> {
        self.map.as_ref()
    }
}

impl<R> PerfFile<R> {
    /// Records before `offset` will not be read again (through
    /// [`PerfFile::bytes`] or the caller's own reference to the mapping):
    /// their pages can leave this process, so that memory stays flat however
    /// long the file. They stay in the page cache and would be read back in
    /// if touched again.
    pub fn release_before(&mut self, offset: u64) {
        if let Some(pager) = &mut self.pager {
            pager.release = usize::try_from(offset).unwrap_or(usize::MAX);
        }
    }
}

/// The pager of a mapped perf.data file: told where the reading is, it
/// maps the next few MiB (rather than leaving the faults to the reading
/// and unwinding threads), and drops the pages released.
pub(super) struct Pager {
    to_thread: std::sync::mpsc::Sender<(usize, usize)>,
    /// The reading position at which to tell the thread again.
    next: usize,
    release: usize,
    /// Where the pages have been dropped up to, by either thread.
    released: Arc<AtomicUsize>,
    data: Arc<Data>,
}

impl Pager {
    const AHEAD: usize = 8 << 20;
    /// One read per this many bytes maps them all: a fault on a file
    /// mapping maps the pages around it that are in the page cache (64 KiB
    /// by default). `MADV_POPULATE_READ` costs more: it walks every page.
    const TOUCH: usize = 64 << 10;
    /// How far the pager thread's dropping may fall behind (it may wait for
    /// a CPU while the reading goes on) before the reading thread drops the
    /// pages itself: memory stays bounded however the threads are scheduled.
    const LAG: usize = 8 << 20;

    fn start(data: Arc<Data>) -> Option<Pager> {
        if !matches!(*data, Data::Mapped(_)) {
            return None;
        }
        let (to_thread, from_reader) = std::sync::mpsc::channel::<(usize, usize)>();
        let released = Arc::new(AtomicUsize::new(0));
        let (thread_data, thread_released) = (data.clone(), released.clone());
        std::thread::Builder::new()
            .name("perf.data pager".into())
            .spawn(move || {
                let Data::Mapped(map) = &*thread_data else { return };
                let mut populated = 0usize;
                while let Ok(mut told) = from_reader.recv() {
                    // Only the latest position matters: a pager that waited
                    // for a CPU skips those the reading has passed since.
                    while let Ok(later) = from_reader.try_recv() {
                        told = later;
                    }
                    advance(map, &thread_released, &mut populated, told);
                }
            })
            .ok()?;
        let mut pager = Pager { to_thread, next: 0, release: 0, released, data };
        pager.reached(0);
        Some(pager)
    }

    pub(super) fn reached(&mut self, pos: u64) {
        let pos = usize::try_from(pos).unwrap_or(usize::MAX);
        if pos >= self.next {
            let _ = self.to_thread.send((pos, self.release));
            self.next = pos.saturating_add(Pager::AHEAD / 2);
            let behind = self.release.saturating_sub(self.released.load(Ordering::Relaxed));
            if behind > Pager::LAG {
                if let Data::Mapped(map) = &*self.data {
                    drop_before(map, &self.released, self.release);
                }
            }
        }
    }
}

/// The pager thread's work when told the reading has `reached` an offset
/// and may `release` the pages before another: drop those, and map the
/// pages from the reading position to [`Pager::AHEAD`] past it that are not
/// mapped yet (`populated`: how far they are).
///
/// Never behind the pages dropped already, by either thread: the reading
/// thread drops them itself where this one falls behind, and a page mapped
/// again behind `released` would stay in the process to its end (nothing
/// drops below that mark again). A pass that raced with the reading thread's
/// dropping drops again what it mapped behind the mark.
fn advance(
    map: &memmap2::Mmap,
    released: &AtomicUsize,
    populated: &mut usize,
    (reached, release): (usize, usize),
) {
    drop_before(map, released, release);
    let end = reached.saturating_add(Pager::AHEAD).min(map.len());
    let start = (*populated).max(reached / GRAIN * GRAIN).max(released.load(Ordering::Relaxed));
    let mut at = start;
    while at < end {
        // SAFETY: `at` is inside the mapping.
        unsafe { std::ptr::read_volatile(map.as_ptr().add(at)) };
        at += Pager::TOUCH;
    }
    *populated = (*populated).max(end.next_multiple_of(GRAIN));
    let dropped = released.load(Ordering::Relaxed).min(end);
    if start < dropped {
        // SAFETY: as in `drop_before`: dropped pages of a read-only file
        // mapping are read back from the file if touched again.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, dropped - start)
        };
    }
}

/// Drop the pages of `map` before `to` (rounded down to a grain) that are
/// not dropped yet, from whichever thread gets there first.
fn drop_before(map: &memmap2::Mmap, released: &AtomicUsize, to: usize) {
    let to = to.min(map.len()) / GRAIN * GRAIN;
    let from = released.fetch_max(to, Ordering::Relaxed);
    if to > from {
        // SAFETY: a read-only file mapping: dropped pages are read back from
        // the file if touched again, so every slice of the mapping stays
        // valid.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, to - from)
        };
    }
}

impl PerfFile<Cursor<SharedBytes>> {
    /// A perf.data file already in memory (mapped): records are read in
    /// place, never copied, and stay readable through [`PerfFile::bytes`]
    /// (or the caller's own reference to `data`) after later reads.
    pub fn from_data(data: Arc<Data>) -> Result<Self, PerfError> {
        let mut file = PerfFile::new(Cursor::new(SharedBytes(data.clone())))?;
        file.pager = Pager::start(data.clone());
        file.map = Some(data);
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resident size of the mapping that starts at `ptr`, from
    /// /proc/self/smaps (the pages this process has mapped, not the page
    /// cache's).
    fn resident(ptr: *const u8) -> usize {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("Linux: /proc/self/smaps");
        let start = format!("{:x}-", ptr as usize);
        let mut lines = smaps.lines().skip_while(|line| !line.starts_with(&start)).skip(1);
        let rss = lines.find_map(|line| line.strip_prefix("Rss:")).expect("the mapping's Rss");
        rss.trim().trim_end_matches("kB").trim().parse::<usize>().expect("Rss in kB") << 10
    }

    /// A pager thread that waited for a CPU while the reading thread went on
    /// and dropped the pages itself is told a position behind those: it must
    /// not map them again (nothing would drop them before the process ends:
    /// seen as 100-240 MiB of a 935 MB recording left in `stackwalk perf`,
    /// against 15-20 MiB).
    #[test]
    fn a_late_pager_maps_nothing_behind_the_dropped_pages() {
        let path = std::env::temp_dir().join(format!("pager-test-{}", std::process::id()));
        std::fs::write(&path, vec![1u8; 24 << 20]).expect("a 24 MiB file");
        let file = std::fs::File::open(&path).expect("the file");
        // SAFETY: a file of this test's own, not changed while mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.expect("mapped");
        std::fs::remove_file(&path).ok();
        assert_eq!(resident(map.as_ptr()), 0, "nothing touched yet");

        // The reading thread is at 18 MiB and dropped what is before 16.
        let released = AtomicUsize::new(0);
        drop_before(&map, &released, 16 << 20);
        let mut populated = 0;
        // The pager, late, is told of 2 MiB: it maps nothing behind 16 MiB.
        advance(&map, &released, &mut populated, (2 << 20, 0));
        assert_eq!(resident(map.as_ptr()), 0);
        // Told of the reading at 18 MiB, it maps from there on (the pages
        // 16-18 MiB too: its pass starts at the dropped mark), and no more
        // than AHEAD past the reading.
        advance(&map, &released, &mut populated, (18 << 20, 16 << 20));
        let mapped = resident(map.as_ptr());
        assert!(mapped > 0 && mapped <= (2 << 20) + Pager::AHEAD, "{mapped}");
        // Dropping all of it leaves nothing.
        drop_before(&map, &released, 24 << 20);
        assert_eq!(resident(map.as_ptr()), 0);
    }
}
