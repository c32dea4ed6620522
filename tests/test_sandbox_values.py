"""Outputs are compared as Python values, never as strings, with documented choices."""

from __future__ import annotations

import math

import pytest

from popula.sandbox import NotAValue, read_value, reprs_equal, values_equal


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
        ({1, 2}, frozenset({2, 1}), True),
        ("1", 1, False),
        ([1, [2, 3]], [1, [2, 4]], False),
        ({"a": [1]}, {"a": (1,)}, False),
        (complex(math.nan, 1), complex(math.nan, 1), True),
    ],
)
def test_values_equal_semantics(a, b, equal):
    assert values_equal(a, b) is equal
    assert values_equal(b, a) is equal


def test_reprs_compare_by_value_not_by_text():
    assert reprs_equal("{'a': 1, 'b': 2}", "{'b': 2, 'a': 1}")
    assert reprs_equal("(1, 2)", "(1,2)")
    assert reprs_equal("1.0", "1")
    assert not reprs_equal("(1, 2)", "[1, 2]")
    assert not reprs_equal("not a value", "not a value ")


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
