//! The document `minidump-stackwalk --json` prints for a dump (rust-minidump's
//! `json-schema.md`: what crashed, where, the module list; per frame its
//! trust, module, offsets, function, file, line, missing_symbols and
//! inlines), written from stackwalk's walks, so that pipelines built on
//! minidump-stackwalk can take stackwalk's (`stackwalk minidump --format
//! minidump-stackwalk`).

use std::collections::HashMap;

use super::json::JsonWriter;
use super::snapshot::NativeFrame;
use crate::source::minidump::{basename, DumpModule, MinidumpFile};

/// A frame as the snapshot shows it, and where it was named (a caller at
/// its return address less one: shown further in, see [`caller_step`]).
pub struct Shown {
    pub frame: NativeFrame,
    pub lookup_pc: u64,
}

/// `dump`'s document: `stacks` each thread's frames by tid (inline frames
/// among them), `executable` the program's file where it was found (the
/// main module's name), indented by `indent` spaces or on one line.
pub fn write(
    out: &mut String,
    dump: &MinidumpFile,
    stacks: &HashMap<u32, Vec<Shown>>,
    executable: Option<&str>,
    indent: Option<usize>,
) {
    let width = if dump.arch.word_size() == 4 { 8 } else { 16 };
    let hex = |j: &mut JsonWriter<'_>, value: u64| {
        j.str(&format!("0x{value:0width$x}"));
    };
    let module_of =
        |pc: u64| dump.modules.iter().find(|m| m.base <= pc && pc < m.base.saturating_add(m.size));
    // The dump's thread list's order, which minidump-stackwalk keeps and its
    // crashing thread's threads_index counts in.
    let crash = dump.exception.as_ref();
    let crashing = crash.and_then(|c| dump.threads.iter().position(|t| t.tid == c.tid));
    // The executable where it is known, else the module list's first (Breakpad
    // and Crashpad write the executable first; minidump-stackwalk takes the
    // first as the main module).
    let main = executable
        .and_then(|exe| dump.modules.iter().position(|m| m.name == exe))
        .or(if dump.modules.is_empty() { None } else { Some(0) });
    let thread = |j: &mut JsonWriter<'_>, index: usize, threads_index: bool| {
        let tid = dump.threads[index].tid;
        let frames = stacks.get(&tid).map(Vec::as_slice).unwrap_or_default();
        j.open('{');
        let shown: Vec<_> = frames_of(frames, caller_step(dump.arch), &module_of);
        j.key("frame_count").int(shown.len() as i64);
        j.key("frames").open('[');
        for (n, f) in shown.iter().enumerate() {
            j.item();
            frame_json(j, n, f, &hex);
        }
        j.close(']');
        j.key("thread_id").int(i64::from(tid));
        j.key("thread_name").opt_str(None);
        j.key("last_error_value").opt_str(None);
        if threads_index {
            j.key("threads_index").int(index as i64);
        }
        j.close('}');
    };
    let mut j = JsonWriter::new(out, indent);
    j.open('{');
    j.key("status").str("OK");
    j.key("pid").opt_int(dump.pid.map(i64::from));
    j.key("system_info").open('{');
    j.key("os").str(&dump.system.os);
    j.key("os_ver").opt_str(dump.system.os_version.as_deref());
    j.key("cpu_arch").str(&dump.system.cpu);
    j.close('}');
    j.key("crash_info").open('{');
    match crash {
        Some(c) => {
            j.key("type").str(&c.reason);
            j.key("address");
            hex(&mut j, c.crash_address);
        }
        None => {
            j.key("type").opt_str(None);
            j.key("address").opt_str(None);
        }
    }
    j.key("crashing_thread").opt_int(crashing.map(|i| i as i64));
    j.close('}');
    j.key("crashing_thread");
    match crashing {
        Some(index) => thread(&mut j, index, true),
        None => j.out.push_str("null"),
    }
    j.key("main_module").opt_int(main.map(|i| i as i64));
    j.key("modules").open('[');
    for m in &dump.modules {
        j.item();
        module_json(&mut j, m, &hex);
    }
    j.close(']');
    j.key("thread_count").int(dump.threads.len() as i64);
    j.key("threads").open('[');
    for index in 0..dump.threads.len() {
        j.item();
        thread(&mut j, index, false);
    }
    j.close(']');
    j.close('}');
}

