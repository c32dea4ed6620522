"""The one place that constructs a step's parts from a config: engine, sandbox pool and learner.

`popula run` (its local workers, and its Ray actors, which call these same functions in their
own processes), `popula eval`, `popula retention`, the learning ladder and the benchmarks
all get their parts here, so the device, precision, LoRA slots, engine settings and sandbox
isolation of a run cannot drift between the paths that use them. Where the parts run is
decided one level up (`popula/run/parts/workers.py`).

Left to their layer's own constructor, on purpose: code below `popula/run` that has no run
config (the tiny base's build and its held-out score, task generation, `popula verify`), and
the benchmarks that measure one layer alone with options no config carries
(`multilora_generation.py`, `smollm2_formats.py`, `verifier_throughput.py`, `tiny_base.py`,
and the shared verification sandbox of the step benchmarks).

Device and precision come from the config's `runtime` section, resolved once for the
engine and the learner together (`popula.runtime`): the learner trains against the
log-probabilities the engine sampled, so both must compute in the same precision.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from popula.config import Config
from popula.engines.base import Engine
from popula.engines.args import EngineArgs
from popula.engines.registry import create_engine, engine_spec
from popula.runtime import Runtime, resolve_runtime
from popula.sandbox import Sandbox

if TYPE_CHECKING:
    from popula.engines.shared import SharedWeights
    from popula.learner import PopulationLearner


def n_adapters(cfg: Config) -> int:
    """Adapters the run trains: one in the single-agent baseline, else one per member."""
    return 1 if cfg.population.single_agent else cfg.population.teachers + cfg.population.students


def runtime_of(cfg: Config) -> Runtime:
    """The config's runtime on this machine (PopulaError before any model loads if it cannot be had)."""
    return resolve_runtime(cfg.runtime.device, cfg.runtime.dtype)


def context_of(cfg: Config, base_path: str | Path) -> int | None:
    """Tokens (prompt + completion) one request may hold in the config's engine: vLLM's context
    length, else the base's positions (None if its config does not say). Self-play keeps its
    prompts inside it: a generated task too long to show a student must not end the run."""
    spec = engine_spec(cfg.engine)
    if spec.context is not None:
        return spec.context_length(base_path)  # the engine's module, loaded only by runs that use it
    # deferred: transformers, which the Ray sandbox actors (they import this module) never load
    from transformers import AutoConfig

    return getattr(AutoConfig.from_pretrained(str(base_path)), "max_position_embeddings", None)


def build_sandbox(cfg: Config, workers: int | None = None) -> Sandbox:
    """The config's sandbox pool (`workers` overrides `sandbox.workers`) with its isolation."""
    return Sandbox(workers=workers or cfg.sandbox.workers, isolation=cfg.sandbox.isolation)


def build_learner(cfg: Config, base_path: str | Path, runtime: Runtime, *, max_adapters: int,
                  spare_slots: int = 0) -> PopulationLearner:
    """The population learner on the runtime's device and dtype (`spare_slots`: LoRA slots it
    leaves to a torch engine sharing its model)."""
    # deferred: torch, which the Ray sandbox actors (they import this module) never load
    from popula.learner import PopulationLearner

    return PopulationLearner(base_path, cfg.lora, cfg.learner, seed=cfg.seed, max_adapters=max_adapters,
                             device=runtime.device, dtype=runtime.torch_dtype, spare_slots=spare_slots)


def build_engine(cfg: Config, base_path: str | Path, runtime: Runtime | None, *, max_adapters: int,
                 kind: str | None = None, max_rank: int | None = None, target_modules: Sequence[str] | None = None,
                 max_model_len: int | None = None, seed: int | None = None,
                 shared: SharedWeights | None = None) -> Engine:
    """The config's generation engine (`kind` overrides `cfg.engine`, a name in
    `popula.engines.registry.ENGINES`), `max_adapters` LoRA slots; `seed` (default: the config's)
    seeds requests that carry none. `max_model_len` goes to an engine that fixes its context
    (`EngineSpec.context`), the others ignore it. `shared`: a learner built with spare slots
    whose model (base and adapters) the engine generates with (`EngineSpec.shares_model`)."""
    kind = kind or cfg.engine
    spec = engine_spec(kind)
    if shared is not None and not spec.shares_model:
        raise ValueError(f"the {kind} engine cannot share the learner's model")
    args = EngineArgs(cfg, base_path, runtime, target_modules=target_modules,
                      max_model_len=max_model_len if spec.context is not None else None, shared=shared)
    return create_engine(kind, base_path, max_adapters=max_adapters, max_rank=max_rank or cfg.lora.rank,
                         seed=cfg.seed if seed is None else seed, **spec.config_options(args))
