"""One adapter as a kept checkpoint holds it, for `popula export --step`.

A run's adapters/ holds only the live members' latest weights; evolution replaces a student
every few steps and training moves the rest. A kept checkpoint (`run.keep_checkpoints`) holds
every live adapter as it was at its step, so a student the in-run probe scored best at step 90
can still be shared at step 120. Read-only: nothing of the run is changed.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch

from popula.errors import PopulaError
from popula.league import League
from popula.run.checkpoint import Checkpoints


@dataclass(frozen=True)
class Snapshot:
    """League member `member` (training adapter `adapter`) at checkpoint `step`: its weights in
    PEFT's key names and the league as it stood then (ratings for the model card)."""

    step: int
    member: str
    adapter: str
    league: League
    weights: dict[str, torch.Tensor]


def read_snapshot(run_dir: Path, step: int, member: str | None = None) -> Snapshot:
    """Member `member` (default: the best-rated student live at `step`) from RUN_DIR's verified
    checkpoint of `step`; a PopulaError names the kept steps or the members live then."""
    checkpoints = Checkpoints(run_dir / "checkpoints")
    kept = checkpoints.steps()
    if step not in kept:
        listed = ", ".join(map(str, kept)) or "none"
        raise PopulaError(f"--step {step}: {checkpoints.root} keeps no checkpoint of that step (kept: {listed}; "
                          "run.keep_checkpoints sets how many a run keeps)")
    path = checkpoints.load(step)
    try:
        roster = json.loads((path / "state.json").read_text())["roster"]
        state = torch.load(path / "learner.pt", map_location="cpu", weights_only=True)
        adapters = state["adapters"]
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
        raise PopulaError(f"{path}: checkpoint cannot be read ({err})") from None
    league = League.load(path / "league.json")
    if member is None:
        live = league.ranked("student")
        if not live:
            raise PopulaError(f"{path / 'league.json'}: no live student at step {step}")
        member = live[0].name
    adapter = member if member in adapters else roster.get(member)
    if adapter not in adapters:
        raise PopulaError(f"--adapter {member}: not live at step {step} "
                          f"(live then: {', '.join(sorted(roster))})")
    return Snapshot(step=step, member=member, adapter=adapter, league=league, weights=adapters[adapter]["weights"])
