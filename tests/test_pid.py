"""`stackwalk pid` and `stackwalk.Process`: running programs, stopped by the test (SIGSTOP) so
that stackwalk, `eu-stack -p` and gdb all see the same moment; after each tool the program is
still as the test left it (stopped, untraced), and runs on when let go."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import stackwalk
from corefiles import EuStack, build_id_of, eu_stack, gdb_on_process
from hostile_http import Hostile, hostile_server
from processes import (
    check_stopped,
    running,
    state,
    stopped,
    thread_states,
    wait_all_blocked,
)
from realstacks import SYSTEM_PYTHON, Builder
from test_perf_jit import BUSY_FUNCTIONS, CALLERS, JS_NAME

# x86_64's system calls, as /proc/PID/syscall names the one a thread is blocked in.
SYS_PAUSE = 34
SYS_FUTEX = 202


def stackwalk_pid(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stackwalk", "pid", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def ours_and_eu_stack(pid: int) -> tuple[subprocess.CompletedProcess[str], EuStack]:
    """``stackwalk pid --json --no-inline`` and ``eu-stack -p`` of the stopped process, which
    each leaves as it found it."""
    out = stackwalk_pid(str(pid), "--json", "--no-inline")
    check_stopped(pid)
    eu = eu_stack(None, None, pid=pid)
    check_stopped(pid)
    return out, eu


def walked_stopped(build: Builder, source: str) -> tuple[int, dict[str, Any], EuStack]:
    """A program of tests/programs, built, run until ready and stopped: its pid, ``stackwalk
    pid --json --no-inline``'s document (which must exit 0) and eu-stack's threads."""
    program = build(source, "-O2", "-pthread")
    with running([str(program)]) as proc:
        with stopped(proc.pid):
            out, eu = ours_and_eu_stack(proc.pid)
    assert out.returncode == 0, out.stderr
    return proc.pid, json.loads(out.stdout), eu


def test_every_thread_equals_eu_stack_and_gdb(build: Builder, tmp_path: Path) -> None:
    program = build("pid_threads.c", "-O2", "-pthread")
    with running([str(program)]) as proc:
        # Each thread in its call (nested's in nanosleep), not still on its way from the barrier.
        wait_all_blocked(proc.pid)
        with stopped(proc.pid):
            out, eu = ours_and_eu_stack(proc.pid)
            gdb = gdb_on_process(proc.pid, tmp_path)
            check_stopped(proc.pid)
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
        # Let go, it runs on: still there, untraced, and not stopped.
        deadline = time.monotonic() + 60
        while state(proc.pid)[0] not in "RS":
            assert time.monotonic() < deadline, state(proc.pid)
            time.sleep(0.005)
        assert state(proc.pid)[1] == 0
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["kind"], doc["path"], doc["pid"]) == ("process", None, proc.pid)
    assert doc["crashing_thread"] is None
    ours = {t["tid"]: [int(f["pc"], 16) for f in t["frames"]] for t in doc["threads"]}
    assert len(ours) == 9  # main and eight threads
    assert ours == {tid: eu.pcs(tid) for tid in ours}
    assert ours == {t.tid: t.pcs for t in gdb.threads}
    # The vdso is where /proc/PID/maps has it (the module mapped right after it is another).
    (vdso_line,) = [line for line in maps.splitlines() if line.endswith("[vdso]")]
    start, end = (int(x, 16) for x in vdso_line.split()[0].split("-"))
    (vdso,) = [m for m in doc["modules"] if m["path"] == "[vdso]"]
    assert (int(vdso["start"], 16), int(vdso["end"], 16)) == (start, end)
    functions = {f["function"] for t in doc["threads"] for f in t["frames"]}
    assert {"in_pause", "in_sleep", "in_read", "in_lock", "in_cond", "in_poll", "in_select",
            "nested", "main"} <= functions  # fmt: skip
    assert all(t["end"] == "end_of_stack" for t in doc["threads"])


def test_threads_in_signal_handlers_on_alternate_stacks(build: Builder) -> None:
    """Two threads blocked in signal handlers on alternate stacks (tests/programs/pid_altstack.c:
    the main thread's below its stack, the worker's above its own). The stack each was
    interrupted on is copied too, found from the kernel's signal frame on the handler's stack:
    every thread equals eu-stack's, through __restore_rt to its end."""
    pid, doc, eu = walked_stopped(build, "pid_altstack.c")
    assert len(doc["threads"]) == 2
    for thread in doc["threads"]:
        pcs = [int(f["pc"], 16) for f in thread["frames"]]
        assert pcs == eu.pcs(thread["tid"]), thread["end_detail"]
        functions = [f["function"] for f in thread["frames"]]
        tramp = functions.index("__restore_rt")
        assert functions[tramp - 2 : tramp] == ["wait_in_handler", "on_usr1"], functions
        assert "descend" in functions[tramp + 1 :] and thread["end"] == "end_of_stack"
    # The worker's walk goes down past its signal frame, the main thread's up.
    for thread in doc["threads"]:
        sps = [int(f["sp"], 16) for f in thread["frames"]]
        tramp = [f["function"] for f in thread["frames"]].index("__restore_rt")
        if thread["tid"] == pid:
            assert sps[tramp + 1] > sps[tramp]
        else:
            assert sps[tramp + 1] < sps[0]


