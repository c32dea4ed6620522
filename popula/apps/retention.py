"""Retention on a run directory: do evolution children keep their parents' ability?

`measure_run` (`popula retention`): children made afresh with every operator, scored and
trained on fixed task sets, as follows. (In the run, `popula.run.early_rewards` records each
young child's reward beside its parents'.)

`evolution.measure_retention` owns the protocol (parents' reward, the child's at
creation and after each update step, steps to recover 95% of the parents' level); this
module supplies what it leaves to the caller, on a run directory's own base, config and
adapters:

- parents: the top students of the run's league by conservative rating (mu - 3 sigma);
  a mutation uses the best one, a crossover the best two.
- reward (`evaluate`): the mean student reward (`popula.rewards.student_reward`: 1 right,
  0 otherwise) over a fixed held-out set of generated tasks (namespace
  "retention", seeded), `samples` answers per task at the run's temperature, every request
  seeded, so parents and children answer under identical sampling conditions.
- update step (`update`): one learner step, exactly as the run trains a student (GRPO
  groups of `rollouts` answers per task, the run's learner config), on a second fixed set
  of generated tasks (namespace "retention-train", disjoint from the scored set): the same
  tasks every step, fresh seeded samples each step. The child starts with a fresh AdamW
  (the run's default `evolution.optimizer_state: reset`).

Levels (child / parents, "95% of the parent level") are measured above a baseline,
`--baseline`: zero by default (the plain ratio), or `base`: above the
bare base's reward (the share of the parents' gain over the base that a child keeps).

The run's adapters are read without opening an AdapterStore on the run directory (that
prunes versions of a live run); children and copies live in a private temporary store.
"""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import torch

from evolution import DEFAULT_MIX, OPERATORS, EvolutionError, delta_norm, format_retention_table, measure_retention
from popula.adapters.files import read_adapter
from popula.adapters.store import AdapterStore
from popula.run.rundir import run_adapter
from popula.config import load_config
from popula.engines.base import GenerationRequest
from popula.errors import PopulaError
from popula.eval.evaluate import context_limit, evaluate, judge
from popula.eval.settings import EvalSettings
from popula.league import League
from popula.learner import Rollout
from popula.model.base import resolve_base_model
from popula.rewards import student_reward
from popula.run.parts.builders import build_engine, build_learner, build_sandbox, runtime_of
from popula.seeds import RETENTION, derive_seed
from popula.tasks.encoding import encode_prompt
from popula.tasks.generator import generate_tasks
from popula.tasks.prompts import prompt_format, stop_token_ids

ROLE = "student"
EVAL_NAMESPACE = "retention"
TRAIN_NAMESPACE = "retention-train"
MIN_ANSWER_TOKENS = 8  # a training prompt leaving less room than this in the context is dropped

Baseline = Literal["zero", "base"]
BASELINES: dict[str, str] = {
    "zero": "level = child / parents (the plain ratio; needs parents above 0)",
    "base": "level above the bare base's reward: the share of the parents' gain over the base that is kept",
}


@dataclass(frozen=True)
class RetentionSettings:
    """What is measured and on how much data; every default is what `popula retention` uses."""

    operators: tuple[str, ...] | None = None  # None: every registered operator
    steps: int = 5
    tasks: int = 24  # held-out tasks that the reward is measured on
    train_tasks: int = 24  # tasks of the update stream (the same ones every step)
    samples: int | None = None  # answers per scored task; None: the run's generation.rollouts
    seed: int = 0
    threshold: float = 0.95
    baseline: Baseline = "zero"  # what a level is measured above (see BASELINES)

    def __post_init__(self) -> None:
        for name in ("tasks", "train_tasks"):
            if getattr(self, name) < 1:
                raise PopulaError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.steps < 0:
            raise PopulaError(f"--steps must be >= 0, got {self.steps}")
        if self.samples is not None and self.samples < 1:
            raise PopulaError(f"--samples must be at least 1, got {self.samples}")
        if self.baseline not in BASELINES:
            raise PopulaError(f"--baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}")
        if not 0 < self.threshold <= 1:
            raise PopulaError(f"threshold must be in (0, 1], got {self.threshold}")