/// A frame of minidump-stackwalk's: one per unwound frame, the functions
/// inlined at its pc in its `inlines`.
struct Walked<'a> {
    frame: &'a NativeFrame,
    /// Where it was looked up.
    at: u64,
    module: Option<&'a DumpModule>,
    inlines: Vec<&'a NativeFrame>,
}

/// How far before its return address minidump-stackwalk looks a caller up
/// and shows it (rust-minidump's `frame.instruction`): into the call, by
/// the shortest instruction of the CPU (x86's 1 byte, ARM's 2, arm64's 4).
fn caller_step(arch: crate::arch::Arch) -> u64 {
    match arch {
        crate::arch::Arch::Aarch64 => 4,
        crate::arch::Arch::Arm => 2,
        crate::arch::Arch::X86_64 | crate::arch::Arch::I386 => 1,
    }
}

fn frames_of<'a>(
    frames: &'a [Shown],
    step: u64,
    module_of: &dyn Fn(u64) -> Option<&'a DumpModule>,
) -> Vec<Walked<'a>> {
    let mut out = Vec::new();
    let mut inlines = Vec::new();
    for shown in frames {
        let f = &shown.frame;
        if f.inline {
            inlines.push(f);
            continue;
        }
        // A caller inside its call (its return address less `step`), as
        // Breakpad gives callers; frame 0 and a frame a signal interrupted at
        // their pc. A signal trampoline's first instruction, where a handler
        // returns: the function named is the one at the pc, not before it.
        let mut at = shown.lookup_pc;
        if at != f.pc {
            at = f.pc.wrapping_sub(step);
        }
        if f.function_offset.is_some_and(|offset| offset < f.pc.wrapping_sub(at)) {
            at = f.pc;
        }
        let module = module_of(at);
        out.push(Walked { frame: f, at, module, inlines: std::mem::take(&mut inlines) });
    }
    out
}

fn frame_json(
    j: &mut JsonWriter<'_>,
    n: usize,
    w: &Walked<'_>,
    hex: &dyn Fn(&mut JsonWriter<'_>, u64),
) {
    let f = w.frame;
    j.open('{');
    j.key("frame").int(n as i64);
    j.key("trust").str(&f.trust);
    j.key("module").opt_str(w.module.map(|m| basename(&m.name)));
    j.key("module_offset");
    match w.module {
        Some(m) => hex(j, w.at.wrapping_sub(m.base)),
        None => j.out.push_str("null"),
    }
    j.key("offset");
    hex(j, w.at);
    j.key("function").opt_str(f.function.as_deref());
    j.key("function_offset");
    match f.function_offset {
        Some(offset) => hex(j, offset.wrapping_sub(f.pc.wrapping_sub(w.at))),
        None => j.out.push_str("null"),
    }
    j.key("file").opt_str(f.file.as_deref());
    j.key("line").opt_int(f.line.map(i64::from));
    j.key("missing_symbols").bool(f.function.is_none() && w.module.is_some());
    j.key("inlines");
    if w.inlines.is_empty() {
        j.out.push_str("null");
    } else {
        j.open('[');
        for inline in &w.inlines {
            j.item();
            j.open('{');
            j.key("function").opt_str(inline.function.as_deref());
            j.key("file").opt_str(inline.file.as_deref());
            j.key("line").opt_int(inline.line.map(i64::from));
            j.close('}');
        }
        j.close(']');
    }
    j.close('}');
}

fn module_json(j: &mut JsonWriter<'_>, m: &DumpModule, hex: &dyn Fn(&mut JsonWriter<'_>, u64)) {
    j.open('{');
    j.key("base_addr");
    hex(j, m.base);
    j.key("end_addr");
    hex(j, m.base.saturating_add(m.size));
    j.key("filename").str(basename(&m.name));
    j.key("debug_file").str(m.debug_file.as_deref().unwrap_or_default());
    j.key("code_id").str(m.code_id.as_deref().unwrap_or_default());
    j.key("debug_id").str(m.debug_id.as_deref().unwrap_or_default());
    j.key("missing_symbols").bool(false);
    j.key("loaded_symbols").bool(false);
    j.key("corrupt_symbols").bool(false);
    j.key("symbol_url").opt_str(None);
    j.key("version").opt_str(None);
    j.close('}');
}
