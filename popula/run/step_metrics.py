"""The metrics.jsonl row of one step (docs/design.md § metrics.jsonl), computed from what the step played."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from popula.complexity import ignores_input, measure, parsed_depths
from popula.engines.base import Sample
from popula.kinds import get_kind
from popula.league.schema import MatchRecord
from popula.novelty import distinct_form_rate
from popula.run.selfplay import StepGame, group_rewards


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def sampled_entropy(samples: Sequence[Sample]) -> float | None:
    """The sampled tokens' mean -log p over `samples`: a Monte-Carlo estimate of
    the sampling policy's per-token entropy. Students that collapse onto one way of answering,
    the usual road to a falling pass@k, show it here before any held-out score moves."""
    tokens = sum(len(s.logprobs) for s in samples)
    return -sum(sum(s.logprobs) for s in samples) / tokens if tokens else None


def completion_lengths(samples: Sequence[Sample]) -> dict[str, Any] | None:
    """Completion tokens of one role's samples: mean, longest, and the share cut at max_tokens.

    Why: a generate call decodes as many positions as its longest row, one forward each, so
    one completion that runs to its cap costs the whole call that many forwards; `capped`
    says how often the role does so (a teacher that rambles past its task, a student that
    never closes its answer)."""
    if not samples:
        return None
    lengths = [len(s.token_ids) for s in samples]
    return {"mean": float(np.mean(lengths)), "max": max(lengths),
            "capped": sum(s.finish_reason == "length" for s in samples) / len(samples)}


def trivial_rate(game: StepGame) -> float | None:
    """The share of the step's sandbox-valid tasks a student answers without reading them
    (`TaskKind.trivial_fault`: identity functions, constant code_f), whether or not
    `rewards.refuse_trivial` refused them: a curriculum drifting onto them shows here."""
    judged = [p for p in game.proposals if p.valid or (p.verdict is not None and p.verdict.reason == "trivial")]
    return _mean([float(not p.valid or get_kind(p.task_type).trivial_fault(p.task) is not None) for p in judged])


def blind_rate(game: StepGame) -> float | None:
    """The share of the step's valid tasks whose program never reads its input
    (`popula.complexity.ignores_input`), whether or not `rewards.blind_task_cap` caps their
    reward: constants of ever-new shapes thin a curriculum past the repeat penalty."""
    return _mean([float(ignores_input(p.task.program)) for p in game.proposals if p.valid])


def league_figures(matches: Sequence[MatchRecord]) -> dict[str, Any]:
    """How informative this step's matches were: predicted against realised outcomes.

    `p_teacher_mean` is TrueSkill's mean P(teacher wins) before the matches; PFSP aims it
    at 1/2. `teacher_win_rate` is what happened in the rated matches (a draw counts half);
    far from `p_teacher_mean` over many steps means the ratings are miscalibrated, both far
    from 1/2 means the game is lopsided and the ratings carry little information.
    """
    rated = [m for m in matches if m.result != "none"]
    wins = sum(1.0 if m.result == "teacher" else 0.5 if m.result == "draw" else 0.0 for m in rated)
    return {
        "matches": len(matches),
        "rated": len(rated),
        "p_teacher_mean": _mean([m.p_teacher for m in matches]),
        "teacher_win_rate": wins / len(rated) if rated else None,
    }


def step_row(step: int, game: StepGame, learn: dict[str, Any], evolved: list[dict[str, Any]], *,
             wall_s: float, phases: dict[str, float], matches: Sequence[MatchRecord] = (),
             retention: list[dict[str, Any]] = (), heldout: dict[str, Any] | None = None) -> dict[str, Any]:
    valid = [p for p in game.proposals if p.valid]
    complexity = [measure(p.task.program) for p in valid]
    attempts = game.attempts
    tokens = sum(len(p.sample.token_ids) for p in game.proposals) + sum(len(a.sample.token_ids) for a in attempts)
    row = {
        "step": step,
        "wall_s": round(wall_s, 3),
        "valid_rate": len(valid) / len(game.proposals) if game.proposals else 0.0,
        "solve_rate": _mean([float(bool(a.correct)) for a in attempts]) or 0.0,
        "teacher_reward_mean": _mean([p.reward for p in game.proposals]) or 0.0,
        "student_reward_mean": _mean([a.reward for a in attempts]) or 0.0,
        "malformed_rate": _mean([float(a.answer is None) for a in attempts]),
        "trivial_rate": trivial_rate(game),
        "blind_rate": blind_rate(game),
        # the share of (task, student) groups whose rewards differ: only they carry a student
        # advantage (GRPO); `resampled_groups` were answered again for it (dynamic sampling)
        "signal_groups": _mean([float(len(set(r)) > 1) for r in group_rewards(attempts).values()]),
        "resampled_groups": game.resampled,
        # groups no rollout solved that were shown the task's known answer (learner.student_demonstrations)
        "demonstrations": len(game.demonstrations),
        # rewards.solvable_by: population: (task, other student) groups asked whether a task its
        # matched students never solved is solvable, and the tasks one of them solved
        "checked_groups": game.checked,
        "solvable_by_others": sum(p.solvable for p in valid),
        "student_entropy": sampled_entropy([a.sample for a in attempts]),
        # the students' mean entropy bonus this step: fixed, or steered (popula.learner.entropy_control)
        "student_entropy_coef": _mean([a["entropy_coef"] for a in learn.get("adapters", {}).values()
                                       if a.get("entropy_coef", 0.0) > 0]),
        "tasks_by_type": dict(Counter(p.task_type for p in valid)),
        "ast_depth": _mean([c.ast_depth for c in complexity]),
        "cyclomatic": _mean([c.cyclomatic for c in complexity]),
        "loc": _mean([c.loc for c in complexity]),
        "n_vars": _mean([c.n_vars for c in complexity]),
        # what the executor rejected: beside `ast_depth` it separates what the teachers write
        # from what validity lets through (a curriculum can simplify by either)
        "invalid_ast_depth": _mean(parsed_depths([p.task.program for p in game.proposals
                                                    if p.task is not None and not p.valid])),
        # what the teachers were shown: proposals follow their references, so a curriculum
        # that climbs or falls with them is steered by the buffer, not only by the reward
        "reference_depth": _mean([p.reference_depth for p in game.proposals if p.reference_depth is not None]),
        # how varied the curriculum is: distinct program forms among the valid tasks (popula.novelty)
        "distinct_forms": distinct_form_rate([p.task.program for p in valid]),
        "logprob_gap_max": learn.get("logprob_gap_max"),
        "tokens_generated": tokens,
        "completion_tokens": {"teacher": completion_lengths([p.sample for p in game.proposals]),
                              "student": completion_lengths([a.sample for a in attempts])},
        "verify_per_s": round(game.verified / game.verify_s, 1) if game.verify_s > 0 else None,
        "league": league_figures(matches),
        "evolved": evolved,
        "retention": list(retention),
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "learner": learn,
    }
    if heldout is not None:  # only on the steps the held-out probe ran (popula.eval.heldout)
        row["heldout"] = heldout
    return row
