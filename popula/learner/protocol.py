"""The learner's interface: what the run, the ladder and retention train adapters through.

The local `PopulationLearner` and the Ray proxy (`popula.run.parts.ray.workers.RayLearner`, the
learner actor) both satisfy it. The Ray proxy's methods are built from this Protocol's
(`popula.run.parts.ray.workers.forward`: same signatures, one line each); a member added here and
not there fails tests/test_interfaces.py. Importing this module loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

if TYPE_CHECKING:  # only for annotations: this module stays importable without torch
    import torch

    from popula.learner.rollout import Rollout


class Learner(Protocol):
    """Every adapter's trainable weights and optimiser state; one policy-gradient step over all."""

    @property
    def adapters(self) -> list[str]:
        """The names of the adapters it holds, sorted."""
        ...

    def add_adapter(self, name: str, state_dict: Mapping[str, torch.Tensor] | None = None,
                    optimizer_state: Mapping[str, Any] | None = None) -> None:
        """Hold `name` with these PEFT weights (None: a fresh seeded init) and a new or given AdamW."""
        ...

    def remove_adapter(self, name: str) -> None:
        """Forget `name`'s weights and optimiser state."""
        ...

    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        """`name`'s weights as PEFT saves them."""
        ...

    def optimizer_state(self, name: str) -> dict[str, Any]:
        """A copy of `name`'s AdamW state."""
        ...

    def step(self, rollouts: Sequence[Rollout], *, lr: float | None = None) -> dict[str, Any]:
        """One update of every adapter with rollouts here at rate `lr` (None: the config's);
        returns the step's metrics."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the whole population by a `state_dict()`."""
        ...
