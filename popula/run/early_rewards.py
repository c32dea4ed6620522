"""In-run retention: each young evolved child's mean reward of a step beside its alive parents'.

The figures go to the step's metrics row and to the child's `early_rewards` in league.json.
`popula retention` measures retention on a run directory (`popula.apps.retention`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popula.league import League
from popula.run.selfplay import StepGame


def record_early_rewards(league: League, game: StepGame, step: int, min_age: int) -> list[dict[str, Any]]:
    """Each young evolved child's mean reward this step beside its alive parents' (in-run retention).

    Young: not yet ready to be replaced (age < evolution.min_age). The figures go to the
    metrics row (returned) and to the child's `early_rewards` in league.json.
    """
    rewards: dict[str, list[float]] = {}
    for p in game.proposals:
        rewards.setdefault(p.teacher, []).append(p.reward)
    for a in game.attempts:
        rewards.setdefault(a.student, []).append(a.reward)
    mean = {m: float(np.mean(r)) for m, r in rewards.items()}
    out = []
    for member in league.members.values():
        if not member.alive or not member.parents or member.age(step) > min_age:
            continue
        parents = [mean[p] for p in member.parents if p in mean]
        entry = (step, mean.get(member.name), float(np.mean(parents)) if parents else None)
        member.early_rewards.append(entry)
        out.append({"member": member.name, "age": member.age(step), "reward": entry[1],
                    "parents_reward": entry[2]})
    return out
