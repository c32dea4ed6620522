"""Prioritized fictitious self-play (PFSP): who plays whom this step.

A member choosing an opponent weighs each candidate by f(p), where p is the TrueSkill
probability that the *chooser* beats the candidate:

* ``variance``: f(p) = p (1 - p), largest for balanced pairs (p = 1/2), the default,
  because a task is most informative when neither side dominates;
* ``hard``: f(p) = (1 - p)^k, favouring opponents the chooser tends to lose to.

All weights of a draw are computed first and normalised once; if they sum to ~0 (every
pair is hopelessly lopsided) the draw falls back to uniform, so no member is ever starved.

Coverage (every alive member plays every step, also when the role counts differ):

1. Teachers, in a random order, each draw one student from the students not yet drawn
   in the current round; when every student has been drawn a new round starts. With
   T >= S every student is covered and student loads differ by at most one match.
2. With T < S, each student still uncovered draws a teacher, so some teachers play two
   (or more) matches. The step thus has max(T, S) matches and no member sits out.

Optional past versions (``past_students`` / ``past_teachers``) are retired members kept as
frozen opponents; they join the candidate pools but never count towards coverage.
"""

from __future__ import annotations

from typing import Callable, Literal, Sequence

import numpy as np

Weighting = Literal["variance", "hard"]

# Below this total the weights carry no usable preference: fall back to uniform.
_WEIGHT_FLOOR = 1e-12


def pfsp_probabilities(p_win: Sequence[float], weighting: Weighting = "variance", k: float = 2.0) -> np.ndarray:
    """Selection probabilities over candidates given the chooser's win probabilities."""
    p = np.clip(np.asarray(p_win, dtype=float), 0.0, 1.0)
    if p.size == 0:
        raise ValueError("no candidates to weigh")
    if weighting == "variance":
        weights = p * (1.0 - p)
    elif weighting == "hard":
        weights = (1.0 - p) ** k
    else:
        raise ValueError(f"unknown PFSP weighting {weighting!r} (use 'variance' or 'hard')")
    total = float(weights.sum())
    if not np.isfinite(total) or total < _WEIGHT_FLOOR:
        return np.full(p.size, 1.0 / p.size)
    return weights / total


def _draw(
    rng: np.random.Generator,
    chooser: str,
    candidates: Sequence[str],
    p_win: Callable[[str, str], float],
    weighting: Weighting,
    k: float,
) -> str:
    probs = pfsp_probabilities([p_win(chooser, c) for c in candidates], weighting, k)
    return candidates[int(rng.choice(len(candidates), p=probs))]


def plan_matches(
    rng: np.random.Generator,
    teachers: Sequence[str],
    students: Sequence[str],
    p_win: Callable[[str, str], float],
    weighting: Weighting = "variance",
    k: float = 2.0,
    past_teachers: Sequence[str] = (),
    past_students: Sequence[str] = (),
) -> list[tuple[str, str]]:
    """(teacher, student) pairs for one step; ``p_win(a, b)`` = P(a beats b).

    Deterministic for a given generator state and inputs: candidate lists are sorted, so
    the result does not depend on the caller's ordering.
    """
    if not teachers or not students:
        raise ValueError("matching needs at least one alive teacher and one alive student")
    teachers, students = sorted(teachers), sorted(students)
    past_teachers, past_students = sorted(past_teachers), sorted(past_students)
    pairs: list[tuple[str, str]] = []
    uncovered = list(students)
    for i in rng.permutation(len(teachers)):
        teacher = teachers[int(i)]
        student = _draw(rng, teacher, uncovered + past_students, p_win, weighting, k)
        if student in uncovered:
            uncovered.remove(student)
            if not uncovered and len(pairs) + 1 < len(teachers):
                uncovered = list(students)  # next round: loads differ by at most one
        pairs.append((teacher, student))
    for i in rng.permutation(len(uncovered)):
        student = uncovered[int(i)]
        teacher = _draw(rng, student, list(teachers) + past_teachers, p_win, weighting, k)
        pairs.append((teacher, student))
    return pairs
