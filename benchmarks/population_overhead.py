"""Population overhead: one full self-play step for 4 teachers + 4 students vs one adapter playing both.

The population is worth having only if it is nearly as cheap as a single agent doing the
same work (PopuLoRA: 1.31x; our target: <= 1.15x). Both sides do the same work per step:
the same number of teacher proposals (types x proposals per teacher), the same tasks for
students and the same rollouts per task. The single agent proposes all of them and solves
all of them with one adapter; the population spreads them over 4 teachers, each matched to
one of 4 students. Each step has the three phases of a run, timed separately so the
slowest is visible:

- generation: teacher proposals, then student rollouts, by the torch multi-LoRA engine
  (loading each adapter's newest version first, as a run does);
- verification: the sandbox validates the proposed tasks and judges every rollout;
- update: one `PopulationLearner.step` over all rollouts, then every adapter saved as a
  new version in the AdapterStore, its files written in the background as `popula run`
  writes them (the update waits for the previous step's writes first).

The base is a ~4M-parameter Llama built from a config with random weights (no downloads),
with a BPE tokenizer trained on the compact task format. A random base writes no valid
task, so the tasks the students solve are real generated tasks standing in for the
teachers' proposals (validated by the sandbox as proposals are), and each rollout's
answer is judged as written (its first line when no answer parses): the verifier does
the work of a run with real models. Rewards come from `popula.rewards`; every rollout then
trains with an advantage of +-1, since the learner runs only rows with a gradient and nearly
every reward of a random model is 0.

Rounds interleave single and population steps after a warm-up round, in one process, so a
busy shared machine slows both alike; medians over rounds are reported, and the ratio of
the fastest rounds (the least disturbed by other processes) beside them. On a machine
shared with other jobs wall time swings by tens of percent between identical rounds, so
the CPU time this process spent in generation and update (`*_cpu_s`, from
`time.process_time`; verification runs in sandbox processes and counts as wall time) is
reported too: it is far steadier, and the overhead it shows is the one that matters on a
machine of one's own.

    python3 benchmarks/population_overhead.py [--rounds 3] [--proposals 1] [--rollouts 4] [--threads 1]

Wall-clock medians swing with the machine's load, so read the CPU figures first, and
compare runs, not single rounds (figures: docs/results/design-figures.md § Population overhead).

Last line: {"step_s_single", "step_s_population", "overhead", "generate_s_*", "verify_s_*",
"update_s_*", "overhead_update", ...}
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.adapters.store import AdapterStore
from popula.config import Config, LearnerConfig, LoraConfig
from popula.engines.base import GenerationRequest
from popula.exits import run_script
from popula.learner import PopulationLearner, Rollout
from popula.rewards import solve_rate, student_reward, teacher_reward
from popula.run.parts.builders import build_engine, build_learner
from popula.runtime import Runtime
from popula.sandbox import Sandbox
from popula.tasks.generator import generate_tasks
from popula.tasks.prompts import CompactFormat, stop_token_ids

TYPES = ("code_o", "code_i", "code_f")
TEACHERS = STUDENTS = 4
# The learner these figures were measured with: lr 2e-4, no KL to the base (the run's defaults
# add one, a second forward of the base each step), teacher baselines per adapter and type.
LEARNER = LearnerConfig(lr=2e-4, kl_coef=0.0, student_kl_coef=None, teacher_baseline="batch", teacher_strata="none")


def build_base(path: Path, tasks: list) -> Path:
    """~4M-parameter random Llama (hidden 256, 4 layers) and a BPE tokenizer for the compact format."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from popula.model.tokenizer import train_tokenizer

    fmt = CompactFormat()
    texts = [fmt.student_prompt(t) + fmt.proposal_completion(t) for t in tasks]
    tokenizer = train_tokenizer(texts, vocab_size=1024, max_length=1024)
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    model.save_pretrained(path)
    return path


@dataclass
class Side:
    """One configuration: its adapters, who plays which role, and its own engine, store, learner."""

    name: str
    teachers: list[str]  # adapter of each teacher
    students: list[str]  # adapter matched to each teacher
    engine: object
    store: "PublishingStore"
    learner: PopulationLearner

    def close(self) -> None:
        """Write the last background saves, then drop the engine."""
        self.store.close()
        self.engine.close()


