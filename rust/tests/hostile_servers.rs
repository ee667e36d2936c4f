//! Hostile servers around the debuginfod and symbol-server clients
//! (`space::debuginfod`, `space::symserver`: what
//! `core`, `minidump` and `perf` download through): a server that trickles a
//! byte now and then, one that sends without end or announces a file larger
//! than any allowed, one that holds every request, settings past any sensible
//! number, a cache grown past its cap, and a cache entry that is a symbolic
//! link.
//!
//! The servers are real HTTP servers on 127.0.0.1 (a thread per connection),
//! each answering every GET the hostile way; the settings are read as from
//! the environment a user would set (`Config::from_vars`). The rule: every
//! download ends, with its reason, in bounded time and bounded disk, never a
//! panic.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime};

use _core::space::debuginfod::{self, Config, Kind};
use _core::space::symserver;

const BUILD_ID: &str = "abababababababababababababababababababab";
/// Only so that a failing test ends: no answer here should take this long.
const HANG: Duration = Duration::from_secs(150);

/// What a server saw, and its stop signal.
#[derive(Default)]
struct State {
    /// The path of every GET, in order.
    paths: Mutex<Vec<String>>,
    /// (requests being answered now, the most at once).
    open: Mutex<(usize, usize)>,
    changed: Condvar,
    stop: AtomicBool,
}

impl State {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Waits until `done` holds of (open, most open), the server stops, or
    /// `HANG` passes.
    fn wait_for(&self, done: impl Fn(usize, usize) -> bool) {
        let open = self.open.lock().unwrap();
        let _ = self
            .changed
            .wait_timeout_while(open, HANG, |&mut (now, most)| !done(now, most) && !self.stopped())
            .unwrap();
    }

    fn most_open(&self) -> usize {
        self.open.lock().unwrap().1
    }

    fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }
}

type Answer = dyn Fn(&mut TcpStream, &str, &State) -> std::io::Result<()> + Send + Sync;

/// An HTTP server on 127.0.0.1 whose every GET is answered by `answer`
/// (given the stream, the request's path and the server's state); stopped
/// when dropped.
struct Server {
    url: String,
    state: Arc<State>,
    accepting: Option<JoinHandle<()>>,
}

