//! perf.data files built byte by byte: every record this reader
//! decodes, both file layouts, damaged and random input.

//!
//! This module builds the files byte by byte; `events` reads good ones,
//! `damage` damaged and random ones.

mod damage;
mod events;

use super::abi::{
    ATTR_FLAG_SAMPLE_ID_ALL, FILE_HEADER_SIZE, MAGIC, MAX_RECORD, PERF_RECORD_MISC_BUILD_ID_SIZE,
};
use super::*;
use std::io::Cursor;

/// What `perf record --call-graph dwarf` asks for, plus CPU.
const ST: u64 = PERF_SAMPLE_IP
    | PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_CPU
    | PERF_SAMPLE_PERIOD
    | PERF_SAMPLE_CALLCHAIN
    | PERF_SAMPLE_REGS_USER
    | PERF_SAMPLE_STACK_USER;
const X86_MASK: u64 = 0xff_0fff;
const KERNEL_PID: u32 = u32::MAX; // -1

fn put16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

/// `s`, NUL-terminated, padded with NULs to a multiple of 8.
fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v.resize(v.len().next_multiple_of(8), 0);
    v
}

fn record(type_: u32, misc: u16, body: &[u8]) -> Vec<u8> {
    let size = 8 + body.len();
    assert!(size % 8 == 0 && size < MAX_RECORD, "test record size {size}");
    let mut v = Vec::new();
    put32(&mut v, type_);
    put16(&mut v, misc);
    put16(&mut v, size as u16);
    v.extend_from_slice(body);
    v
}

/// A 128-byte `perf_event_attr` (PERF_ATTR_SIZE_VER7).
struct AttrSpec {
    sample_type: u64,
    read_format: u64,
    branch_sample_type: u64,
    regs: u64,
    stack: u32,
    sample_id_all: bool,
    ids: Vec<u64>,
}

