//! An address space's modules: an immutable, sorted snapshot that unwinders
//! and worker threads share through `Arc`. Adding a module makes a new
//! snapshot with a new generation number, which the rule cache keys on, so
//! unwinders can switch between address spaces (processes of a profile)
//! without flushing what they cached.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::unwind::cfi::Module;

static GENERATIONS: AtomicU64 = AtomicU64::new(1);

#[derive(Default)]
pub struct ModuleSet {
    generation: u64,
    /// Sorted by start address; ranges don't overlap.
    modules: Vec<Arc<Module>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlapError {
    pub name: String,
    pub other: String,
    pub range: Range<u64>,
}

impl fmt::Display for OverlapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "module {} at {:#x}..{:#x} overlaps module {}",
            self.name, self.range.start, self.range.end, self.other
        )
    }
}

impl std::error::Error for OverlapError {}

impl ModuleSet {
    pub fn new() -> Self {
        ModuleSet { generation: GENERATIONS.fetch_add(1, Ordering::Relaxed), modules: Vec::new() }
    }

    /// Identifies this snapshot: no two snapshots share one.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn modules(&self) -> &[Arc<Module>] {
        &self.modules
    }

    /// This set with `module` added; its range must not overlap another's.
    pub fn with_module(&self, module: Arc<Module>) -> Result<ModuleSet, OverlapError> {
        let pos = self.modules.partition_point(|m| m.range.start < module.range.start);
        let overlaps =
            |m: &Arc<Module>| m.range.start < module.range.end && module.range.start < m.range.end;
        if let Some(other) = [pos.checked_sub(1), Some(pos)]
            .into_iter()
            .flatten()
            .filter_map(|i| self.modules.get(i))
            .find(|m| overlaps(m))
        {
            return Err(OverlapError {
                name: module.name.clone(),
                other: other.name.clone(),
                range: module.range.clone(),
            });
        }
        let mut modules = Vec::with_capacity(self.modules.len() + 1);
        modules.extend_from_slice(&self.modules[..pos]);
        modules.push(module);
        modules.extend_from_slice(&self.modules[pos..]);
        Ok(ModuleSet { generation: GENERATIONS.fetch_add(1, Ordering::Relaxed), modules })
    }

    /// This set without the modules that overlap `range` (an munmap, or a
    /// new mapping over an old one).
    pub fn without_range(&self, range: Range<u64>) -> ModuleSet {
        let modules = self
            .modules
            .iter()
            .filter(|m| m.range.end <= range.start || range.end <= m.range.start)
            .cloned()
            .collect();
        ModuleSet { generation: GENERATIONS.fetch_add(1, Ordering::Relaxed), modules }
    }

    /// The index of the module whose range holds `pc`.
    #[inline]
    pub fn index_of(&self, pc: u64) -> Option<usize> {
        let i = self.modules.partition_point(|m| m.range.start <= pc).checked_sub(1)?;
        (pc < self.modules[i].range.end).then_some(i)
    }
}
