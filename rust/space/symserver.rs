//! Breakpad symbol stores ([`Stores`]: local directories, then servers)
//! and symbol servers: `.sym` files over HTTP, laid out as a symbol
//! store is (`URL/NAME/DEBUGID/NAME.sym`, Mozilla's and Sentry's layout),
//! and, for a Windows module whose `.sym` file a server lacks, its PDB as
//! Microsoft's symbol servers serve it (`URL/NAME.pdb/DEBUGID/NAME.pdb`);
//! for an Apple module, its Mach-O file and dSYM by UUID in Sentry's
//! "unified" layout (`URL/8c/3df1.../executable`, `.../debuginfo`),
//! fetched with the debuginfod client's HTTP code and settings
//! ([`crate::space::debuginfod::Config`]: `DEBUGINFOD_TIMEOUT`, `DEBUGINFOD_MAXTIME`,
//! `DEBUGINFOD_MAXSIZE`; `STACKWALK_OFFLINE` asks no server).
//!
//! Downloaded files are kept in a store of their own inside debuginfod's
//! cache directory, `CACHE/breakpad/NAME/DEBUGID/NAME.sym`, written under a
//! temporary name and renamed into place, and read from there first (also
//! offline). A file a server does not have (404, or any answer but 200 and
//! a server error) is remembered for the rest of the process and not asked
//! for again; a server that does not answer (refused, timed out, 5xx) is
//! skipped for the rest of the process, and said so once. The files of one
//! input are fetched [`debuginfod::PARALLEL`] at once, all within one
//! deadline (`DEBUGINFOD_MAXTIME`), and the cache trimmed as debuginfod's
//! ([`debuginfod::trim_cache`]).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use crate::space::debuginfod::tempfile_like::TempFile;
use crate::space::debuginfod::{self, Config, GetError};

/// URLs of files servers did not have, in this process.
static NOT_THERE: Mutex<Option<HashSet<String>>> = Mutex::new(None);
/// Servers that did not answer, in this process.
static DEAD: Mutex<Option<HashSet<String>>> = Mutex::new(None);

fn remembered(set: &Mutex<Option<HashSet<String>>>, key: &str) -> bool {
    let set = set.lock().unwrap_or_else(|e| e.into_inner());
    set.as_ref().is_some_and(|s| s.contains(key))
}

/// Remember `key`; whether it is new.
fn remember(set: &Mutex<Option<HashSet<String>>>, key: &str) -> bool {
    let mut set = set.lock().unwrap_or_else(|e| e.into_inner());
    set.get_or_insert_with(HashSet::new).insert(key.to_owned())
}

/// The store of downloaded `.sym` files in the cache directory `cache`.
pub fn cache_store(cache: &Path) -> PathBuf {
    cache.join("breakpad")
}

/// A module's file name as a path segment: not empty, no `/`, not `.` or `..`.
fn checked_name(name: &str) -> Option<&str> {
    let ok = !name.is_empty() && !name.contains(['/', '\0']) && name != "." && name != "..";
    ok.then_some(name)
}

/// A debug id (hex digits and an age, 33 characters for an ELF file's).
fn checked_debug_id(id: &str) -> Option<&str> {
    let ok = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric());
    ok.then_some(id)
}

/// `segment` with every byte but the unreserved ones (and `+`) percent-encoded.
fn encoded(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~+".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The first bytes of an MSF 7.00 file: every PDB since Visual C++ 7.
pub const PDB_MAGIC: &[u8] = b"Microsoft C/C++ MSF 7.00\r\n\x1aDS\0\0\0";

/// Whether the file at `path` is a PDB (its identity is checked where it
/// is read: `crate::symbolize::pdb`).
pub fn is_pdb_file(path: &Path) -> bool {
    let mut head = [0u8; 32];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head));
    read.is_ok() && head.starts_with(PDB_MAGIC)
}

