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
        let mut entries: Vec<(u64, u64, usize)> = Vec::new();
        let mut names: Vec<(u64, Box<str>)> = Vec::new();
        for line in text.split(|&b| b == b'\n').take(MAX_ENTRIES) {
            let line = String::from_utf8_lossy(line);
            let mut fields = line.trim_end_matches('\r').splitn(3, ' ');
            let (Some(start), Some(size), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let (Some(start), Some(size)) = (hex(start), hex(size)) else { continue };
            let Some(end) = start.checked_add(size).filter(|_| size > 0) else { continue };
            entries.push((start, end, names.len()));
            names.push((start, name.into()));
        }
        // Later lines win: from the last line back, each range keeps only
        // what no later line has taken.
        let mut taken: std::collections::BTreeMap<u64, (u64, u32)> = Default::default();
        for &(start, end, name) in entries.iter().rev() {
            let mut at = start;
            // A range taken before `at` may reach past it.
            if let Some((_, &(e, _))) = taken.range(..=at).next_back() {
                at = at.max(e);
            }
            while at < end {
                let next = taken.range(at..end).next().map(|(&s, &(e, _))| (s, e));
                match next {
                    Some((s, e)) => {
                        if at < s {
                            taken.insert(at, (s, name as u32));
                        }
                        at = e;
                    }
                    None => {
                        taken.insert(at, (end, name as u32));
                        at = end;
                    }
                }
            }
        }
        let ranges = taken.into_iter().map(|(s, (e, n))| (s, e, n)).collect();
        PerfMap { ranges, names }
    }

    /// The perf map at `path` (a regular file, mapped), read.
    pub fn read(path: &std::path::Path) -> std::io::Result<PerfMap> {
        Ok(PerfMap::parse(&crate::files::map(path)?))
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
}
