"""`popula retention RUN_DIR [--operator NAME ...] [--steps N] [--json]`.

Makes a child of the run's best students with each evolution operator, and reports the
parents' reward on a fixed held-out task set, the child's right after creation and after
each of N learner steps, and the steps it took to recover 95% of the parents' level (a
table, or one JSON object with --json). Method: popula/apps/retention.py.
"""

from __future__ import annotations

import argparse

from popula.cli.help import add_command


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "retention",
        examples=['popula retention runs/first --steps 5', 'popula retention runs/first --operator gaussian --operator splice --json'],
        help="do evolution children keep their parents' reward? per operator: start level, recovery steps",
        description=(
            "For each evolution operator, make a child of the run's best student(s) by conservative "
            "TrueSkill rating (a mutation: the best one; a crossover: the best two), then report the "
            "parents' mean student reward on a fixed set of generated held-out tasks, the child's reward "
            "at creation and after each of N learner steps on a fixed training task stream (fresh seeded "
            "samples each step), and the number of steps until the child reaches 95% of its parents' "
            "reward. Every sample is seeded, so parents and children answer under identical conditions."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (config.yaml, league.json, adapters/)")
    parser.add_argument("--operator", action="append", metavar="NAME", dest="operators",
                        help="operator to measure (repeatable; default: every registered operator)")
    parser.add_argument("--steps", type=int, default=5, metavar="N", help="update steps after creation (default: 5)")
    parser.add_argument("--tasks", type=int, default=24, metavar="N", help="held-out tasks scored (default: 24)")
    parser.add_argument("--train-tasks", type=int, default=24, metavar="N",
                        help="tasks of the update stream, the same each step (default: 24)")
    parser.add_argument("--samples", type=int, default=None, metavar="K",
                        help="answers per scored task (default: the run's generation.rollouts)")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="seed of the task sets, the children and every sample (default: 0)")
    parser.add_argument("--baseline", choices=("zero", "base"), default="zero",
                        help="what levels are measured above: zero (child/parents, default) or base (the bare "
                             "base's reward: the share of the parents' gain over the base a child keeps)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    # deferred: torch loads only after main() has set the OpenMP waits (popula.openmp)
    from popula.apps.retention import RetentionSettings, format_report, measure_run

    settings = RetentionSettings(operators=tuple(args.operators) if args.operators else None, steps=args.steps,
                                 tasks=args.tasks, train_tasks=args.train_tasks, samples=args.samples,
                                 seed=args.seed, baseline=args.baseline)
    report = measure_run(args.run_dir, settings, progress=True)
    print(json.dumps(report.to_json()) if args.json else format_report(report))
    return 0
