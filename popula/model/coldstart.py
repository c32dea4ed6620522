"""A cold start for a pretrained instruction model: a short supervised warm-up on Popula's own tasks.

Why: the bare SmolLM2-135M-Instruct cannot follow the answer formats (docs/results/smollm2/:
it explains the code or rewrites it instead of giving the value), so its students earn no
reward and its teachers few valid tasks, and RL has no signal to start from. The tiny base
gets the same skills from its build; a registry model gets them here, as the paper's models
get them from instruction tuning.

The warm-up trains one LoRA on teacher proposals and student answers drawn from a pool of
sandbox-verified programs (popula/model/corpus.py), written in the exact prompt format a run
will use for this model, with loss on the completions only (the prompts are the chat
template and instructions, not text the model should learn to write). The LoRA is then
merged into the weights and the result saved as an ordinary model directory: every adapter
of a run starts at zero on top of it, so the cold start is the starting point of all of them.

It is a fixed amount of training for a given recipe (steps, not time), so two machines
build the same model; the directory is cached by the recipe's hash and written atomically.
Spec: `base_model: NAME+coldstart` for a registry model NAME.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from popula.model import registry
from popula.model.corpus import ExampleSampler, build_pool
from popula.model.recipe import corpus_digest, corpus_mix
from popula.model.train import PackedBatches, train
from popula.tasks.prompts import prompt_format, write_format


@dataclass(frozen=True)
class ColdStartRecipe:
    """What the warm-up trains on and for how long; its hash (with the sources that write the
    corpus, as the tiny base's) names the cached model."""

    seed: int = 0
    steps: int = 150  # optimiser steps: the training amount (~15 min for SmolLM2-135M on 2 cores)
    rows: int = 2
    seq_len: int = 512  # a teacher example with two references fits
    lr: float = 1e-3
    rank: int = 16
    alpha: int = 32
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    pool_tasks: int = 2000
    difficulty: str = "mixed"
    max_references: int = 2  # as configs/smollm2-cpu.yaml's tasks.references
    teacher_share: float = 0.3
    kinds: tuple[str, ...] | None = None  # None: every default kind with a "coldstart" share (its share)
    # teacher examples propose a pool program with weight 1/lines**proposal_power (0: as the pool
    # holds them); 1.0 leans to one-liners, which SmolLM2's teachers then keep (docs/results/smollm2-ladder)
    proposal_power: float = 1.0

    def student_mix(self) -> dict[str, float]:
        return corpus_mix("coldstart", self.kinds)

    def key(self) -> str:
        # fields added after the first builds hash only away from their defaults: a cached model
        # keeps its name when the recipe it was built with gains a field
        defaults = {f.name: f.default for f in fields(self)}
        settings = {k: v for k, v in asdict(self).items() if k not in _LATER_FIELDS or v != defaults[k]}
        return corpus_digest(settings, self.student_mix())


_LATER_FIELDS = ("proposal_power",)


def coldstart_path(name: str, recipe: ColdStartRecipe) -> Path:
    return registry.cache_root() / "models" / f"{name}-coldstart-{recipe.key()}"


def ensure_coldstart(spec: str, recipe: ColdStartRecipe = ColdStartRecipe(), *, progress: bool = True) -> Path:
    """The cold-started directory for `NAME+coldstart`: fetched, trained and merged on first use."""
    name = spec.removesuffix(registry.COLDSTART_SUFFIX)
    registry.lookup(name)
    path = coldstart_path(name, recipe)
    if registry.model_problem(path) is None:
        return path
    base = registry.ensure_model(name, progress=progress)
    with registry.locked(path.name):
        if registry.model_problem(path) is None:
            return path
        registry.clear_stale_tmp(path)
        build_coldstart(base, path, recipe, source=name, progress=progress)
    return path


def build_coldstart(base: Path, out: Path, recipe: ColdStartRecipe, *, source: str, progress: bool = True) -> dict[str, Any]:
    """Warm up a LoRA on `base`, merge it, and write the model to `out` (atomically). Returns the marker."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if progress:
        print(f"popula models: cold start of {source}: {recipe.steps} supervised steps on generated tasks "
              f"(once; cached as {out.name})", file=sys.stderr)
    torch.manual_seed(recipe.seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    fmt = prompt_format(tokenizer)
    pool = build_pool(recipe.pool_tasks, recipe.seed, recipe.difficulty)
    sampler = ExampleSampler(pool, fmt, random.Random(recipe.seed), recipe.max_references, recipe.teacher_share,
                             recipe.student_mix(), proposal_power=recipe.proposal_power)
    # completions only: prompt tokens weigh 0 (the model should answer prompts, not write them)
    batches = PackedBatches(sampler.sample, tokenizer, recipe.seq_len, recipe.rows, prompt_weight=0.0)
    lora = LoraConfig(r=recipe.rank, lora_alpha=recipe.alpha, lora_dropout=0.0,
                      target_modules=list(recipe.target_modules), task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora)
    stats = train(peft_model, batches, steps=recipe.steps, lr=recipe.lr, progress=progress, label="cold start")
    merged = peft_model.merge_and_unload()

    def write(tmp: Path) -> dict[str, Any]:
        merged.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        # the format it was warmed up in is the one it now writes: declared, not left to inference
        write_format(tmp, "instruct-direct" if getattr(fmt, "direct", False) else fmt.name)
        base_marker = base / registry.MODEL_MARKER
        base_source = json.loads(base_marker.read_text()).get("source") if base_marker.is_file() else str(base)
        return {
            "source": {"coldstart_of": source, "base": base_source},
            "coldstart": {"recipe": asdict(recipe), "steps": stats.steps, "tokens": stats.tokens,
                          "seconds": round(stats.seconds, 1), "final_loss": round(stats.final_loss, 4),
                          "skipped_examples": batches.skipped, "prompt_format": fmt.name},
            "architecture": type(merged).__name__,
            "dtype": "float32",
        }

    return registry.publish_model_dir(out, write)
