"""The engine interface: explicit request and result objects, as vLLM has them.

Every engine serves one frozen base and many adapters at once. A request names the
adapter *version* it must use; engines never key anything by adapter name alone, so a
new version can never be served with an old version's weights (docs/design.md § Pitfalls).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:  # a request names an adapter version; the adapters package owns that type
    from popula.adapters import AdapterRef


@dataclass
class GenerationRequest:
    """Sample `n` completions of `prompt_ids` with one adapter (None: the bare base)."""

    prompt_ids: list[int]
    adapter: AdapterRef | None = None
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)


@dataclass
class Sample:
    """One completion: the sampler's own token ids and their log-probabilities.

    The learner trains on exactly these ids (never re-tokenised text) and compares its
    log-probabilities with `logprobs` to detect train/serve mismatch.
    """

    token_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: str  # "stop" (eos or stop token) or "length"


@dataclass
class GenerationResult:
    request: GenerationRequest
    samples: list[Sample]


class Engine(Protocol):
    """What the trainer needs from a generation backend."""

    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False) -> list[GenerationResult]:
        """Run all requests as one batch; results are in request order."""
        ...

    def close(self) -> None:
        """Release the model and any worker processes."""
        ...
