"""The run's workers as Ray actors, behind driver-side proxies with the local parts' interfaces.

`PopulationRun` cannot tell these proxies from the local engine, sandbox and learner: they
satisfy the same Protocols (`Engine`, `SandboxPool`, `Learner`), and the step loop is one code
path. What changes is where the work happens:

- Engine actors (`ray.engines` of them, `engine_gpus`/`engine_cpus` each) generate. A call's
  requests are split into contiguous chunks, one per engine actor.
- Sandbox actors (`ray.sandbox_actors`, `sandbox_cpus` each) each own a `Sandbox` with its own
  forked jail processes; records are split into contiguous chunks, verdicts come back in order.
- One learner actor (`learner_gpus`/`learner_cpus`) holds every adapter's weights and AdamW state.
  Its proxy's methods are plain forwarding, built from the `Learner` Protocol by `forward`.

`build_ray` starts the actors inside the run's reservation (`popula.run.parts.ray.placement`, on the
cluster of `popula.run.parts.ray.cluster`) and hands back the proxies. The actors themselves, and how
adapter and base files reach them without a shared file system, are `popula/run/parts/ray/actors.py`;
every actor builds its part with the run's builders.

Faults: engine and sandbox actors are created with `max_restarts` and `max_task_retries`, so
when one dies Ray restarts it (re-running its constructor) and re-submits the call in flight.
A restarted engine has no adapters on disk; because every call carries the refs of the
versions it needs, it fetches them again by itself, so re-shipping needs no incarnation
bookkeeping. Generation is seeded per request and verification is a pure function of the
record, so a redone call returns what the first attempt would have.
The learner actor is NOT restarted: its optimiser moments live only in it, and a fresh one
would silently train from step-0 weights. Its death raises a PopulaError telling the user to
`popula run ... --resume` from the last checkpoint (which holds the whole learner state).
Actors are owned by the driver: when it exits (Ctrl-C, SIGTERM, an error) they go with it.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, ParamSpec, Sequence, TypeVar

from popula.config import Config
from popula.engines.base import GenerationRequest, GenerationResult
from popula.errors import PopulaError
from popula.learner.protocol import Learner
from popula.records import TaskRecord, VerifyResult
from popula.run.parts.ray.actors import EngineActor, LearnerActor, SandboxActor, directory_bundle
from popula.run.parts.ray.placement import RayReservation, reserve
from popula.runtime import Runtime

BASE_SHIP_LIMIT = 4 << 30  # a base directory above this is not pushed through the object store


# -- driver-side proxies --------------------------------------------------------------------------------

@dataclass
class CallTimes:
    """Where the Ray path's time goes, per proxy.

    `call_s` runs from submitting a call to holding its result; `busy_s` is the part the actors
    spent working (the slowest actor of a split call), so `call_s - busy_s` is Ray's share:
    pickling arguments and results, object-store transfers, scheduling. `ship_s` is the
    driver's time reading and `ray.put`-ing adapter files. `busy_cpu_s` is the CPU time the
    actors' processes used while busy: beside `busy_s` it tells slower work from waiting for a CPU.
    """

    ship_s: float = 0.0
    shipped_bytes: int = 0
    calls: int = 0
    call_s: float = 0.0
    busy_s: float = 0.0
    busy_cpu_s: float = 0.0

    def add(self, call_s: float, answers: Sequence[tuple[Any, float, float]]) -> None:
        """One call: its wall time and each actor's (result, busy wall s, busy CPU s)."""
        self.calls += 1
        self.call_s += call_s
        self.busy_s += max(a[1] for a in answers)
        self.busy_cpu_s += sum(a[2] for a in answers)

    @property
    def overhead_s(self) -> float:
        return self.call_s - self.busy_s

    def as_dict(self) -> dict[str, float]:
        return {"calls": self.calls, "call_s": self.call_s, "busy_s": self.busy_s, "busy_cpu_s": self.busy_cpu_s,
                "overhead_s": self.overhead_s, "ship_s": self.ship_s, "shipped_bytes": self.shipped_bytes}


