//! Good files: every field of every record, in both layouts.

use super::*;
use crate::arch::registers::Registers;
use crate::arch::Arch;

#[test]
fn reads_every_field_of_a_file() {
    let (bytes, layout) = standard_file();
    let mut f = PerfFile::new(Cursor::new(&bytes)).unwrap();
    let h = f.header();
    assert!(!h.pipe_mode);
    assert_eq!(h.data_offset, layout.data_offset as u64);
    assert_eq!(h.data_size, (layout.data_end - layout.data_offset) as u64);
    assert_eq!(h.arch.as_deref(), Some("x86_64"));
    assert_eq!(h.arch(), Some(Arch::X86_64));
    assert_eq!(h.hostname.as_deref(), Some("testhost"));
    assert_eq!(h.os_release, None);
    assert_eq!(h.cmdline, Some(vec!["/usr/bin/perf".to_string(), "record".to_string()]));
    assert!(h.feature_error.is_none(), "{:?}", h.feature_error);
    assert!(h.has_feature(HEADER_BUILD_ID) && h.has_feature(7) && !h.has_feature(HEADER_VERSION));
    assert_eq!(
        h.build_ids,
        vec![
            BuildIdEntry {
                pid: -1,
                misc: PERF_RECORD_MISC_KERNEL,
                build_id: vec![0xaa; 20],
                filename: "[kernel.kallsyms]".into()
            },
            BuildIdEntry {
                pid: -1,
                misc: PERF_RECORD_MISC_USER | PERF_RECORD_MISC_BUILD_ID_SIZE,
                build_id: vec![0xbb; 16],
                filename: "/usr/bin/prog".into()
            },
        ]
    );
    assert_eq!(h.attrs.len(), 1);
    let a = &h.attrs[0];
    assert_eq!((a.type_, a.config, a.sample_period), (1, 0, 999));
    assert_eq!(a.sample_type, ST);
    assert_eq!((a.sample_regs_user, a.sample_stack_user), (X86_MASK, 8192));
    assert!(a.sample_id_all);
    assert_eq!(a.ids, vec![314, 315]);

    let Some(Event::Mmap(m)) = f.next_event().unwrap() else { panic!("mmap2") };
    assert_eq!((m.pid, m.tid, m.start, m.len, m.pgoff), (100, 100, 0x40_0000, 0x1000, 0));
    assert_eq!(m.filename, b"/usr/bin/prog");
    assert_eq!((m.prot, m.flags, m.build_id), (Some(5), Some(2), None));
    assert_eq!(m.inode, Some(Inode { maj: 8, min: 1, ino: 1234, generation: 7 }));
    assert_eq!(m.time, Some(10));
    assert!(m.executable());
    let Some(Event::Mmap(m)) = f.next_event().unwrap() else { panic!("mmap2 with build id") };
    assert_eq!((m.start, m.len, m.pgoff), (0x7f00_0000_0000, 0x20_0000, 0x1000));
    assert_eq!(m.filename, b"/lib/libc.so.6");
    assert_eq!(m.build_id, Some(&(1..=20).collect::<Vec<u8>>()[..]));
    assert_eq!((m.inode, m.time), (None, Some(11)));
    let Some(Event::Mmap(m)) = f.next_event().unwrap() else { panic!("kernel mmap") };
    assert_eq!((m.pid, m.tid), (-1, 0));
    assert_eq!(
        (m.start, m.len, m.pgoff),
        (0xffff_ffff_8100_0000, 0x120_0000, 0xffff_ffff_8100_0000)
    );
    assert_eq!(m.filename, b"[kernel.kallsyms]_text");
    assert_eq!((m.prot, m.flags, m.build_id, m.inode, m.time), (None, None, None, None, Some(0)));
    assert_eq!(m.misc & PERF_RECORD_MISC_CPUMODE_MASK, PERF_RECORD_MISC_KERNEL);
    assert!(m.executable());
    let comm = f.next_event().unwrap();
    assert_eq!(
        comm,
        Some(Event::Comm { pid: 100, tid: 100, comm: b"prog", exec: true, time: Some(12) })
    );

    let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!("user sample") };
    assert_eq!((s.attr_index, s.cpumode(), s.id), (0, PERF_RECORD_MISC_USER, None));
    assert_eq!((s.ip, s.pid, s.tid, s.time), (0x40_0123, 100, 101, Some(1000)));
    assert_eq!((s.addr, s.cpu, s.period), (None, Some(1), Some(1_001_001)));
    assert_eq!(s.callchain.map(|c| c.to_vec()), Some(vec![PERF_CONTEXT_USER, 0x40_0123]));
    assert_eq!((s.regs_abi, s.regs_mask, s.regs.len()), (2, X86_MASK, 20 * 8));
    assert_eq!(s.stack, &(0..40).collect::<Vec<u8>>()[..]);
    assert_eq!(s.user_reg(0), Some(0x1000));
    assert_eq!(s.user_reg(8), Some(0x1008));
    assert_eq!(s.user_reg(16), Some(0x1010));
    assert_eq!(s.user_reg(23), Some(0x1017));
    assert_eq!((s.user_reg(12), s.user_reg(24), s.user_reg(99)), (None, None, None));
    let (pc, regs) = sample_registers(Arch::X86_64, &s);
    assert_eq!(pc, Some(0x1008));
    let expect = [(0, 0x1000), (1, 0x1003), (2, 0x1002), (3, 0x1001), (4, 0x1004), (5, 0x1005)];
    for (col, value) in
        expect.into_iter().chain([(6, 0x1006), (7, 0x1007), (8, 0x1010), (15, 0x1017)])
    {
        assert_eq!(regs.get(col), Some(value), "column {col}");
    }
    assert_eq!(regs.get(16), None, "the pc is given apart");
    // The same perf registers (ax bx cx dx si di bp sp ip) in i386's DWARF numbering.
    let (pc, regs) = sample_registers(Arch::I386, &s);
    assert_eq!(pc, Some(0x1008));
    let i386 = [(0, 0x1000), (3, 0x1001), (1, 0x1002), (2, 0x1003), (6, 0x1004), (7, 0x1005)];
    for (col, value) in i386.into_iter().chain([(5, 0x1006), (4, 0x1007)]) {
        assert_eq!(regs.get(col), Some(value), "i386 column {col}");
    }
    assert_eq!(regs.iter().count(), 8, "r8-r15 have no i386 column");

    let fork = f.next_event().unwrap();
    assert_eq!(fork, Some(Event::Fork { pid: 102, ppid: 100, tid: 103, ptid: 101, time: 1500 }));
    let exit = f.next_event().unwrap();
    assert_eq!(exit, Some(Event::Exit { pid: 102, ppid: 100, tid: 103, ptid: 101, time: 2500 }));
    let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!("kernel sample") };
    assert_eq!(
        (s.cpumode(), s.ip, s.pid, s.time, s.cpu),
        (PERF_RECORD_MISC_KERNEL, 0xffff_ffff_8100_0010, 0, Some(2000), Some(0))
    );
    assert_eq!(
        s.callchain.map(|c| c.to_vec()),
        Some(vec![PERF_CONTEXT_KERNEL, 0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020])
    );
    assert_eq!((s.regs_abi, s.regs_mask, s.regs, s.stack), (0, 0, &[][..], &[][..]));
    assert_eq!(sample_registers(Arch::X86_64, &s), (None, Registers::new()));
    assert_eq!(f.next_event().unwrap(), Some(Event::FinishedRound));
    assert_eq!(f.next_event().unwrap(), Some(Event::Other { type_: PERF_RECORD_LOST }));
    assert_eq!(f.next_offset(), layout.data_end as u64);
    assert_eq!(f.next_event().unwrap(), None);
    assert_eq!(f.next_event().unwrap(), None);
}

