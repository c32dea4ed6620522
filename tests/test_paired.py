"""Paired comparisons: a difference between two models is measured task by task on the same tasks."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from popula.errors import PopulaError
from popula.eval.evaluate import TaskScore
from popula.eval.paired import mean_report, paired_difference, per_task_pass1, per_task_pass_at_k


def report(correct: dict[str, int], samples: int = 4) -> dict:
    """A `popula eval --json --per-task` object with the given correct counts per task id."""
    tasks = [asdict(TaskScore(task_id, "code_o", samples, samples, c)) for task_id, c in correct.items()]
    return {"model": "tiny", "adapter": "S0", "per_task": tasks}


def test_a_model_against_itself_differs_by_nothing_on_every_task():
    r = report({"a": 1, "b": 3, "c": 0})
    diff = paired_difference([r, r], [r, r])
    assert (diff.mean, diff.task_se, diff.seed_sd) == (0.0, 0.0, 0.0)
    assert (diff.better_tasks, diff.worse_tasks, diff.tasks) == (0, 0, 3)


def test_the_difference_is_averaged_per_task_over_seeds_and_its_two_spreads_are_reported_apart():
    base = report({"a": 0, "b": 0, "c": 0, "d": 0})
    seed0 = report({"a": 4, "b": 0, "c": 0, "d": 0})  # +1.0 on one task of four: +0.25
    seed1 = report({"a": 2, "b": 2, "c": 0, "d": 0})  # +0.5 on two tasks: +0.25
    diff = paired_difference([seed0, seed1], [base, base])
    assert diff.per_seed == [0.25, 0.25]
    assert diff.mean == pytest.approx(0.25)
    assert diff.seed_sd == 0.0  # both seeds gained the same
    # seed-averaged per-task differences 0.75, 0.25, 0, 0: mean 0.25, sd 0.3536, se sd / 2
    assert diff.task_se == pytest.approx(0.35355339 / 2)
    assert (diff.better_tasks, diff.worse_tasks) == (2, 0)


def test_seeds_that_disagree_show_in_the_seed_spread_not_in_the_mean_alone():
    base = report({"a": 2, "b": 2})
    up, down = report({"a": 4, "b": 4}), report({"a": 0, "b": 0})
    diff = paired_difference([up, down], [base, base])
    assert diff.mean == 0.0 and diff.per_seed == [0.5, -0.5]
    assert diff.seed_sd == pytest.approx(0.70710678)
    assert "per seed +0.500, -0.500" in diff.describe()


def test_reports_on_different_tasks_cannot_be_paired():
    with pytest.raises(PopulaError, match="different tasks"):
        paired_difference([report({"a": 1, "b": 1})], [report({"a": 1, "c": 1})])


def test_a_report_without_per_task_counts_says_how_to_get_them():
    with pytest.raises(PopulaError, match="--per-task"):
        per_task_pass1({"model": "tiny", "adapter": None, "overall": {"pass_at_1": 0.2}})


def test_each_seed_needs_its_own_partner():
    r = report({"a": 1})
    with pytest.raises(PopulaError, match="one B report per A report"):
        paired_difference([r, r], [r])


def test_pass_at_k_pairs_the_tasks_solved_at_least_once_where_pass1_counts_every_sample():
    sharp = dict(report({"a": 4, "b": 0, "c": 0}), k=4)  # all on one task
    spread = dict(report({"a": 1, "b": 1, "c": 1}), k=4)  # once on each
    assert paired_difference([sharp], [spread]).mean == pytest.approx(1 / 12)
    assert paired_difference([sharp], [spread], per_task_pass_at_k).mean == pytest.approx(-2 / 3)


def test_a_population_mean_scores_each_task_by_its_members_mean_pass1_or_pass_at_k():
    members = [{**report({"a": 4, "b": 0}), "k": 4}, {**report({"a": 2, "b": 1}), "k": 4}]
    assert per_task_pass1(mean_report(members, "pop")) == {"a": 0.75, "b": 0.125}
    # pass@4 of 4 samples: 1.0 as soon as one sample is right
    assert per_task_pass1(mean_report(members, "pop", per_task_pass_at_k)) == {"a": 1.0, "b": 0.5}
    one = {**report({"a": 1, "b": 0}), "k": 4}
    diff = paired_difference([mean_report(members, "pop", per_task_pass_at_k)], [mean_report([one], "base", per_task_pass_at_k)])
    assert diff.mean == pytest.approx(0.25)  # (1.0 - 1.0 + 0.5 - 0.0) / 2
