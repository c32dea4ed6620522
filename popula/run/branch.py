"""A branch: a new run that starts from another run's kept checkpoint, with other settings.

Why: a settings ladder compares runs that differ in one setting, and a setting that only
acts late (a bound the coefficient first reaches at step 61) leaves the first steps
identical: runs are reproducible step for step, so training them again is wasted compute
(rung I of docs/results/smollm2-ladder spent 79 of its 120 steps reproducing H). A branch
copies what a resume of the source from that checkpoint would read (the checkpoint, the
adapter store, the league, the metrics and task log, which the resume cuts back to the
step) into a new run directory, writes the new config there, and leaves the source
untouched; `popula run --branch SOURCE STEP` then resumes the new directory.

What fixes the checkpoint's shapes and roster cannot change: the base model, the LoRA
layout and the population. Everything else may, and the branch names what changed in
RUN_DIR/branch.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from popula.config import Config
from popula.errors import PopulaError
from popula.run.checkpoint import Checkpoints
from popula.run.rundir import (CONFIG_TMP, RunDirLock, check_run_dir, config_differences, is_run_dir, resume_point,
                                write_config)

# The config sections a checkpoint's tensors and roster are made of.
FIXED_BY_CHECKPOINT = ("base_model", "lora", "population")
# What a resume of the source from its checkpoint reads, besides the checkpoint itself.
RUN_FILES = ("metrics.jsonl", "tasks.jsonl", "league.json")
BRANCH_FILE = "branch.json"


def check_branch(source: Path, step: int, run_dir: Path, cfg: Config) -> list[str]:
    """Refuse (PopulaError, one line) a branch that cannot be made, before anything loads: a
    source that is not a run, a step it does not keep, a `run_dir` that holds a run, a change
    to what the checkpoint fixes. Returns the config keys where `cfg` differs from the source's."""
    if not is_run_dir(source):
        raise PopulaError(f"--branch {source}: not a run directory (no config.yaml)")
    if run_dir.resolve() == source.resolve():
        raise PopulaError(f"--branch {source}: --out is the source run itself; give a new directory")
    resume_point(source, step)  # a step the source does not keep: the error lists the kept ones
    try:
        saved = yaml.safe_load((source / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise PopulaError(f"{source / 'config.yaml'}: unreadable ({err})") from None
    changed = config_differences(saved, cfg)
    fixed = [key for key in changed if key.split(".", 1)[0] in FIXED_BY_CHECKPOINT]
    if fixed:
        raise PopulaError(f"--branch {source}: the checkpoint fixes {', '.join(fixed)}; a branch may change any "
                          f"other setting (start a fresh run to change these)")
    if step >= cfg.run.steps:
        raise PopulaError(f"--branch {source} {step}: the run would end at step {cfg.run.steps}; give --steps "
                          f"above {step}")
    check_run_dir(run_dir, resume=False)
    return changed


def branch_run(source: Path, step: int, run_dir: Path, cfg: Config) -> list[str]:
    """Make `run_dir` a copy of `source` as its checkpoint of `step` left it, under `cfg`.

    Returns the config keys where `cfg` differs from the source's. Refuses what
    `check_branch` refuses and a corrupt checkpoint. A failed copy (a full disk) leaves
    `run_dir` without a config, so it holds no run and may be used again.
    """
    changed = check_branch(source, step, run_dir, cfg)
    checkpoint = Checkpoints(source / "checkpoints").load(step)  # verified against its manifest
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunDirLock(run_dir):
        try:
            _copy(source, checkpoint, run_dir)
            (run_dir / BRANCH_FILE).write_text(json.dumps(
                {"source": str(source.resolve()), "step": step, "changed": changed}, indent=1) + "\n")
            write_config(run_dir, cfg)  # last: until here the directory holds no run
        except OSError as err:
            for name in ("checkpoints", "adapters", *RUN_FILES, BRANCH_FILE, CONFIG_TMP):
                path = run_dir / name
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            raise PopulaError(f"--branch {source}: copying into {run_dir} failed ({err.strerror or err}); "
                              f"nothing of the source changed") from None
    return changed


def read_branch(run_dir: Path) -> dict | None:
    """What RUN_DIR/branch.json says of the run's origin ({"source", "step", "changed"}), or
    None for a run that was not branched. Refuses (PopulaError, one line) a file that is not
    such an object, naming it."""
    path = run_dir / BRANCH_FILE
    if not path.exists():
        return None
    try:
        origin = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PopulaError(f"{path}: unreadable ({err})") from None
    if not (isinstance(origin, dict) and isinstance(origin.get("source"), str)
            and isinstance(origin.get("step"), int) and isinstance(origin.get("changed"), list)):
        raise PopulaError(f"{path}: not a branch record (want source, step and changed)")
    return origin


def _copy(source: Path, checkpoint: Path, run_dir: Path) -> None:
    shutil.copytree(checkpoint, run_dir / "checkpoints" / checkpoint.name)
    shutil.copytree(source / "adapters", run_dir / "adapters")
    for name in RUN_FILES:
        if (source / name).exists():
            shutil.copy2(source / name, run_dir / name)