impl AttrSpec {
    fn dwarf(ids: Vec<u64>) -> Self {
        AttrSpec {
            sample_type: ST,
            read_format: 0,
            branch_sample_type: 0,
            regs: X86_MASK,
            stack: 8192,
            sample_id_all: true,
            ids,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        put32(&mut v, 1); // PERF_TYPE_SOFTWARE
        put32(&mut v, 128);
        put64(&mut v, 0); // cpu-clock
        put64(&mut v, 999);
        put64(&mut v, self.sample_type);
        put64(&mut v, self.read_format);
        let flags = (1 << 10) | if self.sample_id_all { ATTR_FLAG_SAMPLE_ID_ALL } else { 0 };
        put64(&mut v, flags);
        v.resize(72, 0);
        put64(&mut v, self.branch_sample_type);
        put64(&mut v, self.regs);
        put32(&mut v, self.stack);
        v.resize(128, 0);
        v
    }
}

/// The `sample_id_all` trailer for `ST`: tid, time, cpu.
fn trailer(pid: u32, tid: u32, time: u64, cpu: u32) -> Vec<u8> {
    let mut v = Vec::new();
    put32(&mut v, pid);
    put32(&mut v, tid);
    put64(&mut v, time);
    put32(&mut v, cpu);
    put32(&mut v, 0);
    v
}

fn mmap2(
    pid: u32,
    start: u64,
    len: u64,
    pgoff: u64,
    name: &str,
    build_id: Option<&[u8]>,
    time: u64,
) -> Vec<u8> {
    let mut v = Vec::new();
    put32(&mut v, pid);
    put32(&mut v, pid);
    put64(&mut v, start);
    put64(&mut v, len);
    put64(&mut v, pgoff);
    let mut misc = PERF_RECORD_MISC_USER;
    match build_id {
        Some(id) => {
            misc |= PERF_RECORD_MISC_MMAP_BUILD_ID;
            v.push(id.len() as u8);
            v.extend_from_slice(&[0, 0, 0]);
            v.extend_from_slice(id);
            v.resize(v.len() + 20 - id.len(), 0);
        }
        None => {
            put32(&mut v, 8); // maj
            put32(&mut v, 1); // min
            put64(&mut v, 1234); // ino
            put64(&mut v, 7); // generation
        }
    }
    put32(&mut v, 5); // PROT_READ | PROT_EXEC
    put32(&mut v, 2); // MAP_PRIVATE
    v.extend(cstr(name));
    v.extend(trailer(pid, pid, time, 0));
    record(PERF_RECORD_MMAP2, misc, &v)
}

struct SampleSpec {
    misc: u16,
    ip: u64,
    pid: u32,
    tid: u32,
    time: u64,
    cpu: u32,
    period: u64,
    chain: Vec<u64>,
    regs: Option<Vec<u64>>,
    /// Stack bytes as recorded (`size`) and how many are valid (`dyn_size`).
    stack: Option<(Vec<u8>, u64)>,
}

impl SampleSpec {
    fn record(&self) -> Vec<u8> {
        let mut v = Vec::new();
        put64(&mut v, self.ip);
        put32(&mut v, self.pid);
        put32(&mut v, self.tid);
        put64(&mut v, self.time);
        put32(&mut v, self.cpu);
        put32(&mut v, 0);
        put64(&mut v, self.period);
        put64(&mut v, self.chain.len() as u64);
        for &ip in &self.chain {
            put64(&mut v, ip);
        }
        match &self.regs {
            Some(regs) => {
                put64(&mut v, 2); // PERF_SAMPLE_REGS_ABI_64
                for &r in regs {
                    put64(&mut v, r);
                }
            }
            None => put64(&mut v, 0),
        }
        match &self.stack {
            Some((data, dyn_size)) => {
                put64(&mut v, data.len() as u64);
                v.extend_from_slice(data);
                put64(&mut v, *dyn_size);
            }
            None => put64(&mut v, 0),
        }
        record(PERF_RECORD_SAMPLE, self.misc, &v)
    }
}

fn x86_regs() -> Vec<u64> {
    (0..64).filter(|i| X86_MASK & (1 << i) != 0).map(|i| 0x1000 + i).collect()
}

/// The records of a short recording, one of each kind, and how many.
fn standard_records() -> (Vec<u8>, usize) {
    let mut d = Vec::new();
    d.extend(mmap2(100, 0x40_0000, 0x1000, 0, "/usr/bin/prog", None, 10));
    let libc_id: Vec<u8> = (1..=20).collect();
    d.extend(mmap2(100, 0x7f00_0000_0000, 0x20_0000, 0x1000, "/lib/libc.so.6", Some(&libc_id), 11));
    // A kernel MMAP as perf synthesizes it: pid -1, zeroed trailer.
    let mut v = Vec::new();
    put32(&mut v, KERNEL_PID);
    put32(&mut v, 0);
    put64(&mut v, 0xffff_ffff_8100_0000);
    put64(&mut v, 0x120_0000);
    put64(&mut v, 0xffff_ffff_8100_0000);
    v.extend(cstr("[kernel.kallsyms]_text"));
    v.extend(trailer(0, 0, 0, 0));
    d.extend(record(PERF_RECORD_MMAP, PERF_RECORD_MISC_KERNEL, &v));
    let mut v = Vec::new();
    put32(&mut v, 100);
    put32(&mut v, 100);
    v.extend(cstr("prog"));
    v.extend(trailer(100, 100, 12, 0));
    d.extend(record(PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC, &v));
    let stack: Vec<u8> = (0..64).collect();
    d.extend(
        SampleSpec {
            misc: PERF_RECORD_MISC_USER,
            ip: 0x40_0123,
            pid: 100,
            tid: 101,
            time: 1000,
            cpu: 1,
            period: 1_001_001,
            chain: vec![PERF_CONTEXT_USER, 0x40_0123],
            regs: Some(x86_regs()),
            stack: Some((stack, 40)),
        }
        .record(),
    );
    for (type_, time) in [(PERF_RECORD_FORK, 1500), (PERF_RECORD_EXIT, 2500)] {
        let mut v = Vec::new();
        for id in [102, 100, 103, 101] {
            put32(&mut v, id);
        }
        put64(&mut v, time - 1); // the body's time, a little earlier
        v.extend(trailer(102, 103, time, 0));
        d.extend(record(type_, 0, &v));
    }
    d.extend(
        SampleSpec {
            misc: PERF_RECORD_MISC_KERNEL,
            ip: 0xffff_ffff_8100_0010,
            pid: 0,
            tid: 0,
            time: 2000,
            cpu: 0,
            period: 1_001_001,
            chain: vec![PERF_CONTEXT_KERNEL, 0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020],
            regs: None,
            stack: None,
        }
        .record(),
    );
    d.extend(record(PERF_RECORD_FINISHED_ROUND, 0, &[]));
    let mut v = Vec::new();
    put64(&mut v, 5); // id
    put64(&mut v, 3); // lost
    v.extend(trailer(0, 0, 2600, 0));
    d.extend(record(PERF_RECORD_LOST, 0, &v));
    (d, 10)
}

fn build_id_entry(pid: u32, misc: u16, id: &[u8], name: &str) -> Vec<u8> {
    // As perf writes them: the name padded to 64 bytes, so the size
    // (36 + 64n) is not a multiple of 8.
    let mut name = name.as_bytes().to_vec();
    name.resize((name.len() + 1).next_multiple_of(64), 0);
    let mut v = Vec::new();
    put32(&mut v, PERF_RECORD_HEADER_BUILD_ID);
    put16(&mut v, misc);
    put16(&mut v, (36 + name.len()) as u16);
    put32(&mut v, pid);
    v.extend_from_slice(id);
    v.resize(12 + 24, 0);
    if misc & PERF_RECORD_MISC_BUILD_ID_SIZE != 0 {
        v[12 + 20] = id.len() as u8;
    }
    v.extend(name);
    v
}

fn perf_str(s: &str) -> Vec<u8> {
    let body = cstr(s);
    let mut v = Vec::new();
    put32(&mut v, body.len() as u32);
    v.extend(body);
    v
}

fn standard_features() -> Vec<(u32, Vec<u8>)> {
    let mut build_ids =
        build_id_entry(KERNEL_PID, PERF_RECORD_MISC_KERNEL, &[0xaa; 20], "[kernel.kallsyms]");
    let misc = PERF_RECORD_MISC_USER | PERF_RECORD_MISC_BUILD_ID_SIZE;
    build_ids.extend(build_id_entry(KERNEL_PID, misc, &[0xbb; 16], "/usr/bin/prog"));
    let mut cmdline = Vec::new();
    put32(&mut cmdline, 2);
    cmdline.extend(perf_str("/usr/bin/perf"));
    cmdline.extend(perf_str("record"));
    vec![
        (HEADER_BUILD_ID, build_ids),
        (HEADER_HOSTNAME, perf_str("testhost")),
        (HEADER_ARCH, perf_str("x86_64")),
        (7, vec![2, 0, 0, 0, 2, 0, 0, 0]), // HEADER_NRCPUS, skipped
        (HEADER_CMDLINE, cmdline),
    ]
}

/// Offsets of a built file's parts.
struct Layout {
    data_offset: usize,
    data_end: usize,
}

/// A perf.data file: header, attributes, their ids, the data, the
/// feature table and sections (in bit order).
fn file(attrs: &[AttrSpec], data: &[u8], features: &[(u32, Vec<u8>)]) -> (Vec<u8>, Layout) {
    let attr_size = 128 + 16;
    let attrs_offset = FILE_HEADER_SIZE;
    let mut ids_offset = attrs_offset + attrs.len() * attr_size;
    let mut attr_section = Vec::new();
    let mut id_section = Vec::new();
    for a in attrs {
        attr_section.extend(a.bytes());
        put64(&mut attr_section, (ids_offset + id_section.len()) as u64);
        put64(&mut attr_section, 8 * a.ids.len() as u64);
        for &id in &a.ids {
            put64(&mut id_section, id);
        }
    }
    ids_offset = attrs_offset + attr_section.len();
    let data_offset = ids_offset + id_section.len();
    let data_end = data_offset + data.len();
    let mut bits = [0u64; 4];
    for &(f, _) in features {
        bits[f as usize / 64] |= 1 << (f % 64);
    }
    let mut v = Vec::new();
    v.extend_from_slice(MAGIC);
    for x in [
        FILE_HEADER_SIZE,
        attr_size,
        attrs_offset,
        attr_section.len(),
        data_offset,
        data.len(),
        0,
        0,
    ] {
        put64(&mut v, x as u64);
    }
    for b in bits {
        put64(&mut v, b);
    }
    v.extend(attr_section);
    v.extend(id_section);
    v.extend_from_slice(data);
    let mut section_at = data_end + 16 * features.len();
    let mut sections = Vec::new();
    for (_, body) in features {
        put64(&mut v, section_at as u64);
        put64(&mut v, body.len() as u64);
        section_at += body.len();
        sections.extend_from_slice(body);
    }
    v.extend(sections);
    (v, Layout { data_offset, data_end })
}

/// The same recording in pipe mode: features and attributes as records.
fn pipe(attrs: &[AttrSpec], data: &[u8], features: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(MAGIC);
    put64(&mut v, 16);
    for (f, body) in features {
        if *f == HEADER_BUILD_ID {
            continue; // pipe mode sends build ids as records, at the end
        }
        let mut r = Vec::new();
        put64(&mut r, u64::from(*f));
        r.extend_from_slice(body);
        r.resize(r.len().next_multiple_of(8), 0);
        v.extend(record(PERF_RECORD_HEADER_FEATURE, 0, &r));
    }
    for a in attrs {
        let mut r = a.bytes();
        for &id in &a.ids {
            put64(&mut r, id);
        }
        v.extend(record(PERF_RECORD_HEADER_ATTR, 0, &r));
    }
    v.extend_from_slice(data);
    if let Some((_, ids)) = features.iter().find(|(f, _)| *f == HEADER_BUILD_ID) {
        v.extend_from_slice(ids);
    }
    v
}

fn standard_file() -> (Vec<u8>, Layout) {
    let (data, _) = standard_records();
    file(&[AttrSpec::dwarf(vec![314, 315])], &data, &standard_features())
}

/// Events as (offset, Debug text), the error that ended them, the header.
type Reading = (Vec<(u64, String)>, Option<PerfError>, PerfHeader);

/// Every event of `bytes` as (offset, Debug text), and the error that
/// ended them; panics if reading does not end within a bound.
fn read_all(bytes: &[u8]) -> Result<Reading, PerfError> {
    let mut f = PerfFile::new(Cursor::new(bytes))?;
    let mut events = Vec::new();
    let limit = bytes.len() / 8 + 2;
    for _ in 0..limit {
        let offset = f.next_offset();
        match f.next_event() {
            Ok(Some(e)) => events.push((offset, format!("{e:?}"))),
            Ok(None) => return Ok((events, None, f.header)),
            Err(e) => {
                assert!(matches!(f.next_event(), Ok(None)), "an error ends the reading");
                return Ok((events, Some(e), f.header));
            }
        }
    }
    panic!("more than {limit} events from {} bytes", bytes.len());
}