def test_stacks_between_guard_pages_of_one_mapping(build: Builder) -> None:
    """Thread stacks in one mapping, each with a guard page that cannot be read at its bottom
    (glibc 2.42+'s MADV_GUARD_INSTALL; tests/programs/pid_guarded.c): the copy of one thread's
    stack runs into the next one's guard page, and every stack past it is copied all the same.
    Every thread equals eu-stack's, to its end."""
    pid, doc, eu = walked_stopped(build, "pid_guarded.c")
    ours = {t["tid"]: [int(f["pc"], 16) for f in t["frames"]] for t in doc["threads"]}
    assert len(ours) == 4
    assert ours == {tid: eu.pcs(tid) for tid in ours}
    assert all(t["end"] == "end_of_stack" for t in doc["threads"])
    depths = sorted(
        [f["function"] for f in t["frames"]].count("descend")
        for t in doc["threads"]
        if t["tid"] != pid
    )
    assert depths == [4, 6, 8]


def test_a_running_process_is_stopped_briefly_and_let_go(build: Builder) -> None:
    """Without the test's SIGSTOP: the process is stopped only while it is copied (said in the
    report), and runs on."""
    program = build("pid_threads.c", "-O2", "-pthread")
    with running([str(program)]) as proc:
        p = stackwalk.Process.attach(proc.pid)
        assert 0 < p.stopped_for < 10.0  # seconds: a bound no load reaches, not a speed test
        assert {t.tid for t in p.threads} == {int(t) for t in os.listdir(f"/proc/{proc.pid}/task")}
        assert state(proc.pid)[1] == 0 and state(proc.pid)[0] in "RS"
        text = stackwalk_pid(str(proc.pid), "--thread", str(proc.pid))
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        assert lines[0] == f"Process {proc.pid}, {program}"
        assert lines[1].startswith("Stopped for ") and lines[1].endswith(
            " ms while its threads were copied"
        )
        assert sum(line.startswith("Thread ") for line in lines) == 1
        assert any(" in main+0x" in line for line in lines)


def test_offline_asks_no_debuginfod_server(build: Builder, tmp_path: Path) -> None:
    """A program without its DWARF (strip -g): ``pid`` asks the server of DEBUGINFOD_URLS (an
    HTTP server of the test's, which answers 404) for its debug file, by its build id; with
    ``--offline``, or STACKWALK_OFFLINE=1, it asks nothing, and says nothing of debuginfod. The
    frames are the same in every run (named from the program's symbol table)."""
    program = tmp_path / "pid_threads"
    shutil.copy(build("pid_threads.c", "-O2", "-pthread"), program)
    subprocess.run(["strip", "-g", str(program)], check=True)
    build_id = build_id_of(str(program))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEBUGINFOD_", "STACKWALK_"))}
    env["DEBUGINFOD_CACHE_PATH"] = str(tmp_path / "cache")

    def answer(handler: BaseHTTPRequestHandler, state: Hostile) -> None:
        handler.send_error(404)

    runs = [([], {}), (["--offline"], {}), ([], {"STACKWALK_OFFLINE": "1"})]
    docs = []
    with hostile_server(answer) as (url, server), running([str(program)]) as proc:
        env["DEBUGINFOD_URLS"] = url
        wait_all_blocked(proc.pid)
        with stopped(proc.pid):  # one moment for the three runs
            for options, more in runs:
                asked = len(server.paths)
                out = subprocess.run(
                    [sys.executable, "-m", "stackwalk", "pid", str(proc.pid), "--json", *options],
                    capture_output=True, text=True, timeout=120, env={**env, **more},
                )  # fmt: skip
                assert out.returncode == 0, out.stderr
                docs.append(json.loads(out.stdout))
                if options or more:
                    assert server.paths[asked:] == [], server.paths
                    assert "debuginfod" not in out.stderr, out.stderr
                else:
                    assert f"/buildid/{build_id}/debuginfo" in server.paths[asked:], server.paths
                    assert f"debuginfod: no debuginfo for {program}" in out.stderr, out.stderr
                check_stopped(proc.pid)
    frames = [[f["function"] for t in d["threads"] for f in t["frames"]] for d in docs]
    assert frames[0] == frames[1] == frames[2] and "main" in frames[0]


