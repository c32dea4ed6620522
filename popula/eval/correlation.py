"""Spearman's rank correlation, how well a rating orders the students their held-out pass@1 does
(`popula eval`'s population report, `popula leaderboard`)."""

from __future__ import annotations

import math
from typing import Sequence


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
