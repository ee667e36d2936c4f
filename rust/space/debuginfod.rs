//! A debuginfod client: files by build id from the servers elfutils'
//! protocol defines (`GET URL/buildid/BUILDID/debuginfo`, `.../executable`),
//! kept in elfutils' cache layout so that stackwalk, gdb and eu-stack share
//! what any of them downloaded.
//!
//! Settings, as libdebuginfod reads them: `DEBUGINFOD_URLS` (servers,
//! separated by spaces, asked in order until one has the file; unset or
//! empty: none), `DEBUGINFOD_CACHE_PATH` (else `$XDG_CACHE_HOME/debuginfod_client`,
//! else `~/.cache/debuginfod_client`; entries `BUILDID/debuginfo` and
//! `BUILDID/executable`), `DEBUGINFOD_TIMEOUT` (seconds to connect, to be
//! answered, and for each 100 KiB of a file to arrive: 90 by default; as
//! libdebuginfod, whose rule is the first 100 KiB),
//! `DEBUGINFOD_MAXTIME` (seconds for all the downloads one input needs,
//! which run [`PARALLEL`] at once: 600 by default) and `DEBUGINFOD_MAXSIZE`
//! (bytes of one file: 2 GiB by default). Seconds are taken up to a day.
//! stackwalk's own `STACKWALK_OFFLINE` (set, not empty or `0`) asks no
//! server, and `STACKWALK_DOWNLOADS_MAX` (bytes, default 8 GiB) caps what
//! the cache holds: past it, the entries used longest ago are removed, never
//! one this process has used.
//!
//! A file is written under a temporary name in its entry's directory and
//! renamed into place once whole, so a reader (another stackwalk, gdb) never
//! sees half of it. A downloaded file must be an ELF file with the build id
//! asked for. The cache is read whatever the servers: [`cached`] is one more
//! place of files by build id, like a debug root. Nothing in it is read or
//! written through a symbolic link.

use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// What is asked for by build id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The DWARF (a separate debug file, or an unstripped file).
    Debuginfo,
    /// The file the process ran (its code, `.eh_frame`, symbols).
    Executable,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Debuginfo => "debuginfo",
            Kind::Executable => "executable",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        match name {
            "debuginfo" => Some(Kind::Debuginfo),
            "executable" => Some(Kind::Executable),
            _ => None,
        }
    }
}

/// Default of `DEBUGINFOD_TIMEOUT`, as libdebuginfod's.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);
/// Default of `DEBUGINFOD_MAXTIME`: for all the downloads of one input.
const DEFAULT_MAX_TIME: Duration = Duration::from_secs(600);
/// Default of `DEBUGINFOD_MAXSIZE`.
const DEFAULT_MAX_SIZE: u64 = 2 << 30;
/// Default of `STACKWALK_DOWNLOADS_MAX`.
const DEFAULT_CACHE_MAX: u64 = 8 << 30;
/// The longest time taken from a setting: a day.
const MAX_SECONDS: u64 = 86_400;
/// What must arrive within each `timeout` of a download (libdebuginfod asks
/// it of the first bytes; here of every stretch, so that a server sending a
/// byte now and then is cut off).
const MIN_PER_TIMEOUT: u64 = 100 << 10;
/// Downloads at once, at most.
pub const PARALLEL: usize = 8;

/// Where and how files are fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Server URLs, in order; none: the cache alone.
    pub urls: Vec<String>,
    /// The cache directory; None: no cache (no HOME to put it in).
    pub cache: Option<PathBuf>,
    /// To connect, to be answered, and for each [`MIN_PER_TIMEOUT`] bytes.
    pub timeout: Duration,
    /// For all the downloads of one input together.
    pub max_time: Duration,
    /// The largest file taken.
    pub max_size: u64,
    /// The most the cache holds.
    pub cache_max: u64,
}

