"""The cold-start corpus: teacher and student examples in the exact self-play formats.

A pool of generated programs, each with ten inputs whose outputs the sandbox computed,
yields every kind of example: a teacher proposal (K pool tasks as references, a different
pool task as the proposal), and a student answer of each kind in the corpus (the kind's
`view` of a pool task and its `corpus_answer`: code_o the output, code_i the input that
produced the output, code_f the program). Examples are drawn on the fly, so the
model rarely sees the same teacher prompt twice.

What a teacher example's references say about its proposal is what the model learns to
read from references in self-play. Drawn independently of the proposal, they say nothing,
and a base built so ignores them: shown references 1.2 AST levels deeper, its teachers
wrote programs as deep as before (docs/results/learning, section 18), so no choice of
references from the buffer could steer the curriculum. With `reference_depth_window` the
references are pool tasks within that many levels of the proposal's depth: the model
learns to propose at its references' depth, and the buffer's weighting sets the direction.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from popula.complexity import ast_depth
from popula.kinds import get_kind
from popula.model.recipe import corpus_mix
from popula.records import TaskRecord
from popula.tasks.generator import generate_tasks
from popula.tasks.prompts import PromptFormat

CORPUS_NAMESPACE = "corpus"  # held-out sets use other namespaces, so they never overlap by seed


@dataclass
class Example:
    """One prompt and the completion a perfect teacher or student would write."""

    kind: str  # "teacher:code_o", "student:code_f", ...
    prompt: str
    completion: str


def build_pool(n: int, seed: int, difficulty: str, workers: int = 2) -> list[TaskRecord]:
    """`n` sandbox-verified programs, each a code_f record with ten inputs and their outputs."""
    return generate_tasks(n, seed, difficulty, types=["code_f"], namespace=CORPUS_NAMESPACE, workers=workers)


def as_type(task: TaskRecord, task_type: str, pick: int) -> TaskRecord:
    """View a pool task as a task of `task_type` (its kind's view: code_o/code_i its
    `pick`-th input, code_f the task as it is)."""
    return get_kind(task_type).view(task, pick)


class ExampleSampler:
    """Draws teacher and student examples from a pool, in one prompt format."""

    def __init__(
        self,
        pool: list[TaskRecord],
        fmt: PromptFormat,
        rng: random.Random,
        max_references: int,
        teacher_share: float,
        student_mix: dict[str, float] | None = None,
        short_power: float = 1.0,
        proposal_power: float = 1.0,
        reference_depth_window: int | None = None,
    ) -> None:
        if len(pool) < max_references + 1:
            raise ValueError(f"a pool of {len(pool)} tasks is too small for {max_references} references")
        self.pool = pool
        self.fmt = fmt
        self.rng = rng
        self.max_references = max_references
        self.teacher_share = teacher_share
        # the corpus's kinds and their shares of student examples; teacher examples: the same kinds
        self.student_mix = dict(student_mix or corpus_mix("tiny"))
        self.teacher_types = tuple(self.student_mix)
        # Proposals lean to shorter programs (weight 1/lines**proposal_power): a small model
        # then proposes mostly programs it can write without a slip, and self-play pushes
        # complexity up (the tiny base). SmolLM2's cold start inherits the lean and its teachers
        # stay one-line through 90 steps of RL (docs/results/smollm2-ladder, rung AL's plan).
        lines = [t.program.count("\n") + 1 for t in pool]
        self.short_weights = [1.0 / n**proposal_power for n in lines]
        # Student answers lean harder (1/lines**short_power): a one-liner's output can be
        # read off the input (copying, len, slicing), which is the skill a tiny model
        # learns first; a long program's exact output is out of its reach in minutes.
        self.student_weights = [1.0 / n**short_power for n in lines]
        # References within `reference_depth_window` AST levels of the proposal (None: any)
        self.reference_depth_window = reference_depth_window
        self.depths: list[int] = []
        self.by_depth: dict[int, list[int]] = {}
        if reference_depth_window is not None:
            self.depths = [ast_depth(t.program) for t in pool]
            for i, depth in enumerate(self.depths):
                self.by_depth.setdefault(depth, []).append(i)

    def _view(self, task: TaskRecord, task_type: str) -> TaskRecord:
        return as_type(task, task_type, self.rng.randrange(len(task.inputs)))

    def teacher(self, task_type: str) -> Example:
        k = self.rng.randint(1, self.max_references)
        if self.reference_depth_window is None:
            refs = [self._view(t, task_type) for t in self.rng.sample(self.pool, k)]
            target = self._view(self.rng.choices(self.pool, self.short_weights)[0], task_type)
        else:
            (t,) = self.rng.choices(range(len(self.pool)), self.short_weights)
            refs = [self._view(self.pool[i], task_type) for i in self._near_in_depth(t, k)]
            target = self._view(self.pool[t], task_type)
        return Example(f"teacher:{task_type}", self.fmt.teacher_prompt(task_type, refs), self.fmt.proposal_completion(target))

    def _near_in_depth(self, target: int, k: int) -> list[int]:
        """k pool indices other than `target` within the depth window of its AST depth
        (any others when the pool holds fewer than k programs of those depths)."""
        depth, w = self.depths[target], self.reference_depth_window
        candidates = [i for d in range(depth - w, depth + w + 1) for i in self.by_depth.get(d, ()) if i != target]
        if len(candidates) < k:
            candidates = [i for i in range(len(self.pool)) if i != target]
        return self.rng.sample(candidates, k)

    def student(self, task_type: str) -> Example:
        task = self._view(self.rng.choices(self.pool, self.student_weights)[0], task_type)
        answer = get_kind(task_type).corpus_answer(task)
        return Example(f"student:{task_type}", self.fmt.student_prompt(task), self.fmt.answer_completion(task, answer))

    def sample(self) -> Example:
        if self.rng.random() < self.teacher_share:
            return self.teacher(self.rng.choice(self.teacher_types))
        types, weights = zip(*self.student_mix.items())
        return self.student(self.rng.choices(types, weights)[0])
