//! What a worker thread does with a chunk of samples: decode, unwind,
//! then format or key them.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use crate::arch::Arch;
use crate::source::memory::Buffer;
use crate::source::perf::{
    sample_registers, Decoder, Event, Sample, Words, PERF_CONTEXT_HV, PERF_CONTEXT_KERNEL,
    PERF_CONTEXT_USER, PERF_RECORD_MISC_KERNEL, PERF_RECORD_MISC_USER, PERF_SAMPLE_REGS_ABI_NONE,
};
use crate::symbolize::SymbolCache;
use crate::unwind::fallback::Strategies;
use crate::unwind::{Frame, Trust, Unwinder};

use super::cache::{LineCache, SourceCache};
use super::folded::Folding;
use super::format::Unwound;
use super::kallsyms::KernelSymbolsLoader;
use super::{Format, Pending};

/// What a worker made of a chunk of samples.
#[derive(Default)]
pub(super) struct ChunkOut {
    pub(super) text: String,
    /// The samples as records (`Format::Records`).
    pub(super) bytes: Vec<u8>,
    pub(super) samples: u64,
    pub(super) complete: u64,
    pub(super) frames: u64,
    /// The first sample found damaged: its offset and what is wrong.
    pub(super) damage: Option<(u64, String)>,
}

/// What workers take, one at a time each, and give back for the next to
/// take (a new one where none is there).
pub(super) struct Pool<T>(Mutex<Vec<T>>);

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Pool(Mutex::default())
    }
}

impl<T: Default> Pool<T> {
    pub(super) fn take(&self) -> T {
        self.0.lock().ok().and_then(|mut pool| pool.pop()).unwrap_or_default()
    }

    pub(super) fn give(&self, value: T) {
        if let Ok(mut pool) = self.0.lock() {
            pool.push(value);
        }
    }

    /// All that was given back, once the workers are done.
    pub(super) fn drain(&self) -> Vec<T> {
        self.0.lock().map(|mut pool| std::mem::take(&mut *pool)).unwrap_or_default()
    }
}

/// Chunk outputs written out, handed back for workers to fill again. With a
/// new 128 KiB text buffer per chunk, malloc kept growing and trimming its
/// heaps: a third of the run's page faults (5,000 per 40,000 samples).
pub(super) type Spare = Pool<ChunkOut>;

impl ChunkOut {
    /// Its buffers, emptied, to be filled again; nothing else of it.
    pub(super) fn emptied(self) -> ChunkOut {
        let ChunkOut { mut text, mut bytes, .. } = self;
        text.clear();
        bytes.clear();
        ChunkOut { text, bytes, ..ChunkOut::default() }
    }
}

/// A worker thread's reusable state.
#[derive(Default)]
pub(super) struct Worker {
    pub(super) unwinder: Option<Unwinder>,
    pub(super) frames: Vec<Frame>,
    pub(super) symbols: SymbolCache,
    pub(super) lines: LineCache,
    pub(super) sources: SourceCache,
}

thread_local! {
    static WORKER: RefCell<Worker> = RefCell::new(Worker::default());
}

/// What workers read: a snapshot, shared, taken when a batch is sent off.
pub(super) struct Context {
    pub(super) arch: Arch,
    pub(super) format: Format,
    /// Inline frames shown (`Options::inline`).
    pub(super) inline: bool,
    pub(super) max_frames: Option<usize>,
    pub(super) strategies: Strategies,
    pub(super) decoder: Arc<Decoder>,
    pub(super) kernel: Arc<KernelSymbolsLoader>,
    pub(super) comms: Arc<Vec<Arc<str>>>,
    pub(super) spare: Arc<Spare>,
    pub(super) folding: Arc<Folding>,
}

