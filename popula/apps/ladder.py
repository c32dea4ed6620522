"""The learning ladder: does the gradient path teach one adapter anything, role by role?

Self-play can fail to learn for many reasons at once (a bad curriculum, a one-sided
league, a bug in the update). The ladder removes them one at a time:

1. `student_rung`: one student adapter, a fixed set of tasks, the student reward. Its
   solve rate on those very tasks must rise within a few dozen steps, or the policy
   gradient does not reach the weights. Given a fresh draw of generated tasks at every step
   instead, the same rung is the curriculum's upper bound: a student taught on the task
   distribution itself, scored each step on tasks it has never seen. What it cannot gain on
   held-out tasks, no teacher's curriculum will.
2. `teacher_rung`: one teacher adapter proposing against a fixed student (the bare base),
   the teacher reward (-1 invalid, 0 unsolved, 1 - rho). Its valid rate must rise.

Only when both rungs climb is a flat self-play curve a fact about the curriculum rather
than about the learner. Each rung uses the run's own parts (engine, sandbox, learner,
adapter store, prompt format, rewards), so it tests what `popula run` runs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from popula.adapters import AdapterRef
from popula.adapters.store import AdapterStore
from popula.config import Config
from popula.engines.base import Engine, GenerationRequest
from popula.learner import Rollout
from popula.records import TaskRecord
from popula.rewards import solve_rate, student_reward, teacher_reward
from popula.run.parts.builders import build_learner
from popula.runtime import Runtime
from popula.sandbox import SandboxPool
from popula.seeds import LADDER, derive_seed
from popula.tasks.encoding import encode_prompt
from popula.tasks.prompts import prompt_format, stop_token_ids


@dataclass
class Rung:
    """What one rung measured: the figure per step (before each update) and after the last one."""

    name: str
    per_step: list[float] = field(default_factory=list)
    final: float | None = None
    malformed: list[float] = field(default_factory=list)  # student rung: share of unparseable answers per step
    adapter: AdapterRef | None = None  # the trained adapter's last saved version

    def record(self, step: int, steps: int, rate: float, log: Callable[[int, float], None] | None) -> bool:
        """Note the figure measured before update `step`; True when it is the final one (no update follows)."""
        if log is not None:
            log(step, rate)
        if step == steps:
            self.final = rate
            return True
        self.per_step.append(rate)
        return False


class Ladder:
    """One adapter trained alone with the run's parts: `student_rung` and `teacher_rung` share it."""

    def __init__(self, cfg: Config, base_path: str | Path, work_dir: Path, *, engine: Engine, sandbox: SandboxPool,
                 runtime: Runtime) -> None:
        """`runtime`: the learner's device and dtype, the engine's too (they must agree)."""
        from transformers import AutoTokenizer

        self.cfg = cfg
        self.engine = engine
        self.sandbox = sandbox
        self.tokenizer = AutoTokenizer.from_pretrained(str(base_path))
        self.fmt = prompt_format(self.tokenizer)
        self.stops = stop_token_ids(self.tokenizer)
        self.store = AdapterStore(work_dir / "adapters", base_path, rank=cfg.lora.rank, alpha=cfg.lora.alpha,
                                  target_modules=cfg.lora.target_modules, seed=cfg.seed)
        self.learner = build_learner(cfg, base_path, runtime, max_adapters=2)
        self._calls = 0

    def _adapter(self, name: str):
        ref = self.store.create(name)
        self.learner.add_adapter(name, self.store.load(ref).state_dict)
        return ref

    def _generate(self, prompts: Sequence[list[int]], adapter, n: int, max_tokens: int,
                  temperature: float | None = None):
        g = self.cfg.generation
        self._calls += 1
        temperature = g.temperature if temperature is None else temperature
        requests = [GenerationRequest(prompt_ids=ids, adapter=adapter, n=n, temperature=temperature, top_p=g.top_p,
                                      max_tokens=max_tokens, seed=derive_seed(self.cfg.seed, LADDER, self._calls, i),
                                      stop_token_ids=self.stops)
                     for i, ids in enumerate(prompts)]
        return self.engine.generate(requests)

    def _solve(self, tasks: Sequence[TaskRecord], adapter, n: int) -> tuple[list[list[int]], list[Any], list[list[bool | None]]]:
        """n answers per task: (prompt ids, generation results, per-sample correctness; None = malformed)."""
        prompts = [encode_prompt(self.tokenizer, self.fmt.student_prompt(t)) for t in tasks]
        results = self._generate(prompts, adapter, n, self.cfg.generation.student_max_tokens)
        judged, where = [], []
        correct: list[list[bool | None]] = []
        for i, (task, result) in enumerate(zip(tasks, results)):
            row: list[bool | None] = []
            for j, sample in enumerate(result.samples):
                answer = self.fmt.parse_answer(sample.text, task.type)
                row.append(None)
                if answer is not None:
                    record = copy.copy(task)
                    record.answer = answer
                    judged.append(record)
                    where.append((i, j))
            correct.append(row)
        for (i, j), verdict in zip(where, self.sandbox.verify(judged) if judged else []):
            correct[i][j] = bool(verdict.correct)
        return prompts, results, correct

    def student_rung(self, tasks: Sequence[TaskRecord] | Callable[[int], Sequence[TaskRecord]], steps: int,
                     log: Callable[[int, float], None] | None = None) -> Rung:
        """Train a fresh student for `steps` updates; its solve rate per step and after.

        `tasks`: the same tasks at every step, or a function from the step to that step's
        tasks (a fresh draw each step: the figure is then a solve rate on unseen tasks)."""
        if callable(tasks):
            draw, rung = tasks, Rung("solve rate, unseen tasks")
        else:
            draw, rung = (lambda step: tasks), Rung("student solve rate")
        ref = self._adapter("student")
        n = self.cfg.generation.rollouts
        for step in range(steps + 1):
            tasks_now = draw(step)
            prompts, results, correct = self._solve(tasks_now, ref, n)
            rate = float(np.mean([bool(c) for row in correct for c in row]))
            rung.malformed.append(float(np.mean([c is None for row in correct for c in row])))
            if rung.record(step, steps, rate, log):
                break
            rollouts = [Rollout(adapter="student", role="student", task_type=t.type, group=f"task{i}",
                                prompt_ids=ids, completion_ids=s.token_ids, sampler_logprobs=s.logprobs,
                                adapter_version=ref.version, reward=student_reward(c is not None, c),
                                temperature=self.cfg.generation.temperature)
                        for i, (t, ids, res, row) in enumerate(zip(tasks_now, prompts, results, correct))
                        for s, c in zip(res.samples, row)]
            self.learner.step(rollouts)
            ref = self.store.save("student", self.learner.adapter_state("student"))
        rung.adapter = ref
        return rung

    def teacher_rung(self, references: Sequence[TaskRecord], steps: int, proposals: int,
                     rng: np.random.Generator, log: Callable[[int, float], None] | None = None) -> Rung:
        """Train a fresh teacher for `steps` updates against the bare base as its student; valid rate per step."""
        rung = Rung("teacher valid rate")
        ref = self._adapter("teacher")
        types = self.cfg.tasks.types
        pools = {t: [r for r in references if r.type == t] for t in types}
        k = self.cfg.tasks.references
        for step in range(steps + 1):
            plan = []
            for i in range(proposals):
                task_type = types[i % len(types)]
                pool = pools[task_type]
                picks = rng.choice(len(pool), size=min(k, len(pool)), replace=False) if pool else []
                plan.append((task_type, encode_prompt(self.tokenizer, self.fmt.teacher_prompt(
                    task_type, [pool[j] for j in picks]))))
            results = self._generate([ids for _, ids in plan], ref, 1, self.cfg.generation.teacher_max_tokens,
                                     self.cfg.generation.proposal_temperature)
            tasks = [self.fmt.parse_proposal(r.samples[0].text, t) for (t, _), r in zip(plan, results)]
            parsed = [i for i, t in enumerate(tasks) if t is not None]
            valid = [False] * len(tasks)
            for i, verdict in zip(parsed, self.sandbox.verify([tasks[i] for i in parsed]) if parsed else []):
                valid[i] = verdict.valid
                if verdict.valid:
                    tasks[i].outputs = verdict.outputs
            if rung.record(step, steps, float(np.mean(valid)), log):
                break
            good = [i for i in range(len(tasks)) if valid[i]]
            _, _, correct = self._solve([tasks[i] for i in good], None, self.cfg.generation.rollouts)
            rho = dict(zip(good, (solve_rate([bool(c) for c in row]) for row in correct)))
            rollouts = [Rollout(adapter="teacher", role="teacher", task_type=t, group=f"teacher:{t}", prompt_ids=ids,
                                completion_ids=r.samples[0].token_ids, sampler_logprobs=r.samples[0].logprobs,
                                adapter_version=ref.version,
                                reward=teacher_reward(valid[i], rho.get(i), invalid=self.cfg.rewards.invalid_task),
                                temperature=self.cfg.generation.proposal_temperature)
                        for i, ((t, ids), r) in enumerate(zip(plan, results))]
            self.learner.step(rollouts)
            ref = self.store.save("teacher", self.learner.adapter_state("teacher"))
        rung.adapter = ref
        return rung
