"""A settings ladder read from its runs: each rung's probe, exploration and curriculum beside the last.

    python3 benchmarks/settings_ladder.py LABEL=RUN_DIR [LABEL=RUN_DIR ...] [--window 10] [--until STEP]

Why: settings are chosen by a short ladder on the tuning set (one seed, few steps, each rung one
change on the one before), and the report is made afterwards on a held-out set no rung has seen.
A rung is judged on more than its probe's pass@1, which one seed of a short run measures
coarsely: whether its students' answers keep their spread (entropy, pass@k), how much of its
step carries a gradient, and whether its teachers' tasks stay deep and varied.

Each RUN_DIR is a `popula run` directory with a held-out probe (`heldout.every`), every rung on
the same probe set (refused otherwise). Printed per rung, in the order given:
- the probe at each step every rung probed: the live students' mean pass@1, the weakest's, and
  the mean pass@k (k = the probe's samples);
- means of the first and last `--window` steps: student entropy, the share of (task, student)
  groups whose rewards differ (`signal_groups`), AST depth and distinct forms of valid tasks,
  the students' training solve rate, the share of tasks a student answers without reading them
  (`trivial_rate`);
- the share of valid `code_f` tasks (teachers' own, from the run's `tasks.jsonl`) whose every
  output equals its input, over the same first and last steps: an identity function is the
  form a collapsed curriculum repeats (rung J, seed 1: `def f(n): return n`), and a student
  that answers `return x` solves it without reading the examples;
- the share of teachers' tasks of any kind whose program never reads its input, over the same
  steps (`popula.complexity.ignores_input`): constants of ever-new shapes are how rung T's seed
  2 thinned past the repeat penalty (`return [5]`, `return [4, 8, 9, 5]`);
- the share of teachers' tasks with a solve rate (`rho` in `tasks.jsonl`) that every rollout of
  their matched student solved, over the same steps, overall and (in the JSON) per task type: a
  task that easy pays its teacher what an unsolved one does under the design, and the answers
  narrowed as it grew (rungs V and W); and the share no rollout solved, the other end, where a
  penalty on solved tasks can push teachers (rung X's `code_f`) and a student gets no gradient;
- the mean step time with the probe's time left out.
`--until STEP` reads every run only up to that step, so rungs that ran on for different
lengths are judged over the same steps (a rule fixed at the last probe they all reached).
The last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.complexity import ignores_input  # noqa: E402
from popula.errors import PopulaError  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.run.buffer import SEED_TEACHER  # noqa: E402
from popula.run.metrics import read_metrics  # noqa: E402

WINDOWED = {  # metrics.jsonl key -> column label
    "student_entropy": "entropy",
    "signal_groups": "signal groups",
    "ast_depth": "AST depth",
    "distinct_forms": "distinct forms",
    "solve_rate": "solve rate",
    "trivial_rate": "trivial tasks",  # runs from before the measure read "-"
}
IDENTITY = "identity_code_f"  # windows' key for identity_share, read from tasks.jsonl
BLIND = "blind"  # windows' key for blind_share, read from tasks.jsonl
SOLVED = "solved_by_all"  # windows' key for solved_share (rho 1), read from tasks.jsonl
UNSOLVED = "solved_by_none"  # windows' key for solved_share at rho 0
SOLVE_ENDS = {SOLVED: 1.0, UNSOLVED: 0.0}  # windows' key -> the solve rate whose share it counts
TASK_SHARES = {  # windows' key of a share read from tasks.jsonl -> column label
    IDENTITY: "identity code_f",
    BLIND: "blind",
    SOLVED: "solved by every rollout",
    UNSOLVED: "solved by no rollout",
}


def rung_figures(rows: list[dict[str, Any]], window: int, tasks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One run's figures: its probe by step, windowed means of the first and last steps, the
    identity share of its `code_f` tasks over the same steps (when `tasks` is given), step time."""
    probe = {}
    for row in rows:
        if "heldout" in row:
            h = row["heldout"]
            scores = list(h["students"].values())
            probe[row["step"]] = {"set": [h["tasks"], h["samples"]],
                                  "mean_pass1": statistics.fmean(s["pass1"] for s in scores),
                                  "weakest_pass1": min(s["pass1"] for s in scores),
                                  "mean_passk": statistics.fmean(s["passk"] for s in scores)}
    windows = {key: {"first": _mean(rows[:window], key), "last": _mean(rows[-window:], key)} for key in WINDOWED}
    if tasks is not None:
        first, last = {row["step"] for row in rows[:window]}, {row["step"] for row in rows[-window:]}
        for key, share in ((IDENTITY, identity_share), (BLIND, blind_share)):
            windows[key] = {"first": share(tasks, first), "last": share(tasks, last)}
        kinds = sorted({t["type"] for t in tasks if "type" in t})
        for key, rho in SOLVE_ENDS.items():
            windows[key] = {"first": solved_share(tasks, first, rho=rho), "last": solved_share(tasks, last, rho=rho),
                            "last_by_type": {kind: solved_share(tasks, last, kind, rho) for kind in kinds}}
    step_s = [row["wall_s"] - row.get("phases", {}).get("heldout_s", 0.0) for row in rows]
    return {"steps": len(rows), "probe": probe, "windows": windows, "step_s": statistics.fmean(step_s) if step_s else None}


