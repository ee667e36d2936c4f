//! Minidumps built byte by byte: the cases a real dump cannot show (a
//! context of the wrong size, counts larger than their stream, a directory
//! past the end). Real dumps made by `minidump-writer` are the Python
//! tests' (tests/test_minidump.py).

use super::*;

const THREAD_LIST: u32 = 3;
const MEMORY_LIST: u32 = 5;
const SYSTEM_INFO: u32 = 7;
const CONTEXT_AMD64: u32 = 0x0010_0000;
const CONTEXT_SIZE: usize = 1232;
const RIP: usize = 248;
const RSP: usize = 152;
const AMD64: u16 = 9;
const ARM64: u16 = 12;

/// A minidump of one x86_64 thread (tid 7, rip 0x401000, rsp 0x7000) with
/// 16 bytes of stack, its thread context `context_size` bytes long; the
/// memory list names the stack again, with `memory_count` as its count.
fn dump(context_size: usize, memory_count: u32) -> Vec<u8> {
    let mut context = vec![0u8; CONTEXT_SIZE];
    context[48..52].copy_from_slice(&CONTEXT_AMD64.to_le_bytes());
    context[RIP..RIP + 8].copy_from_slice(&0x401000u64.to_le_bytes());
    context[RSP..RSP + 8].copy_from_slice(&0x7000u64.to_le_bytes());
    context.truncate(context_size);
    dump_of(AMD64, context, memory_count)
}

/// A minidump of one thread of the architecture `processor_architecture`
/// with `context` (see [`dump`]).
fn dump_of(processor_architecture: u16, context: Vec<u8>, memory_count: u32) -> Vec<u8> {
    let mut system_info = vec![0u8; 56];
    system_info[..2].copy_from_slice(&processor_architecture.to_le_bytes());
    system_info[20..24].copy_from_slice(&0x8201u32.to_le_bytes()); // Linux
    let stack = [0xabu8; 16];

    // Layout: header, directory (3 entries), system info, thread list,
    // memory list, context, stack.
    let dir_at = 32;
    let sysinfo_at = dir_at + 3 * 12;
    let threads_at = sysinfo_at + system_info.len();
    let threads_len = 4 + 48;
    let memory_at = threads_at + threads_len;
    let memory_len = 4 + 16;
    let context_at = memory_at + memory_len;
    let stack_at = context_at + context.len();

    let mut out = Vec::new();
    let u32s = |out: &mut Vec<u8>, values: &[u32]| {
        for v in values {
            out.extend_from_slice(&v.to_le_bytes());
        }
    };
    u32s(&mut out, &[0x504d444d, 0xa793, 3, dir_at as u32, 0, 0, 0, 0]);
    u32s(&mut out, &[SYSTEM_INFO, system_info.len() as u32, sysinfo_at as u32]);
    u32s(&mut out, &[THREAD_LIST, threads_len as u32, threads_at as u32]);
    u32s(&mut out, &[MEMORY_LIST, memory_len as u32, memory_at as u32]);
    out.extend_from_slice(&system_info);
    u32s(&mut out, &[1, 7, 0, 0, 0, 0, 0]); // count, tid, suspend, class, priority, teb
    out.extend_from_slice(&0x7000u64.to_le_bytes());
    u32s(&mut out, &[stack.len() as u32, stack_at as u32]);
    u32s(&mut out, &[context.len() as u32, context_at as u32]);
    u32s(&mut out, &[memory_count]);
    out.extend_from_slice(&0x7000u64.to_le_bytes());
    u32s(&mut out, &[stack.len() as u32, stack_at as u32]);
    out.extend_from_slice(&context);
    out.extend_from_slice(&stack);
    out
}

fn read_dump(bytes: Vec<u8>) -> Result<MinidumpFile, MinidumpError> {
    MinidumpFile::from_data(Data::Owned(bytes))
}

fn register(thread: &DumpThread, name: &str) -> Option<u64> {
    thread.registers.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
}

#[test]
fn reads_threads_registers_and_stack() {
    let md = read_dump(dump(CONTEXT_SIZE, 1)).expect("a minidump");
    assert_eq!(md.arch, Arch::X86_64);
    assert_eq!(md.warnings, Vec::<String>::new());
    assert_eq!(md.threads.len(), 1);
    assert_eq!(md.threads[0].tid, 7);
    assert_eq!(register(&md.threads[0], "rip"), Some(0x401000));
    assert_eq!(register(&md.threads[0], "rsp"), Some(0x7000));
    assert_eq!(md.memory.bytes(0x7000, 16), Some(&[0xab; 16][..]));
}

#[test]
fn a_context_too_short_skips_its_thread_with_a_warning() {
    let md = read_dump(dump(CONTEXT_SIZE / 2, 1)).expect("a minidump");
    assert!(md.threads.is_empty());
    assert_eq!(md.warnings.len(), 1, "{:?}", md.warnings);
    assert!(md.warnings[0].contains("thread list stream (3): thread 7"), "{:?}", md.warnings);
    // The stack is still memory of the process.
    assert_eq!(md.memory.bytes(0x7000, 16), Some(&[0xab; 16][..]));
}

#[test]
fn a_huge_count_reads_what_the_stream_holds() {
    let md = read_dump(dump(CONTEXT_SIZE, u32::MAX)).expect("a minidump");
    assert_eq!(md.threads.len(), 1);
    let warning = md.warnings.iter().find(|w| w.starts_with("memory list stream (5)"));
    assert!(warning.is_some_and(|w| w.contains("the stream holds 1")), "{:?}", md.warnings);
}

#[test]
fn a_directory_past_the_end_is_an_error() {
    let mut bytes = dump(CONTEXT_SIZE, 1);
    bytes[12..16].copy_from_slice(&0xffff_0000u32.to_le_bytes());
    let error = read_dump(bytes).err().expect("an error");
    assert!(error.to_string().contains("stream directory"), "{error}");
}

#[test]
fn every_truncation_is_read_or_refused_without_panic() {
    let bytes = dump(CONTEXT_SIZE, 1);
    for cut in 0..bytes.len() {
        let Ok(md) = read_dump(bytes[..cut].to_vec()) else { continue };
        // The thread is there whole, or not at all; what is cut is said.
        if cut < bytes.len() - 16 {
            assert!(!md.warnings.is_empty(), "cut at {cut}: no warning");
        }
        for thread in &md.threads {
            assert_eq!(register(thread, "rip"), Some(0x401000), "cut at {cut}");
        }
    }
}

#[test]
fn not_a_minidump() {
    assert!(matches!(read_dump(b"\x7fELF\x02\x01\x01".to_vec()), Err(MinidumpError::NotMinidump)));
    assert!(matches!(read_dump(b"MDM".to_vec()), Err(MinidumpError::Header(_))));
}

#[test]
fn reads_an_aarch64_context() {
    // CONTEXT_ARM64: flags, cpsr, x0..x30, sp, pc, then the vector and debug registers.
    let mut context = vec![0u8; 912];
    context[..4].copy_from_slice(&0x0040_0000u32.to_le_bytes());
    for i in 0..31u64 {
        let at = 8 + 8 * i as usize;
        context[at..at + 8].copy_from_slice(&(0x1000 + i).to_le_bytes());
    }
    context[256..264].copy_from_slice(&0x7000u64.to_le_bytes());
    context[264..272].copy_from_slice(&0x401000u64.to_le_bytes());
    let md = read_dump(dump_of(ARM64, context, 1)).expect("a minidump");
    assert_eq!(md.arch, Arch::Aarch64);
    let thread = &md.threads[0];
    assert_eq!(register(thread, "pc"), Some(0x401000));
    assert_eq!(register(thread, "sp"), Some(0x7000));
    assert_eq!(register(thread, "x0"), Some(0x1000));
    assert_eq!(register(thread, "x29"), Some(0x1000 + 29));
    assert_eq!(register(thread, "x30"), Some(0x1000 + 30));
}

#[test]
fn without_system_info_the_contexts_say_the_architecture() {
    let mut bytes = dump(CONTEXT_SIZE, 1);
    // The system info stream's directory entry (the first) names an unknown stream type.
    bytes[32..36].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
    let md = read_dump(bytes).expect("a minidump");
    assert_eq!(md.arch, Arch::X86_64);
    assert_eq!(register(&md.threads[0], "rip"), Some(0x401000));
    assert!(md.warnings.iter().any(|w| w.contains("thread contexts")), "{:?}", md.warnings);
}

