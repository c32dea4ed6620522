"""The metrics row separates the complexity of what the teachers wrote from what the executor let through."""

from __future__ import annotations

from pathlib import Path

import pytest

from popula.adapters.ref import AdapterRef
from popula.engines.base import Sample
from popula.records import TaskRecord, VerifyResult
from popula.run.selfplay import Proposal, StepGame
from popula.run.step_metrics import step_row

SHALLOW = "def f(x):\n    return x + 1"
DEEP = "def f(x):\n    if x > 0:\n        for i in range(x):\n            if i % 2:\n                x = x + (i * (i - 1))\n    return x"


def proposal(program: str | None, valid: bool) -> Proposal:
    task = None if program is None else TaskRecord(id="t", type="code_o", program=program, inputs=["1"])
    verdict = None if program is None else VerifyResult(id="t", valid=valid, reason=None if valid else "runtime_error")
    return Proposal(teacher="T0", task_type="code_o", prompt_ids=[1], sample=Sample([2], program or "", [-0.1], "stop"),
                    adapter=AdapterRef("T0", 0, 0, Path(".")), task=task, verdict=verdict)


def row(*proposals: Proposal) -> dict:
    return step_row(1, StepGame(list(proposals), []), {}, [], wall_s=0.0, phases={})


def test_rejected_programs_are_measured_apart_from_valid_ones():
    got = row(proposal(SHALLOW, valid=True), proposal(DEEP, valid=False), proposal("def f(:", valid=False),
              proposal(None, valid=False))
    assert got["valid_rate"] == 0.25
    shallow, deep = row(proposal(SHALLOW, True))["ast_depth"], row(proposal(DEEP, True))["ast_depth"]
    assert deep > shallow
    # only the program that parses counts among the rejected; the unparseable and the missing are skipped
    assert got["ast_depth"] == shallow and got["invalid_ast_depth"] == deep


def test_a_step_with_no_rejected_program_has_no_invalid_depth():
    assert row(proposal(SHALLOW, valid=True))["invalid_ast_depth"] is None


def test_the_row_reports_the_mean_depth_of_the_references_the_teachers_were_shown():
    shown_deep, shown_shallow, shown_none = (proposal(SHALLOW, True) for _ in range(3))
    shown_deep.reference_depth, shown_shallow.reference_depth = 7.0, 5.0
    assert row(shown_deep, shown_shallow, shown_none)["reference_depth"] == 6.0  # a proposal shown none is skipped
    assert row(shown_none)["reference_depth"] is None


def test_student_entropy_is_the_mean_negative_log_prob_over_every_answer_token():
    from popula.run.step_metrics import sampled_entropy

    answers = [Sample([5, 6, 7], "", [-0.5, -1.0, -1.5], "stop"), Sample([8], "", [-3.0], "stop")]
    assert sampled_entropy(answers) == (0.5 + 1.0 + 1.5 + 3.0) / 4  # token-weighted, not a mean of answers
    assert sampled_entropy([]) is None
    assert row(proposal(SHALLOW, True))["student_entropy"] is None  # a step no student answered


def test_the_students_entropy_bonus_is_their_mean_coefficient_and_absent_without_one():
    learn = {"adapters": {"T0": {"entropy_coef": 0.0}, "S0": {"entropy_coef": 0.01}, "S1": {"entropy_coef": 0.03}}}
    game = StepGame([proposal(SHALLOW, True)], [])
    assert step_row(1, game, learn, [], wall_s=0.0, phases={})["student_entropy_coef"] == pytest.approx(0.02)
    assert row(proposal(SHALLOW, True))["student_entropy_coef"] is None


def test_completion_lengths_say_how_long_each_role_writes_and_how_often_it_hits_its_cap():
    from popula.run.step_metrics import completion_lengths

    samples = [Sample([1] * 3, "", [-0.1] * 3, "stop"), Sample([1] * 8, "", [-0.1] * 8, "length")]
    assert completion_lengths(samples) == {"mean": 5.5, "max": 8, "capped": 0.5}
    assert completion_lengths([]) is None
    assert row(proposal(SHALLOW, True))["completion_tokens"] == {
        "teacher": {"mean": 1.0, "max": 1, "capped": 0.0}, "student": None}
