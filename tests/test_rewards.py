"""Rewards are the contract between the verifier and the learner: every branch is pinned."""

import math

import pytest

from popula.rewards import (
    MALFORMED_ANSWER_REWARD,
    shared_teacher_reward,
    solve_rate,
    student_reward,
    teacher_reward,
)


class TestTeacherReward:
    def test_invalid_task_costs_the_teacher_one(self):
        assert teacher_reward(valid=False, rho=None) == -1.0

    def test_invalid_task_costs_one_whatever_rho_is_passed(self):
        assert teacher_reward(valid=False, rho=0.5) == -1.0

    def test_a_run_may_set_another_invalid_task_penalty_without_touching_valid_tasks(self):
        assert teacher_reward(valid=False, rho=None, invalid=-0.25) == -0.25
        assert teacher_reward(valid=True, rho=0.25, invalid=-0.25) == pytest.approx(0.75)

    def test_task_no_rollout_solves_earns_nothing(self):
        assert teacher_reward(valid=True, rho=0.0) == 0.0

    @pytest.mark.parametrize("rho, expected", [(0.25, 0.75), (0.5, 0.5), (0.875, 0.125)])
    def test_solvable_task_earns_one_minus_solve_rate(self, rho, expected):
        assert teacher_reward(valid=True, rho=rho) == pytest.approx(expected)

    def test_task_every_rollout_solves_earns_nothing(self):
        assert teacher_reward(valid=True, rho=1.0) == 0.0

    def test_hardest_solvable_task_earns_almost_one(self):
        assert teacher_reward(valid=True, rho=1 / 16) == pytest.approx(15 / 16)

    def test_a_task_its_student_never_solves_but_another_does_earns_one(self):
        assert teacher_reward(valid=True, rho=0.0, solvable=True) == 1.0

    def test_another_students_solve_changes_nothing_the_matched_student_solved(self):
        assert teacher_reward(valid=True, rho=0.25, solvable=True) == pytest.approx(0.75)
        assert teacher_reward(valid=True, rho=1.0, solvable=True) == 0.0

    def test_a_run_may_make_a_task_every_rollout_solves_pay_less_than_an_unsolved_one(self):
        assert teacher_reward(valid=True, rho=1.0, solved=-0.5) == -0.5
        assert teacher_reward(valid=True, rho=0.0, solved=-0.5) == 0.0  # too hard still pays the floor
        assert teacher_reward(valid=True, rho=0.875, solved=-0.5) == pytest.approx(0.125)
        assert teacher_reward(valid=False, rho=None, solved=-0.5) == -1.0

    def test_a_run_may_make_both_ends_pay_alike(self):
        both = dict(solved=-0.5, unsolved=-0.5)
        assert teacher_reward(valid=True, rho=0.0, **both) == teacher_reward(valid=True, rho=1.0, **both) == -0.5
        assert teacher_reward(valid=True, rho=0.5, **both) == pytest.approx(0.5)  # between the ends: 1 - rho
        assert teacher_reward(valid=True, rho=0.0, solvable=True, **both) == 1.0  # another student solved it
        assert teacher_reward(valid=False, rho=None, **both) == -1.0

    def test_an_invalid_task_costs_its_penalty_however_solvable(self):
        assert teacher_reward(valid=False, rho=None, solvable=True) == -1.0

    @pytest.mark.parametrize("rho", [None, -0.1, 1.5, math.nan])
    def test_valid_task_without_a_proper_solve_rate_is_a_bug(self, rho):
        with pytest.raises(ValueError):
            teacher_reward(valid=True, rho=rho)


class TestStudentReward:
    def test_correct_answer_earns_one(self):
        assert student_reward(well_formed=True, correct=True) == 1.0

    def test_wrong_answer_earns_nothing(self):
        assert student_reward(well_formed=True, correct=False) == 0.0

    def test_answer_that_failed_to_run_counts_as_wrong(self):
        assert student_reward(well_formed=True, correct=None) == 0.0

    def test_a_malformed_answer_earns_what_a_wrong_one_does_no_format_penalty(self):
        # A penalty would give every well-formed wrong answer a positive advantage in a group
        # where nothing is right (the design's reward: 1 for a correct well-formed answer).
        assert student_reward(well_formed=False, correct=None) == MALFORMED_ANSWER_REWARD == 0.0


class TestSolveRate:
    def test_is_the_fraction_of_correct_rollouts(self):
        assert solve_rate([True, False, True, True]) == 0.75

    def test_needs_rollouts(self):
        with pytest.raises(ValueError):
            solve_rate([])


def test_a_shared_reward_is_divided_among_its_niche():
    assert shared_teacher_reward(0.6, 1) == 0.6  # a new form keeps its whole reward
    assert shared_teacher_reward(0.6, 3) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        shared_teacher_reward(0.6, 0)


def test_with_a_penalty_a_form_repeated_often_costs_as_much_as_an_invalid_task():
    assert shared_teacher_reward(0.0, 1, penalty=0.1) == 0.0  # a new form is never penalised
    assert shared_teacher_reward(0.0, 4, penalty=0.1) == pytest.approx(-0.3)  # solved always, posed 3 times before
    assert shared_teacher_reward(0.6, 3, penalty=0.1) == pytest.approx(0.2 - 0.2)
    assert shared_teacher_reward(0.5, 30, penalty=0.1) == -1.0  # no worse than a task that fails to run
    assert shared_teacher_reward(0.5, 30, penalty=0.1, floor=-0.5) == -0.5  # rewards.invalid_task
