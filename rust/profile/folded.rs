//! Folded stacks, counted by the workers as they unwind: a sample's frames
//! are named (comm, user functions with the functions inlined in them,
//! kernel functions) and the sequence of name ids is counted in a
//! stack-trace database. Each distinct frame is named once per table, the
//! names interned in one table shared by all; at the end the workers'
//! tables are summed and written sorted.

use rustc_hash::FxHashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::ops::Range;
use std::sync::Mutex;

use crate::render::text::escaped;
use crate::stackdb::StackDb;
use crate::symbolize::SymbolCache;
use crate::unwind::Frame;

use super::cache::SourceCache;
use super::kallsyms::KernelSymbolsLoader;
use super::process::Process;
use super::work::{Context, Pool};
use super::{Pending, Profiler};

/// The folded stacks of a run: the names, and the workers' tables (one
/// taken per chunk, so that no worker waits for another's counting).
#[derive(Default)]
pub(super) struct Folding {
    names: Mutex<Names>,
    pub(super) tables: Pool<FoldTable>,
}

/// The `frames` key of a comm, and of a kernel frame (a user frame's is its
/// process snapshot's id, never either of these).
const COMM: u64 = u64::MAX - 1;
const KERNEL: u64 = u64::MAX;

/// One worker's folded stacks at a time.
#[derive(Default)]
pub(super) struct FoldTable {
    /// Name ids, outermost first, counted.
    stacks: StackDb,
    /// The name ids of a frame (a range of `ids`), by (process snapshot id,
    /// pc with bit 63 set when interrupted), (`KERNEL`, ip) or (`COMM`,
    /// comm): samples share most of their frames.
    frames: FxHashMap<(u64, u64), (u32, u32)>,
    ids: Vec<u64>,
    /// The stack being made, and a sample's kernel ips (innermost first).
    stack: Vec<u64>,
    kernel: Vec<u64>,
    /// A frame's names being made, the first time it is seen.
    made: Vec<(Option<NameKey>, String)>,
}

impl FoldTable {
    /// Count a sample: its comm, its user `frames` (innermost first, with
    /// the functions inlined at each when `ctx.inline`), then its `kernel`
    /// ips (innermost first).
    pub(super) fn add(
        &mut self,
        ctx: &Context,
        p: &Pending<'_>,
        frames: &[Frame],
        kernel: impl Iterator<Item = u64>,
        (symbols, sources): (&mut SymbolCache, &mut SourceCache),
    ) {
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        let comm = u64::from(p.comm);
        let ids = self.frame((COMM, comm), &ctx.folding.names, |made| {
            let name = ctx.comms.get(comm as usize).map_or(":-1", |c| c);
            made.push((Some(NameKey::Comm(comm)), escaped(name).into_owned()));
        });
        stack.extend_from_slice(&self.ids[ids]);
        for f in frames.iter().rev() {
            // Looked up at the pc itself where it is not a call's return address
            // (interrupted, or a signal trampoline's: Frame::lookup_pc).
            let word = f.pc | u64::from(f.lookup_pc() == f.pc) << 63;
            let process = &p.process;
            let ids = self.frame((process.id, word), &ctx.folding.names, |made| {
                user_frame_names(process, word, ctx.inline, (symbols, sources), made)
            });
            stack.extend_from_slice(&self.ids[ids]);
        }
        self.kernel.clear();
        self.kernel.extend(kernel);
        for i in (0..self.kernel.len()).rev() {
            let ip = self.kernel[i];
            let ids = self.frame((KERNEL, ip), &ctx.folding.names, |made| {
                let mut name = String::new();
                let key = kernel_frame_name(&ctx.kernel, ip, &mut name);
                made.push((key, name));
            });
            stack.extend_from_slice(&self.ids[ids]);
        }
        self.stacks.add(&stack);
        self.stack = stack;
    }

    /// The name ids of the frame `key` (a range of `self.ids`), named by
    /// `make` and interned the first time.
    fn frame(
        &mut self,
        key: (u64, u64),
        names: &Mutex<Names>,
        make: impl FnOnce(&mut Vec<(Option<NameKey>, String)>),
    ) -> Range<usize> {
        if let Some(&(start, end)) = self.frames.get(&key) {
            return start as usize..end as usize;
        }
        self.made.clear();
        make(&mut self.made);
        let start = self.ids.len();
        if let Ok(mut names) = names.lock() {
            for (name_key, name) in self.made.drain(..) {
                self.ids.push(names.id(name_key, &name));
            }
        }
        self.frames.insert(key, (start as u32, self.ids.len() as u32));
        start..self.ids.len()
    }
}

