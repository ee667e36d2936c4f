"""Write the fuzz targets' seed corpora from real files, made now rather than committed:

- cfi: test programs compiled here (``.eh_frame`` at -O2 and -O0, ``.debug_frame`` only, and
  an aarch64 build) as whole ELF images, and the raw CFI sections of libc and libgcc_s;
- unwind: a program stopped under gdb deep in a recursion (tests/programs/deep.c), its
  executable, registers and stack, in the unwind target's layout;
- perf: ``perf record --call-graph dwarf`` of tests/programs/perf_qsort.c, to a file and to a
  pipe, with small stack copies so the seeds stay small;
- core: gdb's ``gcore`` core of the same stop, its notes whole and each segment cut to its
  first page (the ELF headers of each module, the bottom of the stack);
- decompress: that core compressed by zstd, xz, lz4 (both formats) and gzip, and bombs
  (zeros, a core's headers then zeros) compressed the same ways, each with a selector byte;
- minidump: ``minidump-writer``'s minidump (the tests' ``tests/dumper``, built by cargo) of
  tests/programs/snapshot.c, two threads blocked in libc, stopped with SIGSTOP;
- lines: tests/programs/crash_inline.c (inlined helpers) and cxx.cpp built with ``-g -O2``,
  DWARF 5 and 4, their debug sections plain and compressed (``-gz``), and the compressed one
  with ``.debug_info`` claiming more bytes than its stream holds, which the partial reader
  (``rust/symbolize/lines/partial.rs``) takes a unit at a time;
- breakpad: ``dump_syms``' ``.sym`` files of those programs (``FILE``, ``FUNC``, lines,
  ``INLINE``, ``PUBLIC``, ``STACK CFI``), and a Windows x86 program's from the tests' data
  (``STACK WIN``: FPO and frame data programs);
- pe: tests/programs/windows/crash_win.c built by mingw-w64 at -O0 and -O2, stripped: PE files
  with their ``.pdata`` and ``UNWIND_INFO`` (prologs, epilogs, frame pointers, chained entries);
- pdb: the PDBs clang and lld write for crash_win.c, for 32- and 64-bit Windows, at -O0 and
  -O2 (functions, lines, inline sites, x86 frame data);
- macho: tests/programs/apple_crash.c built for x86_64 and arm64 macOS (clang, ld64.lld: compact
  unwind info in every mode, ``__eh_frame``), their dSYMs' DWARF files, and a universal file of
  both (``llvm-lipo``);
- jitdump: CPython 3.13's ``-X perf_jit`` dump of a small script (code loads, each with its
  ``.eh_frame``), whole and cut short;
- sframe: deep.c's ``.sframe`` (``gcc -Wa,--gsframe``, x86_64 and aarch64, -O0 and -O2) as
  version 1, and written again as versions 2 and 3 and (x86_64) v3 flexible FDEs;
- perfmap: perf maps as JITs write them (V8's names, CPython's ``-X perf`` trampolines, code
  moved and its range reused, hex with and without ``0x``).

Usage: python fuzz/seed.py [CORPUS_DIR]   (default: fuzz/corpus; run by ``make fuzz``)
"""

from __future__ import annotations

import lzma
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from io import BytesIO
from pathlib import Path

from elftools.elf.elffile import ELFFile

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
# x86_64 DWARF columns of the registers gdb reports.
X86_64_COLUMNS = {
    "rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7,
    **{f"r{n}": n for n in range(8, 16)},
}  # fmt: skip
NUM_REGS = 33


def build(work: Path, source: str, *flags: str, compiler: str = "gcc") -> Path:
    out = work / f"{Path(source).stem}-{len(list(work.iterdir()))}"
    subprocess.run([compiler, *flags, str(PROGRAMS / source), "-o", str(out)], check=True)
    return out


def sections(path: Path) -> dict[str, tuple[bytes, int]]:
    """name -> (bytes, address) of the CFI sections of an ELF file."""
    out = {}
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for name in (".eh_frame_hdr", ".eh_frame", ".debug_frame"):
            s = elf.get_section_by_name(name)
            if s is not None:
                out[name] = (s.data(), s["sh_addr"])
    return out


