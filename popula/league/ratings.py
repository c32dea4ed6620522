"""The rating system: every call to the `trueskill` package is here.

The league rates one game per match and asks for win probabilities and an evolved child's
prior; the package rates games but has neither of the last two, so both live here, in terms
of its own environment (its beta and its normal CDF). Swapping the rating system means
replacing this module's functions.
"""

from __future__ import annotations

import math
from typing import Sequence

import trueskill


Rating = trueskill.Rating


def make_env(mu: float, sigma: float, beta: float, tau: float, draw_probability: float) -> trueskill.TrueSkill:
    """One TrueSkill environment for the whole league: teachers and students share it."""
    return trueskill.TrueSkill(
        mu=mu, sigma=sigma, beta=beta, tau=tau, draw_probability=draw_probability
    )


def win_probability(env: trueskill.TrueSkill, a: trueskill.Rating, b: trueskill.Rating) -> float:
    """P(a beats b) under the TrueSkill model (draw margin ignored).

    Performance is skill plus N(0, beta^2) noise, so the difference of performances is
    normal with mean mu_a - mu_b and variance 2 beta^2 + sigma_a^2 + sigma_b^2. Unplayed
    pairs therefore start at the predicted probability, not at 1/2 by fiat.
    """
    spread = math.sqrt(2.0 * env.beta**2 + a.sigma**2 + b.sigma**2)
    return float(env.cdf((a.mu - b.mu) / spread))


def rate_game(env: trueskill.TrueSkill, teacher: trueskill.Rating, student: trueskill.Rating,
              result: str) -> tuple[trueskill.Rating, trueskill.Rating]:
    """The (teacher, student) ratings after one game whose `result` is "teacher", "student",
    "draw" or anything else (an unrated match: the ratings unchanged)."""
    if result == "teacher":
        return trueskill.rate_1vs1(teacher, student, env=env)
    if result == "student":
        new_s, new_t = trueskill.rate_1vs1(student, teacher, env=env)
        return new_t, new_s
    if result == "draw":
        return trueskill.rate_1vs1(teacher, student, drawn=True, env=env)
    return teacher, student


def child_rating(
    env: trueskill.TrueSkill, parents: Sequence[trueskill.Rating], sigma_widen: float
) -> trueskill.Rating:
    """The prior of a child made from ``parents`` by a weight-space operator.

    mu is the parents' mean. The variance is that of the parents' mixture (mean of their
    variances plus the spread of their means: a crossover of unlike parents is less
    certain) plus ``sigma_widen``^2 for the perturbation itself, capped at the
    environment's initial sigma (a child is never more uncertain than a newcomer).
    """
    if not parents:
        raise ValueError("a child needs at least one parent")
    if sigma_widen < 0:
        raise ValueError(f"sigma_widen must be >= 0, got {sigma_widen}")
    mus = [p.mu for p in parents]
    mu = sum(mus) / len(mus)
    mixture_var = sum(p.sigma**2 for p in parents) / len(parents)
    mixture_var += sum((m - mu) ** 2 for m in mus) / len(mus)
    sigma = min(env.sigma, math.sqrt(mixture_var + sigma_widen**2))
    return env.create_rating(mu=mu, sigma=sigma)


def rank_correlation(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation of two paired lists: how well ordering by `a` (a rating)
    orders by `b` (held-out pass@1). Ties share their mean rank, as held-out scores often tie.

    None when it is undefined: fewer than two pairs, or either list all one value.
    """
    if len(a) != len(b):
        raise ValueError(f"rank_correlation needs paired lists, got {len(a)} and {len(b)} values")
    ra, rb = _mean_ranks(a), _mean_ranks(b)
    n = len(ra)
    if n < 2:
        return None
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var_a, var_b = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    if var_a == 0 or var_b == 0:
        return None
    return cov / math.sqrt(var_a * var_b)


def _mean_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, tied values sharing the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks
