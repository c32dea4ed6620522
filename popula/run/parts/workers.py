"""Where a run's parts live: this process, or Ray actors; both behind the same interfaces.

`PopulationRun` talks to its parts only through their Protocols (`Engine.generate`,
`SandboxPool.verify`, `Learner.step` ...), so where they run is decided here and nowhere
else: in this process by default, or as Ray actors on a cluster (same methods, same step
loop). Either way each part is constructed by `popula/run/parts/builders.py`, the one place that
turns a config into an engine, a sandbox pool or a learner.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from popula.adapters import AdapterRef
from popula.config import Config
from popula.engines.base import Engine
from popula.engines.registry import engine_spec
from popula.engines.shared import Sharing, SharingEngine
from popula.errors import PopulaError
from popula.learner.protocol import Learner
from popula.run.parts.builders import build_engine, build_learner, build_sandbox, n_adapters, runtime_of
from popula.run.parts.ray.placement import RayReservation, reserve
from popula.run.parts.ray.workers import build_ray as start_actors
from popula.runtime import Runtime
from popula.sandbox.protocol import SandboxPool


@dataclass
class Workers:
    """What a run computes with, wherever it runs: one engine, one sandbox pool, one learner
    (each a Protocol, so a local object and a Ray proxy are used alike), and how to free them."""

    engine: Engine
    sandbox: SandboxPool
    learner: Learner
    release: Callable[[], None] | None = None  # frees what the learner holds beyond this process (Ray actor)
    runtime: Runtime | None = None  # device and dtype of engine and learner (None: per Ray actor)
    sharing: Sharing | None = None  # the engine and learner again when the engine generates with its model

    def bind(self, ref: AdapterRef, adapter: str) -> None:
        """Tell an engine that shares the learner's model that version `ref` of `adapter` is what
        the learner holds now: it serves it from the learner's slot, without reading `ref.path`.
        Workers whose engine has a model of its own (or runs elsewhere) have nothing to bind."""
        if self.sharing is not None:
            self.sharing.bind(ref, adapter)

    def close(self) -> None:
        self.sandbox.close()
        self.engine.close()
        if self.release is not None:
            self.release()


def reserve_workers(cfg: Config) -> RayReservation | None:
    """Settle where the workers will run before anything is written: on Ray, connect and reserve
    every actor's resources (refusing, exit 2, what the cluster cannot take); locally nothing.
    Returns what `build_workers` takes (release it with `.release()` if the run never builds)."""
    if not cfg.ray.enabled:
        return None
    return reserve(cfg)


def build_workers(cfg: Config, base_path: str | Path, reservation: RayReservation | None = None) -> Workers:
    """The run's workers where the config puts them: Ray actors when `ray.enabled`, else this process."""
    return build_ray(cfg, base_path, reservation) if cfg.ray.enabled else build_local(cfg, base_path)


def build_ray(cfg: Config, base_path: str | Path, reservation: RayReservation | None = None) -> Workers:
    """Engines, sandboxes and learner as Ray actors (popula.run.parts.ray.workers), behind proxies."""
    engine, sandbox, learner, held = start_actors(cfg, base_path, n_adapters(cfg), reservation)

    def release() -> None:
        try:
            learner.close()
        finally:
            held.release()

    return Workers(engine=engine, sandbox=sandbox, learner=learner, release=release)


def build_local(cfg: Config, base_path: str | Path) -> Workers:
    """All workers in this process (the sandbox's own worker processes aside)."""
    runtime = runtime_of(cfg)
    n = n_adapters(cfg)
    if engine_spec(cfg.engine).shares_model:
        # One base in memory: the engine generates with the learner's model and adapter tensors
        # (one spare slot for adapter files the learner does not hold).
        learner = build_learner(cfg, base_path, runtime, max_adapters=n, spare_slots=1)
        engine = build_engine(cfg, base_path, runtime, max_adapters=n + 1, shared=learner)
        if not isinstance(engine, SharingEngine):
            engine.close()
            raise PopulaError(f"engine {cfg.engine!r} is registered as sharing the learner's model but cannot "
                              f"bind its versions (it is no popula.engines.shared.SharingEngine)")
        return Workers(engine=engine, sandbox=build_sandbox(cfg), learner=learner, runtime=runtime,
                       sharing=Sharing(engine, learner))
    learner = build_learner(cfg, base_path, runtime, max_adapters=n)
    engine = build_engine(cfg, base_path, runtime, max_adapters=n + 1)
    return Workers(engine=engine, sandbox=build_sandbox(cfg), learner=learner, runtime=runtime)
