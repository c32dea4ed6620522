"""The static policy: what a program, an input or an answer may use, decided before it runs."""

from __future__ import annotations

from types import CodeType

import pytest

from popula.sandbox.policy import Rejection, compile_argument_lists, compile_program

CAP = 20_000


@pytest.mark.parametrize(
    "program",
    [
        "def f(x):\n    return x",
        "import math, collections.abc\nfrom itertools import chain\ndef f(x):\n    return math.floor(x)",
        "class A:\n    def __init__(self):\n        super().__init__()\n        self._x = 1\n    def __repr__(self):\n        return 'A'\ndef f():\n    return A()._x if False else 1",
        "from collections import namedtuple\nP = namedtuple('P', 'a b')\ndef f():\n    return P(1, 2)._asdict()",
        "def f(s):\n    return s.__len__()",
        "if __name__ == '__main__':\n    print(f(1))\ndef f(x):\n    return x",
        "f = lambda x: x + 1",
        "import re\ndef f(s):\n    return re.compile(s).pattern",
    ],
)
def test_ordinary_programs_compile(program):
    assert isinstance(compile_program(program, CAP), CodeType)


@pytest.mark.parametrize(
    "program,reason,mentions",
    [
        ("def f(x)\n    return x", "syntax", "line 1"),
        ("def g(x):\n    return x", "no_entry_function", "f"),
        ("import os\ndef f(): pass", "forbidden", "'os'"),
        ("import os.path\ndef f(): pass", "forbidden", "'os.path'"),
        ("from . import x\ndef f(): pass", "forbidden", "relative"),
        ("from collections import _sys\ndef f(): pass", "forbidden", "_sys"),
        ("def f(x):\n    return x._secret", "forbidden", "_secret"),
        ("def f():\n    return open('x')", "forbidden", "open"),
        ("def f():\n    return __builtins__", "forbidden", "__builtins__"),
        ("def f():\n    return ().__class__.__base__", "forbidden", "__base__"),
        ("def f():\n    return getattr(().__class__, '__ba' + 'se__')", "forbidden", "__base__"),
        ("def f(x):\n    x.__class__ = int", "forbidden", "assigns or deletes the dunder attribute '__class__'"),
        ("def f(x):\n    x.__dict__ = {}", "forbidden", "assigns or deletes the dunder attribute '__dict__'"),
        ("def f(x):\n    x.__dict__ |= {}", "forbidden", "'__dict__'"),
        ("def f(x):\n    return getattr(x, '__dict__')", "forbidden", "'__dict__'"),
        ("def f(x):\n    match x:\n        case object(__dict__=d):\n            return d", "forbidden", "'__dict__'"),
        ("import inspect\ndef f(): pass", "forbidden", "'inspect'"),
        ("from dataclasses import _create_fn\ndef f(): pass", "forbidden", "_create_fn"),
        ("def f(g):\n    return g.gi_frame", "forbidden", "gi_frame"),
        ("global __builtins__\n__builtins__ = {}\ndef f(): pass", "forbidden", "__builtins__"),
        ("def f():\n    return breakpoint()", "forbidden", "breakpoint"),
        ("def f():\n    def g():\n        return locals()\n    return g", "forbidden", "locals"),
        ("x = 1\n" * 20_000 + "def f(): pass", "syntax", "limit"),
        ("from collections.abc import Sequence\ndef f():\n    Sequence.register(dict)", "forbidden", "register"),
    ],
)
def test_programs_outside_the_policy_are_rejected_with_a_reason(program, reason, mentions):
    rejected = compile_program(program, CAP)
    assert isinstance(rejected, Rejection)
    assert rejected.reason == reason
    assert mentions in rejected.detail


def test_argument_lists_compile_one_code_object_each():
    codes = compile_argument_lists(["1, 2", "[1,\n 2], key=len", "'a', *'bc'"], CAP)
    assert isinstance(codes, list) and len(codes) == 3


@pytest.mark.parametrize("text", ["1), print(2", "1), 5, (2", "1), lambda: g(2"])
def test_an_input_cannot_close_its_parenthesis_early(text):
    rejected = compile_argument_lists([text, "3"], CAP)
    assert isinstance(rejected, Rejection) and rejected.reason == "syntax"


def test_inputs_obey_the_same_policy():
    rejected = compile_argument_lists(["1", "__import__('os')"], CAP)
    assert isinstance(rejected, Rejection) and rejected.reason == "forbidden"


def test_syntax_errors_in_inputs_name_the_input():
    rejected = compile_argument_lists(["1", "(2"], CAP)
    assert isinstance(rejected, Rejection) and rejected.reason == "syntax"
    assert "inputs[1]" in rejected.detail