def _chunks(n: int, parts: int) -> list[range]:
    """`parts` contiguous index ranges covering range(n), sizes differing by at most one."""
    parts = max(1, min(parts, n))
    bounds = [n * i // parts for i in range(parts + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


@dataclass
class RayEngine:
    """`Engine` over engine actors; ships each adapter version once (see the module docstring)."""

    actors: list[Any]
    base_ref: Any = None  # what the actors' constructors fetch the base from; held so restarts find it
    times: CallTimes = field(default_factory=CallTimes)
    _shipped: dict[int, Any] = field(default_factory=dict)  # uid -> ObjectRef of its files

    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False) -> list[GenerationResult]:
        import ray

        if not requests:
            return []
        used = {r.adapter.uid: r.adapter for r in requests if r.adapter is not None}
        for uid, ref in used.items():
            if uid not in self._shipped:
                start = time.perf_counter()
                bundle = directory_bundle(Path(ref.path))
                self._shipped[uid] = ray.put(bundle)
                self.times.ship_s += time.perf_counter() - start
                self.times.shipped_bytes += sum(len(b) for b in bundle.values())
        # Only this call's versions stay referenced: older ones leave the object store and the actors' disks.
        self._shipped = {uid: obj for uid, obj in self._shipped.items() if uid in used}
        live = {uid: [obj] for uid, obj in self._shipped.items()}
        start = time.perf_counter()
        parts = _chunks(len(requests), len(self.actors))
        futures = [actor.generate.remote([requests[i] for i in part], live, progress)
                   for actor, part in zip(self.actors, parts)]
        answers = _get(futures, "engine")
        self.times.add(time.perf_counter() - start, answers)
        samples = [s for chunk, _, _ in answers for s in chunk]
        return [GenerationResult(req, list(s)) for req, s in zip(requests, samples)]

    def info(self) -> list[dict[str, Any]]:
        import ray

        return ray.get([a.info.remote() for a in self.actors])

    def close(self) -> None:
        _close(self.actors)
        self._shipped.clear()
        self.base_ref = None


@dataclass
class RaySandbox:
    """`Sandbox.verify` over sandbox actors: contiguous chunks, verdicts in record order."""

    actors: list[Any]
    times: CallTimes = field(default_factory=CallTimes)

    def verify(self, records: Sequence[TaskRecord],
               progress: Callable[[int], None] | None = None) -> list[VerifyResult]:
        if not records:
            return []
        start = time.perf_counter()
        parts = _chunks(len(records), len(self.actors))
        futures = [actor.verify.remote([records[i] for i in part]) for actor, part in zip(self.actors, parts)]
        answers = _get(futures, "sandbox")
        self.times.add(time.perf_counter() - start, answers)
        verdicts = [v for chunk, _, _ in answers for v in chunk]
        if progress is not None:
            progress(len(verdicts))
        return verdicts

    def info(self) -> list[dict[str, Any]]:
        import ray

        return ray.get([a.info.remote() for a in self.actors])

    def close(self) -> None:
        _close(self.actors)


P = ParamSpec("P")
R = TypeVar("R")


def forward(method: Callable[P, R]) -> Callable[P, R]:
    """A proxy method with `method`'s signature (a Protocol's) that runs the method of that name
    on the actor, through the proxy's `_call`: one line per method, typed by the Protocol."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._call(name, *args, **kwargs)

    return call  # type: ignore[return-value]  # the Protocol's signature, bound to the proxy


@dataclass
class RayLearner:
    """`Learner` over the learner actor: every method is the local learner's, run on the actor.

    Only `_call` (timing, and the death of the actor turned into a resume hint) and `close`
    (kill the actor) are the proxy's own."""

    actor: Any
    times: CallTimes = field(default_factory=CallTimes)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        import ray

        start = time.perf_counter()
        try:
            answer = ray.get(self.actor.call.remote(method, *args, **kwargs))
        except ray.exceptions.RayActorError as err:
            raise PopulaError(
                f"the learner actor died during {method}() ({err.__class__.__name__}). Its adapters' optimiser "
                "state lived only in it, so it is not restarted: continue with `popula run CONFIG --out RUN_DIR "
                "--resume`, which restores the whole learner from the last checkpoint") from err
        self.times.add(time.perf_counter() - start, [answer])
        return answer[0]

    @property
    def adapters(self) -> list[str]:
        return self._call("adapters")

    add_adapter = forward(Learner.add_adapter)
    remove_adapter = forward(Learner.remove_adapter)
    adapter_state = forward(Learner.adapter_state)
    optimizer_state = forward(Learner.optimizer_state)
    step = forward(Learner.step)
    state_dict = forward(Learner.state_dict)
    load_state_dict = forward(Learner.load_state_dict)

    def close(self) -> None:
        import ray

        ray.kill(self.actor)


def _get(futures: list[Any], what: str) -> list[Any]:
    """Results of calls Ray already retried on restarted actors; still failing means out of restarts."""
    import ray

    try:
        return ray.get(futures)
    except ray.exceptions.RayActorError as err:
        raise PopulaError(f"a {what} actor died and could not be restarted (ray.max_restarts used up, or its "
                          f"node is gone): {err}") from err


def _close(actors: list[Any]) -> None:
    import ray

    try:
        ray.get([a.close.remote() for a in actors])
    except ray.exceptions.RayActorError:
        pass  # an actor already gone (out of restarts) holds nothing left to release
    finally:
        for a in actors:
            ray.kill(a)


