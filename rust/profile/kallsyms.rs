//! The kernel's symbols, from kallsyms.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::UNIX_EPOCH;

use crate::source::memory::Data;
use crate::symbolize::lines::{SectionBytes, SectionCache};

/// One function symbol: its address, and the start and length of its name
/// in the kallsyms text.
type Symbol = (u64, u32, u32);

/// The bytes of a [`Symbol`] in a stored table: the address, then the
/// name's start and length, little endian.
const STORED: usize = 16;

/// The kernel's function symbols (a kallsyms file), sorted by address;
/// names are spans of the file's text, kept whole.
pub(super) struct KernelSymbols {
    symbols: Table,
    /// The file (mapped when it can be): names are checked as UTF-8 when
    /// looked up.
    text: Data,
}

/// The symbols by address: made from the text, or as stored in the cache
/// ([`STORED`] bytes each) by an earlier process.
enum Table {
    Made(Vec<Symbol>),
    Stored(SectionBytes),
}

impl Table {
    fn len(&self) -> usize {
        match self {
            Table::Made(symbols) => symbols.len(),
            Table::Stored(bytes) => bytes.len() / STORED,
        }
    }

    /// Symbol `i` (below `len`).
    fn get(&self, i: usize) -> Symbol {
        match self {
            Table::Made(symbols) => symbols.get(i).copied().unwrap_or_default(),
            Table::Stored(bytes) => {
                let Some(at) = bytes.get(i * STORED..(i + 1) * STORED) else { return (0, 0, 0) };
                let word = |r: std::ops::Range<usize>| {
                    at[r].iter().rev().fold(0u64, |value, &b| value << 8 | u64::from(b))
                };
                (word(0..8), word(8..12) as u32, word(12..16) as u32)
            }
        }
    }
}

impl KernelSymbols {
    /// perf's copy of the recording machine's kallsyms, taken at record time
    /// (its build-id cache: the path and the kernel's build id), else this
    /// machine's `/proc/kallsyms`.
    pub(super) fn read(cached: Option<(PathBuf, Vec<u8>)>) -> Option<KernelSymbols> {
        let from_cache = cached.and_then(|(path, build_id)| {
            let text = crate::space::debugfile::map(&path)?;
            KernelSymbols::stored(SectionCache::from_env(), &path, &build_id, text)
        });
        from_cache.or_else(|| {
            // A /proc file cannot be mapped.
            KernelSymbols::parse(Data::Owned(std::fs::read("/proc/kallsyms").ok()?))
        })
    }

    /// The symbols of perf's kallsyms file at `path`, of the kernel with
    /// `build_id`: the table an earlier process made of this version of the
    /// file (its size and modification time), kept in stackwalk's cache,
    /// else made now (and stored).
    fn stored(
        cache: Option<&SectionCache>,
        path: &Path,
        build_id: &[u8],
        text: Data,
    ) -> Option<KernelSymbols> {
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let since = modified.and_then(|t| t.duration_since(UNIX_EPOCH).ok());
        let (Some(cache), Some(since)) = (cache, since) else {
            return KernelSymbols::parse(text);
        };
        let name = format!("kallsyms-{}-{}", text.len(), since.as_nanos());
        let mut made = None;
        let stored = cache.derived(build_id, &name, || {
            let symbols = parse_symbols(&text)?;
            let mut bytes = Vec::with_capacity(symbols.len() * STORED);
            for &(address, at, len) in &symbols {
                bytes.extend_from_slice(&address.to_le_bytes());
                bytes.extend_from_slice(&at.to_le_bytes());
                bytes.extend_from_slice(&len.to_le_bytes());
            }
            made = Some(symbols);
            Some(bytes)
        })?;
        let symbols = match made {
            Some(symbols) => Table::Made(symbols),
            None if stored.len() % STORED == 0 && !stored.is_empty() => Table::Stored(stored),
            None => return KernelSymbols::parse(text),
        };
        Some(KernelSymbols { symbols, text })
    }

    pub(super) fn parse(text: Data) -> Option<KernelSymbols> {
        let symbols = Table::Made(parse_symbols(&text)?);
        Some(KernelSymbols { symbols, text })
    }

    pub(super) fn name(&self, i: usize) -> &str {
        let (_, at, len) = self.symbols.get(i);
        let name = self.text.get(at as usize..(at as usize).saturating_add(len as usize));
        std::str::from_utf8(name.unwrap_or_default()).unwrap_or("[invalid name]")
    }

    pub(super) fn address_of(&self, name: &str) -> Option<u64> {
        (0..self.symbols.len()).find(|&i| self.name(i) == name).map(|i| self.symbols.get(i).0)
    }

    #[cfg(test)]
    pub(super) fn lookup(&self, ip: u64) -> Option<(&str, u64)> {
        self.lookup_index(ip).map(|(name, offset, _)| (name, offset))
    }

