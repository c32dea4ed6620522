"""Rewards: the one place where verifier outcomes become numbers for the learner.

Teacher reward (PopuLoRA, docs/design.md § What the sources say) for one proposed task p with student solve rate rho:

    -1          p fails to parse, execute, or is nondeterministic (also: a proposal the
                teacher wrote so badly that no task could be read out of it)
     0          rho == 0: no rollout of the matched student solves it (the zero floor:
                an impossible or degenerate task earns nothing, so teachers gain nothing
                by posing unsolvable puzzles)
     1 - rho    otherwise: the harder the task for this student, the better, as long as
                it is solvable at all

Student reward for one rollout:

     1          the answer is well formed and the sandbox judges it correct
     0          the answer is well formed but wrong (or fails to run)
    -0.5        no answer could be parsed from the completion (malformed): a format
                penalty, so a student gains nothing by rambling instead of answering,
                yet is punished less than a teacher's invalid task, since a wrong answer
                and a missing one are both still just failures to solve
"""

from __future__ import annotations

import math
from collections.abc import Sequence

INVALID_TASK_REWARD = -1.0
UNSOLVED_TASK_REWARD = 0.0
CORRECT_ANSWER_REWARD = 1.0
WRONG_ANSWER_REWARD = 0.0
MALFORMED_ANSWER_REWARD = -0.5


def solve_rate(correct: Sequence[bool]) -> float:
    """rho: the fraction of a student's rollouts on one task that the sandbox accepted."""
    if not correct:
        raise ValueError("solve_rate needs at least one rollout")
    return sum(bool(c) for c in correct) / len(correct)


def teacher_reward(valid: bool, rho: float | None) -> float:
    """The teacher's reward for one task: -1 invalid, 0 unsolved, 1 - rho otherwise.

    `rho` may be None only for an invalid task (students never see those).
    """
    if not valid:
        return INVALID_TASK_REWARD
    if rho is None or math.isnan(rho) or not 0.0 <= rho <= 1.0:
        raise ValueError(f"a valid task needs a solve rate in [0, 1], got {rho!r}")
    if rho == 0.0:
        return UNSOLVED_TASK_REWARD
    return 1.0 - rho


def student_reward(well_formed: bool, correct: bool | None) -> float:
    """The student's reward for one rollout: 1 correct, 0 wrong, -0.5 malformed."""
    if not well_formed:
        return MALFORMED_ANSWER_REWARD
    return CORRECT_ANSWER_REWARD if correct else WRONG_ANSWER_REWARD
