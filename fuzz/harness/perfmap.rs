//! Arbitrary bytes as a JIT's perf map (`/tmp/perf-PID.map`: `START SIZE
//! NAME` lines, later lines winning where ranges overlap; seeded by
//! `fuzz/seed.py` with maps as V8 and CPython's `-X perf` write them):
//! parsed, then looked up at every hex word of the input and next to it.
//! Errors are fine; panics, hangs (a map of ranges under one another read
//! in quadratic time) and unbounded allocation are not.

use _core::space::perfmap::PerfMap;

/// The most addresses looked up per input.
pub const MAX_LOOKUPS: usize = 256;

/// How many lookups found a name (for the harness's own test).
pub fn run(data: &[u8]) -> usize {
    let map = PerfMap::parse(data);
    let addresses = super::hex_words(data, MAX_LOOKUPS / 2);
    let mut found = 0;
    for word in addresses {
        for address in [word, word.wrapping_add(1)] {
            if let Some((name, offset)) = map.lookup(address) {
                assert!(offset <= address, "{name}+{offset:#x} at {address:#x}");
                found += 1;
            }
        }
    }
    assert!(map.len() <= 2 * _core::space::perfmap::MAX_ENTRIES + 1);
    found
}
