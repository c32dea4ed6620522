"""Outputs are compared as Python values, never as strings, with documented choices."""

from __future__ import annotations

import collections
import datetime
import math
import typing
from fractions import Fraction

import pytest

from popula.sandbox import NotAValue, read_value, reprs_equal, values_equal
from popula.sandbox.values import NamedTupleValue, read_arguments, read_back_form, value_shape

NAN = math.nan


@pytest.mark.parametrize(
    "text,value",
    [
        ("[1, 2, 3]", [1, 2, 3]),
        ("(1,)", (1,)),
        ("{'b': 2, 'a': [1, (2, 3)]}", {"a": [1, (2, 3)], "b": 2}),
        ("{1, 2}", {1, 2}),
        ("set()", set()),
        ("frozenset({1, 2})", frozenset({1, 2})),
        ("frozenset()", frozenset()),
        ("-3.5", -3.5),
        ("(1+2j)", 1 + 2j),
        ("b'\\x00ab'", b"\x00ab"),
        ("'it''s'", "its"),
        ("None", None),
        ("True", True),
        ("inf", math.inf),
        ("-inf", -math.inf),
        ("float('inf')", math.inf),
        ("bytearray(b'a\\x00')", bytearray(b"a\x00")),
        ("bytearray(b'')", bytearray()),
        ("range(0, 3)", range(3)),
        ("range(5, -1, -2)", range(5, -1, -2)),
        ("Fraction(-1, 2)", Fraction(-1, 2)),
        ("P(x=1, y=[2])", (1, [2])),
        ("E()", ()),
        ("datetime.date(2020, 1, 4)", datetime.date(2020, 1, 4)),
        ("datetime.datetime(2020, 1, 1, 0, 0, tzinfo=datetime.timezone.utc)",
         datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)),
        ("datetime.timedelta(days=-1, seconds=5)", datetime.timedelta(days=-1, seconds=5)),
    ],
)
def test_reprs_of_builtin_values_read_back(text, value):
    assert values_equal(read_value(text), value)


def test_nan_reads_back_as_nan():
    assert math.isnan(read_value("nan"))


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "open('/etc/passwd')",
        "x",
        "[1, 2] * 3",
        "(lambda: 1)()",
        "().__class__",
        "{**{}}",
        "<object object at 0x7f>",
        "Counter({'a': 1})",
        "-'a'",
        "[" * 100_000,
        "Fraction(1, 0)",
        "Fraction(1.5, 2)",
        "range(0, 3, 0)",
        "range(1)",
        "bytearray('a')",
        "P(1, y=2)",
        "P(x=1, x=2)",
        "P(**{})",
        "datetime.date(2020, 13, 1)",
        "datetime.date(2020.0, 1, 1)",
        "datetime.datetime(2020, 1, 1, tzinfo=1)",
        "datetime.datetime.now()",
        "datetime.date.today()",
    ],
)
def test_anything_but_a_value_is_refused_without_running_it(text):
    with pytest.raises(NotAValue):
        read_value(text)


@pytest.mark.parametrize(
    "a,b,equal",
    [
        ((1, 2), (1, 2), True),
        ((1, 2), [1, 2], False),  # containers keep their type
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True),  # dict order is irrelevant
        (1.0, 1, True),  # numbers compare by value
        (True, 1, True),  # as Python says
        (0.1 + 0.2, 0.3, False),  # floats are exact
        (math.nan, math.nan, True),  # nan equals nan
        ([math.nan, {"k": (math.nan,)}], [math.nan, {"k": (math.nan,)}], True),
        ({1, 2}, frozenset({2, 1}), True),  # as CPython says: a set equals the frozenset of its members
        ([{1}], [frozenset({1})], True),
        ("1", 1, False),
        ([1, [2, 3]], [1, [2, 4]], False),
        ({"a": [1]}, {"a": (1,)}, False),
        (complex(math.nan, 1), complex(math.nan, 1), True),
        # dict keys that hold a NaN pair off one to one, like set members
        ({NAN: 1, float("nan"): 2}, {NAN: 1, float("nan"): 1}, False),
        ({NAN: 1, float("nan"): 2}, {float("nan"): 2, NAN: 1}, True),
        ({(NAN, 1): "a", (NAN, 2): "b"}, {(NAN, 2): "b", (NAN, 1): "a"}, True),
        ({(NAN, 1): "a", 3: "b"}, {(NAN, 1): "a", (NAN, 3): "b"}, False),
        ({NAN, float("nan"), 1}, {NAN, 1, 2}, False),
        # values that CPython's == calls equal across types
        (NamedTupleValue("P", ("x", "y"), [1, 2]), (1, 2), True),
        (NamedTupleValue("P", ("x", "y"), [1, 2]), NamedTupleValue("Q", ("a", "b"), [1, 2]), True),
        (NamedTupleValue("P", ("x", "y"), [1, 2]), [1, 2], False),
        (Fraction(1, 2), 0.5, True),
        (Fraction(1, 3), 0.3333333333333333, False),
        (bytearray(b"a"), b"a", True),
        (range(0), range(2, 2), True),
        (range(3), [0, 1, 2], False),
        (range(3), (0, 1, 2), False),
    ],
)
def test_values_equal_semantics(a, b, equal):
    assert values_equal(a, b) is equal
    assert values_equal(b, a) is equal


