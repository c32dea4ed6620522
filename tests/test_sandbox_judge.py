"""Validation and judging through the public API: Sandbox(...).verify(records)."""

from __future__ import annotations

import os

import pytest

from popula.records import TaskRecord
from popula.sandbox import Limits, Sandbox
from test_sandbox_determinism import STRICT_RUNS


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, limits=Limits(wall_s=1.0)) as sb:
        yield sb


def _o(program: str, inp: str, answer: str | None = None, outputs: list[str] | None = None) -> TaskRecord:
    return TaskRecord(id="o", type="code_o", program=program, inputs=[inp], answer=answer, outputs=outputs or [])


def test_results_come_back_in_record_order(sandbox):
    records = [_o("def f(x):\n    return x * 3", str(i)) for i in range(50)]
    for i, record in enumerate(records):
        record.id = f"t{i}"
    results = sandbox.verify(records)
    assert [r.id for r in results] == [f"t{i}" for i in range(50)]
    assert [r.outputs for r in results] == [[repr(i * 3)] for i in range(50)]


def test_an_empty_batch_is_fine(sandbox):
    assert sandbox.verify([]) == []


def test_identical_records_are_run_once_and_share_their_verdict(sandbox):
    """A student's rollouts often repeat an answer: the same record is judged once, each
    copy gets that verdict under its own id. A code_i answer is the exception: each judging
    runs the teacher's program at a fresh slot, another chance to catch a two-faced task."""
    from popula.sandbox.pool import _distinct

    program = "def f(xs):\n    return sorted(xs)"
    solve = "def f(xs):\n    return sorted(xs)"
    records = [TaskRecord(id=f"f{k}", type="code_f", program=program, inputs=["[3, 1]", "[2, 5, 1]"],
                          outputs=["[1, 3]", "[1, 2, 5]"], answer=solve if k != 2 else "def f(xs):\n    return xs")
               for k in range(5)]
    code_i = [TaskRecord(id=f"i{k}", type="code_i", program=program, inputs=["[3, 1]"], outputs=["[1, 3]"],
                         answer="[1, 3]") for k in range(2)]
    distinct, copies = _distinct(records + code_i)
    assert copies == [[0, 1, 3, 4], [2], [5], [6]]
    seen: list[int] = []
    results = sandbox.verify(records + code_i, progress=seen.append)
    assert [r.id for r in results] == ["f0", "f1", "f2", "f3", "f4", "i0", "i1"]
    assert [r.correct for r in results] == [True, True, False, True, True, True, True]
    assert sum(seen) == 7
    results[0].outputs.append("spoiled")
    assert results[1].outputs == ["[1, 3]", "[1, 2, 5]"]  # each copy's verdict is its own


def test_progress_counts_every_record_once(sandbox):
    seen: list[int] = []
    records = [_o("def f(x):\n    return x", "1"), _o("def f(x)\n", "1"), _o("def f(x):\n    return x", "2", answer="2")]
    sandbox.verify(records, progress=seen.append)
    assert sum(seen) == 3


@pytest.mark.parametrize(
    "answer,correct",
    [
        ("(2, 1)", True),
        ("(2,1)", True),
        ("[2, 1]", False),  # a list is not the tuple the program returns
        ("(2, 1.0)", True),  # 1.0 == 1
        ("(2, 1", False),  # malformed
    ],
)
def test_code_o_answers_are_compared_by_value(sandbox, answer, correct):
    [result] = sandbox.verify([_o("def f(a, b):\n    return (b, a)", "1, 2", answer=answer)])
    assert result.valid and result.correct is correct


@pytest.mark.parametrize(
    "answer",
    [
        "tuple([2, 1])",  # right value, but an expression
        "(1 + 1, 1)",
        "f(1, 2)",  # the task's own function
        "(lambda: (2, 1))()",
        "1 +",
    ],
)
def test_a_code_o_answer_must_be_a_value_and_is_never_run(sandbox, answer):
    [result] = sandbox.verify([_o("def f(a, b):\n    return (b, a)", "1, 2", answer=answer)])
    assert result.valid and result.correct is False and result.answer_reason == "not_a_value"
    assert "answers are data" in result.answer_detail


