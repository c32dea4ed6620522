"""Hostile programs are rejected with a reason and no side effect, and the pool survives.

Each case is a teacher program that tries one attack; the sandbox must reject it with
the stated reason (a set where two are equally right, e.g. a bigint bomb may hit the
time or the memory limit first). Student answers are as hostile as teacher programs and
get the same treatment.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from popula.records import TaskRecord
from popula.sandbox import Limits, Sandbox
from popula.tasks.generator import generate_tasks

LIMITS = Limits(cpu_s=1, wall_s=0.6, memory_mb=256)
CANARY = Path("/tmp/popula-sandbox-canary")

NESTS_N_DEEP = "def f(n):\n    a = []\n    for _ in range(n):\n        a = [a]\n    return a"

# (name, program, input, accepted reasons)
HOSTILE = [
    ("infinite_loop", "def f(x):\n    while True:\n        pass", "0", {"timeout"}),
    ("cpu_burner", "def f(n):\n    return sum(i * i for i in range(n))", "10 ** 12", {"timeout"}),
    ("bigint_bomb", "def f(n):\n    return len(str(7 ** n))", "10 ** 9", {"timeout", "memory", "output_too_large", "runtime_error"}),
    ("memory_bomb_list", "def f(n):\n    return len([0] * n)", "10 ** 10", {"memory"}),
    ("memory_bomb_str", "def f(n):\n    return len('x' * n)", "10 ** 11", {"memory"}),
    ("memory_growth", "def f(x):\n    a = ['x' * 1000]\n    while True:\n        a = a + a", "0", {"memory", "timeout"}),
    ("fork_bomb_import", "import os\ndef f(x):\n    while True:\n        os.fork()", "0", {"forbidden"}),
    ("fork_via_import_builtin", "def f(x):\n    return __import__('os').fork()", "0", {"forbidden"}),
    ("subprocess", "import subprocess\ndef f(x):\n    return subprocess.run(['true'])", "0", {"forbidden"}),
    ("file_write_open", "def f(p):\n    open(p, 'w').write('pwned')\n    return 1", repr(str(CANARY)), {"forbidden"}),
    ("file_write_pathlib", "import pathlib\ndef f(p):\n    return pathlib.Path(p).write_text('x')", repr(str(CANARY)), {"forbidden"}),
    ("file_write_io", "import io\ndef f(p):\n    return io.open(p, 'w')", repr(str(CANARY)), {"forbidden"}),
    ("network_socket", "import socket\ndef f(x):\n    return socket.create_connection(('127.0.0.1', 9))", "0", {"forbidden"}),
    ("network_urllib", "import urllib.request\ndef f(x):\n    return urllib.request.urlopen('http://127.0.0.1:9/')", "0", {"forbidden"}),
    ("import_via_getattr_builtins", "def f(x):\n    return getattr(__builtins__, '__import__')('os')", "0", {"forbidden"}),
    ("import_via_string_concat", "def f(x):\n    return getattr(x.__class__, '__ba' + 'se__')", "0", {"forbidden"}),
    ("import_via_runtime_string", "def f(x):\n    name = ''.join(['_', '_', 'ba', 'se', '_', '_'])\n    return getattr(x.__class__, name)", "0", {"runtime_error"}),
    ("subclasses_chain", "def f(x):\n    return [c.__name__ for c in ().__class__.__base__.__subclasses__()]", "0", {"forbidden"}),
    ("globals_of_function", "def f(x):\n    return f.__globals__['__builtins__']", "0", {"forbidden"}),
    ("frame_walk", "def f(x):\n    g = (i for i in [1])\n    return g.gi_frame.f_back", "0", {"forbidden"}),
    ("exec_string", "def f(x):\n    return exec('import os')", "0", {"forbidden"}),
    ("eval_string", "def f(x):\n    return eval('1+1')", "0", {"forbidden"}),
    ("compile_string", "def f(x):\n    return compile('1', 'a', 'eval')", "0", {"forbidden"}),
    ("globals_builtin", "def f(x):\n    return globals()['__builtins__']", "0", {"forbidden"}),
    ("importlib", "import importlib\ndef f(x):\n    return importlib.import_module('os')", "0", {"forbidden"}),
    ("private_module_attr", "import collections\ndef f(x):\n    return collections._sys.modules", "0", {"forbidden"}),
    ("module_attr_leak", "import re\ndef f(x):\n    m = re\n    return m.enum.sys.platform", "0", {"runtime_error"}),
    ("type_hints_eval", "import typing\ndef f(x):\n    return typing.get_type_hints(f)", "0", {"runtime_error"}),
    ("formatter_walk", "import string\ndef f(x):\n    return string.Formatter().get_field('0', [x], {})", "0", {"runtime_error"}),
    ("attrgetter", "import operator\ndef f(x):\n    return operator.attrgetter('real')(x)", "0", {"runtime_error"}),
    ("huge_output", "def f(n):\n    return 'x' * n", "10 ** 6", {"output_too_large"}),
    ("huge_int_output", "def f(n):\n    return 10 ** n", "100000", {"output_too_large"}),
    ("print_flood_forever", "def f(x):\n    while True:\n        print('spam' * 100)", "0", {"timeout"}),
    ("deep_recursion", "def f(n):\n    return f(n + 1) + 1", "0", {"runtime_error"}),
    ("deeply_nested_output", NESTS_N_DEEP, "5000", {"unrepresentable"}),
    # 100000 deep takes about 0.5 s of the 0.6 s wall to build, walk and free: on a loaded host
    # the clock may judge it first; either way the task is invalid and the worker lives
    ("deeply_nested_output_huge", NESTS_N_DEEP, "100000", {"unrepresentable", "timeout"}),
    ("sys_exit", "import sys\ndef f(x):\n    sys.exit(3)", "0", {"forbidden"}),
    ("os_exit", "import os\ndef f(x):\n    os._exit(3)", "0", {"forbidden"}),
    ("exit_builtin", "def f(x):\n    exit(3)", "0", {"forbidden"}),
    ("raise_system_exit", "def f(x):\n    raise SystemExit(3)", "0", {"runtime_error"}),
    ("raise_keyboard_interrupt", "def f(x):\n    raise KeyboardInterrupt", "0", {"runtime_error"}),
    ("signal_ignore", "import signal\ndef f(x):\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    while True: pass", "0", {"forbidden"}),
    ("survive_by_catching", "def f(x):\n    while True:\n        try:\n            while True:\n                pass\n        except BaseException:\n            pass", "0", {"timeout"}),
    ("finaliser_loop", "class A:\n    def __del__(self):\n        while True:\n            pass\ndef f(x):\n    a = A()\n    a.me = a\n    return 1", "0", {"timeout"}),
    ("patch_allowed_class", "import collections\ndef f(x):\n    collections.Counter.most_common = lambda self, n=None: []\n    return 1", "0", {"runtime_error"}),
    ("nondeterministic_id", "def f(x):\n    return id(object()) % 1000", "0", {"nondeterministic"}),
    ("nondeterministic_hash_str", "def f(s):\n    return hash(s) % 1000", "'popula'", {"nondeterministic"}),
    ("nondeterministic_hash_object", "def f(x):\n    return hash(object()) % 997", "0", {"nondeterministic"}),
    ("nondeterministic_set_order", "def f(words):\n    return list(set(words))", "['pear', 'apple', 'fig', 'kiwi', 'plum', 'lime', 'date', 'yuzu']", {"nondeterministic"}),
    ("nondeterministic_set_str", "def f(words):\n    return str(set(words))", "['pear', 'apple', 'fig', 'kiwi', 'plum', 'lime', 'date', 'yuzu']", {"nondeterministic"}),
    ("nondeterministic_address_repr", "class Box:\n    pass\ndef f(x):\n    return repr(Box())", "0", {"nondeterministic"}),
    ("nondeterministic_function_repr", "def f(x):\n    return str(lambda: 0)", "0", {"nondeterministic"}),
    ("object_output", "class Box:\n    pass\ndef f(x):\n    return Box()", "0", {"unrepresentable"}),
    ("generator_output", "def f(x):\n    return (i for i in range(3))", "0", {"unrepresentable"}),
    # an output is checked to be built of values before any repr runs: Evil's never does
    ("hostile_repr", "class Evil(list):\n    def __repr__(self):\n        while True:\n            pass\ndef f(x):\n    return Evil()", "0", {"unrepresentable"}),
    ("hostile_input", "def f(x):\n    return x", "__import__('os').system('touch /tmp/popula-sandbox-canary')", {"forbidden"}),
    ("input_escapes_parenthesis", "def f(x):\n    return x", "1), print(2", {"syntax", "runtime_error"}),
]


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, limits=LIMITS) as sb:
        yield sb


@pytest.fixture(scope="module")
def hostile_results(sandbox):
    CANARY.unlink(missing_ok=True)
    records = [TaskRecord(id=name, type="code_o", program=p, inputs=[i]) for name, p, i, _ in HOSTILE]
    return dict(zip([h[0] for h in HOSTILE], sandbox.verify(records)))


@pytest.mark.slow
@pytest.mark.parametrize("name,program,inp,reasons", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_program_is_rejected_with_a_reason(hostile_results, name, program, inp, reasons):
    result = hostile_results[name]
    assert not result.valid
    assert result.reason in reasons, f"{name}: {result.reason}: {result.detail}"
    assert result.detail, "a rejection explains itself"


@pytest.mark.slow
def test_hostile_programs_leave_no_side_effects(hostile_results):
    assert not CANARY.exists()


@pytest.mark.slow
def test_no_sandboxed_process_outlives_its_task(sandbox, hostile_results):
    worker_pids = {w.pid for w in sandbox._slots if w is not None}
    stragglers = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid in worker_pids:
            stragglers.append(entry)
    assert stragglers == []


HOSTILE_ANSWERS = [
    # code_o and code_i answers are data: anything else is refused unrun
    ("code_o", "def f(x):\n    return x", ["3"], "__import__('os').getcwd()", "not_a_value"),
    ("code_o", "def f(x):\n    return x", ["3"], "next(i for i in iter(int, 1) if i)", "not_a_value"),
    ("code_o", "def f(x):\n    return x", ["3"], "f(3)", "not_a_value"),
    ("code_i", "def f(x):\n    return x", ["3"], "open('/etc/passwd').read()", "not_a_value"),
    ("code_i", "def f(x):\n    return x * 2", ["3"], "10 ** 10 ** 10", "not_a_value"),
    # a value on which the task's own program loops for ever
    ("code_i", "def f(n):\n    while n > 3:\n        pass\n    return n", ["3"], "4", "timeout"),
    ("code_f", "def f(x):\n    return x", [str(i) for i in range(4)], "import os\ndef f(x):\n    return os.getpid()", "forbidden"),
    ("code_f", "def f(x):\n    return x", [str(i) for i in range(4)], "def f(x):\n    return [0] * 10 ** 10", "memory"),
    ("code_f", "def f(x):\n    return x", [str(i) for i in range(4)], "def f(x)\n    return x", "syntax"),
]


@pytest.mark.slow
def test_hostile_answers_are_judged_wrong_with_a_reason(sandbox):
    records = [
        TaskRecord(id=f"a{i}", type=t, program=p, inputs=inp, answer=a) for i, (t, p, inp, a, _) in enumerate(HOSTILE_ANSWERS)
    ]
    for result, case in zip(sandbox.verify(records), HOSTILE_ANSWERS):
        assert result.valid, result.detail
        assert result.correct is False
        assert result.answer_reason == case[4], (case, result.answer_detail)


def _timed(sb: Sandbox, records: list[TaskRecord]) -> float:
    """Seconds to verify benign `records`; every one must come back valid. The only exception
    allowed is a rare wall-clock kill (LIMITS.wall_s is 0.6 s, which a benign task can exceed
    when other jobs load the machine): a poisoned pool fails with other reasons, or many."""
    start = time.perf_counter()
    results = sb.verify(records)
    elapsed = time.perf_counter() - start
    invalid = [(r.id, r.reason, r.detail) for r in results if not r.valid]
    assert all(reason == "timeout" for _, reason, _ in invalid), invalid
    assert len(invalid) <= len(records) // 100, invalid
    return elapsed


@pytest.mark.slow
def test_pool_serves_at_full_speed_after_a_hostile_batch(sandbox, hostile_results):
    benign = generate_tasks(300, seed=7, verify=False)
    after = min(_timed(sandbox, benign) for _ in range(2))
    with Sandbox(workers=2, limits=LIMITS) as fresh:
        baseline = min(_timed(fresh, benign) for _ in range(2))
    # generous: the machine is shared; a poisoned or degraded pool would be far slower
    assert after < 2.5 * baseline + 0.3, (after, baseline)