def test_a_named_tuple_reads_back_with_its_name_and_fields_and_hashes_as_its_tuple():
    value = read_value("[P(x=1, y='a'), {Q(k=(1, 2)): 3}]")
    assert repr(value) == "[P(x=1, y='a'), {Q(k=(1, 2)): 3}]"
    assert value[1] == {((1, 2),): 3}
    import copy
    import pickle

    assert repr(pickle.loads(pickle.dumps(value))) == repr(copy.deepcopy(value)) == repr(value)


@pytest.mark.parametrize("text", ["Fraction(1, 2)", "[P(x=1)]", "range(0, 2)", "{1: bytearray(b'a')}",
                                  "x=datetime.date(2020, 1, 1)"])
def test_an_argument_list_holds_literal_values_only(text):
    # arguments travel to a worker by marshal, which carries literal types only
    with pytest.raises(NotAValue, match="literal value"):
        read_arguments(text)
    assert read_arguments("[1, (2.5, 'a')], k={frozenset({1}): None}") == (([1, (2.5, "a")],), {"k": {frozenset({1}): None}})


def test_reprs_compare_by_value_not_by_text():
    assert reprs_equal("{'a': 1, 'b': 2}", "{'b': 2, 'a': 1}")
    assert reprs_equal("(1, 2)", "(1,2)")
    assert reprs_equal("1.0", "1")
    assert not reprs_equal("(1, 2)", "[1, 2]")
    assert not reprs_equal("not a value", "not a value ")
    assert reprs_equal("frozenset({1, 2})", "{2, 1}")
    assert reprs_equal("P(x=1, y=2)", "(1, 2)")
    assert reprs_equal("Fraction(1, 2)", "0.5")
    assert not reprs_equal("{nan: 1, nan: 2}", "{nan: 1, nan: 1}")


Point = collections.namedtuple("Point", "x y")


class Typed(typing.NamedTuple):
    a: int
    b: str = "z"


class Sub(Point):
    def norm(self):
        return abs(self.x) + abs(self.y)


class Own(Point):
    def __repr__(self):
        return "anything"


def test_named_tuples_fractions_bytearrays_and_ranges_are_written_as_cpython_writes_them():
    value = [Point(1, [2]), Typed(3), Sub(4, Fraction(1, 3)), {Point(1, 2): range(2)}, bytearray(b"x")]
    assert value_shape(value) == ("rebuild", None)
    written = read_back_form(value)
    assert repr(written) == repr(value)
    assert values_equal(read_value(repr(written)), written)
    assert value_shape([Fraction(1, 2), range(3)]) == ("check", None)
    assert value_shape([bytearray(b"a"), range(3)]) == ("plain", None)


def test_a_named_tuple_with_a_repr_of_its_own_is_not_a_value():
    assert value_shape(Own(1, 2)) == ("foreign", Own(1, 2))
    odd = Fraction(1, 2)
    odd._numerator = "1"  # a task can set a Fraction's slots to anything
    assert value_shape([odd])[0] == "foreign"


def test_plain_values_are_recognised_so_their_reprs_need_no_read_back():
    from popula.sandbox.values import is_plain

    assert is_plain([1, (2.5, "a"), {"k": {1, 2}}, None, b"x", frozenset({True})])
    assert not is_plain(1 + 2j)  # '(nan+nanj)' would not read back: checked the slow way
    assert not is_plain(type("L", (list,), {})())  # subclasses may have any repr
    cyclic: list = []
    cyclic.append(cyclic)
    assert not is_plain(cyclic)


@pytest.mark.parametrize(
    "result",
    [
        {"ok": []},
        {"ok": ["1", "'caf\\xe9'", "'\\ud800'", "\"a\\\"b\"", "'\\x00\\n'"]},
        {"ok": ["'é ✓ \U0001f600'", "[1, (2.5, None)]"]},
        {"err": "runtime_error", "detail": "ValueError: é \x00 \" \\ \ud800"},
    ],
)
def test_a_childs_result_json_is_exactly_json_dumps(result):
    # zygote._encode_result writes the JSON by hand (fewer pages touched in a job's process)
    import importlib.util
    import json
    from pathlib import Path

    import popula.sandbox

    path = Path(popula.sandbox.__file__).with_name("zygote.py")
    spec = importlib.util.spec_from_file_location("zygote_under_test", path)
    zygote = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zygote)
    assert zygote._encode_result(result) == json.dumps(result).encode()
