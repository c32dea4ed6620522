"""Rewards: the one place where verifier outcomes become numbers for the learner.

Teacher reward (PopuLoRA, docs/design.md § What the sources say) for one proposed task p
with student solve rate rho:

    -1          p fails to parse, execute, or is nondeterministic (also: a proposal the
                teacher wrote so badly that no task could be read out of it)
     0          rho == 0: no rollout of the matched student solves it (the zero floor:
                an impossible or degenerate task earns nothing, so teachers gain nothing
                by posing unsolvable puzzles)
     1 - rho    otherwise: the harder the task for this student, the better, as long as
                it is solvable at all

With `rewards.solvable_by: population` (off by default) the zero floor asks the population,
not one student: a task its matched student never solves is answered by the other live
students too, and if any of them solves it, it is solvable and pays 1 - 0 = 1. Why: a
student whose answers have collapsed solves each task always or never, so under the design
every valid task pays 0 and teachers learn only validity (docs/results/smollm2-explore).

With `rewards.novelty_window: N` (off by default) a valid task's reward is shared among its
niche (fitness sharing, popula/novelty.py): divided by 1 + the tasks of its type with the same
program form among the step's other valid tasks and the newest N buffered ones. A repeat pays
less than a new program the students solve as rarely; an invalid task's -1 is not shared.
With `rewards.novelty_penalty: c` each other member of the niche also subtracts c, down to the
invalid reward: division leaves 0 at 0, so without it a task the students always solve, posed
again and again, stays safer than a new task that might fail to run (docs/results/smollm2-rung-j:
`def f(n): return n` filled half of one run's `code_f` curriculum).

With `rewards.blind_task_cap: c` (off by default) a valid task whose program never reads its
input (`popula.complexity.ignores_input`) pays at most c, before sharing: a constant function
of a new shape each time (`return [5]`, `return [4, 8, 9, 5]`) is a new form to the penalty,
valid every time and solved often, and on one seed such tasks rose from a tenth to three
quarters of a curriculum (docs/results/smollm2-ladder/, "Rung U").

With `rewards.solved_task: r` (off by default) a valid task every rollout of its matched
student solves pays r (e.g. -0.5) in place of 1 - 1 = 0. Under the design a task too easy to
teach anything and one too hard to solve both pay 0, so the teachers' reward cannot tell them
apart; as students came to solve every rollout of half their `code_i` and `code_o` tasks,
their answers narrowed (docs/results/smollm2-ladder/, "Rung V").

With `rewards.unsolved_task: r` (the design's 0 by default) a valid task no rollout solves pays
r in place of the zero floor; set to `solved_task`'s value, the two ends pay alike. Why one
would: with `solved_task` alone too hard pays more than too easy. Measured at -0.5 on one seed,
it did not move the teachers off tasks nobody solves (docs/results/smollm2-ladder/, "Rung Y").

Student reward for one rollout (docs/design.md § What the sources say: the verifier's
reward for a correct, well-formed solution):

     1          the answer is well formed and the sandbox judges it correct
     0          anything else: wrong, fails to run, or no answer could be parsed
                (malformed; still counted apart in the metrics)

There is no format penalty: in a GRPO group where no rollout is right, a penalty for
malformed answers gives every well-formed wrong answer a positive advantage and sharpens
students onto wrong answers (measured: docs/results/learning). Format is still learned,
because only a well-formed answer can earn the 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

INVALID_TASK_REWARD = -1.0
UNSOLVED_TASK_REWARD = 0.0
CORRECT_ANSWER_REWARD = 1.0
WRONG_ANSWER_REWARD = 0.0
MALFORMED_ANSWER_REWARD = 0.0


def solve_rate(correct: Sequence[bool]) -> float:
    """rho: the fraction of a student's rollouts on one task that the sandbox accepted."""
    if not correct:
        raise ValueError("solve_rate needs at least one rollout")
    return sum(bool(c) for c in correct) / len(correct)


def teacher_reward(valid: bool, rho: float | None, *, invalid: float = INVALID_TASK_REWARD,
                   solvable: bool = False, solved: float | None = None,
                   unsolved: float = UNSOLVED_TASK_REWARD) -> float:
    """The teacher's reward for one task: `invalid` (-1) invalid, `unsolved` (0) unsolved, else 1 - rho.

    `rho` may be None only for an invalid task (students never see those). `invalid` is
    `rewards.invalid_task` in the config: the design's -1 unless a run studies another.
    `solvable`: another student solved the task (`rewards.solvable_by: population`), so a
    rho of 0 is a hard task, not an impossible one, and pays 1 instead of the zero floor.
    `solved`: what a task every rollout solves pays (`rewards.solved_task`); None: 1 - 1 = 0.
    `unsolved`: what a task no rollout solves pays (`rewards.unsolved_task`); the design's 0.
    """
    if not valid:
        return invalid
    if rho is None or math.isnan(rho) or not 0.0 <= rho <= 1.0:
        raise ValueError(f"a valid task needs a solve rate in [0, 1], got {rho!r}")
    if rho == 0.0 and not solvable:
        return unsolved
    if rho == 1.0 and solved is not None:
        return solved
    return 1.0 - rho


def shared_teacher_reward(reward: float, niche: int, *, penalty: float = 0.0,
                          floor: float = INVALID_TASK_REWARD) -> float:
    """Fitness sharing: a valid task's teacher reward divided among the `niche` tasks of its form,
    less `penalty` for each other member of the niche, never below `floor` (the invalid reward)."""
    if niche < 1:
        raise ValueError(f"a niche holds at least the task itself, got {niche}")
    return max(floor, reward / niche - penalty * (niche - 1))


def capped_teacher_reward(reward: float, cap: float) -> float:
    """A task that ignores its input: its reward, but never more than `cap`."""
    return min(reward, cap)


def student_reward(well_formed: bool, correct: bool | None) -> float:
    """The student's reward for one rollout: 1 for a correct well-formed answer, else 0."""
    if not well_formed:
        return MALFORMED_ANSWER_REWARD
    return CORRECT_ANSWER_REWARD if correct else WRONG_ANSWER_REWARD