/// The files of a module a store may hold, in the order they are taken:
/// its `.sym` file, then for a PDB the PDB itself, and on a server
/// (`served`) the PDB compressed in a CAB archive (`NAME.pd_`).
fn leaves(name: &str, served: bool) -> Vec<String> {
    let mut out = vec![sym_file_name(name)];
    if name.to_ascii_lowercase().ends_with(".pdb") {
        out.push(name.to_owned());
        if served {
            out.push(format!("{}_", &name[..name.len() - 1]));
        }
    }
    out
}

/// The one file of the CAB archive at `path` (a `NAME.pd_`), at most
/// `limit` bytes, into a temporary file in `dir`.
fn uncab(path: &Path, dir: &Path, limit: u64) -> Result<TempFile, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut cabinet = cab::Cabinet::new(file).map_err(|e| format!("not a CAB archive: {e}"))?;
    let entry = cabinet.folder_entries().flat_map(|f| f.file_entries()).next();
    let (name, size) = match entry {
        Some(e) => (e.name().to_owned(), u64::from(e.uncompressed_size())),
        None => return Err("an empty CAB archive".to_owned()),
    };
    if size > limit {
        return Err(format!("its file is {size} bytes, over the limit of {limit}"));
    }
    let reader = cabinet.read_file(&name).map_err(|e| format!("cannot read {name}: {e}"))?;
    let mut out = TempFile::new(dir).map_err(|e| e.to_string())?;
    match std::io::copy(&mut reader.take(limit + 1), out.writer()) {
        Ok(n) if n <= limit => Ok(out),
        Ok(_) => Err(format!("its file is over the limit of {limit} bytes")),
        Err(e) => Err(format!("cannot uncompress {name}: {e}")),
    }
}

/// Whether the file at `path` starts with the `MODULE` record of debug id `id`.
fn is_sym_of(path: &Path, id: &str) -> bool {
    let Ok(file) = std::fs::File::open(path) else { return false };
    // The MODULE line is short: no more is read of a file that is something else.
    let mut first = Vec::new();
    if BufReader::new(file.take(4096)).read_until(b'\n', &mut first).is_err() {
        return false;
    }
    let text = String::from_utf8_lossy(&first);
    let mut words = text.split_ascii_whitespace();
    words.next() == Some("MODULE") && words.nth(2).is_some_and(|d| d.eq_ignore_ascii_case(id))
}

/// What [`fetch`] found: the file (or None), and what to warn about (each
/// server that did not answer, the first time; a file that was not the one
/// asked for).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Fetched {
    pub path: Option<PathBuf>,
    pub warnings: Vec<String>,
}

/// The name of the `.sym` file of a module whose debug file is `debug_file`
/// in a store: a PDB's `.pdb` replaced by `.sym` (`crash.pdb/ID/crash.sym`,
/// as `dump_syms` and Breakpad's `symupload` file Windows modules), else
/// `.sym` added (`libc.so.6/ID/libc.so.6.sym`).
pub fn sym_file_name(debug_file: &str) -> String {
    let stem = match debug_file.len().checked_sub(4) {
        Some(cut)
            if debug_file.is_char_boundary(cut)
                && debug_file[cut..].eq_ignore_ascii_case(".pdb") =>
        {
            &debug_file[..cut]
        }
        _ => debug_file,
    };
    format!("{stem}.sym")
}

/// The `.sym` file of module `name` with debug id `debug_id`: from the
/// cache, else from the first of `urls` that has it, kept in the cache.
/// `config`'s own URLs (debuginfod's) are not used; offline
/// (`STACKWALK_OFFLINE`, or `offline`), the cache alone.
pub fn fetch(
    config: &Config,
    urls: &[String],
    name: &str,
    debug_id: &str,
    offline: bool,
) -> Fetched {
    fetch_by(config, urls, name, debug_id, offline, Instant::now() + config.max_time)
}

/// [`fetch`] of each (name, debug id) of `modules`, several at once, all
/// within one deadline; the answers in order.
pub fn fetch_all(
    config: &Config,
    urls: &[String],
    modules: &[(String, String)],
    offline: bool,
) -> Vec<Fetched> {
    let deadline = Instant::now() + config.max_time;
    debuginfod::at_once(modules, |(name, id)| fetch_by(config, urls, name, id, offline, deadline))
}

