"""When the policy breaks, the judge still holds (docs/security.md § The policy breaks: what then).

Each round of probes found a new way through the in-process Python policy, so integrity
must not rest on it. These tests run jobs with the policy switched off (the test-only
POPULA_SANDBOX_POLICY=off: no static check, CPython's own builtins and import, as a job
that escaped holds them) and check what an escaped job still cannot do: tell validation
from judging, draw entropy, or reach another job. They also check that no allowed library
call can rewrite the names the policy relies on, with the policy on.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

from popula.records import TaskRecord
from popula.sandbox import Limits, Sandbox, policy, rules  # rules: the allow-list itself

pytestmark = pytest.mark.slow

# What an escaped job can read about the process it runs in, less what is its worker's own
# (the hash seed, the job uid and the fds named in argv: one per worker, so that runs on two
# workers disagree on anything derived from them) or its run's (pid, placement): if any of
# it differed between validating the task and judging an answer, the output would.
OBSERVER = '''
import os, sys, resource
def f(x):
    seen = [sorted(kv for kv in os.environ.items() if kv[0] != "PYTHONHASHSEED"), len(sys.argv), os.getcwd(),
            os.listdir("/"), [resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NOFILE)]]
    for fd in range(64):
        try:
            st = os.fstat(fd)
            seen.append((fd, st.st_mode, st.st_size))
        except OSError:
            pass
    return [x, repr(seen)]
'''


@pytest.fixture()
def unfiltered(monkeypatch):
    """A sandbox whose jobs run without the policy (as if each had escaped it)."""
    monkeypatch.setenv(policy.POLICY_ENV, "off")
    policy.compile_program.cache_clear()
    policy._compile_argument_lists.cache_clear()
    with Sandbox(workers=2, limits=Limits(wall_s=5.0, cpu_s=2.0)) as sb:
        yield sb
    policy.compile_program.cache_clear()
    policy._compile_argument_lists.cache_clear()


def _task(tid: str, program: str, kind: str = "code_i", inputs: tuple[str, ...] = ("3",)) -> TaskRecord:
    return TaskRecord(id=tid, type=kind, program=program, inputs=list(inputs))


def test_the_switch_really_lets_a_job_import_what_the_policy_forbids(unfiltered):
    program = "import os, ctypes\ndef f(x):\n    return [x, ctypes.sizeof(ctypes.c_int), os.getcwd()]"
    (result,) = unfiltered.verify([_task("import", program)])
    assert result.valid and result.outputs == ["[3, 4, '/']"], result


def test_an_escaped_task_sees_the_same_job_when_judged_as_when_validated(unfiltered):
    (validated,) = unfiltered.verify([_task("observer", OBSERVER)])
    assert validated.valid, validated
    record = _task("observer", OBSERVER)
    record.outputs = validated.outputs
    record.answer = "3"
    for judged in unfiltered.verify([record, record]):
        # its own input again: the same output, so the same process as far as it can tell
        assert judged.valid and judged.correct, judged


def test_a_task_that_answers_differently_when_judged_is_invalid(unfiltered):
    # each input runs its program afresh, so it keeps state where an escaped job can: in
    # the interpreter. It can tell only that the extra input is not its own (as a pure
    # program can), and what it returns for its own input when judged is checked
    program = ("import sys\ndef f(x):\n    seen = sys.__dict__.setdefault('seen', set())\n    seen.add(x)\n"
               "    return 'judged' if len(seen) > 1 else 'validated'")
    (validated,) = unfiltered.verify([_task("two-faced", program)])
    assert validated.valid and validated.outputs == ["'validated'"], validated
    record = _task("two-faced", program)
    record.outputs, record.answer = validated.outputs, "4"
    (judged,) = unfiltered.verify([record])
    if judged.valid:  # the answer ran first: its own input then also saw two values
        assert judged.correct is False
    else:
        assert judged.reason == "nondeterministic" and "when an answer was judged" in judged.detail, judged


def _judged(sandbox: Sandbox, program: str, n: int) -> list:
    """`program` validated on input 3 (it must give 'own'), then judged on n code_i answers."""
    (validated,) = sandbox.verify([_task("escaped", program)])
    assert validated.valid and validated.outputs == ["'own'"], validated
    answers = [_task("escaped", program) for _ in range(n)]
    for k, record in enumerate(answers):
        record.outputs, record.answer = validated.outputs, str(100 + k)
    return sandbox.verify(answers)


def test_an_escaped_task_that_decides_answers_by_a_coin_is_caught(unfiltered):
    # its own input is answered as validated; any other answer gets a bit of its process's
    # pid, a coin a job can always draw. Each answer is judged twice, in jobs on two workers
    # (pool._Work._judge_twice): two different outputs make the task invalid. Over 80 answers
    # (10 jobs, then 20), missed with probability below 2**-20.
    program = "import os\ndef f(x):\n    return 'own' if x == 3 else os.getpid() % 2"
    caught = [j for j in _judged(unfiltered, program, 80) if not j.valid]
    assert caught and all("in one judging run" in j.detail for j in caught), caught[:3]


def test_an_escaped_task_that_picks_which_answers_pass_is_caught(unfiltered):
    # it finds its job's argument lists in memory and passes only the smallest student answer
    # among them: one answer in a job passes, whatever the students wrote, in any order and
    # in every run of that job. Each answer is judged again in other company
    # (pool._Work._judge_twice), where another is the smallest: some answer passes once and
    # fails once, and the task is invalid. (Judged twice in the same company, it is not.)
    program = ("import gc, types\ndef f(x):\n    if x == 3:\n        return 'own'\n"
               "    jobs = [o for o in gc.get_objects()\n"
               "            if isinstance(o, list) and o and all(isinstance(c, types.CodeType) for c in o)]\n"
               "    seen = {k for job in jobs for c in job for k in c.co_consts if type(k) is int and k >= 100}\n"
               "    return 'own' if x == min(seen) else 'no'")
    caught = [j for j in _judged(unfiltered, program, 8) if not j.valid]
    assert caught and all("in one judging run" in j.detail for j in caught), caught


@pytest.mark.parametrize("source", ["os.urandom(8)", "open('/dev/urandom', 'rb').read(8)", "random.SystemRandom().random()"])
def test_no_entropy_reaches_an_escaped_job(unfiltered, source):
    program = f"import os, random\ndef f(x):\n    return repr({source})"
    (result,) = unfiltered.verify([_task("entropy", program, kind="code_o")])
    assert not result.valid, result


def test_an_escaped_job_reaches_no_other_job(unfiltered, tmp_path):
    hostile = ("import os, signal\ndef f(x):\n"
               "    for pid in range(2, 200000):\n"
               "        try:\n            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n"
               "    try:\n        open('/tmp/popula-left-behind', 'w').write('x')\n    except OSError:\n        pass\n"
               "    return x")
    innocent = "def f(x):\n    return x * 2"
    records = [_task(f"h{i}", hostile, kind="code_o") if i % 2 else _task(f"i{i}", innocent, kind="code_o")
               for i in range(8)]
    results = unfiltered.verify(records)
    for record, result in zip(records, results):
        if record.id.startswith("i"):
            assert result.valid and result.outputs == ["6"], result
    assert not Path("/tmp/popula-left-behind").exists()


# ----------------------------------------------------------------------------- policy on


def _routes() -> set[str]:
    """Every function of every allowed module whose code reaches a module by name, a frame
    or a globals dict: the calls through which a task could write what the policy reads."""
    found: set[str] = set()

    def reaches(code: types.CodeType) -> bool:
        names = set(code.co_names)
        return {"sys", "modules"} <= names or bool(names & {"_getframe", "f_globals", "f_locals", "globals"})

    def check(name: str, fn: object) -> None:
        code = getattr(fn, "__code__", None)
        if code is not None and any(map(reaches, policy._all_codes(code))):
            found.add(name)

    for module_name in sorted(rules.ALLOWED_MODULES):
        module = importlib.import_module(module_name)
        for key, value in vars(module).items():
            if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                check(f"{module_name}.{key}", value)
            elif isinstance(value, type) and value.__module__ == module.__name__:
                for attr, member in vars(value).items():
                    member = getattr(member, "__func__", member)
                    check(f"{module_name}.{key}.{attr}", getattr(member, "fget", member))
    return found


# Reviewed: each reaches sys.modules by a name a task may choose, or a caller's frame. The
# ones that evaluate text (get_type_hints, ForwardRef) are stripped (rules.STRIPPED_ATTRIBUTES);
# the rest find only library modules there (zygote._drop_own_modules), and frames they read
# are the task's own. dataclasses: _process_class exec()s its methods' text in
# `sys.modules[cls.__module__].__dict__`, and _is_type reads names there; the sandbox's
# dataclass() takes only a class whose __module__ is the task's, and registers the task's own
# globals under that name only while it runs (zygote._safe_dataclasses), so both find the
# task's globals, as CPython finds a script's __main__; _get_field looks up 'typing' and
# 'dataclasses' by their fixed names. The text itself holds only checked field names.
REVIEWED_ROUTES = {
    "collections.namedtuple", "enum.EnumMeta._convert_", "enum.EnumMeta._create_", "enum.EnumType._convert_",
    "enum.EnumType._create_", "enum._old_convert_", "enum.global_enum", "typing.ForwardRef._evaluate",
    "typing._GenericAlias.__reduce__", "typing._caller", "typing.get_type_hints",
    "dataclasses._process_class", "dataclasses._is_type", "dataclasses._get_field",
}


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the reviewed list is CPython 3.11's")
def test_every_library_route_to_modules_frames_or_globals_is_reviewed():
    assert _routes() == REVIEWED_ROUTES


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2) as sb:
        yield sb


@pytest.mark.parametrize("target", ["__main__", "builtins", "rules", "values", "seccomp", "zygote"])
def test_no_allowed_call_rewrites_the_policys_names(sandbox, target):
    # enum.global_enum(cls) updates sys.modules[cls.__module__].__dict__ with the members:
    # aimed at the worker's own globals, a member that answers every call with False would
    # turn the policy's checks off
    program = f'''
import enum
def f(x):
    class Door(enum.Enum):
        __module__ = {target!r}
        _hidden = 1
        isinstance = 2
        getattr = 3
        def __call__(self, *args, **kwargs):
            return False
    try:
        enum.global_enum(Door)
    except Exception as err:
        return "refused " + type(err).__name__
    try:
        getattr(f, "__globals__")
        return "escaped"
    except AttributeError:
        return "held"
'''
    (result,) = sandbox.verify([_task("door", program, kind="code_o")])
    assert not (result.valid and "escaped" in result.outputs[0]), result