#[test]
fn pipe_mode_gives_the_same_events() {
    let (data, count) = standard_records();
    let attrs = [AttrSpec::dwarf(vec![314, 315])];
    let (file_bytes, _) = file(&attrs, &data, &standard_features());
    let (file_events, err, file_header) = read_all(&file_bytes).unwrap();
    assert!(err.is_none());
    assert_eq!(file_events.len(), count);

    let bytes = pipe(&attrs, &data, &standard_features());
    let mut f = PerfFile::new(Cursor::new(&bytes)).unwrap();
    assert!(f.header().pipe_mode);
    assert_eq!(f.header().attrs, file_header.attrs, "attributes known at open");
    assert_eq!(f.header().arch.as_deref(), Some("x86_64"));
    assert_eq!(f.header().cmdline, file_header.cmdline);
    let mut events = Vec::new();
    while let Some(e) = f.next_event().unwrap() {
        events.push(format!("{e:?}"));
    }
    let expected: Vec<String> = file_events.into_iter().map(|(_, e)| e).collect();
    assert_eq!(events[..count], expected[..]);
    let build_id = format!("{:?}", Event::Other { type_: PERF_RECORD_HEADER_BUILD_ID });
    assert_eq!(events[count..], [build_id.clone(), build_id]);
    assert_eq!(f.header().build_ids, file_header.build_ids);
}