fn fetch_by(
    config: &Config,
    urls: &[String],
    name: &str,
    debug_id: &str,
    offline: bool,
    deadline: Instant,
) -> Fetched {
    let mut out = Fetched::default();
    let (Some(name), Some(id)) = (checked_name(name), checked_debug_id(debug_id)) else {
        return out;
    };
    let leaves = leaves(name, true);
    // A `.pd_` is kept uncompressed, as the PDB.
    let entry_of = |leaf: &str| {
        let leaf = if leaf.ends_with(".pd_") { name } else { leaf };
        config.cache.as_deref().map(|c| cache_store(c).join(name).join(id).join(leaf))
    };
    let is_entry = |e: &PathBuf| std::fs::symlink_metadata(e).is_ok_and(|m| m.is_file());
    for leaf in &leaves {
        if let Some(entry) = entry_of(leaf).filter(|e| is_entry(e)) {
            out.path = Some(debuginfod::used(entry));
            return out;
        }
    }
    if offline || debuginfod::offline_from_env() {
        return out;
    }
    let candidates = urls.iter().flat_map(|server| leaves.iter().map(move |leaf| (server, leaf)));
    for (server, leaf) in candidates {
        let base = server.trim_end_matches('/');
        let url = format!("{base}/{}/{}/{}", encoded(name), encoded(id), encoded(leaf));
        // A CAB archive's PDB, uncompressed beside it.
        let unpack = |file: TempFile| match leaf.ends_with(".pd_") {
            true => {
                let dir = file.path().parent().map(Path::to_path_buf).unwrap_or_default();
                uncab(file.path(), &dir, config.max_size)
            }
            false => Ok(file),
        };
        let right = |path: &Path| match leaf.ends_with(".sym") {
            true => is_sym_of(path, id),
            false => is_pdb_file(path),
        };
        let asked = Asked { base, url: &url, what: &format!("the symbol file of {name} {id}") };
        let entry = entry_of(leaf);
        if fetch_url(config, &asked, entry.as_deref(), deadline, (&unpack, &right), &mut out) {
            return out;
        }
    }
    out
}

/// One file asked of one server.
struct Asked<'a> {
    /// The server.
    base: &'a str,
    url: &'a str,
    /// What was asked for, as a warning names it.
    what: &'a str,
}

/// What is done with a file that came (a CAB archive uncompressed), and
/// whether what it then is is the file asked for.
type Unpack<'a> = &'a dyn Fn(TempFile) -> Result<TempFile, String>;
type Right<'a> = &'a dyn Fn(&Path) -> bool;

/// A file taken as it came.
fn as_it_came(file: TempFile) -> Result<TempFile, String> {
    Ok(file)
}

/// The file `asked`, into the cache at `entry` (else kept where it came),
/// `unpack` applied to what came and `right` saying whether it is the file
/// asked for. Whether it came: then `out.path` is it. A server that does
/// not answer is remembered (and said, once), as is a file it lacks.
fn fetch_url(
    config: &Config,
    asked: &Asked<'_>,
    entry: Option<&Path>,
    deadline: Instant,
    (unpack, right): (Unpack<'_>, Right<'_>),
    out: &mut Fetched,
) -> bool {
    let Asked { base, url, what } = *asked;
    if remembered(&DEAD, base) || remembered(&NOT_THERE, url) {
        return false;
    }
    let dir = entry.and_then(Path::parent);
    match debuginfod::get(config, url, dir, None, deadline) {
        Ok(file) => {
            let file = match unpack(file) {
                Ok(file) => file,
                Err(why) => {
                    remember(&NOT_THERE, url);
                    out.warnings.push(format!("{url}: {why}"));
                    return false;
                }
            };
            if !right(file.path()) {
                remember(&NOT_THERE, url);
                out.warnings.push(format!("{url}: not {what}"));
                return false;
            }
            let kept = match (entry, &config.cache) {
                (Some(entry), Some(cache)) => file.persist(entry).map(|()| {
                    let entry = debuginfod::used(entry.to_path_buf());
                    debuginfod::trim_cache(cache, config.cache_max);
                    entry
                }),
                _ => file.keep(),
            };
            match kept {
                Ok(path) => out.path = Some(path),
                Err(e) => out.warnings.push(format!("{url}: cannot keep the file: {e}")),
            }
            true
        }
        Err(GetError::Status(code, _)) if code < 500 => {
            remember(&NOT_THERE, url);
            false
        }
        Err(e @ (GetError::Status(..) | GetError::Transport(_))) => {
            if remember(&DEAD, base) {
                out.warnings
                    .push(format!("symbol server {base} did not answer ({e}): not asked again"));
            }
            false
        }
        Err(e) => {
            out.warnings.push(format!("{url}: {e}"));
            false
        }
    }
}

