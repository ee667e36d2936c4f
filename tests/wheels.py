"""Build the wheels users install (`make wheels`): manylinux2014 (glibc 2.17) for x86_64 and
aarch64, and musllinux_1_2 for x86_64, cross-linked by maturin with zig (the `ziglang` package),
without a container; the shared object stripped. Each is checked by `auditwheel show`, and the
x86_64 manylinux wheel is installed into a fresh venv of each other CPython 3.11+ this machine
has (none of them the one that built it), with no Rust on PATH, and runs `stackwalk --version` and
`stackwalk demo` (a program built, stopped under gdb, unwound and compared with gdb).
auditwheel cannot read a musl wheel on a glibc machine (it looks for musl's libc and fails): that
wheel's shared object is checked to need musl's libc.so alone, and is not run here.

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

ROOT = Path(__file__).resolve().parent.parent
# (Rust target, maturin --compatibility, what auditwheel must call the wheel)
BUILDS = [
    ("x86_64-unknown-linux-gnu", "manylinux2014", r"manylinux_2_17_x86_64|manylinux2014_x86_64"),
    ("aarch64-unknown-linux-gnu", "manylinux2014", r"manylinux_2_17_aarch64|manylinux2014_aarch64"),
    ("x86_64-unknown-linux-musl", "musllinux_1_2", r"musllinux_1_2_x86_64"),
]


def step(text: str) -> None:
    print(f"wheels: {text}", flush=True)


def without_rust() -> dict[str, str]:
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "cargo").exists()]
    env = {k: v for k, v in os.environ.items() if k not in ("CARGO_HOME", "RUSTUP_HOME")}
    return {**env, "PATH": os.pathsep.join(path)}


def other_pythons() -> list[Path]:
    """CPython interpreters of other versions than this one: on PATH (python3.N), pyenv's, and
    the ones tests/build_cpython.sh builds into the cache."""
    mine = f"{sys.version_info.major}.{sys.version_info.minor}"
    found: dict[str, Path] = {}
    cache = Path(os.environ.get("STACKWALK_CACHE", Path.home() / ".cache" / "stackwalk"))
    candidates = [Path(p) for p in sorted(cache.glob("cpython-3.*/bin/python3.*"))]
    candidates += [Path(p) for p in sorted(Path.home().glob(".pyenv/versions/3.*/bin/python3.*"))]
    for minor in range(11, 20):
        if which := shutil.which(f"python3.{minor}"):
            candidates.append(Path(which))
    for path in candidates:
        match = re.fullmatch(r"python(3\.(\d+))", path.name)
        if match is None:
            continue
        version = match[1]
        # The package's requires-python: 3.11 and later.
        if int(match[2]) < 11 or version == mine or version in found:
            continue
        probe = subprocess.run([str(path), "-c", "import venv, ensurepip"], capture_output=True)
        if probe.returncode == 0:
            found[version] = path
    return [found[v] for v in sorted(found, key=lambda v: int(v.split(".")[1]))]


def needs_musl_alone(wheel: Path) -> bool:
    """Whether the wheel's shared object needs no library but musl's libc.so (readelf)."""
    with tempfile.TemporaryDirectory() as work:
        shutil.unpack_archive(wheel, work, format="zip")
        (so,) = Path(work).glob("stackwalk/_core*.so")
        dynamic = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", dynamic.stdout) == ["libc.so"]


def smoke(wheel: Path, python: Path, work: Path) -> bool:
    """The wheel in a fresh venv of ``python``, no Rust on PATH: --version and the demo."""
    venv = work / f"venv-{python.name}"
    env = without_rust()
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
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
    for target, compatibility, expected in BUILDS:
        if shutil.which("rustup"):
            subprocess.run(["rustup", "target", "add", target], capture_output=True)
        cmd = [sys.executable, "-m", "maturin", "build", "--release", "--strip", "--zig",
               "--target", target, "--compatibility", compatibility, "-o", str(out),
               "-m", str(ROOT / "Cargo.toml")]  # fmt: skip
        step(f"building for {target} ({compatibility})")
        built = subprocess.run(cmd, capture_output=True, text=True)
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
        wheels[target] = wheel
    if "x86_64-unknown-linux-gnu" in wheels:
        pythons = other_pythons()
        step(f"smoke test of the x86_64 wheel on {', '.join(p.name for p in pythons) or 'none'}")
        if not pythons:
            step("  no other CPython here")
            ok = False
        with tempfile.TemporaryDirectory() as work:
            for python in pythons:
                ok &= smoke(wheels["x86_64-unknown-linux-gnu"], python, Path(work))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