#[test]
fn several_attributes_are_told_apart_by_id() {
    // With PERF_SAMPLE_IDENTIFIER (first word of a sample, last of a trailer).
    let base = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
    let spec = |st, ids| AttrSpec { sample_type: st, ids, ..AttrSpec::dwarf(vec![]) };
    let attrs = [spec(base, vec![10, 11]), spec(base | PERF_SAMPLE_CALLCHAIN, vec![20])];
    let sample = |id: u64, chain: &[u64]| {
        let mut v = Vec::new();
        for x in [id, 0x1234, 7 | (8 << 32), 99] {
            put64(&mut v, x);
        }
        if id == 20 {
            put64(&mut v, chain.len() as u64);
            chain.iter().for_each(|&ip| put64(&mut v, ip));
        }
        record(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, &v)
    };
    let mut data = sample(11, &[]);
    data.extend(sample(20, &[PERF_CONTEXT_USER, 0x1234]));
    data.extend(sample(99, &[]));
    let mut v = Vec::new();
    put32(&mut v, 5);
    put32(&mut v, 5);
    v.extend(cstr("x"));
    for x in [5 | (5 << 32), 77, 20] {
        put64(&mut v, x); // trailer: tid, time, identifier
    }
    data.extend(record(PERF_RECORD_COMM, 0, &v));
    let (bytes, _) = file(&attrs, &data, &[]);
    let mut f = PerfFile::new(Cursor::new(&bytes)).unwrap();
    let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!() };
    assert_eq!(
        (s.attr_index, s.id, s.ip, s.pid, s.tid, s.time),
        (0, Some(11), 0x1234, 7, 8, Some(99))
    );
    assert_eq!(s.callchain, None);
    let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!() };
    assert_eq!((s.attr_index, s.id), (1, Some(20)));
    assert_eq!(s.callchain.map(|c| c.to_vec()), Some(vec![PERF_CONTEXT_USER, 0x1234]));
    assert_eq!(f.next_event().unwrap(), Some(Event::Other { type_: PERF_RECORD_SAMPLE }));
    let comm = f.next_event().unwrap();
    assert_eq!(comm, Some(Event::Comm { pid: 5, tid: 5, comm: b"x", exec: false, time: Some(77) }));

    // With PERF_SAMPLE_ID only (older kernels): after ip, tid, time.
    let st = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID | PERF_SAMPLE_CPU;
    let attrs = [spec(st, vec![1]), spec(st, vec![2])];
    let mut v = Vec::new();
    for x in [0x99, 3 | (4 << 32), 55, 2, 1] {
        put64(&mut v, x);
    }
    let mut data = record(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, &v);
    let mut v = Vec::new();
    for x in [1 | (1 << 32), 1] {
        put64(&mut v, x); // pid, ppid, tid, ptid
    }
    put64(&mut v, 66);
    for x in [1 | (1 << 32), 66, 2, 1] {
        put64(&mut v, x); // trailer: tid, time, id, cpu
    }
    data.extend(record(PERF_RECORD_EXIT, 0, &v));
    let (bytes, _) = file(&attrs, &data, &[]);
    let mut f = PerfFile::new(Cursor::new(&bytes)).unwrap();
    let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!() };
    assert_eq!((s.attr_index, s.id, s.ip, s.time, s.cpu), (1, Some(2), 0x99, Some(55), Some(1)));
    let exit = f.next_event().unwrap();
    assert_eq!(exit, Some(Event::Exit { pid: 1, ppid: 1, tid: 1, ptid: 0, time: 66 }));
}

