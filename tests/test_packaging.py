"""The package as users get it: the source distribution holds what git tracks and nothing else
(an untracked dist/ with a wheel was packed once), building it without Rust stops at once with
what is needed (maturin would fetch rustup instead), the `stackwalk` command is installed and
runs, and the version is one: Cargo.toml's, the metadata's, the changelog's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
from wheels import bare_pythons, other_pythons, without_rust

ROOT = Path(__file__).resolve().parent.parent
HANG = 600


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build --sdist`` of the checkout, offline (maturin from the test extras)."""
    out = tmp_path_factory.mktemp("sdist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = out.glob("stackwalk-*.tar.gz")
    return path


def tracked() -> set[str]:
    proc = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.splitlines())


def test_the_sdist_holds_tracked_files_only(sdist: Path, tmp_path: Path) -> None:
    """Every file of the sdist is one git tracks (or maturin's PKG-INFO), whatever lies untracked
    in the checkout: a dist/ with a wheel in it is left out."""
    with tarfile.open(sdist) as tar:
        files = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
    assert files - tracked() <= {"PKG-INFO"}, sorted(files - tracked() - {"PKG-INFO"})
    for needed in ("Cargo.toml", "Cargo.lock", "pyproject.toml", "rust/lib.rs", "LICENSE",
                   "python/stackwalk/cli.py", "build_backend/stackwalk_build.py"):  # fmt: skip
        assert needed in files, needed
    assert not {n for n in files if n.startswith(("dist/", "target/", ".venv/"))}


def test_without_rust_the_sdist_says_what_it_needs(sdist: Path, tmp_path: Path) -> None:
    """pip building the sdist where there is no cargo: one message naming Rust and its minimum
    version (Cargo.toml's rust-version), and no rustup fetched (maturin alone would)."""
    rust = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["rust-version"]
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(tmp_path), str(sdist)],
        capture_output=True, text=True, timeout=HANG, env=without_rust(),
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert f"building it from source needs Rust {rust} or newer (no cargo on PATH)" in out, out
    assert "Rust not found, installing" not in out and not list(tmp_path.glob("*.whl"))


def test_the_backend_knows_the_minimum_rust() -> None:
    """The build backend's minimum is Cargo.toml's rust-version."""
    rust = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["rust-version"]
    text = (ROOT / "build_backend" / "stackwalk_build.py").read_text()
    (minimum,) = re.findall(r"MINIMUM_RUST = \((\d+), (\d+)\)", text)
    assert ".".join(minimum) == rust


def test_the_command_is_installed_and_runs() -> None:
    """The environment's ``stackwalk`` command (an entry point pip writes, executable whatever
    the sdist's file modes) runs and says the package's version."""
    from importlib.metadata import version

    command = Path(sys.executable).parent / "stackwalk"
    assert os.access(command, os.X_OK), command
    proc = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["stackwalk", version("stackwalk")], proc.stdout


def test_the_changelog_names_the_version() -> None:
    """CHANGELOG.md's newest heading is Cargo.toml's version."""
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings and headings[0] == cargo, headings


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's wheel as pip builds it with this environment's maturin, no isolation: the
    release build the editable install left in target/ is reused (seconds, not a build)."""
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=HANG * 2,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = out.glob("stackwalk-*.whl")
    return path


def test_the_wheel_runs_on_another_cpython_without_rust(wheel: Path, tmp_path: Path) -> None:
    """The wheel installed into a fresh venv of every other CPython 3.11+ here (the 3.13 the
    tests' setup builds, tests/build_cpython.sh, at least), or unpacked on the PYTHONPATH of one
    that cannot make a venv (the setup's 3.14), with no Rust on PATH: `stackwalk --version`
    names the package's version, and `stackwalk demo` builds a program, stops it under gdb,
    unwinds it and agrees with gdb."""
    from importlib.metadata import version

    pythons = other_pythons()
    assert pythons, "no CPython 3.11+ here but this one (make setup builds 3.13)"
    # Debian sid's 3.14, which make setup unpacks without venv: the wheel on its PYTHONPATH.
    for python in bare_pythons():
        site = tmp_path / f"site-{python.name}"
        shutil.unpack_archive(wheel, site, format="zip")
        env = {**without_rust(), "PYTHONPATH": str(site)}
        command = [str(python), "-m", "stackwalk"]
        said = subprocess.run([*command, "--version"], capture_output=True, text=True, env=env)
        assert said.stdout.split() == ["stackwalk", version("stackwalk")], (python, said)
        demo = subprocess.run([*command, "demo"], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=HANG)  # fmt: skip
        assert demo.returncode == 0 and "end_of_stack" in demo.stdout, (python, demo)
    for python in pythons:
        venv = tmp_path / python.name
        subprocess.run([str(python), "-m", "venv", str(venv)], check=True, timeout=HANG)
        env = without_rust()
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
               "--disable-pip-version-check", str(wheel)]  # fmt: skip
        installed = subprocess.run(pip, capture_output=True, text=True, env=env, timeout=HANG)
        assert installed.returncode == 0, (python, installed.stderr)
        command = str(venv / "bin" / "stackwalk")
        said = subprocess.run([command, "--version"], capture_output=True, text=True, env=env)
        assert said.stdout.split() == ["stackwalk", version("stackwalk")], (python, said)
        demo = subprocess.run([command, "demo"], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=HANG)  # fmt: skip
        assert demo.returncode == 0, (python, demo.stdout, demo.stderr)
        assert "end_of_stack" in demo.stdout, (python, demo.stdout)