/// The files of an Apple module in Sentry's "unified" layout of symbol
/// servers and stores (`8c/3df1a2...../executable`, `.../debuginfo`: the
/// Mach-O file and its dSYM's DWARF file, by UUID in lower-case hex, two
/// digits then the rest).
pub const UNIFIED_LEAVES: [&str; 2] = ["executable", "debuginfo"];

/// The place of the file `leaf` of the Mach-O file of UUID `uuid` (32 hex
/// digits) in the unified layout under `root`; None for another id.
pub fn unified_path(root: &Path, uuid: &str, leaf: &str) -> Option<PathBuf> {
    let hex = uuid.to_ascii_lowercase();
    let ok = hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| root.join(&hex[..2]).join(&hex[2..]).join(leaf))
}

/// Whether the file at `path` is a Mach-O file (or a universal one with a
/// slice) of UUID `uuid`.
fn is_macho_of(path: &Path, uuid: &str) -> bool {
    let Ok(data) = crate::source::files::map(path) else { return false };
    [crate::arch::Arch::X86_64, crate::arch::Arch::Aarch64].into_iter().any(|arch| {
        let headers = crate::space::macho::headers(&data, Some(arch));
        headers.ok().and_then(|h| h.code_id()).is_some_and(|id| id.eq_ignore_ascii_case(uuid))
    })
}

/// The file `leaf` of the Mach-O file of UUID `uuid` in the unified layout:
/// from the cache (`CACHE/breakpad/unified/...`), else from the first of
/// `urls` that has it, kept in the cache; offline, the cache alone.
fn fetch_unified(
    config: &Config,
    urls: &[String],
    (uuid, leaf): (&str, &str),
    offline: bool,
    deadline: Instant,
) -> Fetched {
    let mut out = Fetched::default();
    let cache = config.cache.as_deref().map(|c| cache_store(c).join("unified"));
    let entry = cache.as_deref().and_then(|root| unified_path(root, uuid, leaf));
    if let Some(entry) = entry.as_ref().filter(|e| e.is_file()) {
        out.path = Some(debuginfod::used(entry.clone()));
        return out;
    }
    let Some(relative) = unified_path(Path::new(""), uuid, leaf) else { return out };
    if offline || debuginfod::offline_from_env() {
        return out;
    }
    let right = |path: &Path| is_macho_of(path, uuid);
    let what = format!("the Mach-O file of UUID {uuid}");
    for server in urls {
        let base = server.trim_end_matches('/');
        let url = format!("{base}/{}", relative.display());
        let asked = Asked { base, url: &url, what: &what };
        if fetch_url(config, &asked, entry.as_deref(), deadline, (&as_it_came, &right), &mut out) {
            break;
        }
    }
    out
}

/// The debug id Breakpad and `dump_syms` give an ELF file whose identity
/// (build id, else `.text` hash) is `id`: its first 16 bytes (zero-padded) as
/// a GUID, the first three fields byte-swapped, and an age of 0.
pub fn elf_debug_id(id: &[u8]) -> String {
    let mut raw = [0u8; 16];
    let n = id.len().min(16);
    raw[..n].copy_from_slice(&id[..n]);
    raw[..4].reverse();
    raw[4..6].reverse();
    raw[6..8].reverse();
    let mut out: String = raw.iter().map(|b| format!("{b:02X}")).collect();
    out.push('0');
    out
}