impl Config {
    /// The settings of the environment (see the module's documentation).
    pub fn from_env() -> Config {
        Config::from_vars(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// The settings from a lookup of environment variables.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Config {
        let urls = match var("DEBUGINFOD_URLS") {
            Some(urls) if !is_offline(&var) => urls.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        // A positive whole number; not one (or 0, libdebuginfod's "no
        // limit"): the default.
        let number =
            |name: &str| var(name).and_then(|v| v.trim().parse::<u64>().ok()).filter(|&s| s > 0);
        let seconds = |name: &str, default: Duration| {
            number(name).map_or(default, |s| Duration::from_secs(s.min(MAX_SECONDS)))
        };
        Config {
            urls,
            cache: cache_dir(&var),
            timeout: seconds("DEBUGINFOD_TIMEOUT", DEFAULT_TIMEOUT),
            max_time: seconds("DEBUGINFOD_MAXTIME", DEFAULT_MAX_TIME),
            max_size: number("DEBUGINFOD_MAXSIZE").unwrap_or(DEFAULT_MAX_SIZE),
            cache_max: number("STACKWALK_DOWNLOADS_MAX").unwrap_or(DEFAULT_CACHE_MAX),
        }
    }

    /// These settings without servers: the cache alone.
    pub fn offline(mut self) -> Config {
        self.urls.clear();
        self
    }
}

/// Whether `STACKWALK_OFFLINE` (set, not empty or `0`) says to ask no server.
fn is_offline(var: &impl Fn(&str) -> Option<String>) -> bool {
    var("STACKWALK_OFFLINE").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether the environment says to ask no server (`STACKWALK_OFFLINE`).
pub fn offline_from_env() -> bool {
    is_offline(&|name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
}

/// The cache directory as libdebuginfod picks it.
fn cache_dir(var: &impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("DEBUGINFOD_CACHE_PATH")
        .or_else(|| Some(crate::source::files::cache_home(var)?.join("debuginfod_client")))
}

/// A build id as hex digits, checked: lowercase, an even count, at least
/// two (it becomes a directory name and part of a URL).
pub fn checked_build_id(hex: &str) -> Option<String> {
    let ok = hex.len() >= 2
        && hex.len() % 2 == 0
        && hex.len() <= 128
        && hex.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| hex.to_ascii_lowercase())
}

/// The cache entry of a build id's file (whether it exists or not).
pub fn cache_entry(cache: &Path, build_id: &str, kind: Kind) -> PathBuf {
    cache.join(build_id).join(kind.name())
}

/// The cached file of a build id, in the environment's cache: a non-empty
/// regular file (libdebuginfod marks a file that servers lack with an empty
/// one).
pub fn cached(build_id: &[u8], kind: Kind) -> Option<PathBuf> {
    let hex = crate::space::finder::hex(build_id);
    let cache = Config::from_env().cache?;
    cached_in(&cache, &checked_build_id(&hex)?, kind)
}

fn cached_in(cache: &Path, build_id: &str, kind: Kind) -> Option<PathBuf> {
    let path = cache_entry(cache, build_id, kind);
    crate::source::files::is_real_dir(&cache.join(build_id)).then_some(())?;
    let meta = std::fs::symlink_metadata(&path).ok()?;
    (meta.is_file() && meta.len() > 0).then(|| used(path))
}

/// A cache entry `path`, used: kept from the trimming of this process, and
/// its modification time made now, so that other processes' trimming
/// removes it last (as the section cache's entries).
pub(crate) fn used(path: PathBuf) -> PathBuf {
    use std::os::unix::fs::OpenOptionsExt;
    let open = std::fs::OpenOptions::new().append(true).custom_flags(libc::O_NOFOLLOW).open(&path);
    if let Ok(file) = open {
        let _ = file.set_modified(SystemTime::now());
    }
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    kept.get_or_insert_with(std::collections::HashSet::new).insert(path.clone());
    path
}

/// The cache entries this process has used (not removed by its trimming:
/// it may open them yet).
static KEPT: std::sync::Mutex<Option<std::collections::HashSet<PathBuf>>> =
    std::sync::Mutex::new(None);

/// The cache at `cache` trimmed to `max` bytes: its downloaded files
/// (`BUILDID/debuginfo`, `BUILDID/executable`, and the symbol files under
/// `breakpad/`), those used longest ago removed first, none this process has
/// used. What is left.
pub(crate) fn trim_cache(cache: &Path, max: u64) -> u64 {
    let mut entries = Vec::new();
    let mut dirs = vec![(cache.to_path_buf(), 0)];
    // Entries are BUILDID/KIND and breakpad/NAME/ID/NAME.sym: four levels at most.
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(list) = std::fs::read_dir(&dir) else { continue };
        for item in list.flatten() {
            let Ok(meta) = item.metadata() else { continue }; // not followed
            if meta.is_dir() && depth < 3 {
                dirs.push((item.path(), depth + 1));
            } else if meta.is_file() && !item.file_name().to_string_lossy().starts_with('.') {
                let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                entries.push((used, meta.len(), item.path()));
            }
        }
    }
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    if total <= max {
        return total;
    }
    entries.sort();
    let kept = KEPT.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default();
    for (_, len, path) in entries {
        if total <= max {
            break;
        }
        if !kept.contains(&path) && std::fs::remove_file(&path).is_ok() {
            total -= len;
            if let Some(dir) = path.parent().filter(|d| *d != cache) {
                let _ = std::fs::remove_dir(dir); // only if empty
            }
        }
    }
    total
}

/// How far the downloads of [`fetch_all_reporting`] are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Downloads {
    /// Files asked for.
    pub files: usize,
    /// Files answered: from the cache, from a server, or refused.
    pub answered: usize,
    /// Bytes received so far.
    pub received: u64,
    /// The sizes the servers announced (`Content-Length`) of the downloads
    /// begun; 0 for those that announced none.
    pub announced: u64,
}

/// The counts behind [`Downloads`], shared by the downloading threads, and
/// whom to tell of each change.
pub(crate) struct Tally<'a> {
    files: usize,
    answered: AtomicUsize,
    received: AtomicU64,
    announced: AtomicU64,
    report: &'a (dyn Fn(Downloads) + Sync),
}

