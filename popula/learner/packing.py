"""Packing rows of every adapter into microbatches under a token budget.

A microbatch costs memory in proportion to rows x padded length, whatever adapters its
rows use (routing is per row), so rows are packed by length alone: sorted longest first
and cut greedily whenever one more row would push rows x longest-row past the budget.
Sorting keeps rows of similar length together, so little compute goes to padding.
"""

from __future__ import annotations

from collections.abc import Sequence


def pack_rows(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices of `lengths` grouped into microbatches with len(batch) * max(length) <= max_tokens.

    A row longer than the budget on its own gets a microbatch to itself (it cannot be
    split without changing what is computed). Order is deterministic: longest first,
    ties by index.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (len(current) + 1) * longest > max_tokens:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches
