"""Probe suite (issue 18): escapes are rejected without leaking the worker, no job can touch
another's verdict, the jail is required, nondeterminism is caught for certain, and benign
programs get exactly CPython's outputs.

Every escape below was accepted, or leaked worker internals, before the sandbox ran each
job in a process of its own and checked attributes independently of spelling.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from popula.records import TaskRecord
from popula.sandbox import Limits, Sandbox, SandboxUnavailable
from test_sandbox_determinism import STRICT_RUNS

ROOT = Path(__file__).resolve().parents[1]
BENIGN = ROOT / "tests" / "data" / "sandbox" / "benign.jsonl"
LIMITS = Limits(cpu_s=1, wall_s=1.5, memory_mb=256)
GEN = "def gen():\n    yield 1\n"

# (name, program, input): each must be invalid (forbidden, or a runtime error that leaks nothing)
ESCAPES = [
    ("getattr_const_gi_frame", GEN + "def f(x):\n    g = gen()\n    fr = getattr(g, 'gi_frame')\n    return getattr(fr, 'f_back')", "0"),
    ("getattr_const_f_globals", GEN + "def f(x):\n    return getattr(getattr(gen(), 'gi_frame'), 'f_globals')", "0"),
    ("getattr_computed_frame", GEN + "def f(x):\n    n = 'gi' + '_fr' + 'ame'\n    return str(getattr(gen(), n))", "0"),
    ("getattr_computed_private", "import typing\ndef f(x):\n    r = typing.get_args(typing.List['1'])[0]\n    return getattr(r, '_eval' + 'uate')({}, {}, frozenset())", "0"),
    ("class_pattern_globals", "def f(x):\n    match f:\n        case object(__globals__=g):\n            return str(g)\n    return 0", "0"),
    ("class_pattern_frame", GEN + "def f(x):\n    match gen():\n        case object(gi_frame=fr):\n            return str(fr)\n    return 0", "0"),
    ("class_pattern_private", "def f(x):\n    match x:\n        case object(_secret=s):\n            return s\n    return 0", "0"),
    ("match_args_computed", "class C:\n    __match_args__ = ('__cl' + 'ass__',)\ndef f(x):\n    match C():\n        case C(k):\n            return str(k)", "0"),
    ("match_args_runtime", "class C:\n    __match_args__ = tuple([''.join(['__', 'class', '__'])])\ndef f(x):\n    return 0", "0"),
    ("typing_forwardref_self", "import typing\ndef f(x):\n    self = typing.get_args(typing.List['__import__(\"os\").getuid()'])[0]\n    return self._evaluate({}, {}, frozenset())", "0"),
    ("typing_forwardref_cls", "import typing\ndef f(x):\n    cls = typing.get_args(typing.List['1'])[0]\n    return cls._evaluate({}, {}, frozenset())", "0"),
    ("own_name_loophole", "import typing\nclass A:\n    def _evaluate(self, *a):\n        return 0\ndef f(x):\n    r = typing.get_args(typing.List['1'])[0]\n    return r._evaluate({}, {}, frozenset())", "0"),
    ("enum_convert", "import enum\nclass A:\n    def _convert_(self):\n        pass\ndef f(x):\n    return str(enum.Enum._convert_('E', 'os', lambda n: n == 'system'))", "0"),
    ("format_attr", GEN + "def f(x):\n    return '{0.gi_frame.f_back}'.format(gen())", "0"),
    ("format_map_attr", "def f(x):\n    return '{x.__class__.__base__}'.format_map({'x': x})", "0"),
    ("format_computed_template", GEN + "def f(x):\n    t = '{0.' + 'gi_frame' + '}'\n    return t.format(gen())", "0"),
    ("format_via_str_method", "def f(x):\n    return str.format('{0.__class__.__subclasses__}', x)", "0"),
    ("format_via_getattr", GEN + "def f(x):\n    t = ''.join(['{0.', 'gi_', 'frame}'])\n    return getattr(t, 'format')(gen())", "0"),
    # .format/.format_map on a template held in a variable runs, with its fields checked when the call runs
    ("format_subclass_of_str", "class S(str):\n    pass\ndef f(x):\n    return S('{0.__glo' + 'bals__}').format(f)", "0"),
    ("format_subclass_super", "class S(str):\n    def format(self, *a):\n        return super().format(*a)\ndef f(x):\n    return S('{0.__glo' + 'bals__}').format(f)", "0"),
    ("format_in_input", "def f(s):\n    return s", "('{0.__glo' + 'bals__}').format(f)"),
    ("format_map_in_input", "def f(s):\n    return s", "('{x.__glo' + 'bals__}').format_map({'x': f})"),
    ("format_bound_method_kept", GEN + "def f(x):\n    m = ''.join(['{0.', 'gi_', 'frame}']).format\n    return m(gen())", "0"),
    ("format_literal_or_variable", GEN + "def f(t):\n    return (t or '{}').format(gen())", "'{0.gi_frame}'"),
    ("format_str_method_mapped", "def f(x):\n    return list(map(str.format, ['{0.__glo' + 'bals__}'], [f]))", "0"),
    ("format_nested_spec", "def f(t):\n    return t.format(5, f)", "'{0:{1.__glo' + 'bals__}}'"),
    ("format_class_pattern", "def f(t):\n    match t:\n        case str(format=m):\n            return m('{0.__glo' + 'bals__}', f)", "'x'"),
    ("format_checker_named", "def f(t):\n    return __popula_format__(t, 'format')", "'x'"),
    ("format_checker_parameter", "def f(t, __popula_format__=getattr):\n    return t.format(f)", "'{0.__glo' + 'bals__}'"),
    ("string_formatter", "import string\ndef f(x):\n    return string.Formatter().format('{0.__glo' + 'bals__}', f)", "0"),
    ("input_named_args", "def f(x):\n    return str(x)", "__popula_args__"),
    ("program_reads_args", "def f(x):\n    return str(__popula_args__)", "0"),
    ("abc_register", "import collections.abc\ndef f(x):\n    getattr(collections.abc.Sequence, 'register')(dict)\n    return isinstance({}, collections.abc.Sequence)", "0"),
    ("abc_register_attr", "import collections.abc\ndef f(x):\n    collections.abc.Sequence.register(dict)\n    return 1", "0"),
    ("traceback_frame", "def f(x):\n    try:\n        1 / 0\n    except Exception as e:\n        return str(e.__traceback__.tb_frame.f_globals)", "0"),
    ("coroutine_frame", "async def c():\n    pass\ndef f(x):\n    co = c()\n    return str(co.cr_frame.f_back)", "0"),
    ("code_object", "def f(x):\n    return f.__code__.co_consts", "0"),
    ("code_attr_const", "def f(x):\n    return getattr(getattr(f, '__code__'), 'co_code')", "0"),
    ("cell_contents", "def f(x):\n    return getattr(getattr, 'cell' + '_contents', 1)", "0"),
    ("wraps_globals", "import functools\ndef g():\n    pass\ndef f(x):\n    functools.update_wrapper(g, functools.reduce, assigned=(), updated=('__glo' + 'bals__',))\n    return 1", "0"),
    ("wraps_computed", "import functools\ndef g():\n    pass\ndef f(x):\n    n = ''.join(['__', 'globals', '__'])\n    functools.update_wrapper(g, functools.reduce, assigned=(), updated=(n,))\n    return sorted(k for k in g.__globals__)", "0"),
    ("wraps_computed_runtime", "import functools\ndef g():\n    pass\ndef f(x):\n    n = ''.join(['__', 'globals', '__'])\n    functools.update_wrapper(g, functools.reduce, assigned=(), updated=(n,))\n    return 1", "0"),
    # update_wrapper copies the wrapped object's __dict__: a class's holds its private and dunder members
    ("wraps_class_namespace", "import functools\nclass W:\n    pass\ndef f(x):\n    w = W()\n    functools.update_wrapper(w, int)\n"
     "    return sorted(vars(w))", "0"),
    ("wraps_library_object", "import enum, functools\nclass W:\n    pass\ndef f(x):\n    w = W()\n"
     "    functools.update_wrapper(w, enum.Enum)\n    return str(vars(w))", "0"),
    ("dunder_hash_call", "def f(x):\n    return object().__hash__() % 2", "0"),
    ("private_on_self_name", "import collections\ndef f(x):\n    self = collections\n    return str(self._sys)", "0"),
    ("answer_expression_frame", "def f(x):\n    return (i for i in [1]).gi_frame.f_back", "0"),
    # __class__ is type(x); the walks from a class stay closed, statically and at run time
    ("class_base_subclasses", "def f(x):\n    return ().__class__.__base__.__subclasses__()", "0"),
    ("class_bases_computed", "def f(x):\n    return getattr(x.__class__, ''.join(['__', 'bases', '__']))", "0"),
    ("class_mro_computed", "def f(x):\n    return getattr(type(x), 'm' + 'ro')()", "0"),
    ("class_assigned", "def f(x):\n    setattr(x, ''.join(['__', 'class', '__']), int)\n    return 1", "0"),
    # __dict__ and vars() show an instance of the task's classes or a module copy, nothing else
    ("class_dict_of_builtin", "def f(x):\n    return str(x.__class__.__dict__['__add__'])", "0"),
    ("class_dict_of_own_class", "class A:\n    pass\ndef f(x):\n    return sorted(A.__dict__)", "0"),
    ("vars_of_a_class", "import enum\nclass E(enum.Enum):\n    A = 1\ndef f(x):\n    return sorted(vars(E))", "0"),
    ("vars_of_a_function", "import functools\ndef f(x):\n    return sorted(vars(functools.reduce))", "0"),
    ("vars_no_argument", "def f(x):\n    return sorted(vars())", "0"),
    ("vars_of_forward_ref", "import typing\ndef f(x):\n    return str(vars(typing.get_args(typing.List['1'])[0]))", "0"),
    ("dict_of_forward_ref", "import typing\ndef f(x):\n    return str(typing.get_args(typing.List['1'])[0].__dict__)", "0"),
    ("dict_of_module_type", "import math\ndef f(x):\n    return str(type(math).__dict__)", "0"),
    ("dict_in_augmented_assignment", "class A:\n    pass\ndef f(x):\n    a = A()\n    a.__dict__ |= {'y': 1}\n    return a.y", "0"),
    # the clock and the host's time zone are gone from datetime; time, _strptime, dataclasses are refused
    ("datetime_now", "import datetime\ndef f(x):\n    return datetime.datetime.now().second % 2", "0"),
    ("datetime_today", "import datetime\ndef f(x):\n    return datetime.date.today().day", "0"),
    ("datetime_datetime_today", "import datetime\ndef f(x):\n    return datetime.datetime.today().day", "0"),
    ("datetime_now_computed", "import datetime\ndef f(x):\n    return getattr(datetime.datetime, 'n' + 'ow')().second", "0"),
    ("datetime_utcnow", "import datetime\ndef f(x):\n    return datetime.datetime.utcnow().second", "0"),
    ("datetime_local_zone", "import datetime\ndef f(x):\n    return datetime.datetime.fromtimestamp(0).hour", "0"),
    ("datetime_timestamp", "import datetime\ndef f(x):\n    return datetime.datetime(2020, 1, 1).timestamp()", "0"),
    ("datetime_astimezone", "import datetime\ndef f(x):\n    return str(datetime.datetime(2020, 1, 1).astimezone())", "0"),
    ("import_time", "import time\ndef f(x):\n    return time.time()", "0"),
    ("import_strptime", "import _strptime\ndef f(x):\n    return 1", "0"),
    ("calendar_locale", "import calendar\ndef f(x):\n    return calendar.LocaleTextCalendar().formatmonth(2020, 1)", "0"),
    ("calendar_main", "import calendar\ndef f(x):\n    return calendar.main(['calendar'])", "0"),
]

# (name, program, input): valid-looking tasks whose output is a coin flip between processes
NONDETERMINISTIC = [
    ("set_of_two_strings", "def f(x):\n    return list({'a', 'b'})", "0"),
    ("hash_object_parity", "def f(x):\n    return hash(object()) % 2", "0"),
    ("id_parity", "def f(x):\n    return id(x) % 2", "0"),
    ("hash_str_parity", "def f(s):\n    return hash(s) % 2", "'popula'"),
    ("dict_from_string_set", "def f(words):\n    return dict.fromkeys(set(words), 0)", "['pear', 'fig', 'kiwi']"),
    ("sort_by_id", "def f(x):\n    a, b = object(), object()\n    return [o is a for o in sorted([a, b], key=id)]", "0"),
]

_WORKER_TRACES = ("zygote", "popula-jail", "ctypes", "<module", "posix", "/popula/", "CDLL", "_LIBC", "<function")


def _no_trace(text: str) -> bool:
    return not any(t in (text or "") for t in _WORKER_TRACES)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, limits=LIMITS, determinism_runs=STRICT_RUNS) as sb:
        yield sb


@pytest.mark.slow
def test_every_escape_probe_is_rejected_and_leaks_nothing(sandbox):
    records = [TaskRecord(id=n, type="code_o", program=p, inputs=[i]) for n, p, i in ESCAPES]
    results = sandbox.verify(records)
    bad = [(r.id, r.reason, r.detail) for r in results if r.valid or r.reason not in ("forbidden", "runtime_error")]
    assert not bad, bad
    leaks = [(r.id, r.detail) for r in results if not _no_trace(r.detail)]
    assert not leaks, leaks
    # the format probes fail on their hidden field, not on some other error along the way
    unchecked = [(r.id, r.detail) for r in results if r.id.startswith("format") and r.reason == "runtime_error"
                 and "is not accessible in the sandbox" not in r.detail]
    assert not unchecked, unchecked


@pytest.mark.slow
def test_vars_of_a_module_shows_its_copy_only(sandbox):
    """A module copy's namespace holds the public names the copy has, not the real module's
    globals (collections imports sys and keeps private helpers)."""
    program = ("import collections, math\ndef f(x):\n    names = set(vars(collections)) | set(collections.__dict__)\n"
               "    return sorted(n for n in names if n.startswith('_')), 'sys' in names, type(vars(math)['pi']).__name__")
    [result] = sandbox.verify([TaskRecord(id="v", type="code_o", program=program, inputs=["0"])])
    assert result.valid, result.detail
    assert result.outputs == ["(['__all__', '__doc__', '__loader__', '__name__', '__package__', '__spec__'], False, 'float')"]


@pytest.mark.slow
def test_answer_expressions_are_not_values_and_never_run(sandbox):
    task = TaskRecord(id="t", type="code_o", program="def f(x):\n    return x", inputs=["1"], outputs=["1"],
                      answer="(i for i in [1]).gi_frame.f_back.f_globals")
    result = sandbox.verify([task])[0]
    assert result.correct is False and result.answer_reason == "not_a_value" and _no_trace(result.answer_detail)


@pytest.mark.slow
@pytest.mark.parametrize("name,program,inp", NONDETERMINISTIC, ids=[n for n, _, _ in NONDETERMINISTIC])
def test_coin_flip_tasks_are_rejected_as_nondeterministic(sandbox, name, program, inp):
    result = sandbox.verify([TaskRecord(id=name, type="code_o", program=program, inputs=[inp])])[0]
    assert not result.valid and result.reason == "nondeterministic", (result.reason, result.detail)


@pytest.mark.slow
def test_hostile_answers_cannot_change_other_jobs_verdicts(sandbox):
    """A batch of correct code_f answers mixed with hostile ones: every correct one stays correct."""
    program = "def f(a, b):\n    return a * b + 1"
    inputs = [f"{i}, {i + 1}" for i in range(6)]
    outputs = [repr(i * (i + 1) + 1) for i in range(6)]
    hostile = [
        "import os\ndef f(a, b):\n    os.write(4, b'\\x00\\x00\\x00\\x0e{\"ok\": [\"0\"]}')\n    return 0",
        GEN + "def f(a, b):\n    g = gen()\n    fr = getattr(g, 'gi_frame')\n    return getattr(fr, 'f_back')",
        "def f(a, b):\n    while True:\n        pass",
        "import collections.abc\ndef f(a, b):\n    getattr(collections.abc.Sequence, 'register')(dict)\n    return 0",
        "def f(a, b):\n    raise SystemExit(0)",
        "def f(a, b):\n    return [0] * 10 ** 10",
    ]
    records = []
    for k in range(30):
        answer = hostile[k % len(hostile)] if k % 2 else program
        records.append(TaskRecord(id=f"r{k}", type="code_f", program=program, inputs=inputs, outputs=outputs, answer=answer))
    results = sandbox.verify(records)
    honest = [r for k, r in enumerate(results) if k % 2 == 0]
    assert all(r.correct for r in honest), [(r.id, r.answer_reason, r.answer_detail) for r in honest if not r.correct]
    assert not any(r.correct for k, r in enumerate(results) if k % 2)


@pytest.mark.slow
def test_benign_programs_give_exactly_cpythons_outputs(sandbox):
    rows = [json.loads(line) for line in BENIGN.read_text().splitlines()]
    assert len(rows) >= 300
    records = [TaskRecord(id=str(k), type="code_o", program=r["program"], inputs=r["inputs"]) for k, r in enumerate(rows)]
    results = sandbox.verify(records)
    # Each program runs 14 times under a 1.5 s wall clock; on a machine loaded several times over (CI
    # beside training jobs) one benign run can pass it. A timeout is not a wrong output: such rows get
    # one more verification, and must then give CPython's outputs like the rest.
    timed_out = {r.id for r in results if r.reason == "timeout"}
    if timed_out:
        again = {r.id: r for r in sandbox.verify([rec for rec in records if rec.id in timed_out])}
        results = [again.get(r.id, r) for r in results]
    wrong = [(rows[int(r.id)]["program"][:80], r.reason, r.detail, r.outputs, rows[int(r.id)]["outputs"])
             for r in results if not r.valid or r.outputs != rows[int(r.id)]["outputs"]]
    assert not wrong, wrong[:5]


# (program, input): third-party style programs that format a template held in a variable, and
# programs that look at builtins and modules; the sandbox must give exactly CPython's outputs
FORMAT_AND_BUILTINS = [
    ("def f(f_str, name, num):\n    return f_str.format(name, num)", "'{} is {:>4}', 'x', 7"),
    ("def f(t, d):\n    return t.format_map(d)", "'{a}-{b[1]}', {'a': 1, 'b': 'xy'}"),
    ("def f(ts):\n    return [t.format(3.5, [1, 2]) for t in ts]", "['{0.real}|{0.imag}', '{1[0]}', '{0:{1[1]}}', '{!r:>6}']"),
    ("class S(str):\n    pass\ndef f(t):\n    m = S(t).format\n    return [m(1, 2), str.format(t, 3, 4), getattr(t, 'format')(5, 6), hasattr(t, 'format')]", "'{1}{0}'"),
    ("class P:\n    def __init__(self):\n        self.x = 2\ndef f(t):\n    return t.format(p=P())", "'({p.x}, {p.x!r})'"),
    ("import functools\ndef f(t):\n    return functools.partial(str.format, t)('a')", "'<{}>'"),
    ("def f(t):\n    try:\n        return t.format(1)\n    except (IndexError, ValueError) as e:\n        return type(e).__name__", "'{1}'"),
    ("import math, string, functools\ndef f(t):\n    return [print.__name__, isinstance(print, type(len)), getattr.__name__, getattr.__doc__,\n"
     "            setattr.__name__, setattr.__doc__, delattr.__name__, delattr.__doc__, hasattr.__name__, hasattr.__doc__,\n"
     "            math.__name__, math.__doc__, string.__doc__, functools.wraps.__name__, functools.wraps.__doc__,\n"
     "            str.format.__name__, str.format.__doc__, t.format.__name__, t.format_map.__doc__, callable(getattr)]", "'{}'"),
    ("from string import *\ndef f(x):\n    return [ascii_lowercase[:x], capwords('a b')]", "3"),
    ("def f(n):\n    for i in range(n):\n        print(i, 'x' * 20, sep=', ')\n    return n", "10 ** 5"),
    ("def f(s):\n    try:\n        print(s, flush=True)\n    except UnicodeEncodeError as e:\n        return e.reason\n    return 0", "'\\ud800'"),
    ("class W:\n    def __init__(self):\n        self.parts = []\n    def write(self, s):\n        self.parts.append(s)\n"
     "def f(x):\n    w = W()\n    print('a', x, sep='-', end='!', file=w)\n    return w.parts", "1"),
]


# Runs each (program, input) of a JSON list in this fresh interpreter: CPython's own outputs,
# untouched by whatever the test session's libraries did to builtins (one replaces print).
_CPYTHON = r"""
import json, sys
out = []
for program, inp in json.loads(sys.stdin.read()):
    scope = {"__name__": "expected"}
    exec(program, scope)
    args, kwargs = eval(f"(lambda *a, **k: (a, k))({inp})", scope)
    out.append(repr(scope["f"](*args, **kwargs)))
