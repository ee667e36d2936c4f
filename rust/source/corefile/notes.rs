//! The notes of a core's `PT_NOTE` segments: `NT_PRSTATUS` (one per
//! thread), `NT_SIGINFO` (after the `NT_PRSTATUS` of the thread it is of),
//! `NT_PRPSINFO`, `NT_AUXV` and `NT_FILE`. A 32-bit process's notes are the
//! kernel's compat structures: `unsigned long` fields and pointers of 4
//! bytes. A note that is too short or damaged is a warning and is skipped;
//! a note whose size runs past its segment ends the reading of the segment.

use std::collections::BTreeMap;

use super::le;
use crate::arch::Arch;

const NT_PRSTATUS: u32 = 1;
const NT_PRPSINFO: u32 = 3;
const NT_AUXV: u32 = 6;
const NT_SIGINFO: u32 = 0x5349_4749;
const NT_FILE: u32 = 0x4649_4c45;
const AT_NULL: u64 = 0;
const DEFAULT_PAGE: u64 = 4096;

/// What one `NT_PRSTATUS` says of a thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadNotes {
    /// `pr_pid`: the thread's id.
    pub tid: i32,
    /// `pr_cursig`: the signal the thread was stopped by (0: none).
    pub cursig: i16,
    /// `pr_reg`, in the order of [`Arch::prstatus`]'s names.
    pub registers: Vec<u64>,
    /// The `NT_SIGINFO` that follows the thread's `NT_PRSTATUS`.
    pub siginfo: Option<SigInfo>,
}

impl ThreadNotes {
    /// The registers by name.
    pub fn named_registers(&self, arch: Arch) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        arch.prstatus().names.iter().copied().zip(self.registers.iter().copied())
    }
}

/// `si_signo`, `si_code` and `si_addr` of a `siginfo_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigInfo {
    pub signo: i32,
    pub code: i32,
    pub address: u64,
}

/// An `NT_FILE` entry: runtime addresses `start..end` map the file at
/// `path` from byte `offset` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileMapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub path: Vec<u8>,
}

/// What a core's notes say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notes {
    pub threads: Vec<ThreadNotes>,
    /// `NT_PRPSINFO`'s `pr_pid`, `pr_fname` (the command, cut to 15 bytes)
    /// and `pr_psargs` (the command line, cut to 80 bytes).
    pub pid: Option<u32>,
    pub fname: Option<String>,
    pub psargs: Option<String>,
    /// `NT_AUXV`: type → value, the first value of a type kept.
    pub auxv: BTreeMap<u64, u64>,
    /// `NT_FILE`'s mappings (None: no readable `NT_FILE`).
    pub files: Option<Vec<FileMapping>>,
    /// `NT_FILE`'s page size, else 4096.
    pub page_size: u64,
}

impl Default for Notes {
    fn default() -> Self {
        Notes {
            threads: Vec::new(),
            pid: None,
            fname: None,
            psargs: None,
            auxv: BTreeMap::new(),
            files: None,
            page_size: DEFAULT_PAGE,
        }
    }
}

/// Read the notes of every note segment (`segments`: their bytes).
pub(super) fn parse(segments: &[&[u8]], arch: Arch, warnings: &mut Vec<String>) -> Notes {
    let mut notes = Notes::default();
    let mut reader = Reader { arch, word: arch.word_size() as usize, warnings };
    for data in segments {
        let len = data.len() as u64;
        let mut pos = 0u64;
        while pos + 12 <= len {
            let at = pos as usize;
            let (Some(namesz), Some(descsz), Some(n_type)) =
                (le(data, at, 4), le(data, at + 4, 4), le(data, at + 8, 4))
            else {
                break;
            };
            // Sizes are 32-bit and pos is below 2^26 + 12: no overflow in u64.
            let name_at = pos + 12;
            let desc_at = name_at + align4(namesz);
            if desc_at + descsz > len {
                reader.warn(format!(
                    "damaged note (type {n_type:#x}): it and the notes after it skipped"
                ));
                break;
            }
            let name = &data[name_at as usize..(name_at + namesz) as usize];
            if trim_nuls(name) == b"CORE" {
                let desc = &data[desc_at as usize..(desc_at + descsz) as usize];
                reader.note(&mut notes, n_type as u32, desc);
            }
            pos = desc_at + align4(descsz);
        }
    }
    if notes.threads.is_empty() {
        reader.warn("core has no threads (no NT_PRSTATUS note)".to_owned());
    }
    notes
}

pub(super) fn align4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

fn trim_nuls(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &bytes[..end]
}

/// The C string in `bytes` (up to its first NUL), decoded as UTF-8 with
/// replacement characters.
fn cstring(bytes: &[u8]) -> String {
    let end = memchr::memchr(0, bytes).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

struct Reader<'w> {
    arch: Arch,
    word: usize,
    warnings: &'w mut Vec<String>,
}

