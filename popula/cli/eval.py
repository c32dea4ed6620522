"""`popula eval RUN_DIR|MODEL --tasks FILE.jsonl [--adapter NAME] [--samples K] [--json]`.

Generates answers to task records with one adapter (by default a run's best student by
conservative TrueSkill rating) or a bare base, judges them in the sandbox, and prints
pass@1 and pass@K per task type (a table, or one JSON object with --json).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="score an adapter (or a bare base) on task records: pass@1 and pass@k per task type",
        description=(
            "Pose every task of FILE.jsonl to a model K times, judge the answers in the sandbox, and "
            "report pass@1 and pass@K (unbiased estimator) per task type and overall. TARGET is a run "
            "directory (its config's base model and engine; the adapter named by --adapter, or else the "
            "best student by conservative TrueSkill rating) or a model: `tiny`, a model directory or a "
            "Hugging Face id (the bare base, or --adapter PEFT_DIR). Tasks without outputs get them from "
            "the sandbox; invalid tasks are skipped and counted."
        ),
    )
    parser.add_argument("target", metavar="RUN_DIR|MODEL", help="a run directory, `tiny`, a model directory or an HF id")
    parser.add_argument("--tasks", required=True, metavar="FILE.jsonl",
                        help="task records (docs/design.md § Task records), one per line")
    parser.add_argument("--adapter", metavar="NAME",
                        help="adapter or league member of the run (default: best student); with a MODEL, a PEFT directory")
    parser.add_argument("--samples", type=int, default=1, metavar="K", help="answers per task (default: 1)")
    parser.add_argument("--temperature", type=float, default=None, metavar="T",
                        help="sampling temperature (default: 0, greedy, for one sample; 0.8 for several)")
    parser.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling (default: 1.0)")
    parser.add_argument("--max-tokens", type=int, default=None, metavar="N",
                        help="answer length limit (default: 128 for `tiny`'s compact prompts, 1024 for "
                             "instruction-tuned models; the same for a run's adapter and a bare base, so "
                             "the two compare like with like)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="sampling seed (default: 0)")
    parser.add_argument("--engine", choices=("torch", "vllm"), default=None,
                        help="generation engine (default: the run's config, else torch)")
    parser.add_argument("--workers", type=int, default=2, metavar="N", help="sandbox workers (default: 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--per-task", action="store_true", help="with --json, include every task's counts")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    # deferred: torch loads only after main() has set the OpenMP waits (popula.openmp)
    from popula.eval_target import evaluate_target
    from popula.evaluate import EvalSettings, format_report

    settings = EvalSettings(samples=args.samples, temperature=args.temperature, top_p=args.top_p,
                            max_tokens=args.max_tokens, seed=args.seed)

    def warn(message: str) -> None:
        print(f"popula eval: warning: {message}", file=sys.stderr)

    report = evaluate_target(args.target, args.tasks, adapter=args.adapter, engine=args.engine, settings=settings,
                             workers=args.workers, progress=True, log=warn)
    if args.json:
        data = report.to_json()
        if not args.per_task:
            del data["per_task"]
        print(json.dumps(data))
    else:
        print(format_report(report))
    return 0