@dataclass
class RetentionReport:
    """What `popula retention --json` prints (`to_json`), one entry per operator in `results`."""

    run_dir: str
    base_model: str
    role: str
    parents: list[str]
    parent_rewards: dict[str, float]
    base_reward: float  # the bare base (no adapter) on the same tasks, for scale
    baseline: str  # a key of BASELINES; each result carries its value
    parent_delta_norms: dict[str, float]  # ||scale * B A|| over all modules: 0 = the parent is the bare base
    tasks: int
    train_tasks: int
    samples: int
    rollouts: int
    temperature: float
    seed: int
    steps: int
    results: list[Any] = field(default_factory=list)  # evolution.RetentionResult
    kinds: dict[str, str] = field(default_factory=dict)  # operator -> mutation | crossover
    default_mix: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        operators = []
        for r in self.results:
            row = r.to_dict()
            row["parent_rewards"] = list(row["parent_rewards"])
            row["rewards"] = list(row["rewards"])
            row["kind"] = self.kinds[r.operator]
            row["parents"] = self.parents[: 1 if row["kind"] == "mutation" else 2]
            row["levels"] = [r.level(x) for x in r.rewards]
            row["in_default_mix"] = r.operator in self.default_mix
            operators.append(row)
        return {"run_dir": self.run_dir, "base_model": self.base_model, "role": self.role, "parents": self.parents,
                "parent_rewards": self.parent_rewards, "base_reward": self.base_reward,
                "parent_delta_norms": self.parent_delta_norms, "baseline": self.baseline, "tasks": self.tasks,
                "train_tasks": self.train_tasks, "samples": self.samples, "rollouts": self.rollouts,
                "temperature": self.temperature, "seed": self.seed, "steps": self.steps,
                "operators": operators, "wall_s": self.wall_s}


def format_report(report: RetentionReport) -> str:
    """The human table: setup line, the evolution package's table, then rewards by step."""
    parents = ", ".join(f"{n} {r:.3f} (|delta W| {report.parent_delta_norms[n]:.3g})"
                        for n, r in report.parent_rewards.items())
    lines = [
        f"retention of {report.run_dir}: {report.role} parents {parents}; bare base {report.base_reward:.3f}",
        f"reward: mean student reward on {report.tasks} held-out tasks x {report.samples} samples, temperature "
        f"{report.temperature:g}; update: one learner step on {report.train_tasks} tasks x {report.rollouts} "
        f"rollouts; seed {report.seed}",
        f"levels: {report.baseline} baseline, {BASELINES[report.baseline]}",
        format_retention_table(report.results),
        "",
        "reward after each update step (0 = at creation):",
    ]
    for r in report.results:
        lines.append(f"  {r.operator:<12} " + " ".join(f"{x:7.3f}" for x in r.rewards))
    return "\n".join(lines)


