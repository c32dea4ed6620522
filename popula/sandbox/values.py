"""Reading outputs back as values, and comparing values: the judge's notion of "equal".

Outputs travel as repr strings. `read_value` turns one back into a Python value without
`eval`: it accepts only literal syntax (what `ast.literal_eval` accepts) plus the few
reprs of built-in values that are not literals: `nan`, `inf`, `-inf`, `set()`,
`frozenset({...})`. It runs user-controlled text, so it is safe to call anywhere: no
name lookup, no call other than those four constructors, no attribute access.

`values_equal` is Python's `==` with three decisions made explicit:
- **Containers keep their type**: `(1, 2)` is not `[1, 2]` (Python agrees); a list is
  only equal to a list, a tuple to a tuple, a dict to a dict.
- **Numbers compare by value**, as Python does: `1 == 1.0 == True`. Floats are exact
  (no tolerance): the program is deterministic, so its float output is one exact value.
- **nan equals nan**, at any depth (`[nan] == [nan]`, `{'a': nan}`): a program that
  returns nan deterministically has a well-defined output, and a student who predicts
  nan is right. (Python's own `==` says False unless both are the same object.)
- Dict key order is irrelevant (Python agrees); sets compare as Python sets.

Standard library only: worker processes load this file without importing `popula`.
"""

from __future__ import annotations

import _ast as ast  # the node classes and the parser; the `ast` module would add ~1 MB to each sandbox worker
import math
from typing import Any

_CONSTRUCTOR_FLOATS = {"nan", "inf", "-inf", "infinity", "-infinity", "+inf"}


class NotAValue(ValueError):
    """The text is not the repr of a plain built-in value."""


def read_value(text: str) -> Any:
    """The value whose repr is `text`; NotAValue if it is anything else."""
    try:
        tree = compile(text.strip(), "<unknown>", "eval", ast.PyCF_ONLY_AST)  # what ast.parse does
        return _build(tree.body)
    except NotAValue:
        raise
    except (RecursionError, MemoryError) as err:  # CPython's bare answer to deep nesting: name its limits
        raise NotAValue(f"nested too deeply to read ({type(err).__name__}): at most about 3000 nested operators "
                        "and 200 nested brackets") from None
    except (SyntaxError, ValueError, TypeError, OverflowError) as err:
        raise NotAValue(f"{type(err).__name__}: {err}") from None


def _build(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List):
        return [_build(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_build(e) for e in node.elts)
    if isinstance(node, ast.Set):
        return {_build(e) for e in node.elts}
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise NotAValue("dict unpacking is not a value")
        return {_build(k): _build(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _build(node.operand)
        if not _is_number(operand):
            raise NotAValue("a sign applies only to a number")
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        # complex reprs: (1+2j), (-0-1j)
        left, right = _build(node.left), _build(node.right)
        if not (_is_real(left) and isinstance(right, complex)):
            raise NotAValue("only complex literals may use + or -")
        return left + right if isinstance(node.op, ast.Add) else left - right
    if isinstance(node, ast.Name) and node.id in ("nan", "inf"):
        return float(node.id)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        name, args = node.func.id, node.args
        if name == "set" and not args:
            return set()
        if name == "frozenset" and len(args) <= 1:
            return frozenset(_build(args[0])) if args else frozenset()
        if (
            name == "float"
            and len(args) == 1
            and isinstance(args[0], ast.Constant)
            and isinstance(args[0].value, str)
            and args[0].value.strip().lower() in _CONSTRUCTOR_FLOATS
        ):
            return float(args[0].value)
    raise NotAValue(f"{type(node).__name__} is not part of a value literal")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, complex))


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float))


def values_equal(a: Any, b: Any, ordered_dicts: bool = False) -> bool:
    """Equality of two built-in values as documented above (never by string).

    ordered_dicts: dicts must also list their keys in the same order. The determinism
    check uses it: a dict built from a set of strings has a seed-dependent key order,
    which CPython shows in its repr and iteration even though the dicts are equal."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, complex) and isinstance(b, complex):
        return values_equal(a.real, b.real) and values_equal(a.imag, b.imag)
    ta, tb = type(a), type(b)
    if ta in (list, tuple) or tb in (list, tuple):
        return ta is tb and len(a) == len(b) and all(values_equal(x, y, ordered_dicts) for x, y in zip(a, b))
    if ta is dict or tb is dict:
        if ta is not tb or len(a) != len(b):
            return False
        if ordered_dicts and list(a) != list(b):
            return False
        for key, value in a.items():
            if key not in b or not values_equal(value, b[key], ordered_dicts):
                return False
        return True
    try:
        return bool(a == b)
    except Exception:  # an exotic __eq__ (only possible inside a worker) is simply unequal
        return False


_ATOMS = frozenset({int, float, str, bytes, bool, type(None)})
_CONTAINERS = frozenset({list, tuple, set, frozenset})


def is_plain(value: Any, depth: int = 0) -> bool:
    """True if `value` is built only of exact built-in literal types (no subclasses, no
    cycles, nesting under 100): then its repr reads back as an equal value, guaranteed,
    and the costly read-back check can be skipped. False means "check the slow way"."""
    kind = type(value)
    if kind in _ATOMS:
        return True
    if depth > 100:
        return False
    if kind in _CONTAINERS:
        return all(is_plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(is_plain(k, depth + 1) and is_plain(v, depth + 1) for k, v in value.items())
    return False


def reprs_equal(a: str, b: str, ordered_dicts: bool = False) -> bool:
    """Whether two output reprs denote equal values (identical text is the fast path)."""
    if a == b:
        return True
    try:
        return values_equal(read_value(a), read_value(b), ordered_dicts)
    except NotAValue:
        return False