impl Server {
    fn new(
        answer: impl Fn(&mut TcpStream, &str, &State) -> std::io::Result<()> + Send + Sync + 'static,
    ) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        listener.set_nonblocking(true).unwrap();
        let state = Arc::new(State::default());
        let answer: Arc<Answer> = Arc::new(answer);
        let accepting = {
            let state = state.clone();
            thread::spawn(move || {
                while !state.stopped() {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let (state, answer) = (state.clone(), answer.clone());
                            thread::spawn(move || connection(stream, &state, &*answer));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Server { url, state, accepting: Some(accepting) }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.state.changed.notify_all();
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.join();
        }
    }
}

/// The requests of one connection, each answered in turn, until the client
/// closes it (or an answer fails: the client gave up, as it should).
fn connection(stream: TcpStream, state: &State, answer: &Answer) {
    let _ = stream.set_nonblocking(false);
    let mut reader = BufReader::new(stream);
    loop {
        let mut head = String::new();
        if reader.read_line(&mut head).unwrap_or(0) == 0 {
            return;
        }
        let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 2 {
            line.clear();
        }
        state.paths.lock().unwrap().push(path.clone());
        {
            let mut open = state.open.lock().unwrap();
            open.0 += 1;
            open.1 = open.1.max(open.0);
        }
        state.changed.notify_all();
        let answered = answer(reader.get_mut(), &path, state);
        state.open.lock().unwrap().0 -= 1;
        if answered.is_err() {
            return;
        }
    }
}

fn not_found(stream: &mut TcpStream, _: &str, _: &State) -> std::io::Result<()> {
    stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
}

/// An answer serving the files under `store` by their path (404 for any
/// other path).
fn files_from(store: PathBuf) -> impl Fn(&mut TcpStream, &str, &State) -> std::io::Result<()> {
    move |stream, path, state| {
        let file = store.join(path.trim_start_matches('/'));
        match std::fs::read(&file) {
            Ok(body) if !path.contains("..") => {
                write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len())?;
                stream.write_all(&body)
            }
            _ => not_found(stream, path, state),
        }
    }
}

/// Every request held until `count` are open at once, then answered 404.
fn held(count: usize) -> impl Fn(&mut TcpStream, &str, &State) -> std::io::Result<()> {
    move |stream, path, state| {
        state.wait_for(|_, most| most >= count);
        not_found(stream, path, state)
    }
}

/// A file announced, then a byte every half second for as long as the client
/// listens.
fn trickle(stream: &mut TcpStream, _: &str, state: &State) -> std::io::Result<()> {
    stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")?;
    while !state.stopped() {
        stream.write_all(b"\x7f")?;
        stream.flush()?;
        thread::sleep(Duration::from_millis(500));
    }
    Ok(())
}

/// The settings a user's environment gives: `vars`, with the server `url`
/// and the cache `cache`.
fn config(url: &str, cache: &Path, vars: &[(&str, &str)]) -> Config {
    let mut env: HashMap<String, String> =
        vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    env.insert("DEBUGINFOD_URLS".into(), url.into());
    env.insert("DEBUGINFOD_CACHE_PATH".into(), cache.to_string_lossy().into_owned());
    Config::from_vars(|name| env.get(name).cloned())
}

/// Why the debug file of `BUILD_ID` was not fetched (a panic if it was).
fn not_fetched(config: &Config) -> String {
    let request = [(BUILD_ID.to_owned(), Kind::Debuginfo)];
    let answers = debuginfod::fetch_all(config, &request);
    match answers.into_iter().next().unwrap() {
        Ok(path) => panic!("fetched {}", path.display()),
        Err(why) => why.to_string(),
    }
}

/// The files in the cache, at any depth.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_in(&path));
        } else {
            files.push(path);
        }
    }
    files
}

fn modules(count: usize) -> Vec<(String, String)> {
    (0..count).map(|i| (format!("lib{i}.so"), format!("{i:032X}0"))).collect()
}

#[test]
fn a_trickling_server_is_cut_off() {
    // A byte now and then kept every read under DEBUGINFOD_TIMEOUT, and so the
    // download alive for ever: 100 KiB must come within each timeout. Nothing
    // is left in the cache.
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let server = Server::new(trickle);
    let why = not_fetched(&config(&server.url, &cache, &[("DEBUGINFOD_TIMEOUT", "2")]));
    assert!(why.contains("less than 100 KiB in 2 s (DEBUGINFOD_TIMEOUT)"), "{why}");
    assert_eq!(files_in(&cache), Vec::<PathBuf>::new());
}

#[test]
fn one_deadline_for_the_downloads_of_an_input() {
    // A trickling server with a long DEBUGINFOD_TIMEOUT is still bound by
    // DEBUGINFOD_MAXTIME, one deadline for all the files an input asks for.
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::new(trickle);
    let vars = [("DEBUGINFOD_TIMEOUT", "600"), ("DEBUGINFOD_MAXTIME", "3")];
    let why = not_fetched(&config(&server.url, &tmp.path().join("cache"), &vars));
    assert!(why.contains("not done in 3 s (DEBUGINFOD_MAXTIME)"), "{why}");
}

#[test]
fn numbers_past_any_sense_are_a_day_not_a_panic() {
    // Timeouts of 2^64 - 1 seconds overflowed the deadline (a panic); they
    // are taken as a day, and a 404 is still an answer.
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::new(not_found);
    let huge = u64::MAX.to_string();
    let vars = [("DEBUGINFOD_TIMEOUT", huge.as_str()), ("DEBUGINFOD_MAXTIME", huge.as_str())];
    let why = not_fetched(&config(&server.url, &tmp.path().join("cache"), &vars));
    assert!(why.ends_with(": 404 Not Found"), "{why}");
    assert_eq!(server.state.paths(), [format!("/buildid/{BUILD_ID}/debuginfo")]);
}

