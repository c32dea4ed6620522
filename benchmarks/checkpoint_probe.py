"""A run's held-out curve re-measured from its kept checkpoints on a larger set, paired task by task.

    python3 benchmarks/checkpoint_probe.py --base BASE.json [--from STEP] [--first N] [--plot PNG] STEP=REPORT.json ...

Why: the in-run probe (`heldout.*`) is small so that it is cheap, and a small set moves by
chance: on 100 tasks x 2 answers a change of 0.02 between two probes is inside its noise. After
a run, every kept checkpoint (`run.keep_checkpoints`) can be scored on a larger set of the same
seed, with each task's result paired across steps and against the base, which a curve needs to
say whether it still rises:

    popula tasks --n 300 --seed 987654 --out tune300.jsonl        # the probe's seed, more tasks
    popula export RUN exported/S0-at-90 --adapter S0-s90 --step 90
    popula eval BASE --adapter exported/S0-at-90 --tasks tune300.jsonl --samples 2 \\
        --temperature 0.8 --max-tokens 96 --per-task --json > 90-S0.json
    popula eval BASE --tasks tune300.jsonl ... --per-task --json > base.json

Each STEP=REPORT.json is one live student at that step (`popula eval --per-task --json`); a
step's figure is the mean over its students, task by task. STEP may be any label (`T-s2=...`,
`U-s2=...`): two runs' students at one step compare the same way, paired task by task. Printed per step: each student's
pass@1, the mean, the mean on the first N tasks (the in-run probe's own tasks when the set
shares its seed), the mean minus the base's and minus the mean at step `--from`, each with the
standard error of the paired per-task difference; then the mean per task type (code_o, code_i,
code_f), where a step's gain or loss lies. Every report must hold the same tasks. The last line
is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.errors import PopulaError  # noqa: E402
from popula.eval.paired import mean_report, paired_difference, per_task_pass1  # noqa: E402
from popula.exits import run_script  # noqa: E402


def read_report(path: Path) -> dict[str, Any]:
    """One `popula eval --per-task --json` report, its per-task pass@1 checked readable."""
    try:
        report = json.loads(path.read_text())
        per_task_pass1(report)
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError, PopulaError) as err:
        raise PopulaError(f"{path}: not a `popula eval --per-task --json` report ({err})") from None
    return report


def figures(steps: dict[str, list[dict[str, Any]]], base: dict[str, Any], ref: str | None,
            first: int) -> dict[str, Any]:
    """Per step (its students' reports): each student's pass@1, the mean (all tasks, the base's
    first `first` in file order), and the paired differences from the base and from step `ref`."""
    ids = [t["id"] for t in base["per_task"]]
    types = {t["id"]: t.get("type", "all") for t in base["per_task"]}
    for step, reports in steps.items():
        for report in reports:
            if set(per_task_pass1(report)) != set(ids):
                raise PopulaError(f"step {step} {report.get('adapter')}: its report holds other tasks than the base's")
    mean = {step: mean_report(reports, model=step) for step, reports in steps.items()}
    first = min(first, len(ids))
    out: dict[str, Any] = {"tasks": len(ids), "first": first,
                           "base_pass1": sum(per_task_pass1(base).values()) / len(ids),
                           "base_by_type": by_type(per_task_pass1(base), types), "from": ref, "steps": {}}
    for step, reports in steps.items():  # in the order given
        rates = per_task_pass1(mean[step])
        over = paired_difference([mean[step]], [base])
        row = {"members": {r.get("adapter"): sum(per_task_pass1(r).values()) / len(ids)
                           for r in sorted(reports, key=lambda r: str(r.get("adapter")))},
               "mean_pass1": sum(rates.values()) / len(ids),
               "mean_pass1_first": sum(rates[i] for i in ids[:first]) / first,
               "over_base": over.mean, "over_base_se": over.task_se, "by_type": by_type(rates, types)}
        if ref is not None and step != ref:
            change = paired_difference([mean[step]], [mean[ref]])
            row["from_ref"], row["from_ref_se"] = change.mean, change.task_se
        out["steps"][step] = row
    return out


def by_type(rates: dict[str, float], types: dict[str, str]) -> dict[str, float]:
    """Mean pass@1 per task type, the types in name order."""
    groups: dict[str, list[float]] = defaultdict(list)
    for task, kind in types.items():
        groups[kind].append(rates[task])
    return {kind: sum(v) / len(v) for kind, v in sorted(groups.items())}


def table(fig: dict[str, Any]) -> str:
    ref = fig["from"]
    lines = [f"base pass@1 {fig['base_pass1']:.3f} on {fig['tasks']} tasks",
             f"| step | students | mean pass@1 | first {fig['first']} | over the base (se) | from step {ref} (se) |",
             "|---|---|---|---|---|---|"]
    for step, row in fig["steps"].items():
        members = ", ".join(f"{m} {p:.3f}" for m, p in row["members"].items())
        change = f"{row['from_ref']:+.3f} ({row['from_ref_se']:.3f})" if "from_ref" in row else "-"
        lines.append(f"| {step} | {members} | {row['mean_pass1']:.3f} | {row['mean_pass1_first']:.3f} | "
                     f"{row['over_base']:+.3f} ({row['over_base_se']:.3f}) | {change} |")
    kinds = list(fig["base_by_type"])
    lines += ["", "| step | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds),
              "| base | " + " | ".join(f"{fig['base_by_type'][k]:.3f}" for k in kinds) + " |"]
    lines += [f"| {step} | " + " | ".join(f"{row['by_type'][k]:.3f}" for k in kinds) + " |" for step, row in fig["steps"].items()]
    return "\n".join(lines)


def plot(fig: dict[str, Any], path: Path) -> None:
    """The curve on all tasks (bars: the paired se from the reference step) beside its first N
    tasks' and the base's level: what the in-run probe would have drawn, and what it could not see."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(fig["steps"])
    steps = [int(s) for s in labels] if all(s.isdigit() for s in labels) else list(range(len(labels)))
    rows = list(fig["steps"].values())
    ax = plt.figure(figsize=(6.4, 3.6)).gca()
    ax.set_xticks(steps, labels)
    ax.errorbar(steps, [r["mean_pass1"] for r in rows], yerr=[r.get("from_ref_se", 0.0) for r in rows],
                marker="o", capsize=3, label=f"all {fig['tasks']} tasks (bars: paired se from step {fig['from']})")
    ax.plot(steps, [r["mean_pass1_first"] for r in rows], marker="s", ls="--", label=f"its first {fig['first']} tasks")
    ax.axhline(fig["base_pass1"], color="gray", ls=":", label="base, all tasks")
    ax.set(xlabel="checkpoint step", ylabel="students' mean pass@1", title="held-out curve from kept checkpoints")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    plt.tight_layout()
    plt.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", metavar="STEP=REPORT.json")
    parser.add_argument("--base", type=Path, required=True, help="the bare base's report on the same tasks")
    parser.add_argument("--from", dest="ref", metavar="STEP", help="the step every other is compared with (default: the first given)")
    parser.add_argument("--first", type=int, default=100, help="also the mean over the first N tasks (default 100)")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="also draw the curve to this file")
    args = parser.parse_args(argv)
    try:
        steps: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for item in args.reports:
            step, sep, path = item.partition("=")
            if not sep or not step:
                raise PopulaError(f"{item}: expected STEP=REPORT.json")
            steps[step].append(read_report(Path(path)))
        ref = args.ref if args.ref is not None else next(iter(steps))
        if ref not in steps:
            raise PopulaError(f"--from {ref}: no report of that step")
        fig = figures(dict(steps), read_report(args.base), ref, args.first)
    except PopulaError as err:
        print(f"checkpoint_probe: error: {err}", file=sys.stderr)
        return 2
    if args.plot is not None:
        plot(fig, args.plot)
    print(table(fig))
    print(json.dumps(fig))
    return 0


if __name__ == "__main__":
    run_script(main)
