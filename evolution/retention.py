"""Does a child keep its parents' capability, and how fast does it recover what it lost?

`measure_retention` makes a child with one operator, scores parents and child with the
caller's ``evaluate``, then trains the child with the caller's ``update`` for a number of
steps, scoring after each. It knows nothing of models or tasks: `popula retention` passes
an evaluate that runs the adapter on a fixed task set and an update that takes one
learner step on the run's task stream; the tests pass a small torch regression problem.

Levels are measured above a baseline (default 0): ``level(x) = (x - baseline) /
(parent - baseline)``, where parent is the mean of the parents' rewards. With a reward
that is 0 for the bare base (e.g. a solve rate gain, or 1 - loss/base_loss) this is the
plain ratio child / parent. A child has recovered at the first step whose level reaches
``threshold`` (default 0.95); step 0 is the child as created, so a child that never lost
anything recovers at step 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import torch

from evolution.errors import EvolutionError
from evolution.lora import StateDict
from evolution.registry import OperatorSpec, get_operator

Evaluate = Callable[[Mapping[str, torch.Tensor]], float]
Update = Callable[[StateDict, int], StateDict]


@dataclass(frozen=True)
class RetentionResult:
    """One operator's retention run. ``rewards[0]`` is the child at creation."""

    operator: str
    strength: float
    parent_rewards: tuple[float, ...]
    parent_reward: float
    baseline: float
    rewards: tuple[float, ...]
    threshold: float
    steps_to_recover: int | None

    @property
    def child_reward(self) -> float:
        """The child's reward right after creation, before any update."""
        return self.rewards[0]

    @property
    def initial_level(self) -> float:
        """The child's level at creation, as a fraction of the parents' (1.0 = kept all)."""
        return self.level(self.rewards[0])

    def level(self, reward: float) -> float:
        return (reward - self.baseline) / (self.parent_reward - self.baseline)

    def to_dict(self) -> dict:
        return {**asdict(self), "child_reward": self.child_reward, "initial_level": self.initial_level}


def measure_retention(
    parents: Sequence[Mapping[str, torch.Tensor]],
    operator: str | OperatorSpec,
    evaluate: Evaluate,
    update: Update,
    steps: int,
    strength: float | None = None,
    seed: int = 0,
    baseline: float = 0.0,
    threshold: float = 0.95,
) -> RetentionResult:
    """Parents' reward, the child's at creation and after each of ``steps`` updates.

    ``parents``: as many state dicts as the operator takes (extra ones are ignored, so
    one pair can serve every operator). ``update(child, i)`` returns the child after
    update step i (0-based); it may modify its argument. Raises EvolutionError when the
    parents are no better than the baseline (a level is then meaningless).
    """
    spec = get_operator(operator) if isinstance(operator, str) else operator
    if steps < 0:
        raise EvolutionError(f"steps must be >= 0, got {steps}")
    if not 0 < threshold <= 1:
        raise EvolutionError(f"threshold must be in (0, 1], got {threshold}")
    if len(parents) < spec.n_parents:
        raise EvolutionError(f"operator {spec.name!r} needs {spec.n_parents} parents, got {len(parents)}")
    used = list(parents[: spec.n_parents])
    parent_rewards = tuple(float(evaluate(p)) for p in used)
    parent_reward = sum(parent_rewards) / len(parent_rewards)
    if not parent_reward > baseline:
        raise EvolutionError(
            f"parents' mean reward {parent_reward:.4g} is not above the baseline {baseline:.4g}: "
            "retention is measured as a fraction of the parents' gain over the baseline"
        )
    used_strength = spec.default_strength if strength is None else float(strength)
    child = spec.apply(used, used_strength, seed)
    rewards = [float(evaluate(child))]
    for i in range(steps):
        child = update(child, i)
        rewards.append(float(evaluate(child)))
    recovered = next(
        (i for i, r in enumerate(rewards) if (r - baseline) / (parent_reward - baseline) >= threshold), None
    )
    return RetentionResult(
        operator=spec.name,
        strength=used_strength,
        parent_rewards=parent_rewards,
        parent_reward=parent_reward,
        baseline=baseline,
        rewards=tuple(rewards),
        threshold=threshold,
        steps_to_recover=recovered,
    )


def format_retention_table(results: Sequence[RetentionResult]) -> str:
    """A readable table: one row per operator, levels as % of the parents' gain."""
    header = f"{'operator':<12} {'strength':>8} {'parent':>9} {'child@0':>9} {'level@0':>8} {'final':>8} {'recover':>8}"
    lines = [header, "-" * len(header)]
    for r in results:
        recover = "never" if r.steps_to_recover is None else str(r.steps_to_recover)
        lines.append(
            f"{r.operator:<12} {r.strength:>8.3g} {r.parent_reward:>9.4g} {r.child_reward:>9.4g} "
            f"{100 * r.initial_level:>7.1f}% {100 * r.level(r.rewards[-1]):>7.1f}% {recover:>8}"
        )
    return "\n".join(lines)
