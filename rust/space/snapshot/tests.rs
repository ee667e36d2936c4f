//! The address space of a snapshot made of this test program.

use super::*;
use crate::source::memory::{Data, Segment as MemorySegment};

/// Records what it is given.
#[derive(Default)]
struct Recorder {
    files: Vec<(PathBuf, u64)>,
    missing: Vec<PathBuf>,
}

impl Host for Recorder {
    fn add_file(&mut self, file: &Path, bias: u64, _: Option<&[Range<u64>]>) -> Result<(), String> {
        self.files.push((file.to_path_buf(), bias));
        Ok(())
    }
    fn add_image(&mut self, _: &str, _: &[u8], _: u64) -> Result<(), String> {
        Ok(())
    }
    fn add_missing(
        &mut self,
        name: &Path,
        _: &[Range<u64>],
        _: &[Range<u64>],
        _: Rules<'_>,
        _: bool,
    ) -> Result<(), String> {
        self.missing.push(name.to_path_buf());
        Ok(())
    }
    fn fetch(&mut self, requests: &[(String, Kind)]) -> Vec<Result<PathBuf, String>> {
        requests.iter().map(|_| Err("no server".to_owned())).collect()
    }
}

const BASE: u64 = 0x5555_0000_0000;

/// This test program mapped at BASE as a snapshot shows it: its first
/// 64 KiB (ELF headers) in memory if `headers`, and what the source
/// records of it.
fn snapshot_of(
    headers: bool,
    recorded: Option<Identity>,
    options: &Options,
) -> (AddressSpace, Recorder) {
    let exe = std::env::current_exe().unwrap();
    let data = std::fs::read(&exe).unwrap();
    let len = data.len() as u64;
    let size = if headers { len.min(1 << 16) } else { 0 };
    let memory =
        SegmentMemory::new(Data::Owned(data), &[MemorySegment { address: BASE, offset: 0, size }]);
    let files = [FileMapping { start: BASE, end: BASE + len, offset: 0, path: exe }];
    let segments = [(BASE, BASE + len, PF_X)];
    let recorded = move |start| recorded.clone().filter(|_| start == BASE);
    let auxv = BTreeMap::new();
    let facts = Facts {
        files: Some(&files),
        recorded: &recorded,
        ..Facts::of(Arch::X86_64, 4096, &segments, &auxv, &memory)
    };
    let mut host = Recorder::default();
    let space = build(&facts, options, &mut host).unwrap();
    (space, host)
}

#[test]
fn a_module_is_found_checked_and_placed() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let options = Options::default();
    let (space, host) = snapshot_of(true, None, &options);
    let [module] = &space.modules[..] else { panic!("{:?}", space.modules) };
    assert!(module.found && !module.doubtful, "{module:?}");
    assert_eq!(module.build_id, module.file_build_id);
    assert_eq!(host.files, vec![(module.file.clone().unwrap(), module.bias)]);
    assert!(space.warnings.is_empty(), "{:?}", space.warnings);
    // Nothing recorded to check the file by: used, doubtful, said.
    let (space, _) = snapshot_of(false, None, &options);
    assert!(space.modules[0].found && space.modules[0].doubtful);
    assert!(space.warnings[0].contains("records no identity"), "{:?}", space.warnings);
    // Another build recorded: not used, unless allowed.
    let other = Some(Identity::FileId(vec![0xab; 20]));
    let (space, host) = snapshot_of(false, other.clone(), &options);
    assert!(!space.modules[0].found && host.files.is_empty());
    assert!(space.warnings[0].starts_with("build-id mismatch for "), "{:?}", space.warnings);
    assert_eq!(host.missing, vec![space.modules[0].path.clone()]);
    let allowing = Options { allow_mismatch: true, ..Options::default() };
    let (space, _) = snapshot_of(false, other, &allowing);
    assert!(space.modules[0].found && space.modules[0].doubtful);
}

#[test]
fn an_executable_given_must_be_one_of_the_architecture() {
    let facts_of = |options: &Options| {
        let memory = SegmentMemory::new(Data::Owned(Vec::new()), &[]);
        let auxv = BTreeMap::new();
        let facts =
            Facts { files: Some(&[]), ..Facts::of(Arch::X86_64, 4096, &[], &auxv, &memory) };
        build(&facts, options, &mut Recorder::default()).map(|s| s.warnings)
    };
    let missing = Options { executable: Some("/no/such/program".into()), ..Options::default() };
    assert_eq!(facts_of(&missing).unwrap_err(), "executable /no/such/program: no such file");
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not an ELF file\n").unwrap();
    let given = Options { executable: Some(text.clone()), ..Options::default() };
    let why = facts_of(&given).unwrap_err();
    assert_eq!(why, format!("executable {}: not an ELF file", text.display()));
    let fine = Options { executable: std::env::current_exe().ok(), ..Options::default() };
    if cfg!(target_arch = "x86_64") {
        let warnings = facts_of(&fine).unwrap();
        assert!(warnings[0].ends_with("not used: the core does not show where"), "{warnings:?}");
    }
}

#[test]
fn named_as_the_program_or_the_process() {
    let path = Path::new("/usr/bin/a-very-long-program-name");
    assert!(named_as(path, Some(Path::new("/elsewhere/a-very-long-program-name")), None));
    assert!(named_as(path, None, Some("a-very-long-pro")));
    assert!(!named_as(path, None, Some("a-very-long")));
    assert!(named_as(Path::new("/bin/ls"), None, Some("ls")));
    assert!(!named_as(Path::new("/bin/ls"), Some(Path::new("/bin/cat")), None));
}
