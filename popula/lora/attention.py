"""Grouped-query attention without copying keys and values: the attention a shared base runs.

Why: transformers' "sdpa" attention passes grouped keys and values to
`scaled_dot_product_attention` as they are (`enable_gqa`) only on CUDA without a mask; with
a mask, as every popula forward has (left padding in decoding, the block mask of packed
prompts in training), it first repeats each key/value head for its query heads. In decoding
that copies the whole static cache of every layer at every token: SmolLM2-135M (9 query, 3
key/value heads) spent about a fifth of a CPU decode step in those copies
(docs/results/step-cost). torch's CPU kernel takes the mask and `enable_gqa` together, with
the same result, so on a CPU `GQA_SDPA` always does. On other devices it is transformers' sdpa
unchanged: there a mask with `enable_gqa` falls back to the math kernel, which materialises the
scores the memory-efficient kernel (over repeated heads) does not.

It is registered with transformers under its own name, with the sdpa mask (a boolean 4D
mask, as "sdpa" gets); `use_gqa_sdpa` switches a model that runs "sdpa" to it.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

GQA_SDPA = "popula_gqa_sdpa"


def gqa_sdpa_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                       **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, except that on a CPU under a mask grouped keys and values go
    to the kernel as they are (the case it would repeat them in); every other case is its own."""
    if (query.device.type != "cpu" or getattr(module, "num_key_value_groups", 1) == 1 or attention_mask is None
            or kwargs.get("position_bias") is not None or key.shape[-1] != value.shape[-1]):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                                     scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(GQA_SDPA, gqa_sdpa_attention)
AttentionMaskInterface.register(GQA_SDPA, sdpa_mask)


def use_gqa_sdpa(model: nn.Module) -> None:
    """Run `model`'s attention through `gqa_sdpa_attention` if it runs transformers' "sdpa" (else leave it)."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(GQA_SDPA)


def takes_boolean_mask(model: nn.Module) -> bool:
    """Whether `model`'s attention takes a boolean 4D mask as given ("sdpa" or this module's)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) in ("sdpa", GQA_SDPA)
