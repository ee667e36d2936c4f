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
        ProcessFacts { entry, stacks, merged, live }
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
}
