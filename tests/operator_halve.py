"""A test-only evolution operator, `halve`: the parent with every LoRA B matrix scaled by 1 - strength.

Registered by `tests/test_operator_registry.py` alone (one `OperatorSpec` entry of
`evolution.registry.OPERATORS`), it proves the how-to: an operator is one function and one
registration line; the config, the schedule and the retention harness's protocol take it.
"""

from __future__ import annotations

from typing import Mapping

import torch

from evolution.registry import OperatorSpec


def halve(parent: Mapping[str, torch.Tensor], *, strength: float,
          seed: int | torch.Generator = 0) -> dict[str, torch.Tensor]:
    """Deterministic: B shrinks by `strength`, A is kept (so the delta B A shrinks by it)."""
    return {k: v * (1.0 - strength) if "lora_B" in k else v.clone() for k, v in parent.items()}


SPEC = OperatorSpec("halve", "mutation", halve, 0.5, False, "A; the delta's direction")
