"""Operator registry: name -> operator, with its kind and default strength.

The schedule draws operator names from a configured mix; the run loop and the retention
harness look them up here and call `OperatorSpec.apply` with the parents' state dicts,
so both kinds of operator are called the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from evolution import crossovers, mutations
from evolution.errors import EvolutionError
from evolution.lora import StateDict

Kind = Literal["mutation", "crossover"]


@dataclass(frozen=True)
class OperatorSpec:
    """One operator: ``fn(*parents, strength, seed) -> child``."""

    name: str
    kind: Kind
    fn: Callable[..., StateDict]
    default_strength: float
    stochastic: bool
    preserves: str

    @property
    def n_parents(self) -> int:
        return 1 if self.kind == "mutation" else 2

    def apply(
        self,
        parents: Sequence[Mapping[str, torch.Tensor]],
        strength: float | None = None,
        seed: int | torch.Generator = 0,
    ) -> StateDict:
        """The child of ``parents`` (1 for a mutation, 2 for a crossover)."""
        if len(parents) != self.n_parents:
            raise EvolutionError(
                f"operator {self.name!r} ({self.kind}) takes {self.n_parents} parent(s), got {len(parents)}"
            )
        return self.fn(*parents, strength=self.default_strength if strength is None else strength, seed=seed)


OPERATORS: dict[str, OperatorSpec] = {
    spec.name: spec
    for spec in (
        OperatorSpec("gaussian", "mutation", mutations.gaussian, 0.1, True, "shapes; expected norm up to sqrt(1+s^2)"),
        OperatorSpec("sv_perturb", "mutation", mutations.sv_perturb, 0.1, True, "A, singular subspaces, rank"),
        OperatorSpec("rotate", "mutation", mutations.rotate, 0.1, True, "singular values, norms of A, B and B A"),
        OperatorSpec("mask", "mutation", mutations.mask, 0.1, True, "A, kept SVD components"),
        OperatorSpec("slot_swap", "crossover", crossovers.slot_swap, 0.5, True, "each module whole from one parent"),
        OperatorSpec("splice", "crossover", crossovers.splice, 0.5, True, "parent 1's leading components; rank <= r"),
        OperatorSpec("interpolate", "crossover", crossovers.interpolate, 0.5, False, "best rank-r delta mixture"),
    )
}


def get_operator(name: str) -> OperatorSpec:
    """The registered operator called ``name``; EvolutionError naming the known ones."""
    try:
        return OPERATORS[name]
    except KeyError:
        raise EvolutionError(f"unknown evolution operator {name!r}; known: {', '.join(OPERATORS)}") from None


def operator_names(kind: Kind | None = None) -> list[str]:
    """Registered operator names, optionally only mutations or only crossovers."""
    return [name for name, spec in OPERATORS.items() if kind is None or spec.kind == kind]
