"""Minidumps (Breakpad's, Crashpad's, ``minidump-writer``'s): the threads, exception, modules and
memory of a crashed process, unwound as a core is.

``Minidump.open(path)`` has the native core read the file with rust-minidump's ``minidump`` crate
(``stackwalk._core.MinidumpFile``: the thread list with each thread's CPU context, the memory
list and the stacks read in place, the module list with each module's build id from its
CodeView record, the exception stream, and the Linux maps, status, command line and auxv
streams). A minidump is one more source for the pipeline of ``stackwalk.core``: its mappings
(the maps stream, else the module list) place the modules by the same rule as a core's, each
module's file is found at its path (or under ``sysroot``) and used only if its build id is the
one the dump recorded, and the threads are unwound and symbolized as a core's are::

    dump = Minidump.open("crash.dmp")
    print(dump.crashing_tid, [hex(f.pc) for f in dump.threads[0].unwind().frames])

Damaged streams are lines in ``dump.warnings``; only a file whose header or stream directory
cannot be read is a MinidumpError.
"""

from __future__ import annotations

from stackwalk._core import MinidumpFile
from stackwalk.core import Core, CoreModule, Signal, Thread
from stackwalk.errors import MinidumpError

__all__ = ["Minidump", "MinidumpError", "CoreModule", "Signal", "Thread"]


class Minidump(Core):
    """A minidump opened for unwinding: ``Core``'s interface (``threads``, ``crashing_tid``,
    ``signal``, ``modules``, ``to_dict()``), ``Minidump.open(path, ...)`` taking ``Core.open``'s
    options (``max_size`` does not apply: minidumps are read as they are)."""

    _FILE_KIND = "minidump"

    def _open_source(self, max_size: int | None) -> MinidumpFile:
        dump = MinidumpFile(self.path)
        # The module list's build ids, by where each module starts.
        self._build_ids = {base: build_id for base, _, _, build_id in dump.modules if build_id}
        return dump

    def _build_id_at(self, start: int | None) -> str | None:
        return self._build_ids.get(start) if start is not None else None