def identity_share(tasks: list[dict[str, Any]], steps: set[int]) -> float | None:
    """The share of teachers' `code_f` tasks posed at `steps` whose every output equals its input."""
    posed = [t for t in _teachers_tasks(tasks, steps) if t.get("type") == "code_f"]
    same = [t for t in posed if t["inputs"] and t["inputs"] == t["outputs"]]
    return len(same) / len(posed) if posed else None


def blind_share(tasks: list[dict[str, Any]], steps: set[int]) -> float | None:
    """The share of teachers' tasks posed at `steps`, of any kind, whose program never reads its
    input (`popula.complexity.ignores_input`): read from the log, so runs from before the
    `blind_rate` metric compare too."""
    posed = _teachers_tasks(tasks, steps)
    return sum(ignores_input(t["program"]) for t in posed) / len(posed) if posed else None


def solved_share(tasks: list[dict[str, Any]], steps: set[int], kind: str | None = None,
                 rho: float = 1.0) -> float | None:
    """The share of teachers' tasks posed at `steps` (of type `kind`, or any) whose solve rate is
    `rho`: every rollout solved (1) or none (0). Tasks never answered are not counted."""
    rated = [t for t in _teachers_tasks(tasks, steps) if t.get("rho") is not None and kind in (None, t.get("type"))]
    return sum(t["rho"] == rho for t in rated) / len(rated) if rated else None


def _teachers_tasks(tasks: list[dict[str, Any]], steps: set[int]) -> list[dict[str, Any]]:
    """The tasks the teachers posed at `steps`: the generated seed tasks the buffer starts from are not theirs."""
    return [t for t in tasks if t.get("step") in steps and t.get("teacher") != SEED_TEACHER]


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [row[key] for row in rows if row.get(key) is not None]
    return statistics.fmean(values) if values else None


def ladder(rungs: dict[str, list[dict[str, Any]]], window: int,
           tasks: dict[str, list[dict[str, Any]] | None] | None = None) -> dict[str, Any]:
    """Every rung's figures, on the probe steps all rungs share; refuses rungs probed on different sets."""
    tasks = tasks or {}
    figures = {label: rung_figures(rows, window, tasks.get(label)) for label, rows in rungs.items()}
    sets = {tuple(p["set"]) for f in figures.values() for p in f["probe"].values()}
    if len(sets) > 1:
        raise PopulaError(f"the rungs' probes differ in size ({sorted(sets)} tasks x samples); a ladder compares one probe set")
    shared = sorted(set.intersection(*(set(f["probe"]) for f in figures.values()))) if figures else []
    for f in figures.values():
        f["probe"] = {step: f["probe"][step] for step in shared}
    return {"window": window, "probe_steps": shared, "rungs": figures}


def format_table(result: dict[str, Any]) -> str:
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    steps = result["probe_steps"]
    head = ["rung", "steps"] + [f"probe {s}: mean / weakest / pass@k" for s in steps]
    head += [f"{label} first→last {result['window']}" for label in (*WINDOWED.values(), *TASK_SHARES.values())]
    head += ["step s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, f in result["rungs"].items():
        cells = [label, str(f["steps"])]
        cells += [" / ".join(num(f["probe"][s][k]) for k in ("mean_pass1", "weakest_pass1", "mean_passk")) for s in steps]
        cells += [f"{num(f['windows'][k]['first'])}→{num(f['windows'][k]['last'])}" for k in WINDOWED]
        for key in TASK_SHARES:
            share = f["windows"].get(key)
            cells.append("-" if share is None else f"{num(share['first'])}→{num(share['last'])}")
        cells.append("-" if f["step_s"] is None else f"{f['step_s']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _read_tasks(path: Path) -> list[dict[str, Any]] | None:
    """A run's task log, or None when it has none (the column then reads "-")."""
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("rungs", nargs="+", metavar="LABEL=RUN_DIR")
    parser.add_argument("--window", type=int, default=10, help="steps averaged for the first and last figures")
    parser.add_argument("--until", type=int, default=None, metavar="STEP",
                        help="read every run up to this step only (default: all its steps)")
    args = parser.parse_args()
    try:
        rungs, tasks = {}, {}
        for spec in args.rungs:
            label, sep, path = spec.partition("=")
            if not sep or not label or not path:
                raise PopulaError(f"{spec!r}: give each rung as LABEL=RUN_DIR")
            metrics = Path(path) / "metrics.jsonl"
            if not metrics.is_file():
                raise PopulaError(f"{metrics}: no such file; give a `popula run` directory")
            rows = read_metrics(metrics)
            rungs[label] = [row for row in rows if args.until is None or row["step"] <= args.until]
            tasks[label] = _read_tasks(Path(path) / "tasks.jsonl")
        result = ladder(rungs, args.window, tasks)
    except PopulaError as exc:
        sys.exit(f"settings_ladder: {exc}")
    print(format_table(result))
    print(json.dumps(result))


if __name__ == "__main__":
    run_script(main)
