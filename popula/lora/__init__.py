"""Per-row multi-LoRA: one frozen base, many adapters in one batched forward (and backward).

Shared by the torch generation engine and the learner, so sampler and trainer compute the
same function.
"""

from popula.lora.layer import MultiLoRALinear, SlotRouting
from popula.lora.model import (
    BASE_SLOT,
    DEFAULT_TARGET_MODULES,
    MultiLoRAModel,
    find_target_linears,
    fresh_peft_state_dict,
    peft_key,
)

__all__ = [
    "BASE_SLOT", "DEFAULT_TARGET_MODULES", "MultiLoRALinear", "MultiLoRAModel", "SlotRouting",
    "find_target_linears", "fresh_peft_state_dict", "peft_key",
]
