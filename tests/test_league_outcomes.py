"""How a teacher-student match's task results become one TrueSkill game."""

import pytest

from popula.league import TaskResult, tally, task_point


@pytest.mark.parametrize(
    ("task", "point"),
    [
        (TaskResult(valid=False), "student"),  # invalid: the teacher loses (reward -1)
        (TaskResult(valid=False, rho=1.0), "student"),  # ... whatever rho says
        (TaskResult(valid=True, rho=0.0), None),  # zero floor: no game, not a teacher win
        (TaskResult(valid=True, rho=0.0, solvable=True), "teacher"),  # another student solved it: fair
        (TaskResult(valid=True, rho=1.0, solvable=True), "student"),
        (TaskResult(valid=False, solvable=True), "student"),
        (TaskResult(valid=True, rho=0.25), "teacher"),  # fair and mostly failed
        (TaskResult(valid=True, rho=0.5), "draw"),
        (TaskResult(valid=True, rho=0.75), "student"),  # solved in most rollouts
        (TaskResult(valid=True, rho=1.0), "student"),
    ],
)
def test_each_task_counts_for_the_side_the_teacher_reward_favours(task, point):
    assert task_point(task) == point


def test_the_side_with_more_task_points_wins_the_match():
    t = TaskResult(True, 0.25)
    s = TaskResult(True, 0.75)
    assert tally([t, t, s]).result == "teacher"
    assert tally([t, s, s, TaskResult(False)]).result == "student"


def test_equal_points_or_only_draws_make_a_drawn_match():
    assert tally([TaskResult(True, 0.25), TaskResult(True, 1.0)]).result == "draw"
    assert tally([TaskResult(True, 0.5)]).result == "draw"


def test_a_match_of_only_unsolved_tasks_is_not_rated():
    result = tally([TaskResult(True, 0.0)] * 5)
    assert result.result == "none"
    assert (result.tasks, result.unrated) == (5, 5)
    assert tally([]).result == "none"


def test_unsolved_tasks_do_not_tip_a_match_towards_the_teacher():
    # One task the student solves outweighs any number of tasks nobody solved.
    result = tally([TaskResult(True, 0.0)] * 7 + [TaskResult(True, 1.0)])
    assert result.result == "student"


def test_tally_counts_every_kind_of_task():
    result = tally(
        [TaskResult(False), TaskResult(True, 0.0), TaskResult(True, 0.25), TaskResult(True, 0.5), TaskResult(True, 1.0)]
    )
    assert (result.tasks, result.teacher_points, result.student_points, result.draws, result.unrated) == (5, 1, 2, 1, 1)


@pytest.mark.parametrize("rho", [None, -0.1, 1.5])
def test_a_valid_task_needs_a_solve_fraction_in_0_1(rho):
    with pytest.raises(ValueError):
        TaskResult(valid=True, rho=rho)
