"""Prioritized fictitious self-play (PFSP): who plays whom this step.

Every teacher-student pair gets a weight f(p), where p is the rating system's probability that
the teacher beats the student:

* ``variance``: f(p) = p (1 - p), largest for balanced pairs (p = 1/2), the default,
  because a task is most informative when neither side dominates;
* ``hard``: f(p) = (1 - p)^k, favouring the students most likely to beat the teacher;
* ``uniform``: f(p) = 1, ratings ignored: every plan that covers the members is equally
  likely. The control arm of an ablation, to measure what the ratings buy.

All weights of the step are computed first and normalised once; if they sum to ~0 (every
pair is hopelessly lopsided) they fall back to uniform, so no member is ever starved.

Coverage (every alive member plays every step, also when the role counts differ):

1. Teachers, in a random order, each draw one student (by the weights) from the students
   not yet drawn in the current round; when every student has been drawn a new round
   starts. With T >= S every student is covered and loads differ by at most one match.
2. With T < S, each student still uncovered draws a teacher, so some teachers play two
   (or more) matches. The step has max(T, S) matches and no member sits out.
3. Refinement: with every member playing, independent draws cannot concentrate on
   balanced pairs (the last teacher gets whoever is left). So the plan is then resampled
   by a Metropolis chain that swaps the students of two matches with probability
   min(1, w'/w) on the product of pair weights. Swaps keep every member's number of
   matches, so coverage holds, and the chain samples whole plans with probability
   proportional to the product of their pair weights: PFSP over plans, not over
   individual draws. A product, because every member trains on its own match this step:
   a plan that gives one member a hopeless pair (all tasks solved, or none) wastes that
   member's step however balanced the other pairs are.

Optional past versions (``past_students`` / ``past_teachers``) are retired members kept as
frozen opponents; they join the candidate pools but never count towards coverage.
"""

from __future__ import annotations

import itertools
from typing import Callable, Literal, Sequence

import numpy as np

Weighting = Literal["variance", "hard", "uniform"]

# Below this total the weights carry no usable preference: fall back to uniform.
_WEIGHT_FLOOR = 1e-12
# Swap proposals per match in the refinement chain (4T+4S mixes in far fewer).
_SWAPS_PER_MATCH = 50
# plan_distribution lists every plan: 8! = 40,320 of them is still quick.
_MAX_ENUMERATED = 8


def pfsp_probabilities(p_win: Sequence[float] | np.ndarray, weighting: Weighting = "variance", k: float = 2.0) -> np.ndarray:
    """Selection probabilities from win probabilities (any shape), normalised once."""
    p = np.clip(np.asarray(p_win, dtype=float), 0.0, 1.0)
    if p.size == 0:
        raise ValueError("no candidates to weigh")
    if weighting == "variance":
        weights = p * (1.0 - p)
    elif weighting == "hard":
        weights = (1.0 - p) ** k
    elif weighting == "uniform":
        weights = np.ones_like(p)
    else:
        raise ValueError(f"unknown PFSP weighting {weighting!r} (use 'variance', 'hard' or 'uniform')")
    total = float(weights.sum())
    if not np.isfinite(total) or total < _WEIGHT_FLOOR:
        return np.full(p.shape, 1.0 / p.size)
    return weights / total


def _draw(rng: np.random.Generator, weights: np.ndarray) -> int:
    total = weights.sum()
    probs = weights / total if total > 0 else np.full(weights.size, 1.0 / weights.size)
    return int(rng.choice(weights.size, p=probs))


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
    """(teacher, student) pairs for one step; ``p_win(t, s)`` = P(teacher t beats student s).

    Deterministic for a given generator state and inputs: names are sorted first, so the
    result does not depend on the caller's ordering.
    """
    if not teachers or not students:
        raise ValueError("matching needs at least one alive teacher and one alive student")
    all_t = sorted(teachers) + sorted(past_teachers)
    all_s = sorted(students) + sorted(past_students)
    n_t, n_s = len(teachers), len(students)
    p = np.array([[p_win(t, s) for s in all_s] for t in all_t])
    # Floor keeps every pair possible (and the chain's ratios finite) without favouring it.
    w = np.maximum(pfsp_probabilities(p, weighting, k), _WEIGHT_FLOOR)

    plan: list[tuple[int, int]] = []
    uncovered = list(range(n_s))
    past_s = list(range(n_s, len(all_s)))
    for ti in rng.permutation(n_t):
        pool = uncovered + past_s
        si = pool[_draw(rng, w[ti, pool])]
        if si in uncovered:
            uncovered.remove(si)
            if not uncovered and len(plan) + 1 < n_t:
                uncovered = list(range(n_s))  # next round: loads differ by at most one
        plan.append((int(ti), si))
    for si in rng.permutation(uncovered).tolist():
        plan.append((_draw(rng, w[:, si]), si))

    _refine(rng, plan, w)
    return [(all_t[ti], all_s[si]) for ti, si in plan]


def _refine(rng: np.random.Generator, plan: list[tuple[int, int]], w: np.ndarray) -> None:
    """Metropolis swaps of students between matches, in place (see the module docstring)."""
    if len(plan) < 2:
        return
    for _ in range(_SWAPS_PER_MATCH * len(plan)):
        a, b = rng.choice(len(plan), size=2, replace=False)
        (ta, sa), (tb, sb) = plan[a], plan[b]
        if sa == sb or ta == tb:
            continue
        if (ta, sb) in plan or (tb, sa) in plan:
            continue  # never the same pair twice in one step
        ratio = (w[ta, sb] * w[tb, sa]) / (w[ta, sa] * w[tb, sb])
        if ratio >= 1.0 or rng.random() < ratio:
            plan[a], plan[b] = (ta, sb), (tb, sa)


def plan_distribution(p_win: np.ndarray, weighting: Weighting = "variance",
                      k: float = 2.0) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Every plan of an n-teacher, n-student step and its probability under `plan_matches`.

    p_win (n, n): P(teacher i beats student j). A plan is a permutation: teacher i meets student
    plan[i]. With equal role counts every plan covers each member once, and the refinement chain
    samples plans in proportion to the product of their pair weights, so this is the exact
    distribution the matching draws from (up to the chain's mixing). Why: to measure how far
    the ratings move the matching from uniform in a given population, from its league alone.
    """
    p = np.asarray(p_win, dtype=float)
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        raise ValueError(f"plan_distribution needs as many teachers as students, got p_win of shape {p.shape}")
    n = p.shape[0]
    if n > _MAX_ENUMERATED:
        raise ValueError(f"plan_distribution enumerates n! plans: at most {_MAX_ENUMERATED} a role, got {n}")
    logw = np.log(np.maximum(pfsp_probabilities(p, weighting, k), _WEIGHT_FLOOR))
    plans = list(itertools.permutations(range(n)))
    scores = logw[np.arange(n), np.array(plans)].sum(axis=1)
    probs = np.exp(scores - scores.max())
    return plans, probs / probs.sum()