/// A snapshot's Breakpad symbol stores: local directories laid out as
/// `DEBUG_FILE/DEBUG_ID/NAME.sym` (as `dump_syms` output is kept), asked in
/// order, then symbol servers (the same layout over HTTP, through the
/// cache; `offline`: the cache alone). Each module's file is looked for
/// once; the servers are asked for every module the stores lack together,
/// at the first lookup, within one deadline.
#[derive(Clone, Debug, Default)]
pub struct Stores {
    pub paths: Vec<PathBuf>,
    pub urls: Vec<String>,
    pub offline: bool,
    /// (debug file, debug id) -> the file found (None: none usable).
    found: HashMap<(String, String), Option<PathBuf>>,
    servers_asked: bool,
    /// Apple modules' files from the servers, by UUID: (executable, dSYM).
    apple: HashMap<String, (Option<PathBuf>, Option<PathBuf>)>,
}

/// Whether a symbol file may be used as the one of the debug id given: the
/// error says why not (it cannot be parsed, its `MODULE` names another).
pub type Usable<'a> = dyn FnMut(&Path, &str) -> Result<(), String> + 'a;

impl Stores {
    pub fn new(paths: Vec<PathBuf>, urls: Vec<String>, offline: bool) -> Stores {
        Stores { paths, urls, offline, ..Stores::default() }
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty() && self.urls.is_empty()
    }

    /// The module's file in the local stores: its `.sym` file (Breakpad's
    /// layout, `NAME/DEBUGID/NAME.sym`) in any of them first, else, for a
    /// PDB, the PDB itself (Microsoft's layout, `NAME.pdb/DEBUGID/NAME.pdb`).
    fn stored(&self, debug_file: &str, debug_id: &str) -> Option<PathBuf> {
        let (name, id) = (checked_name(debug_file)?, checked_debug_id(debug_id)?);
        let leaves = leaves(name, false);
        let paths = leaves.iter().flat_map(|leaf| {
            self.paths.iter().map(move |store| store.join(name).join(id).join(leaf))
        });
        paths.into_iter().find(|p| p.is_file())
    }

    /// The usable symbol file of the module whose debug file is
    /// `debug_file` and debug id `debug_id`; `every` gives all the modules
    /// the snapshot lists (debug file, debug id), asked for (and fetched
    /// together) the first time only. What went wrong is added to
    /// `warnings`.
    pub fn find(
        &mut self,
        debug_file: &str,
        debug_id: &str,
        every: &dyn Fn() -> Vec<(String, String)>,
        usable: &mut Usable<'_>,
        warnings: &mut Vec<String>,
    ) -> Option<PathBuf> {
        if !self.servers_asked && !self.urls.is_empty() {
            self.servers_asked = true;
            self.fetch_all(&every(), usable, warnings);
        }
        let key = (debug_file.to_owned(), debug_id.to_owned());
        if let Some(found) = self.found.get(&key) {
            return found.clone();
        }
        let mut path = self.stored(debug_file, debug_id);
        if path.is_none() && !self.urls.is_empty() {
            let config = Config::from_env();
            let fetched = fetch(&config, &self.urls, debug_file, debug_id, self.offline);
            warnings.extend(fetched.warnings);
            path = fetched.path;
        }
        let path = path.filter(|p| checked(p, debug_id, usable, warnings));
        self.found.insert(key, path.clone());
        path
    }

    /// Whether the Apple modules' files have been asked of the servers.
    pub fn apple_asked(&self) -> bool {
        !self.apple.is_empty()
    }

