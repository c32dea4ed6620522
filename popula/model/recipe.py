"""The tiny base model's recipe: every choice that shapes the built model, and its hash.

The cache is keyed by this hash, so changing any field (or the program generator,
prompt formats or the text of a task kind the corpus is written with) builds a new model
instead of reusing a stale one. Which kinds the corpus holds, and each one's share of its
student examples, is the kinds' declaration (`TaskKind.default`, `TaskKind.corpus_share`):
a recipe that names no kinds takes the default ones. The training amount is a number of optimiser steps, not a time budget, so two
machines build models of the same quality from the same recipe; a slower machine only
takes longer. The defaults take half an hour or more on 2 CPU cores (a build of them ships
with Popula: popula/model/shipped.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from popula.errors import PopulaError
from popula.kinds import KINDS, get_kind
from popula.records import TaskRecord
from popula.tasks.prompts import CompactFormat, InstructFormat

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
    pool_tasks: int = 20000  # programs (each with 10 inputs) run through the sandbox: ~3 min on 2 cores
    difficulty: str = "mixed"
    max_references: int = 3  # teacher examples show 1..max_references (the compact format shows 3)
    # Teacher examples are long (references + a program): at a 0.12 share they are still
    # about a third of the tokens. code_i is learned mostly from code_o examples.
    teacher_share: float = 0.12  # fraction of examples that are teacher proposals
    # the corpus's kinds (None: every default kind with a "tiny" share); each one's share of
    # the student examples is its `corpus_share["tiny"]` (code_i is learned mostly from code_o examples)
    kinds: tuple[str, ...] | None = None
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

    def student_mix(self) -> dict[str, float]:
        """Each corpus kind's share of the student examples (teacher examples: the same kinds)."""
        return corpus_mix("tiny", self.kinds)

    def digest(self) -> str:
        """A short hash of the recipe and of the sources that write its corpus."""
        return corpus_digest(asdict(self), self.student_mix(), str(BUILD_VERSION))


def corpus_mix(corpus: str, kinds: Sequence[str] | None = None) -> dict[str, float]:
    """`kinds` (None: every default kind with a share of `corpus`) and each one's declared share
    of `corpus`'s student examples, in registration order when not named."""
    if kinds is None:
        kinds = [name for name, kind in KINDS.items() if kind.default and kind.corpus_share.get(corpus, 0) > 0]
    mix = {name: get_kind(name).corpus_share.get(corpus, 0.0) for name in kinds}
    missing = [name for name, share in mix.items() if share <= 0]
    if missing or not mix:
        raise PopulaError(f"the {corpus} corpus needs kinds that declare a share of it; "
                          f"{', '.join(missing) or 'none is named'} declare none")
    return mix


def corpus_digest(settings: dict, mix: dict[str, float], *extra: str) -> str:
    """A short hash of a model's build settings, its corpus's kinds and shares (`mix`), and of
    what writes its training corpus (the program generator's and prompt formats' sources, the
    kinds' texts): a cache keyed by it builds anew when any changes, instead of reusing a model
    trained on text a run no longer shows."""
    here = Path(__file__).resolve().parent.parent
    settings = {k: v for k, v in settings.items() if k != "kinds"}
    # the shares as a list when the kinds are the three of build version 4 (its recipes' form)
    settings["student_mix"] = list(mix.values()) if tuple(mix) == _V4_KINDS else mix
    parts = [json.dumps(settings, sort_keys=True), *extra]
    for source in (here / "tasks" / "generator.py", here / "tasks" / "prompts.py"):
        parts.append(hashlib.sha256(source.read_bytes()).hexdigest())
    fingerprint = kinds_fingerprint(tuple(mix))
    parts += _V4_KIND_SOURCES if fingerprint == _V4_FINGERPRINT else [fingerprint]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


# -- the kinds' part of a digest ---------------------------------------------------------------

# Until build version 4 the digest hashed the sources of popula/kinds/*.py, so any edit there
# (a comment, a new kind's file) rebuilt every cached base. It now hashes the kinds' texts
# (`kinds_fingerprint`). While the corpus kinds are the three of then and write the texts they
# wrote then, a digest keeps the source hashes of then, so bases cached before are reused.
_V4_KINDS = ("code_o", "code_i", "code_f")
_V4_FINGERPRINT = "f92901244a4d12073f3654f3112ec671373d44cc74ae7e3ab98cb4be01aeda26"
_V4_KIND_SOURCES = [  # sha256 of popula/kinds/{__init__,base,code_f,code_i,code_o}.py at build version 4
    "50af371330e6d18e0eeeb29d439e41118a5d1483784e8b240f7c96c7ae0c1700",
    "a9cc4c0cd54444a408e1e33a6f680b95abf26e5165188b5740d4f73102dc0c0d",
    "4870d7fe9aa1647e7a99026aa2a3c86c9f1eeb2c5d2c7806d923bae35938c833",
    "8d9436c7d87413e356f6fd9b52fbb1f27d1185e77f6f75e67c666d5194f67788",
    "b25046abbd9eb10d4205d430785d019b61df9d777886b0d9945d915798a797d8",
]

# What the kinds' texts were hashed on: two pool tasks as the corpus draws them (a code_f record,
# several inputs with their outputs, one constant program), each seen as every corpus kind.
_SAMPLE_POOL = (
    TaskRecord(id="fp0", type="code_f", program="def f(xs, k):\n    return [x * k for x in xs if x > 0]",
               inputs=["[1, -2, 3], 2", "[], 5", "[4], -1", "[0, 7], 3"],
               outputs=["[2, 6]", "[]", "[-4]", "[21]"], message="scale the positive numbers"),
    TaskRecord(id="fp1", type="code_f", program="def f(s):\n    return 'ab'",
               inputs=["'x'", "''"], outputs=["'ab'", "'ab'"], message=""),
)


def kinds_fingerprint(kinds: Sequence[str]) -> str:
    """A hash of what `kinds` write into a cold-start corpus: their names, settings and rules,
    and each one's teacher and student examples of fixed pool tasks in every prompt format.
    It changes when a kind's text does, not when its module is edited otherwise."""
    formats = (CompactFormat(), InstructFormat(), InstructFormat(direct=True))
    parts: list[str] = []
    for name in kinds:
        kind = get_kind(name)
        parts.append(repr((kind.name, kind.description, kind.label, kind.answer, kind.compact_head,
                           kind.instruct_question, kind.instruct_ask, kind.direct_ask, kind.proposal_inputs,
                           kind.min_inputs, kind.hint, kind.shows_outputs,
                           [kind.inputs_fault(n) for n in range(6)], kind.instruct_want())))
        for fmt in formats:
            views = [kind.view(task, pick) for task in _SAMPLE_POOL for pick in range(len(task.inputs))]
            parts.append(fmt.teacher_prompt(name, views[:3]))
            for view in views:
                parts += [fmt.student_prompt(view), fmt.answer_completion(view, kind.corpus_answer(view)),
                          fmt.proposal_completion(view)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
