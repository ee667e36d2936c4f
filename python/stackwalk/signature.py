"""Crash signatures, the way crash-processing services group crashes (Socorro's rules, which
its ``siggen`` library publishes, are the model, and its answers ours: the same signature of
the same frames, on real names, but where docs/triage.md says why not): the crashing thread is
walked from frame 0; the frames of the error machinery (``abort``, ``raise``, ``__assert_fail``,
``std::terminate``, ...) are skipped, as is a frame that is an address alone; "prefix" frames
(allocators, ``memcpy``, ``strlen``, locks, ...) are joined, with `` | ``, to the first frame
that is not one; names are normalized as siggen normalizes them (no parameters, template
arguments collapsed to ``<T>`` but a Rust trait impl's ``<Type as Trait>``, no return type);
glibc's per-CPU variants are named by their function (``memmove``); a frame without a name is
``module@0xoffset``, or its library alone where the lists name the library (``libc.so.6``, a
prefix).

The lists are regular expressions in a TOML file (``signature_rules.toml`` beside this module);
a user's file (``--rules``) adds to them, or replaces them with ``replace = true``.

Each signature also gets a bucket id (a hash of the signature) and a fingerprint (a hash of the
first frames that are not error machinery, as Sentry groups by its top frames).

A stack with Python frames (a CPython process's, ``Core.to_dict(python="mixed")``: each native
eval call followed by the Python frames it runs) is signed by its native crash site and the
Python code that called into it: the native frames up to the first Python frame are walked as
above, with the interpreter's frames that only carry calls (``_PyEval_EvalFrameDefault``,
``PyObject_Vectorcall``, ``slot_tp_call``, ...: the ``interpreter`` list) skipped too; then the
walk goes on to the Python frames (the native frames between them left out), each named
``module.qualname`` (``python_frame_name``), the standard library's joined to their caller as
prefixes are, up to the first one that is not one: ``strlen | string_at | ctypes.string_at |
app.parse``. A stack without Python frames is signed as it always was."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from stackwalk._files import read_input
from stackwalk.errors import StackwalkError

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

DEFAULT_RULES = os.path.join(os.path.dirname(__file__), "signature_rules.toml")

# Frames looked at, at most (inline frames count as frames).
MAX_FRAMES = 40
# Signatures are cut at this length, as Socorro's are.
MAX_LENGTH = 255
# Frames in a fingerprint.
FINGERPRINT_FRAMES = 5
SEPARATOR = " | "

_LISTS = ("irrelevant", "prefix", "sentinels", "families", "interpreter")


class Rules:
    """The signature rules: lists of regular expressions matched at the start of a normalized
    frame name (a frame must match whole: ``abort`` is not ``abort_handler``): ``irrelevant``,
    ``prefix``, ``sentinels`` (of every frame, native or Python: a Python frame's name is
    ``module.qualname``), ``interpreter`` (native frames skipped where a stack has Python
    frames); and ``families``, patterns matched against a whole name whose group ``family``
    names the function a variant is one of (``memmove`` for glibc's
    ``__memmove_avx_unaligned_erms``)."""

    def __init__(self, lists: Mapping[str, Sequence[str]]) -> None:
        self.lists = {name: tuple(lists.get(name, ())) for name in _LISTS}
        self.irrelevant = _alternation(self.lists["irrelevant"])
        self.prefix = _alternation(self.lists["prefix"])
        self.sentinels = _alternation(self.lists["sentinels"])
        self.interpreter = _alternation(self.lists["interpreter"])
        self._families = tuple(re.compile(p) for p in self.lists["families"])
        self._family_of: dict[str, str] = {}

    def family(self, name: str) -> str:
        """The function ``name`` is a variant of (by the first of ``families`` that matches it
        whole), else ``name``."""
        family = self._family_of.get(name)
        if family is None:
            family = next(
                (m.group("family") for p in self._families if (m := p.fullmatch(name))), name
            )
            if len(self._family_of) < 1 << 16:
                self._family_of[name] = family
        return family

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> Rules:
        """The default rules, with a user's file's lists added (or in their place, when it says
        ``replace = true``)."""
        lists = {name: list(values) for name, values in _read_rules(DEFAULT_RULES).items()}
        if path is not None:
            theirs = _read_rules(path)
            if theirs.pop("replace", False):
                lists = {name: [] for name in _LISTS}
            for name, values in theirs.items():
                lists.setdefault(name, []).extend(values)
        return cls(lists)


def _alternation(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """One pattern for a list, matched at the start of a name (as siggen's lists are: ``arena_``
    is every name that begins so; ``abort$`` is ``abort`` alone)."""
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None


# The most a rules file may be: 1 MiB (the default rules are some 8 KB).
MAX_RULES_SIZE = 1 << 20


def _read_rules(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A rules file's lists, checked. It must be a regular file (a FIFO is refused, never
    waited on; a device is refused, never read) of at most MAX_RULES_SIZE bytes."""
    data = read_input(os.fspath(path), MAX_RULES_SIZE, "rules ")
    try:
        doc = tomllib.loads(data.decode())
    except UnicodeDecodeError as e:
        raise StackwalkError(f"rules {os.fspath(path)}: not UTF-8 text ({e.reason} at byte "
                             f"{e.start})") from None  # fmt: skip
    except tomllib.TOMLDecodeError as e:
        raise StackwalkError(f"rules {os.fspath(path)}: {e}") from None
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "replace" and isinstance(value, bool):
            out[key] = value
            continue
        if key not in _LISTS:
            known = ", ".join((*_LISTS, "replace"))
            raise StackwalkError(f"rules {os.fspath(path)}: unknown key {key!r} (known: {known})")
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise StackwalkError(f"rules {os.fspath(path)}: {key} must be a list of strings")
        for pattern in value:
            try:
                compiled = re.compile(pattern)
            except re.error as e:
                raise StackwalkError(
                    f"rules {os.fspath(path)}: {key}: bad pattern {pattern!r}: {e}"
                ) from None
            if key == "families" and "family" not in compiled.groupindex:
                raise StackwalkError(
                    f"rules {os.fspath(path)}: families: pattern {pattern!r} has no group"
                    " (?P<family>...)"
                )
        out[key] = value
    return out