# -- starting the actors ------------------------------------------------------------------------------------

def actor_runtime(cfg: Config, gpus: float) -> Runtime:
    """Device and dtype of an engine or learner actor: cuda when Ray gives it GPUs, else cpu;
    `runtime.dtype` auto is bf16 on a GPU actor (checked by the driver, which may have no GPU,
    so not probed) and fp32 on a CPU one."""
    device = "cuda" if gpus > 0 else "cpu"
    dtype = cfg.runtime.dtype
    if dtype == "auto":
        dtype = "bfloat16" if gpus > 0 else "float32"
    return Runtime(device=device, dtype=dtype)


def _wait_started(named: Mapping[str, Any], log: Callable[[str], None]) -> None:
    """Wait until every actor's constructor finished, saying every 30 s which are still starting
    (their resources are reserved, so this is loading, not waiting for the cluster); a
    constructor's error is raised here, at start, not in the first step."""
    import ray

    pending = dict(named)  # ref -> actor name
    start = time.monotonic()
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=30.0)
        ray.get(ready)
        for ref in ready:
            pending.pop(ref)
        if pending:
            log(f"popula run: {time.monotonic() - start:.0f} s, still starting (loading the base model): "
                f"{', '.join(sorted(pending.values()))}")


def build_ray(cfg: Config, base_path: str | Path, n_adapters: int, reservation: RayReservation | None = None,
              log: Callable[[str], None] = print) -> tuple[RayEngine, RaySandbox, RayLearner, RayReservation]:
    """Start the actors in their reservation (`reserve`, made here if not given); returns proxies
    for engine, sandbox, learner, and the reservation (release it after closing the proxies).

    Anything created is killed again, and the reservation released, if starting fails: a
    failed start leaves no actor behind."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    reservation = reservation or reserve(cfg, log)
    r, group, asks = cfg.ray, reservation.group, reservation.asks
    bundle_of: dict[str, int] = {}
    for a in asks:
        if a.bundle:
            bundle_of[a.actor] = len(bundle_of)
    ask = {a.actor: a for a in asks}

    def where(actor: str) -> dict[str, Any]:
        """num_cpus/num_gpus and scheduling of one actor: inside its bundle of the group."""
        a = ask[actor]
        options: dict[str, Any] = {"num_cpus": a.cpus, "num_gpus": a.gpus}
        if actor in bundle_of:
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=bundle_of[actor])
        return options

    created: list[Any] = []
    try:
        base: Any = str(base_path)
        if r.ship_base and Path(base_path).is_dir():
            size = sum(p.stat().st_size for p in Path(base_path).rglob("*") if p.is_file())
            if size > BASE_SHIP_LIMIT:
                raise PopulaError(f"ray.ship_base: {base_path} is {size >> 20} MiB, above {BASE_SHIP_LIMIT >> 20} MiB; "
                                  "set ray.ship_base=false and give every node the base at the same path (or a hub id)")
            # In a list, so Ray hands the actors the ref (they fetch it) rather than resolving it into an argument.
            base = [ray.put((Path(base_path).name, directory_bundle(Path(base_path))))]
        restart = {"max_restarts": r.max_restarts, "max_task_retries": r.max_restarts}

        # Each actor builds its part with the local run's builders; the device of an actor is where
        # Ray puts it (engine_gpus / learner_gpus), the dtype the config's (auto: bf16 on a GPU actor).
        engine_rt = actor_runtime(cfg, r.engine_gpus)
        engines = [ray.remote(EngineActor).options(**where(f"engine {i}"), **restart).remote(
            cfg, base, engine_rt, n_adapters + 1, r.torch_threads) for i in range(r.engines)]
        created += engines
        sandboxes = [ray.remote(SandboxActor).options(**where(f"sandbox {i}"), **restart).remote(cfg)
                     for i in range(r.sandbox_actors)]
        created += sandboxes
        learner = ray.remote(LearnerActor).options(**where("learner"), max_restarts=0).remote(
            cfg, base, actor_runtime(cfg, r.learner_gpus), n_adapters, r.torch_threads)
        created.append(learner)
        # The engine proxy keeps the base's ref alive: a restarted engine fetches it again.
        proxies = RayEngine(engines, base_ref=base), RaySandbox(sandboxes), RayLearner(learner)
        # Construction errors (a bad base, no GPU) surface here, at start, not in the first step.
        _wait_started({**{e.info.remote(): f"engine {i}" for i, e in enumerate(engines)},
                       **{s.info.remote(): f"sandbox {i}" for i, s in enumerate(sandboxes)},
                       learner.info.remote(): "learner"}, log)
    except BaseException:
        for actor in created:
            ray.kill(actor)
        reservation.release()
        raise
    return (*proxies, reservation)
