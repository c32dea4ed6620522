"""The one place that builds a step's parts from a config: engine, sandbox and learner.

`popula run` (locally and with `--ray`), `popula eval`, `popula retention` and the
benchmarks all get their parts here, so the device, precision, LoRA slots and engine
settings of a run cannot drift between the paths that use them.

`PopulationRun` talks to the parts only through their methods (`engine.generate`,
`sandbox.verify`, `learner.step` ...), so where they run is decided here and nowhere
else: in this process by default, or as Ray actors on a cluster (same methods, same
step loop).

Device and precision come from the config's `runtime` section, resolved once for the
engine and the learner together (`popula.runtime`): the learner trains against the
log-probabilities the engine sampled, so both must compute in the same precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from popula.config import Config
from popula.engines import create_engine, engine_options
from popula.learner import PopulationLearner
from popula.run.ray_workers import build_ray as start_actors, reserve
from popula.runtime import Runtime, resolve_runtime
from popula.sandbox import Sandbox


@dataclass
class Workers:
    engine: Any  # popula.engines.base.Engine
    sandbox: Any  # popula.sandbox.Sandbox
    learner: Any  # popula.learner.PopulationLearner
    release: Callable[[], None] | None = None  # frees what the learner holds beyond this process (Ray actor)
    runtime: Runtime | None = None  # device and dtype of engine and learner (None: per Ray actor)

    def bind(self, ref: Any, adapter: str) -> None:
        """Tell an engine that shares the learner's model that version `ref` of `adapter` is what
        the learner holds now: it serves it from the learner's slot, without reading `ref.path`."""
        if getattr(self.engine, "model", None) is not None and self.engine.model is getattr(self.learner, "model", None):
            self.engine.bind(ref, self.learner, adapter)

    def close(self) -> None:
        self.sandbox.close()
        self.engine.close()
        if self.release is not None:
            self.release()


def n_adapters(cfg: Config) -> int:
    return 1 if cfg.population.single_agent else cfg.population.teachers + cfg.population.students


def runtime_of(cfg: Config) -> Runtime:
    """The config's runtime on this machine (PopulaError before any model loads if it cannot be had)."""
    return resolve_runtime(cfg.runtime.device, cfg.runtime.dtype)


def reserve_workers(cfg: Config) -> Any:
    """Settle where the workers will run before anything is written: on Ray, connect and reserve
    every actor's resources (refusing, exit 2, what the cluster cannot take); locally nothing.
    Returns what `build_workers` takes (release it with `.release()` if the run never builds)."""
    if not cfg.ray.enabled:
        return None
    return reserve(cfg)


def build_workers(cfg: Config, base_path: str | Path, reservation: Any = None) -> Workers:
    """The run's workers where the config puts them: Ray actors when `ray.enabled`, else this process."""
    return build_ray(cfg, base_path, reservation) if cfg.ray.enabled else build_local(cfg, base_path)


build_stack = build_workers


def build_ray(cfg: Config, base_path: str | Path, reservation: Any = None) -> Workers:
    """Engines, sandboxes and learner as Ray actors (popula.run.ray_workers), behind proxies."""
    engine, sandbox, learner, reservation = start_actors(cfg, base_path, n_adapters(cfg), reservation)

    def release() -> None:
        try:
            learner.close()
        finally:
            reservation.release()

    return Workers(engine=engine, sandbox=sandbox, learner=learner, release=release)


def build_local(cfg: Config, base_path: str | Path) -> Workers:
    """All workers in this process (the sandbox's own worker processes aside)."""
    runtime = runtime_of(cfg)
    n = n_adapters(cfg)
    if cfg.engine == "torch":
        # One base in memory: the engine generates with the learner's model and adapter tensors
        # (one spare slot for adapter files the learner does not hold).
        learner = build_learner(cfg, base_path, runtime, max_adapters=n, spare_slots=1)
        engine = build_engine(cfg, base_path, runtime, max_adapters=n + 1, shared=learner)
    else:
        learner = build_learner(cfg, base_path, runtime, max_adapters=n)
        engine = build_engine(cfg, base_path, runtime, max_adapters=n + 1)
    return Workers(engine=engine, sandbox=build_sandbox(cfg), learner=learner, runtime=runtime)


def build_sandbox(cfg: Config, workers: int | None = None) -> Any:
    return Sandbox(workers=workers or cfg.sandbox.workers, isolation=cfg.sandbox.isolation)


def build_learner(cfg: Config, base_path: str | Path, runtime: Runtime, *, max_adapters: int,
                  spare_slots: int = 0) -> Any:
    """The population learner on the runtime's device and dtype (`spare_slots`: LoRA slots it
    leaves to a torch engine sharing its model)."""
    return PopulationLearner(base_path, cfg.lora, cfg.learner, seed=cfg.seed, max_adapters=max_adapters,
                             device=runtime.device, dtype=runtime.torch_dtype, spare_slots=spare_slots)


def build_engine(cfg: Config, base_path: str | Path, runtime: Runtime | None, *, max_adapters: int,
                 kind: str | None = None, max_rank: int | None = None, target_modules: Sequence[str] | None = None,
                 max_model_len: int | None = None, seed: int | None = None, shared: Any = None) -> Any:
    """The config's generation engine (`kind` overrides `cfg.engine`), `max_adapters` LoRA slots;
    `seed` (default: the config's) seeds requests that carry none. `shared`: a learner built
    with spare slots whose model (base and adapters) a torch engine generates with."""
    kind = kind or cfg.engine
    options = engine_options(cfg, base_path, runtime, kind=kind, target_modules=target_modules,
                             max_model_len=max_model_len)
    if shared is not None:
        if kind != "torch":
            raise ValueError("only the torch engine can share the learner's model")
        options = {"model": shared.model, "slots": range(shared.max_adapters, shared.model.n_slots)}
    return create_engine(kind, base_path, max_adapters=max_adapters, max_rank=max_rank or cfg.lora.rank,
                         seed=cfg.seed if seed is None else seed, **options)
