"""Hostile servers around the debuginfod and symbol-server clients (issue #44): a server that
trickles a byte now and then, one that sends without end or announces a file larger than any
allowed, one that holds every request, settings past any sensible number, a cache grown past its
cap, and a cache entry that is a symbolic link.

The servers are real HTTP servers on 127.0.0.1 (Python's ``http.server``, one thread per
connection), each answering every GET the hostile way; the clients are stackwalk's own
(``stackwalk._core.debuginfod_fetch`` and ``symbols_fetch_all``, what ``core``, ``minidump``
and ``perf`` call), run in a process of their own with the environment a user would set. The
rule: every download ends, with its reason, in bounded time and bounded disk, never a panic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hostile_http import Hostile, files_from, held, hostile_server

# Nothing here should take more than some seconds; the bound only turns a hang into a failure.
HANG = 300
BUILD_ID = "ab" * 20


def fetch(code: str, env: dict[str, str]) -> object:
    """The JSON ``code`` prints, run in a process of its own (the settings are read from its
    environment), which must end by itself."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("DEBUGINFOD_", "STACKWALK_"))}
    full.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", f"import json, stackwalk._core as c\n{code}"],
        capture_output=True, text=True, timeout=HANG, env=full,
    )  # fmt: skip
    assert proc.returncode == 0 and "panicked" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def debuginfod_fetch(url: str, cache: Path, **env: str) -> tuple[str | None, str | None]:
    (answer,) = fetch(  # type: ignore[misc]
        f"print(json.dumps(c.debuginfod_fetch([({BUILD_ID!r}, 'debuginfo')])))",
        {"DEBUGINFOD_URLS": url, "DEBUGINFOD_CACHE_PATH": str(cache), **env},
    )
    return tuple(answer)  # type: ignore[return-value]