def test_sysroot_files_are_used(build: Builder, tmp_path: Path) -> None:
    """``pid --sysroot DIR``: a module's file is looked for under DIR first. The program runs
    without its DWARF (strip -g, the same build id); under the sysroot, at the program's path,
    is the file with it: its frames then have source lines, which they have not without."""
    built = build("pid_threads.c", "-O2", "-pthread")
    program = tmp_path / "run" / "pid_threads"
    program.parent.mkdir()
    shutil.copy(built, program)
    subprocess.run(["strip", "-g", str(program)], check=True)
    sysroot = tmp_path / "sysroot"
    (sysroot / program.parent.relative_to("/")).mkdir(parents=True)
    shutil.copy(built, sysroot / program.relative_to("/"))
    with running([str(program)]) as proc:
        wait_all_blocked(proc.pid)
        with stopped(proc.pid):
            docs = []
            for options in ([], ["--sysroot", str(sysroot)]):
                out = stackwalk_pid(str(proc.pid), "--json", "--offline", *options)
                assert out.returncode == 0, out.stderr
                docs.append(json.loads(out.stdout))
                check_stopped(proc.pid)
    lines = []
    # The program's frames (but _start's, from crt1.o), named by the file used: the one under
    # the sysroot, with --sysroot.
    for doc, file in zip(docs, [program, sysroot / program.relative_to("/")], strict=True):
        ours = [f for t in doc["threads"] for f in t["frames"] if f["module"] == str(file)]
        assert any(f["function"] == "main" for f in ours), doc["modules"]
        lines.append([f["line"] for f in ours if f["function"] != "_start"])
    assert not any(lines[0]) and all(lines[1]), lines


def test_a_deleted_library_is_read_through_map_files(build: Builder, tmp_path: Path) -> None:
    """A library and the program deleted while it runs: their frames are read and named through
    /proc/PID/map_files, as eu-stack's pcs, and each file is named by the path it had, as
    /proc/PID/maps names it, the program's in the report's first line too."""
    lib = tmp_path / "libgone.so"
    built = build("pid_gone_lib.c", "-O2", "-shared", "-fPIC")
    lib.write_bytes(built.read_bytes())
    program = tmp_path / "gone"
    shutil.copy(build("pid_gone.c", "-O2", "-ldl"), program)
    with running([str(program), str(lib)]) as proc:
        lib.unlink()
        program.unlink()
        # In the library's pause(), not still on its way there from printing "ready".
        deadline = time.monotonic() + 60
        while not Path(f"/proc/{proc.pid}/syscall").read_text().startswith(f"{SYS_PAUSE} "):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        with stopped(proc.pid):
            out = stackwalk_pid(str(proc.pid), "--json")
            text = stackwalk_pid(str(proc.pid))
            check_stopped(proc.pid)
            eu = eu_stack(None, None, pid=proc.pid)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    [thread] = doc["threads"]
    gone = [f for f in thread["frames"] if f["function"] == "gone_wait"]
    assert len(gone) == 4  # the recursion of depth 3 and its end
    assert {f["module"] for f in gone} == {f"{lib} (deleted)"}
    assert doc["executable"] == f"{program} (deleted)"
    assert text.stdout.splitlines()[0] == f"Process {proc.pid}, {program} (deleted)"
    [main] = [f for f in thread["frames"] if f["function"] == "main"]
    assert main["module"] == f"{program} (deleted)"
    assert all(f["file"] and f["file"].endswith("pid_gone_lib.c") for f in gone)
    assert [int(f["pc"], 16) for f in thread["frames"] if not f["inline"]] == eu.pcs(proc.pid)


MAPS_AN_INTERPRETER = """
import mmap, sys, time
with open(sys.argv[1], "rb") as f:
    data = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)  # shared, read-only: as data
def waiting_with_a_file_mapped():
    print("ready", flush=True)
    time.sleep(600)
waiting_with_a_file_mapped()
"""


