"""Live students on fixed generated tasks: the run's held-out trend and evolution's probe fitness.

A run's own curves (solve rate, teacher reward) are measured on the tasks its teachers pose,
which move as the teachers learn; they cannot say whether the students are still improving
at anything fixed. `TaskProbe` poses one fixed set of generated tasks (the generator's
held-out stream, apart from every training stream by construction) to live students, with the
same sampling settings each time. `HeldoutProbe` does so every `heldout.every` steps and at
the run's last step, and returns the figures for that step's metrics.jsonl row
(docs/design.md § metrics.jsonl); evolution's `probe` fitness ranks students on a set of its
own seed (`evolution.probe`).

Sampling is seeded per request (`EvalSettings.seed`), so probing draws nothing from the
run's random streams: a run with the probe trains exactly as one without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from popula.adapters import AdapterRef
from popula.config import HeldoutSection, ProbeSettings
from popula.engines.base import Engine
from popula.eval.evaluate import evaluate_adapters
from popula.eval.settings import EvalSettings
from popula.sandbox import SandboxPool
from popula.tasks.generator import HELDOUT_NAMESPACE, generate_tasks


class TaskProbe:
    """pass@1 and pass@k of students on one fixed set of generated tasks; built once per run."""

    def __init__(self, settings: ProbeSettings, engine: Engine, tokenizer: Any, sandbox: SandboxPool,
                 workers: int = 2) -> None:
        self.engine, self.tokenizer, self.sandbox = engine, tokenizer, sandbox
        # All task types, as `popula tasks` and benchmarks/learning.py draw them: the same seed
        # gives the same set, so a run's trend and the benchmark's final figure share tasks.
        self.tasks = generate_tasks(settings.tasks, settings.seed, namespace=HELDOUT_NAMESPACE, workers=workers)
        self.settings = EvalSettings(samples=settings.samples, temperature=settings.temperature,
                                     max_tokens=settings.max_tokens)

    def score(self, students: Mapping[str, AdapterRef]) -> dict[str, dict[str, float]]:
        """{member: {pass1, passk}} for each student (member name -> the adapter version it plays
        with), all answered in one generate call."""
        members = sorted(students)
        reports = evaluate_adapters(self.engine, self.tokenizer, self.tasks, adapters=[students[m] for m in members],
                                    sandbox=self.sandbox, settings=self.settings)
        return {m: {"pass1": r.overall.pass_at_1, "passk": r.overall.pass_at_k} for m, r in zip(members, reports)}


class HeldoutProbe:
    """The held-out trend: a `TaskProbe` on `heldout`'s set, called on due steps."""

    def __init__(self, section: HeldoutSection, last_step: int, engine: Engine, tokenizer: Any,
                 sandbox: SandboxPool, workers: int = 2) -> None:
        self.section = section
        self.last_step = last_step
        self.probe = TaskProbe(section, engine, tokenizer, sandbox, workers)

    def due(self, step: int) -> bool:
        every = self.section.every
        return every > 0 and (step % every == 0 or step == self.last_step)

    def score(self, students: Mapping[str, AdapterRef], best: str) -> dict[str, Any]:
        """pass@1 and pass@k of each student (member name -> the adapter version it plays with).

        `best` is the student a user would pick now (the top conservative rating); its pass@1
        is reported on its own so a trend of the headline model needs no league replay.
        """
        scores = self.probe.score(students)
        pass1 = [s["pass1"] for s in scores.values()]
        return {"tasks": len(self.probe.tasks), "samples": self.section.samples, "students": scores,
                "best": best, "best_pass1": scores[best]["pass1"], "mean_pass1": sum(pass1) / len(pass1)}
