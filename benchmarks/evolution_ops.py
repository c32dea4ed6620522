"""How long each evolution operator takes to make one child of a 1.5B-model-sized adapter.

Adapter set shaped like a rank-16 LoRA on every attention and MLP projection of
Qwen2.5-1.5B: 28 layers x {q, k, v, o, gate, up, down}, hidden 1536, intermediate 8960,
k/v output 256 (grouped-query attention), fp32. Parents look trained: A is Kaiming-scaled,
B small and non-zero. Each operator is timed over several children after one warm-up,
and the median is reported (the machine may be shared; the min is shown too).
Issue 7 requires every operator under 500 ms per child.

    python3 benchmarks/evolution_ops.py [--repeats N] [--threads T]

Last line: {"ms_per_child": {op: ms}, "ms_min": {...}, "limit_ms": 500, "all_under_limit": bool, ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evolution import OPERATORS  # noqa: E402

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
    parser.add_argument("--repeats", type=int, default=5, help="children timed per operator")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    parents = [adapter(1), adapter(2)]
    n_params = sum(t.numel() for t in parents[0].values())
    ms, ms_min = {}, {}
    print(f"adapter: {LAYERS} layers x {len(SHAPES)} modules, rank {RANK}, {n_params / 1e6:.1f} M params fp32; "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'operator':<12} {'kind':<10} {'median ms':>10} {'min ms':>8}  under {LIMIT_MS:.0f} ms")
    for name, spec in OPERATORS.items():
        inputs = parents[: spec.n_parents]
        spec.apply(inputs, seed=0)  # warm-up: first-call allocations and kernel selection
        times = []
        for seed in range(args.repeats):
            start = time.perf_counter()
            spec.apply(inputs, seed=seed)
            times.append((time.perf_counter() - start) * 1000)
        ms[name], ms_min[name] = round(statistics.median(times), 1), round(min(times), 1)
        print(f"{name:<12} {spec.kind:<10} {ms[name]:>10.1f} {ms_min[name]:>8.1f}  {'yes' if ms[name] < LIMIT_MS else 'NO'}")
    print(json.dumps({
        "ms_per_child": ms,
        "ms_min": ms_min,
        "limit_ms": LIMIT_MS,
        "all_under_limit": all(v < LIMIT_MS for v in ms.values()),
        "threads": torch.get_num_threads(),
        "modules": LAYERS * len(SHAPES),
        "rank": RANK,
        "params": n_params,
        "repeats": args.repeats,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
