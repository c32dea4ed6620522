"""`popula plot RUN_DIR [RUN_DIR ...]`: PNG figures of a run's metrics over steps."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="draw PNG figures of solve rate, teacher reward, valid rate and complexity",
        description=(
            "Draw one PNG per measure (solve rate, teacher reward, valid rate, AST depth, "
            "cyclomatic complexity, lines of code, variables) over steps. Give a population "
            "run and a baseline run to compare them on the same axes. Works on a running run."
        ),
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--out", type=Path, help="output folder (default: FIRST_RUN_DIR/plots)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # deferred: matplotlib loads only when a plot is asked for
    from popula.run.plots import plot_runs

    out = args.out or args.run_dirs[0] / "plots"
    for path in plot_runs(args.run_dirs, out):
        print(path)
    return 0
