//! The snapshot document: what every snapshot input (a core, a minidump, a
//! live process, a capture) is reported as, and its two writers -- the JSON
//! of docs/json.md (`stackwalk.snapshot/1`) and the text `stackwalk core`
//! prints. The sources fill it in; nothing here reads a file.
//!
//! Paths are kept as the process had them (`OsString`: a module's path need
//! not be UTF-8). The JSON writes a byte that is not UTF-8 as the escape of
//! the lone surrogate Python's `os.fsdecode` makes of it (`"\udcaf"`), which
//! Python's JSON reader gives back as that same path; the text writes it as
//! `\xaf`.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

use super::json::JsonWriter;
use super::text::escaped;

/// The document's shape and version (docs/json.md, "Versions").
pub const SCHEMA: &str = "stackwalk.snapshot/1";

/// What was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Core,
    Minidump,
    /// A live process (`stackwalk pid`).
    Process,
    /// One thread stopped under gdb (`stackwalk capture`).
    Capture,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Core, Kind::Minidump, Kind::Process, Kind::Capture];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Core => "core",
            Kind::Minidump => "minidump",
            Kind::Process => "process",
            Kind::Capture => "capture",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// The signal that stopped the process.
#[derive(Clone, Debug)]
pub struct Signal {
    pub number: i64,
    pub name: String,
    /// The faulting address, where the kernel gave one.
    pub address: Option<u64>,
}

/// A minidump's system info stream, as minidump-stackwalk names it.
#[derive(Clone, Debug)]
pub struct System {
    pub os: String,
    pub os_version: Option<String>,
    pub cpu: String,
}

/// A minidump's exception stream.
#[derive(Clone, Debug)]
pub struct Crash {
    pub reason: String,
    pub address: u64,
    pub thread: i64,
}

/// A module's Breakpad ids, from a minidump's module list.
#[derive(Clone, Debug)]
pub struct Ids {
    pub debug_file: Option<String>,
    pub debug_id: Option<String>,
    pub code_id: Option<String>,
}

/// A module mapped.
#[derive(Clone, Debug)]
pub struct Module {
    pub path: OsString,
    pub start: u64,
    pub end: u64,
    /// The runtime ranges it occupies.
    pub ranges: Vec<(u64, u64)>,
    pub bias: u64,
    pub build_id: Option<String>,
    pub found: bool,
    pub build_id_matches: Option<bool>,
    /// A minidump's module's ids (None where the module list has none).
    pub ids: Option<Ids>,
}

