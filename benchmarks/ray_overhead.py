"""Ray overhead: the population step of population_overhead.py, in one process vs on a local Ray cluster.

`popula run --ray` moves the engine, sandbox and learner into Ray actors; the step does the
same work, plus what Ray costs: pickling requests, samples, verdicts, rollouts and weights
through the object store, scheduling each call, and shipping every new adapter version's
files to the engine actor. This benchmark runs the very step `population_overhead.py` times
(its `play_step`, on its random ~4M-parameter base with generated stand-in tasks) three ways,
interleaved round by round so a busy shared machine slows all alike:

- single: one adapter in both roles, in this process;
- population: 4 teachers + 4 students, in this process;
- ray: the same population, its engine, sandbox and learner as Ray actors (proxies from
  `popula.run.parts.ray.workers`) on a local cluster this script starts.

Ray's share is measured, not inferred: each proxy records per call the wall time from
submit to result and the time the actor itself worked, so `call - busy` is serialisation,
transfer and scheduling, and the engine proxy also records the time and bytes of shipping
adapters. It is written as a separate script (not a `--ray` flag of population_overhead.py)
because that file was being changed by its owner at the time.

    python3 benchmarks/ray_overhead.py [--rounds 3] [--threads 1]   (= population_overhead.py --ray)

Last line: {"step_s_single", "step_s_population", "overhead", "step_s_local", "step_s_ray",
"ray_overhead", "ray_share_s", "ray_share_of_step", ...}. On a shared machine the wall
ratio swings with other jobs; `ray_share_of_step` (measured Ray time / Ray step) does not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import population_overhead as po  # noqa: E402

from popula.adapters.store import AdapterStore  # noqa: E402
from popula.config import LearnerConfig, LoraConfig, load_config  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.run.parts.ray.workers import build_ray  # noqa: E402
from popula.sandbox import Sandbox  # noqa: E402
from popula.tasks.generator import generate_tasks  # noqa: E402

PROXIES = ("engine", "sandbox", "learner")


def ray_side(base: Path, root: Path, lora: LoraConfig, cfg: LearnerConfig, threads: int):
    """The population side with Ray actors; returns it and its sandbox proxy."""
    teachers, students = [f"T{i}" for i in range(po.TEACHERS)], [f"S{i}" for i in range(po.STUDENTS)]
    config = load_config(None, [
        f"base_model={base}", f"lora.rank={lora.rank}", f"lora.alpha={lora.alpha}",
        *(f"learner.{key}={json.dumps(value)}" for key, value in cfg.model_dump().items()),
        "sandbox.workers=2", "ray.enabled=true", "ray.engine_cpus=0.5", "ray.learner_cpus=0.5",
        "ray.sandbox_cpus=0.5", f"ray.torch_threads={threads}"])
    engine, sandbox, learner, _reservation = build_ray(config, base, po.TEACHERS + po.STUDENTS)
    store = AdapterStore(root / "ray", base, rank=lora.rank, alpha=lora.alpha, target_modules=lora.target_modules)
    for a in sorted(teachers + students):
        learner.add_adapter(a, store.load(store.create(a)).state_dict)
    return po.Side("ray", teachers, students, engine, store, learner), sandbox, learner


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    po.add_step_options(ap)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    import ray
    from transformers import AutoTokenizer

    ray.init(num_cpus=2, object_store_memory=200 << 20, include_dashboard=False, log_to_driver=False)
    lora, cfg = LoraConfig(rank=8, alpha=16.0), po.LEARNER
    results: dict[str, list[dict[str, float]]] = {"single": [], "population": [], "ray": []}
    shares: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workers=2) as sandbox:
        root = Path(tmp)
        n_tasks = len(po.TYPES) * args.proposals * po.TEACHERS
        tasks = generate_tasks(n_tasks + 12, seed=7, types=po.TYPES, namespace="bench", workers=2)
        refs_pool, tasks = tasks[:12], tasks[12:]
        base = po.build_base(root / "base", refs_pool + tasks)
        tokenizer = AutoTokenizer.from_pretrained(str(base))
        single = po.make_side("single", ["A0"] * po.TEACHERS, ["A0"] * po.STUDENTS, base, root, lora, cfg)
        population = po.make_side("population", [f"T{i}" for i in range(po.TEACHERS)],
                                  [f"S{i}" for i in range(po.STUDENTS)], base, root, lora, cfg)
        remote, remote_sandbox, remote_learner = ray_side(base, root, lora, cfg, args.threads)
        proxies = {"engine": remote.engine, "sandbox": remote_sandbox, "learner": remote_learner}
        for rnd in range(args.rounds + 1):
            for side, box in ((single, sandbox), (population, sandbox), (remote, remote_sandbox)):
                before = {k: p.times.as_dict() for k, p in proxies.items()}
                r = po.play_step(side, rnd, tasks, refs_pool, tokenizer, box, args)
                if rnd > 0:
                    results[side.name].append(r)
                    if side is remote:
                        shares.append({f"{k}_{f}": p.times.as_dict()[f] - before[k][f] for k, p in proxies.items()
                                       for f in ("calls", "call_s", "busy_s", "busy_cpu_s", "overhead_s", "ship_s",
                                                  "shipped_bytes")})
                print(f"round {rnd}{' (warm-up)' if rnd == 0 else ''} {side.name:>10}: "
                      + "  ".join(f"{k} {v:.3f}" for k, v in r.items() if k.endswith("_s")), flush=True)
        for side in (single, population, remote):
            side.engine.close()
        remote_sandbox.close()
        remote_learner.close()
    ray.shutdown()

    med = {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in results.items()}
    share = {k: statistics.median(s[k] for s in shares) for k in shares[0]}
    s, p, q = med["single"], med["population"], med["ray"]
    ray_share = sum(share[f"{k}_overhead_s"] for k in PROXIES) + share["engine_ship_s"]
    print()
    print(f"{po.TEACHERS}T+{po.STUDENTS}S population step, median of {args.rounds} rounds; "
          f"ray: local cluster, 2 CPUs, actors at 0.5 CPU, torch threads {args.threads}")
    print(f"{'phase':<12}{'single s':>10}{'local s':>10}{'ray s':>10}{'ray/local':>11}")
    for phase in ("generate_s", "verify_s", "update_s", "step_s"):
        print(f"{phase:<12}{s[phase]:>10.3f}{p[phase]:>10.3f}{q[phase]:>10.3f}{q[phase] / p[phase]:>11.3f}")
    print()
    print("Ray's share per step (call wall time minus the actor's own working time):")
    print(f"{'proxy':<10}{'calls':>7}{'call s':>9}{'busy s':>9}{'busy cpu s':>12}{'ray s':>8}")
    for k in PROXIES:
        print(f"{k:<10}{share[f'{k}_calls']:>7.0f}{share[f'{k}_call_s']:>9.3f}{share[f'{k}_busy_s']:>9.3f}"
              f"{share[f'{k}_busy_cpu_s']:>12.3f}{share[f'{k}_overhead_s']:>8.3f}")
    print(f"CPU seconds of the work itself: generate local {p['generate_cpu_s']:.3f} vs engine actor "
          f"{share['engine_busy_cpu_s']:.3f}; update local {p['update_cpu_s']:.3f} vs learner actor "
          f"{share['learner_busy_cpu_s']:.3f} (wall beyond CPU is waiting for a core)")
    print(f"adapter shipping: {share['engine_ship_s']:.3f} s, {share['engine_shipped_bytes'] / 1e6:.2f} MB per step")
    print(f"total Ray share {ray_share:.3f} s of a {q['step_s']:.3f} s step; "
          f"step difference ray - local {q['step_s'] - p['step_s']:+.3f} s")
    figures = {
        "step_s_single": round(s["step_s"], 4),
        "step_s_population": round(p["step_s"], 4),
        "overhead": round(p["step_s"] / s["step_s"], 4),
        "step_s_local": round(p["step_s"], 4),
        "step_s_ray": round(q["step_s"], 4),
        "ray_overhead": round(q["step_s"] / p["step_s"], 4),
        "ray_share_s": round(ray_share, 4),
        "ray_share_of_step": round(ray_share / q["step_s"], 4),
        **{f"ray_{k}": round(v, 4) for k, v in share.items()},
        **{f"{phase}_ray": round(q[phase], 4) for phase in ("generate_s", "verify_s", "update_s")},
        **{f"{phase}_local": round(p[phase], 4) for phase in ("generate_s", "verify_s", "update_s",
                                                                "generate_cpu_s", "update_cpu_s")},
        "rounds": args.rounds,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    run_script(main)
