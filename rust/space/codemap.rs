//! What the stack scan asks of a module's file (see `fallback::Context::scan`):
//! which function holds an address, by its symbols, and which function a
//! PLT entry leads to, by name. Read once per file, at the first scan that
//! needs it: never on the walk's hot path.

use std::ops::Range;

/// A file's function symbols and PLT, for telling whether the call before
/// a return address called the function of the frame below it.
#[derive(Debug, Default)]
pub struct CodeMap {
    /// Every function symbol with a size (`.symtab`, else `.dynsym`, else a
    /// Go program's `.gopclntab`): its ELF address range and its name's
    /// hash, sorted by range.
    functions: Vec<(Range<u64>, u64)>,
    /// The starts of 32-bit ARM's Thumb functions (odd symbol values),
    /// sorted.
    thumb: Vec<u64>,
    /// The PLT sections' ranges (`.plt`, `.plt.sec`, `.plt.got`, `.iplt`).
    plt: Vec<Range<u64>>,
    /// The PLT entries that name a symbol: start, end, the name's hash.
    plt_entries: Vec<(u64, u64, u64)>,
}

impl CodeMap {
    /// The map of a file and its separate debug file (`debug`): the
    /// functions of whichever names more, the PLT of the file.
    pub fn of(data: &[u8], debug: Option<&[u8]>) -> CodeMap {
        let (mut functions, mut thumb) = functions_of(data);
        if let Some(more) = debug.map(functions_of).filter(|f| f.0.len() > functions.len()) {
            (functions, thumb) = more;
        }
        let plt =
            crate::space::elf::section_ranges(data, &[".plt", ".plt.sec", ".plt.got", ".iplt"]);
        let plt_entries = crate::space::plt::PltEntries::of(data)
            .entries()
            .filter_map(|(start, end, name)| {
                let symbol = name.strip_suffix("@plt")?;
                (!symbol.starts_with("*ABS*")).then(|| (start, end, name_hash(symbol)))
            })
            .collect();
        CodeMap { functions, thumb, plt, plt_entries }
    }

    /// The map of a module known by its functions' extents alone (a
    /// Windows module's, from its symbol file or its PE file's function
    /// table), which name nothing and have no PLT.
    pub fn of_functions(ranges: impl IntoIterator<Item = Range<u64>>) -> CodeMap {
        let mut functions: Vec<(Range<u64>, u64)> =
            ranges.into_iter().filter(|r| r.start < r.end).map(|r| (r, 0)).collect();
        functions.sort_unstable_by_key(|(r, _)| (r.start, r.end));
        CodeMap { functions, ..CodeMap::default() }
    }

    /// The extent of the function symbol holding ELF address `address`
    /// (overlapping symbols, aliases of other sizes, are looked at back to
    /// the first that holds it).
    pub fn function(&self, address: u64) -> Option<Range<u64>> {
        let after = self.functions.partition_point(|(r, _)| r.start <= address);
        let mut before = self.functions[..after].iter().rev().take(8);
        before.find(|(r, _)| r.contains(&address)).map(|(r, _)| r.clone())
    }

    /// Whether the function starting at `start` is Thumb code, by its
    /// symbol (32-bit ARM).
    pub fn is_thumb(&self, start: u64) -> bool {
        self.thumb.binary_search(&start).is_ok()
    }

    /// Whether one of the names of the function starting at `start` hashes
    /// to `name`.
    pub fn is_named(&self, start: u64, name: u64) -> bool {
        let from = self.functions.partition_point(|(r, _)| r.start < start);
        self.functions[from..].iter().take_while(|(r, _)| r.start == start).any(|f| f.1 == name)
    }

    /// The start of Go's `runtime.goexit` if it holds `address`: the
    /// function every goroutine's stack starts in, whose first instruction
    /// (a no-op) the runtime makes the return address of the goroutine's
    /// first frame, plus one instruction, as if goexit had called it.
    pub fn go_exit(&self, address: u64) -> Option<u64> {
        self.named_function(address, &["runtime.goexit", "runtime.goexit.abi0"])
    }

    /// Whether `address` is in one of the functions Go's runtime starts a
    /// stack in, which its tracebacks end at (marked `TOPFRAME`): a
    /// goroutine's `runtime.goexit`, a thread's `runtime.mstart`, the
    /// program's `runtime.rt0_go`.
    pub fn go_top_frame(&self, address: u64) -> bool {
        let names = ["runtime.goexit", "runtime.mstart", "runtime.rt0_go"];
        let abi0 = ["runtime.goexit.abi0", "runtime.mstart.abi0", "runtime.rt0_go.abi0"];
        self.named_function(address, &[names, abi0].concat()).is_some()
    }

    /// Whether `address` is in Go's `runtime.sigpanic` (or its assembly
    /// entry, `runtime.sigpanic0`).
    pub fn go_sigpanic(&self, address: u64) -> bool {
        let names = ["runtime.sigpanic", "runtime.sigpanic0", "runtime.sigpanic0.abi0"];
        self.named_function(address, &names).is_some()
    }

    /// The start of the function holding `address` if one of its names is
    /// one of `names`.
    fn named_function(&self, address: u64, names: &[&str]) -> Option<u64> {
        let function = self.function(address)?;
        names.iter().any(|n| self.is_named(function.start, name_hash(n))).then_some(function.start)
    }

    pub fn in_plt(&self, address: u64) -> bool {
        self.plt.iter().any(|r| r.contains(&address))
    }

    /// The hash of the symbol's name that the PLT entry starting at
    /// `address` leads to, where it names one.
    pub fn plt_target(&self, address: u64) -> Option<u64> {
        let i = self.plt_entries.partition_point(|e| e.0 < address);
        self.plt_entries.get(i).filter(|e| e.0 == address).map(|e| e.2)
    }
}

/// A file's functions (see [`CodeMap::functions`]) and its Thumb ones'
/// starts.
fn functions_of(data: &[u8]) -> (Vec<(Range<u64>, u64)>, Vec<u64>) {
    let mut functions = Vec::new();
    let mut thumb = Vec::new();
    crate::space::symtab::function_symbols(data, &mut |start, size, name, is_thumb| {
        // A versioned name (`memcpy@GLIBC_2.2.5`) is the PLT's plain one.
        let plain = name.split('@').next().unwrap_or(name);
        functions.push((start..start.saturating_add(size), name_hash(plain)));
        if is_thumb {
            thumb.push(start);
        }
    });
    thumb.sort_unstable();
    thumb.dedup();
    if functions.is_empty() {
        // A stripped Go program's functions, from its `.gopclntab`.
        let go = crate::space::gopclntab::functions(data).into_iter();
        functions.extend(go.map(|(start, end, name)| (start..end, name_hash(name))));
    }
    functions.sort_unstable_by_key(|(r, h)| (r.start, r.end, *h));
    functions.dedup();
    (functions, thumb)
}

/// FNV-1a: names compared by hash, not kept.
fn name_hash(name: &str) -> u64 {
    name.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}
