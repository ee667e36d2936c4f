"""Debian packages downloaded by apt's own client on a private state of its own (lists, cache, no
installed packages: nothing of the machine's apt is touched), from the first of this machine's apt
repositories that serves the suite (a mirror, a proxy: as the machine is configured); the index
is checked against Debian's archive keyring and each package against the index. The one
downloader of tests/wheels.py (bookworm's aarch64 CPython) and tests/build_cpython.sh (sid's
CPython 3.14, trixie's 3.13 source). Standard library only: build_cpython.sh runs it with the
system's python3, before the project's venv exists.

    python3 tests/debian_packages.py SUITE ARCH INTO PACKAGE...
        binary packages (apt-get download)
    python3 tests/debian_packages.py --source SUITE ARCH INTO PACKAGE...
        sources (apt-get source --download-only)

downloads them into INTO (made if missing); prints nothing, and exits 1 with apt's log on stderr
if they could not be downloaded.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

# The private states are made (and removed) here: the cache directory of the tests' tools.
CACHE = Path(os.environ.get("STACKWALK_CACHE", Path.home() / ".cache" / "stackwalk"))
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


class AptError(RuntimeError):
    """apt could not download the packages: what failed, then what apt said (``log``)."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(f"{message}\n{log.rstrip()}")
        self.log = log


def apt_download(
    suite: str, arch: str, packages: Sequence[str], into: Path, *, source: bool = False
) -> None:
    """``packages`` of Debian's ``suite`` for ``arch``, downloaded into ``into`` (binary packages
    by ``apt-get download``; with ``source``, their sources by ``apt-get source
    --download-only``). Raises AptError when no repository of the machine's apt serves the suite
    or apt could not download them."""
    CACHE.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix=f"apt-{suite}-", dir=CACHE))
    try:
        for sub in ("lists/partial", "cache/archives/partial", "sources"):
            (state / sub).mkdir(parents=True)
        options = ["-q", "-o", "Dir::Etc::SourceList=/dev/null",
                   "-o", f"Dir::Etc::SourceParts={state / 'sources'}",
                   "-o", f"Dir::State::Lists={state / 'lists'}",
                   "-o", f"Dir::Cache={state / 'cache'}", "-o", "Dir::State::status=/dev/null",
                   "-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root",
                   "-o", f"APT::Architecture={arch}", "-o", f"APT::Architectures={arch}",
                   "-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"]  # fmt: skip
        listed = ["apt-get", "indextargets", "--no-release-info", "--format", "$(REPO_URI)"]
        uris = subprocess.run(listed, capture_output=True, text=True).stdout.split()
        said = "(apt-get indextargets names no repository)\n"
        for uri in sorted(set(uris)):
            (state / "sources" / f"{suite}.sources").write_text(
                f"Types: {'deb-src' if source else 'deb'}\nURIs: {uri}\nSuites: {suite}\n"
                f"Components: main\nSigned-By: {KEYRING}\n"
            )
            update = subprocess.run(["apt-get", *options, "update"], capture_output=True,
                                    text=True)  # fmt: skip
            said = update.stdout + update.stderr
            if update.returncode == 0 and not re.search(r"^[EW]:", said, re.MULTILINE):
                break
        else:
            raise AptError(f"no repository of apt's sources serves Debian's {suite} suite", said)
        into.mkdir(parents=True, exist_ok=True)
        command = ["source", "--download-only"] if source else ["download"]
        download = subprocess.run(["apt-get", *options, *command, *packages], cwd=into,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)  # fmt: skip
        if download.returncode != 0:
            raise AptError(f"apt-get {command[0]} {' '.join(packages)} failed", download.stdout)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="debian_packages.py",
        description="Download Debian packages with apt on a private state.",
    )
    parser.add_argument("--source", action="store_true", help="the packages' sources")
    parser.add_argument("suite", help="Debian's suite: bookworm, trixie, sid, ...")
    parser.add_argument("arch", help="dpkg's architecture: amd64, arm64, ...")
    parser.add_argument("into", type=Path, help="the directory the files go to")
    parser.add_argument("packages", nargs="+", metavar="package")
    args = parser.parse_args(argv)
    try:
        apt_download(args.suite, args.arch, args.packages, args.into, source=args.source)
    except AptError as error:
        print(f"debian_packages.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
