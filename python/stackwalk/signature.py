"""Crash signatures, the way crash-processing services group crashes (Socorro's rules, which
its ``siggen`` library publishes, are the model): the crashing thread is walked from frame 0;
the frames of the error machinery (``abort``, ``raise``, ``__assert_fail``, ``std::terminate``,
...) are skipped; "prefix" frames (allocators, ``memcpy``, ``strlen``, locks, ...) are joined,
with `` | ``, to the first frame that is not one; names are normalized (no parameters, template
arguments collapsed to ``<T>``, no offsets); a frame without a name is ``module@0xoffset``.

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

_LISTS = ("irrelevant", "prefix", "sentinels")


class Rules:
    """The signature rules: the three lists, each of regular expressions matched at the start of
    a normalized frame name (a frame must match whole: ``abort`` is not ``abort_handler``)."""

    def __init__(self, lists: Mapping[str, Sequence[str]]) -> None:
        self.lists = {name: tuple(lists.get(name, ())) for name in _LISTS}
        self.irrelevant = _alternation(self.lists["irrelevant"])
        self.prefix = _alternation(self.lists["prefix"])
        self.sentinels = _alternation(self.lists["sentinels"])

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
                lists[name].extend(values)
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
                re.compile(pattern)
            except re.error as e:
                raise StackwalkError(
                    f"rules {os.fspath(path)}: {key}: bad pattern {pattern!r}: {e}"
                ) from None
        out[key] = value
    return out


# -- names ----------------------------------------------------------------------------------

_OPEN = {"(": ")", "<": ">", "[": "]", "{": "}"}
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}\Z")
_LAMBDA_NUMBER = re.compile(r"::\$_\d+::")
_SPACE_BEFORE = re.compile(r"\s+([*&,])")
_COMMA = re.compile(r",(?=\S)")
_PLACEHOLDER = re.compile("\0(\\d+)\0")
# A clone's suffix (".cold", ".isra.0", ".part.1", ".constprop.0") is the same function.
_CLONE_SUFFIX = re.compile(r"(?:\.(?:cold|isra|part|constprop|lto_priv|localalias)(?:\.\d+)?)+\Z")
_CLONE_NOTE = re.compile(r"\s*\[clone [^\]]*\]")


# An operator's own characters are part of its name, not brackets: ``operator<``,
# ``operator()``, ``operator->``, ``operator new[]``.
_OPERATOR = re.compile(
    r"operator\s*(?:\(\)|\[\]|<=>|<<=?|>>=?|->\*?|&&|\|\||\+\+|--|[-+*/%^&|~!=<>,]=?"
    r"|(?:new|delete)(?:\s*\[\])?)"
)


def _groups(name: str) -> list[tuple[int, int]]:
    """The (start, end) of every outermost bracketed group of ``name``: ``(...)``, ``<...>``,
    ``[...]``, ``{...}`` (``name``'s operators hidden, see _hide_operators)."""
    groups: list[tuple[int, int]] = []
    stack: list[str] = []
    start = 0
    for i, c in enumerate(name):
        if c in _OPEN:
            if not stack:
                start = i
            stack.append(_OPEN[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                groups.append((start, i + 1))
    return groups


def _hide_operators(name: str) -> tuple[str, list[str]]:
    """``name`` with each operator replaced by a placeholder, and the operators."""
    operators: list[str] = []

    def hide(m: re.Match[str]) -> str:
        operators.append(m.group(0))
        return f"\0{len(operators) - 1}\0"

    return _OPERATOR.sub(hide, name), operators


def _show_operators(name: str, operators: Sequence[str]) -> str:
    return _PLACEHOLDER.sub(lambda m: operators[int(m.group(1))], name)


def _replace_groups(name: str, opener: str, replacement: str, keep: Sequence[str] = ()) -> str:
    out, last = [], 0
    for start, end in _groups(name):
        if name[start] != opener or any(k in name[start:end] for k in keep):
            continue
        out.append(name[last:start])
        out.append(replacement)
        last = end
    out.append(name[last:])
    return "".join(out)


@functools.lru_cache(maxsize=1 << 16)  # crashes name the same functions again and again
def normalize_function(function: str) -> str:
    """A function's name as a signature shows it: ``ns::Class<T>::method`` for
    ``int ns::Class<std::vector<int> >::method(char const*) const``; a Rust name loses its hash."""
    name = _RUST_HASH.sub("", function.strip())
    name = _CLONE_SUFFIX.sub("", name)
    name = _CLONE_NOTE.sub("", name)
    for qualifier in (" const", " volatile", " &&", " &", " noexcept"):
        if name.endswith(qualifier):
            name = name[: -len(qualifier)]
    name, operators = _hide_operators(name)
    # Drop a return type and the like: what comes before the last space outside brackets.
    groups = _groups(name)
    spaces = [i for i, c in enumerate(name) if c == " " and not any(s < i < e for s, e in groups)]
    if spaces:
        name = name[spaces[-1] + 1 :]
    name = name.replace("`anonymous namespace'", "(anonymous namespace)")
    name = _LAMBDA_NUMBER.sub("::$::", name)
    name = _replace_groups(name, "<", "<T>")
    name = _replace_groups(name, "(", "", keep=("anonymous namespace",))
    name = _SPACE_BEFORE.sub(r"\1", name)
    return _show_operators(_COMMA.sub(", ", name), operators).strip()


def frame_name(frame: Mapping[str, Any]) -> str:
    """One frame of ``stackwalk``'s JSON as a signature names it: its function, normalized;
    else ``file#line``; else ``module@0xoffset``; else ``@0xpc``."""
    function = frame.get("function")
    if function:
        return normalize_function(function)
    file, line = frame.get("file"), frame.get("line")
    if file and line:
        return f"{os.path.basename(file)}#{line}"
    module, offset = frame.get("module"), frame.get("module_offset")
    if module:
        name = os.path.basename(module.strip("[]")) or module
        return f"{name}@{_hex(offset)}" if offset is not None else name
    pc = frame.get("pc")
    return f"@{_hex(pc)}" if pc is not None else ""


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


def _matches(pattern: re.Pattern[str] | None, name: str) -> bool:
    return pattern is not None and pattern.match(name) is not None


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
        names.append(frame_name(frame))
        modules.append(frame.get("module"))
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
        if not name or skip:
            continue
        parts.append(name)
        if not _matches(rules.prefix, name):
            break
    text = SEPARATOR.join(parts)
    if not text:
        # Every frame was error machinery (or there were none): the first one names it.
        text = next((n for n in names if n), "EMPTY: no frame data available")
    if len(text) > MAX_LENGTH:
        text = text[: MAX_LENGTH - 3] + "..."
    top = [n for n, skip in zip(names[start:], irrelevant[start:], strict=True) if n and not skip]
    fingerprint = hashlib.sha256("\n".join(top[:FINGERPRINT_FRAMES]).encode()).hexdigest()[:16]
    return Signature(text, fingerprint, names)


_DEFAULT: Rules | None = None


def default_rules() -> Rules:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Rules.load()
    return _DEFAULT
