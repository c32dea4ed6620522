"""Reading outputs back as values, and comparing values: the judge's notion of "equal".

Outputs travel as repr strings. `read_value` turns one back into a Python value without
`eval`: it accepts only literal syntax (what `ast.literal_eval` accepts) plus the reprs of
the few values that are not literals: `nan`, `inf`, `-inf`, `set()`, `frozenset({...})`,
`bytearray(b'...')`, `range(0, 3)`, `Fraction(1, 2)`, datetime's `datetime.date(2020, 1, 4)`
(and its datetime, time, timedelta and timezone) and a named tuple's `P(x=1, y=2)` (read as
a NamedTupleValue: a tuple that keeps its class and field names for its repr). It
runs user-controlled text, so it is safe to call anywhere: no name lookup, no attribute
access, no call other than building those values from literals.

`values_equal` is CPython's `==`, with two decisions made explicit:
- **nan equals nan**, at any depth (`[nan] == [nan]`, `{'a': nan}`, `{nan}`, `{nan: 1}`): a program that
  returns nan deterministically has a well-defined output, and a student who predicts
  nan is right. (Python's own `==` says False unless both are the same object.) Sets and
  dict keys holding NaNs are paired one to one: `{nan: 1, nan: 2}` is not `{nan: 1, nan: 1}`.
- Nothing else is loosened or tightened: a student's answer is right exactly when
  `f(input) == answer` holds in CPython (what CRUXEval checks). So a list is not a tuple,
  numbers compare by value (`1 == 1.0 == True`, `Fraction(1, 2) == 0.5`), a set equals the
  frozenset of the same members, a named tuple equals the plain tuple of its items,
  `bytearray(b'a') == b'a'`, ranges compare as sequences (`range(0) == range(2, 2)`), dict key
  order is irrelevant. Floats are exact (no tolerance): the program is deterministic, so its
  float output is one exact value.

Standard library only: worker processes load this file without importing `popula`.
"""

from __future__ import annotations

import _ast as ast  # the node classes and the parser; the `ast` module would add ~1 MB to each sandbox worker
import collections
import datetime
import math
import types
from fractions import Fraction
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
    `*args`, `**kwargs`, a keyword given twice) is not an argument list of values. The
    arguments travel to a worker by marshal, so each is built of literal types only: the
    reprs that read back as other values (Fraction, range, a named tuple, ...) are refused."""
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
        args = tuple(_build(arg) for arg in call.args)
        if not all(map(_is_literal, (*args, *kwargs.values()))):
            raise NotAValue("an argument is a literal value: no Fraction, range, bytearray, datetime or named tuple")
        return args, kwargs
    except NotAValue:
        raise
    except (RecursionError, MemoryError) as err:
        raise NotAValue(f"nested too deeply to read ({type(err).__name__})") from None
    except (SyntaxError, ValueError, TypeError, OverflowError) as err:
        raise NotAValue(f"{type(err).__name__}: {err}") from None


_LITERAL_TYPES = frozenset({int, float, complex, str, bytes, bool, type(None), list, tuple, dict, set, frozenset})


def _is_literal(value: Any) -> bool:
    """Whether a value read by _build is made of literal types alone (what marshal carries)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) not in _LITERAL_TYPES:
            return False
        if type(item) is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif type(item) in (list, tuple, set, frozenset):
            stack.extend(item)
    return True


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
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return _build_call(node.func.id, node.args, node.keywords)
    if isinstance(node, ast.Call) and _dotted(node.func) in _DATETIME_TYPES:
        return _build_datetime(_DATETIME_TYPES[_dotted(node.func)], node.args, node.keywords)
    if isinstance(node, ast.Attribute) and _dotted(node) == "datetime.timezone.utc":
        return datetime.timezone.utc
    raise NotAValue(f"{type(node).__name__} is not part of a value literal")