impl Tally<'_> {
    fn report(&self) {
        (self.report)(Downloads {
            files: self.files,
            answered: self.answered.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            announced: self.announced.load(Ordering::Relaxed),
        });
    }
}

/// Why a file could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FetchError {
    /// Not a build id.
    BadBuildId(String),
    /// Not in the cache, and no server to ask.
    NoServers,
    /// Every server was asked: what each said, in order.
    Servers(Vec<(String, String)>),
    /// The file came, and could not be written to the cache.
    Cache(String),
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::BadBuildId(id) => write!(f, "{id:?} is not a build id"),
            FetchError::NoServers => f.write_str("no debuginfod server (DEBUGINFOD_URLS is unset)"),
            FetchError::Servers(answers) => {
                for (i, (url, why)) in answers.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}{url}: {why}")?;
                }
                Ok(())
            }
            FetchError::Cache(why) => write!(f, "cannot write to the cache: {why}"),
        }
    }
}

impl std::error::Error for FetchError {}

/// The file of `build_id` (hex digits): from the cache, else from the first
/// server that has it, written to the cache.
pub fn fetch(config: &Config, build_id: &str, kind: Kind) -> Result<PathBuf, FetchError> {
    fetch_counted(config, build_id, kind, None, Instant::now() + config.max_time)
}

fn fetch_counted(
    config: &Config,
    build_id: &str,
    kind: Kind,
    tally: Option<&Tally<'_>>,
    deadline: Instant,
) -> Result<PathBuf, FetchError> {
    let id = checked_build_id(build_id).ok_or_else(|| FetchError::BadBuildId(build_id.into()))?;
    if let Some(path) = config.cache.as_deref().and_then(|c| cached_in(c, &id, kind)) {
        return Ok(path);
    }
    if config.urls.is_empty() {
        return Err(FetchError::NoServers);
    }
    let mut answers = Vec::new();
    for url in &config.urls {
        let url = format!("{}/buildid/{id}/{}", url.trim_end_matches('/'), kind.name());
        match download(config, &url, &id, tally, deadline) {
            Ok(file) => return store(config, &id, kind, file),
            Err(why) => answers.push((url, why)),
        }
    }
    Err(FetchError::Servers(answers))
}

