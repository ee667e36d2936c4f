"""argparse's reading of the ``stackwalk`` command line (declared in ``stackwalk._arguments``):
for every command line that ``_arguments.parse_args`` does not read itself, help and errors
included. Importing argparse takes some 10 ms (``re`` and ``enum`` with it), a third of a short
``stackwalk perf``; most command lines never import this module."""

from __future__ import annotations

import argparse
import os
import sys

from stackwalk._arguments import BOOLEAN_OPTIONAL, COMMANDS, DESCRIPTION

# Annotations only (see cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn


class _Version(argparse.Action):
    """--version: Cargo.toml's version, compiled into the extension (maturin gives the
    package's metadata the same; reading that would import importlib.metadata, 38 ms)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        from stackwalk._core import __version__

        print(f"stackwalk {__version__}")
        parser.exit()


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, the terminal's width found without ``shutil`` (argparse
    makes a formatter for every argument added, and shutil's import alone is a few ms of a
    short command's start)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24) -> None:
        try:
            columns = int(os.environ["COLUMNS"])
        except (KeyError, ValueError):
            try:
                columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):  # no stdout, or not a terminal
                columns = 80
        super().__init__(prog, indent_increment, max_help_position, columns - 2)


class _Parser(argparse.ArgumentParser):
    """The command's parser and its subcommands' (argparse makes those of the parser's own
    class), with the formatter above."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        self.register("action", BOOLEAN_OPTIONAL, argparse.BooleanOptionalAction)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command` alone: building the
    others' (argparse looks up a translation of each help string) is a good
    part of a short run's start."""
    p = _Parser(prog="stackwalk", description=DESCRIPTION)
    p.add_argument("--version", action=_Version, help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for name, add in COMMANDS.items():
        if command is None or name == command:
            add(sub)
    return p
