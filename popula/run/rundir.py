"""The run directory (DESIGN 3.3): creating it, and refusing to mix two runs in one.

A fresh run refuses a directory that already holds a run; `--resume` refuses one whose
saved config differs from the given one (except `run.steps`, which a resume may extend, and `ray.*` / `runtime.*`: a local run may continue on a cluster or another device),
naming every key that differs.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from popula.config import Config
from popula.errors import PopulaError

# What a resume may change: how long the run goes on, and where its workers run (on which
# device: a run started on a CPU may go on where there is a GPU).
RESUMABLE_KEYS = {"run.steps", "ray", "runtime"}


def _resumable(key: str) -> bool:
    return key in RESUMABLE_KEYS or key.split(".", 1)[0] in RESUMABLE_KEYS


def prepare_run_dir(run_dir: Path, cfg: Config, resume: bool) -> None:
    config_path = run_dir / "config.yaml"
    if resume:
        if not config_path.exists():
            raise PopulaError(f"{run_dir}: nothing to resume (no config.yaml); start it without --resume")
        saved = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        current = cfg.model_dump(mode="json")
        differ = sorted(k for k in _diff(saved, current) if not _resumable(k))
        if differ:
            raise PopulaError(
                f"{run_dir} belongs to another config: it differs at {', '.join(differ)}. "
                "Resume with the run's own config.yaml, or start a new run with --out."
            )
    elif config_path.exists():
        raise PopulaError(
            f"{run_dir} already holds a run; continue it with --resume or choose another --out"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = config_path.with_name("config.yaml.tmp")
    tmp.write_text(cfg.to_yaml(), encoding="utf-8")
    tmp.replace(config_path)


def member_adapter(run_dir: Path, member: str) -> str:
    """The adapter a league member trains, from the newest checkpoint's roster.

    Members and adapters share names in a population; in the single-agent baseline both
    league entries (T0, S0) train the one adapter A0.
    """
    states = sorted((run_dir / "checkpoints").glob("step-*/state.json"))
    if not states:
        return member
    try:
        roster = json.loads(states[-1].read_text())["roster"]
    except (OSError, json.JSONDecodeError, KeyError) as err:
        raise PopulaError(f"{states[-1]}: unreadable run state ({err})") from None
    return roster.get(member, member)


def _diff(a: Any, b: Any, prefix: str = "") -> set[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys: set[str] = set()
        for key in a.keys() | b.keys():
            keys |= _diff(a.get(key), b.get(key), f"{prefix}{key}.")
        return keys
    return set() if a == b else {prefix.rstrip(".")}


class GracefulStop:
    """First Ctrl-C: finish the current step, checkpoint, exit. Second: stop at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> "GracefulStop":
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\npopula: stopping after this step (Ctrl-C again to stop now)", flush=True)
