"""The learning rate of each step of a run: `learner.lr` throughout, or decayed from it to
`learner.lr_final` over `run.steps` along a line or a half cosine.

Why a decay: a higher rate buys the early gain and the measured one keeps what follows
(docs/results/smollm2-ladder, rung AA). The rate is a function of the run's step alone, not
of an adapter's age or of a counter the learner keeps, so a resumed or branched run continues
on the same curve and every adapter of a step takes the same rate.
"""

from __future__ import annotations

import math

from popula.config import LearnerConfig


def learning_rate(cfg: LearnerConfig, step: int, steps: int) -> float:
    """The rate of run step `step` (1-based) of a run of `steps` steps: `cfg.lr` at step 1,
    `cfg.lr_final` from step `steps` on."""
    if cfg.lr_decay == "constant" or cfg.lr_final is None:
        return cfg.lr
    progress = min(max(step - 1, 0) / max(steps - 1, 1), 1.0)
    shape = 1.0 - progress if cfg.lr_decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.lr_final + (cfg.lr - cfg.lr_final) * shape