def test_code_o_dict_order_and_nan(sandbox):
    program = "def f(x):\n    return {'b': float('nan'), 'a': x}"
    [result] = sandbox.verify([_o(program, "1", answer="{'a': 1, 'b': float('nan')}")])
    assert result.correct is True


@pytest.mark.parametrize("output,answer", [("{nan}", "{nan}"), ("{nan: 1}", "{nan: 1}"), ("frozenset({nan, 2})", "frozenset({2, nan})")])
def test_nan_in_sets_and_dict_keys_equals_nan(sandbox, output, answer):
    program = f"def f(x):\n    nan = float('nan')\n    return {output}"
    [result] = sandbox.verify([_o(program, "1", answer=answer)])
    assert result.valid and result.correct is True


@pytest.mark.parametrize("answer,correct", [("{nan: 1, nan: 2}", True), ("{nan: 2, nan: 1}", True),
                                            ("{nan: 1, nan: 1}", False), ("{nan: 2, nan: 2}", False)])
def test_dict_keys_that_are_nan_pair_off_one_to_one(sandbox, answer, correct):
    program = "def f(x):\n    return {float('nan'): 1, float('nan'): 2}"
    [result] = sandbox.verify([_o(program, "1", answer=answer)])
    assert result.valid and result.outputs == ["{nan: 1, nan: 2}"] and result.correct is correct


@pytest.mark.parametrize(
    "program,answer,correct",
    [
        # the output is CPython's repr, and an answer is right when CPython's == says so
        ("def f(x):\n    return frozenset({x, 2})", "frozenset({1, 2})", True),
        ("def f(x):\n    return frozenset({x, 2})", "{1, 2}", True),
        ("def f(x):\n    return {x, 2}", "frozenset({2, 1})", True),
        ("def f(x):\n    return {x, 2}", "[1, 2]", False),
        ("from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f(x):\n    return P(x, 2)", "P(x=1, y=2)", True),
        ("from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f(x):\n    return P(x, 2)", "(1, 2)", True),
        ("from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f(x):\n    return P(x, 2)", "[1, 2]", False),
        ("from fractions import Fraction\ndef f(x):\n    return Fraction(x, 4)", "Fraction(1, 4)", True),
        ("from fractions import Fraction\ndef f(x):\n    return Fraction(x, 4)", "0.25", True),
        ("from fractions import Fraction\ndef f(x):\n    return Fraction(x, 3)", "0.3333333333333333", False),
        ("def f(x):\n    return bytearray(b'ab') * x", "bytearray(b'ab')", True),
        ("def f(x):\n    return bytearray(b'ab') * x", "b'ab'", True),
        ("def f(x):\n    return range(x, 4)", "range(1, 4)", True),
        ("def f(x):\n    return range(x, 4)", "[1, 2, 3]", False),
        ("import datetime\ndef f(x):\n    return datetime.date(2020, 1, 1) + datetime.timedelta(days=x)", "datetime.date(2020, 1, 2)", True),
        ("import datetime\ndef f(x):\n    return datetime.date(2020, 1, 1) + datetime.timedelta(days=x)", "'2020-01-02'", False),
        ("import datetime\ndef f(x):\n    return datetime.datetime(2020, 1, x)", "datetime.date(2020, 1, 1)", False),
    ],
)
def test_answers_are_judged_by_cpythons_equality(sandbox, program, answer, correct):
    [result] = sandbox.verify([_o(program, "1", answer=answer)])
    assert result.valid, result.detail
    assert result.correct is correct


def test_a_malformed_answer_says_why(sandbox):
    [result] = sandbox.verify([_o("def f(x):\n    return x", "1", answer="1 +")])
    assert result.valid and result.correct is False and result.answer_reason == "not_a_value"
    [result] = sandbox.verify([_o("def f(x):\n    return x", "1", answer="1")])
    assert result.correct is True and result.answer_reason is None


