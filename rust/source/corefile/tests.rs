//! Cores built byte by byte: each structure where the kernel puts it, then
//! damaged in every way a test can name, and in every way a loop can try.

use super::notes::align4;
use super::*;

/// A core file under construction: its notes and its PT_LOAD segments.
struct Core {
    arch: Arch,
    notes: Vec<u8>,
    /// (vaddr, bytes in the file, memsz, p_flags)
    loads: Vec<(u64, Vec<u8>, u64, u32)>,
}

impl Core {
    fn new(arch: Arch) -> Core {
        Core { arch, notes: Vec::new(), loads: Vec::new() }
    }

    fn word(&self) -> usize {
        self.arch.word_size() as usize
    }

    fn words(&self, values: &[u64]) -> Vec<u8> {
        let w = self.word();
        values.iter().flat_map(|v| v.to_le_bytes()[..w].to_vec()).collect()
    }

    fn note(mut self, name: &[u8], n_type: u32, desc: &[u8]) -> Core {
        let name_len = name.len() + 1; // with its NUL
        self.notes.extend((name_len as u32).to_le_bytes());
        self.notes.extend((desc.len() as u32).to_le_bytes());
        self.notes.extend(n_type.to_le_bytes());
        self.notes.extend(name);
        self.notes.resize(self.notes.len() + align4(name_len as u64) as usize - name.len(), 0);
        self.notes.extend(desc);
        self.notes.resize(self.notes.len() + align4(desc.len() as u64) as usize - desc.len(), 0);
        self
    }

    fn prstatus(self, tid: i32, cursig: i16, first_register: u64) -> Core {
        let layout = self.arch.prstatus();
        let mut desc = vec![0u8; layout.regs + self.word() * layout.names.len() + 8];
        desc[layout.cursig..layout.cursig + 2].copy_from_slice(&cursig.to_le_bytes());
        desc[layout.pid..layout.pid + 4].copy_from_slice(&tid.to_le_bytes());
        let regs: Vec<u64> = (0..layout.names.len() as u64).map(|i| first_register + i).collect();
        let bytes = self.words(&regs);
        desc[layout.regs..layout.regs + bytes.len()].copy_from_slice(&bytes);
        self.note(b"CORE", NT_PRSTATUS, &desc)
    }

    fn siginfo(self, signo: i32, code: i32, address: u64) -> Core {
        let mut desc = vec![0u8; 128];
        desc[0..4].copy_from_slice(&signo.to_le_bytes());
        desc[8..12].copy_from_slice(&code.to_le_bytes());
        let at = if self.word() == 8 { 16 } else { 12 };
        let bytes = self.words(&[address]);
        desc[at..at + bytes.len()].copy_from_slice(&bytes);
        self.note(b"CORE", NT_SIGINFO, &desc)
    }

    fn prpsinfo(self, pid: u32, fname: &[u8], psargs: &[u8]) -> Core {
        let pid_at = if self.word() == 8 { 24 } else { 12 };
        let mut desc = vec![0u8; pid_at + 4 + 12 + 16 + 80];
        desc[pid_at..pid_at + 4].copy_from_slice(&pid.to_le_bytes());
        desc[pid_at + 16..pid_at + 16 + fname.len()].copy_from_slice(fname);
        desc[pid_at + 32..pid_at + 32 + psargs.len()].copy_from_slice(psargs);
        self.note(b"CORE", NT_PRPSINFO, &desc)
    }

    fn auxv(self, pairs: &[(u64, u64)]) -> Core {
        let mut values: Vec<u64> = pairs.iter().flat_map(|&(k, v)| [k, v]).collect();
        values.extend([0, 0]);
        let desc = self.words(&values);
        self.note(b"CORE", NT_AUXV, &desc)
    }

    /// (start, end, offset in pages, path) per mapping.
    fn nt_file(self, page: u64, files: &[(u64, u64, u64, &str)]) -> Core {
        let mut values = vec![files.len() as u64, page];
        values.extend(files.iter().flat_map(|&(s, e, o, _)| [s, e, o]));
        let mut desc = self.words(&values);
        for (.., path) in files {
            desc.extend(path.as_bytes());
            desc.push(0);
        }
        self.note(b"CORE", NT_FILE, &desc)
    }