impl Module {
    /// Its Breakpad ids by their keys in the document (a minidump's; None
    /// where the module list has none).
    pub fn id_fields(&self) -> [(&'static str, Option<&str>); 3] {
        let ids = self.ids.as_ref();
        [
            ("debug_file", ids.and_then(|i| i.debug_file.as_deref())),
            ("debug_id", ids.and_then(|i| i.debug_id.as_deref())),
            ("code_id", ids.and_then(|i| i.code_id.as_deref())),
        ]
    }
}

/// A native frame: where, how it was found, what it is.
#[derive(Clone, Debug, Default)]
pub struct NativeFrame {
    pub index: usize,
    pub pc: u64,
    pub sp: u64,
    pub cfa: Option<u64>,
    pub trust: String,
    pub module: Option<String>,
    pub module_offset: Option<u64>,
    pub function: Option<String>,
    pub function_offset: Option<u64>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub inline: bool,
    pub doubtful: bool,
    /// Its registers as the walk recovered them (`--registers`).
    pub registers: Option<Vec<(&'static str, u64)>>,
}

/// A Python function running.
#[derive(Clone, Debug)]
pub struct PythonFrame {
    pub function: String,
    pub qualname: String,
    pub file: String,
    pub line: Option<u32>,
}

#[derive(Clone, Debug)]
pub enum Frame {
    Native(NativeFrame),
    Python(PythonFrame),
}

/// A thread and its frames, innermost first.
#[derive(Clone, Debug)]
pub struct Thread {
    pub tid: i64,
    /// Why its walk stopped (`stackwalk._core.END_REASONS`).
    pub end: String,
    pub end_detail: Option<String>,
    pub frames: Vec<Frame>,
    /// Whether it held the GIL (a python process's document).
    pub gil: Option<bool>,
    /// Why its Python frames stop before its first.
    pub python_stop: Option<String>,
}

impl Thread {
    /// A walk that reached the outermost frame.
    pub fn complete(&self) -> bool {
        matches!(self.end.as_str(), "end_of_stack" | "pc_zero")
    }
}

/// The interpreter whose Python frames were read.
#[derive(Clone, Debug)]
pub struct Python {
    pub module: OsString,
    pub version: String,
    pub warnings: Vec<String>,
    pub error: Option<String>,
}

/// The snapshot document (docs/json.md).
#[derive(Clone, Debug)]
pub struct Document {
    pub kind: Kind,
    /// The file read; None for a process and the demo's capture.
    pub path: Option<OsString>,
    pub arch: String,
    pub executable: Option<OsString>,
    pub pid: Option<i64>,
    pub signal: Option<Signal>,
    pub crashing_thread: Option<i64>,
    pub modules: Vec<Module>,
    pub threads: Vec<Thread>,
    /// A python process's interpreter: every frame then has its `kind`.
    pub python: Option<Python>,
    /// A minidump's.
    pub system: Option<System>,
    pub crash: Option<Crash>,
    /// A process's: how long it was stopped.
    pub stopped_ms: Option<f64>,
}

impl Document {
    /// A document of `kind` with nothing in it but its architecture.
    pub fn new(kind: Kind, arch: &str) -> Self {
        Document {
            kind,
            path: None,
            arch: arch.to_owned(),
            executable: None,
            pid: None,
            signal: None,
            crashing_thread: None,
            modules: Vec::new(),
            threads: Vec::new(),
            python: None,
            system: None,
            crash: None,
            stopped_ms: None,
        }
    }
}

// -- JSON ------------------------------------------------------------------------------------

/// A path as text: each byte that is not UTF-8 as `\xNN`, control
/// characters escaped (`escaped`).
fn text_path(path: &OsStr) -> String {
    let mut out = String::new();
    for chunk in path.as_bytes().utf8_chunks() {
        out.push_str(&escaped(chunk.valid()));
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

impl Document {
    /// The document as JSON: indented by `indent` spaces, or on one line.
    pub fn write_json(&self, out: &mut String, indent: Option<usize>) {
        self.write_json_flushing(out, indent, &mut |_| {});
    }

    /// [`Self::write_json`], `flush` given the text so far after each thread
    /// (to write it out and clear it: the document of a core of 100,000
    /// threads is never held whole as text).
    pub fn write_json_flushing(
        &self,
        out: &mut String,
        indent: Option<usize>,
        flush: &mut dyn FnMut(&mut String),
    ) {
        let mut j = JsonWriter::new(out, indent);
        j.open('{');
        j.key("schema").str(SCHEMA);
        j.key("kind").str(self.kind.as_str());
        j.key("path").opt_path(self.path.as_deref());
        j.key("arch").str(&self.arch);
        j.key("executable").opt_path(self.executable.as_deref());
        j.key("pid").opt_int(self.pid);
        j.key("signal");
        match &self.signal {
            Some(s) => {
                j.open('{');
                j.key("number").int(s.number);
                j.key("name").str(&s.name);
                j.key("address").opt_hex(s.address);
                j.close('}');
            }
            None => j.out.push_str("null"),
        }
        j.key("crashing_thread").opt_int(self.crashing_thread);
        j.key("modules").open('[');
        for m in &self.modules {
            self.module_json(&mut j, m);
        }
        j.close(']');
        j.key("threads").open('[');
        let kinds = self.python.is_some();
        for t in &self.threads {
            thread_json(&mut j, t, kinds);
            flush(j.out);
        }
        j.close(']');
        if let Some(p) = &self.python {
            j.key("python").open('{');
            j.key("module").path(&p.module);
            j.key("version").str(&p.version);
            j.key("warnings").open('[');
            for w in &p.warnings {
                j.item();
                j.str(w);
            }
            j.close(']');
            j.key("error").opt_str(p.error.as_deref());
            j.close('}');
        }
        if let Some(s) = &self.system {
            j.key("system").open('{');
            j.key("os").str(&s.os);
            j.key("os_version").opt_str(s.os_version.as_deref());
            j.key("cpu").str(&s.cpu);
            j.close('}');
        }
        if self.kind == Kind::Minidump {
            j.key("crash");
            match &self.crash {
                Some(c) => {
                    j.open('{');
                    j.key("reason").str(&c.reason);
                    j.key("address").hex(c.address);
                    j.key("thread").int(c.thread);
                    j.close('}');
                }
                None => j.out.push_str("null"),
            }
        }
        if let Some(ms) = self.stopped_ms {
            j.key("stopped_ms");
            let _ = write!(j.out, "{ms:?}");
        }
        j.close('}');
    }

    fn module_json(&self, j: &mut JsonWriter<'_>, m: &Module) {
        j.item();
        j.open('{');
        j.key("path").path(&m.path);
        j.key("start").hex(m.start);
        j.key("end").hex(m.end);
        j.key("ranges").open('[');
        for &(start, end) in &m.ranges {
            j.item();
            j.open('[');
            j.item();
            j.hex(start);
            j.item();
            j.hex(end);
            j.close(']');
        }
        j.close(']');
        j.key("bias").hex(m.bias);
        j.key("build_id").opt_str(m.build_id.as_deref());
        j.key("found").bool(m.found);
        j.key("build_id_matches").opt_bool(m.build_id_matches);
        if self.kind == Kind::Minidump {
            for (key, value) in m.id_fields() {
                j.key(key).opt_str(value);
            }
        }
        j.close('}');
    }
}

fn thread_json(j: &mut JsonWriter<'_>, t: &Thread, kinds: bool) {
    j.item();
    j.open('{');
    j.key("tid").int(t.tid);
    j.key("end").str(&t.end);
    j.key("frames").open('[');
    for f in &t.frames {
        j.item();
        j.open('{');
        match f {
            Frame::Python(p) => {
                j.key("kind").str("python");
                j.key("function").str(&p.function);
                j.key("qualname").str(&p.qualname);
                j.key("file").str(&p.file);
                j.key("line").opt_int(p.line.map(i64::from));
            }
            Frame::Native(n) => native_json(j, n, kinds),
        }
        j.close('}');
    }
    j.close(']');
    if let Some(gil) = t.gil {
        j.key("gil").bool(gil);
    }
    if let Some(stop) = &t.python_stop {
        j.key("python_stop").str(stop);
    }
    if let Some(detail) = &t.end_detail {
        j.key("end_detail").str(detail);
    }
    j.close('}');
}

fn native_json(j: &mut JsonWriter<'_>, n: &NativeFrame, kinds: bool) {
    if kinds {
        j.key("kind").str("native");
    }
    j.key("index").int(n.index as i64);
    j.key("pc").hex(n.pc);
    j.key("sp").hex(n.sp);
    j.key("cfa").opt_hex(n.cfa);
    j.key("trust").str(&n.trust);
    j.key("module").opt_str(n.module.as_deref());
    j.key("module_offset").opt_hex(n.module_offset);
    j.key("function").opt_str(n.function.as_deref());
    j.key("function_offset").opt_hex(n.function_offset);
    j.key("file").opt_str(n.file.as_deref());
    j.key("line").opt_int(n.line.map(i64::from));
    j.key("column").opt_int(n.column.map(i64::from));
    j.key("inline").bool(n.inline);
    j.key("doubtful").bool(n.doubtful);
    if let Some(registers) = &n.registers {
        j.key("registers").open('{');
        for (name, value) in registers {
            j.key(name).hex(*value);
        }
        j.close('}');
    }
}

// -- text ------------------------------------------------------------------------------------

impl Document {
    /// The text report `stackwalk core`, `minidump`, `pid` and `unwind`
    /// print: a header saying what was read and what stopped it, then each
    /// thread's frames as gdb and eu-stack print them, with how each was
    /// found. Every name and path escaped (`escaped`).
    pub fn write_text(&self, out: &mut String) {
        self.write_text_flushing(out, &mut |_| {});
    }

    /// [`Self::write_text`], `flush` given the text so far after each
    /// thread, as [`Self::write_json_flushing`].
    pub fn write_text_flushing(&self, out: &mut String, flush: &mut dyn FnMut(&mut String)) {
        let mut what = if self.kind == Kind::Process {
            format!("Process {}", self.pid.unwrap_or_default())
        } else {
            let mut what = capitalized(self.kind.as_str());
            if let Some(path) = &self.path {
                what.push(' ');
                what.push_str(&text_path(path));
            }
            if let Some(pid) = self.pid {
                let _ = write!(what, ", pid {pid}");
            }
            what
        };
        if let Some(exe) = self.executable.as_deref().filter(|e| !e.is_empty()) {
            what.push_str(", ");
            what.push_str(&text_path(exe));
        }
        if let Some(system) =
            self.system.as_ref().filter(|s| !matches!(s.os.as_str(), "Linux" | "Android"))
        {
            let version = system.os_version.as_deref().filter(|v| !v.is_empty());
            let version = version.map(|v| format!(" {v}")).unwrap_or_default();
            let _ = write!(what, " ({}{version}, {})", escaped(&system.os), escaped(&system.cpu));
        }
        out.push_str(&what);
        out.push('\n');
        let line = match (&self.signal, self.crashing_thread) {
            _ if self.kind == Kind::Process => Some(format!(
                "Stopped for {:.1} ms while its threads were copied",
                self.stopped_ms.unwrap_or_default()
            )),
            _ if self.kind == Kind::Capture => {
                Some(format!("A thread stopped at a breakpoint ({})", escaped(&self.arch)))
            }
            (sig, None) => {
                let stopped = sig
                    .as_ref()
                    .map(|s| format!(", stopped by {} (signal {})", escaped(&s.name), s.number));
                Some(format!(
                    "Snapshot of a running process{}: no thread crashed",
                    stopped.unwrap_or_default()
                ))
            }
            (Some(s), Some(_)) => {
                let at = s.address.map(|a| format!(" at address {a:#x}")).unwrap_or_default();
                Some(format!("Killed by {} (signal {}){at}", escaped(&s.name), s.number))
            }
            (None, Some(_)) => self
                .crash
                .as_ref()
                .map(|c| format!("Crashed: {} at address {:#x}", escaped(&c.reason), c.address)),
        };
        if let Some(line) = line {
            out.push_str(&line);
            out.push('\n');
        }
        if let Some(p) = &self.python {
            let version = escaped(&p.version);
            match &p.error {
                Some(error) => {
                    let _ = writeln!(out, "Python {version}: no Python frames: {}", escaped(error));
                }
                None => {
                    let _ = writeln!(out, "Python {version} ({})", text_path(&p.module));
                }
            }
            for w in &p.warnings {
                let _ = writeln!(out, "Python: warning: {}", escaped(w));
            }
        }
        for t in &self.threads {
            let crashed = if Some(t.tid) == self.crashing_thread { " (crashed)" } else { "" };
            let gil = if t.gil == Some(true) { " (holds the GIL)" } else { "" };
            let _ = writeln!(out, "\nThread {}{crashed}{gil}:", t.tid);
            for f in &t.frames {
                match f {
                    Frame::Python(p) => push_python_line(out, p),
                    Frame::Native(n) => push_native_lines(out, n),
                }
            }
            if let Some(stop) = &t.python_stop {
                let _ = writeln!(out, "   (Python frames stopped early: {})", escaped(stop));
            }
            if !t.complete() {
                let detail = t.end_detail.as_deref().unwrap_or_default();
                let _ =
                    writeln!(out, "   (stopped early: {}: {})", escaped(&t.end), escaped(detail));
            }
            flush(out);
        }
    }
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// A Python frame as tracebacks and pystack print it.
fn push_python_line(out: &mut String, p: &PythonFrame) {
    let line = p.line.map(|l| format!(", line {l}")).unwrap_or_default();
    let text = format!("    (Python) File \"{}\"{line}, in {}", p.file, p.function);
    out.push_str(&escaped(&text));
    out.push('\n');
}

/// A native frame as gdb and eu-stack print it, how it was found after it
/// (`[cfi]`, `[scan, doubtful]`, `[inline]`), and its registers, four to a
/// line as minidump-stackwalk prints them, under it.
fn push_native_lines(out: &mut String, n: &NativeFrame) {
    let function = n.function.as_deref().filter(|f| !f.is_empty());
    let mut where_ = function.unwrap_or("??").to_owned();
    if function.is_some() {
        if let Some(offset) = n.function_offset.filter(|&o| o != 0) {
            let _ = write!(where_, "+{offset:#x}");
        }
    }
    if let Some(file) = n.file.as_deref().filter(|f| !f.is_empty()) {
        match n.line.filter(|&l| l != 0) {
            Some(line) => {
                let _ = write!(where_, " at {file}:{line}");
            }
            None => {
                let _ = write!(where_, " at {file}");
            }
        }
    }
    let module = n.module.as_deref().filter(|m| !m.is_empty());
    let module = module.map(|m| format!(" ({m})")).unwrap_or_default();
    let index = format!("{:<2}", n.index);
    let text = format!("#{index} {:#018x} in {where_}{module}", n.pc);
    out.push_str(&escaped(&text));
    let how = if n.inline {
        "[inline]".to_owned()
    } else if n.doubtful {
        format!("[{}, doubtful]", n.trust)
    } else {
        format!("[{}]", n.trust)
    };
    let _ = writeln!(out, "  {how}");
    if let Some(registers) = &n.registers {
        let cells: Vec<String> = registers
            .iter()
            .map(|(name, value)| format!("{name:>3} = {:<18}", format!("{value:#x}")))
            .collect();
        for row in cells.chunks(4) {
            let _ = writeln!(out, "    {}", row.join("  ").trim_end());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(index: usize, function: Option<&str>) -> NativeFrame {
        NativeFrame {
            index,
            pc: 0x5555_5555_1234 + index as u64,
            sp: 0x7ffe_0000_0000,
            cfa: Some(0x7ffe_0000_0010),
            trust: "cfi".to_owned(),
            module: Some("/tmp/prog".to_owned()),
            module_offset: Some(0x1234),
            function: function.map(str::to_owned),
            function_offset: Some(0x14),
            file: Some("prog.c".to_owned()),
            line: Some(12),
            column: None,
            ..NativeFrame::default()
        }
    }

    fn core() -> Document {
        let mut doc = Document::new(Kind::Core, "x86_64");
        doc.path = Some(OsString::from("core.1"));
        doc.executable = Some(OsString::from("/tmp/prog"));
        doc.pid = Some(42);
        doc.signal = Some(Signal { number: 11, name: "SIGSEGV".into(), address: Some(0) });
        doc.crashing_thread = Some(42);
        doc.modules.push(Module {
            path: OsString::from_vec(b"/lib/li\xafbc.so".to_vec()),
            start: 0x1000,
            end: 0x3000,
            ranges: vec![(0x1000, 0x2000)],
            bias: 0x1000,
            build_id: Some("ab".into()),
            found: false,
            build_id_matches: None,
            ids: None,
        });
        let mut inner = frame(0, Some("crash"));
        inner.registers = Some(vec![("rbx", 5), ("rip", 0x5555_5555_1234)]);
        doc.threads.push(Thread {
            tid: 42,
            end: "memory".into(),
            end_detail: Some("frame 1: \x1b[2J".into()),
            frames: vec![Frame::Native(inner), Frame::Native(frame(1, None))],
            gil: None,
            python_stop: None,
        });
        doc
    }

    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn json_is_what_python_writes_of_the_same_values() {
        let mut doc = core();
        let mut compact = String::new();
        doc.write_json(&mut compact, None);
        // (serde_json, unlike Python's reader, refuses a lone surrogate)
        assert!(compact.contains(r#""path": "/lib/li\udcafbc.so""#), "{compact}");
        doc.modules[0].path = OsString::from("/lib/libc.so");
        compact.clear();
        doc.write_json(&mut compact, None);
        let value: serde_json::Value = serde_json::from_str(&compact).unwrap();
        assert_eq!(value["schema"], SCHEMA);
        assert_eq!(value["modules"][0]["ranges"], serde_json::json!([["0x1000", "0x2000"]]));
        assert_eq!(value["threads"][0]["frames"][0]["registers"]["rbx"], "0x5");
        assert_eq!(value["threads"][0]["frames"][1]["function"], serde_json::Value::Null);
        assert!(!compact.contains('\n'));
        let mut indented = String::new();
        doc.write_json(&mut indented, Some(2));
        assert!(indented.starts_with("{\n  \"schema\": \"stackwalk.snapshot/1\",\n  \"kind\""));
        assert!(indented.contains("\"threads\": [\n    {\n      \"tid\": 42,"), "{indented}");
        let reread: serde_json::Value = serde_json::from_str(&indented).unwrap();
        assert_eq!(reread, value);
    }

    #[test]
    fn text_escapes_what_the_input_named() {
        let mut text = String::new();
        core().write_text(&mut text);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Core core.1, pid 42, /tmp/prog");
        assert_eq!(lines[1], "Killed by SIGSEGV (signal 11) at address 0x0");
        assert_eq!(lines[3], "Thread 42 (crashed):");
        assert_eq!(
            lines[4],
            "#0  0x0000555555551234 in crash+0x14 at prog.c:12 (/tmp/prog)  [cfi]"
        );
        assert_eq!(lines[5], "    rbx = 0x5                 rip = 0x555555551234");
        assert_eq!(lines[6], "#1  0x0000555555551235 in ?? at prog.c:12 (/tmp/prog)  [cfi]");
        assert_eq!(lines[7], "   (stopped early: memory: frame 1: \\x1b[2J)");
        assert_eq!(text_path(OsStr::from_bytes(b"a\xffb\n")), "a\\xffb\\n");
    }
}
