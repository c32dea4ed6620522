"""Peak memory of one process that builds a run's stack and does a step's work (for tests).

Run as `python3 tests/memory_probe.py BASE_DIR shared|separate`; prints one JSON object, in
bytes: `before`, the resident set after imports; `load_peak`, the resident peak while the
stack is built (loading a safetensors file maps it, so a load briefly holds the file's pages
as well as the weights); `run_peak`, the resident peak from the end of loading through a
generation and a learner step (Linux VmHWM, reset in between through /proc/self/clear_refs);
and `weights`, the base's weight file size.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def status(key: str) -> int:
    """A /proc/self/status figure (VmRSS, VmHWM) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set


def main(base: str, mode: str) -> None:
    import torch

    from popula.config import Config
    from popula.engines.base import GenerationRequest
    from popula.learner import Rollout
    from popula.run.parts.builders import build_engine, build_learner, runtime_of
    from popula.run.parts.workers import build_local

    torch.set_num_threads(1)
    cfg = Config.model_validate({"base_model": base, "population": {"teachers": 1, "students": 1},
                                 "lora": {"rank": 4}, "sandbox": {"workers": 1}, "evolution": {"enabled": False}})
    weights = sum(p.stat().st_size for p in Path(base).glob("*.safetensors"))
    import gc

    gc.collect()
    reset_peak()
    before = status("VmRSS")
    if mode == "shared":
        workers = build_local(cfg, base)
        engine, learner = workers.engine, workers.learner
    else:
        rt = runtime_of(cfg)
        learner = build_learner(cfg, base, rt, max_adapters=2)
        engine = build_engine(cfg, base, rt, max_adapters=3)
    gc.collect()
    load_peak = status("VmHWM")
    reset_peak()
    learner.add_adapter("T0")
    out = engine.generate([GenerationRequest(prompt_ids=[1, 2, 3, 4], n=2, max_tokens=8, seed=1)])
    sample = out[0].samples[0]
    learner.step([Rollout(adapter="T0", role="student", task_type="code_o", group="g", prompt_ids=[1, 2, 3, 4],
                          completion_ids=sample.token_ids, sampler_logprobs=sample.logprobs, adapter_version=0,
                          reward=1.0, temperature=1.0),
                  Rollout(adapter="T0", role="student", task_type="code_o", group="g", prompt_ids=[1, 2, 3, 4],
                          completion_ids=out[0].samples[1].token_ids, sampler_logprobs=out[0].samples[1].logprobs,
                          adapter_version=0, reward=0.0, temperature=1.0)])
    print(json.dumps({"mode": mode, "before": before, "load_peak": load_peak, "run_peak": status("VmHWM"),
                      "weights": weights}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
