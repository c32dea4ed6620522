"""Step cost of shared prompts: generate and learn with the paths before and after issue 38.

What it answers: a student's rollouts of one task (4-8 of them) share the prompt and the
adapter. Before, the torch engine prefilled that prompt once per rollout and the learner ran
it forward and backward once per rollout, with float32 logits over the whole vocabulary;
after, the engine prefills it once and branches the cache (`TorchEngine(share_prefill=)`)
and prefills prompts of unequal length in buckets of about their own length (`ragged_prefill=`),
the learner packs a group into one sequence under a block mask (`share_prompts=`) and takes
log-probs from hidden states a chunk at a time (`logit_chunk=`). Both paths run here in one
process on the same seeded work, interleaved round by round, from the same learner state.

Work (seeded, no sandbox): `--tasks` prompts of about `--prompt-tokens` random ids (0.75x to
1.25x), each drawn `--rollouts` times by one of `--adapters` adapters (non-zero B) with
`--new-tokens` new tokens at temperature 1; then one learner step on those rollouts with
rewards 0/1 and the shipped configs' KL (0.5 teachers, 0.05 students: one no-grad base forward).
The engine generates with the learner's own model, as `popula run` builds them.

Models: `small` (default): a Llama from a config with random weights, `--hidden-size`,
`--layers`, `--vocab` (as `popula pretrain` names them), built in a second; or
`--model smollm2-135m`: the registry's SmolLM2-135M, only if it is already in the cache
(`popula models fetch smollm2-135m` fetches it; this script never does).

    python3 benchmarks/step_cost.py [--model small|smollm2-135m] [--tasks 8] [--rollouts 8]
        [--prompt-tokens 128] [--new-tokens 24] [--adapters 4] [--rounds 2] [--threads 1]
        [--hidden-size 256] [--layers 4] [--vocab 8192] [--logit-chunk 256] [--breakdown]

Per phase and path: seconds (best round: contention only slows a round), new tokens per
second (generated, or trained), prompt tokens run through the model (padding left out;
learn counts the base's KL forward and the training one), peak resident memory of the
process during the phase (Linux `VmHWM`, reset before each phase) and its rise over the
phase's start. `--breakdown` adds the learn phase alone under each of the four settings of
the learner's switches (packing on/off x chunked log-probs on/off). The last line is one JSON
object of these figures.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.adapters import AdapterRef  # noqa: E402
from popula.adapters.store import AdapterStore  # noqa: E402
from popula.config import LearnerConfig, LoraConfig  # noqa: E402
from popula.engines.base import GenerationRequest, GenerationResult  # noqa: E402
from popula.engines.torch_engine import TorchEngine  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.learner import PopulationLearner, Rollout  # noqa: E402

RANK, ALPHA = 8, 16.0
PATHS = ("before", "after")


def build_small(path: Path, hidden: int, layers: int, vocab: int) -> Path:
    """A random-weight Llama (head dim 64) and a byte-level BPE tokenizer, saved at `path`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([f"def f(x):\n    return x * {i} + {i % 7}\n" for i in range(200)],
                            trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                            pad_token="<|endoftext|>").save_pretrained(path)
    torch.manual_seed(0)
    heads = max(1, hidden // 64)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=2048,
                      eos_token_id=0, bos_token_id=0, pad_token_id=0, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def cached_model(name: str) -> Path:
    """A registry model's directory if it is already in the cache; never fetches."""
    from popula.model import registry

    if not registry.is_cached(name):
        raise SystemExit(f"step_cost: {name} is not in the cache ({registry.model_path(name)}); "
                         f"`popula models fetch {name}` fetches it")
    return registry.model_path(name)


def make_adapters(store: AdapterStore, count: int) -> list[AdapterRef]:
    """`count` adapters with B moved off zero, so each computes its own function."""
    refs = []
    for k in range(count):
        name = f"S{k}"
        sd = dict(store.load(store.create(name)).state_dict)
        g = torch.Generator().manual_seed(100 + k)
        refs.append(store.save(name, {key: torch.randn(v.shape, generator=g) * 0.02 if "lora_B" in key else v
                                      for key, v in sd.items()}))
    return refs


def make_requests(refs: list[AdapterRef], args: argparse.Namespace, vocab: int) -> list[GenerationRequest]:
    """One seeded request per task, its n rollouts sharing the prompt; tasks spread over the adapters."""
    g = torch.Generator().manual_seed(0)
    out = []
    for task in range(args.tasks):
        low, high = int(0.75 * args.prompt_tokens), int(1.25 * args.prompt_tokens)
        length = int(torch.randint(low, high + 1, (1,), generator=g))
        prompt = torch.randint(1, vocab, (length,), generator=g).tolist()
        out.append(GenerationRequest(prompt, adapter=refs[task % len(refs)], n=args.rollouts, temperature=1.0,
                                     max_tokens=args.new_tokens, seed=task))
    return out


def make_rollouts(requests: list[GenerationRequest], results: list[GenerationResult]) -> list[Rollout]:
    """The learner's rollouts of a generation, rewards alternating 0/1 within each task."""
    return [Rollout(adapter=req.adapter.name, prompt_ids=list(req.prompt_ids), completion_ids=s.token_ids,
                    sampler_logprobs=s.logprobs, adapter_version=req.adapter.version, role="student",
                    group=f"task{i}", reward=float(j % 2), temperature=req.temperature)
            for i, (req, res) in enumerate(zip(requests, results)) for j, s in enumerate(res.samples)]


def rss_kib(field: str) -> int:
    """A line of /proc/self/status in KiB (VmRSS: now, VmHWM: peak since the last reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def steady_heap() -> None:
    """Let glibc map every block of 64 KiB or more on its own and unmap it when freed (it raises
    that threshold as blocks are freed otherwise, and big tensors then linger in the heap), so
    the resident memory of a phase is what the phase holds, not what earlier phases left."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def reset_peak() -> None:
    """Hand freed heap back to the system (glibc keeps it otherwise, and the next phase would
    start from the last one's high-water mark), then set the process's peak resident memory
    back to its current one (Linux: clear_refs 5)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # then the peak is the process's whole-life one, which the table's rise column still bounds


def measure(run: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """Run one phase; its result, seconds, CPU seconds, peak resident MiB and rise over its start."""
    reset_peak()
    start_kib, wall, cpu = rss_kib("VmRSS"), time.perf_counter(), time.process_time()
    out = run()
    seconds, cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    peak = rss_kib("VmHWM")
    return out, {"s": seconds, "cpu_s": cpu_s, "peak_rss_mib": peak / 1024, "rise_mib": (peak - start_kib) / 1024}


def set_path(engine: TorchEngine, learner: PopulationLearner, after: bool, chunk: int, can_pack: bool) -> None:
    engine.share_prefill = after
    engine.ragged_prefill = after
    learner.share_prompts = after and can_pack
    learner.logit_chunk = chunk if after else None


def play_round(engine: TorchEngine, learner: PopulationLearner, state: dict, requests: list[GenerationRequest],
               ) -> dict[str, Any]:
    """Generate, then learn, from the saved learner state; figures per phase and what was drawn."""
    learner.load_state_dict(state)
    engine_prompts, learner_prompts = engine.prompt_tokens, learner.prompt_tokens
    results, gen = measure(lambda: engine.generate(requests))
    rollouts = make_rollouts(requests, results)
    metrics, learn = measure(lambda: learner.step(rollouts))
    new_tokens = sum(len(r.completion_ids) for r in rollouts)
    gen.update(tokens=new_tokens, tok_per_s=new_tokens / gen["s"], prompt_tokens=engine.prompt_tokens - engine_prompts)
    learn.update(tokens=metrics["tokens"], tok_per_s=metrics["tokens"] / learn["s"],
                 prompt_tokens=learner.prompt_tokens - learner_prompts)
    return {"generate": gen, "learn": learn, "loss": metrics["loss"], "logprob_gap": metrics["logprob_gap"],
            "samples": [[s.token_ids for s in r.samples] for r in results], "rollouts": rollouts}


def learn_breakdown(learner: PopulationLearner, state: dict, rollouts: list[Rollout], chunk: int,
                    can_pack: bool) -> list[dict[str, Any]]:
    """The learn phase alone under each setting of the learner's two switches, on the same
    rollouts from the same state: what packing and chunked log-probs each bring."""
    out = []
    for share in (False, True):
        for logit_chunk in (None, chunk):
            learner.load_state_dict(state)
            learner.share_prompts, learner.logit_chunk = share and can_pack, logit_chunk
            metrics, f = measure(lambda: learner.step(rollouts))
            out.append({"share_prompts": share and can_pack, "logit_chunk": logit_chunk, "s": round(f["s"], 3),
                        "cpu_s": round(f["cpu_s"], 3), "rise_mib": round(f["rise_mib"], 1), "loss": metrics["loss"]})
    return out


def best(rounds: list[dict[str, Any]], phase: str) -> dict[str, float]:
    """The phase's figures from its fastest round; peak memory the highest of any round."""
    fastest = min((r[phase] for r in rounds), key=lambda f: f["s"])
    return {**fastest, "peak_rss_mib": max(r[phase]["peak_rss_mib"] for r in rounds),
            "rise_mib": max(r[phase]["rise_mib"] for r in rounds)}


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    if args.model == "small":
        base = build_small(root / "base", args.hidden_size, args.layers, args.vocab)
    else:
        base = cached_model(args.model)
    store = AdapterStore(root / "adapters", base, rank=RANK, alpha=ALPHA, seed=0)
    refs = make_adapters(store, args.adapters)
    cfg = LearnerConfig(lr=1e-4, kl_coef=0.5, student_kl_coef=0.05, logit_chunk=args.logit_chunk)
    learner = PopulationLearner(base, LoraConfig(rank=RANK, alpha=ALPHA), cfg, max_adapters=args.adapters,
                                spare_slots=args.adapters)
    for ref in refs:
        learner.add_adapter(ref.name, store.load(ref).state_dict)
    engine = TorchEngine(base, max_adapters=args.adapters, max_rank=RANK, model=learner.model,
                         slots=range(args.adapters, 2 * args.adapters))
    can_pack = learner.share_prompts
    state = learner.state_dict()
    vocab = learner.model.base_model.get_output_embeddings().weight.shape[0]
    requests = make_requests(refs, args, vocab)
    rounds: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
    for rnd in range(args.rounds + 1):
        for path in PATHS if rnd % 2 == 0 else PATHS[::-1]:
            set_path(engine, learner, path == "after", args.logit_chunk, can_pack)
            r = play_round(engine, learner, state, requests)
            print(f"  round {rnd}{' (warm-up)' if rnd == 0 else ''} {path:>6}: generate {r['generate']['s']:.2f}s "
                  f"learn {r['learn']['s']:.2f}s", flush=True)
            if rnd > 0:
                rounds[path].append(r)
    params = sum(p.numel() for p in learner.model.base_model.parameters() if not p.requires_grad)
    figures = {p: {phase: best(rounds[p], phase) for phase in ("generate", "learn")} for p in PATHS}
    before, after = rounds["before"][0], rounds["after"][0]
    breakdown = learn_breakdown(learner, state, after["rollouts"], args.logit_chunk, can_pack) if args.breakdown else None
    return {
        "model": args.model, "params_m": round(params / 1e6, 1), "vocab": vocab, "threads": torch.get_num_threads(),
        "tasks": args.tasks, "rollouts": args.rollouts, "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens, "adapters": args.adapters, "rounds": args.rounds,
        "logit_chunk": args.logit_chunk, "packing": can_pack,
        "same_samples": all(r["samples"] == before["samples"] for p in PATHS for r in rounds[p]),
        "loss": {"before": before["loss"], "after": after["loss"]},
        "logprob_gap": {"before": before["logprob_gap"], "after": after["logprob_gap"]},
        "paths": {p: {ph: {k: round(v, 4) for k, v in f.items()} for ph, f in figures[p].items()} for p in PATHS},
        "speedup": {ph: round(figures["before"][ph]["s"] / figures["after"][ph]["s"], 3)
                    for ph in ("generate", "learn")}
        | {"step": round(sum(figures["before"][ph]["s"] for ph in ("generate", "learn"))
                         / sum(figures["after"][ph]["s"] for ph in ("generate", "learn")), 3)},
        "breakdown": breakdown,
        "speedup_cpu": {ph: round(figures["before"][ph]["cpu_s"] / figures["after"][ph]["cpu_s"], 3)
                        for ph in ("generate", "learn")}
        | {"step": round(sum(figures["before"][ph]["cpu_s"] for ph in ("generate", "learn"))
                         / sum(figures["after"][ph]["cpu_s"] for ph in ("generate", "learn")), 3)},
    }


def print_table(r: dict[str, Any]) -> None:
    print(f"\n{r['model']} ({r['params_m']}M params, vocabulary {r['vocab']}), {r['threads']} thread(s); "
          f"{r['tasks']} tasks x {r['rollouts']} rollouts, prompts ~{r['prompt_tokens']} tokens, "
          f"{r['new_tokens']} new tokens, {r['adapters']} adapters; best of {r['rounds']} rounds")
    print(f"{'phase':<10}{'path':<8}{'seconds':>9}{'CPU s':>8}{'new tok/s':>11}{'prompt tok':>12}"
          f"{'peak RSS MiB':>14}{'rise MiB':>10}")
    for phase in ("generate", "learn"):
        for path in PATHS:
            f = r["paths"][path][phase]
            print(f"{phase:<10}{path:<8}{f['s']:>9.3f}{f['cpu_s']:>8.3f}{f['tok_per_s']:>11.1f}"
                  f"{int(f['prompt_tokens']):>12}{f['peak_rss_mib']:>14.1f}{f['rise_mib']:>10.1f}")
    s = r["speedup"]
    print(f"speedup (before s / after s): generate {s['generate']:.2f}x, learn {s['learn']:.2f}x, "
          f"step {s['step']:.2f}x (CPU seconds: step {r['speedup_cpu']['step']:.2f}x); "
          f"same samples on both paths: {r['same_samples']}; "
          f"loss {r['loss']['before']:.6g} / {r['loss']['after']:.6g}; packing {'on' if r['packing'] else 'OFF'}")
    if r["breakdown"]:
        print(f"\nlearn alone, each setting of the learner's switches (one run each)\n"
              f"{'share_prompts':<15}{'logit_chunk':<13}{'seconds':>9}{'CPU s':>8}{'rise MiB':>10}")
        for b in r["breakdown"]:
            print(f"{str(b['share_prompts']):<15}{str(b['logit_chunk']):<13}{b['s']:>9.3f}{b['cpu_s']:>8.3f}"
                  f"{b['rise_mib']:>10.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="small", help="small (random Llama built here) or smollm2-135m (if cached)")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--rollouts", type=int, default=8, help="samples per task (the GRPO group)")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="measured rounds per path after one warm-up round")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--hidden-size", type=int, default=256, help="small model only")
    ap.add_argument("--layers", type=int, default=4, help="small model only")
    ap.add_argument("--vocab", type=int, default=8192, help="small model only")
    ap.add_argument("--logit-chunk", type=int, default=256, help="positions per LM-head chunk on the new path")
    ap.add_argument("--breakdown", action="store_true",
                    help="then the learn phase alone under each of the four settings of the learner's switches")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    steady_heap()
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args, Path(tmp))
    print_table(result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    run_script(main)
