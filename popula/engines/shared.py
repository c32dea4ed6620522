"""The seam between a learner and an engine that generates with the learner's own model.

With the torch engine a run holds one base in memory: the engine decodes with the learner's
`MultiLoRAModel`, and a version the learner holds is served from the learner's slot instead
of being read from its PEFT directory. Two Protocols name what each side offers:

- `SharedWeights`, the learner's side (`popula.learner.PopulationLearner` satisfies it): the
  shared `model`, how many of its slots are the learner's (`max_adapters`; those above are
  spare, for the engine's own adapter files), which slot holds an adapter, and a token that
  changes whenever that adapter's weights change, so a bound version is never served stale.
- `SharingEngine`, the engine's side (`popula.engines.torch_engine.TorchEngine`): an `Engine`
  that can `bind` a version to the learner's slot.

`Sharing` pairs the two for the run's workers (`popula.run.parts.workers.Workers.bind`). Which
engines can share is the registry's `EngineSpec.shares_model` (`popula.engines.registry`).
Importing this module loads no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from popula.engines.base import Engine

if TYPE_CHECKING:  # only for annotations: this module stays importable without torch
    from popula.adapters import AdapterRef
    from popula.lora import MultiLoRAModel


@runtime_checkable
class SharedWeights(Protocol):
    """A learner's model and adapter slots, as an engine generating with them sees them."""

    model: MultiLoRAModel  # the base and every slot's LoRA tensors, the learner's and the spare ones
    max_adapters: int  # slots 0 .. max_adapters-1 are the learner's; those above are spare

    def slot_index(self, name: str) -> int:
        """The slot of `model` that holds adapter `name`'s weights."""
        ...

    def weights_token(self, name: str) -> int | None:
        """A number that changes whenever `name`'s weights change (None: no such adapter)."""
        ...


@runtime_checkable
class SharingEngine(Engine, Protocol):
    """An engine built on a learner's `SharedWeights` (its `model` and spare slots)."""

    def bind(self, ref: AdapterRef, learner: SharedWeights, name: str) -> None:
        """Serve version `ref` from `learner`'s slot for `name` while its weights token holds."""
        ...


@dataclass(frozen=True)
class Sharing:
    """An engine that generates with a learner's model, and that learner: what `bind` needs."""

    engine: SharingEngine
    learner: SharedWeights

    def bind(self, ref: AdapterRef, name: str) -> None:
        """Version `ref` of adapter `name` is what the learner holds now: serve it from its slot."""
        self.engine.bind(ref, self.learner, name)
