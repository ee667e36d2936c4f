"""The build backend of stackwalk's source distribution: maturin's, after a check that a Rust
toolchain new enough is on PATH. Without cargo, maturin would download rustup and a toolchain
into a temporary directory; this stops instead, saying what is needed and that a prebuilt
wheel needs none of it."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import maturin

# Cargo.toml's rust-version.
MINIMUM_RUST = (1, 85)


def _check_rust() -> None:
    wanted = ".".join(map(str, MINIMUM_RUST))
    cargo = shutil.which("cargo")
    found = None
    if cargo is not None:
        try:
            out = subprocess.run([cargo, "--version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            out = None
        match = re.match(r"cargo (\d+)\.(\d+)", out.stdout if out else "")
        found = (int(match[1]), int(match[2])) if match else None
    if found is None or found < MINIMUM_RUST:
        have = "no cargo on PATH" if cargo is None else f"{cargo} is not Rust {wanted} or newer"
        raise SystemExit(
            f"stackwalk: building it from source needs Rust {wanted} or newer ({have}). "
            "Install Rust (your system's packages, or rustup: https://rustup.rs) and run pip "
            "again, or install a prebuilt wheel, which needs no Rust."
        )


def _checked(hook: Any) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        _check_rust()
        return hook(*args, **kwargs)

    run.__name__ = hook.__name__
    run.__doc__ = hook.__doc__
    return run


# Every PEP 517 hook maturin has (each runs cargo), after the check.
HOOKS = (
    "build_wheel", "build_sdist", "build_editable", "get_requires_for_build_wheel",
    "get_requires_for_build_sdist", "get_requires_for_build_editable",
    "prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable",
)  # fmt: skip
for _name in HOOKS:
    if hasattr(maturin, _name):
        globals()[_name] = _checked(getattr(maturin, _name))
