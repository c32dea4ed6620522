"""Fitness sharing: a teacher's reward for a task is divided among the recent tasks of the same form."""

from __future__ import annotations

from pathlib import Path

import pytest

from popula.adapters.ref import AdapterRef
from popula.engines.base import Sample
from popula.novelty import distinct_form_rate, niche_counts, program_form
from popula.records import TaskRecord, VerifyResult
from popula.run.buffer import TaskBuffer
from popula.run.selfplay import Proposal, StepGame, _share
from popula.run.step_metrics import step_row

ADD3 = "def f(a):\n    return a + 3"
ADD7 = "def f(x):\n    return x + 7"
SUM = "def f(a):\n    return sum(a)"
MAX = "def f(a):\n    return max(a)"
LOOP = "def f(a):\n    total = 0\n    for x in a:\n        total += x * 2\n    return total"


def test_renamed_variables_and_other_literals_are_one_form():
    assert program_form(ADD3) == program_form(ADD7)
    assert program_form(ADD3) == program_form('def f(b):\n    "adds"\n    return b + 11')  # a docstring is not structure


def test_other_builtins_or_other_structure_are_other_forms():
    assert len({program_form(p) for p in (ADD3, SUM, MAX, LOOP, "def f(a):\n    return a + 'x'")}) == 5


def test_a_builtin_rebound_as_a_variable_is_renamed_like_any_variable():
    assert program_form("def f(sum):\n    return sum + 1") == program_form("def f(n):\n    return n + 1")


def test_a_program_that_does_not_parse_is_its_own_form():
    assert program_form("def f(:") != program_form("def f(::")


def test_niche_counts_copies_in_the_step_and_in_the_window():
    assert niche_counts([ADD3, ADD7, SUM], window_programs=[ADD3, MAX, LOOP]) == [3, 3, 1]
    assert niche_counts([LOOP], window_programs=[]) == [1]


def test_distinct_form_rate():
    assert distinct_form_rate([ADD3, ADD7, SUM, MAX]) == 0.75
    assert distinct_form_rate([]) is None


def proposal(program: str, task_type: str = "code_o", valid: bool = True, reward: float = 0.5) -> Proposal:
    task = TaskRecord(id="t", type=task_type, program=program, inputs=["1"])
    p = Proposal(teacher="T0", task_type=task_type, prompt_ids=[1], sample=Sample([2], program, [-0.1], "stop"),
                 adapter=AdapterRef("T0", 0, 0, Path(".")), task=task,
                 verdict=VerifyResult(id="t", valid=valid, reason=None if valid else "runtime_error"))
    p.reward = reward if valid else -1.0
    return p


@pytest.fixture
def buffer(tmp_path: Path) -> TaskBuffer:
    buffer = TaskBuffer(tmp_path / "tasks.jsonl", capacity=100)
    old = [TaskRecord(id=f"old{i}", type="code_o", program=p, inputs=["1"]) for i, p in enumerate((ADD3, ADD3, SUM))]
    buffer.add(old, step=1, teacher="T1", rhos=[0.5, 0.5, 0.5])
    return buffer


def test_sharing_divides_a_repeats_reward_by_its_niche_and_leaves_a_new_form_whole(buffer):
    repeat, new, invalid, other_type = (proposal(ADD7), proposal(LOOP), proposal(MAX, valid=False),
                                        proposal(ADD3, task_type="code_i"))
    _share(StepGame([repeat, new, invalid, other_type], []), buffer, window=10)
    assert (repeat.niche, repeat.reward) == (3, pytest.approx(0.5 / 3))  # itself + the buffer's two
    assert (new.niche, new.reward) == (1, 0.5)
    assert invalid.reward == -1.0  # an invalid task is not shared: its -1 is the design's
    assert (other_type.niche, other_type.reward) == (1, 0.5)  # niches are per task type


def test_with_a_penalty_a_repeat_the_students_always_solve_costs_its_teacher(buffer):
    solved_repeat, new = proposal(ADD7, reward=0.0), proposal(LOOP, reward=0.0)
    _share(StepGame([solved_repeat, new], []), buffer, window=10, penalty=0.1, floor=-1.0)
    assert solved_repeat.reward == pytest.approx(-0.2)  # division alone would leave it at 0
    assert new.reward == 0.0


def test_the_window_counts_only_the_newest_buffered_tasks(buffer):
    repeat = proposal(ADD3)
    _share(StepGame([repeat], []), buffer, window=1)  # the newest one is SUM
    assert repeat.niche == 1


def test_the_metrics_row_reports_how_varied_the_valid_tasks_are():
    game = StepGame([proposal(ADD3), proposal(ADD7), proposal(SUM), proposal(MAX, valid=False)], [])
    assert step_row(1, game, {}, [], wall_s=0.0, phases={})["distinct_forms"] == pytest.approx(2 / 3)