    /// The executable and dSYM DWARF file of the Mach-O file of UUID `uuid`
    /// from the servers (through the cache), in the unified layout
    /// ([`UNIFIED_LEAVES`]). The first call asks for those of every UUID of
    /// `every` (the modules whose files are not found here) at once, within
    /// one deadline. What went wrong is added to `warnings`.
    pub fn apple_files(
        &mut self,
        uuid: &str,
        every: &[String],
        warnings: &mut Vec<String>,
    ) -> (Option<PathBuf>, Option<PathBuf>) {
        if self.urls.is_empty() {
            return (None, None);
        }
        if self.apple.is_empty() {
            let mut uuids: Vec<String> = every.iter().map(|u| u.to_ascii_lowercase()).collect();
            uuids.push(uuid.to_ascii_lowercase());
            uuids.sort();
            uuids.dedup();
            let wanted: Vec<(String, &str)> = uuids
                .iter()
                .flat_map(|u| UNIFIED_LEAVES.iter().map(move |leaf| (u.clone(), *leaf)))
                .collect();
            let config = Config::from_env();
            let deadline = Instant::now() + config.max_time;
            let (urls, offline) = (&self.urls, self.offline);
            let answers = debuginfod::at_once(&wanted, |(u, leaf)| {
                fetch_unified(&config, urls, (u, leaf), offline, deadline)
            });
            for ((u, leaf), fetched) in wanted.into_iter().zip(answers) {
                warnings.extend(fetched.warnings);
                let files = self.apple.entry(u).or_default();
                match leaf {
                    "executable" => files.0 = fetched.path,
                    _ => files.1 = fetched.path,
                }
            }
        }
        self.apple.get(&uuid.to_ascii_lowercase()).cloned().unwrap_or_default()
    }

    /// The files of `modules` the local stores lack, from the servers,
    /// several at once.
    fn fetch_all(
        &mut self,
        modules: &[(String, String)],
        usable: &mut Usable<'_>,
        warnings: &mut Vec<String>,
    ) {
        let mut wanted: Vec<(String, String)> = Vec::new();
        for key in modules {
            let known = self.found.contains_key(key) || wanted.contains(key);
            if !known && self.stored(&key.0, &key.1).is_none() {
                wanted.push(key.clone());
            }
        }
        if wanted.is_empty() {
            return;
        }
        let config = Config::from_env();
        let answers = fetch_all(&config, &self.urls, &wanted, self.offline);
        for (key, fetched) in wanted.into_iter().zip(answers) {
            warnings.extend(fetched.warnings);
            let path = fetched.path.filter(|p| checked(p, &key.1, usable, warnings));
            self.found.insert(key, path);
        }
    }
}

