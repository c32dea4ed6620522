"""Activation checkpointing for the learner: keep each decoder layer's input, recompute the rest.

Why: in a learner step on a GPU the memory is the microbatch's activations, kept for the
backward across every decoder layer (the logits are already chunked). With `recomputed`,
each layer keeps only its input during the forward and runs again in the backward, so a
microbatch holds one layer's activations at a time, for the price of one more forward.

Why not Hugging Face's `gradient_checkpointing_enable`: it acts only in train mode and adds
an input-grad hook to the embeddings for good, while the learner's model stays in eval mode
(no dropout, the sampler's exact function) and is shared with the generation engine. Here
the layers are wrapped only inside the block, so generation never sees them.

The backward must run inside the block and under the same LoRA routing as the forward: the
recomputation calls the LoRA layers again, and they read the routing (the learner runs its
forward and backward under one `route`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn
from torch.utils.checkpoint import checkpoint

from popula.errors import PopulaError


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder's list of layers (`model.model.layers` in Llama, Qwen2 and most causal LMs)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise PopulaError(f"learner.activation_checkpointing: {type(model).__name__} has no list of decoder "
                          "layers (get_decoder().layers); turn it off for this model")
    return layers


@contextmanager
def recomputed(layers: nn.ModuleList | None) -> Iterator[None]:
    """Within the block, each layer's forward saves only its inputs; its backward recomputes it.
    None: nothing is wrapped (every activation is kept)."""
    layers = layers if layers is not None else []
    for layer in layers:
        layer.forward = functools.partial(checkpoint, layer.forward, use_reentrant=False)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward  # the instance attribute; the class's forward shows through again
