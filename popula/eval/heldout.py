"""The held-out trend of a run: its live students' pass@1 and pass@k on tasks training never sees.

A run's own curves (solve rate, teacher reward) are measured on the tasks its teachers pose,
which move as the teachers learn; they cannot say whether the students are still improving
at anything fixed. `HeldoutProbe` poses one fixed set of generated tasks (the generator's
held-out stream, apart from every training stream by construction) to each live student
every `heldout.every` steps and at the run's last step, with the same sampling settings each
time, and returns the figures for that step's metrics.jsonl row (docs/design.md § metrics.jsonl).

Sampling is seeded per request (`EvalSettings.seed`), so probing draws nothing from the
run's random streams: a run with the probe trains exactly as one without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from popula.adapters import AdapterRef
from popula.config import HeldoutSection
from popula.engines.base import Engine
from popula.eval.evaluate import evaluate
from popula.eval.settings import EvalSettings
from popula.sandbox import SandboxPool
from popula.tasks.generator import HELDOUT_NAMESPACE, generate_tasks


class HeldoutProbe:
    """Scores students on one held-out task set; built once per run, called on due steps."""

    def __init__(self, section: HeldoutSection, last_step: int, engine: Engine, tokenizer: Any,
                 sandbox: SandboxPool, workers: int = 2) -> None:
        self.section = section
        self.last_step = last_step
        self.engine, self.tokenizer, self.sandbox = engine, tokenizer, sandbox
        # All task types, as `popula tasks` and benchmarks/learning.py draw them: the same seed
        # gives the same set, so a run's trend and the benchmark's final figure share tasks.
        self.tasks = generate_tasks(section.tasks, section.seed, namespace=HELDOUT_NAMESPACE, workers=workers)
        self.settings = EvalSettings(samples=section.samples, temperature=section.temperature,
                                     max_tokens=section.max_tokens)

    def due(self, step: int) -> bool:
        every = self.section.every
        return every > 0 and (step % every == 0 or step == self.last_step)

    def score(self, students: Mapping[str, AdapterRef], best: str) -> dict[str, Any]:
        """pass@1 and pass@k of each student (member name -> the adapter version it plays with).

        `best` is the student a user would pick now (the top conservative rating); its pass@1
        is reported on its own so a trend of the headline model needs no league replay.
        """
        scores = {}
        for member, ref in sorted(students.items()):
            report = evaluate(self.engine, self.tokenizer, self.tasks, adapter=ref, sandbox=self.sandbox,
                              settings=self.settings)
            scores[member] = {"pass1": report.overall.pass_at_1, "passk": report.overall.pass_at_k}
        pass1 = [s["pass1"] for s in scores.values()]
        return {"tasks": len(self.tasks), "samples": self.section.samples, "students": scores,
                "best": best, "best_pass1": scores[best]["pass1"], "mean_pass1": sum(pass1) / len(pass1)}