fn checked(
    path: &Path,
    debug_id: &str,
    usable: &mut Usable<'_>,
    warnings: &mut Vec<String>,
) -> bool {
    match usable(path, debug_id) {
        Ok(()) => true,
        Err(why) => {
            warnings.push(format!("symbol file not used: {why}"));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pdbs_store_holds_its_sym_file_then_the_pdb() {
        assert_eq!(leaves("crash.pdb", false), ["crash.sym", "crash.pdb"]);
        assert_eq!(leaves("CRASH.PDB", true), ["CRASH.sym", "CRASH.PDB", "CRASH.PD_"]);
        assert_eq!(leaves("libc.so.6", true), ["libc.so.6.sym"]);
        let dir = std::env::temp_dir().join(format!("stackwalk-pdb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (pdb, other) = (dir.join("a.pdb"), dir.join("b.pdb"));
        std::fs::write(&pdb, [PDB_MAGIC, &[0u8; 64]].concat()).unwrap();
        std::fs::write(&other, b"MODULE windows x86 0 b.pdb\n").unwrap();
        assert!(is_pdb_file(&pdb) && !is_pdb_file(&other));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unified_paths_are_two_digits_then_the_rest() {
        let root = Path::new("/s");
        let path = unified_path(root, "67E9247C814E392BA027DBDE6748FCBF", "executable");
        assert_eq!(path, Some(PathBuf::from("/s/67/e9247c814e392ba027dbde6748fcbf/executable")));
        // Only a UUID's 32 hex digits: no path of another shape.
        assert_eq!(unified_path(root, "../../../../etc/passwd/0123456789ab", "debuginfo"), None);
        assert_eq!(unified_path(root, "67e9247c814e392ba027dbde6748fcbf0", "debuginfo"), None);
    }

    #[test]
    fn names_and_ids_are_checked_and_encoded() {
        assert_eq!(checked_name("libstdc++.so.6"), Some("libstdc++.so.6"));
        for bad in ["", ".", "..", "a/b", "a\0"] {
            assert_eq!(checked_name(bad), None, "{bad:?}");
        }
        assert!(checked_debug_id("0123ABCD0").is_some());
        assert!(checked_debug_id("../x").is_none() && checked_debug_id("").is_none());
        assert_eq!(encoded("[vdso] x+y.sym"), "%5Bvdso%5D%20x+y.sym");
        assert_eq!(sym_file_name("crash.pdb"), "crash.sym");
        assert_eq!(sym_file_name("wntdll.PDB"), "wntdll.sym");
        assert_eq!(sym_file_name("libc.so.6"), "libc.so.6.sym");
        assert_eq!(sym_file_name(".pdb"), ".sym");
        assert_eq!(sym_file_name("é.pd"), "é.pd.sym");
    }

    #[test]
    fn a_dead_server_is_one_warning() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = Config {
            urls: Vec::new(),
            cache: None,
            ..Config::from_vars(crate::source::files::vars(&[]))
        };
        let urls = vec![format!("http://127.0.0.1:{port}/")];
        let first = fetch(&config, &urls, "libc.so.6", "ABCD0", false);
        assert_eq!(first.path, None);
        assert_eq!(first.warnings.len(), 1, "{first:?}");
        assert!(first.warnings[0].starts_with(&format!("symbol server http://127.0.0.1:{port} ")));
        let again = fetch(&config, &urls, "libm.so.6", "ABCD0", false);
        assert_eq!(again, Fetched::default(), "not asked again, not said again");
        let offline = fetch(&config, &[format!("http://127.0.0.1:{}", port + 1)], "a", "B", true);
        assert_eq!(offline, Fetched::default());
    }

    #[test]
    fn elf_debug_ids_are_breakpads() {
        // dump_syms: the GUID's first three fields byte-swapped, age 0; short ids zero-padded.
        let id: Vec<u8> = (0x01..=0x14).collect();
        assert_eq!(elf_debug_id(&id), "0403020106050807090A0B0C0D0E0F100");
        assert_eq!(
            elf_debug_id(&[0xab, 0xcd]),
            "0000CDAB000000000000000000000000".to_owned() + "0"
        );
    }

    #[test]
    fn stores_are_asked_in_order_once_and_files_checked() {
        let dir = std::env::temp_dir().join(format!("stackwalk-stores-{}", std::process::id()));
        let (first, second) = (dir.join("one"), dir.join("two"));
        let sym = |store: &Path, text: &str| {
            let d = store.join("libx.so").join("ID0");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("libx.so.sym"), text).unwrap();
            d.join("libx.so.sym")
        };
        let bad = sym(&first, "garbage");
        let good = sym(&second, "MODULE Linux x86_64 ID0 libx.so\n");
        let mut asked = Vec::new();
        let mut usable = |p: &Path, _: &str| {
            asked.push(p.to_path_buf());
            if p == bad {
                Err("unreadable".to_owned())
            } else {
                Ok(())
            }
        };
        let mut warnings = Vec::new();
        let mut stores = Stores::new(vec![second.clone(), first.clone()], Vec::new(), true);
        assert_eq!(
            stores.find("libx.so", "ID0", &Vec::new, &mut usable, &mut warnings),
            Some(good)
        );
        assert!(stores.find("libx.so", "ID0", &Vec::new, &mut usable, &mut warnings).is_some());
        assert_eq!(stores.find("../x", "ID0", &Vec::new, &mut usable, &mut warnings), None);
        let mut stores = Stores::new(vec![first, second], Vec::new(), true);
        assert_eq!(stores.find("libx.so", "ID0", &Vec::new, &mut usable, &mut warnings), None);
        assert_eq!(warnings, ["symbol file not used: unreadable"]);
        assert_eq!(asked.len(), 2, "each file checked once: {asked:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
