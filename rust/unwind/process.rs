//! What the walk knows of the process a stack is from: its entry point and
//! its threads' stacks, which no scanned word may point into.

use crate::source::memory::ThreadStack;

/// What is known of a process beyond its memory: see
/// [`super::Unwinder::set_process`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessFacts {
    /// The program's entry point (the auxiliary vector's `AT_ENTRY`).
    pub entry: Option<u64>,
    /// Each thread's stack.
    pub stacks: Vec<ThreadStack>,
    /// The threads' stack regions merged, in address order: searched for a
    /// scanned word (a core may have 100,000 threads).
    merged: Vec<(u64, u64)>,
    /// The stacks whose live part is known.
    live: Vec<ThreadStack>,
    /// The process ran on an Apple platform (macOS, iOS), whose ABI keeps
    /// a frame record in every frame and ends the chain with a saved frame
    /// pointer of 0 (see `crate::unwind::fallback::outermost`).
    pub apple: bool,
}

impl ProcessFacts {
    pub fn new(entry: Option<u64>, stacks: Vec<ThreadStack>) -> Self {
        let mut spans: Vec<(u64, u64)> =
            stacks.iter().filter(|t| t.start < t.end).map(|t| (t.start, t.end)).collect();
        spans.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
        for (start, end) in spans {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        let live = stacks.iter().copied().filter(|t| t.live_end.is_some()).collect();
        ProcessFacts { entry, stacks, merged, live, apple: false }
    }

    /// Whether `addr` lies in one of the threads' stacks.
    pub fn in_a_stack(&self, addr: u64) -> bool {
        let after = self.merged.partition_point(|&(start, _)| start <= addr);
        after > 0 && addr < self.merged[after - 1].1
    }

    /// The thread, other than the one whose walk starts at `own_sp`, in the
    /// live part of whose stack (where known) `sp` lies.
    pub fn live_stack_of_another(&self, sp: u64, own_sp: u64) -> Option<&ThreadStack> {
        self.live.iter().find(|t| {
            let live = |a: u64| t.live_end.is_some_and(|end| t.sp <= a && a < end);
            live(sp) && !live(own_sp) && t.sp != own_sp
        })
    }

    /// Whether any thread's live part is known (the walk then checks it).
    pub fn knows_live_stacks(&self) -> bool {
        !self.live.is_empty()
    }
}

/// Which threads' stacks the walks of one process's threads share, and
/// whose each is. Registers a runtime left behind (Go's saved contexts, a
/// stack switch's CFI) can lead a walk into the frames of another thread
/// still running there, which it then takes for its own: two walks have
/// frames at the same sp, which no two live threads can have. Where they
/// do, the stack is the one of the thread whose own sp (its walk's first)
/// is nearest below that sp, and its live part runs from there to past its
/// walk's top frame; the other walks went into it. `walks` holds each
/// walk's frames' sps; the answer: each walk's live stack top where it owns
/// a shared stack, and whether it went into another's (to be walked again
/// with the live parts known: `ProcessFacts`' `live_end`).
pub fn stack_owners(walks: &[Vec<u64>], word: u64) -> (Vec<Option<u64>>, Vec<bool>) {
    let mut at: Vec<(u64, usize)> =
        walks.iter().enumerate().flat_map(|(i, sps)| sps.iter().map(move |&sp| (sp, i))).collect();
    at.sort_unstable();
    at.dedup();
    let mut owned = vec![None; walks.len()];
    let mut intruders = vec![false; walks.len()];
    for sharing in at.chunk_by(|a, b| a.0 == b.0).filter(|c| c.len() > 1) {
        let sp = sharing[0].0;
        // The thread whose own sp is nearest below: the first of the nearest, in walk order.
        let mut owner: Option<(usize, u64)> = None;
        for &(_, i) in sharing {
            let Some(&own) = walks[i].first().filter(|&&own| own <= sp) else { continue };
            if owner.is_none_or(|(_, best)| own > best) {
                owner = Some((i, own));
            }
        }
        let Some((owner, _)) = owner else { continue };
        let top = walks[owner].iter().max().copied().unwrap_or(sp);
        owned[owner] = Some(top.saturating_add(word));
        for &(_, i) in sharing {
            if i != owner {
                intruders[i] = true;
            }
        }
    }
    (owned, intruders)
}

#[cfg(test)]
mod tests {
    use super::ProcessFacts;
    use crate::source::memory::ThreadStack;

    fn stack(tid: u32, start: u64, end: u64, sp: u64, live_end: Option<u64>) -> ThreadStack {
        ThreadStack { tid, start, end, sp, live_end }
    }

    #[test]
    fn words_in_any_threads_stack_are_found() {
        // Two stacks sharing a region (a Go heap arena), one apart, out of order.
        let facts = ProcessFacts::new(
            Some(0x1040),
            vec![
                stack(3, 0x9000, 0xa000, 0x9f00, None),
                stack(1, 0x5000, 0x8000, 0x5100, None),
                stack(2, 0x5000, 0x8000, 0x7000, None),
            ],
        );
        for inside in [0x5000, 0x7fff, 0x9000, 0x9fff] {
            assert!(facts.in_a_stack(inside), "{inside:#x}");
        }
        for outside in [0, 0x4fff, 0x8000, 0x8fff, 0xa000, u64::MAX] {
            assert!(!facts.in_a_stack(outside), "{outside:#x}");
        }
        assert!(!facts.knows_live_stacks());
        assert_eq!(facts.live_stack_of_another(0x9f80, 0x5100), None);
    }

    #[test]
    fn a_live_part_is_another_threads_own() {
        let facts = ProcessFacts::new(
            None,
            vec![
                stack(1, 0x5000, 0x8000, 0x5100, Some(0x5400)),
                stack(2, 0x9000, 0xa000, 0x9f00, None),
            ],
        );
        assert!(facts.knows_live_stacks());
        // Thread 2's walk entering thread 1's frames, not past them nor below its sp.
        assert_eq!(facts.live_stack_of_another(0x5200, 0x9f00).map(|t| t.tid), Some(1));
        assert_eq!(facts.live_stack_of_another(0x5400, 0x9f00), None);
        assert_eq!(facts.live_stack_of_another(0x50f8, 0x9f00), None);
        // Thread 1's own walk.
        assert_eq!(facts.live_stack_of_another(0x5200, 0x5100), None);
    }

    #[test]
    fn a_walk_into_another_threads_stack_is_the_intruder() {
        use super::stack_owners;
        // Thread 0 runs at 0x1000 with frames up to 0x1100; thread 1's walk starts far
        // below (its own stack at 0x800) and goes on into thread 0's frames at 0x1040.
        let walks = vec![vec![0x1000, 0x1040, 0x1100], vec![0x800, 0x840, 0x1040, 0x1100], vec![]];
        let (owned, intruders) = stack_owners(&walks, 8);
        assert_eq!(owned, [Some(0x1108), None, None]);
        assert_eq!(intruders, [false, true, false]);
        // No sp shared: nobody owns, nobody intrudes.
        let (owned, intruders) = stack_owners(&[vec![0x10, 0x20], vec![0x30]], 8);
        assert_eq!((owned, intruders), (vec![None, None], vec![false, false]));
        // A shared sp below every walk's own: no owner there.
        let (owned, _) = stack_owners(&[vec![0x50, 0x40], vec![0x60, 0x40]], 4);
        assert_eq!(owned, [None, None]);
    }
}
