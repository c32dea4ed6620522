"""How `popula eval` and the held-out probes sample answers: `EvalSettings`, checked on creation.

Its own module, free of model code, so the command line refuses a bad flag before torch loads.
One sample is decoded greedily (pass@1 is then a property of the weights); several use 0.8,
the temperature HumanEval's pass@k figures are usually quoted at.
"""

from __future__ import annotations

from dataclasses import dataclass

from popula.errors import PopulaError

GREEDY_TEMPERATURE = 0.0  # default for one sample per task
SAMPLING_TEMPERATURE = 0.8  # default for several samples per task


@dataclass(frozen=True)
class EvalSettings:
    """How answers are sampled. `temperature=None` picks greedy for 1 sample, 0.8 for more."""

    samples: int = 1
    temperature: float | None = None
    top_p: float = 1.0
    # None: the prompt format's DEFAULT_MAX_TOKENS (popula.eval.evaluate), for a run's adapter
    # and a bare base alike, so that comparing the two compares models, not answer budgets
    max_tokens: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise PopulaError(f"--samples must be at least 1, got {self.samples}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise PopulaError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if self.temperature is not None and self.temperature < 0:
            raise PopulaError(f"--temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise PopulaError(f"--top-p must be in (0, 1], got {self.top_p}")

    @property
    def sampling_temperature(self) -> float:
        if self.temperature is not None:
            return self.temperature
        return GREEDY_TEMPERATURE if self.samples == 1 else SAMPLING_TEMPERATURE