def _build_call(name: str, args: list[ast.AST], keywords: list[ast.keyword]) -> Any:
    """The value of a repr that is a call: a named tuple's `P(x=1)` (keywords only), or one
    of the few constructors whose repr is not a literal, on literal arguments."""
    if keywords or (not args and name not in ("set", "frozenset")):
        if args:
            raise NotAValue("a named tuple's repr has keyword arguments only")
        return _build_named_tuple(name, keywords)
    if name == "set" and not args:
        return set()
    if name == "frozenset" and len(args) <= 1:
        return frozenset(_build(args[0])) if args else frozenset()
    if name == "float" and len(args) == 1 and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str) \
            and args[0].value.strip().lower() in _CONSTRUCTOR_FLOATS:
        return float(args[0].value)
    if name == "bytearray" and len(args) == 1 and isinstance(args[0], ast.Constant) and type(args[0].value) is bytes:
        return bytearray(args[0].value)
    if name == "range" and len(args) in (2, 3):
        return range(*_ints(args))
    if name == "Fraction" and len(args) == 2:
        numerator, denominator = _ints(args)
        if denominator == 0:
            raise NotAValue("a Fraction's denominator is not 0")
        return Fraction(numerator, denominator)
    raise NotAValue(f"{name}(...) is not the repr of a value")


_DATETIME_TYPES = {f"datetime.{kind.__name__}": kind for kind in
                   (datetime.date, datetime.datetime, datetime.time, datetime.timedelta, datetime.timezone)}
# The keywords each datetime type's repr may write (datetime.timedelta(days=3), tzinfo=..., fold=1).
_DATETIME_KEYWORDS = {datetime.timedelta: {"days", "seconds", "microseconds"}, datetime.datetime: {"tzinfo", "fold"},
                      datetime.time: {"tzinfo", "fold"}, datetime.date: set(), datetime.timezone: set()}


def _dotted(node: ast.AST) -> str:
    """'datetime.date' for the expression datetime.date; '' for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _build_datetime(kind: type, args: list[ast.AST], keywords: list[ast.keyword]) -> Any:
    """A datetime value from its repr: int arguments (a timezone's: a timedelta and a name),
    and the keywords its repr writes, tzinfo only ever a datetime.timezone."""
    values = [_build(arg) for arg in args]
    extra = {k.arg: _build(k.value) for k in keywords}
    if None in extra or not set(extra) <= _DATETIME_KEYWORDS[kind]:
        raise NotAValue(f"{kind.__name__} takes no such keyword")
    if kind is datetime.timezone:
        if not (1 <= len(values) <= 2 and type(values[0]) is datetime.timedelta
                and all(type(v) is str for v in values[1:])):
            raise NotAValue("a timezone is written with a timedelta and a name")
    elif not all(type(v) is int for v in [*values, *(v for k, v in extra.items() if k != "tzinfo")]):
        raise NotAValue(f"{kind.__name__} takes int literals")
    if type(extra.get("tzinfo", datetime.timezone.utc)) is not datetime.timezone:
        raise NotAValue("a tzinfo is a datetime.timezone")
    return kind(*values, **extra)


def _ints(args: list[ast.AST]) -> list[int]:
    values = [_build(arg) for arg in args]
    if not all(type(v) is int for v in values):
        raise NotAValue("range and Fraction take int literals")
    return values


def _build_named_tuple(name: str, keywords: list[ast.keyword]) -> "NamedTupleValue":
    fields = tuple(k.arg for k in keywords)
    if None in fields:
        raise NotAValue("**arguments are not values")
    if len(set(fields)) != len(fields):
        raise NotAValue("a named tuple's fields are distinct")
    return NamedTupleValue(name, fields, [_build(k.value) for k in keywords])


class NamedTupleValue(tuple):
    """A named tuple read back from its repr `P(x=1, y=2)`: the tuple of its items, with its
    class name and field names kept for its repr. It compares and hashes as the tuple,
    as CPython's named tuples do (`P(1, 2) == (1, 2)`)."""

    def __new__(cls, name: str, fields: tuple[str, ...], items: Any) -> "NamedTupleValue":
        self = super().__new__(cls, items)
        if len(self) != len(fields):
            raise NotAValue("a named tuple has one item per field")
        self.name, self.fields = name, fields
        return self

    def __repr__(self) -> str:
        return f"{self.name}(" + ", ".join(f"{k}={v!r}" for k, v in zip(self.fields, self)) + ")"

    def __getnewargs__(self) -> tuple[str, tuple[str, ...], tuple[Any, ...]]:
        """What pickle and copy pass to __new__ (a tuple's would be its items alone)."""
        return self.name, self.fields, tuple(self)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, complex))


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float))


# Sequences equal only sequences of their own kind: a list a list, a tuple a tuple or a
# named tuple (CPython's named tuples are tuples).
_SEQUENCE_KINDS = {list: list, tuple: tuple, NamedTupleValue: tuple}