def test_generated_code_compiles_without_raising_syntax_warnings():
    """CPython warns about `1[0]` and `0x1for`; in a run such warnings came by the dozen on the console."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert isinstance(compile_program("def f(x):\n    return [1[0] for _ in ()]", CAP), CodeType)
        assert isinstance(compile_program("def f(x):\n    return [0x1for x in x]", CAP), CodeType)
        assert isinstance(compile_argument_lists(["1[0] if False else 2"], CAP), list)
    assert [str(w.message) for w in caught] == []


def _names(code: CodeType) -> set[str]:
    """Every name the code and the code objects nested in it use."""
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, CodeType))
    return names


@pytest.mark.parametrize(
    "program",
    [
        "def f(f_str, name, num):\n    return f_str.format(name, num)",
        "def f(t, d):\n    return t.format_map(d)",
        "def f(x):\n    return str.format('{0[1]}', x)",
        "def f(x):\n    return '{0.real} {p.imag}'.format(x, p=x)",
        "class S(str):\n    def format(self, *a):\n        return super().format(*a)\ndef f(t):\n    return S(t).format(1)",
        "class A:\n    pass\ndef f(x):\n    a = A()\n    a.format = 1\n    del a.format\n    return 1",
    ],
)
def test_format_on_any_template_compiles_with_its_reads_checked(program):
    code = compile_program(program, CAP)
    assert isinstance(code, CodeType)
    names = _names(code)
    literal_only = "'{0.real} {p.imag}'" in program or "a.format = 1" in program
    assert ("__popula_format__" in names) is not literal_only


@pytest.mark.parametrize(
    "program,mentions",
    [
        ("def f(x):\n    return '{0.__class__.__base__}'.format(x)", "'__base__'"),
        ("def f(g):\n    return '{0.gi_frame.f_back}'.format(g)", "'gi_frame'"),
        ("def f(x):\n    return '{0:{1._secret}}'.format(x, x)", "'_secret'"),
        ("def f(x):\n    return '{m.__globals__}'.format_map({'m': f})", "'__globals__'"),
        ("def f(t):\n    return __popula_format__(t, 'format')", "reserves"),
        ("def f(t, __popula_format__=None):\n    return t.format(1)", "reserves"),
        ("def f(t):\n    t.format += 1", "cannot check"),
        ("def f(t):\n    match t:\n        case str(format=m):\n            return m", "class pattern"),
        ("class C(str):\n    __match_args__ = ('format',)\ndef f(t):\n    return 1", "__match_args__"),
    ],
)
def test_format_reads_that_cannot_be_checked_or_read_hidden_attributes_are_forbidden(program, mentions):
    rejected = compile_program(program, CAP)
    assert isinstance(rejected, Rejection) and rejected.reason == "forbidden", rejected
    assert mentions in rejected.detail


def test_format_in_inputs_is_checked_and_keeps_one_code_object_per_input():
    codes = compile_argument_lists(["'a'", "t.format(\n1)", "('{' + '}').format(2), 3"], CAP)
    assert isinstance(codes, list) and len(codes) == 3
    assert "__popula_format__" in codes[1].co_names and "__popula_format__" in codes[2].co_names
    rejected = compile_argument_lists(["'{0.__class__.__mro__}'.format(1)"], CAP)
    assert isinstance(rejected, Rejection) and rejected.reason == "forbidden"


@pytest.mark.parametrize(
    "program",
    [
        "def f(x):\n    return x.__class__.__name__",
        "def f(x):\n    return getattr(x, '__class__')",
        "def f(x):\n    return '{0.__class__}'.format(x)",
        "import datetime, calendar\ndef f(x):\n    return calendar.isleap(datetime.date(2020, 1, 1).year)",
        # calendar's own private names are data: a program may still use them for its own classes
        "class C:\n    def __init__(self):\n        self._days, self._months, self._firstweekday = 30, 12, 0\n"
        "def f(x):\n    c = C()\n    return c._days + c._months + c._firstweekday",
    ],
)
def test_reads_of_class_and_the_datetime_and_calendar_modules_are_allowed(program):
    assert isinstance(compile_program(program, CAP), CodeType)


@pytest.mark.parametrize("program", ["def f(x):\n    return vars(x)", "def f(x):\n    return x.__dict__",
                                     "def f(x):\n    x.__dict__['a'] = 1\n    return (lambda: x).__dict__"])
def test_dict_reads_compile_as_checked_calls(program):
    code = compile_program(program, CAP)
    assert isinstance(code, CodeType)
    names = _names(code)
    assert ("__popula_format__" in names) is ("__dict__" in program)


def test_format_checks_survive_nesting_near_the_compilers_limits():
    deep = compile_program("def f(t):\n    return t.format(" + "-" * 900 + "1)", CAP)
    assert isinstance(deep, CodeType)
    deeper = compile_program("def f(t):\n    return t.format(" + "-" * 2500 + "1)", CAP)
    assert isinstance(deeper, Rejection) and deeper.reason == "syntax" and "nested too deeply" in deeper.detail


@pytest.mark.parametrize("texts", [
    ["1", "[x * 2 for x in range(3)], 'a'", "{'k': (1,\n 2)}, y=3", "float('nan')"],
    ["'{}'.format(4)", "{1, 2}", "frozenset({(1, 2)})", "b'\\x00', None"],
    ["[[y for y in range(x)] for x in range(3)]", "(lambda: 0)"],
])
def test_argument_lists_placed_together_are_the_joint_compile(texts):
    # plan.judge_together puts a task's inputs and answers in a job anew each time: its code
    # objects must be those of one joint compile, lines and positions included, so that a
    # job cannot tell an answer's argument list from its task's own by how it was compiled
    from popula.sandbox.policy import order_sensitive, place_argument_lists

    joint, placed = compile_argument_lists(texts, 10_000), place_argument_lists(texts, 10_000)
    assert not isinstance(joint, Rejection) and not isinstance(placed, Rejection)
    assert placed == joint
    assert [list(c.co_positions()) for c in placed] == [list(c.co_positions()) for c in joint]
    assert any(map(order_sensitive, placed)) == any(map(order_sensitive, joint))


def test_an_argument_list_placed_together_that_fails_says_which():
    from popula.sandbox.policy import place_argument_lists

    rejected = place_argument_lists(["1", "2)", "3"], 10_000)
    assert isinstance(rejected, Rejection) and "inputs[1]" in rejected.detail, rejected
