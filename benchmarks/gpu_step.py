"""A population step on the runtime's device: 4 teachers + 4 students vs one adapter, per phase.

What it answers (issue 16): on the hardware a user has -- one GPU, or a CPU -- what does a
self-play step of a population cost next to a single agent doing the same work, phase by
phase, and how much memory does it hold? Both sides are built the way `popula run` builds
them (`popula.run.parts.workers`: one base in memory, the torch engine generating with the
learner's own model and adapter tensors, device and dtype from the `runtime` resolution:
bf16 on a GPU that supports it, fp32 on a CPU), and play the step of
`benchmarks/population_overhead.py`: teacher proposals and student rollouts (generate),
sandbox validation and judging (verify), one learner step over all rollouts plus a new
version of every adapter (learn; the files written in the background, as a run writes them).

Models, both from a config with random weights (no download):
- `tiny`: the tiny base's architecture (Llama, ~1M parameters; the cached tiny base itself
  with `--tiny-path`);
- `qwen1.5b`: Qwen2.5-Coder-1.5B's architecture (Qwen2: 28 layers, hidden 1536, 12 heads, 2
  KV heads, vocabulary 151936, tied embeddings), with a small BPE tokenizer for the
  compact task format (the model samples over its whole vocabulary; ids the tokenizer does
  not know decode to nothing). On a CPU it is shrunk to `--cpu-layers` layers (default 2)
  and the table says so; on a GPU it has all 28.

    python3 benchmarks/gpu_step.py [--models tiny,qwen1.5b] [--rounds 3] [--device auto] [--dtype auto]

Peak memory: on cuda, torch's peak allocated GPU memory of each side's steps (reset before
each) and the memory its model holds; on a CPU the process's resident peak (both sides live
in one process, so it is shared). Tokens/s: completion tokens generated per second of the
generate phase. Sampler/learner mismatch: the mean and largest log-prob gaps, the share of
tokens outside the PPO clip band (what a ratio to the sampler would clip) and, under the
learner's truncated importance sampling (`learner.is_cap`), the shares clipped and truncated.
The last line is one JSON object; on a machine without a GPU it says
`"gpu_figures": "not taken"`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import population_overhead  # noqa: E402
from population_overhead import STUDENTS, TEACHERS, TYPES, play_step  # noqa: E402

from popula.config import LoraConfig  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.runtime import Runtime, resolve_runtime  # noqa: E402
from popula.sandbox import Sandbox  # noqa: E402
from popula.tasks.generator import generate_tasks  # noqa: E402
from popula.tasks.prompts import CompactFormat  # noqa: E402

QWEN_CODER_1_5B = dict(  # Qwen/Qwen2.5-Coder-1.5B config.json, the numbers that shape compute and memory
    vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
    num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)


def tokenizer_for(path: Path, tasks: list) -> Any:
    from popula.model.tokenizer import train_tokenizer

    fmt = CompactFormat()
    tok = train_tokenizer([fmt.student_prompt(t) + fmt.proposal_completion(t) for t in tasks], 1024, max_length=1024)
    tok.save_pretrained(path)
    return tok


def build_model(kind: str, path: Path, tasks: list, runtime: Runtime, cpu_layers: int) -> tuple[Path, str]:
    """A random model of `kind` saved at `path` (in the runtime's dtype); returns it and a label."""
    tok = tokenizer_for(path, tasks)
    torch.manual_seed(0)
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    if kind == "tiny":
        from transformers import LlamaConfig, LlamaForCausalLM

        from popula.model.recipe import TinyRecipe

        r = TinyRecipe()
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=r.hidden_size, intermediate_size=r.intermediate_size,
                          num_hidden_layers=r.layers, num_attention_heads=r.heads, num_key_value_heads=r.heads,
                          max_position_embeddings=r.max_positions, tie_word_embeddings=True, **ids)
        model, label = LlamaForCausalLM(cfg), "tiny (tiny-base architecture, random weights)"
    elif kind == "qwen1.5b":
        from transformers import Qwen2Config, Qwen2ForCausalLM

        shape = dict(QWEN_CODER_1_5B)
        label = "Qwen2.5-Coder-1.5B architecture, random weights"
        if not runtime.on_gpu:
            shape["num_hidden_layers"] = cpu_layers
            label += f", SHRUNK to {cpu_layers} of 28 layers on CPU"
        with torch.device(runtime.device):  # random init on the GPU: on a CPU it takes a minute at 1.5B
            model = Qwen2ForCausalLM(Qwen2Config(**shape, **ids))
    else:
        raise SystemExit(f"--models: unknown model {kind!r} (tiny, qwen1.5b)")
    model.to(runtime.torch_dtype).save_pretrained(path)
    return path, label