impl Context {
    /// Decode, unwind and format (or key) a chunk of samples.
    pub(super) fn work(&self, chunk: &[Pending<'_>]) -> ChunkOut {
        let ctx = self;
        let mut out = ctx.spare.take();
        if ctx.format != Format::Collapsed {
            out.text.reserve(chunk.len() * 2048);
        }
        let mut table = (ctx.format == Format::Collapsed).then(|| ctx.folding.tables.take());
        WORKER.with(|cell| {
            // A chunk may be started on a thread that is inside another: source
            // lines decompress their sections on the rayon pool, and a thread
            // waiting for that takes other jobs meanwhile. The nested chunk
            // then works with state of its own.
            let (mut own, mut nested);
            let worker: &mut Worker = match cell.try_borrow_mut() {
                Ok(borrowed) => {
                    own = borrowed;
                    &mut own
                }
                Err(_) => {
                    nested = Worker::default();
                    &mut nested
                }
            };
            let Worker { unwinder, frames, symbols, lines, sources } = worker;
            let unwinder = match unwinder {
                Some(u) if u.arch() == ctx.arch => u,
                _ => unwinder.insert(Unwinder::new(ctx.arch)),
            };
            unwinder.set_strategies(ctx.strategies.as_slice());
            for (at, p) in chunk.iter().enumerate() {
                if let Some(next) = chunk.get(at + 1) {
                    prefetch_sample(&next.rec);
                }
                let s = match ctx.decoder.decode(&p.rec, p.offset) {
                    Ok(Event::Sample(s)) => s,
                    Ok(_) => continue,
                    Err(e) => {
                        out.damage.get_or_insert((e.offset(), e.to_string()));
                        continue;
                    }
                };
                frames.clear();
                out.samples += 1;
                // Without user registers and stack (a recording without
                // --call-graph dwarf), the user frames are perf's own: the
                // callchain's user part (frame pointers, -g), or the ip.
                let recorded = !s.has_user_registers();
                if recorded {
                    recorded_frames(&s, ctx.max_frames, frames);
                    out.frames += frames.len() as u64;
                } else if let Some((pc, sp)) = user_registers(ctx.arch, &s) {
                    if !Arc::ptr_eq(unwinder.module_set(), &p.process.modules) {
                        unwinder.set_modules(p.process.modules.clone());
                    }
                    let mut stack = Buffer { start: sp.1, bytes: s.stack };
                    let end = unwinder.unwind_sample(pc, &sp.0, &mut stack, ctx.max_frames, frames);
                    out.complete += u64::from(end.reason.is_clean());
                    out.frames += frames.len() as u64;
                }
                // A kernel ip with no callchain at all is the kernel frame.
                let ip = (s.callchain.is_none() && s.cpumode() == PERF_RECORD_MISC_KERNEL)
                    .then_some(s.ip);
                // At most max_frames of each part, as perf script's --max-stack.
                let kernel = kernel_ips(s.callchain.unwrap_or_default())
                    .chain(ip)
                    .take(ctx.max_frames.unwrap_or(usize::MAX));
                match ctx.format {
                    Format::Text => Unwound { ctx, p, s: &s, frames, recorded }.text(
                        kernel,
                        (symbols, sources),
                        lines,
                        &mut out.text,
                    ),
                    Format::JsonLines => Unwound { ctx, p, s: &s, frames, recorded }.json(
                        kernel,
                        (symbols, sources),
                        &mut out.text,
                    ),
                    Format::Records => Unwound { ctx, p, s: &s, frames, recorded }.records(
                        kernel,
                        (symbols, sources),
                        &mut out.bytes,
                    ),
                    Format::Collapsed => {
                        if let Some(table) = &mut table {
                            table.add(ctx, p, frames, kernel, (symbols, sources));
                        }
                    }
                }
            }
        });
        if let Some(table) = table {
            ctx.folding.tables.give(table);
        }
        out
    }
}

/// Ask for the parts of a sample record the unwinding reads first, to be
/// in the cache when its turn comes (it was read from the page cache, far
/// away): its fields, registers and the top of its stack copy, and the
/// stack's `dyn_size` at the end. Some 10% of a run on a 2-core VM.
pub(super) fn prefetch_sample(rec: &[u8]) {
    const HEAD: usize = 1024;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let lines = rec.chunks(64).take(HEAD / 64).chain(rec.rchunks(64).take(1));
        for line in lines {
            // SAFETY: a prefetch is a hint: it reads nothing and cannot
            // fault, and the pointer is inside `rec` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (rec, HEAD);
}

/// The user pc, and the registers with sp, of a sample (None for a kernel
/// thread's sample, which has no user registers).
pub(super) fn user_registers(
    arch: Arch,
    s: &Sample<'_>,
) -> Option<(u64, (crate::arch::registers::Registers, u64))> {
    if s.regs_abi == PERF_SAMPLE_REGS_ABI_NONE {
        return None;
    }
    let (pc, regs) = sample_registers(arch, s);
    let sp = regs.get(arch.sp())?;
    Some((pc?, (regs, sp)))
}

/// A sample's user frames as perf recorded them, where it has no user
/// registers and stack to unwind: its callchain's user part (the sampled ip,
/// then the return addresses perf found by following frame pointers), or,
/// without a callchain, the ip of a sample taken in user mode.
fn recorded_frames(s: &Sample<'_>, max_frames: Option<usize>, frames: &mut Vec<Frame>) {
    let ip = (s.callchain.is_none() && s.cpumode() == PERF_RECORD_MISC_USER && s.ip != 0)
        .then_some(s.ip);
    let ips = user_ips(s.callchain.unwrap_or_default()).chain(ip);
    let at_most = max_frames.unwrap_or(usize::MAX);
    frames.extend(ips.take(at_most).enumerate().map(|(i, pc)| Frame {
        pc,
        sp: 0,
        cfa: None,
        trust: if i == 0 { Trust::Context } else { Trust::FramePointer },
        interrupted: i == 0,
        signal_frame: false,
    }));
}

/// The kernel part of a raw callchain (after PERF_CONTEXT_KERNEL).
pub(super) fn kernel_ips(chain: Words<'_>) -> impl Iterator<Item = u64> + '_ {
    context_ips(chain, PERF_CONTEXT_KERNEL)
}

/// The user part of a raw callchain (after PERF_CONTEXT_USER).
fn user_ips(chain: Words<'_>) -> impl Iterator<Item = u64> + '_ {
    context_ips(chain, PERF_CONTEXT_USER)
}

/// The entries of a raw callchain in `context` (a `PERF_CONTEXT_*`
/// marker). Only the context markers switch context; any other value, even
/// one in the marker range, is an entry of the current context, as perf
/// script shows it.
fn context_ips(chain: Words<'_>, context: u64) -> impl Iterator<Item = u64> + '_ {
    let mut inside = false;
    chain.iter().filter(move |&ip| match ip {
        PERF_CONTEXT_KERNEL | PERF_CONTEXT_HV | PERF_CONTEXT_USER => {
            inside = ip == context;
            false
        }
        _ => inside,
    })
}
