//! A debuginfod client: files by build id from the servers elfutils'
//! protocol defines (`GET URL/buildid/BUILDID/debuginfo`, `.../executable`),
//! kept in elfutils' cache layout so that stackwalk, gdb and eu-stack share
//! what any of them downloaded.
//!
//! Settings, as libdebuginfod reads them: `DEBUGINFOD_URLS` (servers,
//! separated by spaces, asked in order until one has the file; unset or
//! empty: none), `DEBUGINFOD_CACHE_PATH` (else `$XDG_CACHE_HOME/debuginfod_client`,
//! else `~/.cache/debuginfod_client`; entries `BUILDID/debuginfo` and
//! `BUILDID/executable`), `DEBUGINFOD_TIMEOUT` (seconds to connect, and
//! without a byte received: 90 by default), `DEBUGINFOD_MAXTIME` (seconds
//! for a whole download) and `DEBUGINFOD_MAXSIZE` (bytes). stackwalk's own
//! `STACKWALK_OFFLINE` (set, not empty or `0`) asks no server.
//!
//! A file is written under a temporary name in its entry's directory and
//! renamed into place once whole, so a reader (another stackwalk, gdb) never
//! sees half of it. A downloaded file must be an ELF file with the build id
//! asked for. The cache is read whatever the servers: [`cached`] is one more
//! place of files by build id, like a debug root.

use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

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
/// Downloads at once, at most.
const PARALLEL: usize = 8;

/// Where and how files are fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Server URLs, in order; none: the cache alone.
    pub urls: Vec<String>,
    /// The cache directory; None: no cache (no HOME to put it in).
    pub cache: Option<PathBuf>,
    /// To connect, and between two reads of a response.
    pub timeout: Duration,
    /// For a whole download (None: no limit).
    pub max_time: Option<Duration>,
    /// The largest file taken (None: no limit).
    pub max_size: Option<u64>,
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
        let seconds =
            |name: &str| var(name).and_then(|v| v.trim().parse::<u64>().ok()).filter(|&s| s > 0);
        Config {
            urls,
            cache: cache_dir(&var),
            timeout: seconds("DEBUGINFOD_TIMEOUT").map_or(DEFAULT_TIMEOUT, Duration::from_secs),
            max_time: seconds("DEBUGINFOD_MAXTIME").map(Duration::from_secs),
            max_size: seconds("DEBUGINFOD_MAXSIZE"),
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
        .or_else(|| Some(crate::files::cache_home(var)?.join("debuginfod_client")))
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
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let cache = Config::from_env().cache?;
    cached_in(&cache, &checked_build_id(&hex)?, kind)
}

fn cached_in(cache: &Path, build_id: &str, kind: Kind) -> Option<PathBuf> {
    let path = cache_entry(cache, build_id, kind);
    let meta = std::fs::metadata(&path).ok()?;
    (meta.is_file() && meta.len() > 0).then_some(path)
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
    fetch_counted(config, build_id, kind, None)
}

fn fetch_counted(
    config: &Config,
    build_id: &str,
    kind: Kind,
    tally: Option<&Tally<'_>>,
) -> Result<PathBuf, FetchError> {
    let id = checked_build_id(build_id).ok_or_else(|| FetchError::BadBuildId(build_id.into()))?;
    if let Some(path) = config.cache.as_deref().and_then(|c| cached_in(c, &id, kind)) {
        return Ok(path);
    }
    if config.urls.is_empty() {
        return Err(FetchError::NoServers);
    }
    let agent = agent(config);
    let mut answers = Vec::new();
    for url in &config.urls {
        let url = format!("{}/buildid/{id}/{}", url.trim_end_matches('/'), kind.name());
        match download(&agent, config, &url, &id, tally) {
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
    let next = AtomicUsize::new(0);
    let tally = Tally {
        files: unique.len(),
        answered: AtomicUsize::new(0),
        received: AtomicU64::new(0),
        announced: AtomicU64::new(0),
        report: progress,
    };
    let mut answers: Vec<Option<Result<PathBuf, FetchError>>> = vec![None; unique.len()];
    let slots: Vec<std::sync::Mutex<&mut Option<Result<PathBuf, FetchError>>>> =
        answers.iter_mut().map(std::sync::Mutex::new).collect();
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL.min(unique.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((id, kind)) = unique.get(i) else { break };
                let answer = fetch_counted(config, id, *kind, Some(&tally));
                **slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(answer);
                tally.answered.fetch_add(1, Ordering::Relaxed);
                tally.report();
            });
        }
    });
    drop(slots);
    requests
        .iter()
        .map(|r| {
            let i = unique.iter().position(|u| *u == r).unwrap_or(0);
            answers[i].clone().unwrap_or(Err(FetchError::NoServers))
        })
        .collect()
}

