"""How long each evolution operator takes to make one child of a 1.5B-model-sized adapter.

Adapter set shaped like a rank-16 LoRA on every attention and MLP projection of
Qwen2.5-1.5B: 28 layers x {q, k, v, o, gate, up, down}, hidden 1536, intermediate 8960,
k/v output 256 (grouped-query attention), fp32. Parents look trained: A is Kaiming-scaled,
B small and non-zero. Each operator is timed over several children after one warm-up;
the median wall time is the headline, with the minimum and the process CPU time beside
it: on a shared machine wall time includes waiting for a core, CPU time does not.
Issue 7 requires every operator under 500 ms per child.

Threads: the operators' work is hundreds of small per-module products and r x r
decompositions, which gain little from intra-op threads; on a 2-core machine shared
with other jobs, OpenMP threads that spin-wait for a busy core made children several
times slower (docs/results/design-figures.md § Evolution operators and threads). So the default is 1 thread;
`--threads N` measures others.

    python3 benchmarks/evolution_ops.py [--repeats N] [--threads T]

Last line: {"ms_per_child": {op: ms}, "ms_min": {...}, "cpu_ms_per_child": {...},
"limit_ms": 500, "all_under_limit": bool, "threads": T, "load_avg_1m": x, ...}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evolution import OPERATORS  # noqa: E402
from popula.exits import run_script  # noqa: E402

HIDDEN, INTERMEDIATE, KV, LAYERS, RANK = 1536, 8960, 256, 28, 16
LIMIT_MS = 500.0
SHAPES = {  # module: (in, out)
    "self_attn.q_proj": (HIDDEN, HIDDEN),
    "self_attn.k_proj": (HIDDEN, KV),
    "self_attn.v_proj": (HIDDEN, KV),
    "self_attn.o_proj": (HIDDEN, HIDDEN),
    "mlp.gate_proj": (HIDDEN, INTERMEDIATE),
    "mlp.up_proj": (HIDDEN, INTERMEDIATE),
    "mlp.down_proj": (INTERMEDIATE, HIDDEN),
}


def adapter(seed: int) -> dict[str, torch.Tensor]:
    """A trained-looking PEFT state dict for the whole 1.5B-sized model."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for layer in range(LAYERS):
        for module, (inp, out) in SHAPES.items():
            prefix = f"base_model.model.model.layers.{layer}.{module}"
            state[f"{prefix}.lora_A.weight"] = torch.randn(RANK, inp, generator=g) / inp**0.5
            state[f"{prefix}.lora_B.weight"] = torch.randn(out, RANK, generator=g) * 1e-3
    return state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="children timed per operator (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, see above)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    parents = [adapter(1), adapter(2)]
    n_params = sum(t.numel() for t in parents[0].values())
    ms, ms_min, cpu_ms = {}, {}, {}
    load_before = os.getloadavg()[0]
    print(f"adapter: {LAYERS} layers x {len(SHAPES)} modules, rank {RANK}, {n_params / 1e6:.1f} M params fp32; "
          f"torch threads {torch.get_num_threads()} of {os.cpu_count()} cores; load average {load_before:.1f}")
    print(f"{'operator':<12} {'kind':<10} {'median ms':>10} {'min ms':>8} {'cpu ms':>8}  under {LIMIT_MS:.0f} ms")
    for name, spec in OPERATORS.items():
        inputs = parents[: spec.n_parents]
        spec.apply(inputs, seed=0)  # warm-up: first-call allocations and kernel selection
        walls, cpus = [], []
        for seed in range(args.repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            spec.apply(inputs, seed=seed)
            walls.append((time.perf_counter() - start) * 1000)
            cpus.append((time.process_time() - cpu_start) * 1000)
        ms[name], ms_min[name] = round(statistics.median(walls), 1), round(min(walls), 1)
        cpu_ms[name] = round(statistics.median(cpus), 1)
        verdict = "yes" if ms[name] < LIMIT_MS else "NO"
        print(f"{name:<12} {spec.kind:<10} {ms[name]:>10.1f} {ms_min[name]:>8.1f} {cpu_ms[name]:>8.1f}  {verdict}")
    load_after = os.getloadavg()[0]
    print(f"load average after: {load_after:.1f} (above {os.cpu_count()} means the cores were shared)")
    print(json.dumps({
        "ms_per_child": ms,
        "ms_min": ms_min,
        "cpu_ms_per_child": cpu_ms,
        "limit_ms": LIMIT_MS,
        "all_under_limit": all(v < LIMIT_MS for v in ms.values()),
        "threads": torch.get_num_threads(),
        "load_avg_1m": round(max(load_before, load_after), 2),
        "modules": LAYERS * len(SHAPES),
        "rank": RANK,
        "params": n_params,
        "repeats": args.repeats,
    }))
    return 0


if __name__ == "__main__":
    run_script(main)