def values_equal(a: Any, b: Any, ordered_dicts: bool = False) -> bool:
    """Equality of two values as documented above (never by string).

    ordered_dicts: dicts must also list their keys in the same order. The determinism
    check uses it: a dict built from a set of strings has a seed-dependent key order,
    which CPython shows in its repr and iteration even though the dicts are equal."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, complex) and isinstance(b, complex):
        return values_equal(a.real, b.real) and values_equal(a.imag, b.imag)
    ta, tb = type(a), type(b)
    if ta in _SEQUENCE_KINDS or tb in _SEQUENCE_KINDS:
        return (_SEQUENCE_KINDS.get(ta) is _SEQUENCE_KINDS.get(tb) and len(a) == len(b)
                and all(values_equal(x, y, ordered_dicts) for x, y in zip(a, b)))
    if ta is dict or tb is dict:
        if ta is not tb or len(a) != len(b):
            return False
        if ordered_dicts:
            return all(values_equal(ka, kb) and values_equal(va, vb, True)
                       for (ka, va), (kb, vb) in zip(a.items(), b.items()))
        return _dicts_equal(a, b)
    if ta in (set, frozenset) and tb in (set, frozenset):
        return len(a) == len(b) and (a == b or _sets_equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # an exotic __eq__ (only possible inside a worker) is simply unequal
        return False


def _dicts_equal(a: dict, b: dict) -> bool:
    """Equal-sized dicts with equal items, keys paired one to one. Keys without a NaN are
    looked up as Python does; keys that hold a NaN never match by lookup (NaN != NaN), so
    those items are paired off by values_equal instead (_pair_off)."""
    a_nan = []
    for key, value in a.items():
        if _holds_nan(key):
            a_nan.append((key, value))
        elif key not in b or not values_equal(value, b[key]):
            return False
    b_nan = [(key, value) for key, value in b.items() if _holds_nan(key)]
    return _pair_off(a_nan, b_nan)


def _sets_equal(a: set | frozenset, b: set | frozenset) -> bool:
    """Equal-sized sets that Python calls unequal may still be equal when they hold NaNs:
    the members without a NaN must be in both, and those with one pair off one to one."""
    a_nan = [x for x in a if _holds_nan(x)]
    if not a_nan or any(x not in b for x in a if not _holds_nan(x)):
        return False
    return _pair_off(a_nan, [y for y in b if _holds_nan(y)])


def _pair_off(a: list[Any], b: list[Any]) -> bool:
    """Whether the items of `a` and `b` pair up one to one by values_equal. values_equal is
    an equivalence, so pairing each item with the first equal one left never misses a
    pairing that exists. Only NaN-holding members and keys get here: few in practice."""
    left = list(b)
    for x in a:
        for i, y in enumerate(left):
            if values_equal(x, y):
                del left[i]
                break
        else:
            return False
    return not left


def _holds_nan(value: Any, depth: int = 0) -> bool:
    """Whether a hashable value is or contains a float NaN (complex parts included)."""
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, complex):
        return math.isnan(value.real) or math.isnan(value.imag)
    if isinstance(value, (tuple, frozenset)) and depth < 100:
        return any(_holds_nan(item, depth + 1) for item in value)
    return False


_ATOMS = frozenset({int, float, str, bytes, bool, type(None), bytearray, range, datetime.date, datetime.timedelta})
_ZONED = frozenset({datetime.datetime, datetime.time, datetime.timezone})  # values if their zone is: _is_plain_zone
_CONTAINERS = frozenset({list, tuple, set, frozenset})


def value_shape(value: Any, limit: int = 1_000_000) -> tuple[str, Any]:
    """One walk over `value` (iterative: depth costs no recursion), saying how its output
    may be written:
    - ("plain", None): exact built-in types whose repr reads back (literals, bytearray,
      range) only, no complex, no container met twice, nesting up to 100: its repr reads
      back as an equal value, guaranteed, so the costly read-back check can be skipped;
    - ("check", None): built of value types (a Fraction, a datetime or time with a zone
      included), but the repr must be read back to be trusted (complex: '(nan+nanj)' does
      not; a shared or cyclic container: '[[...]]'; deeper nesting);
    - ("rebuild", None): as "check", and it holds a named tuple: it is written from
      read_back_form(value), never by the task's class;
    - ("foreign", item): `item` is not a value type (a subclass, an object), or the
      value has more than `limit` parts. Then its repr could run the task's code.
    """
    stack, seen, plain, rebuild, fields_of = [(value, 0)], set(), True, False, {}
    while stack:
        limit -= 1
        if limit < 0:
            return "foreign", value
        item, depth = stack.pop()
        kind = type(item)
        if kind in _ATOMS:
            continue
        if kind is complex or (kind is Fraction and _is_fraction(item)) or (kind in _ZONED and _is_plain_zone(item)):
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
        if kind not in fields_of:
            fields_of[kind] = named_tuple_fields(kind)
        if fields_of[kind] is not None and len(fields_of[kind]) == tuple.__len__(item):
            plain, rebuild = False, True
            stack.extend((part, depth + 1) for part in tuple.__getitem__(item, slice(None)))
            continue
        return "foreign", item
    return ("plain" if plain else "rebuild" if rebuild else "check"), None


def _is_fraction(item: Fraction) -> bool:
    """A Fraction whose parts are ints (its slots can be set to anything by a task)."""
    return type(item._numerator) is int and type(item._denominator) is int


def _is_plain_zone(item: datetime.datetime | datetime.time | datetime.timezone) -> bool:
    """A datetime or time without a zone or with a datetime.timezone, or such a timezone whose
    name is a str: their reprs are datetime's own (a tzinfo subclass or a str subclass as a
    zone's name would have the task's repr)."""
    zone = item if type(item) is datetime.timezone else item.tzinfo
    return zone is None or (type(zone) is datetime.timezone and type(zone.tzname(None)) is str)


def _named_tuple_repr_code() -> types.CodeType | None:
    """The code of the __repr__ that collections.namedtuple gives every class it makes
    (one code object for all, with the class's format string in its one cell)."""
    code = getattr(collections.namedtuple("T", "a").__repr__, "__code__", None)
    return code if code is not None and code.co_freevars == ("repr_fmt",) else None


_NAMED_TUPLE_REPR = _named_tuple_repr_code()


def named_tuple_fields(kind: type) -> tuple[str, ...] | None:
    """The field names of a named tuple class (collections.namedtuple, typing.NamedTuple, or
    a subclass of one), read without running any of the task's code; None if `kind` is not
    one whose repr CPython writes as `Name(field=item, ...)`.

    Such a class has `type` as metaclass, a plain str as name, namedtuple's own __repr__
    as the first __repr__ of its MRO, and no class of it redefines __getattribute__ or
    __class__ (the repr reads `self.__class__.__name__`). The field names come from that
    __repr__'s format string, which nothing can change (`_fields` can be reassigned)."""
    if _NAMED_TUPLE_REPR is None or type(kind) is not type or type(kind.__name__) is not str:
        return None
    mro = kind.__mro__
    if mro[-2:] != (tuple, object):
        return None
    for cls in mro[:-2]:
        namespace = cls.__dict__
        if not all(type(key) is str for key in namespace):  # so that lookups run no __eq__
            return None
        if "__getattribute__" in namespace or "__class__" in namespace:
            return None
        if "__repr__" in namespace:
            method = namespace["__repr__"]
            if type(method) is not types.FunctionType or method.__code__ is not _NAMED_TUPLE_REPR:
                return None
            template = method.__closure__[0].cell_contents  # '(x=%r, y=%r)'
            if type(template) is not str:
                return None
            return tuple(part[:-3] for part in template[1:-1].split(", ")) if template != "()" else ()
    return None


def read_back_form(value: Any, depth: int = 0) -> Any:
    """A copy of `value` (value_shape said "rebuild") in which every named tuple is a
    NamedTupleValue built from its class name, field names and the tuple's own items: the
    value the trusted side will read back, written by this module's code alone."""
    if depth > 200:
        raise RecursionError("nested too deeply to write")
    kind = type(value)
    if kind in _ATOMS or kind in _ZONED or kind is complex or kind is Fraction:
        return value
    if kind is list or kind is tuple:
        return kind(read_back_form(item, depth + 1) for item in value)
    if kind is set or kind is frozenset:
        return kind(read_back_form(item, depth + 1) for item in value)
    if kind is dict:
        return {read_back_form(k, depth + 1): read_back_form(v, depth + 1) for k, v in value.items()}
    items = tuple.__getitem__(value, slice(None))
    return NamedTupleValue(kind.__name__, named_tuple_fields(kind), [read_back_form(item, depth + 1) for item in items])


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
