"""Build the wheels users install (`make wheels`): manylinux2014 (glibc 2.17) for x86_64 and
aarch64 and musllinux_1_2 for x86_64, each for CPython 3.11 and later (the stable ABI), and a
manylinux2014 x86_64 wheel for CPython 3.10 (built by a 3.10 found here); cross-linked by
maturin with zig (the `ziglang` package), without a container; the shared object stripped.
Each is checked by `auditwheel show`. The x86_64 wheels are installed into a fresh venv of each
other CPython here that they serve (3.10's into 3.10, the other into 3.11 and later, never the
one that built them), with no Rust on PATH, and run `stackwalk --version` and `stackwalk demo`
(a program built, stopped under gdb, unwound and compared with gdb). The aarch64 wheel runs
under qemu-aarch64 in Debian's own aarch64 CPython (bookworm's 3.11, downloaded from Debian's
archive by tests/debian_packages.py, each package checked against the sha256 the archive's
index gives, and unpacked into the cache with the libraries it needs): `--version`, and a
public minidump read to the same JSON as the x86_64 wheel gives. auditwheel cannot read a musl
wheel on a glibc machine (it looks for musl's libc and fails): that wheel's shared object is
checked to need musl's libc.so alone, and is not run here (no musl CPython).

    python tests/wheels.py [OUT_DIR]      (default: dist/)

Prints one line per wheel and per check; exits 1 if any check failed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from debian_packages import apt_download

ROOT = Path(__file__).resolve().parent.parent
# (name, Rust target, maturin --compatibility, what auditwheel must call it, cargo's features):
# the abi3 wheels serve CPython 3.11 and later; 3.10's (the stable ABI has no buffer protocol
# before 3.11) is an extension for 3.10 alone, built by a CPython 3.10 found here.
ABI3_ONLY = ()
FOR_ONE_PYTHON = ("--no-default-features", "--features", "python")
BUILDS = [
    ("x86_64", "x86_64-unknown-linux-gnu", "manylinux2014", r"manylinux_2_17_x86_64", ABI3_ONLY),
    ("aarch64", "aarch64-unknown-linux-gnu", "manylinux2014", r"manylinux_2_17_aarch64",
     ABI3_ONLY),
    ("musl", "x86_64-unknown-linux-musl", "musllinux_1_2", r"musllinux_1_2_x86_64", ABI3_ONLY),
    ("cp310", "x86_64-unknown-linux-gnu", "manylinux2014", r"manylinux_2_17_x86_64",
     FOR_ONE_PYTHON),
]  # fmt: skip


def step(text: str) -> None:
    print(f"wheels: {text}", flush=True)


def maturin_env() -> dict[str, str]:
    """The environment for maturin: this interpreter's environment (the .venv, where ziglang is)
    first on PATH, as if activated, for maturin finds zig as `python3 -m ziglang` by PATH."""
    bin_dir = Path(sys.executable).parent
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "VIRTUAL_ENV": str(bin_dir.parent)}


def without_rust() -> dict[str, str]:
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "cargo").exists()]
    env = {k: v for k, v in os.environ.items() if k not in ("CARGO_HOME", "RUSTUP_HOME")}
    return {**env, "PATH": os.pathsep.join(path)}


def other_pythons(minors: range = range(11, 20)) -> list[Path]:
    """CPython interpreters of ``minors`` (3.11 and later: the abi3 wheel's) but this one's
    version: on PATH (python3.N), pyenv's, and the ones tests/build_cpython.sh builds into the
    cache; each with venv and ensurepip."""
    mine = f"{sys.version_info.major}.{sys.version_info.minor}"
    found: dict[str, Path] = {}
    cache = Path(os.environ.get("STACKWALK_CACHE", Path.home() / ".cache" / "stackwalk"))
    candidates = [Path(p) for p in sorted(cache.glob("cpython-3.*/bin/python3.*"))]
    candidates += [Path(p) for p in sorted(Path.home().glob(".pyenv/versions/3.*/bin/python3.*"))]
    for minor in minors:
        if which := shutil.which(f"python3.{minor}"):
            candidates.append(Path(which))
    for path in candidates:
        match = re.fullmatch(r"python(3\.(\d+))", path.name)
        if match is None:
            continue
        version = match[1]
        if int(match[2]) not in minors or version == mine or version in found:
            continue
        probe = subprocess.run([str(path), "-c", "import venv, ensurepip"], capture_output=True)
        if probe.returncode == 0:
            found[version] = path
    return [found[v] for v in sorted(found, key=lambda v: int(v.split(".")[1]))]


# Debian's aarch64 CPython and what it (and the wheel's shared object) load.
ARM64_PACKAGES = ("python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libc6",
                  "libgcc-s1", "libexpat1", "zlib1g", "libffi8", "libbz2-1.0", "liblzma5",
                  "libsqlite3-0", "libuuid1", "libssl3")  # fmt: skip
CACHE = Path(os.environ.get("STACKWALK_CACHE", Path.home() / ".cache" / "stackwalk"))
PUBLIC_DUMP = ROOT / "tests" / "data" / "rust-minidump" / "linux-mini.dmp"


def arm64_python() -> Path:
    """bookworm's aarch64 python3.11, unpacked once into the cache (its root for qemu's -L)."""
    root = CACHE / "arm64-python3.11"
    python = root / "usr" / "bin" / "python3.11"
    if python.exists():
        return python
    work = Path(tempfile.mkdtemp(prefix="arm64-python-", dir=CACHE))
    try:
        apt_download("bookworm", "arm64", ARM64_PACKAGES, work / "debs")
        for deb in sorted((work / "debs").glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "root")], check=True)
        (work / "root").rename(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return python


def arm64_smoke(wheel: Path, x86_json: str) -> bool:
    """The aarch64 wheel in Debian's aarch64 CPython under qemu-aarch64: --version, and the
    public minidump read to the JSON the x86_64 wheel gives (``x86_json``)."""
    qemu = shutil.which("qemu-aarch64")
    if qemu is None:
        step("  no qemu-aarch64 (Debian's qemu-user): the aarch64 wheel is not run")
        return False
    python = arm64_python()
    root = python.parent.parent.parent
    with tempfile.TemporaryDirectory() as site:
        shutil.unpack_archive(wheel, site, format="zip")
        env = {**without_rust(), "PYTHONPATH": site, "QEMU_LD_PREFIX": str(root)}
        run = [qemu, "-L", str(root), str(python), "-m", "stackwalk"]
        version = subprocess.run([*run, "--version"], capture_output=True, text=True, env=env)
        dump = subprocess.run([*run, "minidump", "--json", str(PUBLIC_DUMP)], capture_output=True,
                              text=True, env=env, timeout=600)  # fmt: skip
    same = dump.stdout == x86_json and bool(x86_json)
    step(f"  aarch64 python3.11 under qemu: {version.stdout.strip() or version.stderr[-300:]}; "
         f"the public minidump's JSON {'the same as x86_64' if same else 'DIFFERS'}")  # fmt: skip
    if not same:
        step(f"  {dump.stderr.strip()[-600:]}")
    return version.returncode == 0 and same


def needs_musl_alone(wheel: Path) -> bool:
    """Whether the wheel's shared object needs no library but musl's libc.so (readelf)."""
    with tempfile.TemporaryDirectory() as work:
        shutil.unpack_archive(wheel, work, format="zip")
        (so,) = Path(work).glob("stackwalk/_core*.so")
        dynamic = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", dynamic.stdout) == ["libc.so"]


def bare_pythons() -> list[Path]:
    """CPython 3.11+ interpreters here that cannot make a venv: Debian sid's 3.14, which
    tests/build_cpython.sh unpacks without its venv module. A wheel is unpacked on their
    PYTHONPATH instead."""
    found = []
    for path in sorted(CACHE.glob("cpython-3.*/usr/bin/python3.*")):
        match = re.fullmatch(r"python3\.(\d+)", path.name)
        if match and int(match[1]) >= 11 and os.access(path, os.X_OK):
            found.append(path)
    return found


def smoke_unpacked(wheel: Path, python: Path, work: Path) -> bool:
    """The wheel unpacked on ``python``'s PYTHONPATH, no Rust on PATH: --version and the demo."""
    site = work / f"site-{python.name}"
    shutil.unpack_archive(wheel, site, format="zip")
    env = {**without_rust(), "PYTHONPATH": str(site)}
    command = [str(python), "-m", "stackwalk"]
    version = subprocess.run([*command, "--version"], capture_output=True, text=True, env=env)
    demo = subprocess.run([*command, "demo"], capture_output=True, text=True, env=env, cwd=work,
                          timeout=600)  # fmt: skip
    last = (demo.stdout.strip().splitlines() or [demo.stderr.strip()])[-1]
    step(f"  {python.name} (unpacked): {version.stdout.strip()}; demo exit {demo.returncode}: "
         f"{last}")  # fmt: skip
    return version.returncode == 0 and demo.returncode == 0