# -- names ----------------------------------------------------------------------------------
#
# A function's name is normalized as siggen's CSignatureTool normalizes it (the same answers on
# real C, C++, Rust and MSVC names: tests/test_signature_siggen.py), in these steps:
#
# 1. a method's cv- and ref-qualifiers (``const``, ``const &``, ``&&``, ``&``, ``volatile``)
#    go, each a word of its own after the parameter list, and before ``[clone ...]`` notes too;
# 2. unless the name is an operator of a class or namespace (``ns::operator<<``), what comes
#    before its last word goes: a return type, ``static``, ``virtual`` (a word is what lies
#    between spaces outside brackets: ``()``, ``<>``, ``[]``, ``{}`` and MSVC's `` `...' ``;
#    a parameter list or ``[clone ...]`` note written after a space belongs to the word before);
# 3. MSVC's `` `anonymous namespace' `` is written ``(anonymous namespace)``, clang's lambda
#    numbers (``::$_3::``) go;
# 4. template arguments become ``<T>``, except a Rust trait impl's ``<Type as Trait>`` (and a
#    few of siggen's other exceptions); parameter lists go, but for an ``operator()``'s own and
#    ``(anonymous namespace)``;
# 5. ``[clone ...]`` notes go where one of them is ``.cold`` (the cold part of a function is the
#    function), and stay otherwise (``[clone .isra.0]``, ``[clone .warm]``), as do raw suffixes
#    (``foo.cold``, Rust's ``.llvm.123``): siggen keeps them;
# 6. spaces before ``*``, ``&`` and ``,`` go, a comma is followed by a space, runs of white
#    space are one space, and a Rust legacy hash (``::h`` and 16 hex digits) goes.
#
# siggen's rules are followed letter for letter (its reading of ``operator<<`` as a template's
# ``<``, which gives ``ns::operator<T>``, too), but for a few of its outcomes (docs/triage.md,
# "Where stackwalk's signatures differ from siggen's"): a qualifier is dropped only as a word of
# its own (siggen reads ``is_const`` as ``is_`` and a qualifier ``const``), and also before a clone
# note, and ``volatile`` too (siggen names ``f() const [clone .cold]`` ``const`` and
# ``f() volatile`` ``volatile``); a Rust trait impl is kept whether or not the frame has a
# ``.rs`` source file (siggen keeps it only when it has one); and a Rust hash is ``::h`` and
# exactly 16 hex digits (siggen drops ``::head``).