    fn load(mut self, vaddr: u64, bytes: Vec<u8>, memsz: u64, flags: u32) -> Core {
        self.loads.push((vaddr, bytes, memsz, flags));
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let (layout, machine) = match self.arch {
            Arch::I386 => (&ELF32, object::elf::EM_386),
            Arch::Aarch64 => (&ELF64, object::elf::EM_AARCH64),
            _ => (&ELF64, object::elf::EM_X86_64),
        };
        let w = layout.word;
        let phnum = 1 + self.loads.len();
        let mut out = vec![0u8; layout.header];
        out[..4].copy_from_slice(ELF_MAGIC);
        out[4] = if w == 8 { ELFCLASS64 } else { ELFCLASS32 };
        out[5] = ELFDATA2LSB;
        out[6] = 1;
        out[16..18].copy_from_slice(&4u16.to_le_bytes());
        out[18..20].copy_from_slice(&machine.to_le_bytes());
        put(&mut out, layout.e_phoff, w, layout.header as u64);
        put(&mut out, layout.e_phentsize, 2, layout.phdr as u64);
        put(&mut out, layout.e_phnum, 2, phnum as u64);
        let mut offset = (layout.header + phnum * layout.phdr) as u64;
        let phdr = |p_type: u64, flags: u64, offset: u64, vaddr: u64, filesz: u64, memsz| {
            let mut h = vec![0u8; layout.phdr];
            put(&mut h, 0, 4, p_type);
            put(&mut h, layout.p_flags, 4, flags);
            put(&mut h, layout.p_offset, w, offset);
            put(&mut h, layout.p_vaddr, w, vaddr);
            put(&mut h, layout.p_filesz, w, filesz);
            put(&mut h, layout.p_memsz, w, memsz);
            h
        };
        let mut headers = phdr(PT_NOTE, 4, offset, 0, self.notes.len() as u64, 0);
        let mut body = self.notes.clone();
        offset += self.notes.len() as u64;
        for (vaddr, bytes, memsz, flags) in &self.loads {
            let size = bytes.len() as u64;
            headers.extend(phdr(PT_LOAD, u64::from(*flags), offset, *vaddr, size, *memsz));
            body.extend(bytes);
            offset += size;
        }
        out.extend(headers);
        out.extend(body);
        out
    }

    fn open(&self) -> Result<CoreFile, CoreError> {
        CoreFile::from_data(Data::Owned(self.bytes()))
    }
}

fn put(out: &mut [u8], at: usize, size: usize, value: u64) {
    out[at..at + size].copy_from_slice(&value.to_le_bytes()[..size]);
}

const NT_PRSTATUS: u32 = 1;
const NT_PRPSINFO: u32 = 3;
const NT_AUXV: u32 = 6;
const NT_SIGINFO: u32 = 0x5349_4749;
const NT_FILE: u32 = 0x4649_4c45;

/// A core of two threads of a 64-bit or 32-bit process, every note there.
fn full(arch: Arch) -> Core {
    Core::new(arch)
        .prpsinfo(4242, b"crash_deep", b"./crash_deep one two  ")
        .prstatus(4243, 11, 0x1000)
        .siginfo(11, 1, 0xdead)
        .prstatus(4244, 0, 0x2000)
        .auxv(&[(9, 0x40_1000), (33, 0x7000), (9, 0x1)])
        .nt_file(
            0x1000,
            &[(0x40_0000, 0x40_1000, 0, "/bin/prog"), (0x40_1000, 0x40_3000, 1, "/bin/prog")],
        )
        .load(0x40_0000, b"\x7fELF----".to_vec(), 0x1000, 4)
        .load(0x7000, vec![7; 64], 0x2000, 5)
}

