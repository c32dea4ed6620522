"""`popula run CONFIG`: a whole population self-play run, with progress, logs, checkpoints."""

from __future__ import annotations

import argparse
from pathlib import Path

from popula.config import load_config
from popula.kinds import task_types


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a population of teacher and student adapters (self-play RL)",
        description=(
            f"Run PopuLoRA-style self-play: teachers propose {'/'.join(task_types())} tasks, the "
            "sandbox validates them, matched students answer, all adapters are updated by "
            "policy gradient, and every few steps evolution replaces the weakest. Writes "
            "config.yaml, metrics.jsonl, league.json, adapters/, tasks.jsonl, checkpoints/ "
            "and tensorboard/ under RUN_DIR. Ctrl-C finishes the step, checkpoints and exits; "
            "--resume continues exactly where the last checkpoint left off."
        ),
        epilog="example: popula run configs/tiny-cpu.yaml --out runs/demo --set run.steps=20",
    )
    parser.add_argument("config", type=Path, metavar="CONFIG",
                        help="YAML config (see configs/); unnamed keys take the defaults, which are configs/tiny-cpu.yaml's, "
                             "and `extends: FILE` starts from another config")
    parser.add_argument("--out", type=Path, metavar="RUN_DIR", help="run directory (default: runs/<config name>)")
    parser.add_argument("--steps", type=int, metavar="N", help="total steps (overrides run.steps)")
    parser.add_argument("--seed", type=int, metavar="S", help="seed (overrides seed)")
    parser.add_argument("--resume", action="store_true", help="continue RUN_DIR from its newest checkpoint")
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="run engines, sandboxes and learner as Ray actors; ADDRESS: 'auto', 'ray://host:10001' "
                             "(none: the config's ray.address, else a local Ray)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override any config field, e.g. --set population.teachers=2 (repeatable)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # deferred: torch loads only after main() has set the OpenMP waits (popula.openmp)
    from popula.run.population import PopulationRun

    overrides = list(args.overrides)
    if args.steps is not None:
        overrides.append(f"run.steps={args.steps}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    if args.ray is not None:
        overrides.append("ray.enabled=true")
        if args.ray:
            overrides.append(f"ray.address={args.ray}")
    cfg = load_config(args.config, overrides)
    if cfg.ray.enabled:
        print(f"popula run: engine {cfg.engine} on Ray actors: device per actor (cuda where ray.engine_gpus / "
              f"ray.learner_gpus > 0, else cpu), dtype {cfg.runtime.dtype}", flush=True)
    else:
        cfg = cfg.resolved()  # exits 2 here, before any model loads, if e.g. cuda is asked for and absent
        print(f"popula run: engine {cfg.engine} on device {cfg.runtime.device}, dtype {cfg.runtime.dtype}", flush=True)
    run_dir = args.out or Path("runs") / args.config.stem
    PopulationRun(cfg, run_dir, resume=args.resume).train()
    print(f"popula run: done; see {run_dir}/metrics.jsonl, `popula leaderboard {run_dir}`, `popula plot {run_dir}`")
    return 0
