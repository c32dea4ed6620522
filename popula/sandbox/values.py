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
- **nan equals nan**, at any depth (`[nan] == [nan]`, `{'a': nan}`, `{nan}`, `{nan: 1}`): a program that
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


def read_arguments(text: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The (args, kwargs) of the argument list `text` (what goes between the parentheses of
    `f(...)`) when every argument is a value `read_value` accepts; NotAValue otherwise.

    Parsed as the call `f(<text>)`: anything that is not exactly one such call of `f` with
    plain positional and keyword arguments (a closing parenthesis smuggled into the text,
    `*args`, `**kwargs`, a keyword given twice) is not an argument list of values."""
    try:
        tree = compile(f"f(\n{text.strip()}\n)", "<unknown>", "eval", ast.PyCF_ONLY_AST)
        call = tree.body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "f"
                and call.func.col_offset == 0 and call.func.lineno == 1):
            raise NotAValue("not one argument list")
        if any(isinstance(arg, ast.Starred) for arg in call.args):
            raise NotAValue("*arguments are not values")
        kwargs: dict[str, Any] = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                raise NotAValue("**arguments are not values")
            if keyword.arg in kwargs:
                raise NotAValue(f"keyword {keyword.arg!r} is given twice")
            kwargs[keyword.arg] = _build(keyword.value)
        return tuple(_build(arg) for arg in call.args), kwargs
    except NotAValue:
        raise
    except (RecursionError, MemoryError) as err:
        raise NotAValue(f"nested too deeply to read ({type(err).__name__})") from None
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
        if ordered_dicts:
            return all(values_equal(ka, kb) and values_equal(va, vb, True)
                       for (ka, va), (kb, vb) in zip(a.items(), b.items()))
        for key, value in a.items():
            if key in b:
                if not values_equal(value, b[key]):
                    return False
            elif not _holds_nan(key) or not any(values_equal(key, k) and values_equal(value, v)
                                                 for k, v in b.items()):
                return False
        return True
    if ta in (set, frozenset) and tb in (set, frozenset):
        return len(a) == len(b) and (a == b or _match_all(list(a), list(b)))
    try:
        return bool(a == b)
    except Exception:  # an exotic __eq__ (only possible inside a worker) is simply unequal
        return False


def _match_all(a: list[Any], b: list[Any]) -> bool:
    """Whether the members of two sets pair up by values_equal. Python's set equality looks
    members up by hash and identity, so two NaNs (or tuples holding them) never match; only
    sets that hold a NaN get here with different members, and they are small in practice."""
    if not any(map(_holds_nan, a)):
        return False
    left = list(b)
    for x in a:
        for i, y in enumerate(left):
            if values_equal(x, y):
                del left[i]
                break
        else:
            return False
    return True


def _holds_nan(value: Any, depth: int = 0) -> bool:
    """Whether a hashable value is or contains a float NaN (complex parts included)."""
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, complex):
        return math.isnan(value.real) or math.isnan(value.imag)
    if type(value) in (tuple, frozenset) and depth < 100:
        return any(_holds_nan(item, depth + 1) for item in value)
    return False


_ATOMS = frozenset({int, float, str, bytes, bool, type(None)})
_CONTAINERS = frozenset({list, tuple, set, frozenset})


def value_shape(value: Any, limit: int = 1_000_000) -> tuple[str, Any]:
    """One walk over `value` (iterative: depth costs no recursion), saying how its output
    may be written:
    - ("plain", None): exact built-in literal types only, no complex, no container met twice,
      nesting up to 100: its repr reads back as an equal value, guaranteed, so the costly
      read-back check can be skipped;
    - ("check", None): built of built-in value types, but the repr must be read back to be
      trusted (complex: '(nan+nanj)' does not; a shared or cyclic container: '[[...]]';
      deeper nesting);
    - ("foreign", item): `item` is not a built-in value type (a subclass, an object), or the
      value has more than `limit` parts. Then its repr could run the task's code.
    """
    stack, seen, plain = [(value, 0)], set(), True
    while stack:
        limit -= 1
        if limit < 0:
            return "foreign", value
        item, depth = stack.pop()
        kind = type(item)
        if kind in _ATOMS:
            continue
        if kind is complex:
            plain = False
            continue
        if kind in _CONTAINERS or kind is dict:
            if id(item) in seen:
                plain = False
                continue
            seen.add(id(item))
            if depth >= 100:
                plain = False
            parts = [*item.keys(), *item.values()] if kind is dict else item
            stack.extend((part, depth + 1) for part in parts)
            continue
        return "foreign", item
    return ("plain" if plain else "check"), None


def is_plain(value: Any) -> bool:
    """Whether `value`'s repr reads back as an equal value without checking (value_shape)."""
    return value_shape(value)[0] == "plain"


def reprs_equal(a: str, b: str, ordered_dicts: bool = False) -> bool:
    """Whether two output reprs denote equal values (identical text is the fast path)."""
    if a == b:
        return True
    try:
        return values_equal(read_value(a), read_value(b), ordered_dicts)
    except NotAValue:
        return False