/// The HTTP client, with `config`'s timeouts.
pub(crate) fn agent(config: &Config) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(config.timeout))
        .timeout_resolve(Some(config.timeout))
        .timeout_recv_response(Some(config.timeout))
        .timeout_per_read(Some(config.timeout))
        .timeout_global(config.max_time)
        .user_agent(concat!("stackwalk/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent()
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
    agent: &ureq::Agent,
    config: &Config,
    url: &str,
    id: &str,
    tally: Option<&Tally<'_>>,
) -> Result<Download, String> {
    let dir = config.cache.as_ref().map(|cache| cache.join(id));
    let file = get(agent, config, url, dir.as_deref(), tally).map_err(|e| e.to_string())?;
    let data = crate::files::map(file.path()).map_err(|e| e.to_string())?;
    let theirs = crate::elf::summarize(&data).map_err(|_| "not an ELF file".to_string())?.build_id;
    let theirs: Option<String> = theirs.map(|b| b.iter().map(|b| format!("{b:02x}")).collect());
    if theirs.as_deref() != Some(id) {
        return Err(format!("the file has build id {}", theirs.as_deref().unwrap_or("none")));
    }
    Ok(Download { file })
}

/// A download's body, its bytes counted as they come.
struct Counted<'t, 'a, R> {
    inner: R,
    tally: Option<&'t Tally<'a>>,
}

impl<R: Read> Read for Counted<'_, '_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(tally) = self.tally.filter(|_| n > 0) {
            tally.received.fetch_add(n as u64, Ordering::Relaxed);
            tally.report();
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
/// `config.max_size` bytes; its bytes counted in `tally`, if given.
pub(crate) fn get(
    agent: &ureq::Agent,
    config: &Config,
    url: &str,
    dir: Option<&Path>,
    tally: Option<&Tally<'_>>,
) -> Result<tempfile_like::TempFile, GetError> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(GetError::Other("not an http:// or https:// URL".into()));
    }
    let response = agent.get(url).call().map_err(|e| {
        GetError::Transport(match e {
            ureq::Error::Io(e) => io_message(&e),
            ureq::Error::Timeout(_) => format!("no answer in {} s", config.timeout.as_secs()),
            e => e.to_string(),
        })
    })?;
    let status = response.status();
    if status != 200 {
        let reason = status.canonical_reason().unwrap_or("").to_owned();
        return Err(GetError::Status(status.as_u16(), reason));
    }
    let dir = match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| GetError::Other(format!("cannot make {}: {e}", dir.display())))?;
            dir.to_owned()
        }
        None => std::env::temp_dir(),
    };
    let mut file =
        tempfile_like::TempFile::new(&dir).map_err(|e| GetError::Other(e.to_string()))?;
    let announced = response.body().content_length();
    if let Some(tally) = tally {
        tally.announced.fetch_add(announced.unwrap_or(0), Ordering::Relaxed);
        tally.report();
    }
    let mut body = response.into_body().into_reader();
    let limit = config.max_size.unwrap_or(u64::MAX);
    let mut counted = Counted { inner: (&mut body).take(limit.saturating_add(1)), tally };
    let copied = std::io::copy(&mut counted, file.writer())
        .map_err(|e| GetError::Transport(format!("download cut short: {}", io_message(&e))))?;
    if copied > limit {
        return Err(GetError::Other(format!("larger than DEBUGINFOD_MAXSIZE ({limit} bytes)")));
    }
    file.writer().flush().map_err(|e| GetError::Other(e.to_string()))?;
    Ok(file)
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
    use crate::files::vars;

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
        assert_eq!((config.max_time, config.max_size), (None, None));
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
            timeout: Duration::from_secs(30),
            max_time: None,
            max_size: None,
        };
        let answers = fetch_all(&config, &vec![("abcd".to_owned(), Kind::Debuginfo); 3]);
        assert_eq!(answers.len(), 3);
        let Err(FetchError::Servers(why)) = &answers[0] else { panic!("{answers:?}") };
        assert_eq!(why.len(), 2);
        assert!(why[0].0.ends_with("/buildid/abcd/debuginfo"), "{why:?}");
        assert_eq!(why[1].1, "not an http:// or https:// URL");
        assert_eq!(answers[1], answers[0]);
    }
}