def test_a_code_i_answer_of_values_that_are_not_literals_is_not_a_value(sandbox):
    program = "def f(x):\n    return repr(x)"
    answers = ["Fraction(1, 2)", "P(x=1)", "range(0, 2)", "[1]"]
    records = [TaskRecord(id=a, type="code_i", program=program, inputs=["[1]"], answer=a) for a in answers]
    results = sandbox.verify(records)
    assert [r.answer_reason for r in results] == ["not_a_value"] * 3 + [None]
    assert results[-1].correct is True


def test_code_i_accepts_any_input_that_works(sandbox):
    program = "def f(xs):\n    return sorted(xs)[-1]"
    records = [
        TaskRecord(id="i", type="code_i", program=program, inputs=["[1, 9, 3]"], answer=a) for a in ("[9]", "[9, 1]", "[8]", "[1, 9, 3]", "9", "xs=[9]")
    ]
    assert [r.correct for r in sandbox.verify(records)] == [True, True, False, True, False, True]


def test_the_code_i_answers_of_one_task_are_judged_twice_in_other_company(sandbox):
    """A task's code_i answers are judged up to plan.EXTRAS in a job, at random places among
    its own inputs, and again in groups half as large: no answer meets the same company
    twice, so an escaped task that picks which answers pass by what else it sees is caught."""
    from popula.sandbox.plan import EXTRAS
    from popula.sandbox.pool import _Work

    program = "def f(x):\n    return x % 7"
    records = [TaskRecord(id=f"i{k}", type="code_i", program=program, inputs=["3", "12"], outputs=["3", "5"],
                          answer=str(k)) for k in range(2 * EXTRAS + 1)]
    work = _Work(records, Limits(), 10, 2, None, [1] * len(records))
    work.plan_more(len(records))
    first, second = zip(*(work.judgings[i] for i in range(len(records))))
    assert sorted(len(g.tasks) for g in {id(g): g for g in first}.values()) == [1, EXTRAS, EXTRAS]
    assert max(len(g.tasks) for g in second) == EXTRAS // 2
    assert all(a in b.after and set(b.tasks) != set(a.tasks) for a, b in zip(first, second) if len(a.tasks) > 1)
    assert [r.correct for r in sandbox.verify(records)] == [k % 7 == 3 for k in range(2 * EXTRAS + 1)]


def test_an_answer_that_breaks_its_shared_job_spoils_no_other(sandbox):
    # a job that fails as a whole (an exception, a timeout) is judged again answer by answer
    program = "def f(x):\n    while x == 0:\n        pass\n    return 12 // x"
    answers = ["3", "0", "'a'", "6"]
    records = [TaskRecord(id=a, type="code_i", program=program, inputs=["3"], outputs=["4"], answer=a) for a in answers]
    results = sandbox.verify(records)
    assert [(r.valid, r.correct, r.answer_reason) for r in results] == [
        (True, True, None), (True, False, "timeout"), (True, False, "runtime_error"), (True, False, None)]


def test_a_code_i_task_is_validated_and_judged_in_jobs_of_one_shape():
    # its inputs and plan.EXTRAS more argument lists: repeats of its own when validated, answers
    # (and repeats for the places left) when judged
    from popula.sandbox.plan import EXTRAS, judge_together, plan_record

    task = TaskRecord(id="i", type="code_i", program="def f(x):\n    return x", inputs=["1", "2", "3"])
    validated = plan_record(task, Limits())
    answers = [plan_record(TaskRecord(id="a", type="code_i", program=task.program, inputs=task.inputs,
                                      outputs=["1", "2", "3"], answer=a), Limits()) for a in ("7", "8")]
    (_, judged), slot, _ = judge_together(answers, Limits())
    assert validated.validate is not None and len(validated.validate[1]) == len(judged) == 3 + EXTRAS
    assert [slot.extras[k] for k in slot.answers] == ["7", "8"]


