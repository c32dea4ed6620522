"""`popula run --ray` fits the cluster or says why not, within seconds; it never waits silently
and never leaves actor processes behind.

The arithmetic (what each actor asks, when an ask can never fit) is checked without Ray; the
refusals, the pending timeout and the clean exits run real Ray clusters and real `popula run`
processes on the quickly built tiny base.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popula.config import load_config
from popula.errors import PopulaError
from popula.run.parts.ray.placement import actor_asks, unplaceable

TWO_CPUS = [{"CPU": 2.0, "GPU": 0.0, "address": "10.0.0.1"}]


def asks_of(*overrides: str, local_cpus: float | None = 2.0) -> dict[str, tuple[float, float]]:
    return {a.actor: (a.cpus, a.gpus) for a in actor_asks(load_config(None, list(overrides)), local_cpus)}


def test_on_a_local_2_cpu_cluster_the_default_actors_share_its_cpus_and_fit():
    asks = asks_of()
    assert set(asks) == {"engine 0", "sandbox 0", "learner"}
    assert sum(c for c, _ in asks.values()) <= 2.0
    assert unplaceable(actor_asks(load_config(None), 2.0), TWO_CPUS) is None


def test_the_fitted_share_is_at_most_one_cpu_and_a_joined_cluster_gets_one_cpu_per_actor():
    assert set(asks_of(local_cpus=16.0).values()) == {(1.0, 0.0)}
    assert set(asks_of(local_cpus=None).values()) == {(1.0, 0.0)}
    many = asks_of("ray.engines=3", "ray.sandbox_actors=4", local_cpus=2.0)
    assert len(many) == 8 and sum(c for c, _ in many.values()) <= 2.0


def test_explicit_asks_are_kept_as_given():
    asks = asks_of("ray.engine_cpus=1.5", "ray.engine_gpus=1", "ray.sandbox_cpus=0.25", "ray.learner_cpus=1")
    assert asks == {"engine 0": (1.5, 1.0), "sandbox 0": (0.25, 0.0), "learner": (1.0, 0.0)}


@pytest.mark.parametrize("overrides, nodes, why", [
    (["ray.engine_cpus=1", "ray.sandbox_cpus=1", "ray.learner_cpus=1"], TWO_CPUS,
     "together they ask 3 CPU, more than the cluster's 2"),
    (["ray.learner_gpus=1"], TWO_CPUS, "together they ask 1 GPU, more than the cluster's 0"),
    (["ray.engine_cpus=3", "ray.sandbox_cpus=0.5", "ray.learner_cpus=0.5"], TWO_CPUS * 2,
     "no node has the 3 CPU that engine 0 asks for"),
])
def test_asks_that_can_never_fit_are_named(overrides, nodes, why):
    assert unplaceable(actor_asks(load_config(None, overrides), 2.0), nodes) == why


# -- real clusters and runs -------------------------------------------------------------------------------

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

SMALL = ["population.teachers=2", "population.students=2", "tasks.proposals_per_type=1",
         "tasks.seed_tasks=6", "generation.rollouts=2", "generation.teacher_max_tokens=24",
         "generation.student_max_tokens=12", "evolution.enabled=false", "ray.num_cpus=2",
         "ray.object_store_mb=200"]


def popula_ray_run(base: Path, out: Path, steps: int, *extra: str) -> list[str]:
    sets = [f"--set={s}" for s in [f"base_model={base}", *SMALL, *extra]]
    return [sys.executable, "-m", "popula", "run", "configs/tiny-cpu.yaml", "--out", str(out), "--ray",
            "--steps", str(steps), *sets]


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def all_gone(procs: list[psutil.Process], within_s: float) -> list[str]:
    """The processes of `procs` still alive after `within_s` seconds (their command lines)."""
    deadline = time.monotonic() + within_s
    alive = procs
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.5)
    return [" ".join(p.cmdline()[:3]) for p in alive if p.is_running()]


@pytest.mark.slow
def test_a_run_asking_more_than_the_local_cluster_has_exits_2_within_seconds_naming_asks_and_resources(
        quick_base, tmp_path):
    out = tmp_path / "run"
    start = time.monotonic()
    done = subprocess.run(popula_ray_run(quick_base, out, 1, "ray.engine_cpus=1", "ray.sandbox_cpus=1",
                                         "ray.learner_cpus=1"), capture_output=True, text=True, timeout=300)
    took = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    assert "Each actor asks engine 0: 1 CPU; sandbox 0: 1 CPU; learner: 1 CPU" in done.stderr
    assert "the cluster has 2 CPU on 1 node" in done.stderr and "Traceback" not in done.stderr
    assert took < 90, f"refused after {took:.0f} s"
    assert not out.exists(), "a refused run leaves nothing behind"


@pytest.fixture()
def busy_cluster():
    """A 2-CPU cluster of which another job holds 1.5 CPUs (a placement group of its own)."""
    from ray.util.placement_group import placement_group, remove_placement_group

    ray.init(num_cpus=2, object_store_memory=100 << 20, include_dashboard=False, log_to_driver=False)
    other = placement_group([{"CPU": 1.5}])
    ray.get(other.ready())
    yield
    remove_placement_group(other)
    ray.shutdown()


def test_actors_still_pending_after_the_timeout_are_refused_naming_asks_and_free_resources(busy_cluster):
    from popula.run.parts.ray.placement import reserve

    cfg = load_config(None, ["ray.enabled=true", "ray.pending_timeout_s=3", "ray.engine_cpus=0.5",
                             "ray.sandbox_cpus=0.5", "ray.learner_cpus=0.5"])
    lines: list[str] = []
    start = time.monotonic()
    with pytest.raises(PopulaError) as refused:
        reserve(cfg, log=lines.append)
    took = time.monotonic() - start
    message = str(refused.value)
    assert "did not place them within ray.pending_timeout_s=3 s" in message
    assert "Each actor asks engine 0: 0.5 CPU; sandbox 0: 0.5 CPU; learner: 0.5 CPU" in message
    assert "the cluster has 2 CPU on 1 node, of which 0.5 CPU" in message
    assert 3 <= took < 15
    # the refused reservation is gone: what fits the free half CPU is placed at once
    small = load_config(None, ["ray.enabled=true", "ray.pending_timeout_s=3", "ray.engine_cpus=0.1",
                               "ray.sandbox_cpus=0.1", "ray.learner_cpus=0.1"])
    reserve(small, log=lines.append).release()


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGTERM", "Ctrl-C twice"])
def test_stopping_a_ray_run_leaves_no_actor_or_ray_process_behind(quick_base, tmp_path, stop):
    out = tmp_path / "run"
    proc = subprocess.Popen(popula_ray_run(quick_base, out, 50), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in proc.stdout:  # the first step's summary: every actor is up and has worked
            seen.append(line)
            if line.startswith("step    1"):
                break
        assert proc.poll() is None, "".join(seen)
        children = descendants(proc.pid)
        assert any("ray::" in " ".join(p.cmdline()) or "raylet" in " ".join(p.cmdline()) for p in children)
        if stop == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGINT)
            time.sleep(1)
            proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert all_gone(children, within_s=30) == []
