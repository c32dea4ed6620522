"""One base model in memory: the torch engine generates with the learner's model and adapters.

What must hold (issue 16): generation and training use the same frozen base module and the
same adapter tensors, so the learner's update is what the next generation sees with no
adapter file read in between; an older version is still served with its own weights (from
its file); and the memory of a run holds one copy of the base, measured, not assumed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from conftest import small_llama
from popula.adapters import AdapterRef
from popula.adapters.store import AdapterStore
from popula.config import Config
from popula.engines.base import GenerationRequest
from popula.engines.torch_engine import TorchEngine
from popula.learner import Rollout
from popula.run.parts.workers import build_local

pytestmark = pytest.mark.slow
PROBE = Path(__file__).parent / "memory_probe.py"


def config(base: Path) -> Config:
    return Config.model_validate({"base_model": str(base), "population": {"teachers": 1, "students": 1},
                                  "lora": {"rank": 4, "alpha": 8}, "learner": {"lr": 5e-2},
                                  "sandbox": {"workers": 1}, "evolution": {"enabled": False}})


def request(ref: AdapterRef) -> GenerationRequest:
    return GenerationRequest(prompt_ids=[1, 5, 9, 13, 17], adapter=ref, n=4, max_tokens=12, seed=3)


def rollouts(result) -> list[Rollout]:
    return [Rollout(adapter="A", role="student", task_type="code_o", group="g", prompt_ids=result.request.prompt_ids,
                    completion_ids=s.token_ids, sampler_logprobs=s.logprobs, adapter_version=0,
                    reward=float(k % 2), temperature=1.0) for k, s in enumerate(result.samples)]


def test_the_next_generation_sees_the_learners_update_without_reading_an_adapter_file(quick_base, tmp_path,
                                                                                      one_torch_thread):
    cfg = config(quick_base)
    workers = build_local(cfg, quick_base)
    engine, learner = workers.engine, workers.learner
    try:
        assert engine.model is learner.model  # one base module, one set of adapter tensors
        store = AdapterStore(tmp_path / "adapters", quick_base, rank=4, alpha=8, target_modules=cfg.lora.target_modules)
        created = store.create("A")  # the store deletes it once v1 is saved: a copy keeps it on disk
        v0 = replace(created, path=Path(shutil.copytree(created.path, tmp_path / "v0-copy")))
        learner.add_adapter("A", store.load(v0).state_dict)
        workers.bind(v0, "A")
        before = engine.generate([request(v0)])[0]
        learner.step(rollouts(before))
        v1 = store.save("A", learner.adapter_state("A"))
        workers.bind(v1, "A")
        kept = shutil.copytree(v1.path, tmp_path / "v1-copy")
        shutil.rmtree(v1.path)  # were the engine to read the new version's files, it would fail here

        after = engine.generate([request(v1)])[0]
        assert engine.files_read == 0
        # exactly what an engine of its own makes of the saved update
        alone = TorchEngine(quick_base, max_adapters=1, max_rank=4, target_modules=cfg.lora.target_modules)
        reference = alone.generate([request(AdapterRef("A", 1, 99, kept))])[0]
        assert [s.token_ids for s in after.samples] == [s.token_ids for s in reference.samples]
        for got, want in zip(after.samples, reference.samples):
            torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(want.logprobs), atol=1e-5, rtol=0)
        assert [s.logprobs for s in after.samples] != [s.logprobs for s in before.samples]  # the update changed it

        # the old version is still served with its own weights: from its file, into a spare slot
        again = engine.generate([request(v0)])[0]
        assert engine.files_read == 1
        assert [s.token_ids for s in again.samples] == [s.token_ids for s in before.samples]
        for got, want in zip(again.samples, before.samples):
            torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(want.logprobs), atol=1e-5, rtol=0)
    finally:
        workers.close()


def make_base(path: Path, hidden: int, layers: int) -> Path:
    """A random Llama of the given width and depth with a small tokenizer (saved, not trained)."""
    from popula.model.tokenizer import train_tokenizer

    tok = train_tokenizer(["def f(x):\n    return x + 1\n"] * 20, 300, max_length=256)
    small_llama(tok, 256, hidden=hidden, intermediate=3 * hidden, layers=layers, heads=hidden // 64,
                kv_heads=hidden // 64, tie_word_embeddings=False).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def probes(*runs: tuple[Path, str]) -> list[dict]:
    """Run memory_probe.py once per (base, mode), all at once: each measures its own process's
    peak, so they need not wait for one another (one torch thread each, for 2 cores)."""
    # A script's sys.path starts at its own directory: the checkout goes on PYTHONPATH, so the
    # probe imports this tree's popula whether or not (or wherever) the package is installed.
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(PROBE.parent.parent), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, str(PROBE), str(base), mode], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for base, mode in runs]
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:  # as subprocess.run does on a timeout: no probe outlives the test
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc peak-RSS accounting")
def test_a_runs_peak_memory_holds_one_copy_of_the_base(tmp_path):
    """Peak resident memory of a process through build + generation + learner step, minus
    what the same process needs with a negligible base (libraries, allocator, Python), is
    about one base; building engine and learner separately (the old way) costs two."""
    big = make_base(tmp_path / "big", hidden=1024, layers=4)
    small = make_base(tmp_path / "small", hidden=64, layers=1)
    small_run, shared, separate = probes((small, "shared"), (big, "shared"), (big, "separate"))
    overhead = small_run["run_peak"] - small_run["before"]
    weights = shared["weights"]
    one = (shared["run_peak"] - shared["before"] - overhead) / weights
    two = (separate["run_peak"] - separate["before"] - overhead) / weights
    print(f"base {weights / 2**20:.0f} MiB: shared stack {one:.2f} copies, separate engine and learner {two:.2f}")
    assert one < 1.5, f"the shared stack holds {one:.2f} copies of the base"
    assert two > 1.7, f"the probe should see a second copy when engine and learner load their own ({two:.2f})"