@pytest.mark.parametrize(
    "answer",
    [
        "next(k for k in range(10007) if f(k) == 7)",  # searches with the task's own f
        "*[k for k in range(100) if f(k) == 7]",
        "type('X', (), {'__eq__': lambda s, o: True})()",  # an object that equals anything
        "globals().update(f=lambda x: 7) or 0",  # rewrites the task's globals
        "list(range(3))",
        "1), (2",  # smuggles a second argument list
        "**{'x': 3}",
    ],
)
def test_a_code_i_answer_must_be_literal_arguments_and_is_never_run(sandbox, answer):
    record = TaskRecord(id="i", type="code_i", program="def f(x):\n    return x * 7 % 10007", inputs=["1"], answer=answer)
    [result] = sandbox.verify([record])
    assert result.valid and result.correct is False and result.answer_reason == "not_a_value"


@pytest.fixture(scope="module")
def strict():
    with Sandbox(workers=2, limits=Limits(wall_s=1.0), determinism_runs=STRICT_RUNS) as sb:
        yield sb


def test_judging_a_code_i_answer_gives_the_same_verdict_every_time(strict):
    # right for one string hash seed in two: a coin flip on the student's input only. The
    # coin is the task's, not the answer's: the task is invalid (its teacher pays), every time
    program = "def f(x):\n    if x == 'coin':\n        return list({'a', 'b'})[0]\n    return 'a'"
    record = TaskRecord(id="i", type="code_i", program=program, inputs=["'x'"], outputs=["'a'"], answer="'coin'")
    results = strict.verify([record] * 4)
    assert {(r.valid, r.reason) for r in results} == {(False, "nondeterministic")}
    assert all("in one judging run" in r.detail for r in results)


def test_judging_a_code_i_answer_that_reads_hash_bits_gives_the_same_verdict_every_time(strict):
    program = "def f(x):\n    if x == 1:\n        h = hash('k')\n        return (h ^ (h >> 1)) & 1\n    return 0"
    record = TaskRecord(id="i", type="code_i", program=program, inputs=["0"], outputs=["0"], answer="1")
    results = strict.verify([record] * 4)
    assert {(r.valid, r.reason) for r in results} == {(False, "nondeterministic")}


def test_code_f_is_judged_on_the_hidden_half(sandbox):
    program = "def f(x):\n    return abs(x)"
    inputs = ["1", "2", "3", "-4", "-5", "6"]
    shown_only = "def f(x):\n    return x if x < 4 else -x"  # right on the shown half, wrong on the hidden
    hidden_only = "def f(x):\n    return -x if x < 0 else x if x > 3 else 0"  # wrong on shown, right on hidden
    records = [TaskRecord(id="f", type="code_f", program=program, inputs=inputs, answer=a) for a in (shown_only, hidden_only)]
    assert [r.correct for r in sandbox.verify(records)] == [False, True]


def test_validated_records_are_judged_without_running_the_task_again(sandbox):
    records = [_o("def f(x):\n    return x", "1", answer=str(i % 3), outputs=["1"]) for i in range(300)]
    before = sum(w.jobs_done for w in sandbox._slots if w is not None)
    results = sandbox.verify(records)
    after = sum(w.jobs_done for w in sandbox._slots if w is not None)
    assert after == before  # literal code_o answers need no process at all
    assert [r.correct for r in results] == [i % 3 == 1 for i in range(300)]


def test_validated_code_f_runs_only_the_student_program(sandbox):
    record = TaskRecord(
        id="f", type="code_f", program="this is not even python", inputs=["1", "2"], outputs=["10", "20"], answer="def f(x):\n    return 10 * x"
    )
    [result] = sandbox.verify([record])
    assert result.valid and result.correct is True and result.outputs == ["10", "20"]


@pytest.mark.parametrize(
    "program,inp",
    [
        ("def f(words):\n    return sorted(set(words))", "['pear', 'apple', 'fig']"),
        ("def f(words):\n    return set(words)", "['pear', 'apple', 'fig', 'kiwi']"),  # a set is one value
        ("def f(n):\n    return hash(n)", "12345"),  # int hashes do not depend on the seed
        ("def f(s):\n    return len({hash(s), hash(s)})", "'x'"),
    ],
)
def test_deterministic_uses_of_sets_and_hashes_are_valid(sandbox, program, inp):
    [result] = sandbox.verify([_o(program, inp)])
    assert result.valid, result.detail