/// [`fetch`] for each of `requests`, several at once; the answers in the
/// same order. A request made twice is fetched once.
pub fn fetch_all(config: &Config, requests: &[(String, Kind)]) -> Vec<Result<PathBuf, FetchError>> {
    fetch_all_reporting(config, requests, &|_| {})
}

/// Asks the servers for these files (build id, kind), several at once: each
/// the file in the cache, or why none came.
pub type Fetch<'a> = dyn FnMut(&[(String, Kind)]) -> Vec<Result<PathBuf, String>> + 'a;

/// A module a source may fetch files for: its name (for messages), its
/// build id (hex), and the file found for it here.
pub struct Wanted<'a> {
    pub name: &'a str,
    pub build_id: &'a str,
    pub file: Option<&'a Path>,
}

/// What every source asks debuginfod for its modules: the executable of
/// each module without a file here, by its build id (`usable` says whether
/// a file that came is one: an ELF file of the source's architecture), and,
/// where `debug_root` is given, the DWARF of each module whose file has
/// none here (into the cache, where the lookups of lines and debug files
/// find it). `fetch` asks the servers, several files at once. Each file no
/// server gave is a warning; the answer: each module's executable fetched.
pub fn fetch_missing(
    modules: &[Wanted<'_>],
    debug_root: Option<&Path>,
    fetch: &mut Fetch<'_>,
    usable: &dyn Fn(&Path) -> bool,
    warnings: &mut Vec<String>,
) -> Vec<Option<PathBuf>> {
    let mut out = vec![None; modules.len()];
    let wanted: Vec<usize> = (0..modules.len()).filter(|&i| modules[i].file.is_none()).collect();
    let asked: Vec<(String, Kind)> =
        wanted.iter().map(|&i| (modules[i].build_id.to_owned(), Kind::Executable)).collect();
    let answers = if asked.is_empty() { Vec::new() } else { fetch(&asked) };
    for (&i, answer) in wanted.iter().zip(answers) {
        let name = modules[i].name;
        match answer {
            Ok(path) if usable(&path) => out[i] = Some(path),
            Ok(path) => warnings.push(format!(
                "debuginfod: no executable for {name}: {} is not an ELF file of this architecture",
                path.display()
            )),
            Err(why) => warnings.push(format!("debuginfod: no executable for {name}: {why}")),
        }
    }
    let Some(root) = debug_root else { return out };
    let without: Vec<usize> = (0..modules.len())
        .filter(|&i| {
            let file = out[i].as_deref().or(modules[i].file);
            file.is_some_and(|f| {
                !crate::source::files::map(f)
                    .is_ok_and(|d| crate::space::debugfile::has_dwarf(&d, Some(f), Some(root)))
            })
        })
        .collect();
    let asked: Vec<(String, Kind)> =
        without.iter().map(|&i| (modules[i].build_id.to_owned(), Kind::Debuginfo)).collect();
    let answers = if asked.is_empty() { Vec::new() } else { fetch(&asked) };
    for (&i, answer) in without.iter().zip(answers) {
        if let Err(why) = answer {
            warnings.push(format!("debuginfod: no debuginfo for {}: {why}", modules[i].name));
        }
    }
    out
}

/// [`fetch_all`], telling `progress` how far the downloads are at each
/// change (from the downloading threads: a progress bar, say, is the
/// caller's to draw, and to draw no more often than it likes).
pub fn fetch_all_reporting(
    config: &Config,
    requests: &[(String, Kind)],
    progress: &(dyn Fn(Downloads) + Sync),
) -> Vec<Result<PathBuf, FetchError>> {
    let mut unique: Vec<&(String, Kind)> = Vec::new();
    for r in requests {
        if !unique.contains(&r) {
            unique.push(r);
        }
    }
    let deadline = Instant::now() + config.max_time;
    let tally = Tally {
        files: unique.len(),
        answered: AtomicUsize::new(0),
        received: AtomicU64::new(0),
        announced: AtomicU64::new(0),
        report: progress,
    };
    let answers = at_once(&unique, |(id, kind)| {
        let answer = fetch_counted(config, id, *kind, Some(&tally), deadline);
        tally.answered.fetch_add(1, Ordering::Relaxed);
        tally.report();
        answer
    });
    requests
        .iter()
        .map(|r| {
            let i = unique.iter().position(|u| *u == r).unwrap_or(0);
            answers[i].clone()
        })
        .collect()
}

/// `f` of each of `items`, [`PARALLEL`] at once (each on a thread of its
/// own: they wait on servers, not on the CPU); the answers in order.
pub(crate) fn at_once<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<R>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL.min(items.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let answer = f(item);
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(answer);
            });
        }
    });
    slots
        .into_iter()
        .map(|slot| {
            let answer = slot.into_inner().unwrap_or_else(|e| e.into_inner());
            answer.expect("every item is answered once the threads are done")
        })
        .collect()
}