def measure_run(run_dir: str | os.PathLike, settings: RetentionSettings = RetentionSettings(), *,
                progress: bool = False) -> RetentionReport:
    """Measure every chosen operator on the run's best students; see the module docstring."""
    start = time.perf_counter()
    operators = list(settings.operators) if settings.operators else list(OPERATORS)
    unknown = [op for op in operators if op not in OPERATORS]
    if unknown:
        raise PopulaError(f"--operator {', '.join(unknown)}: unknown operator; known: {', '.join(OPERATORS)}")
    run = Path(run_dir)
    if not run.is_dir():
        raise PopulaError(f"{run}: no such run directory")
    if not (run / "config.yaml").is_file():
        raise PopulaError(f"{run}: not a run directory (no config.yaml)")
    cfg = load_config(run / "config.yaml")
    needed = max(OPERATORS[op].n_parents for op in operators)
    parents = _parents(run, needed)
    base_path = resolve_base_model(cfg.base_model)
    samples = settings.samples or cfg.generation.rollouts
    report = RetentionReport(run_dir=str(run), base_model=str(cfg.base_model), role=ROLE,
                             parents=[name for name, _ in parents], parent_rewards={}, base_reward=0.0, baseline=settings.baseline,
                             parent_delta_norms={},
                             tasks=settings.tasks, train_tasks=settings.train_tasks, samples=samples,
                             rollouts=cfg.generation.rollouts, temperature=cfg.generation.temperature,
                             seed=settings.seed, steps=settings.steps,
                             kinds={op: OPERATORS[op].kind for op in operators}, default_mix=sorted(DEFAULT_MIX))
    with ExitStack() as stack:
        bench = _Bench(cfg, base_path, settings, samples, stack)
        report.train_tasks = len(bench.train_tasks)  # fewer than asked when a prompt does not fit the context
        states = [bench.read_run_adapter(run, name, adapter) for name, adapter in parents]
        for (name, _), state in zip(parents, states):
            report.parent_delta_norms[name] = delta_norm(state, cfg.lora.alpha / cfg.lora.rank)
        total = 1 + len(states) + len(operators) * (1 + 2 * settings.steps)
        bar = _progress(total, progress)
        stack.callback(bar.close)
        bar.set_description("retention: bare base")
        report.base_reward = bench.reward(None)
        bar.update()
        baseline = {"zero": 0.0, "base": report.base_reward}[settings.baseline]
        cached: dict[int, float] = {}
        for (name, _), state in zip(parents, states):
            bar.set_description(f"retention: parent {name}")
            cached[id(state)] = bench.evaluate(state)
            report.parent_rewards[name] = cached[id(state)]
            bar.update()

        for op in operators:
            spec = OPERATORS[op]
            bar.set_description(f"retention: {op}")

            def evaluate(state: Mapping[str, torch.Tensor]) -> float:
                if any(state is s for s in states):
                    return cached[id(state)]  # a parent: same weights, same seeds, same reward
                bar.update()
                return bench.evaluate(state)

            def update(state: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
                bar.update()
                return bench.update(op, state, step)

            try:
                result = measure_retention(states, spec, evaluate, update, settings.steps,
                                           strength=cfg.evolution.strengths.get(op), seed=settings.seed,
                                           baseline=baseline, threshold=settings.threshold)
            except EvolutionError as err:
                hint = (f" (parents {', '.join(report.parents)} on the retention tasks; train the run longer, "
                        "or choose another --baseline)") if "baseline" in str(err) else ""
                raise PopulaError(f"{run}: operator {op}: {err}{hint}") from None
            finally:
                bench.forget(op)
            report.results.append(result)
    report.wall_s = round(time.perf_counter() - start, 3)
    return report


def _parents(run: Path, needed: int) -> list[tuple[str, str]]:
    """(league member, adapter name) of the `needed` best students by conservative rating."""
    league_path = run / "league.json"
    if not league_path.is_file():
        raise PopulaError(f"{league_path}: no league in this run directory (has the run started?)")
    ranked = League.load(league_path).ranked(ROLE)
    if len(ranked) < needed:
        raise PopulaError(f"{league_path}: the chosen operators need {needed} live {ROLE}s as parents, the league "
                          f"has {len(ranked)} ({', '.join(m.name for m in ranked) or 'none'}); "
                          "choose mutations only with --operator")
    return [(m.name, run_adapter(run, m.name).name) for m in ranked[:needed]]


def _progress(total: int, show: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc="retention", unit="pass", disable=not show)


class _Bench:
    """The engine, sandbox, learner, task sets and private adapter store one measurement uses."""

    def __init__(self, cfg: Any, base_path: str | Path, settings: RetentionSettings, samples: int,
                 stack: ExitStack) -> None:
        from transformers import AutoTokenizer

        self.cfg, self.base_path, self.settings, self.samples = cfg, base_path, settings, samples
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(base_path))
        except (OSError, ValueError) as err:
            raise PopulaError(f"base model {base_path}: cannot load its tokenizer ({err})") from None
        self.fmt = prompt_format(self.tokenizer)
        self.stops = stop_token_ids(self.tokenizer)
        self.context = context_limit(base_path)
        lora = cfg.lora
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="popula-retention-")))
        self.store = AdapterStore(root, base_path, rank=lora.rank, alpha=lora.alpha,
                                  target_modules=lora.target_modules, seed=cfg.seed)
        self.sandbox = stack.enter_context(build_sandbox(cfg))
        types = list(cfg.tasks.types)
        workers = cfg.sandbox.workers
        self.eval_tasks = generate_tasks(settings.tasks, seed=settings.seed, types=types, namespace=EVAL_NAMESPACE,
                                         workers=workers)
        ready = generate_tasks(settings.train_tasks, seed=settings.seed, types=types, namespace=TRAIN_NAMESPACE,
                               workers=workers)
        # Prompts that leave no room for an answer in the context are not trained on (as eval skips them).
        prompts = [encode_prompt(self.tokenizer, self.fmt.student_prompt(t)) for t in ready]
        fits = [self.context is None or self.context - len(ids) >= MIN_ANSWER_TOKENS for ids in prompts]
        self.train_tasks = [t for t, ok in zip(ready, fits) if ok]
        self.train_prompts = [ids for ids, ok in zip(prompts, fits) if ok]
        if not self.train_tasks:
            raise PopulaError(f"no training task fits the model's {self.context} positions; raise --train-tasks")
        runtime = runtime_of(cfg)
        self.engine = build_engine(cfg, base_path, runtime, max_adapters=2,
                                   max_model_len=self.context)
        stack.callback(self.engine.close)
        self.learner = build_learner(cfg, base_path, runtime, max_adapters=1)
        self._saved: tuple[Mapping[str, torch.Tensor], Any] | None = None

    # -- adapters ---------------------------------------------------------------------------------

    def read_run_adapter(self, run: Path, member: str, adapter: str) -> dict[str, torch.Tensor]:
        """A run adapter's latest weights, validated against this base (the run's store is not opened)."""
        ref = run_adapter(run, adapter)
        return read_adapter(ref.path, name=f"{member} ({adapter})", base_path=self.base_path,
                            max_rank=self.store.rank, exact_rank=self.store.rank,
                            target_modules=self.store.target_modules, exact_targets=True,
                            shapes=self.store.shapes).state_dict

    def _ref(self, state: Mapping[str, torch.Tensor]) -> Any:
        """The private store's version holding `state` (saved once per state object)."""
        if self._saved is None or self._saved[0] is not state:
            self._saved = (state, self.store.save("retention", state))
        return self._saved[1]

    # -- reward -----------------------------------------------------------------------------------

    def evaluate(self, state: Mapping[str, torch.Tensor]) -> float:
        return self.reward(self._ref(state))

    def reward(self, ref: Any) -> float:
        """Mean student reward of `ref` (None: bare base) on the held-out tasks, seeded."""
        g = self.cfg.generation
        report = evaluate(self.engine, self.tokenizer, self.eval_tasks, adapter=ref, sandbox=self.sandbox,
                          settings=EvalSettings(samples=self.samples, temperature=g.temperature, top_p=g.top_p,
                                                max_tokens=g.student_max_tokens, seed=self.settings.seed),
                          context=self.context)
        total = sum(s.correct * student_reward(True, True) + (s.answered - s.correct) * student_reward(True, False)
                    + (s.samples - s.answered) * student_reward(False, None) for s in report.per_task)
        return total / sum(s.samples for s in report.per_task)

    # -- update -----------------------------------------------------------------------------------

    def update(self, name: str, state: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        """One learner step of child `name` on fresh seeded rollouts of the training tasks."""
        if name in self.learner.adapters:
            self.learner.replace_adapter(name, state, reset_optimizer=False)
        else:
            self.learner.add_adapter(name, state)
        ref = self._ref(state)
        g = self.cfg.generation
        prompts = self.train_prompts
        requests = [GenerationRequest(prompt_ids=ids, adapter=ref, n=g.rollouts, temperature=g.temperature,
                                      top_p=g.top_p, max_tokens=self._room(ids),
                                      seed=derive_seed(self.settings.seed, RETENTION, step, i), stop_token_ids=self.stops)
                    for i, ids in enumerate(prompts)]
        results = self.engine.generate(requests)
        answers = [[self.fmt.parse_answer(s.text, t.type) for s in r.samples]
                   for t, r in zip(self.train_tasks, results)]
        correct = judge(self.train_tasks, answers, self.sandbox)
        rollouts = [Rollout(adapter=name, role="student", task_type=task.type, group=f"student:{i}",
                            prompt_ids=ids, completion_ids=sample.token_ids, sampler_logprobs=sample.logprobs,
                            adapter_version=ref.version, reward=student_reward(answer is not None, ok),
                            temperature=g.temperature)
                    for i, (task, ids, result) in enumerate(zip(self.train_tasks, prompts, results))
                    for sample, answer, ok in zip(result.samples, answers[i], correct[i])]
        self.learner.step(rollouts)
        return self.learner.adapter_state(name)

    def _room(self, ids: Sequence[int]) -> int:
        limit = self.cfg.generation.student_max_tokens
        return limit if self.context is None else min(limit, self.context - len(ids))

    def forget(self, name: str) -> None:
        if name in self.learner.adapters:
            self.learner.remove_adapter(name)