def test_jobs_sharing_a_process_cannot_poison_each_other(sandbox):
    poisoners = [
        "import decimal\ndef f(x):\n    decimal.getcontext().prec = 2\n    return 1",
        "import collections\ndef f(x):\n    try:\n        collections.Counter.most_common = None\n    except TypeError:\n        pass\n    return 1",
        "import string\ndef f(x):\n    string.digits = 'abc'\n    return 1",
        "import keyword\ndef f(x):\n    keyword.kwlist.append('popula')\n    return 1",
    ]
    victims = [
        ("from decimal import Decimal\ndef f(x):\n    return str(Decimal(1) / Decimal(3))", repr(str(__import__("decimal").Decimal(1) / __import__("decimal").Decimal(3)))),
        ("from collections import Counter\ndef f(x):\n    return Counter('aab').most_common(1)", "[('a', 2)]"),
        ("import string\ndef f(x):\n    return string.digits", "'0123456789'"),
        ("import keyword\ndef f(x):\n    return 'popula' in keyword.kwlist", "False"),
    ]
    records = []
    for _ in range(10):
        for poisoner, (victim, _expected) in zip(poisoners, victims):
            records.append(_o(poisoner, "0"))
            records.append(_o(victim, "0"))
    results = sandbox.verify(records)
    for k, result in enumerate(results[1::2]):
        assert result.valid and result.outputs == [victims[k % len(victims)][1]], result


def test_a_closed_sandbox_refuses_work():
    sb = Sandbox(workers=1)
    sb.close()
    with pytest.raises(RuntimeError):
        sb.verify([_o("def f(x):\n    return x", "1")])


def test_one_worker_still_runs_each_task_in_two_processes():
    with Sandbox(workers=1) as sb:
        [result] = sb.verify([_o("def f(s):\n    return hash(s)", "'abc'")])
    assert result.reason == "nondeterministic"


def test_workers_are_recycled_and_keep_serving():
    records = [_o("def f(x):\n    return [x] * 2", str(i)) for i in range(60)]
    with Sandbox(workers=2, recycle_after=10) as sb:
        first = {w.pid for w in sb._slots if w is not None}
        results = sb.verify(records) + sb.verify(records)
        last = {w.pid for w in sb._slots if w is not None}
    assert first.isdisjoint(last)
    assert all(r.valid for r in results)
    assert [r.outputs for r in results[:60]] == [[repr([i, i])] for i in range(60)]


def test_a_killed_worker_is_replaced_and_its_work_redone():
    import os
    import signal
    import threading
    import time

    slow = "def f(x):\n    n = 0\n    for i in range(300000):\n        n += i % 7\n    return n + x"
    records = [_o(slow, str(i)) for i in range(40)]
    with Sandbox(workers=2) as sb:
        victim = sb._slots[0]
        os.kill(victim.proc.pid, signal.SIGKILL)  # dies while idle
        victim.proc.wait()
        timer = threading.Timer(0.3, lambda: os.kill(sb._slots[1].proc.pid, signal.SIGKILL))  # and one mid-batch
        timer.start()
        start = time.monotonic()
        results = sb.verify(records)
        timer.join()
    expected = sum(i % 7 for i in range(300000))
    assert [r.outputs for r in results] == [[repr(expected + i)] for i in range(40)]
    assert time.monotonic() - start < 60


