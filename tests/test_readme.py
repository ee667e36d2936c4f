"""The README's first example runs as it is printed. Its first ```python block is written to a
file in an empty temporary directory and run there by this interpreter (the project's .venv), in
a process of its own: it builds the bundled demo program with ``cc``, stops it under gdb, unwinds
the stopped thread and prints one line per frame. The test asserts that the process exits 0 and
that its output has a line per frame (a pc, a function name, a trust level) naming the demo's
functions from ``demo_stop`` to ``main``, and the walk's clean end (``end_of_stack``). It needs
what ``make demo`` installs: a C compiler and gdb."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
FRAME = re.compile(r"0x[0-9a-f]+ (\S+) (context|cfi|prologue|frame_pointer|cfi_scan|scan)")


def first_python_block(text: str) -> str:
    match = re.search(r"^```python\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    assert match is not None, "README.md has no ```python block"
    return match.group(1)


def test_first_example_runs_as_printed(tmp_path: Path) -> None:
    example = tmp_path / "example.py"
    example.write_text(first_python_block(README.read_text()))
    run = subprocess.run(
        [sys.executable, str(example)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    names = [m.group(1) for line in lines if (m := FRAME.fullmatch(line))]
    assert names[0] == "demo_stop", run.stdout
    for function in ("compare", "sort_numbers", "recurse", "main"):
        assert function in names, run.stdout
    assert names.index("sort_numbers") < names.index("recurse") < names.index("main"), run.stdout
    assert lines[-1].startswith("end_of_stack "), run.stdout


def test_every_relative_link_of_the_docs_leads_to_a_file() -> None:
    """README.md, CHANGELOG.md and docs/*.md link to each other and to the code by relative
    paths: each must name a file or directory of the checkout (a page moved or renamed breaks
    them), and none may be a bare #anchor (the pages were split from one: an anchor of the old
    README leads nowhere now)."""
    root = README.parent
    pages = [README, root / "CHANGELOG.md", *sorted((root / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            path = target.split("#", 1)[0]
            if not path or not (page.parent / path).exists():
                broken.append(f"{page.relative_to(root)}: {target}")
    assert not broken, broken
