//! Whether rayon's global thread pool may be started in this process. A
//! process that forks workers (`core --dir`, `triage --jobs`) reads its first
//! file itself, so that the caches the workers inherit hold the files every
//! crash shares (libc's symbols and debug info): while it does, the pool is
//! held back, for a child forked after the pool started has none of its
//! threads and would wait on them forever. Held back, the loops that would
//! spread over the pool run on the calling thread. A forked worker holds it
//! back for good: whether or not its parent had started the pool, it has
//! none of its threads.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

static HELD: AtomicBool = AtomicBool::new(false);
static STARTED: AtomicBool = AtomicBool::new(false);

/// Hold the pool back (or let it be started again); whether it has been
/// started already (a fork is then unsafe whatever is held).
pub fn hold(held: bool) -> bool {
    HELD.store(held, Relaxed);
    STARTED.load(Relaxed)
}

/// Whether the pool is held back: a batch that would spread runs on the
/// calling thread.
pub fn held() -> bool {
    HELD.load(Relaxed)
}

/// Whether a loop may spread over the global pool (which it may then start).
/// Never from a thread of a pool: waiting for its loop, that thread would
/// take other jobs meanwhile, and the loops that spread run inside a file's
/// cell or lock (its DWARF read once), which a job taken so may want too:
/// on the thread that holds it, it would wait for itself forever.
pub fn may_spread() -> bool {
    if HELD.load(Relaxed) || rayon::current_thread_index().is_some() {
        return false;
    }
    STARTED.store(true, Relaxed);
    true
}

/// The global pool is (to be) started whatever is held: a loop that must
/// spread (a batch the caller asked to spread over every CPU).
pub fn start() {
    STARTED.store(true, Relaxed);
}
