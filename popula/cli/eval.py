"""`popula eval RUN_DIR|MODEL --tasks FILE.jsonl [--adapter NAME | --pick rating] [--samples K] [--json]`.

Generates answers to task records, judges them in the sandbox, and prints pass@1 and pass@K
per task type (a table, or one JSON object with --json). A run directory means its
population: every live student, their mean, weakest and strongest, and the one the rating
would pick (`popula.eval.population`); `--adapter NAME` or `--pick rating` scores one
adapter as a model is scored (one report, `popula.eval.evaluate.EvalReport`); `--answers FILE`
writes that model's answers as generated, with each one's verdict.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from popula.cli.help import add_command
from popula.engines.registry import ENGINES
from popula.errors import PopulaError
from popula.eval.settings import EvalSettings
from popula.records import task_file, write_jsonl


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "eval",
        examples=['popula tasks --n 300 --seed 1 --out heldout.jsonl', 'popula eval runs/first --tasks heldout.jsonl --samples 4', 'popula eval tiny --tasks heldout.jsonl --json > base.json'],
        help="score a run's population, one adapter, or a bare base on task records: pass@1 and pass@k per task type",
        description=(
            "Pose every task of FILE.jsonl to a model K times, judge the answers in the sandbox, and "
            "report pass@1 and pass@K (unbiased estimator) per task type and overall. TARGET is a run "
            "directory (its config's base model and engine) or a model: `tiny`, a model directory or a "
            "Hugging Face id (the bare base, or --adapter PEFT_DIR). A run directory without --adapter or "
            "--pick reports its population: every live student (a single-agent run: its one adapter) "
            "scored with the same settings and seeds in one engine session, the mean over them, the "
            "weakest and the strongest, the one the rating would pick (best mu - 3 sigma), each member "
            "minus the mean task by task with its standard error, and the rank correlation of rating and "
            "pass@1; --json prints one object {kind: population, members: [...], mean, weakest, strongest, "
            "rating_pick, rating_spearman, paired, ...} whose every member entry is that member's own "
            "one-model report. --adapter NAME or --pick rating scores one adapter of the run instead and "
            "prints the one-model report (what benchmarks and `popula plot --eval` read). Tasks without "
            "outputs get them from the sandbox; invalid tasks are skipped and counted."
        ),
    )
    parser.add_argument("target", metavar="RUN_DIR|MODEL", help="a run directory, `tiny`, a model directory or an HF id")
    parser.add_argument("--tasks", required=True, metavar="FILE.jsonl",
                        help="task records, one per line (as `popula tasks` writes them; samples/tasks.jsonl shows every field)")
    one = parser.add_mutually_exclusive_group()
    one.add_argument("--adapter", metavar="NAME",
                     help="score this one adapter or league member of the run (default: every live student); "
                          "with a MODEL, a PEFT directory")
    one.add_argument("--pick", choices=("rating",),
                     help="score one student of the run, picked by `rating`: the best conservative rating "
                          "mu - 3 sigma (what `popula eval RUN_DIR` scored alone before it reported the population)")
    parser.add_argument("--samples", type=int, default=1, metavar="K", help="answers per task (default: 1)")
    parser.add_argument("--temperature", type=float, default=None, metavar="T",
                        help="sampling temperature (default: 0, greedy, for one sample; 0.8 for several)")
    parser.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling (default: 1.0)")
    parser.add_argument("--max-tokens", type=int, default=None, metavar="N",
                        help="answer length limit (default: 128 for `tiny`'s compact prompts, 1024 for "
                             "instruction-tuned models; the same for a run's adapter and a bare base, so "
                             "the two compare like with like)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="sampling seed (default: 0)")
    parser.add_argument("--engine", choices=tuple(ENGINES), default=None,
                        help="generation engine (default: the run's config, else torch)")
    parser.add_argument("--workers", type=int, default=2, metavar="N", help="sandbox workers (default: 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--per-task", action="store_true",
                        help="with --json, include every task's counts (for a population, in each member's entry)")
    parser.add_argument("--answers", type=Path, default=None, metavar="FILE.jsonl",
                        help="also write every task's answers as the model generated them, with the sandbox's "
                             "verdict on each ({id, type, answers, correct} per line): what the model does, not "
                             "just how often it is right. One model only: with --adapter, --pick or a MODEL")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    # the flags and the task file are checked before torch loads: a mistake costs a second, not ten
    settings = EvalSettings(samples=args.samples, temperature=args.temperature, top_p=args.top_p,
                            max_tokens=args.max_tokens, seed=args.seed)
    with task_file(args.tasks):
        pass
    if args.answers is not None and not args.answers.parent.is_dir():
        raise PopulaError(f"--answers {args.answers}: no folder {args.answers.parent} to write it in")

    # deferred: torch loads only after main() has set the OpenMP waits (popula.openmp)
    from popula.eval.evaluate import format_report
    from popula.eval.population import format_population
    from popula.apps.targets import evaluate_population, evaluate_target
    from popula.run.rundir import best_student, is_run_dir

    def warn(message: str) -> None:
        print(f"popula eval: warning: {message}", file=sys.stderr)

    run_dir = is_run_dir(Path(args.target).expanduser())
    if args.pick is not None and not run_dir:
        raise PopulaError(f"--pick {args.pick}: picks a student of a run directory, and {args.target} is not one "
                          "(no config.yaml)")
    if args.answers is not None and run_dir and args.adapter is None and args.pick is None:
        raise PopulaError("--answers writes one model's answers; name it with --adapter NAME or --pick rating")
    if run_dir and args.adapter is None and args.pick is None:
        population = evaluate_population(args.target, args.tasks, engine=args.engine, settings=settings,
                                         workers=args.workers, progress=True, log=warn)
        if args.json:
            print(json.dumps(population.to_json(per_task=args.per_task)))
        else:
            print(format_population(population))
        return 0
    adapter = best_student(Path(args.target).expanduser()) if args.pick == "rating" else args.adapter
    report = evaluate_target(args.target, args.tasks, adapter=adapter, engine=args.engine, settings=settings,
                             workers=args.workers, progress=True, log=warn)
    if args.answers is not None:
        try:
            write_jsonl(args.answers, report.answers)
        except OSError as err:
            raise PopulaError(f"--answers {args.answers}: cannot write it ({err.strerror or err})") from None
    if args.json:
        data = report.to_json()
        if not args.per_task:
            del data["per_task"]
        print(json.dumps(data))
    else:
        print(format_report(report))
    return 0
