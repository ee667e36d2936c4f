//! The perf.data reader on a file `perf record --call-graph dwarf` writes
//! at test time, checked record by record against perf's own raw dump
//! (`perf report -D`: every record with its offset, size, type and fields),
//! `perf buildid-list` and `perf report --header-only`.
//!
//! perf (Debian's `linux-perf`) must be installed: without it this test
//! fails, it does not skip.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use _core::source::perf::{Event, PerfFile, PERF_RECORD_MISC_MMAP_DATA};

mod alloc_counter;
use alloc_counter::{allocations, CountingAllocator};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Shell arithmetic in user space, a kernel-heavy copy, and two short
/// children (fork, exec, exit): user and kernel samples, MMAP2, COMM, FORK
/// and EXIT records.
const WORKLOAD: &str = "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; \
                        head -c 50000000 /dev/zero > /dev/null; /bin/true; /bin/true";

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn perf(args: &[&str]) -> Output {
    let out = Command::new("perf").args(args).output().unwrap_or_else(|e| {
        panic!("cannot run `perf` ({e}): install linux-perf (Debian) / perf to run this test")
    });
    assert!(
        out.status.success(),
        "perf {} failed ({}):\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Record `WORKLOAD` into DIR/perf.data, or in pipe mode (`-o -`, the
/// stream written to the file).
fn record(dir: &Path, pipe: bool) -> PathBuf {
    let data = dir.join(if pipe { "pipe.data" } else { "perf.data" });
    let output = if pipe { "-" } else { data.to_str().expect("temp path is UTF-8") };
    let mut command = Command::new("perf");
    command.args(["record", "-q", "-F", "999", "-e", "cpu-clock", "--call-graph", "dwarf"]);
    command.args(["-o", output, "--", "/bin/sh", "-c", WORKLOAD]);
    if pipe {
        command.stdout(File::create(&data).unwrap());
    }
    let status = command.status().unwrap_or_else(|e| {
        panic!("cannot run `perf` ({e}): install linux-perf (Debian) / perf to run this test")
    });
    assert!(status.success(), "perf record failed ({status})");
    data
}

fn hex(s: &str) -> u64 {
    let s = s.trim();
    let digits = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(digits, 16).unwrap_or_else(|e| panic!("not hex: {s:?}: {e}"))
}

fn dec<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.trim().parse().unwrap_or_else(|e| panic!("not a number: {s:?}: {e:?}"))
}

fn prot_string(prot: u32, flags: u32) -> String {
    let bit = |b: u32, c: char| if prot & b != 0 { c } else { '-' };
    let shared = if flags & 1 != 0 { 's' } else { 'p' }; // MAP_SHARED
    format!("{}{}{}{}", bit(1, 'r'), bit(2, 'w'), bit(4, 'x'), shared)
}

/// One record as `perf report -D` shows it.
#[derive(Default)]
struct Dumped {
    size: u64,
    type_: u32,
    /// The fields this test compares, in one canonical line.
    fields: Option<String>,
}

/// Parse `perf report -D`'s dump into records by file offset.
fn parse_dump(dump: &str) -> BTreeMap<u64, Dumped> {
    let mut records: BTreeMap<u64, Dumped> = BTreeMap::new();
    let mut current: Option<u64> = None; // the sample whose detail lines follow
    let mut chain: Vec<u64> = Vec::new();
    let mut regs: Vec<u64> = Vec::new();
    let mut head = String::new();
    for line in dump.lines() {
        // "0x2a0@FILE [0x60]: event: 10": one for every record.
        if let Some((offset, rest)) = line.split_once('@') {
            if let (Some(offset), Some((_, rest))) =
                (offset.strip_prefix("0x"), rest.split_once(" [0x"))
            {
                if let Some((size, type_)) = rest.split_once("]: event: ") {
                    let offset = hex(offset);
                    let d = records.entry(offset).or_default();
                    d.size = hex(size);
                    d.type_ = dec(type_);
                    continue;
                }
            }
        }
        // "TIME 0xOFFSET [0xSIZE]: PERF_RECORD_NAME...": the decoded record.
        if let Some((before, rest)) = line.split_once("]: PERF_RECORD_") {
            let tokens: Vec<&str> = before.split(' ').collect();
            let Some(at) = tokens.iter().position(|t| t.starts_with("[0x")) else { continue };
            if at < 2 {
                continue;
            }
            let offset = hex(tokens[at - 1]);
            let time = tokens[at - 2]; // "-1" before perf knows the attributes
            let fields = if let Some(rest) = rest.strip_prefix("SAMPLE(IP, ") {
                // "0x2): PID/TID: 0xIP period: N addr: A"
                let (misc, rest) = rest.split_once("): ").unwrap();
                let (pid_tid, rest) = rest.split_once(": ").unwrap();
                let (ip, rest) = rest.split_once(" period: ").unwrap();
                let (period, addr) = rest.split_once(" addr: ").unwrap();
                head = format!(
                    "SAMPLE t={time} misc={:#x} {pid_tid} ip={:#x} period={} addr={:#x}",
                    hex(misc),
                    hex(ip),
                    dec::<u64>(period),
                    hex(addr)
                );
                current = Some(offset);
                None
            } else if let Some(rest) = rest.strip_prefix("MMAP2 ") {
                Some(format!("MMAP2 t={time} {}", mmap_fields(rest, true)))
            } else if let Some(rest) = rest.strip_prefix("MMAP ") {
                Some(format!("MMAP t={time} {}", mmap_fields(rest, false)))
            } else if let Some(rest) = rest.strip_prefix("COMM") {
                // " exec: sh:3510/3510" or ": perf-exec:3510/3510"
                let exec = rest.starts_with(" exec");
                let (_, rest) = rest.split_once(": ").unwrap();
                let (comm, pid_tid) = rest.rsplit_once(':').unwrap();
                Some(format!("COMM t={time} {pid_tid} {comm:?} exec={exec}"))
            } else if let Some(rest) =
                rest.strip_prefix("FORK").or_else(|| rest.strip_prefix("EXIT"))
            {
                // "(PID:TID):(PPID:PTID)"
                let kind = if line.contains("PERF_RECORD_FORK") { "FORK" } else { "EXIT" };
                Some(format!("{kind} t={time} {rest}"))
            } else {
                None
            };
            if let Some(fields) = fields {
                records.get_mut(&offset).expect("record has a raw line").fields = Some(fields);
            }
            continue;
        }
        if current.is_none() {
            continue;
        }
        if let Some(entry) = line.strip_prefix("..... ") {
            // ".....  0: ffffffffffffff80": a callchain entry.
            chain.push(hex(entry.split_once(": ").unwrap().1));
        } else if let Some(reg) = line.strip_prefix(".... ") {
            // ".... SP    0x00007ffce2f10a70": a user register.
            regs.push(hex(reg.split_whitespace().nth(1).unwrap()));
        } else if let Some(size) = line.strip_prefix("... ustack: size ") {
            // The last line of a sample this test reads.
            let ustack: usize = dec(size.split_once(',').unwrap().0);
            let offset = current.take().unwrap();
            let line = format!("{head} chain={chain:x?} regs={regs:x?} ustack={ustack}");
            records.get_mut(&offset).expect("sample has a raw line").fields = Some(line);
            chain.clear();
            regs.clear();
        }
    }
    records
}

/// "3510/3510: [0xSTART(0xLEN) @ 0xPGOFF MAJ:MIN INO GEN]: rw-p NAME" (MMAP2)
/// or "-1/0: [0xSTART(0xLEN) @ 0xPGOFF]: x NAME" (MMAP).
fn mmap_fields(rest: &str, mmap2: bool) -> String {
    let (pid_tid, rest) = rest.split_once(": [").unwrap();
    let (inside, after) = rest.split_once("]: ").unwrap();
    let (start, rest) = inside.split_once('(').unwrap();
    let (len, rest) = rest.split_once(") @ ").unwrap();
    let mut tokens = rest.split(' ');
    let pgoff = hex(tokens.next().unwrap());
    let (prot, name) = after.split_once(' ').unwrap();
    let mut line =
        format!("{pid_tid} start={:#x} len={:#x} pgoff={pgoff:#x}", hex(start), hex(len));
    if mmap2 {
        let (maj, min) = tokens.next().unwrap().split_once(':').unwrap();
        let ino: u64 = dec(tokens.next().unwrap());
        let generation: u64 = dec(tokens.next().unwrap());
        line += &format!(" dev={:x}:{:x} ino={ino} gen={generation}", hex(maj), hex(min));
    }
    line + &format!(" {prot} {name:?}")
}

/// Our reader's view of the same record, in the same canonical line.
fn fields(event: &Event<'_>) -> Option<String> {
    let time = event.time().map_or("-".to_string(), |t| t.to_string());
    Some(match event {
        Event::Sample(s) => {
            let regs: Vec<u64> =
                s.regs.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
            format!(
                "SAMPLE t={time} misc={:#x} {}/{} ip={:#x} period={} addr={:#x} chain={:x?} regs={regs:x?} ustack={}",
                s.misc,
                s.pid,
                s.tid,
                s.ip,
                s.period.expect("perf record samples the period"),
                s.addr.expect("perf record --call-graph dwarf samples addr"),
                s.callchain.unwrap_or_default(),
                s.stack.len()
            )
        }
        Event::Mmap(m) => {
            let name = String::from_utf8_lossy(m.filename);
            let head = format!(
                "{}/{} start={:#x} len={:#x} pgoff={:#x}",
                m.pid, m.tid, m.start, m.len, m.pgoff
            );
            match (m.prot, m.flags, m.inode) {
                (Some(prot), Some(flags), Some(i)) => format!(
                    "MMAP2 t={time} {head} dev={:x}:{:x} ino={} gen={} {} {name:?}",
                    i.maj,
                    i.min,
                    i.ino,
                    i.generation,
                    prot_string(prot, flags)
                ),
                (None, None, None) => {
                    let kind = if m.misc & PERF_RECORD_MISC_MMAP_DATA != 0 { 'r' } else { 'x' };
                    format!("MMAP t={time} {head} {kind} {name:?}")
                }
                _ => panic!("MMAP2 with a build id: this test's parser does not read those"),
            }
        }
        Event::Comm { pid, tid, comm, exec, .. } => {
            format!("COMM t={time} {pid}/{tid} {:?} exec={exec}", String::from_utf8_lossy(comm))
        }
        Event::Fork { pid, ppid, tid, ptid, .. } => {
            format!("FORK t={time} ({pid}:{tid}):({ppid}:{ptid})")
        }
        Event::Exit { pid, ppid, tid, ptid, .. } => {
            format!("EXIT t={time} ({pid}:{tid}):({ppid}:{ptid})")
        }
        _ => return None,
    })
}

fn record_type(event: &Event<'_>) -> u32 {
    match event {
        Event::Sample(_) => 9,
        Event::Mmap(m) if m.prot.is_some() => 10,
        Event::Mmap(_) => 1,
        Event::Comm { .. } => 3,
        Event::Fork { .. } => 7,
        Event::Exit { .. } => 4,
        Event::FinishedRound => 68,
        Event::Other { type_ } => *type_,
        _ => panic!("an event kind this test does not know: {event:?}"),
    }
}

#[test]
fn file_records_match_perf_report_dump() {
    check_against_perf(false);
}

#[test]
fn pipe_records_match_perf_report_dump() {
    check_against_perf(true);
}

fn check_against_perf(pipe: bool) {
    let name = format!("stackwalk-perf-real-{}-{pipe}", std::process::id());
    let dir = TempDir(std::env::temp_dir().join(name));
    std::fs::create_dir_all(&dir.0).unwrap();
    let data = record(&dir.0, pipe);
    let path = data.to_str().unwrap();

    // perf numbers pipe-mode records from the end of the 16-byte header.
    let base = if pipe { 16 } else { 0 };
    let dump = String::from_utf8(perf(&["report", "-D", "-i", path]).stdout).unwrap();
    let expected = parse_dump(&dump);

    let mut reader = PerfFile::new(BufReader::new(File::open(&data).unwrap())).unwrap();
    let header = reader.header();
    assert_eq!(header.pipe_mode, pipe);
    assert!(header.feature_error.is_none(), "{:?}", header.feature_error);
    let (arch, hostname, os_release) =
        (header.arch.clone(), header.hostname.clone(), header.os_release.clone());
    let build_ids = header.build_ids.clone();
    let (mask, stack_size) = (header.attrs[0].sample_regs_user, header.attrs[0].sample_stack_user);
    assert_eq!(stack_size, 8192, "perf's default --call-graph dwarf stack size");
    // Pipe mode's header records (attributes, features) are read at open.
    let opened_at = reader.next_offset() - base;
    let absorbed = expected.range(..opened_at).count();
    assert!(expected.range(..opened_at).all(|(_, d)| d.type_ == 64 || d.type_ == 80));

    let mut seen = 0;
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    let mut kernel_chains = 0;
    loop {
        let offset = reader.next_offset() - base;
        let event = reader.next_event().unwrap_or_else(|e| panic!("{e}"));
        let Some(event) = event else { break };
        let type_ = record_type(&event);
        let ours = fields(&event);
        if let Event::Sample(s) = &event {
            assert_eq!(s.regs_mask, mask);
            kernel_chains += usize::from(s.callchain.is_some_and(|c| !c.is_empty()));
        }
        let size = reader.next_offset() - base - offset;
        let theirs =
            expected.get(&offset).unwrap_or_else(|| panic!("perf shows no record at {offset:#x}"));
        assert_eq!((type_, size), (theirs.type_, theirs.size), "record at {offset:#x}");
        if ours.is_some() {
            assert_eq!(ours, theirs.fields, "record at {offset:#x}");
        }
        *counts.entry(type_).or_default() += 1;
        seen += 1;
    }
    assert_eq!(seen + absorbed, expected.len(), "every record perf shows, and no other");
    eprintln!(
        "{}: {seen} records equal to perf report -D's (+{absorbed} header records), by type: \
         {counts:?}",
        if pipe { "pipe mode" } else { "file" }
    );
    let count = |t| counts.get(&t).copied().unwrap_or(0);
    assert!(count(9) >= 50, "too few samples to mean anything: {counts:?}");
    assert!(count(10) >= 10 && count(3) >= 3 && count(7) >= 2 && count(4) >= 2, "{counts:?}");
    assert!(kernel_chains >= 1, "no kernel-mode sample with a callchain");

    // The feature sections (pipe mode records no build ids).
    let listed = String::from_utf8(perf(&["buildid-list", "-i", path]).stdout).unwrap();
    let mut theirs: Vec<(String, String)> = listed
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(id, _)| !id.is_empty())
        .map(|(id, name)| (id.to_string(), name.trim().to_string()))
        .collect();
    let mut ours: Vec<(String, String)> = build_ids
        .iter()
        .map(|b| (b.build_id.iter().map(|x| format!("{x:02x}")).collect(), b.filename.clone()))
        .collect();
    theirs.sort();
    ours.sort();
    assert_eq!(ours.is_empty(), pipe);
    assert_eq!(ours, theirs);
    // Streaming the whole file again allocates nothing.
    let mut reader = PerfFile::new(BufReader::new(File::open(&data).unwrap())).unwrap();
    let (total, allocated) = allocations(|| {
        let mut total = 0u64;
        while let Some(event) = reader.next_event().unwrap() {
            total += event.time().unwrap_or(1) % 7;
        }
        total
    });
    std::hint::black_box(total);
    assert_eq!(allocated, 0, "allocations while reading {seen} records");

    let info = String::from_utf8(perf(&["report", "--header-only", "-i", path]).stdout).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("# {name} : ")))
            .map(|v| v.trim().to_string())
    };
    assert_eq!(arch, field("arch"));
    assert_eq!(hostname, field("hostname"));
    assert_eq!(os_release, field("os release"));
    assert!(arch.is_some());
}
