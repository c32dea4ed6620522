"""How one teacher-student match becomes (at most) one rated game.

The rule follows the teacher reward (-1 invalid, 0 if rho = 0, 1 - rho otherwise), so the
rating and the reward never disagree about who did well:

Per task (``valid``, ``rho`` = fraction of the student's rollouts that solve it):

* invalid task                  -> **student** point. The teacher failed its own job (the
  reward is -1), whatever the student did.
* valid, rho == 0               -> **no point** for anyone (the zero floor). Nobody solved
  it, so we cannot tell a hard-but-fair task from an impossible or degenerate one. Counting
  it as a teacher win would pay teachers for unsolvable programs, exactly what the zero
  floor forbids; counting it as a draw would drag a strong teacher's rating toward a weak
  student's, which is evidence we do not have. So it is no game.
* valid, 0 < rho < 1/2          -> **teacher** point: a fair task (someone solved it) that
  the student mostly failed; the teacher reward 1 - rho exceeds 1/2.
* valid, rho == 1/2             -> **draw** (half a point each): teacher reward and student
  solve rate are equal.
* valid, rho > 1/2              -> **student** point: the student solves it in most rollouts.

Per match: the side with more points wins one rated game; equal points make a draw;
a match with no points at all (only rho = 0 tasks, or no tasks) is not rated. One game
per match, not one per task, because the tasks of a match come from the same pair in the
same step and are strongly correlated: rating each as an independent game would shrink
sigma after a single step and make PFSP overconfident.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

Side = Literal["teacher", "student", "draw"]
Result = Literal["teacher", "student", "draw", "none"]


@dataclass(frozen=True)
class TaskResult:
    """What the verifier says about one task of a match.

    ``rho`` is the fraction of the student's rollouts that solved the task; it is only
    meaningful (and required) for a valid task. ``solvable``: another student solved it
    (``rewards.solvable_by: population``), so rho = 0 is a fair task the student failed.
    """

    valid: bool
    rho: float | None = None
    solvable: bool = False

    def __post_init__(self) -> None:
        if self.valid:
            if self.rho is None:
                raise ValueError("a valid task needs rho (the student's solve fraction)")
            if not 0.0 <= float(self.rho) <= 1.0:
                raise ValueError(f"rho must lie in [0, 1], got {self.rho!r}")


def task_point(task: TaskResult) -> Side | None:
    """The side one task counts for, or None for a zero-floor task (rho = 0, solved by nobody)."""
    if not task.valid:
        return "student"
    rho = float(task.rho)  # type: ignore[arg-type]  # checked in TaskResult
    if rho == 0.0:
        return "teacher" if task.solvable else None
    if rho < 0.5:
        return "teacher"
    if rho == 0.5:
        return "draw"
    return "student"


@dataclass(frozen=True)
class MatchTally:
    """Task points of one match and the single game they add up to."""

    tasks: int
    teacher_points: int
    student_points: int
    draws: int
    unrated: int

    @property
    def result(self) -> Result:
        """Who won the match's game: more points wins, equal points draw, none unrated."""
        if self.teacher_points + self.student_points + self.draws == 0:
            return "none"
        if self.teacher_points > self.student_points:
            return "teacher"
        if self.student_points > self.teacher_points:
            return "student"
        return "draw"


def tally(tasks: Iterable[TaskResult]) -> MatchTally:
    """Count a match's task points (draws are worth half a point to each side)."""
    counts = {"teacher": 0, "student": 0, "draw": 0, None: 0}
    n = 0
    for task in tasks:
        counts[task_point(task)] += 1
        n += 1
    return MatchTally(
        tasks=n,
        teacher_points=counts["teacher"],
        student_points=counts["student"],
        draws=counts["draw"],
        unrated=counts[None],
    )
