//! The dynamic linker's link map in a core's memory (`DT_DEBUG` →
//! `r_debug` → `link_map`, and glibc's chain of `r_debug` per namespace):
//! how the libraries of a core without `NT_FILE` (qemu-user writes those)
//! are found, as libdwfl and gdb find them. Every walk through pointers read
//! from the core is bounded, and a cycle ends it.

use std::collections::HashSet;

use crate::source::memory::SegmentMemory;

/// Bound on every walk through pointers found in the core.
pub const MAX_ENTRIES: usize = 4096;
const DT_NULL: u64 = 0;
const DT_DEBUG: u64 = 21;

/// One `struct link_map`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkMapEntry {
    /// `l_name`: the path the dynamic linker opened (None: not in the core;
    /// the dynamic linker's own name points into the executable's
    /// `.interp`, a page cores often leave out).
    pub name: Option<Vec<u8>>,
    /// `l_addr`: the load bias.
    pub bias: u64,
    /// `l_ld`: the runtime address of the module's `PT_DYNAMIC`.
    pub dynamic: u64,
}

/// Reads of a process's words (of `word` bytes) in a core's memory.
struct Reader<'m> {
    memory: &'m SegmentMemory,
    word: usize,
}

impl Reader<'_> {
    fn word(&self, address: u64) -> Option<u64> {
        self.words::<1>(address).map(|[w]| w)
    }

    /// The `N` words at `address`, if one segment holds them all.
    fn words<const N: usize>(&self, address: u64) -> Option<[u64; N]> {
        let bytes = self.memory.bytes(address, N * self.word)?;
        let mut out = [0; N];
        for (i, value) in out.iter_mut().enumerate() {
            *value = super::le(bytes, i * self.word, self.word)?;
        }
        Some(out)
    }
}

/// The link map of a process of `word`-byte words whose executable has its
/// `PT_DYNAMIC` at runtime address `dynamic`: (entries in load order,
/// warnings). The executable's own entry is left out. No `DT_DEBUG` value
/// (a static program, or a core written before the dynamic linker ran)
/// gives no entries and no warning.
pub(crate) fn read_link_map(
    memory: &SegmentMemory,
    word: u64,
    dynamic: u64,
) -> (Vec<LinkMapEntry>, Vec<String>) {
    let reader = Reader { memory, word: word as usize };
    let mut warnings = Vec::new();
    let Some(mut r_debug) = dt_debug(&reader, dynamic) else {
        warnings.push(format!(
            "link map: cannot read the executable's dynamic section at {dynamic:#x}"
        ));
        return (Vec::new(), warnings);
    };
    let mut entries = Vec::new();
    let mut seen_namespaces = HashSet::new();
    let mut seen_maps = HashSet::new();
    // r_debug: int r_version, then (padded to a word) r_map, r_brk, r_state,
    // r_ldbase; glibc >= 2.35's r_debug_extended adds r_next (r_version >= 2),
    // one r_debug per link-map namespace.
    let r_next = 5 * reader.word;
    while r_debug != 0 && seen_namespaces.len() < MAX_ENTRIES && seen_namespaces.insert(r_debug) {
        let Some([version, mut link]) = reader.words::<2>(r_debug) else {
            warnings.push(format!("link map: cannot read r_debug at {r_debug:#x}"));
            break;
        };
        while link != 0 && seen_maps.len() < MAX_ENTRIES {
            if !seen_maps.insert(link) {
                warnings.push(format!("link map: cycle at {link:#x}"));
                break;
            }
            // struct link_map: l_addr, l_name, l_ld, l_next, l_prev.
            let Some([l_addr, l_name, l_ld, l_next, _]) = reader.words::<5>(link) else {
                warnings.push(format!("link map: cannot read entry at {link:#x}"));
                break;
            };
            if l_ld != dynamic {
                let name = memory.string(l_name, 4096);
                entries.push(LinkMapEntry { name, bias: l_addr, dynamic: l_ld });
            }
            link = l_next;
        }
        // r_version is an int: the low 4 bytes of the first word.
        r_debug = if version as u32 as i32 >= 2 {
            r_debug.checked_add(r_next as u64).and_then(|a| reader.word(a)).unwrap_or(0)
        } else {
            0
        };
    }
    (entries, warnings)
}

/// `DT_DEBUG`'s value in the dynamic section at `dynamic`: 0 if absent, None
/// if unreadable.
fn dt_debug(reader: &Reader<'_>, dynamic: u64) -> Option<u64> {
    for i in 0..MAX_ENTRIES {
        // Elf_Dyn: d_tag, d_val, a word each.
        let at = dynamic.checked_add((i * 2 * reader.word) as u64)?;
        let [tag, value] = reader.words::<2>(at)?;
        match tag {
            DT_DEBUG => return Some(value),
            DT_NULL => return Some(0),
            _ => {}
        }
    }
    Some(0)
}
