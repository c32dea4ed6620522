"""The metrics.jsonl row of one step (DESIGN 3.4), computed from what the step played."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from popula.complexity import measure
from popula.run.selfplay import StepGame


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def step_row(step: int, game: StepGame, learn: dict[str, Any], evolved: list[dict[str, Any]], *,
             wall_s: float, phases: dict[str, float]) -> dict[str, Any]:
    valid = [p for p in game.proposals if p.valid]
    complexity = [measure(p.task.program) for p in valid]
    attempts = game.attempts
    tokens = sum(len(p.sample.token_ids) for p in game.proposals) + sum(len(a.sample.token_ids) for a in attempts)
    return {
        "step": step,
        "wall_s": round(wall_s, 3),
        "valid_rate": len(valid) / len(game.proposals) if game.proposals else 0.0,
        "solve_rate": _mean([float(bool(a.correct)) for a in attempts]) or 0.0,
        "teacher_reward_mean": _mean([p.reward for p in game.proposals]) or 0.0,
        "student_reward_mean": _mean([a.reward for a in attempts]) or 0.0,
        "malformed_rate": _mean([float(a.answer is None) for a in attempts]),
        "tasks_by_type": dict(Counter(p.task_type for p in valid)),
        "ast_depth": _mean([c.ast_depth for c in complexity]),
        "cyclomatic": _mean([c.cyclomatic for c in complexity]),
        "loc": _mean([c.loc for c in complexity]),
        "n_vars": _mean([c.n_vars for c in complexity]),
        "logprob_gap_max": learn.get("logprob_gap_max"),
        "tokens_generated": tokens,
        "verify_per_s": round(game.verified / game.verify_s, 1) if game.verify_s > 0 else None,
        "evolved": evolved,
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "learner": learn,
    }
