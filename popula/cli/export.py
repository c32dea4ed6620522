"""`popula export RUN_DIR OUT [--adapter NAME]`: one adapter of a run as a shareable PEFT folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from popula.cli.help import add_command


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "export",
        help="write one adapter of a run as a PEFT folder with a model card, to share or load elsewhere",
        description=(
            "Copy one adapter of RUN_DIR (default: the live student with the best conservative rating) "
            "into OUT as a PEFT folder: adapter_config.json, adapter_model.safetensors and a README.md "
            "model card (base, steps, rating, held-out figures when the run measured them). The config "
            "names the base as you know it, never a path of this machine; `PeftModel.from_pretrained(base, "
            "OUT)` loads it anywhere that has the base. --step N takes the adapter as the run's kept "
            "checkpoint of step N held it, its card's figures as of that step."
        ),
        examples=["popula export runs/first exported/best-student",
                  "popula export runs/first exported/T2 --adapter T2",
                  "popula export runs/first exported/S1-step30 --adapter S1 --step 30"],
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("out", type=Path, metavar="OUT", help="a new (or empty) folder")
    parser.add_argument("--adapter", metavar="NAME",
                        help="a league member or adapter of the run (default: the best-rated live student)")
    parser.add_argument("--step", type=int, metavar="N",
                        help="take the adapter as the run's kept checkpoint of step N held it (a student the "
                             "held-out probe scored best before evolution replaced it; run.keep_checkpoints "
                             "sets how many a run keeps); default: its latest weights")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # deferred: the run's modules (config, league; no torch) load when an export runs, not for every --help
    from popula.apps.export import check_export_target, export_adapter

    check_export_target(args.out)
    done = export_adapter(args.run_dir, args.out, args.adapter, args.step)
    when = f" as of step {args.step}" if args.step is not None else ""
    print(f"popula export: {done.member}{when} (adapter {done.adapter}, base {done.base}) written to {done.out}")
    return 0