@dataclass
class Measured:
    side: Any  # population_overhead.Side
    model_bytes: int  # memory the side's model holds (device memory on a GPU, resident set on a CPU)


def memory_now(runtime: Runtime) -> int:
    if runtime.on_gpu:
        return torch.cuda.memory_allocated(runtime.device)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def make_side(name: str, teachers: list[str], students: list[str], base: Path, root: Path,
              runtime: Runtime, checkpointing: bool = False) -> Measured:
    """population_overhead's side (built like `popula run`'s stack), and the memory it takes."""
    before = memory_now(runtime)
    cfg = population_overhead.LEARNER.model_copy(update={"activation_checkpointing": checkpointing})
    side = population_overhead.make_side(name, teachers, students, base, root, LoraConfig(rank=8, alpha=16.0),
                                         cfg, runtime)
    return Measured(side, memory_now(runtime) - before)


def peak_reset(runtime: Runtime) -> None:
    if runtime.on_gpu:
        torch.cuda.synchronize(runtime.device)
        torch.cuda.reset_peak_memory_stats(runtime.device)


def peak(runtime: Runtime) -> int:
    if runtime.on_gpu:
        torch.cuda.synchronize(runtime.device)
        return torch.cuda.max_memory_allocated(runtime.device)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def bench_model(kind: str, args: argparse.Namespace, runtime: Runtime, sandbox: Sandbox, root: Path,
                tasks: list, refs_pool: list) -> dict[str, Any]:
    from transformers import AutoTokenizer

    base, label = build_model(kind, root / f"base-{kind}", refs_pool + tasks, runtime, args.cpu_layers)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    ckpt = args.activation_checkpointing == "on"
    single_m = make_side(f"{kind}-single", ["A0"] * TEACHERS, ["A0"] * STUDENTS, base, root, runtime, ckpt)
    population_m = make_side(f"{kind}-population", [f"T{i}" for i in range(TEACHERS)],
                             [f"S{i}" for i in range(STUDENTS)], base, root, runtime, ckpt)
    single, population = single_m.side, population_m.side
    params = sum(p.numel() for p in single.learner.model.base_model.parameters() if not p.requires_grad)
    rows: dict[str, list[dict[str, float]]] = {"single": [], "population": []}
    peaks = {"single": 0, "population": 0}
    for rnd in range(args.rounds + 1):
        for side, key in ((single, "single"), (population, "population")):
            peak_reset(runtime)
            r = play_step(side, rnd, tasks, refs_pool, tokenizer, sandbox, args)
            peaks[key] = max(peaks[key], peak(runtime))
            if rnd > 0:
                rows[key].append(r)
            print(f"  {kind} round {rnd}{' (warm-up)' if rnd == 0 else ''} {key:>10}: generate {r['generate_s']:.2f}s"
                  f" verify {r['verify_s']:.2f}s learn {r['update_s']:.2f}s tokens {int(r['tokens'])}", flush=True)
    for side in (single, population):
        side.close()
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in rows.items()}
    s, p = med["single"], med["population"]
    return {
        "model": kind, "label": label, "params_m": round(params / 1e6, 1),
        **{f"{phase}_{side}": round(med[side][f"{phase}_s" if phase != "learn" else "update_s"], 4)
           for phase in ("generate", "verify", "learn") for side in ("single", "population")},
        "step_s_single": round(s["step_s"], 4), "step_s_population": round(p["step_s"], 4),
        "ratio": round(p["step_s"] / s["step_s"], 4),
        "ratio_cpu_time": round(p["step_cpu_s"] / s["step_cpu_s"], 4),
        "tokens_per_s_single": round(s["tokens"] / s["generate_s"], 1),
        "tokens_per_s_population": round(p["tokens"] / p["generate_s"], 1),
        "peak_mem_mib_single": round(peaks["single"] / 2**20, 1),
        "peak_mem_mib_population": round(peaks["population"] / 2**20, 1),
        "model_mem_mib": round(population_m.model_bytes / 2**20, 1),
        "logprob_gap": round(p["logprob_gap"], 8),
        # sampler/learner mismatch (bf16 on a GPU) and what truncated importance sampling does with it
        "logprob_gap_max": round(max(r["logprob_gap_max"] for r in rows["population"]), 8),
        "token_gap_max": round(max(r["token_gap_max"] for r in rows["population"]), 6),
        "outside_clip_band": round(p["outside_clip_band"], 6),
        "is_truncated": round(p["is_truncated"], 6),
        "clip_fraction": round(p["clip_fraction"], 6),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny,qwen1.5b", help="comma-separated: tiny, qwen1.5b")
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds after one warm-up round")
    ap.add_argument("--device", default="auto", help="runtime.device: auto | cpu | cuda | cuda:N")
    ap.add_argument("--dtype", default="auto", help="runtime.dtype: auto | float32 | bfloat16 | float16")
    ap.add_argument("--cpu-layers", type=int, default=2, help="layers of the 1.5B architecture on a CPU")
    ap.add_argument("--proposals", type=int, default=1, help="proposals per teacher per task type")
    ap.add_argument("--rollouts", type=int, default=4, help="student rollouts per task")
    ap.add_argument("--teacher-tokens", type=int, default=64)
    ap.add_argument("--student-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads on a CPU")
    ap.add_argument("--activation-checkpointing", choices=("on", "off"), default="on",
                    help="learner.activation_checkpointing (on, as configs/qwen2.5-coder-1.5b.yaml runs)")
    args = ap.parse_args()
    from popula.errors import PopulaError

    try:
        runtime = resolve_runtime(args.device, args.dtype)
    except PopulaError as err:
        print(f"gpu_step: {err}", file=sys.stderr)
        return 2
    if not runtime.on_gpu:
        torch.set_num_threads(args.threads)
    print(f"gpu_step: {runtime.describe()}"
          + ("" if runtime.on_gpu else "  (no GPU here: CPU figures only, the GPU figures were NOT taken)"), flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workers=2) as sandbox:
        n_tasks = len(TYPES) * args.proposals * TEACHERS
        tasks = generate_tasks(n_tasks + 12, seed=7, types=TYPES, namespace="bench", workers=2)
        refs_pool, tasks = tasks[:12], tasks[12:]
        for kind in args.models.split(","):
            results.append(bench_model(kind.strip(), args, runtime, sandbox, Path(tmp), tasks, refs_pool))

    print()
    print(f"{TEACHERS} teachers + {STUDENTS} students vs 1 adapter in both roles, same work; median of {args.rounds} "
          f"rounds; {runtime.describe()}; activation checkpointing {args.activation_checkpointing}")
    head = f"{'model':<10}{'phase':<10}{'single s':>10}{'population s':>14}{'ratio':>8}"
    for r in results:
        print(f"\n{r['label']} ({r['params_m']}M params)")
        print(head)
        for phase in ("generate", "verify", "learn"):
            a, b = r[f"{phase}_single"], r[f"{phase}_population"]
            print(f"{r['model']:<10}{phase:<10}{a:>10.3f}{b:>14.3f}{b / a if a else float('nan'):>8.3f}")
        print(f"{r['model']:<10}{'step':<10}{r['step_s_single']:>10.3f}{r['step_s_population']:>14.3f}{r['ratio']:>8.3f}"
              f"   (CPU-time ratio {r['ratio_cpu_time']:.3f})")
        print(f"tokens/s {r['tokens_per_s_single']} single, {r['tokens_per_s_population']} population; peak memory "
              f"{r['peak_mem_mib_single']} / {r['peak_mem_mib_population']} MiB "
              f"({'GPU, per side' if runtime.on_gpu else 'process resident, both sides'}); "
              f"model {r['model_mem_mib']} MiB")
        print(f"sampler vs learner: logprob_gap {r['logprob_gap']:.2e} (largest adapter's {r['logprob_gap_max']:.2e}, "
              f"largest token's {r['token_gap_max']:.2e}); tokens outside the clip band {r['outside_clip_band']:.2%} "
              f"(their gradient would be clipped with the ratio to the sampler when the advantage pushes further); "
              f"under truncated IS: clipped {r['clip_fraction']:.2%}, weight truncated {r['is_truncated']:.2%}")
    if not runtime.on_gpu:
        print("\nGPU figures: NOT TAKEN (no GPU on this machine); run this script on a GPU machine for them.")
    print(json.dumps({"device": runtime.device, "dtype": runtime.dtype,
                      "gpu_figures": "taken" if runtime.on_gpu else "not taken", "rounds": args.rounds,
                      "activation_checkpointing": args.activation_checkpointing,
                      "results": results}))
    return 0


if __name__ == "__main__":
    run_script(main)