/// A file downloaded but not yet in the cache: a temporary file in its
/// entry's directory (or, without a cache, anywhere), removed when dropped
/// unless kept.
struct Download {
    file: tempfile_like::TempFile,
}

/// The response of `url`, written to a temporary file and checked to be an
/// ELF file with build id `id`; else why not, in a few words.
fn download(
    config: &Config,
    url: &str,
    id: &str,
    tally: Option<&Tally<'_>>,
    deadline: Instant,
) -> Result<Download, String> {
    let dir = config.cache.as_ref().map(|cache| cache.join(id));
    let file = get(config, url, dir.as_deref(), tally, deadline).map_err(|e| e.to_string())?;
    let data = crate::source::files::map(file.path()).map_err(|e| e.to_string())?;
    let theirs =
        crate::space::elf::summarize(&data).map_err(|_| "not an ELF file".to_string())?.build_id;
    let theirs: Option<String> = theirs.map(|b| crate::space::finder::hex(&b));
    if theirs.as_deref() != Some(id) {
        return Err(format!("the file has build id {}", theirs.as_deref().unwrap_or("none")));
    }
    Ok(Download { file })
}

/// A download's body, its bytes counted as they come, cut off when it is
/// too slow: [`MIN_PER_TIMEOUT`] bytes must come within each `timeout`, and
/// all of them before `deadline`.
struct Counted<'t, 'a, R> {
    inner: R,
    tally: Option<&'t Tally<'a>>,
    timeout: Duration,
    deadline: Instant,
    /// When the stretch being timed began, and the bytes since.
    since: Instant,
    got: u64,
}

impl<R: Read> Read for Counted<'_, '_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(tally) = self.tally.filter(|_| n > 0) {
            tally.received.fetch_add(n as u64, Ordering::Relaxed);
            tally.report();
        }
        if n == 0 {
            return Ok(0); // the end: however late, it is whole
        }
        let now = Instant::now();
        self.got += n as u64;
        if now >= self.deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "past DEBUGINFOD_MAXTIME",
            ));
        }
        if self.got >= MIN_PER_TIMEOUT {
            (self.since, self.got) = (now, 0);
        } else if now.duration_since(self.since) > self.timeout {
            let why = format!(
                "less than {} KiB in {} s (DEBUGINFOD_TIMEOUT)",
                MIN_PER_TIMEOUT >> 10,
                self.timeout.as_secs()
            );
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why));
        }
        Ok(n)
    }
}

/// Why a GET gave no file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GetError {
    /// The server answered with this status (and its reason), not 200.
    Status(u16, String),
    /// No answer: the connection failed, timed out, or broke.
    Transport(String),
    /// The answer could not be kept (too large, a local error).
    Other(String),
}

impl fmt::Display for GetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GetError::Status(code, reason) => write!(f, "{code} {reason}"),
            GetError::Transport(why) | GetError::Other(why) => f.write_str(why),
        }
    }
}