# Brackets, as the words of a name are told apart (MSVC quotes its special names: `` `vftable' ``).
_PAIRS = {"(": ")", "<": ">", "[": "]", "{": "}", "`": "'"}
# siggen's order: "const" is tried before "const &", "&&" before "&", each once; "volatile",
# which siggen keeps (and then takes for the name), first.
_QUALIFIERS = ("volatile", "const", "const&", "const &", "&&", "&")
_CLONE_NOTES = re.compile(r"(?:\s*\[clone [^\]]*\])+\s*\Z")
_LAMBDA_NUMBER = re.compile(r"::\$_\d+::")
_SPACE_BEFORE = re.compile(r" (?=[*&,])")
_COMMA = re.compile(r",(?! )")
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}\Z")
# Where template arguments and parameter lists are kept: a group that follows one of these, or
# holds one ("<unknown in foo.dll>", "<Foo as core::fmt::Display>", "(anonymous namespace)").
_KEEP_TEMPLATE = ("name omitted", "IPC::ParamTraits", " in ", " as ")
_KEEP_PARAMETERS = ("anonymous namespace", "operator")


def _without_qualifiers(name: str) -> str:
    """``name`` without a method's trailing cv- and ref-qualifiers, each a word of its own,
    after a parameter list or a space (``is_const`` keeps its ``const``, ``operator&&`` its
    ``&&``), and before clone notes too."""
    notes = _CLONE_NOTES.search(name)
    tail = notes.group() if notes else ""
    head = name[: len(name) - len(tail)]
    for qualifier in _QUALIFIERS:
        rest = head[: -len(qualifier)]
        if head.endswith(qualifier) and (not rest or rest[-1] in " )"):
            head = rest.strip()
    return head + tail


def _last_word(name: str) -> str:
    """The last word of ``name`` (step 2 above): ``ns::f(int, char)`` of ``static int
    ns::f(int, char)``; ``f(int) [clone .isra.0]`` of ``void f(int) [clone .isra.0]``."""
    words: list[str] = []
    start = 0
    closers: list[str] = []
    for i, c in enumerate(name):
        if c in _PAIRS:
            closers.append(_PAIRS[c])
        elif closers and c == closers[-1]:
            closers.pop()
        elif c == " " and not closers:
            words.append(name[start:i])
            start = i + 1
    if start < len(name):
        words.append(name[start:])
    while len(words) > 1 and words[-1].startswith(("(", "[clone")):
        words[-2:] = [f"{words[-2]} {words[-1]}"]
    return words[-1] if words else ""


def _collapse(name: str, opener: str, closer: str, replacement: str, keep: tuple[str, ...]) -> str:
    """``name`` with each outermost ``opener``...``closer`` group replaced, but for a group that
    follows one of ``keep`` or holds one (as siggen reads it: or whose text before its closer
    ends with one); a group that never closes is one to the end."""
    out: list[str] = []
    depth = 0
    start = 0
    for i, c in enumerate(name):
        if not depth:
            if c == opener and not name.endswith(keep, 0, i):
                depth, start = 1, i
            else:
                out.append(c)
        elif c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if not depth:
                group = name[start : i + 1]
                kept = name.endswith(keep, 0, i) or any(k in group for k in keep)
                out.append(group if kept else replacement)
    if depth:
        group = name[start:]
        kept = name.endswith(keep, 0, len(name) - 1) or any(k in group for k in keep)
        out.append(group if kept else replacement)
    return "".join(out)


