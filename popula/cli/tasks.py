"""`popula tasks --n N --seed S --out FILE.jsonl`: write generated, verified tasks.

For held-out evaluation sets (`popula eval --tasks FILE`): the tasks come from the
program generator in the "heldout" random stream, which the tiny base's cold-start
corpus never draws from, and their outputs are computed by the sandbox.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from popula.cli.help import add_command
from popula.cli.paths import check_out_file
from popula.errors import PopulaError
from popula.kinds import get_kind, task_types
from popula.records import write_jsonl
from popula.tasks.generator import HELDOUT_NAMESPACE, generate_tasks


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "tasks",
        examples=['popula tasks --n 300 --seed 1 --out heldout.jsonl', 'popula tasks --n 50 --types code_f --difficulty hard --out hard.jsonl'],
        help="write a held-out file of generated tasks (outputs by the sandbox)",
        description="Generate N valid tasks from a seed with the program generator and write them as JSONL task records.",
    )
    parser.add_argument("--n", type=int, required=True, metavar="N", help="number of tasks")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default: 0)")
    parser.add_argument("--out", required=True, metavar="FILE.jsonl", help="where to write the task records")
    parser.add_argument("--difficulty", default="mixed", help="easy, medium, hard or mixed (default: mixed)")
    kinds = "; ".join(f"{t}: {get_kind(t).description}" for t in task_types())
    parser.add_argument("--types", default=",".join(task_types()),
                        help=f"comma-separated task types (default: all of them). {kinds}")
    parser.add_argument("--workers", type=int, default=2, metavar="W", help="sandbox workers (default: 2)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.n < 1:
        raise PopulaError(f"--n must be at least 1, got {args.n}")
    if args.workers < 1:
        raise PopulaError(f"--workers must be at least 1, got {args.workers}")
    check_out_file(Path(args.out), "--out")
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    tasks = generate_tasks(args.n, args.seed, args.difficulty, types, namespace=HELDOUT_NAMESPACE, workers=args.workers)
    write_jsonl(args.out, [t.to_json() for t in tasks])
    print(f"popula tasks: wrote {len(tasks)} tasks to {args.out}")
    return 0