#[test]
fn a_file_larger_than_allowed_is_not_downloaded() {
    // A server announcing a file past DEBUGINFOD_MAXSIZE is refused before its
    // body is read, and one that sends without end (no length announced) is
    // cut off at the limit; neither leaves a byte in the cache.
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let vars = [("DEBUGINFOD_MAXSIZE", "1048576"), ("DEBUGINFOD_TIMEOUT", "600")];
    let refused = "larger than DEBUGINFOD_MAXSIZE (1048576 bytes)";
    let announced = Server::new(|stream, _, state| {
        stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n")?;
        state.wait_for(|_, _| false); // nothing comes: a client reading the body waits for ever
        Ok(())
    });
    let why = not_fetched(&config(&announced.url, &cache, &vars));
    assert!(why.ends_with(refused), "{why}");
    let sent = Arc::new(AtomicUsize::new(0));
    let endless = {
        let sent = sent.clone();
        Server::new(move |stream, _, _| {
            stream.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")?;
            let chunk = [0u8; 1 << 16];
            for _ in 0..1 << 20 {
                stream.write_all(&chunk)?; // 64 GiB at most
                sent.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })
    };
    let why = not_fetched(&config(&endless.url, &cache, &vars));
    assert!(why.ends_with(refused), "{why}");
    let chunks = sent.load(Ordering::SeqCst);
    assert!(chunks < 1 << 14, "the client stopped reading near the limit: {chunks} chunks sent");
    assert_eq!(files_in(&cache), Vec::<PathBuf>::new());
}

#[test]
fn a_cache_entry_that_is_a_symbolic_link_is_not_used() {
    // An entry that is a symbolic link (to a file another user chose) is not
    // read: the file is asked for anew.
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    std::fs::create_dir_all(cache.join(BUILD_ID)).unwrap();
    let target = tmp.path().join("elsewhere");
    std::fs::write(&target, b"\x7fELF").unwrap();
    std::os::unix::fs::symlink(&target, cache.join(BUILD_ID).join("debuginfo")).unwrap();
    let server = Server::new(not_found);
    let why = not_fetched(&config(&server.url, &cache, &[]));
    assert!(why.ends_with("404 Not Found"), "{why}");
    assert_eq!(server.state.paths(), [format!("/buildid/{BUILD_ID}/debuginfo")]);
    assert_eq!(std::fs::read(&target).unwrap(), b"\x7fELF");
}

#[test]
fn symbol_files_are_asked_for_at_once() {
    // The .sym files of a dump's modules are asked for together: a server that
    // answers only once it holds five requests at once answers them (one after
    // another, the first would wait for ever), each asked for once.
    let tmp = tempfile::tempdir().unwrap();
    let wanted = modules(5);
    let server = Server::new(held(wanted.len()));
    let config = config("", &tmp.path().join("cache"), &[("DEBUGINFOD_TIMEOUT", "600")]);
    let found = symserver::fetch_all(&config, std::slice::from_ref(&server.url), &wanted, false);
    assert!(found.iter().all(|f| f.path.is_none() && f.warnings.is_empty()));
    assert_eq!(server.state.most_open(), wanted.len());
    let mut paths = server.state.paths();
    paths.sort();
    let mut asked: Vec<String> = wanted.iter().map(|(n, i)| format!("/{n}/{i}/{n}.sym")).collect();
    asked.sort();
    assert_eq!(paths, asked);
}

#[test]
fn a_server_that_holds_every_request_is_one_deadline() {
    // Twenty modules from a server that never answers: all given up at one
    // deadline (DEBUGINFOD_MAXTIME), said once, not twenty timeouts in turn.
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::new(held(usize::MAX));
    let vars = [("DEBUGINFOD_TIMEOUT", "600"), ("DEBUGINFOD_MAXTIME", "3")];
    let config = config("", &tmp.path().join("cache"), &vars);
    let found =
        symserver::fetch_all(&config, std::slice::from_ref(&server.url), &modules(20), false);
    assert!(found.iter().all(|f| f.path.is_none()));
    let warnings: Vec<&String> = found.iter().flat_map(|f| &f.warnings).collect();
    let said = format!(
        "symbol server {} did not answer (not done in 3 s (DEBUGINFOD_MAXTIME)): not asked again",
        server.url
    );
    assert_eq!(warnings, [&said]);
    let most = server.state.most_open();
    assert!(1 < most && most <= 8, "several at once, no more than the client's threads: {most}");
}

/// A store holding `libx.so`'s symbol file for id `ID0`, `lines` FUNC lines
/// long: (the store, the file).
fn store_with_one_file(dir: &Path, lines: usize) -> (PathBuf, PathBuf) {
    let store = dir.join("store");
    let sym = store.join("libx.so/ID0/libx.so.sym");
    std::fs::create_dir_all(sym.parent().unwrap()).unwrap();
    let text = "MODULE Linux x86_64 ID0 libx.so\n".to_owned() + &"FUNC 0 1 0 f\n".repeat(lines);
    std::fs::write(&sym, text).unwrap();
    (store, sym)
}

#[test]
fn the_cache_is_kept_under_its_cap() {
    // STACKWALK_DOWNLOADS_MAX: a download that takes the cache past it removes
    // the entries used longest ago (another tool's, stackwalk's), not the file
    // just fetched.
    let tmp = tempfile::tempdir().unwrap();
    let (store, sym) = store_with_one_file(tmp.path(), 1000);
    let cache = tmp.path().join("cache");
    let day = Duration::from_secs(86400);
    let old: Vec<PathBuf> = ["aa/debuginfo", "bb/executable", "breakpad/y.so/ID1/y.so.sym"]
        .iter()
        .enumerate()
        .map(|(i, rel)| {
            let path = cache.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let file = std::fs::File::create(&path).unwrap();
            file.set_len(10_000).unwrap();
            file.set_modified(SystemTime::now() - day * (10 - i as u32)).unwrap();
            path
        })
        .collect();
    let server = Server::new(files_from(store.clone()));
    let config = config("", &cache, &[("STACKWALK_DOWNLOADS_MAX", "25000")]);
    let wanted = [("libx.so".to_owned(), "ID0".to_owned())];
    let found = symserver::fetch_all(&config, std::slice::from_ref(&server.url), &wanted, false);
    assert_eq!(found[0].warnings, Vec::<String>::new());
    let path = found[0].path.clone().unwrap();
    assert_eq!(path, cache.join("breakpad").join(sym.strip_prefix(&store).unwrap()));
    assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&sym).unwrap());
    // 30,000 bytes of old entries and the new file's 13,032: the two oldest must go.
    let size = std::fs::metadata(&sym).unwrap().len();
    assert!(size + 20_000 > 25_000 && 25_000 >= size + 10_000);
    let kept: Vec<bool> = old.iter().map(|p| p.exists()).collect();
    assert_eq!(kept, [false, false, true]);
}

#[test]
fn settings_that_are_not_numbers_are_the_defaults() {
    // A setting that is no number (or 0, or negative) is its default, as
    // libdebuginfod takes it: the download still works.
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = store_with_one_file(tmp.path(), 0);
    let server = Server::new(files_from(store));
    let wanted = [("libx.so".to_owned(), "ID0".to_owned())];
    for name in ["DEBUGINFOD_TIMEOUT", "DEBUGINFOD_MAXTIME", "DEBUGINFOD_MAXSIZE"] {
        for value in ["soon", "0", "-5", " 1e9 "] {
            let cache = tmp.path().join(format!("cache-{name}-{}", value.trim()));
            let config = config("", &cache, &[(name, value)]);
            let found =
                symserver::fetch_all(&config, std::slice::from_ref(&server.url), &wanted, false);
            assert!(found[0].path.is_some(), "{name}={value:?}: {:?}", found[0].warnings);
            assert_eq!(found[0].warnings, Vec::<String>::new(), "{name}={value:?}");
        }
    }
}
