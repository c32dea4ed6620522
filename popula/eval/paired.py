"""Paired comparisons of two models scored on the same held-out tasks.

Two models that answer the same tasks differ far less from task to task than their pass@1
values suggest: most of a score's spread is which tasks were drawn, and that cancels in a
per-task difference. So a difference between models is measured task by task, and its
uncertainty is reported in the two parts a reader needs to judge it:

- `task_se`: the standard error of the mean difference over the held-out tasks (seeds
  averaged per task first): what a larger held-out set or more samples per task would shrink.
- `seed_sd`: the spread of the per-seed differences: what training again with another seed
  does, which no held-out set can shrink.

    diff = paired_difference([pop_s0, pop_s1, pop_s2], [single_s0, single_s1, single_s2])
    diff.mean, diff.per_seed, diff.task_se, diff.seed_sd

Reports are `popula eval --json --per-task` objects (dicts), or the entries of a population
report's `members` (each is its member's own report); a bare base scored once is passed as
one report per seed (the same one repeated).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from popula.errors import PopulaError
from popula.eval.passk import pass_at_k


@dataclass(frozen=True)
class PairedDifference:
    """A score (pass@1 unless told otherwise) of A minus B's on the same tasks, with its two sources of uncertainty."""

    mean: float  # mean over seeds of the mean per-task difference
    per_seed: list[float]
    task_se: float  # standard error over tasks of the seed-averaged per-task difference
    seed_sd: float  # standard deviation of `per_seed` (0.0 for one seed)
    tasks: int
    better_tasks: int  # tasks where A's seed-averaged pass@1 is higher than B's
    worse_tasks: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line: '+0.014 (per seed +0.020, +0.013; se over tasks 0.008, sd over seeds 0.005)'."""
        seeds = ", ".join(f"{d:+.3f}" for d in self.per_seed)
        spread = f", sd over seeds {self.seed_sd:.3f}" if len(self.per_seed) > 1 else ""
        return (f"{self.mean:+.3f} (per seed {seeds}; se over {self.tasks} tasks {self.task_se:.3f}{spread}; "
                f"better on {self.better_tasks} tasks, worse on {self.worse_tasks})")


def _task_counts(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A `--per-task` report's per-task sample counts; a clear error when it was scored without them."""
    tasks = report.get("per_task")
    if not tasks:
        raise PopulaError(f"evaluation report of {report.get('model')!r} (adapter {report.get('adapter')!r}) has no "
                          "per-task counts: score it with `popula eval --json --per-task`")
    return tasks


def per_task_pass1(report: dict[str, Any]) -> dict[str, float]:
    """Task id -> fraction of correct samples (its unbiased pass@1) from a `--per-task` report."""
    return {t["id"]: t["correct"] / t["samples"] for t in _task_counts(report)}


def per_task_pass_at_k(report: dict[str, Any]) -> dict[str, float]:
    """Task id -> unbiased pass@k, k the report's own (`popula eval --samples`), from a `--per-task` report."""
    return {t["id"]: pass_at_k(t["samples"], t["correct"], report["k"]) for t in _task_counts(report)}


def mean_report(reports: Sequence[dict[str, Any]], model: str,
                per_task: Callable[[dict[str, Any]], dict[str, float]] = per_task_pass1) -> dict[str, Any]:
    """One `--per-task` report whose every task scores the mean of `reports` (the live members
    of a population): the population's mean, compared task by task like one model. `per_task`
    reads each member's task score (pass@1 by default; `per_task_pass_at_k` for the mean pass@k),
    and the result is read back as pass@1 whatever it holds."""
    rates = [per_task(r) for r in reports]
    ids = sorted(rates[0])
    if any(sorted(r) != ids for r in rates):
        raise PopulaError(f"{model}: the members were scored on different tasks; score them on one task file")
    return {"model": model, "k": 1,
            "per_task": [{"id": t, "samples": 1, "correct": statistics.fmean(r[t] for r in rates)} for t in ids]}


def paired_difference(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]],
                      per_task: Callable[[dict[str, Any]], dict[str, float]] = per_task_pass1) -> PairedDifference:
    """A minus B, seed by seed (`a[i]` against `b[i]`), over the tasks both were scored on.

    `per_task` reads the score of each task from a report: pass@1 (default) or
    `per_task_pass_at_k`. Every pair must cover the same task ids: a difference over different
    tasks is not paired and would mix model quality with task difficulty.
    """
    if not a or len(a) != len(b):
        raise PopulaError(f"paired_difference needs one B report per A report, got {len(a)} and {len(b)}")
    a_rates, b_rates = [per_task(r) for r in a], [per_task(r) for r in b]
    ids = sorted(a_rates[0])
    for i, (ra, rb) in enumerate(zip(a_rates, b_rates)):
        if sorted(ra) != ids or sorted(rb) != ids:
            raise PopulaError(f"seed #{i}: the two reports were scored on different tasks; pair reports of one task file")
    per_task = [[ra[t] - rb[t] for t in ids] for ra, rb in zip(a_rates, b_rates)]
    averaged = [statistics.fmean(column) for column in zip(*per_task)]
    per_seed = [statistics.fmean(diffs) for diffs in per_task]
    return PairedDifference(
        mean=statistics.fmean(per_seed),
        per_seed=per_seed,
        task_se=statistics.stdev(averaged) / len(averaged) ** 0.5 if len(averaged) > 1 else 0.0,
        seed_sd=statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0,
        tasks=len(ids),
        better_tasks=sum(d > 0 for d in averaged),
        worse_tasks=sum(d < 0 for d in averaged),
    )
