"""How much of a self-play step's prompts vLLM's prefix cache serves (issue 38, item 1).

A step of 4 teachers + 4 students, as `population_overhead.py` plays it: each teacher proposes
one task per type (its own references in the prompt), and each task's student draws 4
rollouts (one request with n=4). The vLLM engine serves every adapter; `VLLMEngine.prefix_cache`
reads vLLM's own counters of prompt tokens looked up in the cache and found there.

Where hits can come from: a task's 4 rollouts (one prompt, one adapter: the first computes it,
the others reuse its whole KV blocks), and a prompt met again by the same adapter version.
Never across adapters: the cache is keyed by LoRA name, and a new version has a new name.
Steps 1 and 2 replay the same prompts with the same versions; before step 3 every adapter gets
a new version, so step 3 shows what a run sees, where every step brings new versions.
Only whole KV blocks are reused: 32 tokens on a CPU (the engine's default there; vLLM's own is
128), 16 on a GPU.

    python3 benchmarks/prefix_cache.py [--rollouts 4] [--steps 3]

Random weights (population_overhead's base), so the completions are noise; what is measured is
the prompts, and each phase's generate seconds (compare block sizes side by side: `--block-size`).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from population_overhead import STUDENTS, TEACHERS, TYPES, build_base, step_prompts  # noqa: E402

from popula.adapters.store import AdapterStore  # noqa: E402
from popula.engines import create_engine  # noqa: E402
from popula.engines.base import GenerationRequest  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.tasks.generator import generate_tasks  # noqa: E402


def new_versions(store: AdapterStore, names: list[str], seed: int) -> None:
    """A new version of every adapter (B moved off zero, as an update would)."""
    g = torch.Generator().manual_seed(seed)
    for name in names:
        state = store.load(store.latest(name)).state_dict
        store.save(name, {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in state.items()})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollouts", type=int, default=4, help="student rollouts per task (one request, n of them)")
    ap.add_argument("--steps", type=int, default=3, help="steps; every adapter gets a new version before the last")
    ap.add_argument("--base", default=None, help="a base model directory instead of the random one (its tokenizer "
                                                 "encodes the same compact-format prompts)")
    ap.add_argument("--block-size", type=int, default=None, help="vLLM KV block size (default: the engine's, 32 on a CPU)")
    args = ap.parse_args()
    teachers, students = [f"T{i}" for i in range(TEACHERS)], [f"S{i}" for i in range(STUDENTS)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tasks = generate_tasks(len(TYPES) * TEACHERS + 12, seed=7, types=TYPES, namespace="bench", workers=2)
        refs_pool, tasks = tasks[:12], tasks[12:]
        base = Path(args.base).expanduser() if args.base else build_base(root / "base", refs_pool + tasks)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(base))
        bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        encode = lambda text: bos + tokenizer(text, add_special_tokens=False)["input_ids"]
        store = AdapterStore(root / "adapters", base, rank=8, alpha=16.0, seed=0)
        for name in teachers + students:
            store.create(name)
        new_versions(store, teachers + students, seed=0)
        engine = create_engine("vllm", base, max_adapters=len(teachers + students), max_rank=8, seed=0,
                               dtype=torch.float32, max_model_len=1024, kv_cache_gib=1.0,
                               vllm_kwargs={"block_size": args.block_size} if args.block_size else None)
        block = engine.kv_block_size
        plan, t_prompts, s_prompts = step_prompts(teachers, students, tasks, refs_pool, 1, encode)
        try:
            for step in range(1, args.steps + 1):
                if step == args.steps and step > 1:
                    new_versions(store, teachers + students, seed=step)
                for phase, requests in (
                        ("teachers", [GenerationRequest(ids, adapter=store.latest(t), n=1, max_tokens=64, seed=i)
                                      for i, ((t, _, _, _), ids) in enumerate(zip(plan, t_prompts))]),
                        ("students", [GenerationRequest(ids, adapter=store.latest(s), n=args.rollouts, max_tokens=32,
                                                        seed=100 + i)
                                      for i, ((_, s, _, _), ids) in enumerate(zip(plan, s_prompts))])):
                    before, t0 = engine.prefix_cache(), time.perf_counter()
                    engine.generate(requests)
                    seconds, got = time.perf_counter() - t0, engine.prefix_cache() - before
                    rows.append({"step": step, "phase": phase, "new_versions": step == args.steps and step > 1,
                                 "prompt_tokens": got.queries, "hits": got.hits, "hit_rate": round(got.hit_rate, 4),
                                 "generate_s": round(seconds, 3),
                                 "prompt_len_mean": round(sum(len(r.prompt_ids) for r in requests) / len(requests), 1)})
        finally:
            engine.close()
    print(f"\nvLLM prefix cache over a self-play step, {TEACHERS} teachers + {STUDENTS} students, "
          f"{args.rollouts} rollouts a task, block {block} tokens")
    print(f"{'step':>4} {'phase':<9} {'versions':<9} {'prompt len':>10} {'looked up':>10} {'hits':>7} {'hit rate':>9}"
          f" {'generate s':>11}")
    for r in rows:
        print(f"{r['step']:>4} {r['phase']:<9} {'new' if r['new_versions'] or r['step'] == 1 else 'same':<9} "
              f"{r['prompt_len_mean']:>10} {r['prompt_tokens']:>10} {r['hits']:>7} {r['hit_rate']:>9.1%}"
              f" {r['generate_s']:>11.2f}")
    print(json.dumps({"block_tokens": block, "rollouts": args.rollouts, "rows": rows}))
    return 0


if __name__ == "__main__":
    run_script(main)
