"""The Ray cluster a run works on: joining a configured one, or starting a local one and owning it.

A local cluster this driver starts is the run's: sized by the config (`ray.num_cpus`,
`ray.object_store_mb`), and shut down when the run ends (Ctrl-C, SIGTERM, an error), its
processes waited for, so nothing of it outlives the run. A joined cluster is left running.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import psutil

from popula.config import Config
from popula.errors import PopulaError


def connect(cfg: Config) -> LocalCluster | None:
    """Join the configured cluster, or start a local one; a driver already connected is left as it is.

    Returns the local cluster when this call started one (its size and its end are then the run's)."""
    try:
        import ray
    except ImportError:
        raise PopulaError("ray.enabled / --ray: the `ray` package is not installed (pip install 'ray==2.60.0')") from None

    if ray.is_initialized():
        return None
    r = cfg.ray
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
    local = r.address is None and "RAY_ADDRESS" not in os.environ
    if local:
        # A local cluster this run starts (and owns): sized by the config, not by Ray's guesses.
        if r.num_cpus is not None:
            kwargs["num_cpus"] = r.num_cpus
        if r.object_store_mb is not None:
            kwargs["object_store_memory"] = r.object_store_mb << 20
    before = {p.pid for p in psutil.Process().children()} if local else set()
    try:
        ray.init(address=r.address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise PopulaError(f"ray.address={r.address!r}: cannot connect to a Ray cluster ({err}); start one with "
                          "`ray start --head` or leave ray.address empty to start a local one") from err
    if not local:
        return None
    return LocalCluster([p for p in psutil.Process().children() if p.pid not in before])


class LocalCluster:
    """A Ray cluster this driver started: its head processes (GCS, raylet, ...) are the driver's
    own children, and everything Ray starts later (agents, workers) descends from them.

    `shutdown` stops it through Ray, then kills whatever of that tree is still alive after a
    grace period. Ray alone leaves the raylet's dashboard and runtime-env agents to notice their
    parent is gone by polling, which on a loaded machine takes longer than a user waits for a
    stopped run to be gone."""

    GRACE_S = 10.0

    def __init__(self, head: list[psutil.Process]) -> None:
        self.head = head
        # ray.init installs a native SIGTERM handler that kills the driver on the spot, so no
        # `finally` would shut the cluster down; raising SystemExit instead unwinds the run.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _exit_on_sigterm)

    def shutdown(self) -> None:
        import ray

        tree = list(self.head)
        for proc in self.head:
            try:
                tree.extend(proc.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        try:
            ray.shutdown(wait_for_processes=True)
        finally:
            _, alive = psutil.wait_procs(tree, timeout=self.GRACE_S)
            for proc in alive:
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(alive, timeout=self.GRACE_S)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)
