"""The learner: policy-gradient updates of the whole population of LoRA adapters in one pass.

    from popula.learner import PopulationLearner, Rollout
    learner = PopulationLearner(base_path, cfg.lora, cfg.learner, max_adapters=8)
    learner.add_adapter("S0", peft_state_dict)
    metrics = learner.step([Rollout(adapter="S0", role="student", group="task-3", prompt_ids=...,
                                    completion_ids=..., sampler_logprobs=..., adapter_version=2,
                                    reward=1.0), ...])
"""

from popula.learner.advantages import EmaBaseline, compute_advantages, group_advantages, passk_advantages
from popula.learner.learner import NonFiniteUpdateWarning, PopulationLearner
from popula.learner.objective import (
    TokenLoss,
    clipped_token_loss,
    k3_kl,
    token_entropy,
    token_logprobs,
)
from popula.learner.packing import pack_rows
from popula.learner.protocol import Learner
from popula.learner.rollout import Rollout

__all__ = [
    "EmaBaseline", "Learner", "NonFiniteUpdateWarning", "PopulationLearner", "Rollout", "TokenLoss", "clipped_token_loss",
    "compute_advantages", "group_advantages", "k3_kl", "passk_advantages", "pack_rows", "token_entropy", "token_logprobs",
]