impl Profiler {
    /// The workers' folded stacks summed, written sorted (as
    /// stackcollapse-perf writes them: the same output whichever worker
    /// counted which sample), one `comm;outer;...;inner count` a line.
    pub(super) fn write_folded<W: Write>(&self, out: &mut W) -> std::io::Result<()> {
        let mut folded = StackDb::new();
        for table in self.folding.tables.drain() {
            for (_, ids, count) in table.stacks.iter() {
                folded.add_n(ids, count);
            }
        }
        let Ok(names) = self.folding.names.lock() else { return Ok(()) };
        let mut lines: Vec<(String, u64)> = folded
            .iter()
            .map(|(_, ids, count)| {
                let stack = ids.iter().map(|&id| names.names[id as usize].as_str());
                (stack.collect::<Vec<_>>().join(";"), count)
            })
            .collect();
        lines.sort_unstable();
        for (stack, count) in lines {
            writeln!(out, "{stack} {count}")?;
        }
        Ok(())
    }
}

/// What a folded name is the name of.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum NameKey {
    Comm(u64),
    /// A file's (its `SymbolFile`'s id) symbol, by index.
    Symbol(usize, usize),
    /// A kernel symbol, by index.
    Kernel(usize),
}

/// The names of folded stacks' frames, interned: each string is made,
/// hashed and stored once, found again by what it names.
#[derive(Default)]
pub(super) struct Names {
    pub(super) names: Vec<String>,
    pub(super) ids: FxHashMap<String, u64>,
    /// A symbol, comm or kernel function's name id, by what it is.
    pub(super) known: FxHashMap<NameKey, u64>,
}

impl Names {
    pub(super) fn id(&mut self, key: Option<NameKey>, name: &str) -> u64 {
        if let Some(&id) = key.as_ref().and_then(|k| self.known.get(k)) {
            return id;
        }
        let id = match self.ids.get(name) {
            Some(&id) => id,
            None => {
                let id = self.names.len() as u64;
                self.names.push(name.to_owned());
                self.ids.insert(name.to_owned(), id);
                id
            }
        };
        if let Some(key) = key {
            self.known.insert(key, id);
        }
        id
    }
}

/// A user frame's names in a folded stack (`word`: its pc, bit 63 set when
/// interrupted): its function, then, with `inline`, the functions inlined
/// at it, outermost first, each annotated `_[i]` (as stackcollapse-perf
/// annotates inlined functions).
fn user_frame_names(
    process: &Process,
    word: u64,
    inline: bool,
    (symbols, sources): (&mut SymbolCache, &mut SourceCache),
    made: &mut Vec<(Option<NameKey>, String)>,
) {
    let mut buf = String::new();
    let (key, name) = user_frame_name(process, word, &mut buf, symbols);
    made.push((key, escaped(name).into_owned()));
    if inline {
        let (_, lookup) = frame_pcs(word);
        let found = sources.frames(process, lookup);
        let inlined = found.split_last().map_or(&[][..], |(_, inlined)| inlined);
        for source in inlined.iter().rev() {
            let name = escaped(source.function.as_deref().unwrap_or("??"));
            made.push((None, format!("{name}_[i]")));
        }
    }
}

/// A user frame's name in a folded stack (`word`: its pc, bit 63 set when
/// interrupted), and what the name is of, when it is a symbol.
fn user_frame_name<'a>(
    process: &'a Process,
    word: u64,
    buf: &'a mut String,
    symbols: &mut SymbolCache,
) -> (Option<NameKey>, &'a str) {
    let (pc, lookup) = frame_pcs(word);
    let loc = process.symbolizer.locate_cached(pc, lookup, symbols);
    match (loc.function, loc.file()) {
        (Some((name, _)), Some(file)) => {
            (loc.symbol.map(|i| NameKey::Symbol(file.id() as usize, i)), name)
        }
        (_, Some(file)) => {
            buf.clear();
            let _ = write!(buf, "[{}+{:#x}]", file.path, loc.offset);
            (None, buf)
        }
        (_, None) => (None, "[unknown]"),
    }
}

/// The pc and lookup pc of a folded key's user frame `word` (its pc, bit 63
/// set when interrupted: looked up at the pc itself, else one byte back).
fn frame_pcs(word: u64) -> (u64, u64) {
    let pc = word & !(1 << 63);
    (pc, if word >> 63 != 0 { pc } else { pc.wrapping_sub(1) })
}

/// A kernel frame's name in a folded stack.
fn kernel_frame_name(kernel: &KernelSymbolsLoader, ip: u64, buf: &mut String) -> Option<NameKey> {
    buf.clear();
    let found = kernel.lookup_index(ip);
    match found {
        Some((name, _, _)) => buf.push_str(&escaped(name)),
        None => {
            let _ = write!(buf, "[kernel+{ip:#x}]");
        }
    }
    buf.push_str("_[k]");
    found.map(|(_, _, i)| NameKey::Kernel(i))
}
