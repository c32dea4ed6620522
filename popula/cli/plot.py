"""`popula plot [RUN_DIR ...] [--eval LABEL=REPORT.json ...]`: PNG figures of runs and evaluations."""

from __future__ import annotations

import argparse
from pathlib import Path

from popula.cli.help import add_command
from popula.cli.paths import check_out_folder
from popula.errors import PopulaError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "plot",
        examples=['popula plot runs/first', 'popula plot runs/pop runs/single --eval base=base.json --eval pop=pop.json --out figs'],
        help="draw PNG figures of solve rate, teacher reward, valid rate, complexity and held-out pass@1",
        description=(
            "Draw one PNG per measure (solve rate, teacher reward, valid rate, AST depth, "
            "cyclomatic complexity, lines of code, variables, distinct program forms, trivial tasks, tasks "
            "that ignore their input, student "
            "entropy and its bonus, groups with a signal) over steps. Give a population "
            "run and a baseline run to compare them on the same axes. Works on a running run. "
            "With --eval, also draw held-out pass@1 per task type from `popula eval --json` "
            "reports side by side (heldout_pass_at_1.png); reports measured with other settings "
            "or on other tasks are refused."
        ),
    )
    parser.add_argument("run_dirs", nargs="*", type=Path, metavar="RUN_DIR")
    parser.add_argument("--eval", action="append", default=[], metavar="LABEL=REPORT.json", dest="evals",
                        help="a `popula eval --json [--per-task]` report and its label (repeatable; "
                             "--per-task adds error bars)")
    parser.add_argument("--out", type=Path, help="output folder (default: FIRST_RUN_DIR/plots, else plots)")
    parser.set_defaults(func=run)


def parse_eval(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise PopulaError(f"--eval {text!r}: expected LABEL=REPORT.json, e.g. --eval base=base.json")
    return label, Path(path)


def run(args: argparse.Namespace) -> int:
    if not args.run_dirs and not args.evals:
        raise PopulaError("nothing to plot: give a RUN_DIR, an --eval LABEL=REPORT.json, or both")
    pairs = [parse_eval(text) for text in args.evals]
    evals = dict(pairs)
    if len(evals) < len(pairs):
        raise PopulaError("--eval: each report needs its own LABEL (two share one)")
    out = args.out or (args.run_dirs[0] / "plots" if args.run_dirs else Path("plots"))
    check_out_folder(out, "--out")
    # deferred: matplotlib loads only when a plot is asked for
    from popula.eval.plots import plot_reports
    from popula.run.plots import plot_runs

    if args.run_dirs:
        for path in plot_runs(args.run_dirs, out):
            print(path)
    if evals:
        print(plot_reports(evals, out / "heldout_pass_at_1.png"))
    return 0
