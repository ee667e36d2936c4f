//! The SIGBUS guard of the mappings [`super::map_file`] makes.
//!
//! A read of a mapped page past the end of a file that shrank since it was
//! mapped raises SIGBUS (`BUS_ADRERR`). The handler installed here looks the
//! faulting address up in a table of guarded mappings; if one holds it, it
//! maps anonymous zero pages over the rest of that mapping (`MAP_FIXED`),
//! notes where, and returns: the read is done again and sees zeros. Any
//! other SIGBUS goes to the handler that was there before (Python's
//! faulthandler, say), or kills the process as it would have. The JVM does
//! the same for a `MappedByteBuffer` whose file was truncated, and Firefox
//! for its mapped archives.
//!
//! The handler only loads and stores atomics and calls `mmap`, `sigaction`
//! and `raise`, all async-signal-safe.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many mappings can be guarded at once (one per module file of the
/// unwinders alive, plus a core or a perf.data file); past it a mapping is
/// made unguarded.
const SLOTS: usize = 4096;

struct Slot {
    taken: AtomicBool,
    start: AtomicUsize,
    /// 0 while the slot is free or being filled.
    end: AtomicUsize,
    /// Offset in the mapping from which it reads as zeros; `usize::MAX`:
    /// not cut.
    cut: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)] // a template for the array
const FREE: Slot = Slot {
    taken: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    cut: AtomicUsize::new(usize::MAX),
};

static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
/// The disposition of SIGBUS before ours, for the signals that are not ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static PAGE: AtomicUsize = AtomicUsize::new(4096);

type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Guard the mapping of `len` bytes at `start`: its slot in the table.
pub(super) fn register(start: usize, len: usize) -> Option<usize> {
    if len == 0 {
        return None;
    }
    install();
    let index = TABLE.iter().position(|slot| {
        slot.taken.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    })?;
    let slot = &TABLE[index];
    slot.cut.store(usize::MAX, Ordering::Release);
    slot.start.store(start, Ordering::Release);
    slot.end.store(start.saturating_add(len), Ordering::Release);
    Some(index)
}

pub(super) fn unregister(index: usize) {
    if let Some(slot) = TABLE.get(index) {
        slot.end.store(0, Ordering::Release);
        slot.start.store(0, Ordering::Release);
        slot.taken.store(false, Ordering::Release);
    }
}

pub(super) fn cut_at(index: usize) -> Option<usize> {
    let cut = TABLE.get(index)?.cut.load(Ordering::Acquire);
    (cut != usize::MAX).then_some(cut)
}

fn install() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: sysconf and sigaction with valid arguments; the handler
        // below is async-signal-safe.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, Ordering::Relaxed);
            }
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_sigbus as Handler as usize;
            ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut ours.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            previous.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &ours, &mut previous);
            previous
        }
    });
}

extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let (code, address) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code == libc::BUS_ADRERR && zero_the_rest(address) {
        return; // the read is done again, and sees zeros
    }
    // Not ours: as before us.
    match PREVIOUS.get() {
        Some(previous)
            if previous.sa_sigaction != libc::SIG_DFL && previous.sa_sigaction != libc::SIG_IGN =>
        {
            // SAFETY: the previous handler, called as the kernel would.
            unsafe {
                if previous.sa_flags & libc::SA_SIGINFO != 0 {
                    let handler: Handler = std::mem::transmute(previous.sa_sigaction);
                    handler(signal, info, context);
                } else {
                    let handler: extern "C" fn(libc::c_int) =
                        std::mem::transmute(previous.sa_sigaction);
                    handler(signal);
                }
            }
        }
        _ => {
            // The default action: die of SIGBUS, as without us.
            // SAFETY: async-signal-safe calls with valid arguments.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
                libc::raise(libc::SIGBUS);
            }
        }
    }
}

/// If `address` is in a guarded mapping, map zeros over it from the page
/// of `address` to its end, and note the cut.
fn zero_the_rest(address: usize) -> bool {
    let page = PAGE.load(Ordering::Relaxed);
    for slot in &TABLE {
        let (start, end) = (slot.start.load(Ordering::Acquire), slot.end.load(Ordering::Acquire));
        if !(start <= address && address < end) {
            continue;
        }
        let from = address / page * page;
        let to = end.div_ceil(page) * page;
        // SAFETY: `from..to` is inside the guarded mapping (whole pages),
        // which its owner unmaps as a whole; anonymous pages in place of the
        // file's change nothing but what the readers see there.
        let mapped = unsafe {
            libc::mmap(
                from as *mut libc::c_void,
                to - from,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            return false;
        }
        slot.cut.fetch_min(from - start, Ordering::AcqRel);
        return true;
    }
    false
}
