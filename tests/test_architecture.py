"""The native core's layout: a folder per stage of the pipeline (source -> space -> unwind ->
symbolize), under the architectures, with imports going down only. A stage that reaches up (the
unwinder asking the symbolizer, say) is a failure here, naming the file and what it imports;
an exception would be listed with its reason. docs/architecture.md draws the same."""

from __future__ import annotations

import re
from pathlib import Path

RUST = Path(__file__).resolve().parent.parent / "rust"

# Each stage, bottom up. `threads` (the worker pool) and `stackdb` (a store of stacks) are
# leaves that anything may use; `profile` drives a perf recording through every stage, and
# `python` is the bindings, over everything.
ORDER = ["arch", "source", "space", "unwind", "symbolize", "render", "profile", "python"]
LEAVES = {"threads", "stackdb"}

# Arrows up that are known, and why (none now: a live process's snapshot reads its Python
# threads' state through a reader its caller gives, `source::process::WhileStopped`).
KNOWN_UP: dict[tuple[str, str], str] = {}

_CRATE_PATH = re.compile(r"\bcrate::([a-z_]+)")


def _code_lines(path: Path) -> list[str]:
    """The file's lines of code: comments and its unit tests (`#[cfg(test)] mod tests`, last
    in a file by the project's convention) left out."""
    lines = []
    for line in path.read_text().splitlines():
        if line.strip() == "#[cfg(test)]":
            break
        if not line.lstrip().startswith("//"):
            lines.append(line)
    return lines


def _stage(path: Path) -> str:
    relative = path.relative_to(RUST)
    return relative.parts[0].removesuffix(".rs")


def arrows() -> dict[tuple[str, str], set[str]]:
    """(file relative to rust/, stage it imports) -> the paths it names, for every import of
    another stage by a stage's code."""
    out: dict[tuple[str, str], set[str]] = {}
    for path in sorted(RUST.rglob("*.rs")):
        if path.relative_to(RUST).parts[0] in ("tests", "lib.rs"):
            continue
        own = _stage(path)
        for line in _code_lines(path):
            for target in _CRATE_PATH.findall(line):
                if target != own:
                    key = (str(path.relative_to(RUST)), target)
                    out.setdefault(key, set()).add(line.strip())
    return out


def upward() -> dict[tuple[str, str], set[str]]:
    def rank(stage: str) -> int:
        return -1 if stage in LEAVES else ORDER.index(stage)

    return {(file, target): lines for (file, target), lines in arrows().items()
            if rank(target) > rank(file.split("/")[0].removesuffix(".rs"))}  # fmt: skip


def test_every_module_is_a_stage() -> None:
    declared = re.findall(r"^(?:pub )?mod ([a-z_]+);", (RUST / "lib.rs").read_text(), re.M)
    assert set(declared) == set(ORDER) | LEAVES
    top = {p.name.removesuffix(".rs") for p in RUST.iterdir() if p.name not in ("lib.rs", "tests")}
    assert top == set(ORDER) | LEAVES, top - set(ORDER) - LEAVES


def test_imports_go_down_only() -> None:
    found = upward()
    unknown = {key: sorted(lines) for key, lines in found.items() if key not in KNOWN_UP}
    assert not unknown, "stages importing the ones above them:\n" + "\n".join(
        f"  {file} -> {target}: {lines}" for (file, target), lines in unknown.items()
    )
    # An exception mended is taken off the list.
    assert set(KNOWN_UP) <= set(found), set(KNOWN_UP) - set(found)


def test_the_unwinder_never_imports_the_symbolizer() -> None:
    assert not [key for key in arrows() if key[0].startswith("unwind/") and key[1] == "symbolize"]
    # Nor does anything below it.
    below = ("arch/", "source/", "space/")
    assert not [key for key in upward() if key[0].startswith(below) and key not in KNOWN_UP]


def test_pyo3_only_at_the_edge() -> None:
    users = {str(p.relative_to(RUST)) for p in RUST.rglob("*.rs") if "pyo3" in p.read_text()}
    assert users and all(u.startswith(("python/", "lib.rs")) for u in users), users