#[test]
fn reads_every_note_of_a_64_bit_core() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let core = full(arch).open().unwrap();
        assert_eq!(core.arch, arch);
        assert!(core.warnings.is_empty(), "{:?}", core.warnings);
        let notes = &core.notes;
        assert_eq!(notes.threads.iter().map(|t| t.tid).collect::<Vec<_>>(), [4243, 4244]);
        let first = &notes.threads[0];
        assert_eq!(first.cursig, 11);
        assert_eq!(first.siginfo, Some(SigInfo { signo: 11, code: 1, address: 0xdead }));
        assert_eq!(notes.threads[1].siginfo, None);
        let regs: Vec<_> = first.named_registers(arch).collect();
        assert_eq!(regs.len(), arch.prstatus().names.len());
        assert_eq!(regs[0], (arch.prstatus().names[0], 0x1000));
        let pc = regs.iter().find(|(n, _)| *n == arch.pc_name()).unwrap();
        let at = arch.prstatus().names.iter().position(|n| *n == arch.pc_name()).unwrap();
        assert_eq!(pc.1, 0x1000 + at as u64);
        assert_eq!(notes.pid, Some(4242));
        assert_eq!(notes.fname.as_deref(), Some("crash_deep"));
        assert_eq!(notes.psargs.as_deref(), Some("./crash_deep one two"));
        // The first value of a type wins; AT_NULL ends the vector.
        assert_eq!(notes.auxv.get(&9), Some(&0x40_1000));
        assert_eq!(notes.auxv.len(), 2);
        assert_eq!(notes.page_size, 0x1000);
        let files = notes.files.as_ref().unwrap();
        assert_eq!(files[1].offset, 0x1000);
        assert_eq!(files[1].path, b"/bin/prog");
        assert_eq!(core.segments.len(), 2);
        assert_eq!(core.segments[1].end(), 0x9000);
        assert_eq!(core.memory.bytes(0x7000, 2), Some(&[7u8, 7][..]));
        assert_eq!(core.string(0x40_0000, 4096), None, "no NUL before the end of the segment");
    }
}

#[test]
fn reads_a_32_bit_core() {
    let core = full(Arch::I386).open().unwrap();
    assert!(core.warnings.is_empty(), "{:?}", core.warnings);
    let first = &core.notes.threads[0];
    let names = Arch::I386.prstatus().names;
    assert_eq!(names.len(), 17);
    let eip = first.named_registers(Arch::I386).find(|(n, _)| *n == "eip").unwrap();
    assert_eq!(eip.1, 0x1000 + 12);
    assert_eq!(first.siginfo.map(|s| s.address), Some(0xdead));
    assert_eq!(core.notes.pid, Some(4242));
    assert_eq!(core.notes.files.as_ref().map(Vec::len), Some(2));
}

