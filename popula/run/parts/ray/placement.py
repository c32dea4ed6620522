"""Where the run's Ray actors go: each actor's ask, and one placement group reserving them all.

Ray keeps an actor it cannot place pending forever, without a word, so the run decides
placement itself before any actor exists. `actor_asks` lists what each actor asks for
(`ray.*_cpus` left at None fit a local cluster: its CPUs shared among the actors, at most one
each; the actors take turns within a step, so a fraction of a CPU costs no speed). An ask that
can never fit the cluster (more than its total, or more than any node has) is refused at once;
otherwise all actors are reserved together as one placement group, and a reservation still
pending after `ray.pending_timeout_s` is refused the same way: exit 2, naming each actor's ask
and the cluster's resources. Releasing the reservation also shuts down a local cluster the
run started (`popula.run.parts.ray.cluster`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from popula.config import Config
from popula.errors import PopulaError
from popula.run.parts.ray.cluster import LocalCluster, connect


@dataclass(frozen=True)
class Ask:
    """What one actor asks Ray for."""

    actor: str  # "engine 0", "sandbox 1", "learner"
    cpus: float
    gpus: float

    @property
    def bundle(self) -> dict[str, float]:
        return {k: v for k, v in (("CPU", self.cpus), ("GPU", self.gpus)) if v > 0}

    def __str__(self) -> str:
        return f"{self.actor}: {_amount(self.bundle)}"


def _amount(resources: Mapping[str, float]) -> str:
    parts = [f"{resources.get(k, 0):g} {k}" for k in ("CPU", "GPU") if resources.get(k, 0) or k == "CPU"]
    return ", ".join(parts)


def actor_asks(cfg: Config, local_cpus: float | None) -> list[Ask]:
    """Each actor's ask. `local_cpus`: the CPUs of a local cluster this run started (None: a
    joined cluster). A `*_cpus` of None fits: on a local cluster every actor gets an equal share
    of its CPUs, at most 1 (floored to 0.01 so the sum never exceeds them); elsewhere 1."""
    r = cfg.ray
    n = r.engines + r.sandbox_actors + 1
    fit = 1.0 if local_cpus is None else min(1.0, math.floor(local_cpus / n * 100) / 100)

    def cpus(value: float | None) -> float:
        return fit if value is None else value

    return ([Ask(f"engine {i}", cpus(r.engine_cpus), r.engine_gpus) for i in range(r.engines)]
            + [Ask(f"sandbox {i}", cpus(r.sandbox_cpus), 0.0) for i in range(r.sandbox_actors)]
            + [Ask("learner", cpus(r.learner_cpus), r.learner_gpus)])


def _cluster_nodes() -> list[dict[str, float]]:
    import ray

    return [{"CPU": float(n["Resources"].get("CPU", 0)), "GPU": float(n["Resources"].get("GPU", 0)),
             "address": n.get("NodeManagerAddress", "?")} for n in ray.nodes() if n.get("Alive")]


def describe_cluster(nodes: Sequence[Mapping[str, Any]], available: Mapping[str, float] | None = None) -> str:
    total = {k: sum(float(n[k]) for n in nodes) for k in ("CPU", "GPU")}
    text = f"the cluster has {_amount(total)} on {len(nodes)} node{'s' if len(nodes) != 1 else ''}"
    if len(nodes) > 1:
        text += " (" + "; ".join(f"{n['address']}: {_amount(n)}" for n in nodes) + ")"
    if available is not None:
        text += f", of which {_amount(available)} free now"
    return text


def unplaceable(asks: Sequence[Ask], nodes: Sequence[Mapping[str, Any]]) -> str | None:
    """Why `asks` can never be placed on `nodes` (None if they might): the sum of a resource
    above the cluster's total, or one actor larger than every node. Only certain refusals:
    anything subtler is left to the placement group and its timeout."""
    tol = 1e-6
    for key in ("CPU", "GPU"):
        want = sum(a.bundle.get(key, 0.0) for a in asks)
        have = sum(float(n[key]) for n in nodes)
        if want > have + tol:
            return f"together they ask {want:g} {key}, more than the cluster's {have:g}"
    for a in asks:
        if not any(all(v <= float(n[k]) + tol for k, v in a.bundle.items()) for n in nodes):
            return f"no node has the {_amount(a.bundle)} that {a.actor} asks for"
    return None


def _refusal(asks: Sequence[Ask], why: str, nodes: Sequence[Mapping[str, Any]],
             available: Mapping[str, float] | None = None) -> PopulaError:
    return PopulaError(
        f"the Ray actors cannot be placed: {why}. Each actor asks {'; '.join(map(str, asks))}, and "
        f"{describe_cluster(nodes, available)}. Ask for less: lower ray.engine_cpus / ray.sandbox_cpus / "
        "ray.learner_cpus (fractions such as 0.5 are fine: the actors take turns within a step; leave them "
        "out to fit a local cluster) or the *_gpus, use fewer ray.engines / ray.sandbox_actors, or give the "
        "cluster more (ray.num_cpus for a local one, more nodes for a joined one)")


def place(cfg: Config, asks: Sequence[Ask], log: Callable[[str], None] = print) -> Any:
    """Reserve every actor's ask as one placement group, or raise the refusal (module doc).

    Returns the ready placement group (None when no actor asks for anything)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    nodes = _cluster_nodes()
    if (why := unplaceable(asks, nodes)) is not None:
        raise _refusal(asks, why, nodes)
    bundles = [a.bundle for a in asks if a.bundle]
    if not bundles:
        return None
    group = placement_group(bundles, strategy="SPREAD" if cfg.ray.strategy == "SPREAD" else "PACK")
    timeout = cfg.ray.pending_timeout_s
    start = time.monotonic()
    while True:
        waited = time.monotonic() - start
        ready, _ = ray.wait([group.ready()], timeout=min(10.0, max(0.0, timeout - waited)))
        if ready:
            return group
        waited = time.monotonic() - start
        available = {k: float(v) for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
        if waited >= timeout:
            remove_placement_group(group)
            raise _refusal(asks, f"the cluster did not place them within ray.pending_timeout_s={timeout:g} s "
                                 "(other work holds its resources, or its nodes cannot take these asks)",
                           _cluster_nodes(), available)
        log(f"popula run: waiting {waited:.0f} s (of ray.pending_timeout_s={timeout:g}) for Ray to place the "
            f"actors ({'; '.join(map(str, asks))}); {describe_cluster(nodes, available)}")


@dataclass
class RayReservation:
    """The run's placement group and the asks it holds; removing it frees the cluster's resources.

    `cluster`: the local cluster this run started, so releasing also shuts it down, here and
    waiting for its processes, rather than in Ray's atexit hook, which a second Ctrl-C
    interrupts half-way and leaves the raylet's agents orphaned."""

    group: Any
    asks: list[Ask]
    cluster: LocalCluster | None = None

    def release(self) -> None:
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            group, self.group = self.group, None
            try:
                remove_placement_group(group)
            except Exception:  # noqa: BLE001 - a cluster already gone has nothing left to free
                pass
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.shutdown()


def reserve(cfg: Config, log: Callable[[str], None] = print) -> RayReservation:
    """Connect (or start a local cluster) and reserve every actor's ask, or raise the refusal.

    Cheap (seconds) and creates no actor: `popula run` calls it before touching the run
    directory, so a run the cluster cannot take leaves nothing behind."""
    import ray

    cluster = connect(cfg)
    asks = actor_asks(cfg, float(ray.cluster_resources().get("CPU", 0)) if cluster is not None else None)
    return RayReservation(place(cfg, asks, log), asks, cluster=cluster)