@pytest.mark.slow
def test_a_dead_worker_takes_its_running_child_along():
    import os
    import signal
    import time
    from pathlib import Path

    def children_of(pid: int) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        return found

    import threading

    with Sandbox(workers=1, limits=Limits(cpu_s=1, wall_s=1.5)) as sb:
        worker = sb._slots[0]
        spin = _o("def f(x):\n    while True:\n        pass", "0")
        thread = threading.Thread(target=lambda: sb.verify([spin]))
        thread.start()
        deadline = time.monotonic() + 5
        while not children_of(worker.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        [child] = children_of(worker.proc.pid)
        os.kill(worker.proc.pid, signal.SIGKILL)
        time.sleep(0.3)
        assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        thread.join(timeout=30)


def test_getattr_family_treats_private_names_as_missing(sandbox):
    program = (
        "def f(x):\n"
        "    name = '_' + 'secret'\n"
        "    return (hasattr(x, '__len__'), hasattr(x, name), getattr(x, name, 'none'), getattr(x, 'count')(1))"
    )
    [result] = sandbox.verify([_o(program, "[1, 2]")])
    assert result.valid and result.outputs == ["(True, False, 'none', 1)"]


def test_an_oversized_answer_is_malformed_without_being_parsed(sandbox):
    [result] = sandbox.verify([_o("def f(x):\n    return x", "1", answer="[" + "1, " * 20_000 + "]")])
    assert result.valid and result.correct is False and result.answer_reason == "syntax"


def test_a_result_bigger_than_the_pipe_comes_back_whole(sandbox):
    # eight 9,000-character outputs: more than a pipe holds, so the job's process blocks on
    # its write until its parent stops waiting for its exit and reads (zygote._supervise)
    inputs = [str(9_000 + i) for i in range(8)]
    record = TaskRecord(id="f", type="code_f", program="def f(n):\n    return 'x' * n", inputs=inputs)
    [result] = sandbox.verify([record])
    assert result.valid and result.outputs == [repr("x" * int(n)) for n in inputs]


def test_a_slow_job_is_read_after_the_parents_patience(sandbox):
    program = "def f(n):\n    t = 0\n    for i in range(n):\n        t += i % 7\n    return t"
    [result] = sandbox.verify([_o(program, "300000")])
    assert result.valid and result.outputs == [repr(sum(i % 7 for i in range(300000)))]


def _holds(pid: int, marker: bytes) -> bool:
    """Whether `marker` is anywhere in the readable memory of process `pid`."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                if marker in mem.read(end - start):
                    return True
            except (OSError, OverflowError, ValueError):
                continue
    return False


def test_a_student_worker_never_holds_a_students_program(sandbox):
    """Students' programs go to the student workers sealed (a memfd each, read only by the job's
    own jailed process): no worker holds one, so a program that escaped the policy could copy
    no other student's answer from its memory."""
    marker = b"sealed-" + os.urandom(8).hex().encode()
    answer = f"def f(x):\n    note = {marker.decode()!r}\n    return abs(x)"
    inputs = ["1", "-2", "3", "-4"]
    records = [TaskRecord(id=f"f{k}", type="code_f", program="def f(x):\n    return abs(x)", inputs=inputs,
                          outputs=["1", "2", "3", "4"], answer=answer) for k in range(6)]
    assert all(r.correct for r in sandbox.verify(records))
    students = [w for w in sandbox._slots if w is not None and w.lane == "student"]
    assert students
    try:
        assert _holds(os.getpid(), marker)  # the scan finds it where it is: in this process
        assert not any(_holds(w.pid, marker) for w in students)
    except PermissionError:
        pytest.skip("cannot read another process's memory here")


def test_full_batches_of_sealed_jobs_leave_every_job_its_result_pipe():
    """A batch parent may open fds below 16 only (RLIMIT_NOFILE): a full batch of sealed jobs
    must not take those numbers. A pool in a busy process (a trainer, pytest) passes its
    pipes at high numbers, so the worker's low numbers go to the sealed jobs' fds."""
    busy = [os.open(os.devnull, os.O_RDONLY) for _ in range(200)]
    try:
        records = [TaskRecord(id=f"f{k}", type="code_f", program="def f(x):\n    return abs(x)", inputs=["1", "-2", "3", "-4"],
                              outputs=["1", "2", "3", "4"], answer="def f(x):\n    return abs(x)") for k in range(200)]
        with Sandbox(workers=1, limits=Limits(wall_s=1.5)) as sb:
            results = sb.verify(records)
        assert [r.answer_detail for r in results if not r.correct] == []
    finally:
        for fd in busy:
            os.close(fd)
