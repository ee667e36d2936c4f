//! perf map files (`/tmp/perf-PID.map`): the names a JIT gives the code it
//! makes, one `START SIZE NAME` line each (hex start and size), as node
//! (`--perf-basic-prof`), the JVM's agents, LuaJIT and CPython 3.12's
//! `-X perf` write them for perf. A later line for the same addresses wins
//! (code moved or compiled again), as perf has it.

/// A perf map, read: its code ranges, sorted, each with its name.
#[derive(Debug, Default)]
pub struct PerfMap {
    /// (start, end, index into names), sorted by start, not overlapping
    /// (a range partly hidden by a later line's is cut in pieces).
    ranges: Vec<(u64, u64, u32)>,
    /// Per line read: where its code starts, and its name.
    names: Vec<(u64, Box<str>)>,
}

/// The most lines read of a map (a long-running JIT's map grows; this
/// bounds the memory a damaged or hostile file can take).
pub const MAX_ENTRIES: usize = 4 << 20;

fn hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text.strip_prefix("0x").unwrap_or(text), 16).ok()
}

impl PerfMap {
    /// Read a map's text; lines that are not `START SIZE NAME` are left out.
    pub fn parse(text: &[u8]) -> PerfMap {
        let lines = text.split(|&b| b == b'\n').filter_map(|line| {
            let line = String::from_utf8_lossy(line);
            let mut fields = line.trim_end_matches('\r').splitn(3, ' ');
            let (Some(start), Some(size), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                return None;
            };
            Some((hex(start)?, hex(size)?, name.into()))
        });
        PerfMap::from_entries(lines)
    }

    /// A map of (start, size, name) entries in the order a JIT gave them
    /// (a jitdump's code loads): later ones win.
    pub fn from_entries(given: impl IntoIterator<Item = (u64, u64, Box<str>)>) -> PerfMap {
        let mut entries: Vec<(u64, u64, usize)> = Vec::new();
        let mut names: Vec<(u64, Box<str>)> = Vec::new();
        for (start, size, name) in given.into_iter().take(MAX_ENTRIES) {
            let Some(end) = start.checked_add(size).filter(|_| size > 0) else { continue };
            entries.push((start, end, names.len()));
            names.push((start, name));
        }
        // Later lines win: from the last line back, each range keeps only
        // what no later line has taken. `covered` holds what the later lines
        // took, as disjoint runs (adjacent ones merged): a range walks the
        // runs inside it once, and merges them into one, so a map of many
        // ranges under one another costs n log n, not n squared (a long
        // range repeated over many small ones would walk them all each time).
        let mut covered: std::collections::BTreeMap<u64, u64> = Default::default();
        let mut ranges: Vec<(u64, u64, u32)> = Vec::new();
        for &(start, end, name) in entries.iter().rev() {
            let (mut at, mut first, mut last) = (start, start, end);
            // A run from before `start` that reaches it.
            if let Some((&s, &e)) = covered.range(..=start).next_back() {
                if e >= start {
                    covered.remove(&s);
                    (at, first, last) = (e.max(start), s, e.max(end));
                }
            }
            // The runs from `start` to `end` (one just at `end` merges too).
            while let Some((&s, &e)) = covered.range(start..=end).next() {
                covered.remove(&s);
                if at < s {
                    ranges.push((at, s, name as u32));
                }
                at = at.max(e);
                last = last.max(e);
            }
            if at < end {
                ranges.push((at, end, name as u32));
            }
            covered.insert(first, last);
        }
        ranges.sort_unstable();
        PerfMap { ranges, names }
    }

    /// The perf map at `path` (a regular file, mapped), read.
    pub fn read(path: &std::path::Path) -> std::io::Result<PerfMap> {
        Ok(PerfMap::parse(&crate::source::files::map(path)?))
    }

    /// The name of the code at `address` and the offset into it.
    pub fn lookup(&self, address: u64) -> Option<(&str, u64)> {
        let i = self.ranges.partition_point(|r| r.0 <= address).checked_sub(1)?;
        let (_, end, name) = self.ranges[i];
        let (start, name) = &self.names[name as usize];
        (address < end).then(|| (&**name, address - start))
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_code_and_later_lines_win() {
        let map = PerfMap::parse(
            b"7f0000001000 40 LazyCompile:~outer /app.js:3\n\
              garbage line\n\
              0x7f0000002000 0x20 JS:*inner /app.js:1\n\
              7f0000001010 10 JS:*outer /app.js:3\n\
              7f0000003000 0 empty\n",
        );
        assert_eq!(map.lookup(0x7f00_0000_1000), Some(("LazyCompile:~outer /app.js:3", 0)));
        assert_eq!(map.lookup(0x7f00_0000_1018), Some(("JS:*outer /app.js:3", 8)));
        assert_eq!(map.lookup(0x7f00_0000_1030), Some(("LazyCompile:~outer /app.js:3", 0x30)));
        assert_eq!(map.lookup(0x7f00_0000_201f), Some(("JS:*inner /app.js:1", 0x1f)));
        assert_eq!(map.lookup(0x7f00_0000_2020), None);
        assert_eq!(map.lookup(0x7f00_0000_3000), None);
        assert_eq!(map.len(), 4);
    }

    /// Maps of ranges over and under one another, against the rule itself:
    /// each address is the last line's that covers it.
    #[test]
    fn later_lines_win_on_any_overlap() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..200 {
            let lines: Vec<(u64, u64)> = (0..1 + next(24))
                .map(|_| {
                    let start = 0x1000 + next(200);
                    let most = if next(4) == 0 { 200 } else { 12 };
                    (start, start + 1 + next(most))
                })
                .collect();
            let text: String = lines
                .iter()
                .enumerate()
                .map(|(i, (start, end))| format!("{start:x} {:x} f{i}\n", end - start))
                .collect();
            let map = PerfMap::parse(text.as_bytes());
            for address in 0xff0..0x1200 {
                let want = lines
                    .iter()
                    .enumerate()
                    .rev()
                    .find(|(_, (s, e))| (*s..*e).contains(&address))
                    .map(|(i, (s, _))| (format!("f{i}"), address - s));
                let got = map.lookup(address).map(|(n, off)| (n.to_owned(), off));
                assert_eq!(got, want, "{address:#x} in\n{text}");
            }
        }
    }
}