@functools.lru_cache(maxsize=1 << 16)  # crashes name the same functions again and again
def normalize_function(function: str) -> str:
    """A function's name as a signature shows it (the steps above): ``ns::Class<T>::method``
    for ``int ns::Class<std::vector<int> >::method(char const*) const``,
    ``<String as core::fmt::Display>::fmt`` for itself."""
    name = _without_qualifiers(function)
    if "::operator" not in name:
        name = _last_word(name)
    name = name.replace("`anonymous namespace'", "(anonymous namespace)")
    name = _LAMBDA_NUMBER.sub("::$::", name)
    name = _collapse(name, "<", ">", "<T>", _KEEP_TEMPLATE)
    name = _collapse(name, "(", ")", "", _KEEP_PARAMETERS)
    if "clone .cold" in name:
        name = _collapse(name, "[", "]", "", ())
    name = _COMMA.sub(", ", _SPACE_BEFORE.sub("", name))
    return _RUST_HASH.sub("", " ".join(name.split()))


def frame_name(frame: Mapping[str, Any]) -> str:
    """One frame of ``stackwalk``'s JSON as a signature names it: its function, normalized;
    else ``file#line``; else ``module@0xoffset``; else ``@0xpc``."""
    function = frame.get("function")
    if function:
        return normalize_function(function)
    file, line = frame.get("file"), frame.get("line")
    if file and line:
        return f"{_basename(file)}#{line}"
    module, offset = frame.get("module"), frame.get("module_offset")
    if module:
        name = _basename(module.strip("[]")) or module
        return f"{name}@{_hex(offset)}" if offset is not None else name
    pc = frame.get("pc")
    return f"@{_hex(pc)}" if pc is not None else ""


# Where a Python file's module name can be read from its path: under a site-packages or
# dist-packages directory (a third party's), else under the standard library's lib/python3.X
# (its own: /usr/lib/python3.11/json/decoder.py is json.decoder).
_PACKAGES = re.compile(r"(?:^|[/\\])(?:site|dist)-packages[/\\](?P<path>.+)\Z")
_STDLIB = re.compile(r"(?:^|[/\\])lib(?:64)?[/\\]python3\.\d+t?[/\\](?P<path>.+)\Z")
_FROZEN = re.compile(r"<frozen (?P<module>[\w.]+)>\Z")
_SOURCE_SUFFIX = re.compile(r"\.py[cw]?\Z")


@functools.lru_cache(maxsize=1 << 12)
def python_module(file: str) -> tuple[str, bool]:
    """The module a Python frame's file is, as a signature names it, and whether it is the
    standard library's: the dotted path under ``site-packages``/``dist-packages``
    (``numpy.core._methods``, a third party's) or under ``lib/python3.X/`` (``json.decoder``,
    ``ctypes`` for ``ctypes/__init__.py``: the standard library's), a frozen module's name
    (``<frozen runpy>``: ``runpy``, the standard library's); else the file's name without
    ``.py`` (a package's ``__init__.py``: its directory's name), whatever directory the program
    is installed in; a file that is no path (``<string>``) as it is."""
    if m := _FROZEN.match(file):
        return m["module"], True
    if file.startswith("<"):
        return file, False
    if m := _PACKAGES.search(file):
        path, stdlib, dotted = m["path"], False, True
    elif m := _STDLIB.search(file):
        path, stdlib, dotted = m["path"], True, True
    else:
        path, stdlib, dotted = file, False, False
    parts = [p for p in re.split(r"[/\\]", _SOURCE_SUFFIX.sub("", path)) if p]
    if len(parts) > 1 and parts[-1] == "__init__":
        parts.pop()
    if not dotted:
        parts = parts[-1:]  # the file's (package's) name, wherever the program is installed
    return ".".join(parts) or file or "?", stdlib


def python_frame_name(frame: Mapping[str, Any]) -> str:
    """A Python frame as a signature names it: ``module.qualname`` (``python_module``; the
    code's ``co_qualname``, ``Class.method``, ``outer.<locals>.inner``; CPython 3.10's code has
    none, and gives ``co_name``): ``ctypes.string_at``, ``app.Page.render``."""
    module, _ = python_module(frame.get("file") or "")
    return f"{module}.{frame.get('qualname') or frame.get('function') or '?'}"


def _basename(path: str) -> str:
    """The last part of a path, Windows' (a minidump's) or POSIX's."""
    path = path.rstrip("/\\")
    return path.rsplit("\\" if "\\" in path else "/", 1)[-1]


def _hex(value: Any) -> str:
    number = int(value, 16) if isinstance(value, str) else int(value)
    return f"{number:#x}"


