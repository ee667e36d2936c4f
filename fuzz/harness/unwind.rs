//! Arbitrary registers and stack memory unwound over one module: a whole
//! ELF image from the input (seeded with a real program and a real stack
//! captured from it, see `fuzz/seed.py`), or, when the bytes are not ELF,
//! a raw `.eh_frame`. The walk must end with a reason, within `max_frames`
//! (0: none given, so within what the stack can hold), and a second walk
//! (served from the rule cache) must find the same frames, as must the walk
//! that keeps each frame's registers.
//!
//! Input layout: u8 flags (bit 0: aarch64, bit 2: i386, bit 3: frame-pointer
//! fallback, bit 4: stack scanning, bit 5: the process's entry point and
//! threads' stacks), u16 max_frames, u32 image_len,
//! image, u64 bias, u64 pc, u64 register mask (bit n = DWARF column n,
//! n < 33), one u64 per set bit, u64 stack address, u16 gap_at, then the
//! stack bytes: two regions, split at gap_at with a 4 KiB hole between.

use std::sync::Arc;

use _core::arch::registers::Registers;
use _core::arch::NUM_REGS;
use _core::source::memory::Data;
use _core::source::memory::Regions;
use _core::source::memory::ThreadStack;
use _core::space::sections::{ModuleSections, SectionInfo};
use _core::unwind::cfi::Module;
use _core::unwind::fallback::Strategy;
use _core::unwind::{stack_frame_bound, EndReason, ProcessFacts, Unwinder};

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        head
    }
    fn uint(&mut self, n: usize) -> u64 {
        let mut buf = [0u8; 8];
        let bytes = self.take(n);
        buf[..bytes.len()].copy_from_slice(bytes);
        u64::from_le_bytes(buf)
    }
}

