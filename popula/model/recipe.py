"""The tiny base model's recipe: every choice that shapes the built model, and its hash.

The cache is keyed by this hash, so changing any field (or the program generator or
prompt formats the corpus is written with) builds a new model instead of reusing a stale
one. The training amount is a number of optimiser steps, not a time budget, so two
machines build models of the same quality from the same recipe; a slower machine only
takes longer. The defaults take half an hour or more on 2 CPU cores (a build of them ships
with Popula: popula/model/shipped.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from popula.errors import PopulaError

# Bump when the build code changes what a recipe means (training loop, corpus mix).
BUILD_VERSION = 4
MARKER = "popula_tiny.json"  # written next to a build's weights: the recipe and what the build did


@dataclass(frozen=True)
class TinyRecipe:
    """How to build the tiny base: tokenizer, model shape, corpus and training budget."""

    seed: int = 0
    train_steps: int = 5000  # optimiser steps of the cold start: the training amount
    # tokenizer
    vocab_size: int = 1024
    # model (LlamaConfig)
    hidden_size: int = 128
    layers: int = 4
    heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 1024
    # corpus
    pool_tasks: int = 20000  # programs (each with 10 inputs) run through the sandbox: ~15 s
    difficulty: str = "mixed"
    max_references: int = 3  # teacher examples show 1..max_references (the compact format shows 3)
    # Teacher examples are long (references + a program): at a 0.12 share they are still
    # about a third of the tokens. code_i is learned mostly from code_o examples.
    teacher_share: float = 0.12  # fraction of examples that are teacher proposals
    student_mix: tuple[float, float, float] = (0.65, 0.05, 0.3)  # code_o, code_i, code_f shares of student examples
    short_power: float = 2.0  # student examples weigh programs by 1/lines**short_power
    proposal_power: float = 1.0  # teacher proposals weigh programs by 1/lines**proposal_power
    # A teacher example's references lie within this many AST levels of its proposal, so the
    # base proposes at its references' depth (popula.model.corpus); None: drawn at random
    reference_depth_window: int | None = 1
    # training
    seq_len: int = 384
    batch_rows: int = 3  # small batches, more steps: the build is far below the critical batch size
    lr: float = 3e-3
    prompt_weight: float = 0.1  # loss weight of prompt tokens (completion tokens weigh 1)
    bf16: bool = True  # matrix products under bf16 autocast where the CPU has native bf16
    # held-out check written to popula_tiny.json: greedy pass@1 on this many generated tasks
    heldout_tasks: int = 300

    def __post_init__(self) -> None:
        if self.train_steps < 1:
            raise PopulaError(f"train_steps must be at least 1, got {self.train_steps}")
        if self.heldout_tasks < 0:
            raise PopulaError(f"heldout_tasks must be >= 0, got {self.heldout_tasks}")
        if self.hidden_size % self.heads:
            raise PopulaError(f"hidden_size {self.hidden_size} is not a multiple of heads {self.heads}")

    def digest(self) -> str:
        """A short hash of the recipe and of the sources that write its corpus."""
        return corpus_digest(asdict(self), str(BUILD_VERSION))


def corpus_digest(settings: dict, *extra: str) -> str:
    """A short hash of a model's build settings and of the sources that write its training
    corpus (the program generator, the prompt formats and the task kinds' texts): a cache
    keyed by it builds anew when either changes, instead of reusing a model trained on text a
    run no longer shows."""
    here = Path(__file__).resolve().parent.parent
    parts = [json.dumps(settings, sort_keys=True), *extra]
    sources = [here / "tasks" / "generator.py", here / "tasks" / "prompts.py", *sorted((here / "kinds").glob("*.py"))]
    for source in sources:
        parts.append(hashlib.sha256(source.read_bytes()).hexdigest())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
