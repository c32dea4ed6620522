"""The run's Ray actors: what runs in the actor processes, and the files shipped to them.

Each actor builds its part with the run's own builders (`popula/run/parts/builders.py`), from the
run's config, so an actor's engine, sandbox pool or learner is the one a local run would
build. This module is what an actor process imports: it loads no torch itself (a sandbox
actor never needs it). The driver-side proxies and start-up are `popula/run/parts/ray/workers.py`,
placement `popula/run/parts/ray/placement.py`.

No shared file system is assumed. Adapter versions live on the driver's disk (AdapterStore);
the engine proxy ships each version's files (adapter_config.json + adapter_model.safetensors)
into the object store once per uid, and every generate call carries the ObjectRefs of the
versions it uses. An engine actor materialises a uid it has not seen into its own temp
directory and rewrites the request's path; since uids are unique per version, a new version is
always a new directory and an engine can never serve a stale one. A local base-model directory
is shipped the same way once (`ray.ship_base`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from popula.config import Config
from popula.engines.base import GenerationRequest, Sample
from popula.errors import PopulaError
from popula.records import TaskRecord, VerifyResult
from popula.run.parts.builders import build_engine, build_learner, build_sandbox
from popula.runtime import Runtime


# -- files through the object store ----------------------------------------------------------------

def directory_bundle(path: Path) -> dict[str, bytes]:
    """Every file under `path` by relative POSIX path: what an actor needs to rebuild the directory."""
    files = {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
    if not files:
        raise PopulaError(f"{path}: no files to ship to the Ray actors")
    return files


def materialise(bundle: Mapping[str, bytes], directory: Path) -> Path:
    """Write a bundle under `directory` (atomically: a partly written one is never used)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=directory.parent))
    for rel, data in bundle.items():
        target = tmp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return directory


def _base_for_actor(base: str | list[Any], workdir: Path) -> str:
    """An actor's base path: a shipped (name, bundle) materialised locally, or a path/id as given.

    The copy keeps the base directory's name: adapters name their base, and a moved base is
    recognised by that name (popula.adapters.same_base)."""
    import ray

    if isinstance(base, list):
        name, bundle = ray.get(base[0])
        return str(materialise(bundle, workdir / name))
    return base


def _set_threads(threads: int | None) -> None:
    """Ray caps OMP threads to an actor's CPU request (1 for fractional ones); the work is
    sequential per step, so the actor takes the node's cores as a local run does."""
    import torch

    torch.set_num_threads(threads or len(os.sched_getaffinity(0)))


# -- actors ------------------------------------------------------------------------------------------

class EngineActor:
    """One generation engine plus the adapter versions it has materialised (uid -> directory)."""

    def __init__(self, cfg: Config, base: Any, runtime: Runtime, max_adapters: int, threads: int | None) -> None:
        _set_threads(threads)
        self.workdir = Path(tempfile.mkdtemp(prefix="popula-engine-"))
        self.engine = build_engine(cfg, _base_for_actor(base, self.workdir), runtime, max_adapters=max_adapters)
        self.paths: dict[int, Path] = {}
        self.fetched = 0
        self.busy = False

    def generate(self, requests: list[GenerationRequest], adapters: dict[int, list[Any]],
                 progress: bool) -> tuple[list[list[Sample]], float, float]:
        """Samples per request, and the wall and CPU seconds spent generating; `adapters[uid] = [ObjectRef]` (in a list:
        Ray must not resolve it into an argument, so only the versions this actor lacks are fetched)."""
        self.busy = True
        try:
            return self._generate(requests, adapters, progress)
        finally:
            self.busy = False

    def _generate(self, requests: list[GenerationRequest], adapters: dict[int, list[Any]],
                  progress: bool) -> tuple[list[list[Sample]], float, float]:
        import ray

        for uid in {r.adapter.uid for r in requests if r.adapter is not None} - set(self.paths):
            if uid not in adapters:
                raise PopulaError(f"engine actor: no files were shipped for adapter uid {uid}")
            self.paths[uid] = materialise(ray.get(adapters[uid][0]), self.workdir / "adapters" / str(uid))
            self.fetched += 1
        for uid in set(self.paths) - set(adapters):  # versions the driver no longer serves
            shutil.rmtree(self.paths.pop(uid), ignore_errors=True)
        local = [replace(r, adapter=replace(r.adapter, path=self.paths[r.adapter.uid])) if r.adapter else r
                 for r in requests]
        start, cpu = time.perf_counter(), time.process_time()  # fetching adapters above is Ray's share
        samples = [result.samples for result in self.engine.generate(local, progress=progress)]
        return samples, time.perf_counter() - start, time.process_time() - cpu

    def info(self) -> dict[str, Any]:
        """Who answers (a restarted actor is a new process), how many adapter versions it fetched, and
        whether a generate call is running (visible only to an actor created with max_concurrency > 1)."""
        return {"pid": os.getpid(), "fetched": self.fetched, "busy": self.busy}

    def close(self) -> None:
        self.engine.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


class SandboxActor:
    """One `Sandbox` (with its own forked jail workers) on whichever node Ray places it."""

    def __init__(self, cfg: Config) -> None:
        self.sandbox = build_sandbox(cfg)
        self.busy = False

    def verify(self, records: list[TaskRecord]) -> tuple[list[VerifyResult], float, float]:
        """Verdicts, wall seconds, and this process's CPU seconds (the jail processes' are not in it)."""
        start, cpu = time.perf_counter(), time.process_time()
        self.busy = True
        try:
            verdicts = self.sandbox.verify(records)
        finally:
            self.busy = False
        return verdicts, time.perf_counter() - start, time.process_time() - cpu

    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "busy": self.busy}

    def close(self) -> None:
        self.sandbox.close()


class LearnerActor:
    """The population learner; `call` runs any of its methods (or reads an attribute), so the
    proxy (`RayLearner`) forwards its interface without a method here per method there."""

    def __init__(self, cfg: Config, base: Any, runtime: Runtime, max_adapters: int, threads: int | None) -> None:
        _set_threads(threads)
        self.workdir = Path(tempfile.mkdtemp(prefix="popula-learner-"))
        self.learner = build_learner(cfg, _base_for_actor(base, self.workdir), runtime, max_adapters=max_adapters)

    def call(self, method: str, *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
        """`learner.method(*args, **kwargs)` (or the attribute `method`, such as `adapters`), and
        the wall and CPU seconds it took."""
        start, cpu = time.perf_counter(), time.process_time()
        value = getattr(self.learner, method)
        result = value(*args, **kwargs) if callable(value) else value
        return result, time.perf_counter() - start, time.process_time() - cpu

    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid()}
