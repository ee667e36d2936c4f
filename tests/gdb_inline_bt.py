"""gdb's backtrace of the selected thread with its inline frames, for test_lines.py: run as
``gdb -batch -nx -x tests/gdb_inline_bt.py EXE CORE`` with ``STACKWALK_GDB_OUT`` naming the
JSON file to write: a list of {pc, function, inline, tailcall, file, line}, innermost first."""

import json
import os

import gdb

frames = []
frame = gdb.newest_frame()
while frame is not None:
    sal = frame.find_sal()
    frames.append(
        {
            "pc": frame.pc(),
            "function": frame.name(),
            "inline": frame.type() == gdb.INLINE_FRAME,
            "tailcall": frame.type() == gdb.TAILCALL_FRAME,
            "file": sal.symtab.filename if sal.symtab else None,
            "line": sal.line or None,
        }
    )
    try:
        frame = frame.older()
    except gdb.error:
        break
with open(os.environ["STACKWALK_GDB_OUT"], "w") as out:
    json.dump(frames, out)
