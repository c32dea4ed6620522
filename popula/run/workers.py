"""The heavy workers a run drives: generation engine, sandbox and learner.

`PopulationRun` talks to them only through their methods (`engine.generate`,
`sandbox.verify`, `learner.step` ...), so where they run is decided here and nowhere
else: in this process by default, or as Ray actors on a cluster (same methods, same
step loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from popula.config import Config


@dataclass
class Workers:
    engine: Any  # popula.engines.base.Engine
    sandbox: Any  # popula.sandbox.Sandbox
    learner: Any  # popula.learner.PopulationLearner
    release: Callable[[], None] | None = None  # frees what the learner holds beyond this process (Ray actor)

    def close(self) -> None:
        self.sandbox.close()
        self.engine.close()
        if self.release is not None:
            self.release()


def n_adapters(cfg: Config) -> int:
    return 1 if cfg.population.single_agent else cfg.population.teachers + cfg.population.students


def build_workers(cfg: Config, base_path: str | Path) -> Workers:
    """The run's workers where the config puts them: Ray actors when `ray.enabled`, else this process."""
    return build_ray(cfg, base_path) if cfg.ray.enabled else build_local(cfg, base_path)


def build_ray(cfg: Config, base_path: str | Path) -> Workers:
    """Engines, sandboxes and learner as Ray actors (popula.run.ray_workers), behind proxies."""
    from popula.run.ray_workers import build_ray as start_actors

    engine, sandbox, learner = start_actors(cfg, base_path, n_adapters(cfg))
    return Workers(engine=engine, sandbox=sandbox, learner=learner, release=learner.close)


def build_local(cfg: Config, base_path: str | Path) -> Workers:
    """All workers in this process (the sandbox's own worker processes aside)."""
    from popula.engines import create_engine
    from popula.learner import PopulationLearner
    from popula.sandbox import Sandbox

    n = n_adapters(cfg)
    learner = PopulationLearner(base_path, cfg.lora, cfg.learner, seed=cfg.seed, max_adapters=n)
    # vLLM learns the target modules from each adapter's config; the torch engine wraps them up front.
    options = {"target_modules": cfg.lora.target_modules} if cfg.engine == "torch" else {}
    engine = create_engine(cfg.engine, base_path, max_adapters=n + 1, max_rank=cfg.lora.rank, seed=cfg.seed, **options)
    return Workers(engine=engine, sandbox=Sandbox(workers=cfg.sandbox.workers, isolation=cfg.sandbox.isolation), learner=learner)
