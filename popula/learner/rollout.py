"""`Rollout`: one sampled completion as the learner trains on it.

The ids are the sampler's own (never re-tokenised text, docs/design.md § Pitfalls), and the sampler's
per-token log-probabilities and adapter version travel with them, so the learner can
measure train/serve mismatch (`logprob_gap`) and clip importance ratios of off-policy
samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from popula.errors import PopulaError

Role = Literal["teacher", "student"]


@dataclass
class Rollout:
    """One completion of one adapter, with its reward or a ready-made advantage.

    `group` says which rollouts are compared with each other: for a student, the n
    rollouts of one task (GRPO group); for a teacher, its proposals of one task type
    (the REINFORCE baseline's scope). Groups never span adapters: the learner keys them
    by (adapter, group). Give `reward` and let the learner compute the advantage, or
    give `advantage` directly (it then wins over `reward`).

    `temperature` is the one the sampler drew with: its log-probabilities are those of
    softmax(logits / temperature), and the trainer computes the same tempered policy.

    A `demonstration` is a completion the adapter did not sample (a task's known answer,
    `learner.student_demonstrations`): the learner takes its log-probs as its own under the
    current weights (its `sampler_logprobs` are not read), so its ratio and importance weight
    start at 1, and leaves it out of the answers' entropy it measures and steers.
    """

    adapter: str
    prompt_ids: list[int]
    completion_ids: list[int]
    sampler_logprobs: list[float]
    adapter_version: int
    role: Role = "student"
    task_type: str = ""
    group: str = ""
    reward: float | None = None
    advantage: float | None = None
    temperature: float = 1.0
    demonstration: bool = False

    def check(self, index: int) -> None:
        """Refuse a malformed rollout, naming it (its position in the batch and adapter)."""
        where = f"rollout {index} (adapter {self.adapter!r})"
        if not self.prompt_ids:
            raise PopulaError(f"{where}: prompt_ids is empty; the first completion token needs a context")
        if len(self.sampler_logprobs) != len(self.completion_ids):
            raise PopulaError(f"{where}: {len(self.completion_ids)} completion ids but "
                              f"{len(self.sampler_logprobs)} sampler log-probs")
        if self.reward is None and self.advantage is None:
            raise PopulaError(f"{where}: needs a reward or an advantage")
        if self.role not in ("teacher", "student"):
            raise PopulaError(f"{where}: role must be 'teacher' or 'student', got {self.role!r}")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise PopulaError(f"{where}: temperature must be a positive number (greedy samples cannot be "
                              f"trained on by policy gradient), got {self.temperature!r}")
