//! Folded stacks: each distinct address trace symbolized once, counted by
//! name.

use rustc_hash::FxHashMap;
use std::fmt::Write as _;
use std::io::Write;

use crate::stackdb::StackDb;

use crate::symbolize::SymbolCache;

use super::cache::SourceCache;
use super::process::Process;
use super::Profiler;

impl Profiler {
    /// Each distinct address trace symbolized once, counted by name. A
    /// folded stack's names go outermost first, as stackcollapse-perf gives
    /// them: comm, user functions, kernel functions (`_[k]`).
    pub(super) fn write_folded<W: Write>(&self, out: &mut W) -> std::io::Result<()> {
        let mut folded = StackDb::new();
        let mut names = Names::default();
        let mut symbols = SymbolCache::default();
        let mut sources = SourceCache::default();
        let mut line = String::new();
        let mut ids = Vec::new();
        for (index, key, count) in self.by_address.iter() {
            let process = &self.address_process[index as usize];
            let [_, comm, n_user, rest @ ..] = key else { continue };
            let comm_name = self.comm_names.get(*comm as usize).map_or(":-1", |c| c);
            ids.clear();
            ids.push(names.id(Some(NameKey::Comm(*comm)), comm_name));
            let (user, kernel) = rest.split_at((*n_user as usize).min(rest.len()));
            for &word in user.iter().rev() {
                ids.push(names.frame_id((process.id, word), &mut line, |line| {
                    user_frame_name(process, word, line, &mut symbols)
                }));
                if self.options.inline {
                    names.inlined_ids((process, word), &mut sources, &mut line, &mut ids);
                }
            }
            for &ip in kernel.iter().rev() {
                ids.push(
                    names.frame_id((u64::MAX, ip), &mut line, |line| {
                        kernel_frame_name(self, ip, line)
                    }),
                );
            }
            folded.add_n(&ids, count);
        }
        for (_, ids, count) in folded.iter() {
            for (i, &id) in ids.iter().enumerate() {
                if i > 0 {
                    out.write_all(b";")?;
                }
                out.write_all(names.names[id as usize].as_bytes())?;
            }
            writeln!(out, " {count}")?;
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

/// The names of a folded stack's frames, interned: each string is made,
/// hashed and stored once, found again by what it names.
#[derive(Default)]
pub(super) struct Names {
    pub(super) names: Vec<String>,
    pub(super) ids: FxHashMap<String, u64>,
    /// A symbol, comm or kernel function's name id, by what it is.
    pub(super) known: FxHashMap<NameKey, u64>,
    /// A frame's name id, by (process snapshot, pc word), or by
    /// (`u64::MAX`, ip) for a kernel frame: address traces share most of
    /// their frames.
    pub(super) frames: FxHashMap<(u64, u64), u64>,
    /// The name ids of the functions inlined at a frame, outermost first,
    /// by what `frames` is keyed by.
    pub(super) inlined: FxHashMap<(u64, u64), Vec<u64>>,
}

impl Names {
    /// The name id of the frame at `at`, its name made by `make` (in `buf`,
    /// or borrowed from elsewhere) the first time.
    pub(super) fn frame_id<'s>(
        &mut self,
        at: (u64, u64),
        buf: &'s mut String,
        make: impl FnOnce(&'s mut String) -> (Option<NameKey>, &'s str),
    ) -> u64 {
        if let Some(&id) = self.frames.get(&at) {
            return id;
        }
        let (key, name) = make(buf);
        let id = self.id(key, name);
        self.frames.insert(at, id);
        id
    }

    /// Push to `ids` the name ids of the functions inlined at the user frame
    /// `word` of `process` (see [`user_frame_name`]), outermost first, each
    /// annotated `_[i]` (as stackcollapse-perf annotates inlined functions);
    /// looked up the first time.
    pub(super) fn inlined_ids(
        &mut self,
        (process, word): (&Process, u64),
        sources: &mut SourceCache,
        buf: &mut String,
        ids: &mut Vec<u64>,
    ) {
        let at = (process.id, word);
        if !self.inlined.contains_key(&at) {
            let (_, lookup) = frame_pcs(word);
            let found = sources.frames(process, lookup);
            let inlined = found.split_last().map_or(&[][..], |(_, inlined)| inlined);
            let mut made = Vec::with_capacity(inlined.len());
            for source in inlined.iter().rev() {
                buf.clear();
                buf.push_str(source.function.as_deref().unwrap_or("??"));
                buf.push_str("_[i]");
                made.push(self.id(None, buf));
            }
            self.inlined.insert(at, made);
        }
        ids.extend_from_slice(&self.inlined[&at]);
    }

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

/// A user frame's name in a folded stack (`word`: its pc, bit 63 set when
/// interrupted), and what the name is of, when it is a symbol.
pub(super) fn user_frame_name<'a>(
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
pub(super) fn kernel_frame_name<'a>(
    profiler: &'a Profiler,
    ip: u64,
    buf: &'a mut String,
) -> (Option<NameKey>, &'a str) {
    buf.clear();
    let found = profiler.kernel.lookup_index(ip);
    match found {
        Some((name, _, _)) => buf.push_str(name),
        None => {
            let _ = write!(buf, "[kernel+{ip:#x}]");
        }
    }
    buf.push_str("_[k]");
    (found.map(|(_, _, i)| NameKey::Kernel(i)), buf)
}