# -- signatures -----------------------------------------------------------------------------


class Signature:
    """A crash's signature, its bucket id and fingerprint, and the frame names they came from."""

    __slots__ = ("text", "bucket", "fingerprint", "names")

    def __init__(self, text: str, fingerprint: str, names: Sequence[str]) -> None:
        self.text = text
        self.bucket = bucket_id(text)
        self.fingerprint = fingerprint
        self.names = tuple(names)

    def __repr__(self) -> str:
        return f"Signature({self.text!r}, bucket={self.bucket})"


def bucket_id(text: str) -> str:
    """A stable id of a signature: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


# What a compiler adds to a function's name for a part or a copy of it: a note (GCC's
# "[clone .isra.0]" as demanglers write it) or a raw suffix (".cold", ".constprop.0", LLVM's
# ".llvm.1234"). A name keeps it, as siggen's does, but the lists match with or without it:
# "abort$" is "abort.cold" too.
_CLONE = re.compile(
    r"(?:\s*\[clone [^\]]*\]|\.(?:cold|warm|isra|part|constprop|lto_priv|localalias|llvm)"
    r"(?:\.\d+)*)+\Z"
)


def _matches(pattern: re.Pattern[str] | None, name: str) -> bool:
    if pattern is None:
        return False
    return pattern.match(name) is not None or pattern.match(_CLONE.sub("", name)) is not None


def signature(
    frames: Iterable[Mapping[str, Any]] | None, rules: Rules | None = None, crashed: bool = True
) -> Signature:
    """The signature of a crashing thread's ``frames`` (``stackwalk``'s JSON frames, frame 0
    first, inline frames as frames of their own; with Python frames among them, ``kind``
    "python", a mixed stack's: see the module's docstring). ``crashed``: False when no thread
    crashed."""
    rules = rules if rules is not None else default_rules()
    if frames is None or not crashed:
        return Signature("EMPTY: no crashing thread identified", bucket_id(""), ())
    frames = list(frames)
    if any(f.get("kind") == "python" for f in frames):
        return _mixed_signature(frames, rules)
    names, irrelevant = _native_names(frames, rules)
    start = next((i for i, n in enumerate(names) if _matches(rules.sentinels, n)), 0)
    parts: list[str] = []
    for name, skip in zip(names[start:], irrelevant[start:], strict=True):
        if not name or skip or (parts and name == parts[-1] and _repeats(name)):
            continue
        parts.append(name)
        if not _matches(rules.prefix, name):
            break
    text = _text(parts, names)
    top = [n for n, skip in zip(names[start:], irrelevant[start:], strict=True) if n and not skip]
    return Signature(text, _fingerprint(top[:FINGERPRINT_FRAMES]), names)


def _native_names(
    frames: Iterable[Mapping[str, Any]], rules: Rules
) -> tuple[list[str], list[bool]]:
    """The names of native frames (the first MAX_FRAMES), and whether each is error machinery
    (``irrelevant``)."""
    names: list[str] = []
    modules: list[str | None] = []
    named: list[bool] = []
    for frame in frames:
        if len(names) == MAX_FRAMES:
            break
        name = frame_name(frame)
        module = frame.get("module")
        if frame.get("function"):
            name = rules.family(name)
        elif module and "@" in name:
            # A frame without a name in a library the lists name (libc.so.6, a prefix) is named
            # by its library alone, as siggen names every such frame: a libc frame is joined to
            # its caller whichever of libc's functions (and whichever libc's build) it is.
            library = name.rpartition("@")[0]
            if _matches(rules.prefix, library) or _matches(rules.irrelevant, library):
                name = library
        names.append(name)
        modules.append(module)
        named.append(bool(frame.get("function")))
    irrelevant = [_matches(rules.irrelevant, n) for n in names]
    # A frame without a name whose module's next named frame (toward the callers) is error
    # machinery is a part of it: the unexported functions of std::terminate, of the unwinder.
    for i in range(len(names) - 2, -1, -1):
        if not named[i] and modules[i] is not None and modules[i + 1] == modules[i]:
            irrelevant[i] = irrelevant[i + 1]
    return names, irrelevant


def _text(parts: Sequence[str], names: Sequence[str]) -> str:
    """A signature's text of its ``parts``, cut at MAX_LENGTH; of the first of ``names`` when
    there are none."""
    # White space as siggen leaves it: runs of it one space (a file name may hold any).
    text = " ".join(SEPARATOR.join(parts).split())
    if not text:
        # Every frame was error machinery (or there were none): the first one names it.
        text = next((n for n in names if n), "EMPTY: no frame data available")
    if len(text) > MAX_LENGTH:
        text = text[: MAX_LENGTH - 3] + "..."
    return text


def _fingerprint(names: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


def _mixed_signature(frames: Sequence[Mapping[str, Any]], rules: Rules) -> Signature:
    """The signature of a stack with Python frames: its native crash site, and the Python code
    that called into it.

    The native frames up to the first Python frame (the crash's native part) are walked as a
    native stack is, the interpreter's frames that only carry calls skipped with the error
    machinery (but where nothing else is left of the native part, the interpreter crashed in
    its own call machinery: the first of them names it); the native part also ends where it
    runs out of frames after prefixes, so that ``memcpy`` called by the eval loop is ``memcpy |
    app.copy``. Then the Python frames (the native frames between them left out; the first
    MAX_FRAMES looked at), named by ``python_frame_name``: those the ``irrelevant`` list names
    are skipped, the standard library's and those the ``prefix`` list names are joined to their
    caller, up to the first that is neither. The fingerprint is of the first FINGERPRINT_FRAMES
    native frames that are not skipped, and as many Python frames."""
    first = next(i for i, f in enumerate(frames) if f.get("kind") == "python")
    native, irrelevant = _native_names(frames[:first], rules)
    carriers = [
        not skip and _matches(rules.interpreter, n)
        for n, skip in zip(native, irrelevant, strict=True)
    ]
    python: list[str] = []
    joined: list[bool] = []  # the standard library's, or a prefix
    skipped: list[bool] = []
    for f in frames[first:]:
        if f.get("kind") != "python":
            continue
        if len(python) == MAX_FRAMES:
            break
        name = python_frame_name(f)
        python.append(name)
        joined.append(python_module(f.get("file") or "")[1] or _matches(rules.prefix, name))
        skipped.append(_matches(rules.irrelevant, name))
    names = native + python
    start = next((i for i, n in enumerate(names) if _matches(rules.sentinels, n)), 0)
    # (name, skipped, joined to its caller) of each frame walked: the native part's, the Python
    # frames'; a sentinel among the Python frames leaves the native part out.
    native_walk = [
        (n, skip or carrier, _matches(rules.prefix, n))
        for n, skip, carrier in zip(native, irrelevant, carriers, strict=True)
    ][start:]
    python_walk = list(zip(python, skipped, joined, strict=True))[max(0, start - len(native)) :]
    parts: list[str] = []
    for name, skip, prefix in native_walk:
        if not name or skip or (parts and name == parts[-1] and _repeats(name)):
            continue
        parts.append(name)
        if not prefix:
            break
    if not parts:
        # Nothing but error machinery and the interpreter's calls (a crash in the eval loop
        # itself): the first of the interpreter's frames names the native crash site.
        carrier = next((n for n, c in zip(native[start:], carriers[start:], strict=True) if c), "")
        if carrier:
            parts.append(carrier)
    for name, skip, join in python_walk:
        if skip:
            continue
        parts.append(name)
        if not join:
            break
    top = [n for n, skip, _ in native_walk if n and not skip][:FINGERPRINT_FRAMES]
    top += [n for n, skip, _ in python_walk if not skip][:FINGERPRINT_FRAMES]
    return Signature(_text(parts, names), _fingerprint(top), names)


def _repeats(name: str) -> bool:
    """Whether ``name`` is one that, repeated, is said once (siggen's rule): a library named
    alone (the frames of a library without symbols), a name a symbol file left out."""
    return (
        name.lower().endswith((".dll", ".so"))
        or name in ("XUL", "<name omitted>")
        or name.startswith("<unknown in")
    )


_DEFAULT: Rules | None = None


def default_rules() -> Rules:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Rules.load()
    return _DEFAULT
