"""The unbiased pass@k estimator, in a module of its own: comparing saved reports
(`paired.py`, benchmarks/compare_learning.py) needs it and none of the model code that
scoring an engine loads, so such a comparison starts in a second, not in ten."""

from __future__ import annotations


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k).

    Computed as a product, 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the huge
    binomials. Needs 1 <= k <= n and 0 <= c <= n.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss
