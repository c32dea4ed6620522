"""`popula run --ray` on a local Ray cluster: same results as one process, faults redone.

One small local cluster (2 CPUs, 200 MB object store, fractional CPU requests so every actor
fits) serves the whole module; the base is the quickly built tiny model of test_run_e2e.
That base proposes no valid task in 24 tokens, so the run tests exercise generation, learning,
evolution and the league through Ray; verification through Ray is checked on its own below.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from popula.adapters.store import AdapterStore  # noqa: E402
from popula.cli import main  # noqa: E402
from popula.config import load_config  # noqa: E402
from popula.engines.base import GenerationRequest  # noqa: E402
from popula.engines.torch_engine import TorchEngine  # noqa: E402
from popula.errors import PopulaError  # noqa: E402
from popula.run.metrics import read_metrics  # noqa: E402
from popula.run.parts.ray.actors import EngineActor, LearnerActor, SandboxActor, directory_bundle, materialise  # noqa: E402
from popula.run.parts.ray.workers import RayEngine, RayLearner, RaySandbox  # noqa: E402
from popula.runtime import Runtime  # noqa: E402
from popula.records import TaskRecord  # noqa: E402
from popula.sandbox import Sandbox  # noqa: E402

pytestmark = pytest.mark.slow

SMALL = ["population.teachers=2", "population.students=2", "tasks.proposals_per_type=1",
         "tasks.seed_tasks=6", "generation.rollouts=2", "generation.teacher_max_tokens=24",
         "generation.student_max_tokens=12", "evolution.every=1", "evolution.min_age=0", "run.checkpoint_every=1"]
# Every actor asks for half a CPU: engine, learner and sandbox fit on a 2-CPU cluster with room
# for a restarted actor to come back while its old reservation is released.
FITS = ["ray.engine_cpus=0.5", "ray.learner_cpus=0.5", "ray.sandbox_cpus=0.5", "ray.max_restarts=2"]
TIMING = {"wall_s", "phases", "verify_per_s"}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, object_store_memory=200 << 20, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def base(quick_base) -> Path:
    return quick_base


def run_overrides(base: Path, *extra: str) -> list[str]:
    return [f"base_model={base}", *SMALL, "run.steps=2", "seed=3", *extra]


def run_args(base: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "configs/tiny-cpu.yaml", "--out", str(out), *(f"--set={s}" for s in run_overrides(base, *extra))]


def kill_when_busy(actor) -> dict[str, float]:
    """From a thread, kill `actor` (letting Ray restart it) as soon as it reports a call running.

    The actor must be created with max_concurrency=2 so `info` answers beside the call.
    Returns a dict that gets the kill's time once it fired."""
    fired: dict[str, float] = {}

    def kill() -> None:
        while not ray.get(actor.info.remote())["busy"]:
            time.sleep(0.005)
        fired["at"] = time.perf_counter()
        ray.kill(actor, no_restart=False)

    threading.Thread(target=kill, daemon=True).start()
    return fired


@pytest.fixture(scope="module")
def local_run(base, tmp_path_factory) -> Path:
    """The reference: the same 2-step run in one process."""
    out = tmp_path_factory.mktemp("local") / "run"
    assert main(run_args(base, out)) == 0
    return out


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def test_a_run_on_ray_writes_the_same_metrics_as_the_single_process_run(base, cluster, local_run, tmp_path):
    assert main(run_args(base, tmp_path / "ray", *FITS) + ["--ray"]) == 0
    local = read_metrics(local_run / "metrics.jsonl")
    remote = read_metrics(tmp_path / "ray" / "metrics.jsonl")
    assert [r["step"] for r in remote] == [1, 2]
    assert without_timing(remote) == without_timing(local)
    # the evolution step replaced members identically, and the league is the same
    assert remote[0]["evolved"] and remote[0]["evolved"] == local[0]["evolved"]
    league = [json.loads((d / "league.json").read_text())["members"] for d in (local_run, tmp_path / "ray")]
    assert league[0] == league[1]
    assert load_config(tmp_path / "ray" / "config.yaml").ray.enabled


def test_a_learner_killed_mid_run_stops_it_and_resume_finishes_it_as_if_nothing_happened(
        base, cluster, local_run, tmp_path):
    from popula.run.population import PopulationRun

    out = tmp_path / "ray"
    run = PopulationRun(load_config("configs/tiny-cpu.yaml", run_overrides(base, *FITS, "ray.enabled=true")), out)

    def kill_after_first_checkpoint() -> None:  # so the kill lands in step 2, after step 1 is saved
        while not (out / "checkpoints" / "step-000001").exists():
            time.sleep(0.05)
        ray.kill(run.learner.actor)

    threading.Thread(target=kill_after_first_checkpoint, daemon=True).start()
    try:
        with pytest.raises(PopulaError, match="--resume"):
            run.train()
    finally:
        run.workers.engine.close()
        run.workers.sandbox.close()
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1]
    assert main(run_args(base, out, *FITS) + ["--ray", "--resume"]) == 0
    # A resume re-saves the checkpoint's weights as new adapter versions,
    # so only the version numbers the learner reports differ; everything else is as uninterrupted.
    got, want = (without_timing(read_metrics(d / "metrics.jsonl")) for d in (out, local_run))
    for rows in (got, want):
        for adapter in rows[1]["learner"]["adapters"].values():
            adapter.pop("versions")
    assert got == want


def test_adapter_files_are_materialised_under_the_same_names():
    bundle = {"adapter_config.json": b"{}", "sub/adapter_model.safetensors": b"\x00\x01"}
    with tempfile.TemporaryDirectory() as d:
        out = materialise(bundle, Path(d) / "a" / "7")
        assert directory_bundle(out) == bundle
        assert materialise({"x": b"new"}, out) == out and directory_bundle(out) == {"x": b"new"}


def requests_for(store: AdapterStore, tokenizer, versions) -> list[GenerationRequest]:
    prompts = ["def f(x):\n    return", "# code_o\ndef f(a, b):", "print(f(", "def g(s):\n    s ="]
    return [GenerationRequest(prompt_ids=tokenizer.encode(p), adapter=ref, n=2, temperature=1.0, max_tokens=40,
                              seed=100 + i)
            for i, (p, ref) in enumerate((p, v) for v in versions for p in prompts)]


def test_an_engine_killed_mid_generate_is_restarted_refetches_adapters_and_returns_the_same_samples(
        base, cluster, tmp_path):
    cfg = load_config(None)  # torch engine, seed 0
    lora = cfg.lora
    store = AdapterStore(tmp_path / "adapters", base, rank=lora.rank, alpha=lora.alpha,
                         target_modules=lora.target_modules, seed=0)
    v0 = [store.create(n) for n in ("T0", "S0")]
    local = TorchEngine(base, max_adapters=3, max_rank=lora.rank, seed=0, target_modules=lora.target_modules)
    actor = ray.remote(EngineActor).options(num_cpus=0.5, max_restarts=2, max_task_retries=2, max_concurrency=2).remote(
        cfg, str(base), None, 3, None)
    engine = RayEngine([actor])
    try:
        reqs = requests_for(store, local.tokenizer, v0)
        want = [[(s.token_ids, s.logprobs) for s in r.samples] for r in local.generate(reqs)]
        first = engine.info()[0]

        fired = kill_when_busy(actor)
        got = engine.generate(reqs)
        returned = time.perf_counter()
        assert "at" in fired and fired["at"] < returned, "the kill must land while generate runs"
        assert [[(s.token_ids, s.logprobs) for s in r.samples] for r in got] == want
        after = engine.info()[0]
        assert after["pid"] != first["pid"]  # a new process answered ...
        assert after["fetched"] == 2  # ... and fetched both adapter versions itself

        # A new version is a new uid: shipped once, never confused with the old one.
        trained = {k: v * 1.5 for k, v in store.load(v0[0]).state_dict.items()}
        v1 = store.save("T0", trained)
        reqs = requests_for(store, local.tokenizer, [v1])
        assert [[s.token_ids for s in r.samples] for r in engine.generate(reqs)] == \
            [[s.token_ids for s in r.samples] for r in local.generate(reqs)]
        assert engine.times.shipped_bytes > 0 and set(engine._shipped) == {v1.uid}
    finally:
        engine.close()
        local.close()


def slow_tasks(n: int) -> list[TaskRecord]:
    program = "def f(n):\n    s = 0\n    for i in range(n):\n        s += i * i % 7\n    return s\n"
    tasks = [TaskRecord(id=f"t{i}", type="code_o", program=program, inputs=[str(150_000 + i)]) for i in range(n)]
    tasks.append(TaskRecord(id="bad", type="code_o", program="def f(x):\n    return x +", inputs=["1"]))
    tasks.append(TaskRecord(id="ans", type="code_o", program=program, inputs=["3"], outputs=["3"], answer="3"))
    return tasks


def test_a_sandbox_killed_mid_verify_is_restarted_and_its_verdicts_are_unchanged(cluster):
    records = slow_tasks(24)
    with Sandbox(workers=2) as local:
        want = local.verify(records)
    cfg = load_config(None)  # sandbox.workers 2
    actors = [ray.remote(SandboxActor).options(num_cpus=0.5, max_restarts=2, max_task_retries=2, max_concurrency=2).remote(cfg)
              for _ in range(2)]
    sandbox = RaySandbox(actors)
    try:
        first = sandbox.info()
        fired = kill_when_busy(actors[1])
        seen: list[int] = []
        got = sandbox.verify(records, progress=seen.append)
        returned = time.perf_counter()
        assert "at" in fired and fired["at"] < returned, "the kill must land while verify runs"
        assert got == want and seen == [len(records)]
        assert [v.valid for v in got[-2:]] == [False, True] and got[-1].correct is True
        assert sandbox.info()[1]["pid"] != first[1]["pid"]
    finally:
        sandbox.close()


def test_a_dead_learner_actor_is_not_restarted_and_the_error_says_resume(base, cluster):
    cfg = load_config(None)
    actor = ray.remote(LearnerActor).options(num_cpus=0.5, max_restarts=0).remote(
        cfg, str(base), Runtime(device="cpu", dtype="float32"), 2, None)
    learner = RayLearner(actor)
    learner.add_adapter("T0")
    assert learner.adapters == ["T0"]
    assert set(learner.adapter_state("T0")) == set(learner.state_dict()["adapters"]["T0"]["weights"])
    ray.kill(actor)
    with pytest.raises(PopulaError, match="--resume"):
        learner.adapter_state("T0")


def test_the_ray_flag_sets_the_config():
    from popula.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["run", "c.yaml", "--ray", "ray://head:10001"])
    assert args.ray == "ray://head:10001"
    assert parser.parse_args(["run", "c.yaml", "--ray"]).ray == ""
    assert parser.parse_args(["run", "c.yaml"]).ray is None
    with pytest.raises(PopulaError, match="ray.engines"):
        load_config(None, ["ray.engines=0"])
