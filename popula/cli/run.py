"""`popula run CONFIG`: a whole population self-play run, with progress, logs, checkpoints."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from popula.exits import INTERRUPTED
from popula.cli.help import add_command
from popula.config import load_config
from popula.errors import PopulaError
from popula.kinds import task_types
from popula.model.spec import check_base_model
from popula.run.branch import branch_run, check_branch
from popula.run.rundir import RunDirLock, check_run_dir, resume_point


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "run",
        examples=["popula run configs/tiny-cpu.yaml --out runs/first --steps 20",
                  "popula run configs/tiny-cpu.yaml --out runs/first --resume --steps 40",
                  "popula run configs/tiny-cpu.yaml --out runs/first --resume 10",
                  "popula run configs/tiny-cpu.yaml --out runs/lr4 --branch runs/first 10 --set learner.lr=4e-3"],
        help="run a population of teacher and student adapters (self-play RL)",
        description=(
            f"Run PopuLoRA-style self-play: teachers propose {'/'.join(task_types())} tasks, the "
            "sandbox validates them, matched students answer, all adapters are updated by "
            "policy gradient, and every few steps evolution replaces the weakest. Writes "
            "config.yaml, metrics.jsonl, league.json, adapters/, tasks.jsonl, checkpoints/ "
            "and tensorboard/ (or what logging.report_to names: wandb/) under RUN_DIR. Ctrl-C finishes the step, checkpoints and exits "
            "with code 130; --resume continues exactly where the last checkpoint left off."
        ),
    )
    parser.add_argument("config", type=Path, metavar="CONFIG",
                        help="YAML config (see configs/); unnamed keys take the defaults, which are configs/tiny-cpu.yaml's, "
                             "and `extends: FILE` starts from another config")
    parser.add_argument("--out", type=Path, metavar="RUN_DIR", help="run directory (default: runs/<config name>)")
    parser.add_argument("--steps", type=int, metavar="N", help="total steps (overrides run.steps)")
    parser.add_argument("--seed", type=int, metavar="S", help="seed (overrides seed)")
    parser.add_argument("--resume", nargs="?", const="latest", default=None, type=_resume_step, metavar="STEP",
                        help="continue RUN_DIR from its newest checkpoint, or from the kept checkpoint of STEP "
                             "(later ones are then replaced)")
    parser.add_argument("--branch", nargs=2, metavar=("SOURCE_RUN", "STEP"),
                        help="start RUN_DIR as a copy of SOURCE_RUN at its kept checkpoint of STEP, then train on "
                             "under this config (which may change anything but base_model, lora and population): "
                             "a comparison that changes a setting from step STEP on need not train the first STEP "
                             "steps again. SOURCE_RUN is not changed")
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="run engines, sandboxes and learner as Ray actors; ADDRESS: 'auto', 'ray://host:10001' "
                             "(none: the config's ray.address, else a local Ray)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override any config field, e.g. --set population.teachers=2 (repeatable)")
    parser.set_defaults(func=run)


def _resume_step(text: str) -> str | int:
    if text == "latest":
        return text
    try:
        step = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a checkpoint's step number, got {text!r}") from None
    if step < 0:
        raise argparse.ArgumentTypeError(f"a step is 0 or more, got {step}")
    return step


def run(args: argparse.Namespace) -> int:
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
    run_dir = args.out or Path("runs") / args.config.stem
    if args.branch is not None and args.resume is not None:
        raise PopulaError("--branch starts a new run and --resume continues one; give one of them")
    branch = _branch(args.branch)
    if branch is not None:
        check_branch(*branch, run_dir, cfg)
    resume = args.resume is not None
    # every argument is checked before anything loads or waits (a model build, a Ray cluster)
    check_run_dir(run_dir, resume)
    check_base_model(cfg.base_model)
    step = None if args.resume in (None, "latest") else args.resume
    if resume:
        start = resume_point(run_dir, step)
        if start >= cfg.run.steps:
            with RunDirLock(run_dir):  # a run still going in it is not finished: that refusal comes first
                pass
            print(f"popula run: {run_dir} is finished (step {start} of {cfg.run.steps}); to train it further, "
                  f"resume with more --steps")
            return 0
    if cfg.ray.enabled:
        print(f"popula run: engine {cfg.engine} on Ray actors: device per actor (cuda where ray.engine_gpus / "
              f"ray.learner_gpus > 0, else cpu), dtype {cfg.runtime.dtype}", flush=True)
    else:
        cfg = cfg.resolved()  # exits 2 here, before any model loads, if e.g. cuda is asked for and absent
        print(f"popula run: engine {cfg.engine} on device {cfg.runtime.device}, dtype {cfg.runtime.dtype}", flush=True)
    if branch is not None:
        source, step = branch
        changed = branch_run(source, step, run_dir, cfg)
        print(f"popula run: {run_dir} branches from {source} at step {step}; changed: "
              f"{', '.join(changed) or 'nothing'}", flush=True)
        resume = True
    # deferred: torch loads only after main() has set the OpenMP waits (popula.openmp)
    from popula.run.population import PopulationRun

    population = PopulationRun(cfg, run_dir, resume=resume, resume_step=step)
    if not population.train():
        again = shlex.join(["popula", "run", str(args.config), "--out", str(run_dir), "--resume", *_extra(args)])
        print(f"popula run: interrupted at step {population.step}; continue with: {again}", file=sys.stderr)
        return INTERRUPTED
    print(f"popula run: done; see {run_dir}/metrics.jsonl, `popula leaderboard {run_dir}`, `popula plot {run_dir}`")
    return 0


def _branch(arg: list[str] | None) -> tuple[Path, int] | None:
    if arg is None:
        return None
    source, text = arg
    if not text.isdigit():
        raise PopulaError(f"--branch {source} {text}: STEP is the number of a checkpoint {source} keeps")
    return Path(source), int(text)


def _extra(args: argparse.Namespace) -> list[str]:
    """The flags a resume must repeat to run what was asked (the config's own keys are in RUN_DIR)."""
    extra = [] if args.steps is None else ["--steps", str(args.steps)]
    extra += [] if args.seed is None else ["--seed", str(args.seed)]
    return extra + [f"--set={o}" for o in args.overrides]