def test_a_program_mapped_as_data_is_no_module(tmp_path: Path) -> None:
    """A Python process that maps another interpreter's executable as data (as a symbolizer or
    debugger reads files, stackwalk itself among them): that file is no module, and its
    _PyRuntime is not taken for the running interpreter's (it was: "no Python frames")."""
    other = tmp_path / "python3-copy"
    shutil.copy(os.path.realpath(SYSTEM_PYTHON), other)
    script = tmp_path / "maps.py"
    script.write_text(MAPS_AN_INTERPRETER)
    with running([sys.executable, str(script), str(other)]) as proc:
        assert str(other) in Path(f"/proc/{proc.pid}/maps").read_text()
        with stopped(proc.pid):
            out = stackwalk_pid(str(proc.pid), "--json", "--python")
    assert out.returncode == 0, out.stdout[-3000:]
    doc = json.loads(out.stdout)
    assert str(other) not in {m["path"] for m in doc["modules"]}
    assert str(other) not in out.stderr  # no "module not found" for it either
    [thread] = doc["threads"]
    functions = [f["function"] for f in thread["frames"]]
    assert "waiting_with_a_file_mapped" in functions, functions


def test_a_process_whose_main_thread_has_exited(build: Builder) -> None:
    """The main thread called pthread_exit and waits as a zombie for the two others, so /proc
    shows its process no memory through its own pid (tests/programs/pid_main_exited.c). The
    memory is read through a thread that runs on: the two threads equal ``eu-stack -p`` given
    one of their tids (given the pid, eu-stack finds no such process). The zombie is no thread
    of ours (eu-stack cannot attach to it either)."""
    program = build("pid_main_exited.c", "-O2", "-pthread")
    with running([str(program)]) as proc:
        pid = proc.pid
        deadline = time.monotonic() + 60
        waiting = ["S", "S", "Z"]  # the main thread a zombie, the two others asleep
        while thread_states(pid)[pid] != "Z" or sorted(thread_states(pid).values()) != waiting:
            assert time.monotonic() < deadline, thread_states(pid)
            time.sleep(0.005)
        os.kill(pid, signal.SIGSTOP)
        while sorted(thread_states(pid).values()) != ["T", "T", "Z"]:
            assert time.monotonic() < deadline, thread_states(pid)
            time.sleep(0.005)
        try:
            out = stackwalk_pid(str(pid), "--json", "--no-inline")
            assert sorted(thread_states(pid).values()) == ["T", "T", "Z"], "left as it was"
            assert state(pid)[1] == 0, "left untraced"
            workers = sorted(t for t in thread_states(pid) if t != pid)
            eu = eu_stack(None, None, pid=workers[0])
        finally:
            os.kill(pid, signal.SIGCONT)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["pid"] == pid
    ours = {t["tid"]: [int(f["pc"], 16) for f in t["frames"]] for t in doc["threads"]}
    assert sorted(ours) == workers
    assert ours == {tid: eu.pcs(tid) for tid in workers}
    functions = {t["tid"]: [f["function"] for f in t["frames"]] for t in doc["threads"]}
    assert any(names[1:3] == ["wait_forever", "pauser"] for names in functions.values()), functions
    assert any("sleeper" in names for names in functions.values()), functions
    assert all(t["end"] == "end_of_stack" for t in doc["threads"])
    assert Path(str(program)).name in {Path(m["path"]).name for m in doc["modules"]}