def trickle(handler: BaseHTTPRequestHandler, state: Hostile) -> None:
    """A file announced, then a byte every half second for as long as the client listens."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(1 << 30))
    handler.end_headers()
    while not state.stop.is_set():
        handler.wfile.write(b"\x7f")
        handler.wfile.flush()
        time.sleep(0.5)


def test_a_trickling_server_is_cut_off(tmp_path: Path) -> None:
    """A byte now and then keeps every read under DEBUGINFOD_TIMEOUT, and so it kept the
    download alive for ever: 100 KiB must come within each timeout. Nothing is left in the
    cache."""
    with hostile_server(trickle) as (url, _):
        path, why = debuginfod_fetch(url, tmp_path / "cache", DEBUGINFOD_TIMEOUT="2")
    assert path is None
    assert why is not None and "less than 100 KiB in 2 s (DEBUGINFOD_TIMEOUT)" in why, why
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_one_deadline_for_the_downloads_of_an_input(tmp_path: Path) -> None:
    """A trickling server with a long DEBUGINFOD_TIMEOUT is still bound by
    DEBUGINFOD_MAXTIME, one deadline for all the files the input asks for."""
    with hostile_server(trickle) as (url, _):
        path, why = debuginfod_fetch(
            url, tmp_path / "cache", DEBUGINFOD_TIMEOUT="600", DEBUGINFOD_MAXTIME="3"
        )
    assert path is None and why is not None and "not done in 3 s (DEBUGINFOD_MAXTIME)" in why, why


def test_numbers_past_any_sense_are_a_day_not_a_panic(tmp_path: Path) -> None:
    """DEBUGINFOD_TIMEOUT and DEBUGINFOD_MAXTIME of 2^64 - 1 seconds overflowed the deadline
    (a Rust panic); they are taken as a day, and a 404 is still an answer."""

    def not_found(handler: BaseHTTPRequestHandler, state: Hostile) -> None:
        handler.send_error(404)

    huge = str(2**64 - 1)
    with hostile_server(not_found) as (url, state):
        path, why = debuginfod_fetch(
            url, tmp_path / "cache", DEBUGINFOD_TIMEOUT=huge, DEBUGINFOD_MAXTIME=huge
        )
    assert path is None and why is not None and why.endswith(": 404 Not Found"), why
    assert state.paths == [f"/buildid/{BUILD_ID}/debuginfo"]


def test_a_file_larger_than_allowed_is_not_downloaded(tmp_path: Path) -> None:
    """A server announcing a file past DEBUGINFOD_MAXSIZE is refused before its body is read,
    and one that sends without end (no length announced) is cut off at the limit; neither
    leaves a byte in the cache."""
    sent: list[int] = []

    def announced(handler: BaseHTTPRequestHandler, state: Hostile) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(1 << 40))
        handler.end_headers()
        state.stop.wait(HANG)  # nothing comes: a client reading the body waits for ever

    def endless(handler: BaseHTTPRequestHandler, state: Hostile) -> None:
        handler.send_response(200)
        handler.send_header("Connection", "close")
        handler.end_headers()
        chunk = b"\0" * (1 << 16)
        for n in range(1 << 20):  # 64 GiB at most
            handler.wfile.write(chunk)
            sent.append(n)

    limit = {"DEBUGINFOD_MAXSIZE": str(1 << 20), "DEBUGINFOD_TIMEOUT": "600"}
    with hostile_server(announced) as (url, _):
        path, why = debuginfod_fetch(url, tmp_path / "cache", **limit)
    assert path is None and why is not None, why
    assert why.endswith(f"larger than DEBUGINFOD_MAXSIZE ({1 << 20} bytes)"), why
    with hostile_server(endless) as (url, _):
        path, why = debuginfod_fetch(url, tmp_path / "cache", **limit)
    assert path is None and why is not None, why
    assert why.endswith(f"larger than DEBUGINFOD_MAXSIZE ({1 << 20} bytes)"), why
    assert len(sent) < 1 << 14, "the client stopped reading at about the limit"
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_symbol_files_are_asked_for_at_once(tmp_path: Path) -> None:
    """The .sym files of a dump's modules are asked for together: a server that answers only
    once it holds five requests at once answers them (one after another, the first would wait
    for ever), each asked for once."""
    modules = [(f"lib{i}.so", f"{i:032X}0") for i in range(5)]
    with hostile_server(held(len(modules))) as (url, state):
        answers = fetch(
            f"print(json.dumps(c.symbols_fetch_all([{url!r}], {modules!r})))",
            {"DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache"), "DEBUGINFOD_TIMEOUT": "600"},
        )
    assert answers == [[None, []]] * len(modules)
    assert state.most_open == len(modules)
    assert sorted(state.paths) == sorted(f"/{n}/{i}/{n}.sym" for n, i in modules)


def test_a_server_that_holds_every_request_is_one_deadline(tmp_path: Path) -> None:
    """Twenty modules from a server that never answers: all of them given up at one deadline
    (DEBUGINFOD_MAXTIME), said once, not twenty timeouts one after another."""
    modules = [(f"lib{i}.so", f"{i:032X}0") for i in range(20)]
    with hostile_server(held(10**6)) as (url, state):
        answers = fetch(
            f"print(json.dumps(c.symbols_fetch_all([{url!r}], {modules!r})))",
            {
                "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache"),
                "DEBUGINFOD_TIMEOUT": "600",
                "DEBUGINFOD_MAXTIME": "3",
            },
        )
    assert isinstance(answers, list) and all(path is None for path, _ in answers)
    warnings = [w for _, ws in answers for w in ws]
    assert warnings == [
        f"symbol server {url} did not answer (not done in 3 s (DEBUGINFOD_MAXTIME)): "
        "not asked again"
    ], warnings
    assert 1 < state.most_open <= 8, "several at once, no more than the client's threads"


def test_the_cache_is_kept_under_its_cap(tmp_path: Path) -> None:
    """STACKWALK_DOWNLOADS_MAX: a download that takes the cache past it removes the entries
    used longest ago (another tool's, stackwalk's), not the file just fetched."""
    store = tmp_path / "store"
    sym = store / "libx.so" / "ID0" / "libx.so.sym"
    sym.parent.mkdir(parents=True)
    sym.write_text("MODULE Linux x86_64 ID0 libx.so\n" + "FUNC 0 1 0 f\n" * 1000)
    cache = tmp_path / "cache"
    old = []
    for i, rel in enumerate(["aa/debuginfo", "bb/executable", "breakpad/y.so/ID1/y.so.sym"]):
        path = cache / rel
        path.parent.mkdir(parents=True)
        path.write_bytes(b"\0" * 10_000)
        os.utime(path, (time.time() - 86400 * (10 - i),) * 2)
        old.append(path)

    serve = files_from(store)

    with hostile_server(lambda handler, _: serve(handler)) as (url, _):
        ((path, warnings),) = fetch(  # type: ignore[misc]
            f"print(json.dumps(c.symbols_fetch_all([{url!r}], [('libx.so', 'ID0')])))",
            {"DEBUGINFOD_CACHE_PATH": str(cache), "STACKWALK_DOWNLOADS_MAX": "25000"},
        )
    assert warnings == [] and Path(path) == cache / "breakpad" / sym.relative_to(store)
    assert Path(path).read_bytes() == sym.read_bytes()
    # 30,000 bytes of old entries and the new file's 13,032: the two oldest must go.
    assert sym.stat().st_size + 20_000 > 25_000 >= sym.stat().st_size + 10_000
    assert [p.exists() for p in old] == [False, False, True]


def test_a_cache_entry_that_is_a_symbolic_link_is_not_used(tmp_path: Path) -> None:
    """An entry that is a symbolic link (to a file another user chose) is not read: the file is
    asked for anew."""
    cache = tmp_path / "cache"
    (cache / BUILD_ID).mkdir(parents=True)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"\x7fELF")
    (cache / BUILD_ID / "debuginfo").symlink_to(target)

    def not_found(handler: BaseHTTPRequestHandler, state: Hostile) -> None:
        handler.send_error(404)

    with hostile_server(not_found) as (url, state):
        path, why = debuginfod_fetch(url, cache)
    assert path is None and why is not None and why.endswith("404 Not Found"), why
    assert state.paths == [f"/buildid/{BUILD_ID}/debuginfo"]
    assert target.read_bytes() == b"\x7fELF"


@pytest.mark.parametrize("name", ["DEBUGINFOD_TIMEOUT", "DEBUGINFOD_MAXTIME", "DEBUGINFOD_MAXSIZE"])
def test_settings_that_are_not_numbers_are_the_defaults(name: str, tmp_path: Path) -> None:
    """A setting that is no number (or 0, or negative) is its default, as libdebuginfod takes
    it: the download still works."""
    store = tmp_path / "store"
    sym = store / "libx.so" / "ID0" / "libx.so.sym"
    sym.parent.mkdir(parents=True)
    sym.write_text("MODULE Linux x86_64 ID0 libx.so\n")

    serve = files_from(store)

    for value in ("soon", "0", "-5", " 1e9 "):
        cache = tmp_path / f"cache-{value.strip()}"
        with hostile_server(lambda handler, _: serve(handler)) as (url, _):
            ((path, warnings),) = fetch(  # type: ignore[misc]
                f"print(json.dumps(c.symbols_fetch_all([{url!r}], [('libx.so', 'ID0')])))",
                {"DEBUGINFOD_CACHE_PATH": str(cache), name: value},
            )
        assert path is not None and warnings == [], (value, warnings)