fn error(bytes: &[u8]) -> String {
    match CoreFile::from_data(Data::Owned(bytes.to_vec())) {
        Ok(_) => "read".to_owned(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn headers_that_cannot_be_read() {
    let good = full(Arch::X86_64).bytes();
    assert_eq!(error(b""), "not an ELF file");
    assert_eq!(error(b"this is not an ELF file"), "not an ELF file");
    let mut big_endian = good.clone();
    big_endian[5] = 2;
    assert_eq!(error(&big_endian), "not a little-endian 32-bit or 64-bit ELF file");
    assert_eq!(error(&good[..40]), "truncated ELF header");
    for (e_type, what) in [
        (1u16, "a relocatable object"),
        (2, "an executable"),
        (3, "a shared object or PIE executable"),
        (9, "an ELF file of type 9"),
    ] {
        let mut other = good.clone();
        other[16..18].copy_from_slice(&e_type.to_le_bytes());
        assert_eq!(error(&other), format!("not a core file: it is {what}"));
    }
    let mut riscv = good.clone();
    riscv[18..20].copy_from_slice(&243u16.to_le_bytes());
    assert_eq!(error(&riscv), "unsupported architecture (ELF machine 243, 64-bit)");
    let mut x86_64_as_32 = full(Arch::I386).bytes();
    x86_64_as_32[18..20].copy_from_slice(&62u16.to_le_bytes());
    assert_eq!(error(&x86_64_as_32), "unsupported architecture (ELF machine 62, 32-bit)");
    let mut phentsize = good.clone();
    phentsize[54] = 32;
    assert_eq!(error(&phentsize), "bad program header size 32");
    assert_eq!(error(&good[..100]), "truncated program headers at 0x40");
    let mut xnum = good.clone();
    xnum[56..58].copy_from_slice(&0xffffu16.to_le_bytes());
    xnum[40..48].copy_from_slice(&(1u64 << 63).to_le_bytes());
    assert_eq!(error(&xnum), "truncated section header at 0x8000000000000000");
}

#[test]
fn pn_xnum_takes_the_count_from_section_header_0() {
    let mut bytes = full(Arch::X86_64).bytes();
    let shoff = bytes.len() as u64;
    bytes.extend(vec![0u8; 64]); // section header 0
    bytes[(shoff + 44) as usize..(shoff + 48) as usize].copy_from_slice(&3u32.to_le_bytes());
    bytes[56..58].copy_from_slice(&0xffffu16.to_le_bytes());
    bytes[40..48].copy_from_slice(&shoff.to_le_bytes());
    let core = CoreFile::from_data(Data::Owned(bytes)).unwrap();
    assert_eq!(core.segments.len(), 2);
    assert_eq!(core.notes.threads.len(), 2);
}

#[test]
fn open_reports_what_the_system_says() {
    let missing = CoreFile::open(Path::new("/nonexistent/core")).err().unwrap();
    assert_eq!(missing.to_string(), "No such file or directory");
    let dir = CoreFile::open(Path::new("/")).err().unwrap();
    assert_eq!(dir.to_string(), "is a directory");
    // Not opened, so never read: a device or a FIFO could block or never end.
    let device = CoreFile::open(Path::new("/dev/null")).err().unwrap();
    assert_eq!(device.to_string(), "is a character device");
}

fn warnings(core: &Core) -> Vec<String> {
    core.open().unwrap().warnings
}

#[test]
fn damaged_notes_are_warnings() {
    let arch = Arch::X86_64;
    let short = vec![0u8; 100];
    let w = warnings(&Core::new(arch).note(b"CORE", NT_PRSTATUS, &short));
    assert_eq!(
        w,
        [
            "NT_PRSTATUS note too short (100 bytes), skipped",
            "core has no threads (no NT_PRSTATUS note)"
        ]
    );
    let w = warnings(&Core::new(arch).siginfo(11, 1, 0).prstatus(1, 0, 0));
    assert_eq!(w, ["NT_SIGINFO note out of place or too short, skipped"]);
    let w = warnings(&Core::new(arch).prstatus(1, 0, 0).note(b"CORE", NT_PRPSINFO, &[0; 40]));
    assert_eq!(w, ["NT_PRPSINFO note too short, skipped"]);
    let w = warnings(&Core::new(arch).prstatus(1, 0, 0).note(b"CORE", NT_FILE, &[1; 8]));
    assert_eq!(w, ["NT_FILE note too short, skipped"]);
    let odd_page = Core::new(arch).prstatus(1, 0, 0).nt_file(0x1001, &[(0, 1, 0, "a")]);
    assert_eq!(warnings(&odd_page), ["NT_FILE note damaged, skipped"]);
    let no_names = Core::new(arch).prstatus(1, 0, 0).note(
        b"CORE",
        NT_FILE,
        &Core::new(arch).words(&[3, 0x1000, 0, 1, 0, 0, 1, 0, 0, 1, 0]),
    );
    assert_eq!(warnings(&no_names), ["NT_FILE note damaged (missing file names), skipped"]);
    let huge_offset =
        Core::new(arch).prstatus(1, 0, 0).nt_file(0x1000, &[(0, 1, u64::MAX / 2, "a")]);
    let core = huge_offset.open().unwrap();
    assert_eq!(core.warnings, ["NT_FILE note damaged, skipped"]);
    assert_eq!(core.notes.files, None);
    // Not "CORE": another owner's note, not read.
    let w = warnings(&Core::new(arch).prstatus(1, 0, 0).note(b"LINUX", NT_FILE, &[1; 8]));
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn a_note_past_its_segment_ends_the_segment() {
    let mut core = full(Arch::X86_64);
    // The fourth note, the second NT_PRSTATUS, claims more than the segment
    // holds. Each note: 12 bytes of header, "CORE\0" padded to 8, the desc.
    let fourth = [136, 336, 128].iter().map(|desc| 12 + 8 + desc).sum::<usize>();
    core.notes[fourth + 4..fourth + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let read = core.open().unwrap();
    assert_eq!(read.warnings, ["damaged note (type 0x1): it and the notes after it skipped"]);
    assert_eq!(read.notes.threads.len(), 1);
    assert!(read.notes.files.is_none());
}

#[test]
fn truncated_files() {
    let bytes = full(Arch::X86_64).bytes();
    // Inside the second segment's bytes: 40 bytes of it missing.
    let core = CoreFile::from_data(Data::Owned(bytes[..bytes.len() - 40].to_vec())).unwrap();
    assert_eq!(core.warnings, ["core is truncated: 40 bytes of segments missing"]);
    // Inside the notes: the note segment is cut, and so are both segments.
    let headers = 64 + 3 * 56;
    let core = CoreFile::from_data(Data::Owned(bytes[..headers + 200].to_vec())).unwrap();
    assert_eq!(core.warnings[0], "note segment at 0xe8 is truncated");
    assert!(core.warnings[1].starts_with("core is truncated: "), "{:?}", core.warnings);
    assert_eq!(core.notes.threads.len(), 0);
}

#[test]
fn note_segments_too_large_or_past_the_end() {
    let mut bytes = full(Arch::X86_64).bytes();
    let phdr = 64;
    bytes[phdr + 8..phdr + 16].copy_from_slice(&(1u64 << 63).to_le_bytes());
    let core = CoreFile::from_data(Data::Owned(bytes.clone())).unwrap();
    assert_eq!(core.warnings[0], "note segment at 0x8000000000000000 lies past the end");
    bytes[phdr + 32..phdr + 40].copy_from_slice(&(1u64 << 27).to_le_bytes());
    let core = CoreFile::from_data(Data::Owned(bytes)).unwrap();
    assert_eq!(core.warnings[0], "note segment at 0x8000000000000000 too large, skipped");
}

/// Memory holding a dynamic section at 0x1000, r_debug at 0x2000 and
/// link_map entries from 0x3000 (each 0x100 apart, names at +0x80), as a
/// 64-bit or 32-bit process lays them out.
struct Process {
    word: usize,
    memory: Vec<u8>,
}

const BASE: u64 = 0x1000;

impl Process {
    fn new(word: usize) -> Process {
        Process { word, memory: vec![0; 0x4000] }
    }

    fn put_word(&mut self, address: u64, value: u64) {
        let at = (address - BASE) as usize;
        self.memory[at..at + self.word].copy_from_slice(&value.to_le_bytes()[..self.word]);
    }

    fn put_str(&mut self, address: u64, s: &str) {
        let at = (address - BASE) as usize;
        self.memory[at..at + s.len()].copy_from_slice(s.as_bytes());
    }

    /// `names` in order; each link_map's l_next is the next, the last's 0;
    /// the executable's entry (l_ld = the dynamic section) first.
    fn link_map(mut self, version: u64, names: &[&str]) -> Process {
        let w = self.word as u64;
        self.put_word(0x1000, 1); // DT_NEEDED
        self.put_word(0x1000 + 2 * w, 21); // DT_DEBUG
        self.put_word(0x1000 + 3 * w, 0x2000);
        self.put_word(0x2000, version);
        self.put_word(0x2000 + w, 0x3000);
        for i in 0..=names.len() as u64 {
            let entry = 0x3000 + 0x100 * i;
            self.put_word(entry, 0x10_0000 * i); // l_addr
            self.put_word(entry + w, if i == 0 { 0 } else { entry + 0x80 });
            self.put_word(entry + 2 * w, if i == 0 { 0x1000 } else { 0x50_0000 + i });
            let next = if i == names.len() as u64 { 0 } else { entry + 0x100 };
            self.put_word(entry + 3 * w, next);
            if i > 0 {
                self.put_str(entry + 0x80, names[i as usize - 1]);
            }
        }
        self
    }

    fn read(&self, dynamic: u64) -> (Vec<LinkMapEntry>, Vec<String>) {
        let memory = SegmentMemory::new(
            Data::Owned(self.memory.clone()),
            &[Segment { address: BASE, offset: 0, size: self.memory.len() as u64 }],
        );
        linkmap::read_link_map(&memory, self.word as u64, dynamic)
    }
}

fn names(entries: &[LinkMapEntry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e.name.as_ref().map_or("?".into(), |n| String::from_utf8_lossy(n).into()))
        .collect()
}

#[test]
fn link_map_in_load_order_without_the_executable() {
    for word in [8, 4] {
        let process = Process::new(word).link_map(1, &["/lib/libc.so.6", "/lib/ld.so"]);
        let (entries, warnings) = process.read(0x1000);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(names(&entries), ["/lib/libc.so.6", "/lib/ld.so"]);
        assert_eq!(entries[1].bias, 0x20_0000);
        assert_eq!(entries[1].dynamic, 0x50_0002);
    }
}

#[test]
fn link_map_damage() {
    let process = Process::new(8).link_map(1, &["a", "b", "c"]);
    let (_, warnings) = process.read(0x9000);
    assert_eq!(warnings, ["link map: cannot read the executable's dynamic section at 0x9000"]);
    // A cycle: c's l_next back to a.
    let mut cycle = Process::new(8).link_map(1, &["a", "b", "c"]);
    cycle.put_word(0x3300 + 24, 0x3100);
    let (entries, warnings) = cycle.read(0x1000);
    assert_eq!(names(&entries), ["a", "b", "c"]);
    assert_eq!(warnings, ["link map: cycle at 0x3100"]);
    // An entry out of the core, and a name out of it.
    let mut broken = Process::new(8).link_map(1, &["a", "b"]);
    broken.put_word(0x3100 + 8, 0x9_0000);
    broken.put_word(0x3100 + 24, 0x9_0000);
    let (entries, warnings) = broken.read(0x1000);
    assert_eq!(names(&entries), ["?"]);
    assert_eq!(warnings, ["link map: cannot read entry at 0x90000"]);
    // No DT_DEBUG value: a static program, nothing to say.
    let mut unset = Process::new(8).link_map(1, &["a"]);
    unset.put_word(0x1000 + 24, 0);
    assert_eq!(unset.read(0x1000), (vec![], vec![]));
    let mut no_r_debug = Process::new(8).link_map(1, &["a"]);
    no_r_debug.put_word(0x1000 + 24, 0x8_0000);
    let (_, warnings) = no_r_debug.read(0x1000);
    assert_eq!(warnings, ["link map: cannot read r_debug at 0x80000"]);
}

#[test]
fn link_map_namespaces() {
    // r_version 2: r_next at 40 chains a second namespace, whose r_map is
    // the second entry; then back to the first r_debug (a cycle, ended).
    let mut process = Process::new(8).link_map(2, &["a", "b"]);
    process.put_word(0x3100 + 24, 0); // a ends the first namespace
    process.put_word(0x2000 + 40, 0x2800);
    process.put_word(0x2800, 2);
    process.put_word(0x2808, 0x3200);
    process.put_word(0x2800 + 40, 0x2000);
    let (entries, warnings) = process.read(0x1000);
    assert_eq!(names(&entries), ["a", "b"]);
    assert!(warnings.is_empty(), "{warnings:?}");
    // r_version 1: r_next is not there to read.
    process.put_word(0x2000, 1);
    assert_eq!(names(&process.read(0x1000).0), ["a"]);
}

#[test]
fn strings_run_through_adjacent_segments() {
    let mut data = vec![b'x'; 32];
    data[20] = 0;
    let memory = SegmentMemory::new(
        Data::Owned(data),
        &[
            Segment { address: 0x1000, offset: 0, size: 16 },
            Segment { address: 0x1010, offset: 16, size: 16 },
        ],
    );
    assert_eq!(memory.string(0x1008, 4096).map(|s| s.len()), Some(12));
    assert_eq!(memory.string(0x1008, 10), None, "longer than the limit");
    assert_eq!(memory.string(0x1015, 4096), None, "unterminated");
    assert_eq!(memory.string(u64::MAX, 4096), None);
}

/// A xorshift generator: the same sequence on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Everything a caller does with a core that opened.
fn exercise(core: &CoreFile) {
    for address in [0, 0x1000, 0x2000, 0x40_0000, 0x7000, u64::MAX - 3] {
        let _ = core.link_map(address);
        let _ = core.string(address, 4096);
    }
    for t in &core.notes.threads {
        let _ = t.named_registers(core.arch).count();
    }
    let _ = core.segments.iter().map(LoadSegment::end).count();
}

#[test]
fn damaged_cores_never_panic() {
    let mut originals = vec![full(Arch::X86_64).bytes(), full(Arch::I386).bytes()];
    let mut linked = Core::new(Arch::X86_64).prstatus(1, 0, 0).auxv(&[(9, 0x1000)]);
    linked = linked.load(BASE, Process::new(8).link_map(2, &["a", "b"]).memory, 0x4000, 6);
    originals.push(linked.bytes());
    let mut rng = Rng(0x5eed);
    for original in &originals {
        // Every length.
        for len in 0..original.len() {
            if let Ok(core) = CoreFile::from_data(Data::Owned(original[..len].to_vec())) {
                exercise(&core);
            }
        }
        // Bytes flipped, words overwritten with edge values, anywhere.
        for _ in 0..4000 {
            let mut bytes = original.clone();
            for _ in 0..1 + rng.next() % 4 {
                let at = (rng.next() % bytes.len() as u64) as usize;
                match rng.next() % 3 {
                    0 => bytes[at] ^= 1 << (rng.next() % 8),
                    1 => bytes[at] = rng.next() as u8,
                    _ => {
                        let value = [0, 1, 0x7fff_ffff, u32::MAX as u64, u64::MAX][at % 5];
                        let end = (at + 8).min(bytes.len());
                        bytes[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
                    }
                }
            }
            if let Ok(core) = CoreFile::from_data(Data::Owned(bytes)) {
                exercise(&core);
            }
        }
    }
}

fn streamed(bytes: &[u8], max_bytes: u64) -> Result<stream::Streamed, CoreError> {
    let limits = stream::StreamLimits {
        max_bytes,
        deadline: None,
        dump: dump::DumpOptions { stack_bytes: 64, around: 16, ..Default::default() },
    };
    stream::stream(&mut &bytes[..], &limits)
}

/// A core whose thread's registers (each 0x9000 + its index: the sp too)
/// point into a 4 KiB stack segment, after a 64 KiB segment nothing points
/// into.
fn with_stack(arch: Arch) -> Core {
    Core::new(arch).prstatus(1, 11, 0x9000).load(0x2_0000, vec![1; 0x1_0000], 0x1_0000, 6).load(
        0x9000,
        (0..0x1000u32).map(|i| i as u8).collect(),
        0x1000,
        6,
    )
}

#[test]
fn a_streamed_core_keeps_the_stack_and_drops_the_rest() {
    for arch in [Arch::X86_64, Arch::I386] {
        let core = with_stack(arch);
        let bytes = core.bytes();
        let out = streamed(&bytes, u64::MAX).expect("streamed");
        assert_eq!(out.stopped, None);
        let small = CoreFile::from_data(Data::Owned(out.core)).expect("a core");
        assert_eq!(small.notes.threads, core.open().expect("a core").notes.threads);
        // Every segment is still there, by address and size...
        let spans = |c: &CoreFile| -> u64 { c.segments.iter().map(|s| s.memsz).sum() };
        assert_eq!(spans(&small), 0x1_1000, "{arch}");
        // ...but only the bytes near the registers (all in 0x9000..0xa000) are kept.
        let kept: u64 = small.segments.iter().map(|s| s.filesz).sum();
        assert!(0 < kept && kept < 0x400, "{arch}: {kept}");
        let sp = small.notes.threads[0]
            .named_registers(arch)
            .find(|(n, _)| *n == "rsp" || *n == "esp")
            .map(|(_, v)| v)
            .expect("sp");
        let whole = core.open().expect("a core");
        assert_eq!(small.memory.bytes(sp, 32), whole.memory.bytes(sp, 32), "{arch}");
        assert_eq!(small.memory.bytes(0x2_0000, 1), None, "{arch}");
    }
}

#[test]
fn every_truncated_or_limited_stream_is_read_or_refused_without_panic() {
    let bytes = with_stack(Arch::X86_64).bytes();
    for len in (0..bytes.len()).step_by(61) {
        let _ = streamed(&bytes[..len], u64::MAX);
        let _ = streamed(&bytes, len as u64);
    }
    let limited = streamed(&bytes, 4096).expect("the headers and notes are in 4 KiB");
    assert!(limited.stopped.expect("stopped").contains("size limit"));
    assert_eq!(limited.read, 4096);
}