class PublishingStore:
    """The AdapterStore, plus what a run does after each save (`PopulationRun._publish`): tell
    the engine sharing the learner's model that the new version is the learner's current
    weights, so it is served from the learner's tensors, no file read; and, as the run does,
    write the files in the background (flushed before the next step's saves)."""

    def __init__(self, store: AdapterStore, engine: object, learner: PopulationLearner) -> None:
        self.store, self.engine, self.learner = store, engine, learner

    def save(self, name: str, state: object):
        ref = self.store.save(name, state, background=True)
        self.engine.bind(ref, self.learner, name)
        return ref

    def __getattr__(self, attr: str):
        return getattr(self.store, attr)


def make_side(name: str, teachers: list[str], students: list[str], base: Path, root: Path,
              lora: LoraConfig, cfg: LearnerConfig, runtime: Runtime | None = None) -> Side:
    """One side built as `popula run` builds its stack (popula.run.parts.workers): the torch engine
    generates with the learner's model (one base), on the runtime's device and dtype."""
    adapters = sorted(set(teachers) | set(students))
    runtime = runtime or Runtime("cpu", "float32")
    config = Config(base_model=str(base), lora=lora, learner=cfg, evolution={"enabled": False},
                    runtime={"device": runtime.device, "dtype": runtime.dtype})
    learner = build_learner(config, base, runtime, max_adapters=len(adapters), spare_slots=1)
    engine = build_engine(config, base, runtime, max_adapters=len(adapters) + 1, shared=learner, seed=0)
    store = PublishingStore(AdapterStore(root / name, base, rank=lora.rank, alpha=lora.alpha,
                                         target_modules=lora.target_modules), engine, learner)
    for a in adapters:
        learner.add_adapter(a, store.load(store.create(a)).state_dict)
        engine.bind(store.latest(a), learner, a)
    return Side(name, teachers, students, engine, store, learner)


def references(pool: list, task_type: str, k: int, n: int = 3) -> list:
    """The `n` references of proposal `k` of a type: the k-th ordering of the pool's tasks of that
    type (distinct prompts for as many proposals as there are orderings)."""
    orderings = list(itertools.islice(itertools.permutations([r for r in pool if r.type == task_type], n), k + 1))
    return list(orderings[k % len(orderings)])


