"""Per-row multi-LoRA: one frozen base, many adapters in one batched forward (and backward).

Shared by the torch generation engine and the learner, so sampler and trainer compute the
same function. Adapter tensors are keyed as PEFT saves them: `peft_key` spells a key and
`parse_peft_key` reads one, here and nowhere else.
"""

from popula.lora.layer import MultiLoRALinear, SlotRouting
from popula.lora.model import (
    BASE_SLOT,
    DEFAULT_TARGET_MODULES,
    PEFT_PREFIX,
    MultiLoRAModel,
    find_target_linears,
    fresh_peft_state_dict,
    parse_peft_key,
    peft_key,
)

__all__ = [
    "BASE_SLOT", "DEFAULT_TARGET_MODULES", "PEFT_PREFIX", "MultiLoRALinear", "MultiLoRAModel", "SlotRouting",
    "find_target_linears", "fresh_peft_state_dict", "parse_peft_key", "peft_key",
]
