"""Packing rows of every adapter into microbatches under a token budget.

A microbatch costs memory in proportion to rows x padded length, whatever adapters its
rows use (routing is per row), so rows are packed by length alone: sorted longest first
and cut greedily whenever one more row would push rows x longest-row past the budget.
Sorting keeps rows of similar length together, so little compute goes to padding.

Rows that share a prompt and an adapter (a student's rollouts of one task) can instead go as
one packed sequence, a pack: the prompt once, then each completion (`pack_prompts`); the
budget then counts packs and their lengths.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


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


def packed_length(prompt_len: int, completions: Sequence[Sequence[int]]) -> int:
    """Length of one packed sequence: the prompt, then each distinct completion but its last token
    (that token is only ever a target; the first is predicted from the prompt's last position).
    Identical completions (a confident policy draws many) are placed once and read by all."""
    return prompt_len + sum(len(c) - 1 for c in set(map(tuple, completions)))


def pack_prompts(keys: Sequence[Hashable], prompt_lens: Sequence[int], completions: Sequence[Sequence[int]],
                 max_tokens: int) -> list[list[int]]:
    """Row indices grouped into packs: rows with equal keys (same adapter and prompt) share a pack
    while its `packed_length` stays within `max_tokens`, then a new one is opened.

    Packs are listed in the order of their first row, rows in index order; every row is in
    exactly one pack, and a row is alone in its pack when no other row shares its key.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    packs: list[list[int]] = []
    open_pack: dict[Hashable, int] = {}
    for i, key in enumerate(keys):
        k = open_pack.get(key)
        if k is not None and packed_length(prompt_lens[i], [completions[j] for j in packs[k] + [i]]) <= max_tokens:
            packs[k].append(i)
            continue
        open_pack[key] = len(packs)
        packs.append([i])
    return packs