/// The body of `url`'s answer (status 200), written to a temporary file in
/// `dir` (made if need be; None: the system's temporary directory), at most
/// `config.max_size` bytes, before `deadline` and not slower than
/// [`Counted`] allows; its bytes counted in `tally`, if given.
pub(crate) fn get(
    config: &Config,
    url: &str,
    dir: Option<&Path>,
    tally: Option<&Tally<'_>>,
    deadline: Instant,
) -> Result<tempfile_like::TempFile, GetError> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(GetError::Other("not an http:// or https:// URL".into()));
    }
    let start = Instant::now();
    let left = deadline.saturating_duration_since(start);
    if left.is_zero() {
        return Err(GetError::Transport(late(config)));
    }
    let wait = Some(config.timeout.min(left));
    let response = agent()
        .get(url)
        .config()
        .timeout_resolve(wait)
        .timeout_connect(wait)
        .timeout_recv_response(wait)
        .timeout_per_read(wait)
        .timeout_global(Some(left))
        .build()
        .call()
        .map_err(|e| {
            GetError::Transport(match e {
                ureq::Error::Io(e) => io_message(&e),
                ureq::Error::Timeout(_) if Instant::now() >= deadline => late(config),
                ureq::Error::Timeout(_) => format!("no answer in {} s", config.timeout.as_secs()),
                e => e.to_string(),
            })
        })?;
    let status = response.status();
    if status != 200 {
        let reason = status.canonical_reason().unwrap_or("").to_owned();
        return Err(GetError::Status(status.as_u16(), reason));
    }
    let limit = config.max_size;
    let too_large = || GetError::Other(format!("larger than DEBUGINFOD_MAXSIZE ({limit} bytes)"));
    let announced = response.body().content_length();
    if announced.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let dir = match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| GetError::Other(format!("cannot make {}: {e}", dir.display())))?;
            if !crate::source::files::is_real_dir(dir) {
                return Err(GetError::Other(format!("{} is not a directory", dir.display())));
            }
            dir.to_owned()
        }
        None => std::env::temp_dir(),
    };
    let mut file =
        tempfile_like::TempFile::new(&dir).map_err(|e| GetError::Other(e.to_string()))?;
    if let Some(tally) = tally {
        tally.announced.fetch_add(announced.unwrap_or(0), Ordering::Relaxed);
        tally.report();
    }
    let mut body = response.into_body().into_reader();
    let mut counted = Counted {
        inner: (&mut body).take(limit.saturating_add(1)),
        tally,
        timeout: config.timeout,
        deadline,
        since: start,
        got: 0,
    };
    let copied = std::io::copy(&mut counted, file.writer()).map_err(|e| {
        GetError::Transport(if Instant::now() >= deadline {
            late(config)
        } else {
            format!("download cut short: {}", io_message(&e))
        })
    })?;
    if copied > limit {
        return Err(too_large());
    }
    file.writer().flush().map_err(|e| GetError::Other(e.to_string()))?;
    Ok(file)
}

/// Why a download was not had by the input's deadline.
fn late(config: &Config) -> String {
    format!("not done in {} s (DEBUGINFOD_MAXTIME)", config.max_time.as_secs())
}

/// The HTTP client; each request has its own timeouts ([`get`]).
fn agent() -> &'static ureq::Agent {
    static AGENT: std::sync::OnceLock<ureq::Agent> = std::sync::OnceLock::new();
    AGENT.get_or_init(|| {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .user_agent(concat!("stackwalk/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent()
    })
}

/// An I/O error as the C library words it ("Connection refused"), without
/// Rust's " (os error 111)".
fn io_message(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(cut) if e.raw_os_error().is_some() => text[..cut].to_owned(),
        _ => text,
    }
}

/// The downloaded file, renamed into its cache entry.
fn store(config: &Config, id: &str, kind: Kind, download: Download) -> Result<PathBuf, FetchError> {
    match &config.cache {
        Some(cache) => {
            let entry = cache_entry(cache, id, kind);
            download.file.persist(&entry).map_err(|e| FetchError::Cache(e.to_string()))?;
            let entry = used(entry);
            trim_cache(cache, config.cache_max);
            Ok(entry)
        }
        None => download.file.keep().map_err(|e| FetchError::Cache(e.to_string())),
    }
}

/// A temporary file made next to where it goes, so that a rename puts it
/// there at once.
pub(crate) mod tempfile_like {
    use std::fs::File;
    use std::io;
    use std::path::{Path, PathBuf};

    pub struct TempFile {
        path: PathBuf,
        file: Option<File>,
    }

    impl TempFile {
        pub fn new(dir: &Path) -> io::Result<TempFile> {
            use std::sync::atomic::{AtomicU64, Ordering};
            static NEXT: AtomicU64 = AtomicU64::new(0);
            loop {
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                let name = format!(".stackwalk.{}.{n}.tmp", std::process::id());
                let path = dir.join(name);
                match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                    Ok(file) => return Ok(TempFile { path, file: Some(file) }),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
        }

        pub fn path(&self) -> &Path {
            &self.path
        }

        pub fn writer(&mut self) -> &mut File {
            self.file.as_mut().expect("open until persisted")
        }

        /// Renamed to `to` (replacing what is there: an empty negative entry).
        pub fn persist(mut self, to: &Path) -> io::Result<()> {
            self.file.take();
            std::fs::rename(&self.path, to)?;
            self.path = PathBuf::new();
            Ok(())
        }

        /// Left where it is, for the caller.
        pub fn keep(mut self) -> io::Result<PathBuf> {
            self.file.take();
            Ok(std::mem::take(&mut self.path))
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            if !self.path.as_os_str().is_empty() {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::files::vars;

    #[test]
    fn settings_from_the_environment() {
        let config = Config::from_vars(vars(&[
            ("DEBUGINFOD_URLS", " http://a:1/  https://b "),
            ("HOME", "/home/u"),
            ("DEBUGINFOD_TIMEOUT", "5"),
        ]));
        assert_eq!(config.urls, vec!["http://a:1/", "https://b"]);
        assert_eq!(config.cache, Some(PathBuf::from("/home/u/.cache/debuginfod_client")));
        assert_eq!(config.timeout, Duration::from_secs(5));
        assert_eq!(config.max_time, DEFAULT_MAX_TIME);
        assert_eq!((config.max_size, config.cache_max), (DEFAULT_MAX_SIZE, DEFAULT_CACHE_MAX));
        // Any number is a setting: past a day, a day (no overflow of a deadline).
        let config = Config::from_vars(vars(&[
            ("DEBUGINFOD_TIMEOUT", "18446744073709551615"),
            ("DEBUGINFOD_MAXTIME", "99999999999"),
            ("DEBUGINFOD_MAXSIZE", "0"),
            ("STACKWALK_DOWNLOADS_MAX", "5"),
        ]));
        assert_eq!(config.timeout, Duration::from_secs(MAX_SECONDS));
        assert_eq!(config.max_time, Duration::from_secs(MAX_SECONDS));
        assert_eq!((config.max_size, config.cache_max), (DEFAULT_MAX_SIZE, 5));
        assert!(Instant::now().checked_add(config.timeout + config.max_time).is_some());
        let config = Config::from_vars(vars(&[
            ("DEBUGINFOD_URLS", "http://a"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/home/u"),
            ("DEBUGINFOD_TIMEOUT", "soon"),
        ]));
        assert_eq!(config.cache, Some(PathBuf::from("/x/debuginfod_client")));
        assert_eq!(config.timeout, DEFAULT_TIMEOUT);
        let config = Config::from_vars(vars(&[
            ("DEBUGINFOD_URLS", "http://a"),
            ("DEBUGINFOD_CACHE_PATH", "/c"),
            ("XDG_CACHE_HOME", "/x"),
            ("STACKWALK_OFFLINE", "1"),
        ]));
        assert_eq!(config.cache, Some(PathBuf::from("/c")));
        assert!(config.urls.is_empty(), "offline");
        let config =
            Config::from_vars(vars(&[("STACKWALK_OFFLINE", "0"), ("DEBUGINFOD_URLS", "u")]));
        assert_eq!((config.urls.len(), config.cache), (1, None));
        assert!(Config::from_vars(vars(&[("DEBUGINFOD_URLS", "u")])).offline().urls.is_empty());
    }

    #[test]
    fn build_ids_are_checked() {
        assert_eq!(checked_build_id("AbCd01"), Some("abcd01".into()));
        for bad in ["", "a", "abc", "../x", "ab/cd", "zz"] {
            assert_eq!(checked_build_id(bad), None, "{bad}");
        }
        let config = Config::from_vars(vars(&[]));
        assert_eq!(
            fetch(&config, "../etc", Kind::Debuginfo),
            Err(FetchError::BadBuildId("../etc".into()))
        );
        assert_eq!(fetch(&config, "abcd", Kind::Executable), Err(FetchError::NoServers));
    }

    #[test]
    fn the_cache_is_read_and_an_empty_entry_is_none() {
        let cache = std::env::temp_dir().join(format!("stackwalk-dbgd-{}", std::process::id()));
        let entry = cache_entry(&cache, "abcd", Kind::Debuginfo);
        std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
        std::fs::write(&entry, b"").unwrap();
        assert_eq!(cached_in(&cache, "abcd", Kind::Debuginfo), None);
        std::fs::write(&entry, b"x").unwrap();
        assert_eq!(cached_in(&cache, "abcd", Kind::Debuginfo), Some(entry.clone()));
        assert_eq!(cached_in(&cache, "abcd", Kind::Executable), None);
        let config = Config { cache: Some(cache.clone()), ..Config::from_vars(vars(&[])) };
        assert_eq!(fetch(&config, "ABCD", Kind::Debuginfo), Ok(entry));
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn a_server_that_is_not_there_is_an_answer() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = Config {
            urls: vec![format!("http://127.0.0.1:{port}"), "ftp://x".into()],
            cache: None,
            ..Config::from_vars(vars(&[]))
        };
        let answers = fetch_all(&config, &vec![("abcd".to_owned(), Kind::Debuginfo); 3]);
        assert_eq!(answers.len(), 3);
        let Err(FetchError::Servers(why)) = &answers[0] else { panic!("{answers:?}") };
        assert_eq!(why.len(), 2);
        assert!(why[0].0.ends_with("/buildid/abcd/debuginfo"), "{why:?}");
        assert_eq!(why[1].1, "not an http:// or https:// URL");
        assert_eq!(answers[1], answers[0]);
    }

    #[test]
    fn the_cache_is_trimmed_oldest_first_sparing_what_this_process_used() {
        let cache = std::env::temp_dir().join(format!("stackwalk-trim-{}", std::process::id()));
        let day = Duration::from_secs(86_400);
        let mut made = Vec::new();
        for (i, rel) in
            ["aa/debuginfo", "bb/executable", "breakpad/x.so/ID0/x.so.sym", "cc/debuginfo"]
                .iter()
                .enumerate()
        {
            let path = cache.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, vec![0u8; 100]).unwrap();
            let file = std::fs::File::options().append(true).open(&path).unwrap();
            file.set_modified(SystemTime::now() - day * (10 - i as u32)).unwrap();
            made.push(path);
        }
        // A temporary file of a download under way is not an entry.
        std::fs::write(cache.join("cc/.stackwalk.1.0.tmp"), vec![0u8; 1000]).unwrap();
        used(made[0].clone()); // the oldest, but this process's
        assert_eq!(trim_cache(&cache, 1000), 400, "under the cap: nothing removed");
        assert_eq!(trim_cache(&cache, 250), 200);
        let left: Vec<bool> = made.iter().map(|p| p.exists()).collect();
        assert_eq!(left, [true, false, false, true]);
        assert!(!cache.join("bb").exists(), "an emptied entry's directory is removed");
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn a_cache_entry_behind_a_symbolic_link_is_not_read() {
        let cache = std::env::temp_dir().join(format!("stackwalk-link-{}", std::process::id()));
        std::fs::create_dir_all(cache.join("abcd")).unwrap();
        std::fs::create_dir_all(cache.join("elsewhere")).unwrap();
        std::fs::write(cache.join("elsewhere/debuginfo"), b"x").unwrap();
        std::os::unix::fs::symlink(cache.join("elsewhere/debuginfo"), cache.join("abcd/debuginfo"))
            .unwrap();
        std::os::unix::fs::symlink(cache.join("elsewhere"), cache.join("ef01")).unwrap();
        assert_eq!(cached_in(&cache, "abcd", Kind::Debuginfo), None);
        assert_eq!(cached_in(&cache, "ef01", Kind::Debuginfo), None);
        std::fs::remove_dir_all(&cache).unwrap();
    }
}