def test_errors_are_one_line(tmp_path: Path) -> None:
    # No such process: a pid that was, and is no more.
    gone = subprocess.Popen(["true"])
    gone.wait()
    out = stackwalk_pid(str(gone.pid))
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == f"stackwalk: error: pid {gone.pid}: no such process\n"
    # A zombie: exited, not reaped by its parent (this test, until the end).
    zombie = subprocess.Popen(["true"])
    deadline = time.monotonic() + 60
    while state(zombie.pid)[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.005)
    out = stackwalk_pid(str(zombie.pid))
    assert out.returncode == 2 and out.stderr.startswith(
        f"stackwalk: error: pid {zombie.pid}: a zombie"
    )
    zombie.wait()
    # Another user's process, and no CAP_SYS_PTRACE (these tests run as root: the capability
    # is dropped for the command).
    other = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              "sleep", "600"])  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while Path(f"/proc/{other.pid}/status").read_text().find("Uid:\t65534") < 0:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        drop = ["setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace"]
        out = subprocess.run([*drop, sys.executable, "-m", "stackwalk", "pid", str(other.pid)],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert (out.returncode, out.stdout) == (2, ""), out.stderr
        assert out.stderr.startswith(f"stackwalk: error: pid {other.pid}: not permitted to trace")
        assert out.stderr.count("\n") == 1 and "CAP_SYS_PTRACE" in out.stderr, out.stderr
        assert state(other.pid) == ("S", 0), "left as it was"
    finally:
        other.kill()
        other.wait()


def test_a_process_that_exits_while_read(build: Builder) -> None:
    """Processes that exit at about the moment they are read (killed a few milliseconds after
    the command starts, at a different moment each time): each read either gives the process's
    threads or says in one line that it exited, never a traceback or a hang."""
    program = build("pid_threads.c", "-O2", "-pthread")
    for attempt in range(12):
        with running([str(program)]) as proc:
            cmd = [sys.executable, "-m", "stackwalk", "pid", str(proc.pid), "--json"]
            reader = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)  # fmt: skip
            time.sleep(attempt * 0.01)
            proc.kill()
            out, err = reader.communicate(timeout=120)
        if reader.returncode == 0:
            assert json.loads(out)["pid"] == proc.pid
        else:
            assert reader.returncode == 2 and out == "", err
            assert re.fullmatch(
                rf"stackwalk: error: pid {proc.pid}: (no such process|it exited while being "
                r"read|a zombie \(.*\))\n",
                err,
            ), err


def test_a_process_traced_already_says_by_whom(build: Builder) -> None:
    """ptrace refused (here: another tracer, this test, holds the process; Yama's ptrace_scope,
    another user and containers refuse the same way): one line on why and what to do, and the
    process never stopped by stackwalk."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ptrace_seize = 0x4206
    program = build("pid_threads.c", "-O2", "-pthread")
    with running([str(program)]) as proc:
        assert libc.ptrace(ptrace_seize, proc.pid, None, None) == 0, ctypes.get_errno()
        out = stackwalk_pid(str(proc.pid))
        assert out.returncode == 2, out
        assert out.stderr == (
            f"stackwalk: error: pid {proc.pid}: already traced by pid {os.getpid()} (a "
            "debugger?): detach it first\n"
        )
        assert state(proc.pid) in (("S", os.getpid()), ("R", os.getpid()))


NODE_SCRIPT = """
function innerMost(n) {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  console.log("ready");
  Atomics.wait(cell, 0, 0);  // forever: nothing wakes it
  return n;
}
function middle(n) { return n > 0 ? middle(n - 1) + 1 : innerMost(n); }
function outer() { return middle(3); }
outer();
"""


def test_node_jit_frames_are_named_and_walked(tmp_path: Path) -> None:
    """node's JavaScript frames are code outside every module, without CFI: named from the
    perf map node writes (--perf-basic-prof; --interpreted-frames-native-stack gives each
    interpreted function code of its own), and walked by their frame-pointer chain to main, as
    eu-stack walks them, not scanned past."""
    node = shutil.which("node")
    assert node, "node is on this kind of machine (see /work/.library/env)"
    script = tmp_path / "wait.js"
    script.write_text(NODE_SCRIPT)
    argv = [node, "--perf-basic-prof", "--interpreted-frames-native-stack", str(script)]
    with running(argv, cwd=tmp_path) as proc:  # node writes its v8 logs where it runs
        perf_map = Path(f"/tmp/perf-{proc.pid}.map")
        try:
            # In Atomics.wait's futex, not still writing "ready".
            deadline = time.monotonic() + 60
            while not Path(f"/proc/{proc.pid}/syscall").read_text().startswith(f"{SYS_FUTEX} "):
                assert time.monotonic() < deadline
                time.sleep(0.005)
            with stopped(proc.pid):
                out = stackwalk_pid(str(proc.pid), "--json", "--thread", str(proc.pid))
                eu = eu_stack(None, None, pid=proc.pid)
                # And a core of the same moment, read with the map kept beside it.
                core = tmp_path / "node.core"
                gcore = ["gdb", "-batch", "-nx", "-p", str(proc.pid), "-ex", f"gcore {core}"]
                subprocess.run(gcore, capture_output=True, timeout=600)
                kept = shutil.copy(perf_map, tmp_path / "node.map")
        finally:
            perf_map.unlink(missing_ok=True)
    from_core = subprocess.run(
        [sys.executable, "-m", "stackwalk", "core", str(core), "--perf-map", str(kept), "--json",
         "--thread", str(proc.pid)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert from_core.returncode == 0, from_core.stderr
    [core_thread] = json.loads(from_core.stdout)["threads"]
    assert out.returncode == 0, out.stderr
    [thread] = json.loads(out.stdout)["threads"]
    frames = [f for f in thread["frames"] if not f["inline"]]
    assert [int(f["pc"], 16) for f in frames] == eu.pcs(proc.pid)
    js = [f for f in frames if f["module"] is None]
    names = [f["function"].split()[0] for f in js]
    assert names[:6] == ["JS:~innerMost", *["JS:~middle"] * 4, "JS:~outer"], names
    assert all(f["trust"] == "frame_pointer" for f in js)
    assert frames[-1]["function"] == "_start"
    # The core gives the same frames, names and trusts.
    keys = ("pc", "function", "trust")
    assert [[f[k] for k in keys] for f in core_thread["frames"] if not f["inline"]] == [
        [f[k] for k in keys] for f in frames
    ]


# test_perf_jit's program, looping for ever once it says so: mostly in V8's optimized code.
BUSY_FOREVER_JS = BUSY_FUNCTIONS + 'console.log("ready");\nfor (;;) outer(100);\n'


def test_node_busy_in_javascript(tmp_path: Path) -> None:
    """node running JavaScript, stopped at 30 moments: wherever its main thread is in the
    script's code (by then mostly middle, optimized, with innerMost inlined), its frames are
    the script's call path (test_perf_jit's CALLERS) up to its top level, with no frame of
    node's among them, and the walk reaches _start. The perf map is given to the unwinder as
    well as to the symbolizer: a frame 0 in JIT code is taken for one without its frame record
    only at its function's start (test_perf_jit shows why, on perf samples)."""
    node = shutil.which("node")
    assert node, "node is on this kind of machine (see /work/.library/env)"
    script = tmp_path / "busy.js"
    script.write_text(BUSY_FOREVER_JS)
    argv = [node, "--perf-basic-prof", "--interpreted-frames-native-stack", str(script)]
    walks = []
    with running(argv, cwd=tmp_path) as proc:
        try:
            for _ in range(30):
                out = stackwalk_pid(str(proc.pid), "--json", "--thread", str(proc.pid))
                assert out.returncode == 0, out.stderr
                [thread] = json.loads(out.stdout)["threads"]
                walks.append([f for f in thread["frames"] if not f["inline"]])
                time.sleep(0.02)
        finally:
            Path(f"/tmp/perf-{proc.pid}.map").unlink(missing_ok=True)
    in_script = 0
    for frames in walks:
        names = []
        for f in frames:
            match = JS_NAME.fullmatch(f["function"] or "") if f["module"] is None else None
            if not match or match["file"] != str(script):
                break
            names.append(match["name"])
        if not names:
            continue  # frame 0 elsewhere: in node's own code, the kernel, the GC
        in_script += 1
        assert names[-1] == "", f"no top-level frame of the script: {frames[: len(names) + 1]}"
        for callee, caller in itertools.pairwise(names):
            assert caller in CALLERS[callee], f"{caller!r} does not call {callee!r}: {names}"
        assert frames[-1]["function"] == "_start", frames[-1]
    assert in_script >= 5, f"{in_script} of {len(walks)} stops in the script's code"