    pub(super) fn lookup_index(&self, ip: u64) -> Option<(&str, u64, usize)> {
        // The number of symbols at or below `ip`: the last of them is `ip`'s.
        let (mut below, mut size) = (0, self.symbols.len());
        while size > 0 {
            let half = size / 2;
            if self.symbols.get(below + half).0 <= ip {
                below += half + 1;
                size -= half + 1;
            } else {
                size = half;
            }
        }
        let i = below.checked_sub(1)?;
        Some((self.name(i), ip.wrapping_sub(self.symbols.get(i).0), i))
    }
}

/// The function symbols of a kallsyms text, by address (aliases in the
/// text's order); None where there are none (kptr_restrict hides the
/// addresses).
fn parse_symbols(bytes: &[u8]) -> Option<Vec<Symbol>> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(bytes.len() / 40);
    let mut at = 0;
    let mut sorted = true;
    // "ffffffff81000000 T _stext\t[module]\n": the address, a space, the
    // type, a space, the name, and for a module a tab and its name.
    while at < bytes.len() {
        let (addr, digits) = hex_prefix(&bytes[at..]);
        at += digits;
        // The name ends at a tab (a module's) or at the end of the line.
        let stop = memchr::memchr2(b'\t', b'\n', &bytes[at..]).map_or(bytes.len(), |n| at + n);
        let (kind_at, name_at) = (at, at + 3);
        at = match bytes.get(stop) {
            Some(b'\n') => stop + 1,
            _ => memchr::memchr(b'\n', &bytes[stop.min(bytes.len())..])
                .map_or(bytes.len(), |n| stop + n + 1),
        };
        if name_at >= stop || !matches!(&bytes[kind_at..name_at], b" t " | b" T " | b" w " | b" W ")
        {
            continue;
        }
        if addr != 0 {
            sorted &= symbols.last().is_none_or(|last| last.0 <= addr);
            symbols.push((addr, name_at as u32, (stop - name_at) as u32));
        }
    }
    if symbols.is_empty() {
        return None;
    }
    if !sorted {
        // kallsyms is nearly sorted: a stable sort keeps aliases in order.
        symbols.sort_by_key(|s| s.0);
    }
    Some(symbols)
}

