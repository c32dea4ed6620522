"""Starting the vLLM engine on a CPU: the scheduler in the caller's process, or in one of its own.

Why: every `popula run --engine vllm` and `popula eval --engine vllm` starts an engine, and on
a CPU vLLM's default spawns two processes (engine core and model worker), each of which
imports vLLM again. `popula.engines.vllm_engine.in_process_scheduler` keeps the engine core
in the caller and spawns the worker only. Each start here is a fresh Python process (as a
user's command is) that builds the engine on a small random Llama, generates one batch and
closes it; the two ways alternate, so a busy machine slows both alike, and must produce the
same tokens.

    python3 benchmarks/vllm_start.py [--rounds 3]

Reports per way the median seconds of the engine's start, and of the whole command.
Last line: {"start_s_popula", "start_s_vllm_default", "command_s_popula",
"command_s_vllm_default", "speedup_start", "rounds"}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from popula.exits import run_script  # noqa: E402

# The environment of each way: vLLM's own default is restored by asking for its multiprocessing.
WAYS = {"popula": {}, "vllm_default": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}}


def child(base: Path) -> None:
    """Start the engine on `base`, generate greedily, close; print the seconds and the tokens."""
    import torch

    from popula.engines import create_engine
    from popula.engines.base import GenerationRequest

    start = time.perf_counter()
    engine = create_engine("vllm", base, max_adapters=2, max_rank=8, seed=0, dtype=torch.float32,
                           max_model_len=256, kv_cache_gib=0.25)
    started = time.perf_counter() - start
    results = engine.generate([GenerationRequest(prompt_ids=[1, 5, 9, 13], adapter=None, temperature=0.0,
                                                 max_tokens=8)])
    engine.close()
    print(json.dumps({"start_s": started, "tokens": results[0].samples[0].token_ids}))


def measure(base: Path, way: str) -> dict:
    env = os.environ | WAYS[way]
    began = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", str(base)], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"vllm_start: the {way} start failed: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"command_s": time.perf_counter() - began}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="starts each way, alternating")
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child)
        return 0
    from population_overhead import TYPES, build_base

    from popula.tasks.generator import generate_tasks

    with tempfile.TemporaryDirectory() as tmp:
        base = build_base(Path(tmp) / "base", generate_tasks(12, seed=7, types=TYPES, namespace="bench", workers=1))
        runs: dict[str, list[dict]] = {way: [] for way in WAYS}
        for _ in range(args.rounds):
            for way in WAYS:
                runs[way].append(measure(base, way))
    tokens = {json.dumps(r["tokens"]) for rs in runs.values() for r in rs}
    if len(tokens) != 1:
        raise SystemExit(f"vllm_start: the two ways generated different tokens: {sorted(tokens)}")
    med = {way: {k: statistics.median(r[k] for r in rs) for k in ("start_s", "command_s")} for way, rs in runs.items()}
    print(f"{'way':<14}{'engine start s':>16}{'whole command s':>17}")
    for way, m in med.items():
        print(f"{way:<14}{m['start_s']:>16.1f}{m['command_s']:>17.1f}")
    speedup = med["vllm_default"]["start_s"] / med["popula"]["start_s"]
    print(f"engine start {speedup:.2f}x faster with the scheduler in the caller ({args.rounds} rounds, medians)")
    print(json.dumps({"start_s_popula": round(med["popula"]["start_s"], 2),
                      "start_s_vllm_default": round(med["vllm_default"]["start_s"], 2),
                      "command_s_popula": round(med["popula"]["command_s"], 2),
                      "command_s_vllm_default": round(med["vllm_default"]["command_s"], 2),
                      "speedup_start": round(speedup, 2), "rounds": args.rounds}))
    return 0


if __name__ == "__main__":
    run_script(main)