def test_python_threads_equal_eu_stack_and_gdb(tmp_path: Path) -> None:
    """python3 (the distribution's, with its debug symbols) with threads blocked in a lock, a
    sleep and select, and its main thread deep in a recursion through C: every thread's native
    frames equal eu-stack's and gdb's, at the same stop."""
    script = Path(__file__).parent / "programs" / "pid_python.py"
    argv = [SYSTEM_PYTHON, str(script)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        # (Wherever each thread is when stopped: all three tools look at the same stop.)
        with stopped(proc.pid):
            out = stackwalk_pid(str(proc.pid), "--json", "--no-inline")
            eu = eu_stack(None, None, pid=proc.pid)
            gdb = gdb_on_process(proc.pid, tmp_path)
            check_stopped(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ours = {
        t["tid"]: [int(f["pc"], 16) for f in t["frames"] if f.get("kind", "native") == "native"]
        for t in doc["threads"]
    }
    assert len(ours) == 4
    assert ours == {tid: eu.pcs(tid) for tid in ours}
    assert ours == {t.tid: t.pcs for t in gdb.threads}
    [main] = [t for t in doc["threads"] if t["tid"] == proc.pid]
    assert sum(f["function"].startswith("map_next") for f in main["frames"]) >= 40
    assert all(t["end"] == "end_of_stack" for t in doc["threads"])
