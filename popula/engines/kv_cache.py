"""The torch engine's static KV cache: choosing rows, and filling it from prompts of unequal length.

Why: the engine decodes a chunk of rows from one `StaticCache` whose prompts are left-padded
to the longest. Prefilling that padded batch computes the padding too: for a SmolLM2 teacher
step (6 prompts of 263-458 tokens) a quarter of the prefill's tokens, and the prefill is half
of the teachers' generate call. See docs/results/step-cost/README.md
§ Prompts of unequal length: the 3x, met
So prompts are prefilled in buckets of about one length, each into a small cache of its own,
and their keys and values are copied into the chunk's cache where the left-padded layout puts
them. A row's numbers are the padded path's up to the rounding of a product of another height
(log-probs within about 1e-5; a nearly flat distribution may then draw a neighbouring token).

transformers has no public call for any of this, so it is kept here and refused (the
caller falls back to the padded prefill) for cache layers other than full-attention
`StaticLayer`s.
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import StaticCache
from transformers.cache_utils import StaticLayer

PAD_SLACK = 0.10  # a bucket may compute at most this share of padding over its prompts' own tokens


def select_rows(cache: StaticCache, keep: torch.Tensor) -> None:
    """Keep only batch rows `keep` of a static cache, in that order (rows may repeat)."""
    for layer in cache.layers:
        if getattr(layer, "is_initialized", False):
            layer.keys = layer.keys[keep]
            layer.values = layer.values[keep]
            layer.batch_size = len(keep)


def fills_ragged(cache: StaticCache) -> bool:
    """Whether `assemble` can fill `cache`: every layer a full-attention static layer."""
    return all(type(layer) is StaticLayer and hasattr(layer, "cumulative_length") for layer in cache.layers)


def buckets(lengths: Sequence[int], slack: float = PAD_SLACK) -> list[list[int]]:
    """Indices of `lengths` grouped shortest first, each group padded to its longest wasting
    at most `slack` of its own tokens: few forwards, little padding."""
    groups: list[list[int]] = []
    total = 0
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        n = lengths[i]
        if groups and n * (len(groups[-1]) + 1) <= (1 + slack) * (total + n):
            groups[-1].append(i)
            total += n
        else:
            groups.append([i])
            total = n
    return groups


def assemble(cache: StaticCache, parts: Sequence[StaticCache], rows: Sequence[Sequence[int]], width: int) -> None:
    """Fill `cache` (not yet used) from `parts`, the i-th part's rows going to rows `rows[i]` of
    `cache`, each part's prompts ending at position `width` as the chunk's left padding places
    them; the cache then continues at `width`.

    Each part holds rows prefilled alone into a cache exactly as long as its own prompts.
    """
    total = sum(len(r) for r in rows)
    for i, layer in enumerate(cache.layers):
        own = [part.layers[i] for part in parts]
        keys, values = own[0].keys, own[0].values
        layer.lazy_initialization(keys.new_zeros(total, keys.shape[1], 0, keys.shape[3]),
                                  values.new_zeros(total, values.shape[1], 0, values.shape[3]))
        for o, at in zip(own, rows):
            length = o.keys.shape[2]
            layer.keys[list(at), :, width - length:width] = o.keys
            layer.values[list(at), :, width - length:width] = o.values
        layer.cumulative_length.fill_(width)