#[test]
fn fields_before_the_registers_are_skipped() {
    let st = PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_READ
        | PERF_SAMPLE_RAW
        | PERF_SAMPLE_BRANCH_STACK
        | PERF_SAMPLE_REGS_USER
        | PERF_SAMPLE_STACK_USER
        | (1 << 14); // PERF_SAMPLE_WEIGHT, after the stack: left unread
    let mask = (1u64 << 33) - 1; // aarch64: x0..x30, sp, pc
    let attrs = [AttrSpec {
        sample_type: st,
        read_format: PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED,
        branch_sample_type: PERF_SAMPLE_BRANCH_HW_INDEX,
        regs: mask,
        stack: 16,
        sample_id_all: false,
        ids: vec![1],
    }];
    let mut v = Vec::new();
    put64(&mut v, 0x40_1000);
    put64(&mut v, 9 | (9 << 32));
    for x in [2, 123, 1, 10, 2, 20] {
        put64(&mut v, x); // read: nr, enabled, {value, id} x 2
    }
    put32(&mut v, 12);
    v.extend_from_slice(&[0xee; 12]); // raw
    for x in [1, 0, 0xa, 0xb, 0xc] {
        put64(&mut v, x); // branch stack: nr, hw_idx, {from, to, flags}
    }
    put64(&mut v, 2);
    for i in 0..33 {
        put64(&mut v, 0x100 + i);
    }
    put64(&mut v, 16);
    v.extend_from_slice(&[0x5a; 16]);
    put64(&mut v, 16);
    put64(&mut v, 0xdead); // weight
    let data = record(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, &v);
    let mut v = Vec::new();
    put32(&mut v, 9);
    put32(&mut v, 9);
    v.extend(cstr("no trailer"));
    let mut data = [data, record(PERF_RECORD_COMM, 0, &v)].concat();
    // An AUXTRACE record's payload, which its size does not count.
    let mut v = Vec::new();
    for x in [16, 0, 0, 0, 0] {
        put64(&mut v, x);
    }
    v.extend_from_slice(&[0xff; 16]);
    data.extend(record(PERF_RECORD_AUXTRACE, 0, &v[..40]));
    data.extend_from_slice(&v[40..]);
    data.extend(record(PERF_RECORD_FINISHED_ROUND, 0, &[]));
    let (bytes, _) = file(&attrs, &data, &[]);
    let mut f = PerfFile::new(Cursor::new(&bytes)).unwrap();
    assert_eq!(f.header().arch(), Some(Arch::Aarch64), "guessed from the register mask");
    let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!() };
    assert_eq!((s.ip, s.pid, s.regs_abi, s.regs_mask), (0x40_1000, 9, 2, mask));
    assert_eq!(s.stack, &[0x5a; 16]);
    assert_eq!(
        (s.user_reg(29), s.user_reg(31), s.user_reg(32)),
        (Some(0x11d), Some(0x11f), Some(0x120))
    );
    let (pc, regs) = sample_registers(Arch::Aarch64, &s);
    assert_eq!(pc, Some(0x120));
    assert_eq!((regs.get(0), regs.get(30), regs.get(31)), (Some(0x100), Some(0x11e), Some(0x11f)));
    let comm = f.next_event().unwrap();
    assert_eq!(
        comm,
        Some(Event::Comm { pid: 9, tid: 9, comm: b"no trailer", exec: false, time: None })
    );
    assert_eq!(f.next_event().unwrap(), Some(Event::Other { type_: PERF_RECORD_AUXTRACE }));
    assert_eq!(f.next_event().unwrap(), Some(Event::FinishedRound));
    assert_eq!(f.next_event().unwrap(), None);
}