/// Hex digit values by byte; 0x80 for a byte that is not one.
pub(super) const HEX_DIGITS: [u8; 256] = {
    let mut table = [0x80u8; 256];
    let mut i = 0;
    while i < 16 {
        table[b"0123456789abcdef"[i] as usize] = i as u8;
        table[b"0123456789ABCDEF"[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// The hex number `bytes` start with, and how many digits it has (more than
/// 16 keep the last 16). A 64-bit kernel's addresses, 16 digits, take no
/// branch per digit.
pub(super) fn hex_prefix(bytes: &[u8]) -> (u64, usize) {
    let not_digit = |at: usize| bytes.get(at).is_none_or(|&b| HEX_DIGITS[b as usize] & 0x80 != 0);
    if let Some(head) = bytes.get(..16) {
        let (mut value, mut bad) = (0u64, 0u8);
        for &b in head {
            let digit = HEX_DIGITS[b as usize];
            bad |= digit;
            value = value << 4 | u64::from(digit & 15);
        }
        if bad & 0x80 == 0 && not_digit(16) {
            return (value, 16);
        }
    }
    let mut value = 0u64;
    let mut at = 0;
    while !not_digit(at) {
        value = value << 4 | u64::from(HEX_DIGITS[bytes[at] as usize]);
        at += 1;
    }
    (value, at)
}

/// The kernel's symbols, read on a thread of their own as soon as the
/// recording is known to have kernel callchains, else on first use; and
/// moved to where the recording's kernel was (KASLR), by the symbol perf
/// recorded the kernel's mapping at (`[kernel.kallsyms]_text`).
#[derive(Default)]
pub(super) struct KernelSymbolsLoader {
    pub(super) table: OnceLock<Option<KernelSymbols>>,
    pub(super) reading: Mutex<Option<JoinHandle<Option<KernelSymbols>>>>,
    /// (symbol, address) of the kernel's mapping in the recording.
    pub(super) reference: OnceLock<(String, u64)>,
    /// Recording address − table address.
    pub(super) shift: OnceLock<u64>,
}

impl KernelSymbolsLoader {
    pub(super) fn start(&self, cached: Option<(PathBuf, Vec<u8>)>) {
        if let Ok(mut reading) = self.reading.lock() {
            if reading.is_none() && self.table.get().is_none() {
                *reading = std::thread::Builder::new()
                    .name("kallsyms".into())
                    .spawn(move || KernelSymbols::read(cached))
                    .ok();
            }
        }
    }

    pub(super) fn lookup(&self, ip: u64) -> Option<(&str, u64)> {
        self.lookup_index(ip).map(|(name, offset, _)| (name, offset))
    }

    /// As `lookup`, with the symbol's index.
    pub(super) fn lookup_index(&self, ip: u64) -> Option<(&str, u64, usize)> {
        let table = self
            .table
            .get_or_init(|| {
                let thread = self.reading.lock().ok().and_then(|mut r| r.take());
                match thread {
                    Some(thread) => thread.join().ok().flatten(),
                    None => KernelSymbols::read(None),
                }
            })
            .as_ref()?;
        let shift = *self.shift.get_or_init(|| {
            let Some((symbol, recorded)) = self.reference.get() else { return 0 };
            table.address_of(symbol).map_or(0, |at| recorded.wrapping_sub(at))
        });
        table.lookup_index(ip.wrapping_sub(shift))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_prefixes() {
        assert_eq!(hex_prefix(b"ffffffff81000000 T _stext"), (0xffff_ffff_8100_0000, 16));
        assert_eq!(hex_prefix(b"FFFFFFFF8100000a"), (0xffff_ffff_8100_000a, 16));
        assert_eq!(hex_prefix(b"c1000000 T _stext"), (0xc100_0000, 8));
        assert_eq!(hex_prefix(b"ffffffff8100000g"), (0x0fff_ffff_f810_0000, 15));
        assert_eq!(hex_prefix(b"1ffffffff81000000 T"), (0xffff_ffff_8100_0000, 17));
        assert_eq!(hex_prefix(b" T x"), (0, 0));
        assert_eq!(hex_prefix(b""), (0, 0));
    }

    #[test]
    fn kallsyms_lines() {
        let text = "ffffffff81000000 T _stext\nffffffff81000000 T _text\n\
                    0000000000000000 A fixed_percpu_data\nffffffff81001000 t helper\t[mod]\n\
                    ffffffff81000800 W weak_one\nffffffff81002000 D data_thing\nab\n\
                    ffffffff81003000 t after_short\nffffffff81004000 T\n";
        let table = KernelSymbols::parse(Data::Owned(text.as_bytes().to_vec())).unwrap();
        assert_eq!(table.lookup(0xffff_ffff_8100_0004), Some(("_text", 4)));
        assert_eq!(table.lookup(0xffff_ffff_8100_0900), Some(("weak_one", 0x100)));
        assert_eq!(table.lookup(0xffff_ffff_8100_1010), Some(("helper", 0x10)));
        assert_eq!(table.lookup(0xffff_ffff_8000_0000), None);
        assert_eq!(table.address_of("helper"), Some(0xffff_ffff_8100_1000));
        assert_eq!(table.lookup(0xffff_ffff_8100_3001), Some(("after_short", 1)));
        assert_eq!(table.lookup(0xffff_ffff_8100_4001), Some(("after_short", 0x1001)));
        assert!(
            KernelSymbols::parse(Data::Owned(b"0000000000000000 T hidden\n".to_vec())).is_none()
        );
    }

    #[test]
    fn a_stored_table_gives_what_the_text_gives() {
        let dir = std::env::temp_dir().join(format!("kallsyms-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("kallsyms");
        // Out of order (a module's symbols), aliases, and symbols that are not functions.
        let mut text = String::new();
        for i in (0..3000u64).rev() {
            let kind = ["T", "t", "D", "W"][(i % 4) as usize];
            text += &format!(
                "{:016x} {kind} f{i}\n{:016x} t alias{i}\n",
                0xffff_8000_0000 + i * 48,
                0xffff_8000_0000 + i * 48
            );
        }
        std::fs::write(&path, &text).expect("written");
        let cache = SectionCache::at(&dir, 1 << 30);
        let read = || {
            let data = crate::space::debugfile::map(&path).expect("mapped");
            KernelSymbols::stored(Some(&cache), &path, b"\x12\x34", data).expect("symbols")
        };
        let (made, stored) = (read(), read());
        assert!(matches!(made.symbols, Table::Made(_)), "made the first time");
        assert!(matches!(stored.symbols, Table::Stored(_)), "mapped from the cache the second");
        let parsed = KernelSymbols::parse(Data::Owned(text.into_bytes())).expect("symbols");
        for ip in (0xffff_7fff_fff0..0xffff_8000_0000 + 3000 * 48 + 64).step_by(7) {
            let want = parsed.lookup_index(ip);
            assert_eq!(made.lookup_index(ip), want, "{ip:#x}");
            assert_eq!(stored.lookup_index(ip), want, "{ip:#x}");
        }
        assert_eq!(stored.lookup(0xffff_8000_0000 + 48 * 7 + 5), Some(("alias7", 5)));
        assert_eq!(stored.address_of("f2999"), Some(0xffff_8000_0000 + 2999 * 48));
        std::fs::remove_dir_all(&dir).ok();
    }
}
