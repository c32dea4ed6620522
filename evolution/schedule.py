"""When to evolve, whom to replace, whom to breed from, and with which operator.

Pure planning: `plan_replacements` reads each member's rank score and a config and
returns what to do; the caller makes the children with `make_child` and carries the plan
out: it swaps them into the adapter set and the optimiser state, and its league records
the lineage and gives each child its starting rating. Ratings, lineage and priors are the
league's: this module only orders members by the score it is handed. No tensors and no
trainer imports here, so the plan is easy to test and to log before acting on it.

Rules (all seeded from ``(config.seed, step, role)``, so a resumed run plans the same):
- Every ``every`` steps (step > 0), in each role, the ``replace_bottom`` *ready* members
  with the lowest score are replaced (ties: by name). The run passes the league's
  conservative rating ``mu - 3 sigma`` as the score.
  Ready, as in population-based training: trained at least ``min_age`` steps since its
  birth (the caller passes ages). Without this rule a newborn child, whose rating has
  not yet caught up with its weights, is the easiest victim and is replaced before it
  has trained at all; the population then churns one slot forever.
- Parents come from the survivors only. ``selection="tournament"``: draw
  ``tournament_size`` distinct survivors uniformly, keep the best score;
  a crossover runs two tournaments, the second without the first winner.
  ``selection="weighted"``: draw with probability proportional to
  ``exp((score - best) / temperature)``. Tournaments are the default: they only
  use the ratings' order, so they do not care that TrueSkill's scale drifts.
- The operator is drawn from ``operator_mix`` (weights need not sum to 1); when a role
  has a single survivor, crossovers are left out of the draw.
- The child gets a new name (docs/design.md § Pitfalls: never reuse an adapter's name for new
  weights): ``<slot>-s<step>``, where slot is the replaced member's name without an
  earlier ``-s<N>`` suffix.
- Optimiser state: ``reset`` (default) starts the child's optimiser fresh; ``inherit``
  asks the caller to copy the first parent's (`Replacement.inherit_optimizer_from`).
  Inheriting only makes sense where the child keeps that parent's factor basis
  (mutations, slot swap); splice and interpolation re-factorise, so per-element Adam
  moments would no longer refer to the same coordinates.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Literal

import torch

from evolution.errors import EvolutionError
from evolution.lora import StateDict
from evolution.registry import OPERATORS, get_operator

DEFAULT_MIX: dict[str, float] = {
    "gaussian": 1.0,
    "sv_perturb": 1.0,
    "rotate": 1.0,
    "slot_swap": 1.0,
    "splice": 1.0,
    "interpolate": 1.0,
}
"""Operators whose children, at their default strengths, kept >= 90% of the parents'
reward and were at >= 95% within 5 update steps on the toy learning problem of
tests/test_evolution_retention.py. ``mask`` is left out: dropping even one SVD component
of a rank-4 delta lost about half the parents' gain there and did not recover in 10
steps. To be confirmed on the tiny base with `popula retention`."""


@dataclass(frozen=True)
class EvolutionConfig:
    """How often and how hard the population is evolved (validated on creation)."""

    every: int = 10
    replace_bottom: int = 1
    selection: Literal["tournament", "weighted"] = "tournament"
    tournament_size: int = 2
    temperature: float = 1.0
    operator_mix: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    strengths: Mapping[str, float] = field(default_factory=dict)
    optimizer_state: Literal["reset", "inherit"] = "reset"
    min_age: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.min_age < 0:
            raise EvolutionError(f"evolution.min_age must be >= 0, got {self.min_age}")
        if self.every < 1:
            raise EvolutionError(f"evolution.every must be >= 1, got {self.every}")
        if self.replace_bottom < 0:
            raise EvolutionError(f"evolution.replace_bottom must be >= 0, got {self.replace_bottom}")
        if self.selection not in ("tournament", "weighted"):
            raise EvolutionError(f"evolution.selection must be 'tournament' or 'weighted', got {self.selection!r}")
        if self.tournament_size < 1:
            raise EvolutionError(f"evolution.tournament_size must be >= 1, got {self.tournament_size}")
        if not self.temperature > 0:
            raise EvolutionError(f"evolution.temperature must be > 0, got {self.temperature}")
        if self.optimizer_state not in ("reset", "inherit"):
            raise EvolutionError(
                f"evolution.optimizer_state must be 'reset' or 'inherit', got {self.optimizer_state!r}"
            )
        for name in [*self.operator_mix, *self.strengths]:
            get_operator(name)
        if any(not w >= 0 for w in self.operator_mix.values()) or not sum(self.operator_mix.values()) > 0:
            raise EvolutionError(
                f"evolution.operator_mix needs weights >= 0 with a positive sum, got {dict(self.operator_mix)}"
            )

    def strength(self, operator: str) -> float:
        """The configured strength of an operator, else its registered default."""
        return float(self.strengths.get(operator, get_operator(operator).default_strength))

    def due(self, step: int) -> bool:
        """Whether `step` is an evolution step."""
        return step > 0 and step % self.every == 0


@dataclass(frozen=True)
class Replacement:
    """One planned replacement: ``old`` leaves, ``child`` (made from ``parents``) enters."""

    role: str
    old: str
    child: str
    parents: tuple[str, ...]
    operator: str
    strength: float
    seed: int
    step: int
    optimizer_state: Literal["reset", "inherit"]

    @property
    def inherit_optimizer_from(self) -> str | None:
        """The member whose optimiser state the child starts from; None for a fresh one."""
        return self.parents[0] if self.optimizer_state == "inherit" else None

    def to_dict(self) -> dict:
        """JSON-ready form (for metrics.jsonl's ``evolved`` list)."""
        return {**asdict(self), "parents": list(self.parents)}


def child_name(old: str, step: int) -> str:
    """A fresh name for the member replacing ``old`` at ``step`` (``T2`` -> ``T2-s40``)."""
    return f"{re.sub(r'-s[0-9]+$', '', old)}-s{step}"


def plan_replacements(
    step: int, scores: Mapping[str, Mapping[str, float]], config: EvolutionConfig,
    ages: Mapping[str, int] | None = None,
) -> list[Replacement]:
    """The replacements to make at ``step``; empty when it is not an evolution step.

    ``scores`` maps role (e.g. "teacher", "student") to {member name: rank score, higher
    is better} (the run passes the league's conservative rating, ``Member.conservative``);
    ``ages`` maps member name to steps trained since birth (None: everyone is ready).
    Only members with age >= ``config.min_age`` can be replaced; when fewer are ready than
    ``replace_bottom``, fewer are replaced.
    """
    if not config.due(step) or config.replace_bottom == 0:
        return []
    plan = []
    for role in sorted(scores):
        members = scores[role]
        if len(members) <= config.replace_bottom:
            raise EvolutionError(
                f"role {role!r} has {len(members)} members; replacing the bottom "
                f"{config.replace_bottom} would leave no parents (evolution.replace_bottom)"
            )
        rng = random.Random(f"evolution:{config.seed}:{step}:{role}")
        ready = [n for n in members if ages is None or ages.get(n, 0) >= config.min_age]
        order = sorted(ready, key=lambda name: (members[name], name))
        victims = order[: config.replace_bottom]
        survivors = [n for n in members if n not in victims]
        for old in victims:
            operator = _draw_operator(rng, config, len(survivors))
            parents = _select(rng, {n: members[n] for n in survivors}, OPERATORS[operator].n_parents, config)
            plan.append(
                Replacement(
                    role=role,
                    old=old,
                    child=child_name(old, step),
                    parents=parents,
                    operator=operator,
                    strength=config.strength(operator),
                    seed=rng.getrandbits(63),
                    step=step,
                    optimizer_state=config.optimizer_state,
                )
            )
    return plan


def make_child(replacement: Replacement, parents: Mapping[str, Mapping[str, torch.Tensor]]) -> StateDict:
    """The child state dict of a planned replacement, from {parent name: state dict}."""
    missing = [p for p in replacement.parents if p not in parents]
    if missing:
        raise EvolutionError(f"replacement of {replacement.old!r} needs parent state dicts {missing}")
    spec = get_operator(replacement.operator)
    return spec.apply([parents[p] for p in replacement.parents], replacement.strength, replacement.seed)


def _draw_operator(rng: random.Random, config: EvolutionConfig, n_survivors: int) -> str:
    names = [n for n, w in config.operator_mix.items() if w > 0 and OPERATORS[n].n_parents <= n_survivors]
    if not names:
        raise EvolutionError(
            f"no operator in evolution.operator_mix {dict(config.operator_mix)} can run with "
            f"{n_survivors} surviving parent(s): add a mutation"
        )
    return rng.choices(names, weights=[config.operator_mix[n] for n in names])[0]


def _select(rng: random.Random, pool: Mapping[str, float], count: int, config: EvolutionConfig) -> tuple[str, ...]:
    chosen: list[str] = []
    for _ in range(count):
        names = sorted(n for n in pool if n not in chosen)
        if config.selection == "tournament":
            entrants = rng.sample(names, min(config.tournament_size, len(names)))
            chosen.append(max(entrants, key=lambda n: (pool[n], n)))
        else:
            best = max(pool[n] for n in names)
            weights = [math.exp((pool[n] - best) / config.temperature) for n in names]
            chosen.append(rng.choices(names, weights=weights)[0])
    return tuple(chosen)