impl Reader<'_> {
    fn warn(&mut self, warning: String) {
        self.warnings.push(warning);
    }

    fn note(&mut self, notes: &mut Notes, n_type: u32, desc: &[u8]) {
        match n_type {
            NT_PRSTATUS => self.prstatus(notes, desc),
            NT_SIGINFO => self.siginfo(notes, desc),
            NT_PRPSINFO => self.prpsinfo(notes, desc),
            NT_AUXV => {
                for pair in desc.chunks_exact(2 * self.word) {
                    let (key, value) = (self.word_at(pair, 0), self.word_at(pair, self.word));
                    if key == AT_NULL {
                        break;
                    }
                    notes.auxv.entry(key).or_insert(value);
                }
            }
            NT_FILE => self.nt_file(notes, desc),
            _ => {}
        }
    }

    /// The word at `at` in `bytes` (0 where `bytes` is too short: callers
    /// check the length first).
    fn word_at(&self, bytes: &[u8], at: usize) -> u64 {
        le(bytes, at, self.word).unwrap_or(0)
    }

    fn prstatus(&mut self, notes: &mut Notes, desc: &[u8]) {
        let layout = self.arch.prstatus();
        let words = layout.names.len();
        if desc.len() < layout.regs + self.word * words {
            self.warn(format!("NT_PRSTATUS note too short ({} bytes), skipped", desc.len()));
            return;
        }
        let cursig = le(desc, layout.cursig, 2).unwrap_or(0) as u16 as i16;
        let tid = le(desc, layout.pid, 4).unwrap_or(0) as u32 as i32;
        let registers =
            (0..words).map(|i| self.word_at(desc, layout.regs + i * self.word)).collect();
        notes.threads.push(ThreadNotes { tid, cursig, registers, siginfo: None });
    }

    /// `siginfo_t`: `si_signo`, `si_errno`, `si_code` (ints), then (after
    /// padding to a word) `si_addr`.
    fn siginfo(&mut self, notes: &mut Notes, desc: &[u8]) {
        let address_at = if self.word == 8 { 16 } else { 12 };
        let thread = notes.threads.last_mut();
        let Some(thread) = thread.filter(|_| desc.len() >= address_at + self.word) else {
            self.warn("NT_SIGINFO note out of place or too short, skipped".to_owned());
            return;
        };
        thread.siginfo = Some(SigInfo {
            signo: le(desc, 0, 4).unwrap_or(0) as u32 as i32,
            code: le(desc, 8, 4).unwrap_or(0) as u32 as i32,
            address: le(desc, address_at, self.word).unwrap_or(0),
        });
    }

    /// `struct elf_prpsinfo`: `pr_pid` after the state bytes, `pr_flag` (a
    /// word) and `pr_uid`/`pr_gid`; `pr_fname` (16 bytes) and `pr_psargs`
    /// (80) after the four ids.
    fn prpsinfo(&mut self, notes: &mut Notes, desc: &[u8]) {
        let pid_at = if self.word == 8 { 24 } else { 12 };
        let fname_at = pid_at + 16;
        let psargs_at = fname_at + 16;
        let (Some(pid), Some(fname), Some(psargs)) = (
            le(desc, pid_at, 4),
            desc.get(fname_at..fname_at + 16),
            desc.get(psargs_at..psargs_at + 80),
        ) else {
            self.warn("NT_PRPSINFO note too short, skipped".to_owned());
            return;
        };
        notes.pid = Some(pid as u32);
        notes.fname = Some(cstring(fname)).filter(|s| !s.is_empty());
        let psargs = cstring(psargs);
        // As Python's str.rstrip(): Unicode white space and the separators
        // U+001C-U+001F.
        let psargs =
            psargs.trim_end_matches(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c));
        notes.psargs = Some(psargs.to_owned()).filter(|s| !s.is_empty());
    }

    /// `NT_FILE`: count and page size, then (start, end, file offset in
    /// pages) per mapping, then the mappings' paths, NUL-terminated.
    fn nt_file(&mut self, notes: &mut Notes, desc: &[u8]) {
        let w = self.word;
        if desc.len() < 2 * w {
            self.warn("NT_FILE note too short, skipped".to_owned());
            return;
        }
        let (count, page) = (self.word_at(desc, 0), self.word_at(desc, w));
        let table_end = count
            .checked_mul(3 * w as u64)
            .and_then(|n| n.checked_add(2 * w as u64))
            .filter(|&end| end <= desc.len() as u64);
        let (Some(table_end), true) = (table_end, page.is_power_of_two()) else {
            self.warn("NT_FILE note damaged, skipped".to_owned());
            return;
        };
        let (table, names) = desc.split_at(table_end as usize);
        let names: Vec<&[u8]> = names.split(|&b| b == 0).collect();
        if (names.len() as u64) < count {
            self.warn("NT_FILE note damaged (missing file names), skipped".to_owned());
            return;
        }
        let mut files = Vec::with_capacity(count as usize);
        for (entry, name) in table[2 * w..].chunks_exact(3 * w).zip(names) {
            let (start, end, pages) =
                (self.word_at(entry, 0), self.word_at(entry, w), self.word_at(entry, 2 * w));
            let Some(offset) = pages.checked_mul(page) else {
                self.warn("NT_FILE note damaged, skipped".to_owned());
                return;
            };
            files.push(FileMapping { start, end, offset, path: name.to_vec() });
        }
        notes.page_size = page;
        notes.files = Some(files);
    }
}
