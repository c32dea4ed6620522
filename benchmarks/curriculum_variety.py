"""How varied is a run's curriculum? Program forms and line counts of its valid tasks over steps.

    python3 benchmarks/curriculum_variety.py RUN_DIR [RUN_DIR ...] [--windows 1-20 21-60 61-120]
        [--reference TASKS.jsonl]

Reads each run's task log (RUN_DIR/tasks.jsonl: every valid task with the step it was posed)
and reports, per window of steps and as the mean over the runs given:
- `distinct`: the share of distinct program forms among a step's valid tasks (the step mean);
  a form is the program with variables renamed and literals replaced by their type
  (popula/novelty.py), so `sum(a)` with other literals is one form;
- `repeated`: the share of valid tasks whose form was posed at an earlier step of the run
  (the generated seed tasks included): what the students meet that they have met before;
- `multiline`: the share with more than one line of code in the function body;
- `depth`: their mean AST depth.

A self-play curriculum that narrows onto a few one-line programs shows here even where its
depth does not (docs/results/learning, section 20). `--reference` adds the multiline share and
depth of a task file, e.g. the held-out set from `popula tasks`: how far the curriculum sits
from the tasks its students are scored on. Give runs of one setting at a time: the means pool
them. Last line: {"windows": {"A-B": {"distinct", "repeated", "multiline", "depth"}}, "runs"[,
"reference": {"tasks", "multiline", "depth"}]}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from popula.complexity import ast_depth, is_multiline  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.novelty import distinct_form_rate, program_form  # noqa: E402
from popula.records import read_records  # noqa: E402


def _window(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    try:
        window = (int(lo), int(hi))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a window is FIRST-LAST, e.g. 1-20; got {text!r}") from None
    if not 1 <= window[0] <= window[1]:
        raise argparse.ArgumentTypeError(f"a window needs 1 <= FIRST <= LAST; got {text!r}")
    return window


def run_figures(run_dir: Path, windows: list[tuple[int, int]]) -> dict[str, dict[str, float | None]]:
    """The four figures of one run per window (None where the window holds no task)."""
    log = run_dir / "tasks.jsonl"
    if not log.is_file():
        raise SystemExit(f"{run_dir}: no tasks.jsonl (is it a run directory?)")
    by_step: dict[int, list[str]] = defaultdict(list)
    for lineno, line in enumerate(log.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
                by_step[int(record["step"])].append(record["program"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                raise SystemExit(f"{log}:{lineno}: not a task record with a step") from None
    seen: set[str] = set()
    rows: dict[tuple[int, int], dict[str, list[float]]] = {w: defaultdict(list) for w in windows}
    for step in sorted(by_step):
        programs = by_step[step]
        for lo, hi in windows:
            if lo <= step <= hi:
                row = rows[lo, hi]
                row["distinct"].append(distinct_form_rate(programs))
                row["repeated"] += [float(program_form(p) in seen) for p in programs]
                row["multiline"] += [float(is_multiline(p)) for p in programs]
                row["depth"] += [float(ast_depth(p)) for p in programs]
        seen |= {program_form(p) for p in programs}
    return {f"{lo}-{hi}": {k: statistics.fmean(v) if v else None for k, v in
                           ((k, rows[lo, hi][k]) for k in ("distinct", "repeated", "multiline", "depth"))}
            for lo, hi in windows}


def reference_figures(tasks: Path) -> dict[str, float]:
    """Multiline share and mean AST depth of a task file's programs (`popula tasks` writes one)."""
    programs = [record.program for record in read_records(tasks)]
    return {"tasks": len(programs), "multiline": round(statistics.fmean(map(is_multiline, programs)), 4),
            "depth": round(statistics.fmean(map(ast_depth, programs)), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR")
    parser.add_argument("--windows", type=_window, nargs="+", default=[(1, 20), (21, 60), (61, 120)],
                        metavar="FIRST-LAST", help="step windows (default: 1-20 21-60 61-120)")
    parser.add_argument("--reference", type=Path, metavar="TASKS.jsonl",
                        help="also report a task file's multiline share and depth (e.g. the held-out set)")
    args = parser.parse_args()
    reference = reference_figures(args.reference) if args.reference else None
    per_run = {str(d): run_figures(d, args.windows) for d in args.runs}
    pooled: dict[str, dict[str, float | None]] = {}
    for name in per_run[str(args.runs[0])]:
        pooled[name] = {}
        for key in ("distinct", "repeated", "multiline", "depth"):
            values = [f[name][key] for f in per_run.values() if f[name][key] is not None]
            pooled[name][key] = round(statistics.fmean(values), 4) if values else None

    cell = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    print(f"{'run':44s} {'steps':>8s} {'distinct':>9s} {'repeated':>9s} {'multiline':>9s} {'depth':>6s}")
    for run, figures in list(per_run.items()) + [(f"mean of {len(per_run)} runs", pooled)]:
        for name, f in figures.items():
            print(f"{run[-44:]:44s} {name:>8s} {cell(f['distinct']):>9s} {cell(f['repeated']):>9s} "
                  f"{cell(f['multiline']):>9s} {cell(f['depth']):>6s}")
    if reference:
        print(f"{'reference ' + str(args.reference)[-34:]:44s} {'-':>8s} {'-':>9s} {'-':>9s} "
              f"{reference['multiline']:>9.2f} {reference['depth']:>6.2f}")
    print(json.dumps({"windows": pooled, "runs": len(per_run), **({"reference": reference} if reference else {})}))


if __name__ == "__main__":
    run_script(main)