#[test]
fn a_stack_named_twice_keeps_the_larger_region() {
    let mut bytes = dump(CONTEXT_SIZE, 1);
    // The thread's stack descriptor says 8 bytes, the memory list's 16 at the same address.
    let thread = 32 + 3 * 12 + 56 + 4;
    bytes[thread + 32..thread + 36].copy_from_slice(&8u32.to_le_bytes());
    let md = read_dump(bytes).expect("a minidump");
    assert_eq!(md.memory.bytes(0x7000, 16), Some(&[0xab; 16][..]));
}

/// A dump written by `write` of one thread of `arch` with every register
/// of its NT_PRSTATUS set (the context holds), 64 bytes of stack at 0x7000,
/// a module with a build id and the crash, read back.
fn written(arch: Arch, registers: Vec<(&'static str, u64)>) -> MinidumpFile {
    use super::write::{write, Exception, Module, Plan, Thread};
    let stack = [0x5au8; 64];
    let plan = Plan {
        arch,
        kernel: Some([6, 1, 0]),
        os_text: String::new(),
        processors: 2,
        time: 1_700_000_000,
        threads: vec![Thread { tid: 42, registers, stack: 0x7010..0x7040, thread_pointer: 0 }],
        memory: vec![(0x7000, &stack[..])],
        modules: vec![Module {
            start: 0x40_0000,
            end: 0x40_3000,
            name: "/usr/bin/prog".into(),
            build_id: Some(vec![0x11; 20]),
        }],
        exception: Some(Exception { tid: 42, signal: 11, code: 1, address: 0xdead }),
        pid: Some(4242),
        linux: vec![(
            StreamType::LinuxMaps,
            b"00400000-00403000 r-xp 00000000 00:00 0 /usr/bin/prog\n".to_vec(),
        )],
    };
    let mut out = Vec::new();
    let size = write(&plan, &mut out).expect("written");
    assert_eq!(size, out.len() as u64);
    read_dump(out).expect("a minidump")
}

#[test]
fn a_written_dump_reads_back_on_every_architecture() {
    for arch in Arch::ALL {
        // Each register its own value (wrapped to the context's width: 32-bit
        // registers, x86 segments of 16 bits, x86_64's eflags of 32).
        let names = arch.prstatus().names;
        let registers: Vec<(&'static str, u64)> =
            names.iter().enumerate().map(|(i, &n)| (n, 0x1000 + i as u64)).collect();
        let md = written(arch, registers.clone());
        assert_eq!(md.arch, arch);
        assert_eq!(md.warnings, Vec::<String>::new(), "{arch}");
        assert_eq!(md.threads.len(), 1);
        let thread = &md.threads[0];
        assert_eq!(thread.tid, 42);
        // Every register the reader gives is the one written.
        assert!(thread.registers.len() >= 10, "{arch}: {:?}", thread.registers);
        for (name, value) in &thread.registers {
            let sent = registers.iter().find(|(n, _)| n == name).map(|&(_, v)| v);
            assert_eq!(Some(*value), sent, "{arch}: {name}");
        }
        assert_eq!(md.memory.bytes(0x7000, 64), Some(&[0x5a; 64][..]), "{arch}");
        assert_eq!(md.pid, Some(4242));
        let e = md.exception.as_ref().expect("the exception");
        assert_eq!((e.tid, e.code, e.flags, e.address), (42, 11, 1, 0xdead));
        assert_eq!(e.reason, "SIGSEGV / SEGV_MAPERR");
        assert_eq!(md.system.os, "Linux");
        assert_eq!(md.system.os_version.as_deref().map(|v| v.starts_with("6.1.0")), Some(true));
        assert_eq!(md.modules.len(), 1);
        assert_eq!(md.modules[0].code_id.as_deref(), Some("11".repeat(20).as_str()));
        let maps = md.maps.as_ref().expect("the maps stream");
        assert_eq!(maps[0].path.as_deref(), Some("/usr/bin/prog"));
    }
}

#[test]
fn a_stack_outside_the_memory_is_an_error_not_a_bad_dump() {
    use super::write::{write, Plan, Thread};
    let plan = Plan {
        arch: Arch::X86_64,
        kernel: None,
        os_text: String::new(),
        processors: 0,
        time: 0,
        threads: vec![Thread {
            tid: 1,
            registers: vec![],
            stack: 0x9000..0x9100,
            thread_pointer: 0,
        }],
        memory: vec![],
        modules: vec![],
        exception: None,
        pid: None,
        linux: vec![],
    };
    let error = write(&plan, &mut Vec::new()).expect_err("refused");
    assert!(error.to_string().contains("0x9000..0x9100"), "{error}");
}