def raw_sections(path: Path, flags: int = 0) -> bytes:
    """The cfi target's raw-sections layout (see fuzz_targets/cfi.rs)."""
    s = sections(path)
    hdr, hdr_addr = s.get(".eh_frame_hdr", (b"", 0))
    eh, eh_addr = s.get(".eh_frame", (b"", 0))
    df, _ = s.get(".debug_frame", (b"", 0))
    head = struct.pack("<BIIII", flags | 2, len(hdr), len(eh), hdr_addr, eh_addr)
    return head + hdr + eh + df


def seed_cfi(work: Path, out: Path) -> None:
    o2 = build(work, "deep.c", "-O2", "-fomit-frame-pointer", "-s")
    o0 = build(work, "deep.c", "-O0", "-s")
    df = build(work, "deep.c", "-O2", "-g1", "-fno-asynchronous-unwind-tables")
    subprocess.run(["strip", "--keep-section=.debug_frame", "-g", str(df)], check=True)
    seeds = {
        "deep-o2": b"\0" + o2.read_bytes(),
        "deep-o0": b"\0" + o0.read_bytes(),
        "deep-debug-frame": b"\0" + df.read_bytes(),
        "deep-debug-frame-raw": raw_sections(df),
        "libgcc-raw": raw_sections(Path("/lib/x86_64-linux-gnu/libgcc_s.so.1")),
        "libc-raw": raw_sections(Path("/lib/x86_64-linux-gnu/libc.so.6")),
    }
    if shutil.which("aarch64-linux-gnu-gcc"):
        a64 = build(work, "deep.c", "-O2", "-s", compiler="aarch64-linux-gnu-gcc")
        seeds["deep-aarch64"] = b"\1" + a64.read_bytes()
    for name, data in seeds.items():
        (out / name).write_bytes(data)