pub fn run(data: &[u8]) {
    let mut r = Reader(data);
    let flags = r.uint(1);
    let arch = super::cfi::harness_arch(flags as u8);
    let max_frames = (r.uint(2) as usize) % 1024;
    let image_len = r.uint(4) as usize;
    let image = r.take(image_len);
    let bias = r.uint(8);
    let pc = r.uint(8);
    let mask = r.uint(8) & ((1 << NUM_REGS) - 1);
    let mut regs = Registers::new();
    for col in 0..NUM_REGS as u16 {
        if mask & (1 << col) != 0 {
            regs.set(col, r.uint(8));
        }
    }
    let stack_at = r.uint(8);
    let gap_at = (r.uint(2) as usize).min(r.0.len());
    let (low, high) = r.0.split_at(gap_at);

    // An owned copy: the `object` crate reads ELF headers in place and wants
    // them aligned, as a mapped file or a Vec is (the input slice is not).
    let image = image.to_vec();
    let (sections, range) = match _core::space::elf::read_elf(&image) {
        Ok(elf) => (elf.sections, elf.range),
        Err(_) => {
            let eh = SectionInfo { file_offset: 0, size: image.len() as u64, address: 0x40_0000 };
            let sections = ModuleSections { eh_frame: Some(eh), ..ModuleSections::default() };
            (sections, 0x40_0000..0x50_0000)
        }
    };
    let data = Data::Owned(image);
    let Ok(module) = Module::new("fuzz".into(), arch, data, sections, range, bias) else { return };
    let mut unwinder = Unwinder::new(arch);
    // Bits 3 and 4 add the fallbacks after CFI, as `stackwalk core` uses them.
    let mut strategies = vec![Strategy::Cfi];
    if flags & 8 != 0 {
        strategies.push(Strategy::FramePointer);
    }
    if flags & 16 != 0 {
        strategies.push(Strategy::Scan);
    }
    unwinder.set_strategies(&strategies);
    // Bit 5: the process's facts, as a core gives them: its entry point (the
    // image's pc field), frame 0's stack the low region and another thread's
    // the high one, live from its start, where a walk must not go.
    if flags & 32 != 0 {
        let high_at = stack_at.wrapping_add(low.len() as u64 + 4096);
        let sp = regs.get(arch.sp()).unwrap_or(0);
        let end = |start: u64, len: usize| start.saturating_add(len as u64);
        let stacks = vec![
            ThreadStack {
                tid: 1,
                start: stack_at,
                end: end(stack_at, low.len()),
                sp,
                live_end: None,
            },
            ThreadStack {
                tid: 2,
                start: high_at,
                end: end(high_at, high.len()),
                sp: high_at,
                live_end: Some(end(high_at, high.len() / 2)),
            },
        ];
        unwinder.set_process(ProcessFacts::new(Some(bias.wrapping_add(0x1000)), stacks));
    }
    if unwinder.add_module(Arc::new(module)).is_err() {
        return;
    }
    let mut memory = Regions::new();
    memory.add(stack_at, low);
    memory.add(stack_at.wrapping_add(low.len() as u64 + 4096), high);

    let limit = (max_frames > 0).then_some(max_frames);
    let sp = regs.get(arch.sp()).unwrap_or(0);
    let max_frames = limit.unwrap_or_else(|| stack_frame_bound(arch, sp, &mut memory.clone()));
    let mut frames = Vec::new();
    let end = unwinder.unwind(pc, &regs, &mut memory.clone(), limit, &mut frames);
    assert!(frames.len() <= max_frames.max(1), "{} frames, limit {max_frames}", frames.len());
    if end.reason == EndReason::FrameLimit {
        assert_eq!(frames.len(), max_frames);
    }
    // Every caller is above its callee (or at the same sp, past a signal
    // frame) and has a pc: what the walk promises to check.
    for pair in frames.windows(2) {
        assert!(pair[1].sp >= pair[0].sp, "sp went down: {pair:x?}");
        assert!(pair[1].pc != 0, "a frame with pc 0: {pair:x?}");
    }
    let _ = unwinder.describe(&end);
    let mut again = Vec::new();
    let end2 = unwinder.unwind(pc, &regs, &mut memory.clone(), limit, &mut again);
    assert_eq!(frames, again, "a walk served from the rule cache differs");
    assert_eq!(end, end2);
    // The walk that keeps each frame's registers (the general loop, also
    // where the strategies are CFI alone): the same frames and end, one
    // register file a frame, each holding that frame's pc.
    let mut kept = (Vec::new(), Vec::new());
    let end4 = unwinder.unwind_with_registers(
        pc,
        &regs,
        &mut memory.clone(),
        limit,
        &mut kept.0,
        &mut kept.1,
    );
    assert_eq!((&frames, end), (&kept.0, end4), "the walk keeping registers differs");
    assert_eq!(kept.1.len(), frames.len());
    if let Some(col) = arch.pc_column() {
        for (frame, file) in frames.iter().zip(&kept.1) {
            assert_eq!(file.get(col), Some(frame.pc));
        }
    }
    // A profile's walk: with fallbacks, the CFI-alone walk's frames where it
    // ended at the stack's end, the frame limit, the copy's end or outside
    // every module, else the walk with fallbacks, `unwind`'s.
    let mut sampled = Vec::new();
    let end3 = unwinder.unwind_sample(pc, &regs, &mut memory.clone(), limit, &mut sampled);
    assert!(sampled.len() <= max_frames.max(1), "{} frames, limit {max_frames}", sampled.len());
    if strategies.len() > 1 {
        unwinder.set_strategies(&[Strategy::Cfi]);
        let mut cfi = Vec::new();
        let cfi_end = unwinder.unwind(pc, &regs, &mut memory.clone(), limit, &mut cfi);
        unwinder.set_strategies(&strategies);
        let kept = matches!(
            cfi_end.reason,
            EndReason::EndOfStack | EndReason::PcZero | EndReason::FrameLimit | EndReason::Memory
        ) || (cfi_end.reason == EndReason::NoModule && cfi_end.module.is_none());
        if kept {
            assert_eq!((&sampled, end3), (&cfi, cfi_end), "the CFI walk's frames");
        } else {
            assert_eq!((&sampled, end3), (&frames, end), "the walk with fallbacks' frames");
        }
    }
}
