"""The build backend of stackwalk's source distribution: maturin's, after a check that a Rust
toolchain new enough is on PATH. Without cargo, maturin would download rustup and a toolchain
into a temporary directory; this stops instead, saying what is needed and that a prebuilt
wheel needs none of it."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
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


# Cargo's features for an interpreter older than the stable ABI's 3.11 (Cargo.toml's `abi3`
# feature, on by default): an extension for that interpreter alone.
FOR_ONE_PYTHON = "--no-default-features --features python"


def _for_this_python(settings: dict[str, Any] | None) -> dict[str, Any] | None:
    """The hook's config settings, with the build arguments an interpreter before 3.11 needs."""
    if sys.version_info >= (3, 11):
        return settings
    settings = dict(settings or {})
    given = settings.get("maturin.build-args", settings.get("build-args"))
    if given is None:
        given = os.environ.get("MATURIN_PEP517_ARGS", "")
    if not isinstance(given, str):
        given = " ".join(given)
    settings["maturin.build-args"] = f"{given} {FOR_ONE_PYTHON}".strip()
    return settings


def _checked(hook: Any) -> Any:
    signature = inspect.signature(hook)

    def run(*args: Any, **kwargs: Any) -> Any:
        _check_rust()
        bound = signature.bind(*args, **kwargs)
        if "config_settings" in signature.parameters:
            settings = bound.arguments.get("config_settings")
            bound.arguments["config_settings"] = _for_this_python(settings)
        return hook(*bound.args, **bound.kwargs)

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
