"""Crash signatures, the way crash-processing services group crashes (Socorro's rules, which
its ``siggen`` library publishes, are the model, and its answers ours: the same signature of
the same frames, on real names, but where README.md says why not): the crashing thread is walked
from frame 0; the frames of the error machinery (``abort``, ``raise``, ``__assert_fail``,
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
first frames that are not error machinery, as Sentry groups by its top frames)."""

from __future__ import annotations

import functools
import hashlib
import os
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

DEFAULT_RULES = os.path.join(os.path.dirname(__file__), "signature_rules.toml")

# Frames looked at, at most (inline frames count as frames).
MAX_FRAMES = 40
# Signatures are cut at this length, as Socorro's are.
MAX_LENGTH = 255
# Frames in a fingerprint.
FINGERPRINT_FRAMES = 5
SEPARATOR = " | "

_LISTS = ("irrelevant", "prefix", "sentinels", "families")


class Rules:
    """The signature rules: three lists of regular expressions matched at the start of a
    normalized frame name (a frame must match whole: ``abort`` is not ``abort_handler``), and
    ``families``, patterns matched against a whole name whose group ``family`` names the
    function a variant is one of (``memmove`` for glibc's ``__memmove_avx_unaligned_erms``)."""

    def __init__(self, lists: Mapping[str, Sequence[str]]) -> None:
        self.lists = {name: tuple(lists.get(name, ())) for name in _LISTS}
        self.irrelevant = _alternation(self.lists["irrelevant"])
        self.prefix = _alternation(self.lists["prefix"])
        self.sentinels = _alternation(self.lists["sentinels"])
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


def _read_rules(path: str | os.PathLike[str]) -> dict[str, Any]:
    import tomllib

    from stackwalk.errors import StackwalkError

    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise StackwalkError(f"rules {os.fspath(path)}: {e.strerror or e}") from None
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
# ``<``, which gives ``ns::operator<T>``, too), but for a few of its outcomes (README.md, "Where
# stackwalk's signatures differ from siggen's"): a qualifier is dropped only as a word of its
# own (siggen reads ``is_const`` as ``is_`` and a qualifier ``const``), and also before a clone
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
    first, inline frames as frames of their own). ``crashed``: False when no thread crashed."""
    rules = rules if rules is not None else default_rules()
    if frames is None or not crashed:
        return Signature("EMPTY: no crashing thread identified", bucket_id(""), ())
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
    start = next((i for i, n in enumerate(names) if _matches(rules.sentinels, n)), 0)
    parts: list[str] = []
    for name, skip in zip(names[start:], irrelevant[start:], strict=True):
        if not name or skip or (parts and name == parts[-1] and _repeats(name)):
            continue
        parts.append(name)
        if not _matches(rules.prefix, name):
            break
    # White space as siggen leaves it: runs of it one space (a file name may hold any).
    text = " ".join(SEPARATOR.join(parts).split())
    if not text:
        # Every frame was error machinery (or there were none): the first one names it.
        text = next((n for n in names if n), "EMPTY: no frame data available")
    if len(text) > MAX_LENGTH:
        text = text[: MAX_LENGTH - 3] + "..."
    top = [n for n, skip in zip(names[start:], irrelevant[start:], strict=True) if n and not skip]
    fingerprint = hashlib.sha256("\n".join(top[:FINGERPRINT_FRAMES]).encode()).hexdigest()[:16]
    return Signature(text, fingerprint, names)


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