def step_prompts(teachers: list[str], students: list[str], tasks: list, refs_pool: list, proposals: int,
                 encode: Callable[[str], list[int]]) -> tuple[list[tuple], list[list[int]], list[list[int]]]:
    """A step's plan, (teacher adapter, student adapter, task type, stand-in task) per proposal,
    with each proposal's teacher prompt and its student's prompt (token ids).

    Each proposal is shown its own references, as `popula run` draws them per proposal: with one
    list for all, a single agent's four same-type prompts would be one prompt, prefilled and
    learned from once, and the sides would no longer do the same work.
    """
    fmt = CompactFormat()
    per_teacher = len(TYPES) * proposals
    plan = [(teachers[k // per_teacher], students[k // per_teacher], TYPES[k % len(TYPES)], tasks[k % len(tasks)])
            for k in range(per_teacher * TEACHERS)]
    t_prompts = [encode(fmt.teacher_prompt(tt, references(refs_pool, tt, k // len(TYPES))))
                 for k, (_, _, tt, _) in enumerate(plan)]
    return plan, t_prompts, [encode(fmt.student_prompt(task)) for *_, task in plan]


def play_step(side: Side, step: int, tasks: list, refs_pool: list, tokenizer, sandbox: Sandbox,
              args: argparse.Namespace) -> dict[str, float]:
    """One step: generate (teachers, then students), verify, update. Returns phase seconds."""
    fmt = CompactFormat()
    stops = stop_token_ids(tokenizer)
    encode = lambda text: [tokenizer.bos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]
    refs = {a: side.store.latest(a) for a in set(side.teachers) | set(side.students)}
    plan, t_prompts, s_prompts = step_prompts(side.teachers, side.students, tasks, refs_pool, args.proposals, encode)

    t0, c0 = time.perf_counter(), time.process_time()
    teacher_out = side.engine.generate([
        GenerationRequest(ids, adapter=refs[t], n=1, max_tokens=args.teacher_tokens, seed=step * 1000 + i,
                          stop_token_ids=stops) for i, ((t, _, _, _), ids) in enumerate(zip(plan, t_prompts))])
    student_out = side.engine.generate([
        GenerationRequest(ids, adapter=refs[s], n=args.rollouts, max_tokens=args.student_tokens,
                          seed=step * 1000 + 500 + i, stop_token_ids=stops)
        for i, ((_, s, _, _), ids) in enumerate(zip(plan, s_prompts))])
    generate_s, generate_cpu_s = time.perf_counter() - t0, time.process_time() - c0

    t0 = time.perf_counter()
    drafts = []
    for _, _, _, task in plan:
        draft = copy.copy(task)
        draft.outputs = []
        drafts.append(draft)
    verdicts = sandbox.verify(drafts)
    judged, answers = [], []
    for (_, _, tt, task), result in zip(plan, student_out):
        for sample in result.samples:
            answer = fmt.parse_answer(sample.text, tt)
            record = copy.copy(task)
            record.answer = answer if answer is not None else (sample.text.strip().split("\n")[0] or "0")
            judged.append(record)
            answers.append(answer)
    judgements = sandbox.verify(judged)
    verify_s = time.perf_counter() - t0

    rollouts = []
    j = 0
    for i, ((t, s, tt, _), tres, sres, verdict) in enumerate(zip(plan, teacher_out, student_out, verdicts)):
        correct = []
        for sample in sres.samples:
            ok = answers[j] is not None and bool(judgements[j].correct)
            correct.append(ok)
            rollouts.append(Rollout(adapter=s, role="student", task_type=tt, group=f"task{i}", prompt_ids=s_prompts[i],
                                    completion_ids=sample.token_ids, sampler_logprobs=sample.logprobs,
                                    adapter_version=refs[s].version,
                                    reward=student_reward(answers[j] is not None, ok)))
            j += 1
        tsample = tres.samples[0]
        rollouts.append(Rollout(adapter=t, role="teacher", task_type=tt, group=f"teacher:{tt}", prompt_ids=t_prompts[i],
                                completion_ids=tsample.token_ids, sampler_logprobs=tsample.logprobs,
                                adapter_version=refs[t].version,
                                reward=teacher_reward(verdict.valid, solve_rate(correct) if verdict.valid else None)))

    # The learner runs only rows with a gradient; with these random-weight models nearly every
    # reward is 0, so without this the learn phase would time almost nothing. Every row gets
    # an advantage of +-1 (alternating): the update's cost per row, whatever the rewards were.
    for k, r in enumerate(rollouts):
        r.advantage = 1.0 if k % 2 else -1.0
    mismatch = sampler_mismatch(side.learner, rollouts, LEARNER.clip_eps)  # untimed: one extra no-grad forward
    t0, c0 = time.perf_counter(), time.process_time()
    metrics = side.learner.step(rollouts)
    side.store.flush()
    for a in side.learner.adapters:
        side.store.save(a, side.learner.adapter_state(a))
    update_s, update_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    tokens = sum(len(r.completion_ids) for r in rollouts)
    return {"generate_s": generate_s, "verify_s": verify_s, "update_s": update_s,
            "step_s": generate_s + verify_s + update_s, "generate_cpu_s": generate_cpu_s,
            "update_cpu_s": update_cpu_s, "step_cpu_s": generate_cpu_s + verify_s + update_cpu_s, "tokens": tokens, "rollouts": len(rollouts),
            "logprob_gap": metrics["logprob_gap"] or 0.0, "microbatches": metrics["microbatches"],
            "logprob_gap_max": metrics["logprob_gap_max"] or 0.0, "is_truncated": metrics["is_truncated"],
            "clip_fraction": metrics["clip_fraction"], **mismatch}


def sampler_mismatch(learner: PopulationLearner, rollouts: list[Rollout], clip_eps: float) -> dict[str, float]:
    """How far the sampler's log-probs are from the learner's before the update, token by token:
    the largest gap, and the share of tokens whose ratio p_learner / p_sampler falls outside the PPO
    clip band (a ratio to the sampler would clip the gradient of about half of them, those whose
    advantage pushes further out; truncated importance sampling weights them instead)."""
    gaps = [abs(t - s) for r, trainer in zip(rollouts, learner.logprobs(rollouts))
            for t, s in zip(trainer, r.sampler_logprobs)]
    band = math.log(1 + clip_eps)
    return {"token_gap_max": max(gaps, default=0.0),
            "outside_clip_band": sum(g > band for g in gaps) / len(gaps) if gaps else 0.0}


def add_step_options(ap: argparse.ArgumentParser) -> None:
    """The step's shape and threading, shared with benchmarks/ray_overhead.py."""
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds after one warm-up round")
    ap.add_argument("--proposals", type=int, default=1, help="proposals per teacher per task type")
    ap.add_argument("--rollouts", type=int, default=4, help="student rollouts per task")
    ap.add_argument("--teacher-tokens", type=int, default=64)
    ap.add_argument("--student-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (also in each Ray actor); on a shared 2-core machine 2 threads "
                         "oversubscribe and run ~5x slower")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_step_options(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from transformers import AutoTokenizer

    lora = LoraConfig(rank=8, alpha=16.0)
    cfg = LEARNER
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workers=2) as sandbox:
        root = Path(tmp)
        n_tasks = len(TYPES) * args.proposals * TEACHERS
        tasks = generate_tasks(n_tasks + 12, seed=7, types=TYPES, namespace="bench", workers=2)
        refs_pool, tasks = tasks[:12], tasks[12:]
        base = build_base(root / "base", refs_pool + tasks)
        tokenizer = AutoTokenizer.from_pretrained(str(base))
        single = make_side("single", ["A0"] * TEACHERS, ["A0"] * STUDENTS, base, root, lora, cfg)
        population = make_side("population", [f"T{i}" for i in range(TEACHERS)], [f"S{i}" for i in range(STUDENTS)],
                               base, root, lora, cfg)
        params = sum(p.numel() for p in single.learner.model.base_model.parameters() if not p.requires_grad)
        results: dict[str, list[dict[str, float]]] = {"single": [], "population": []}
        for rnd in range(args.rounds + 1):
            for side in (single, population):
                r = play_step(side, rnd, tasks, refs_pool, tokenizer, sandbox, args)
                if rnd > 0:
                    results[side.name].append(r)
                print(f"round {rnd}{' (warm-up)' if rnd == 0 else ''} {side.name:>10}: "
                      + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()),
                      flush=True)
        for side in (single, population):
            side.close()

    med = {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in results.items()}
    best = {name: {k: min(r[k] for r in rows) for k in rows[0]} for name, rows in results.items()}
    s, p = med["single"], med["population"]
    print()
    print(f"base: random Llama, {params / 1e6:.1f}M frozen params; LoRA rank {lora.rank} on "
          f"{len(lora.target_modules)} modules; {TEACHERS}T+{STUDENTS}S vs 1 adapter in both roles")
    print(f"per step: {int(s['rollouts'])} rollouts ({TEACHERS * len(TYPES) * args.proposals} proposals, "
          f"{args.rollouts} rollouts per task), ~{int(s['tokens'])} completion tokens; median of {args.rounds} rounds")
    print(f"{'phase':<16}{'single s':>10}{'population s':>14}{'ratio':>8}{'ratio of best rounds':>22}")
    for phase in ("generate_s", "verify_s", "update_s", "step_s", "generate_cpu_s", "update_cpu_s", "step_cpu_s"):
        ratio_best = best["population"][phase] / best["single"][phase]
        print(f"{phase:<16}{s[phase]:>10.3f}{p[phase]:>14.3f}{p[phase] / s[phase]:>8.3f}{ratio_best:>22.3f}")
    figures = {
        "step_s_single": round(s["step_s"], 4),
        "step_s_population": round(p["step_s"], 4),
        "overhead": round(p["step_s"] / s["step_s"], 4),
        **{f"{phase}_{name}": round(med[name][phase], 4) for phase in ("generate_s", "verify_s", "update_s")
           for name in ("single", "population")},
        "overhead_generate": round(p["generate_s"] / s["generate_s"], 4),
        "overhead_verify": round(p["verify_s"] / s["verify_s"], 4),
        "overhead_update": round(p["update_s"] / s["update_s"], 4),
        "overhead_best_rounds": round(best["population"]["step_s"] / best["single"]["step_s"], 4),
        "overhead_cpu": round(p["step_cpu_s"] / s["step_cpu_s"], 4),
        "overhead_update_cpu": round(p["update_cpu_s"] / s["update_cpu_s"], 4),
        "overhead_generate_cpu": round(p["generate_cpu_s"] / s["generate_cpu_s"], 4),
        "rollouts_per_step": int(s["rollouts"]),
        "adapters_population": TEACHERS + STUDENTS,
        "base_params_m": round(params / 1e6, 2),
        "engine": "torch",
        "rounds": args.rounds,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    run_script(main)
