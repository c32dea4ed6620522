"""A figure of `popula eval --json` reports side by side: held-out pass@1 per task type.

A learning claim is a comparison (a trained student against the bare base, the population
against the single agent), so the figure refuses reports that were not measured alike:
other tasks, other sample counts, another temperature or token limit would make the bars
differ for reasons that are not the models. Error bars are one standard error of the mean
over tasks of each task's pass@1 (correct / samples), when the reports carry per-task counts
(`popula eval --json --per-task`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from popula.errors import PopulaError
from popula.eval.report import read_report
from popula.kinds import get_kind, task_types

SAME_SETTINGS = ("samples", "temperature", "top_p", "max_tokens", "tasks_in_file")


def groups() -> tuple[str, ...]:
    """The bars of each report: overall, then every registered task kind."""
    return ("overall", *task_types())


def check_alike(reports: dict[str, dict[str, Any]]) -> None:
    """Refuse reports measured under different settings or on different tasks, naming the field."""
    labels = list(reports)
    first = reports[labels[0]]
    for label in labels[1:]:
        for key in SAME_SETTINGS:
            if reports[label].get(key) != first.get(key):
                raise PopulaError(f"reports {labels[0]!r} and {label!r} differ in {key} "
                                  f"({first.get(key)!r} vs {reports[label].get(key)!r}): they do not compare like with like")
        ids = [{t["id"] for t in r.get("per_task", [])} for r in (first, reports[label])]
        if all(ids) and ids[0] != ids[1]:
            raise PopulaError(f"reports {labels[0]!r} and {label!r} scored different tasks")


def pass_at_1_with_error(report: dict[str, Any], group: str) -> tuple[float, float | None]:
    """pass@1 of a group and its standard error over tasks (None without per-task counts)."""
    summary = report["overall"] if group == "overall" else report["by_type"].get(group)
    if summary is None:
        return math.nan, None
    tasks = [t for t in report.get("per_task", []) if t.get("attempted", True) and t.get("samples")
             and (group == "overall" or t["type"] == group)]
    if len(tasks) < 2:
        return summary["pass_at_1"], None
    rates = [t["correct"] / t["samples"] for t in tasks]
    mean = sum(rates) / len(rates)
    var = sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)
    return summary["pass_at_1"], math.sqrt(var / len(rates))


def plot_reports(reports: dict[str, Path], out: Path) -> Path:
    """Draw grouped bars of pass@1 (overall and per task type), one colour per report."""
    if not reports:
        raise PopulaError("no evaluation report to plot")
    data = {label: read_report(path) for label, path in reports.items()}
    check_alike(data)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = next(iter(data.values()))
    width = 0.8 / len(data)
    fig, ax = plt.subplots(figsize=(7, 3.8), dpi=120)
    for i, (label, report) in enumerate(data.items()):
        values = [pass_at_1_with_error(report, g) for g in groups()]
        xs = [g + (i - (len(data) - 1) / 2) * width for g in range(len(groups()))]
        errors = [e if e is not None else 0.0 for _, e in values]
        bars = ax.bar(xs, [v for v, _ in values], width, label=label,
                      yerr=errors if any(e is not None for _, e in values) else None, capsize=3)
        ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=2)
    ax.set_xticks(range(len(groups())), ["overall", *(get_kind(t).label for t in task_types())])
    ax.set_ylabel("pass@1")
    ax.set_title(f"held-out pass@1: {first.get('tasks_in_file')} tasks x {first.get('samples')} samples, "
                 f"T={first.get('temperature')}, {first.get('max_tokens')} tokens", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
