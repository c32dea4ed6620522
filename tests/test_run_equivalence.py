"""A seeded run gives the same metrics after a refactoring of how its parts are built.

`tests/data/seeded_run_metrics.json` was recorded by this test's run on the code before
the step's parts (engine, sandbox, learner) were built in one place (`popula.run.stack`)
and before the torch engine and the learner shared one base. Same seed, same base, same
config: every count, reward and rating must be what it was; float figures (losses,
log-prob gaps, gradient norms) to fp32 rounding, since the two code paths may sum in a
different order. Timings are left out, and so are metrics added since the recording (a new
diagnostic changes no behaviour; a recorded figure that is gone or different fails).

Record again (only when a change is *meant* to alter the run) with
POPULA_RECORD_FIXTURE=1 python3 -m pytest tests/test_run_equivalence.py. When a branch
that should not change the run is merged with a main that changed the run itself, the
fixture must come from that main without the branch (its own code, this file and the
proposer helper copied in): the current one was recorded so on main just before the merge.

The figures are reproducible on one machine, not across machines: a different CPU (its SIMD
width) or torch build rounds the proposer base's floats differently and the sampled tokens
part. The fixture names the machine it was recorded on; on another machine the test checks
what it can there, that a second seeded run repeats the first, and warns that the recorded
figures were not compared.
"""

from __future__ import annotations

import json
import math
import os
import platform
import warnings
from pathlib import Path

import pytest

from conftest import make_proposer_base
from popula.cli import main
from popula.run.metrics import read_metrics

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parent / "data" / "seeded_run_metrics.json"
SETTINGS = ["population.teachers=2", "population.students=2", "tasks.types=[code_o]", "tasks.proposals_per_type=2",
            "tasks.references=1", "tasks.seed_tasks=6", "generation.rollouts=2", "generation.teacher_max_tokens=64",
            "generation.student_max_tokens=16", "evolution.every=2", "sandbox.workers=1", "lora.rank=4",
            "lora.alpha=8", "learner.lr=1e-2", "runtime.device=cpu", "runtime.dtype=float32"]
TIMINGS = {"wall_s", "phases", "verify_per_s"}


def comparable(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in TIMINGS}


def assert_same(got, want, where: str = "") -> None:
    if isinstance(want, dict):
        # a metric added since the recording is not compared; every recorded one must be there
        assert isinstance(got, dict) and set(got) >= set(want), f"{where}: keys {sorted(got)} lack {sorted(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got} != {want}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-3, abs_tol=1e-6), \
            f"{where}: {got} != {want}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def machine() -> dict[str, str]:
    """What decides the run's float rounding: CPU model and SIMD level, torch build."""
    import torch

    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                 platform.processor())
    return {"cpu": model, "arch": platform.machine(), "simd": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__}


@pytest.fixture(scope="module")
def proposer(tmp_path_factory) -> Path:
    return make_proposer_base(tmp_path_factory.mktemp("proposer"))


def seeded_run(proposer: Path, out: Path, *extra: str) -> list[dict]:
    sets = [f"--set={s}" for s in [f"base_model={proposer}", *SETTINGS, *extra]]
    assert main(["run", "configs/tiny-cpu.yaml", "--out", str(out), "--steps", "3", "--seed", "0", *sets]) == 0
    return [comparable(r) for r in read_metrics(out / "metrics.jsonl")]


def test_a_seeded_three_step_run_gives_the_recorded_metrics(proposer, tmp_path, one_torch_thread):
    rows = seeded_run(proposer, tmp_path / "run")
    if os.environ.get("POPULA_RECORD_FIXTURE") or not FIXTURE.exists():
        FIXTURE.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1) + "\n")
        pytest.skip(f"recorded {FIXTURE}")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert any(r["valid_rate"] > 0 for r in rows), "the run must exercise the students"
    recorded, here = json.loads(FIXTURE.read_text()), machine()
    if recorded["machine"] != here:
        warnings.warn(f"{FIXTURE.name} was recorded on {recorded['machine']}, this is {here}: "
                      "the recorded figures were not compared, only this machine's reproducibility")
        assert_same(seeded_run(proposer, tmp_path / "again"), rows, "second run")
        return
    assert_same(rows, recorded["rows"], "metrics")


def test_demonstrations_change_what_the_students_learn_not_how_a_step_is_played(proposer, tmp_path, one_torch_thread):
    """`learner.student_demonstrations`: the first step plays as without them (they are built after
    the judging and touch no reward, solve rate or rating); they are counted, and trained at the
    learner's own log-probs they leave the sampler/learner gap at rounding. The students answer at
    a temperature that leaves their groups unsolved; the teachers propose as the run does."""
    wild = ("generation.temperature=50", "generation.teacher_temperature=0.8")
    plain = seeded_run(proposer, tmp_path / "plain", *wild)
    shown = seeded_run(proposer, tmp_path / "shown", *wild, "learner.student_demonstrations=true")
    played = ("valid_rate", "solve_rate", "teacher_reward_mean", "student_reward_mean", "signal_groups", "league")
    assert {k: shown[0][k] for k in played} == {k: plain[0][k] for k in played}
    assert all(r["demonstrations"] == 0 for r in plain)
    assert sum(r["demonstrations"] for r in shown) > 0
    assert all(r["logprob_gap_max"] is None or r["logprob_gap_max"] <= 1e-4 for r in shown)