sys.stdout = sys.__stdout__
print("\n" + json.dumps(out))
"""


def _cpythons_outputs(programs: list[tuple[str, str]]) -> list[str]:
    done = subprocess.run([sys.executable, "-I", "-c", _CPYTHON], input=json.dumps(programs),
                          capture_output=True, text=True, timeout=120, env={"PYTHONIOENCODING": "utf-8"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_format_on_a_variable_and_builtins_give_cpythons_outputs(sandbox):
    records = [TaskRecord(id=str(k), type="code_o", program=p, inputs=[i]) for k, (p, i) in enumerate(FORMAT_AND_BUILTINS)]
    results = sandbox.verify(records)
    for (program, _), result, want in zip(FORMAT_AND_BUILTINS, results, _cpythons_outputs(FORMAT_AND_BUILTINS)):
        assert result.valid and result.outputs == [want], (program, result.reason, result.detail)


# (program, input): what teachers and benchmarks write with datetime (fixed dates), calendar,
# vars, __class__ and __dict__, and programs that return a named tuple, a Fraction, a
# bytearray or a range; the sandbox must give exactly CPython's outputs
TEACHERS_MODULES_AND_OUTPUTS = [
    ("import datetime\ndef f(n):\n    d = datetime.date(2020, 1, 1) + datetime.timedelta(days=n)\n"
     "    return str(d), d.weekday(), d.isoformat(), d.strftime('%A %d %B %Y'), (d - datetime.date(2019, 12, 25)).days", "3"),
    ("from datetime import datetime, timedelta, timezone\ndef f(s):\n    t = datetime.strptime(s, '%Y-%m-%d %H:%M')\n"
     "    u = t.replace(tzinfo=timezone.utc) + timedelta(hours=30)\n    return u.isoformat(), u.ctime(), repr(t), t.timetuple().tm_yday, str(u - t.replace(tzinfo=timezone.utc))",
     "'2021-03-04 22:15'"),
    ("import datetime\ndef f(y):\n    d = datetime.date.fromisoformat(f'{y}-02-28')\n    return [str(d + datetime.timedelta(days=k)) for k in range(3)], d.isocalendar()[1], datetime.datetime.utcfromtimestamp(86400).isoformat()", "2024"),
    ("import calendar\ndef f(y, m):\n    return (calendar.monthrange(y, m), calendar.isleap(y), calendar.leapdays(2000, y), calendar.month_name[m],\n"
     "            calendar.day_abbr[calendar.weekday(y, m, 1)], calendar.monthcalendar(y, m)[0], calendar.month(y, m), calendar.timegm((y, m, 1, 0, 0, 0)))", "2024, 2"),
    ("import calendar\ndef f(y):\n    return [list(w) for w in calendar.Calendar(firstweekday=6).monthdayscalendar(y, 3)][:2], calendar.TextCalendar().formatweekheader(3)", "2023"),
    ("class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n    def __eq__(self, other):\n        return self.__class__ is other.__class__ and vars(self) == vars(other)\n"
     "def f(a, b):\n    p, q = Point(a, b), Point(a, b)\n    q.__dict__['z'] = 1\n    return p == Point(a, b), p == q, vars(p), p.__class__.__name__, type(p).__name__", "1, 2"),
    ("class Config:\n    def __init__(self, **kw):\n        self.__dict__.update(kw)\ndef f(d):\n    c = Config(**d)\n    return sorted(c.__dict__.items()), getattr(c, 'a'), [x.__class__.__name__ for x in (1, 'a', [], c)]", "{'b': 2, 'a': 1}"),
    ("import math\ndef f(n):\n    return vars(math)['sqrt'](n), 'pi' in math.__dict__, (3).__class__(n) + 1", "16"),
    ("from collections import namedtuple\nPoint = namedtuple('Point', ['x', 'y'])\ndef f(a, b):\n    p = Point(a, b)\n    return p, p._replace(x=0), [Point(1, 2), Point(3, 4)], {p: 'origin'}", "1, 2"),
    ("from typing import NamedTuple\nclass Item(NamedTuple):\n    name: str\n    price: float = 0.0\ndef f(name):\n    return sorted([Item(name, 2.5), Item('a')], key=lambda i: i.price)", "'pen'"),
    ("import collections\nclass V(collections.namedtuple('V', 'x y')):\n    __slots__ = ()\n    def norm(self):\n        return abs(self.x) + abs(self.y)\n"
     "def f(a):\n    v = V(a, -a)\n    return v, v.norm()", "3"),
    ("from fractions import Fraction\ndef f(xs):\n    return sum(Fraction(1, x) for x in xs), Fraction(3, -6), [Fraction(x, 4) for x in xs]", "[2, 3, 6]"),
    ("def f(s):\n    b = bytearray(s.encode())\n    b[0] = 65\n    return b, bytearray(), b.upper()", "'hello'"),
    ("def f(n):\n    return range(n), range(1, n, 2), range(n, 0, -3), range(0)", "10"),
    ("import datetime\ndef f(n):\n    d = datetime.date(2020, 1, 1) + datetime.timedelta(days=n)\n"
     "    return d, d - datetime.date(2019, 1, 1), [datetime.timedelta(0), datetime.timedelta(hours=-n, microseconds=5)]", "3"),
    ("from datetime import datetime, time, timezone, timedelta\ndef f(h):\n    z = timezone(timedelta(hours=h), 'X')\n"
     "    return datetime(2021, 3, 4, 5, 6, tzinfo=timezone.utc), time(h, 30, tzinfo=z), datetime(2021, 1, 1, fold=1), z, timezone.utc", "2"),
]


@pytest.mark.slow
def test_datetime_calendar_vars_and_new_output_types_give_cpythons_outputs(sandbox):
    programs = TEACHERS_MODULES_AND_OUTPUTS
    results = sandbox.verify([TaskRecord(id=str(k), type="code_o", program=p, inputs=[i]) for k, (p, i) in enumerate(programs)])
    for (program, _), result, want in zip(programs, results, _cpythons_outputs(programs)):
        assert result.valid and result.outputs == [want], (program, result.reason, result.detail, want)


def test_a_worker_that_cannot_take_the_clock_away_leaves_datetime_and_calendar_out(monkeypatch):
    """The clock methods are deleted from datetime's C types by lifting their immutable flag,
    found by value at a known offset; where the layout differs, nothing is written and the
    modules that hand out datetime's objects are not importable."""
    import datetime
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("zygote_under_test", ROOT / "popula" / "sandbox" / "zygote.py")
    zygote = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zygote)
    other_layout = SimpleNamespace(from_address=lambda address: SimpleNamespace(value=-1))  # no word holds the flags
    monkeypatch.setattr(zygote, "ctypes", SimpleNamespace(c_ulong=other_layout))
    warnings: list[str] = []
    assert zygote._strip_class_attributes(warnings) == {"datetime", "calendar"}
    assert warnings and "not importable" in warnings[0]
    assert hasattr(datetime.date, "today")  # nothing was written