def smoke(wheel: Path, python: Path, work: Path) -> bool:
    """The wheel in a fresh venv of ``python``, no Rust on PATH: --version and the demo."""
    venv = work / f"venv-{python.name}"
    env = without_rust()
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check", str(wheel)]  # fmt: skip
    installed = subprocess.run(pip, capture_output=True, text=True, env=env)
    if installed.returncode != 0:
        step(f"  {python.name}: does not install: {installed.stderr.strip()[-300:]}")
        return False
    command = str(venv / "bin" / "stackwalk")
    version = subprocess.run([command, "--version"], capture_output=True, text=True, env=env)
    demo = subprocess.run([command, "demo"], capture_output=True, text=True, env=env, cwd=work,
                          timeout=600)  # fmt: skip
    ok = version.returncode == 0 and demo.returncode == 0
    last = (demo.stdout.strip().splitlines() or [demo.stderr.strip()])[-1]
    step(f"  {python.name}: {version.stdout.strip()}; demo exit {demo.returncode}: {last}")
    return ok


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "dist"
    out.mkdir(parents=True, exist_ok=True)
    ok = True
    wheels: dict[str, Path] = {}
    for name, target, compatibility, expected, features in BUILDS:
        if shutil.which("rustup"):
            subprocess.run(["rustup", "target", "add", target], capture_output=True)
        interpreter: list[str] = []
        if features == FOR_ONE_PYTHON:
            python310 = other_pythons(range(10, 11))
            if not python310:
                step("no CPython 3.10 here: its wheel is not built")
                continue
            interpreter = ["-i", str(python310[0])]
        cmd = [sys.executable, "-m", "maturin", "build", "--release", "--strip", "--zig",
               "--target", target, "--compatibility", compatibility, "-o", str(out),
               "-m", str(ROOT / "Cargo.toml"), *interpreter, *features]  # fmt: skip
        step(f"building {name} for {target} ({compatibility})")
        built = subprocess.run(cmd, capture_output=True, text=True, env=maturin_env())
        # maturin's last words: "Built wheel for abi3 Python ≥ 3.11 to PATH"
        said = re.findall(r"Built wheel .* to (\S+\.whl)", built.stdout + built.stderr)
        if built.returncode != 0 or not said:
            step(f"  FAILED: {built.stderr.strip()[-600:]}")
            ok = False
            continue
        wheel = Path(said[-1])
        if "musl" in target:
            called = needs_musl_alone(wheel)
        else:
            shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)],
                                   capture_output=True, text=True)  # fmt: skip
            called = re.search(expected, shown.stdout) is not None
        size = wheel.stat().st_size >> 10
        check = "needs musl's libc.so alone" if "musl" in target else f"auditwheel: {expected}"
        step(f"  {wheel.name}: {size} KiB; {check}: {'ok' if called else 'NO'}")
        ok &= bool(called)
        wheels[name] = wheel
    if "x86_64" in wheels and "aarch64" in wheels:
        with tempfile.TemporaryDirectory() as site:
            shutil.unpack_archive(wheels["x86_64"], site, format="zip")
            x86 = subprocess.run([sys.executable, "-m", "stackwalk", "minidump", "--json",
                                  str(PUBLIC_DUMP)], capture_output=True, text=True,
                                 env={**without_rust(), "PYTHONPATH": site})  # fmt: skip
        step("smoke test of the aarch64 wheel")
        ok &= arm64_smoke(wheels["aarch64"], x86.stdout)
    checks = [(w, p) for w in ("x86_64",) if w in wheels for p in other_pythons()]
    checks += [("cp310", p) for p in other_pythons(range(10, 11)) if "cp310" in wheels]
    bare = bare_pythons() if "x86_64" in wheels else []
    names = [f"{w} on {p.name}" for w, p in checks]
    names += [f"x86_64 on {p.name} (unpacked)" for p in bare]
    step(f"smoke tests: {', '.join(names) or 'none'}")
    ok &= bool(checks)
    with tempfile.TemporaryDirectory() as work:
        for name, python in checks:
            ok &= smoke(wheels[name], python, Path(work))
        for python in bare:
            ok &= smoke_unpacked(wheels["x86_64"], python, Path(work))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
