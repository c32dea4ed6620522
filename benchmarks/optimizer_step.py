"""The optimiser's share of a learn step: one AdamW per adapter against the population's one.

What it answers (issue 38, item 4): LoRA tensors are small and many (two per target module
per layer per adapter), so stepping one optimiser per adapter costs launches, not
arithmetic, and the cost grows with the population. `before` is the learner's old loop (per
adapter: `clip_grad_norm_`, then its own foreach AdamW's `step`); `after` is
`popula.learner.optimizer.PopulationOptimizer` (one foreach norm over every adapter, one
scale per adapter, one foreach AdamW). Both get the same gradients and must end with the same
weights (checked, bit for bit).

The tensors have the shapes of rank-r LoRA on a model's attention and MLP projections,
built from its architecture alone (no weights): `tiny` (the tiny base), `smollm2` (SmolLM2-135M:
30 layers, hidden 576, MLP 1536, 3 KV heads of 64) or `qwen1.5b` (Qwen2.5-Coder-1.5B: 28 layers,
hidden 1536, MLP 8960, 2 KV heads of 128).

    python3 benchmarks/optimizer_step.py [--model smollm2] [--adapters 1 4 8] [--rank 8] [--repeats 20]
        [--device auto]

Per model and population size: operator calls per step (torch profiler: top-level `aten::`
calls on a CPU, where a foreach call is one however many tensors it loops over, calls that
launch nothing on a GPU left out; CUDA kernels on a GPU) and the median seconds of a step. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.exits import run_script  # noqa: E402
from popula.learner.optimizer import PopulationOptimizer  # noqa: E402

# (layers, hidden, mlp, kv width): the in/out sizes of q,k,v,o,gate,up,down
MODELS = {"tiny": (4, 128, 512, 128), "smollm2": (30, 576, 1536, 192), "qwen1.5b": (28, 1536, 8960, 256)}
LR, WD, CLIP = 2e-4, 0.0, 1.0
HOST_ONLY = {"aten::item", "aten::to", "aten::lift_fresh", "aten::detach_", "aten::detach", "aten::resolve_conj",
             "aten::resolve_neg", "aten::empty"}  # same-device moves, host scalar reads, bookkeeping


def lora_shapes(model: str, rank: int) -> list[tuple[int, int]]:
    layers, hidden, mlp, kv = MODELS[model]
    linears = [(hidden, hidden), (hidden, kv), (hidden, kv), (hidden, hidden), (hidden, mlp), (hidden, mlp), (mlp, hidden)]
    return [shape for _ in range(layers) for n_in, n_out in linears for shape in ((rank, n_in), (n_out, rank))]


def population(shapes: list[tuple[int, int]], adapters: int, device: str) -> list[list[nn.Parameter]]:
    g = torch.Generator().manual_seed(0)
    return [[nn.Parameter((torch.randn(s, generator=g) * 0.01).to(device)) for s in shapes] for _ in range(adapters)]


def set_grads(params: list[list[nn.Parameter]], step: int) -> None:
    g = torch.Generator().manual_seed(step)
    for ps in params:
        for p in ps:
            p.grad = (torch.randn(p.shape, generator=g) * 0.1).to(p.device)


def before_step(params: list[list[nn.Parameter]], optims: list[torch.optim.AdamW]) -> None:
    for ps, optim in zip(params, optims):
        torch.nn.utils.clip_grad_norm_(ps, CLIP)
        optim.step()


def after_step(params: list[list[nn.Parameter]], optim: PopulationOptimizer) -> None:
    optim.clip_grad_norms({str(i): ps for i, ps in enumerate(params)}, CLIP)
    optim.step()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def count_ops(step, device: str) -> int:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        step()
        sync(device)
    if device.startswith("cuda"):
        return sum(e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA)
    # On a CPU a foreach op loops over its tensors inside one call; the top-level aten calls are
    # what would each launch kernels on a GPU (a foreach call there: one launch per chunk of tensors).
    # Calls that launch nothing are left out (HOST_ONLY): AdamW reading each step count on the host,
    # clip_grad_norm_ moving each norm to the device it is already on.
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and e.name not in HOST_ONLY
               and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))


def measure(model: str, adapters: int, rank: int, repeats: int, device: str) -> dict:
    shapes = lora_shapes(model, rank)
    old, new = population(shapes, adapters, device), population(shapes, adapters, device)
    optims = [torch.optim.AdamW(ps, lr=LR, weight_decay=WD, foreach=True) for ps in old]
    mine = PopulationOptimizer([p for ps in new for p in ps], lr=LR, weight_decay=WD)
    steps = {"before": lambda: before_step(old, optims), "after": lambda: after_step(new, mine)}
    times: dict[str, list[float]] = {"before": [], "after": []}
    ops = {}
    for k in range(repeats + 2):
        for side, params in (("before", old), ("after", new)):
            set_grads(params, k)
            sync(device)
            if k == 1:  # after one warm-up step
                ops[side] = count_ops(steps[side], device)
                continue
            t0 = time.perf_counter()
            steps[side]()
            sync(device)
            if k > 1:
                times[side].append(time.perf_counter() - t0)
    same = all(torch.equal(a, b) for ps, qs in zip(old, new) for a, b in zip(ps, qs))
    med = {side: statistics.median(v) for side, v in times.items()}
    return {"model": model, "adapters": adapters, "tensors": len(shapes) * adapters,
            "params_m": round(sum(math.prod(s) for s in shapes) * adapters / 1e6, 2),
            "ops_before": ops["before"], "ops_after": ops["after"],
            "ms_before": round(med["before"] * 1e3, 3), "ms_after": round(med["after"] * 1e3, 3),
            "speedup": round(med["before"] / med["after"], 2), "same_weights": same}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", choices=sorted(MODELS))
    ap.add_argument("--adapters", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--device", default="auto", help="auto (cuda when there is one) | cpu | cuda")
    args = ap.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    rows = [measure(args.model, n, args.rank, args.repeats, device) for n in args.adapters]
    unit = "CUDA kernels" if device.startswith("cuda") else "aten calls"
    print(f"optimiser step (clip + AdamW), {args.model} LoRA rank {args.rank}, {device}, median of {args.repeats}")
    print(f"{'adapters':>8}{'tensors':>9}{'params M':>10}{unit + ' before':>20}{'after':>8}{'ms before':>11}"
          f"{'ms after':>10}{'speedup':>9}{'same':>6}")
    for r in rows:
        print(f"{r['adapters']:>8}{r['tensors']:>9}{r['params_m']:>10}{r['ops_before']:>20}{r['ops_after']:>8}"
              f"{r['ms_before']:>11}{r['ms_after']:>10}{r['speedup']:>9}{str(r['same_weights']):>6}")
    print(json.dumps({"device": device, "model": args.model, "rank": args.rank, "unit": unit, "rows": rows}))
    return 0 if all(r["same_weights"] for r in rows) else 1


if __name__ == "__main__":
    run_script(main)