def seed_unwind(work: Path, out: Path) -> None:
    sys.path.insert(0, str(ROOT / "python"))
    from stackwalk.capture import capture

    program = build(work, "deep.c", "-O2", "-fomit-frame-pointer")
    cap = capture([str(program)], "stop_here", env=ENV, max_stack=16 << 10, timeout=60)
    image = program.read_bytes()
    bias = next(m.bias for m in cap.modules if m.path == str(program))
    mask, values = 0, b""
    regs = {X86_64_COLUMNS[k]: v for k, v in cap.regs.items() if k in X86_64_COLUMNS}
    for col in sorted(regs):
        mask |= 1 << col
        values += struct.pack("<Q", regs[col])
    (start, stack), *_ = cap.memory
    # (name, flags: 8 frame pointers, 16 scanning, max_frames, stack bytes, where the second
    # region starts, 4 KiB higher)
    for name, flags, max_frames, stack_bytes, gap_at in (
        ("deep", 0, 256, stack, len(stack)),
        ("deep-limit", 0, 5, stack, len(stack)),
        ("deep-cut", 0, 256, stack[: len(stack) // 3], len(stack) // 3),
        ("deep-gap", 0, 256, stack, len(stack) // 2),
        ("deep-fallbacks", 8 | 16, 256, stack, len(stack)),
        ("deep-gap-fallbacks", 8 | 16, 256, stack, len(stack) // 2),
    ):
        head = struct.pack("<BHI", flags, max_frames, len(image)) + image
        head += struct.pack("<QQQ", bias, cap.regs["rip"], mask) + values
        head += struct.pack("<QH", start, min(gap_at, 0xFFFF))
        (out / name).write_bytes(head + stack_bytes)


def compact_core(path: Path, keep: int = 4096) -> bytes:
    """The core at ``path`` rewritten with its notes whole and each PT_LOAD's bytes cut to
    ``keep``: headers, then the program headers, then the segments' bytes."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        segments = [(s.header, s.data()) for s in elf.iter_segments()]
    header = path.read_bytes()[:64]
    offset = 64 + 56 * len(segments)
    phdrs, body = b"", b""
    for h, data in segments:
        if h["p_type"] == "PT_LOAD":
            data = data[:keep]
        phdrs += struct.pack("<IIQQQQQQ", 1 if h["p_type"] == "PT_LOAD" else 4, h["p_flags"],
                             offset, h["p_vaddr"], h["p_paddr"], len(data), h["p_memsz"],
                             h["p_align"])  # fmt: skip
        body += data
        offset += len(data)
    header = header[:32] + struct.pack("<QQ", 64, 0) + header[48:56]
    header += struct.pack("<HH", len(segments), 0) + bytes(4)  # e_phnum, no section headers
    return header + phdrs + body


def seed_core(work: Path, out: Path) -> None:
    sys.path.insert(0, str(ROOT / "python"))
    from stackwalk.capture import capture

    program = build(work, "deep.c", "-O2")
    core = work / "deep.core"
    capture([str(program)], "stop_here", env=ENV, core_path=core, max_stack=4096, timeout=60)
    (out / "deep").write_bytes(compact_core(core))


def seed_decompress(work: Path, out: Path) -> None:
    """The decompress target's layout (see fuzz/harness/decompress.rs): a byte picking the
    decoder (its index modulo 5: zstd, xz, lz4, lz4 legacy, gzip) and the limit, then the file.
    A real core compressed by each format's own tool, and two bombs: zeros, and a core's
    headers followed by zeros."""
    seed_core(work, work)
    core = (work / "deep").read_bytes()
    bombs = {"core": core, "zeros": bytes(4 << 20), "headers-zeros": core[:4096] + bytes(4 << 20)}
    tools = (["zstd", "-q", "-c"], ["xz", "-c"], ["lz4", "-q", "-c"], ["lz4", "-l", "-q", "-c"],
             ["gzip", "-c"])  # fmt: skip
    for name, plain in bombs.items():
        for index, tool in enumerate(tools):
            packed = subprocess.run(tool, input=plain, capture_output=True, check=True).stdout
            # Limits of 1 MiB (the selector's (s // 5) % 11 == 10) and of 1 KiB.
            for selector in (index + 50, index):
                seed = out / f"{name}-{tool[0]}{tool[1]}-{selector}"
                seed.write_bytes(bytes([selector]) + packed)


def seed_minidump(work: Path, out: Path) -> None:
    dumper = ROOT / "tests" / "dumper"
    target = ROOT / "target" / "dumper"
    subprocess.run(["cargo", "build", "--quiet", "--manifest-path", str(dumper / "Cargo.toml"),
                    "--target-dir", str(target)], check=True)  # fmt: skip
    program = build(work, "snapshot.c", "-O2", "-pthread")
    process = subprocess.Popen([str(program)], stdout=subprocess.PIPE, env=ENV)
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        os.kill(process.pid, signal.SIGSTOP)
        dump = [str(target / "debug" / "dump-pid"), str(process.pid), str(out / "snapshot.dmp")]
        subprocess.run(dump, check=True, timeout=120)
    finally:
        process.kill()
        process.wait()


def seed_perf(work: Path, out: Path) -> None:
    program = build(work, "perf_qsort.c", "-O2", "-fomit-frame-pointer")
    env = {**ENV, "HOME": str(work)}
    record = ["perf", "record", "-q", "-F", "199", "-e", "cpu-clock", "--call-graph", "dwarf,256"]
    quiet = {"env": env, "check": True, "stdin": subprocess.DEVNULL}
    subprocess.run([*record, "-o", out / "qsort.data", "--", program], stdout=subprocess.DEVNULL,
                   **quiet)  # fmt: skip
    # To a pipe, the workload's output kept out of it (through an exec: a COMM exec record).
    with open(out / "qsort-pipe.data", "wb") as pipe:
        workload = ["sh", "-c", 'exec "$0" >/dev/null', program]
        subprocess.run([*record, "-o", "-", "--", *workload], stdout=pipe, **quiet)


def _lines_programs(work: Path) -> dict[str, Path]:
    return {
        "inline-dwarf5": build(work, "crash_inline.c", "-O2", "-g"),
        "inline-dwarf4": build(work, "crash_inline.c", "-O2", "-gdwarf-4"),
        "inline-gz": build(work, "crash_inline.c", "-O2", "-g", "-gz=zlib"),
        "cxx-gz": build(work, "cxx.cpp", "-O2", "-g", "-gz=zlib", compiler="g++"),
    }


def claims_more(image: bytes, section: str, size: int) -> bytes:
    """``image`` with its compressed ``section``'s header claiming ``size`` bytes."""
    elf = ELFFile(BytesIO(image))
    s = elf.get_section_by_name(section)
    assert s is not None and s["sh_flags"] & 0x800, f"{section} is not compressed"
    # Elf64_Chdr: ch_type (4), ch_reserved (4), ch_size (8), ch_addralign (8).
    at = s["sh_offset"] + 8
    return image[:at] + struct.pack("<Q", size) + image[at + 8 :]


def seed_lines(work: Path, out: Path) -> None:
    for name, program in _lines_programs(work).items():
        (out / name).write_bytes(program.read_bytes())
    image = (out / "inline-gz").read_bytes()
    # Past the size read whole (256 KiB), within what the stream could expand to (1032:1).
    (out / "inline-gz-partial").write_bytes(claims_more(image, ".debug_info", 288 << 10))


def seed_breakpad(work: Path, out: Path) -> None:
    dump_syms = shutil.which("dump_syms") or str(Path.home() / ".cargo" / "bin" / "dump_syms")
    for name, program in _lines_programs(work).items():
        sym = subprocess.run([dump_syms, str(program)], capture_output=True, check=True)
        (out / f"{name}.sym").write_bytes(sym.stdout)
    # A Windows x86 program's: FPO and frame data programs (STACK WIN).
    test_app = ROOT / "tests" / "data" / "rust-minidump" / "symbols" / "test_app.sym.xz"
    (out / "test_app.sym").write_bytes(lzma.decompress(test_app.read_bytes()))


def seed_pe(work: Path, out: Path) -> None:
    source = ROOT / "tests" / "programs" / "windows" / "crash_win.c"
    for level in ("-O0", "-O2"):
        exe = out / f"crash_win{level}.exe"
        cmd = ["x86_64-w64-mingw32-gcc", level, "-s", "-o", str(exe), str(source), "-ldbghelp"]
        subprocess.run(cmd, check=True, cwd=work)


def seed_pdb(work: Path, out: Path) -> None:
    source = ROOT / "tests" / "programs" / "windows" / "crash_win.c"
    for target in ("i686", "x86_64"):
        # mingw-w64's libgcc, which clang's mingw target links with.
        libgcc = sorted(Path(f"/usr/lib/gcc/{target}-w64-mingw32").glob("*-win32"))
        for level in ("-O0", "-O2"):
            pdb = out / f"crash_win-{target}{level}.pdb"
            cmd = ["clang", f"--target={target}-w64-windows-gnu", level, "-g", "-gcodeview",
                   "-fuse-ld=lld", f"-Wl,--pdb={pdb}", "-o", str(work / "a.exe"), str(source),
                   "-ldbghelp"]  # fmt: skip
            if libgcc:
                cmd.append(f"-L{libgcc[-1]}")
            subprocess.run(cmd, check=True, cwd=work, capture_output=True)


def seed_macho(work: Path, out: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import apple  # (tests/apple.py: the macOS programs' build)

    slices = []
    for arch in apple.ARCHES:
        program = apple.build(arch=arch, out_dir=work / arch)
        shutil.copy(program.executable, out / f"apple_crash-{arch}")
        shutil.copy(program.dwarf_file, out / f"apple_crash-{arch}.dwarf")
        slices.append(str(program.executable))
    lipo = shutil.which("llvm-lipo") or "llvm-lipo-14"
    universal = out / "apple_crash-universal"
    subprocess.run([lipo, "-create", *slices, "-output", str(universal)], check=True)


def seed_sframe(work: Path, out: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import sframe_tables  # (tests/sframe_tables.py: the v2 and v3 writers)

    for arch, cc in (("x86_64", "gcc"), ("aarch64", "aarch64-linux-gnu-gcc")):
        for level in ("-O0", "-O2"):
            program = work / f"deep-{arch}{level}"
            subprocess.run([cc, level, "-Wa,--gsframe", str(ROOT / "tests/programs/deep.c"),
                            "-o", str(program)], check=True)  # fmt: skip
            data, address, _ = sframe_tables.section(program)
            table = sframe_tables.read_v1(data, address)
            prefix = bytes([arch == "aarch64"]) + address.to_bytes(8, "little")
            (out / f"deep-{arch}{level}-v1").write_bytes(prefix + data)
            for version in (2, 3):
                written = sframe_tables.write(table, version, address)
                (out / f"deep-{arch}{level}-v{version}").write_bytes(prefix + written)
            if arch == "x86_64":
                flex = sframe_tables.Table(**{**table.__dict__, "functions": [
                    sframe_tables.flexible(table, f) for f in table.functions]})  # fmt: skip
                written = sframe_tables.write(flex, 3, address)
                (out / f"deep-{arch}{level}-v3flex").write_bytes(prefix + written)


def seed_jitdump(work: Path, out: Path) -> None:
    python = sorted(Path.home().glob(".cache/stackwalk/cpython-3.13.*[0-9]/bin/python3.13"))
    if not python:
        return
    script = "def f(n):\n    return n if n < 2 else f(n - 1) + f(n - 2)\nprint(f(12))\n"
    proc = subprocess.Popen([str(python[-1]), "-X", "perf_jit", "-c", script], cwd=work)
    proc.wait()
    dump = Path(f"/tmp/jit-{proc.pid}.dump")
    if dump.exists():
        data = dump.read_bytes()
        (out / "cpython-3.13").write_bytes(data)
        (out / "cpython-3.13-cut").write_bytes(data[: len(data) // 2 + 7])
        dump.unlink()


def seed_perfmap(work: Path, out: Path) -> None:
    (out / "v8").write_text(
        "7f3a40004000 3c Builtin:ArgumentsAdaptorTrampoline\n"
        "7f3a40004040 1a0 LazyCompile:~outer /app.js:3\n"
        "7f3a400041e0 80 JS:*inner /app.js:12\n"
        "7f3a40004040 60 JS:*outer /app.js:3\n"  # recompiled over the old code
    )
    (out / "cpython").write_text(
        "".join(f"0x7f5b2c{i:03x}000 0xb py::f{i}:/srv/app.py\n" for i in range(16))
    )
    (out / "nested").write_text(
        "".join(f"{0x1000 + 2 * i:x} 1 small{i}\n" for i in range(64))
        + "".join(f"1000 {0x100 + i:x} big{i}\n" for i in range(64))
    )


def main() -> int:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fuzz" / "corpus"
    with tempfile.TemporaryDirectory() as tmp:
        seeds = (("cfi", seed_cfi), ("unwind", seed_unwind), ("perf", seed_perf),
                 ("core", seed_core), ("decompress", seed_decompress),
                 ("minidump", seed_minidump), ("lines", seed_lines),
                 ("breakpad", seed_breakpad), ("perfmap", seed_perfmap),
                 ("pe", seed_pe), ("pdb", seed_pdb), ("macho", seed_macho),
                 ("sframe", seed_sframe), ("jitdump", seed_jitdump))  # fmt: skip
        for name, seed in seeds:
            out = corpus / name
            out.mkdir(parents=True, exist_ok=True)
            work = Path(tmp) / name
            work.mkdir()
            seed(work, out)
            total = sum(p.stat().st_size for p in out.iterdir())
            print(f"{out}: {len(os.listdir(out))} seeds, {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
