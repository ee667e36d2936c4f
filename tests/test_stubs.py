"""The type stubs of the native core say what it returns: their ``Literal`` trust levels and
end reasons are exactly the values the Rust enums give at run time."""

from __future__ import annotations

import ast
from pathlib import Path

import stackwalk
from stackwalk import _core

STUBS = Path(stackwalk.__file__).with_name("_core.pyi")


def _literal(name: str) -> tuple[str, ...]:
    """The strings of the stubs' ``name = Literal[...]``."""
    for node in ast.parse(STUBS.read_text()).body:
        if isinstance(node, ast.Assign) and [
            t.id for t in node.targets if isinstance(t, ast.Name)
        ] == [name]:
            assert isinstance(node.value, ast.Subscript)
            values = node.value.slice
            elements = values.elts if isinstance(values, ast.Tuple) else [values]
            return tuple(ast.literal_eval(e) for e in elements)
    raise AssertionError(f"{STUBS} has no {name} = Literal[...]")


def test_trust_levels_are_the_stubs() -> None:
    assert _literal("_Trust") == _core.TRUST_LEVELS
    assert len(set(_core.TRUST_LEVELS)) == len(_core.TRUST_LEVELS)


def test_end_reasons_are_the_stubs() -> None:
    assert _literal("_EndReason") == _core.END_REASONS
    assert len(set(_core.END_REASONS)) == len(_core.END_REASONS)
    assert _core.END_REASONS[:2] == ("end_of_stack", "pc_zero"), "the clean ends first"