def test_a_worker_that_cannot_mask_reprs_says_so_and_writes_nothing(monkeypatch):
    """The address-showing reprs of C types are replaced by lifting their immutable flag,
    found by value; where the layout differs, nothing is written and the pool is warned
    (the placement shifts still make such a bit differ between runs, less reliably)."""
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("zygote_under_test", ROOT / "popula" / "sandbox" / "zygote.py")
    zygote = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zygote)
    other_layout = SimpleNamespace(from_address=lambda address: SimpleNamespace(value=-1))
    monkeypatch.setattr(zygote, "ctypes", SimpleNamespace(c_ulong=other_layout))
    warnings: list[str] = []
    zygote._mask_address_reprs(warnings)
    assert warnings and "real addresses" in warnings[0]
    assert repr(len) == "<built-in function len>" and type(object.__repr__).__name__ == "wrapper_descriptor"


def test_no_jail_means_no_sandbox_unless_opted_in(monkeypatch):
    """A host where the jail cannot be built: refused with what is missing and how to allow it."""
    if os.geteuid() != 0 or shutil.which("capsh") is None:
        pytest.skip("needs root and capsh to take CAP_SYS_CHROOT away")
    script = "from popula.sandbox import Sandbox\nwith Sandbox(workers=1) as sb:\n    print('ran')"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("POPULA_SANDBOX_ISOLATION", None)
    cmd = f"{sys.executable} -c \"{script}\""
    done = subprocess.run(["capsh", "--drop=cap_sys_chroot", "--", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0 and "ran" not in done.stdout
    assert "SandboxUnavailable" in done.stderr and "chroot" in done.stderr and "sandbox.isolation: none" in done.stderr
    env["POPULA_SANDBOX_ISOLATION"] = "none"
    done = subprocess.run(["capsh", "--drop=cap_sys_chroot", "--", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "ran" in done.stdout, done.stderr
    assert "WITHOUT the OS jail" in done.stderr


def test_the_cli_exits_2_when_the_jail_cannot_be_built(tmp_path):
    if os.geteuid() != 0 or shutil.which("capsh") is None:
        pytest.skip("needs root and capsh to take CAP_SYS_CHROOT away")
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "a", "type": "code_o", "program": "def f(x):\n    return x", "inputs": ["1"]}) + "\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("POPULA_SANDBOX_ISOLATION", None)
    cmd = f"{sys.executable} -m popula.cli verify {tasks}" if (ROOT / "popula" / "cli" / "__main__.py").exists() else \
        f"{sys.executable} -c 'import sys; from popula.cli import main; sys.exit(main([\"verify\", \"{tasks}\"]))'"
    done = subprocess.run(["capsh", "--drop=cap_sys_chroot", "--", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "cannot build its jail" in done.stderr and "isolation" in done.stderr


def test_unknown_isolation_is_an_error():
    with pytest.raises(Exception, match="isolation"):
        Sandbox(workers=1, isolation="sometimes")
