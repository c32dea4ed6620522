"""One self-play step's game, phases 2-4 of docs/design.md § What the sources say: propose, validate, solve, judge.

This module plays; it does not learn. It turns the step's matches into `Proposal`s (one
per teacher completion) and `Attempt`s (one per student rollout), each carrying the
sampler's token ids, log-probabilities and adapter version for the learner, and the
verifier's verdict and reward; with `learner.student_demonstrations`, also one demonstration
(the task's known answer, written as a perfect student would) for each group no rollout
solved. Rewards come from `popula.rewards` only.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from popula.adapters import AdapterRef
from popula.complexity import ignores_input, written_multiline
from popula.config import Config
from popula.engines.base import Engine, GenerationRequest, Sample
from popula.league import Match, TaskResult
from popula.kinds import get_kind
from popula.novelty import niche_counts
from popula.records import TaskRecord, VerifyResult
from popula.rewards import (INVALID_TASK_REWARD, UNSOLVED_TASK_REWARD, capped_teacher_reward, shared_teacher_reward,
                            solve_rate, student_reward, teacher_reward)
from popula.run.buffer import TaskBuffer, task_depth
from popula.sandbox import SandboxPool
from popula.seeds import STUDENT, TEACHER, derive_seed
from popula.tasks.encoding import encode_prompt
from popula.tasks.prompts import PromptFormat


@dataclass
class Proposal:
    """One teacher completion and what became of it."""

    teacher: str
    task_type: str
    prompt_ids: list[int]
    sample: Sample
    adapter: AdapterRef
    task: TaskRecord | None  # None: no task could be parsed from the completion
    verdict: VerifyResult | None = None
    rhos: dict[str, float] = field(default_factory=dict)  # matched student -> solve rate
    checks: dict[str, float] = field(default_factory=dict)  # another student -> solve rate (solvable_by)
    reward: float = 0.0
    reference_depth: float | None = None  # mean AST depth of the references it was shown
    niche: int = 1  # 1 + its form's copies in the step and the novelty window (popula.novelty)

    @property
    def valid(self) -> bool:
        return self.verdict is not None and self.verdict.valid

    @property
    def solvable(self) -> bool:
        """Another student solved it (`rewards.solvable_by: population`): its zero floor does not apply."""
        return any(rho > 0 for rho in self.checks.values())


def teacher_group(proposal: Proposal, *, by_lines: bool) -> str:
    """The baseline group of a teacher's rollout: its task type, and with `by_lines` its shape.

    Why shapes: on a small base a multi-line program is rejected far more often than a
    one-liner (stray tokens), so a baseline over both teaches the teachers to stop writing
    multi-line programs, which is most of what held-out tasks ask. Compared only within its
    shape, a task is judged against the teachers' other attempts at that shape; an unparsed
    completion counts by its text's lines (`written_multiline`).
    """
    group = f"teacher:{proposal.task_type}"
    if not by_lines:
        return group
    text = proposal.task.program if proposal.task is not None else proposal.sample.text
    return f"{group}:{'multi' if written_multiline(text) else 'one'}"


@dataclass
class Attempt:
    """One student rollout on one valid task."""

    student: str
    proposal: int  # index into the step's proposals
    prompt_ids: list[int]
    sample: Sample
    adapter: AdapterRef
    answer: str | None  # None: malformed, no answer could be parsed
    correct: bool | None = None
    reward: float = 0.0
    check: bool = False  # answered by a student its teacher was not matched with (solvable_by)


@dataclass
class StepGame:
    proposals: list[Proposal]
    attempts: list[Attempt]
    verify_s: float = 0.0
    verified: int = 0
    resampled: int = 0  # (task, student) groups answered again (PlaySettings.resample_rollouts)
    checked: int = 0  # (task, other student) groups asked whether a task is solvable (solvable_by)
    # the known answers shown to groups no rollout solved (learner.student_demonstrations): trained
    # on with their group, never counted in a solve rate, a teacher's reward or the league
    demonstrations: list[Attempt] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class PlaySettings:
    """What a step plays with, named as in the config (`from_config`); keywords only."""

    types: Sequence[str]
    proposals_per_type: int
    references: int
    rollouts: int
    temperature: float  # students'
    resample_rollouts: int = 0  # generation.resample_rollouts: more answers for a group judged all alike
    teacher_temperature: float  # generation.proposal_temperature: teacher_temperature, else temperature
    top_p: float
    teacher_max_tokens: int
    student_max_tokens: int
    invalid_task_reward: float = INVALID_TASK_REWARD  # rewards.invalid_task
    novelty_window: int = 0  # rewards.novelty_window: 0 pays the design's reward unshared
    novelty_penalty: float = 0.0  # rewards.novelty_penalty: subtracted per repeat, down to the invalid reward
    refuse_trivial: bool = False  # rewards.refuse_trivial: a task answered without reading it is invalid
    blind_task_cap: float | None = None  # rewards.blind_task_cap: the most a task that ignores its input pays
    solved_task_reward: float | None = None  # rewards.solved_task: what a task every rollout solves pays
    unsolved_task_reward: float = UNSOLVED_TASK_REWARD  # rewards.unsolved_task: what a task no rollout solves pays
    solvable_by: str = "matched"  # rewards.solvable_by: who may show a task solvable
    seed_references: int = 0  # tasks.seed_references: references drawn from the seed tasks
    demonstrations: bool = False  # learner.student_demonstrations: an unsolved group is shown the known answer
    context: int | None = None  # tokens (prompt + completion) a request may hold; None: unlimited

    @classmethod
    def from_config(cls, cfg: Config, context: int | None = None) -> "PlaySettings":
        """The settings `cfg`'s tasks, generation and rewards sections give, each by its name."""
        tasks, gen, rewards = cfg.tasks, cfg.generation, cfg.rewards
        return cls(types=tasks.types, proposals_per_type=tasks.proposals_per_type, references=tasks.references,
                   seed_references=tasks.seed_references, rollouts=gen.rollouts,
                   resample_rollouts=gen.resample_rollouts, temperature=gen.temperature,
                   teacher_temperature=gen.proposal_temperature, top_p=gen.top_p,
                   teacher_max_tokens=gen.teacher_max_tokens, student_max_tokens=gen.student_max_tokens,
                   invalid_task_reward=rewards.invalid_task, novelty_window=rewards.novelty_window,
                   novelty_penalty=rewards.novelty_penalty, refuse_trivial=rewards.refuse_trivial,
                   blind_task_cap=rewards.blind_task_cap, solved_task_reward=rewards.solved_task,
                   unsolved_task_reward=rewards.unsolved_task,
                   solvable_by=rewards.solvable_by, demonstrations=cfg.learner.student_demonstrations,
                   context=context)


class SelfPlay:
    """Plays one step: the pieces it needs are handed in, so each stays testable alone."""

    def __init__(self, engine: Engine, sandbox: SandboxPool, fmt: PromptFormat, tokenizer: Any,
                 stop_ids: list[int], settings: PlaySettings) -> None:
        self.engine = engine
        self.sandbox = sandbox
        self.fmt = fmt
        self.tokenizer = tokenizer
        self.stop_ids = stop_ids
        self.settings = settings

    def play(self, step: int, matches: Sequence[Match], adapters: dict[str, AdapterRef],
             buffer: TaskBuffer, rng: np.random.Generator, seed: int) -> StepGame:
        """Phases 2-4 for all matches; `adapters` maps member name -> adapter version."""
        s = self.settings
        teachers = sorted({m.teacher for m in matches})
        students_of: dict[str, list[str]] = defaultdict(list)
        for m in matches:
            students_of[m.teacher].append(m.student)

        # (2) every teacher proposes, shown K references drawn from the buffer
        plan: list[tuple[str, str, list[int]]] = []
        ref_depths: list[float | None] = []
        for teacher in teachers:
            for task_type in s.types:
                for _ in range(s.proposals_per_type):
                    refs = buffer.sample(task_type, s.references, rng, anchors=s.seed_references)
                    ids = encode_prompt(self.tokenizer, self.fmt.teacher_prompt(task_type, refs))
                    while refs and not self._fits(ids, s.teacher_max_tokens):  # the first references give way
                        refs = refs[1:]
                        ids = encode_prompt(self.tokenizer, self.fmt.teacher_prompt(task_type, refs))
                    plan.append((teacher, task_type, ids))
                    ref_depths.append(float(np.mean([task_depth(r) for r in refs])) if refs else None)
        requests = [
            GenerationRequest(prompt_ids=ids, adapter=adapters[t], n=1, temperature=s.teacher_temperature, top_p=s.top_p,
                              max_tokens=s.teacher_max_tokens, seed=derive_seed(seed, TEACHER, step, i),
                              stop_token_ids=self.stop_ids)
            for i, (t, _, ids) in enumerate(plan)
        ]
        proposals = []
        for i, ((teacher, task_type, ids), result) in enumerate(zip(plan, self.engine.generate(requests, progress=True))):
            sample = result.samples[0]
            task = self.fmt.parse_proposal(sample.text, task_type)
            if task is not None:
                task.id = f"s{step}-{teacher}-{i}"
            proposals.append(Proposal(teacher, task_type, ids, sample, adapters[teacher], task,
                                      reference_depth=ref_depths[i]))

        # (3) the sandbox validates them and computes outputs
        game = StepGame(proposals, [])
        parsed = [p for p in proposals if p.task is not None]
        for p, verdict in zip(parsed, self._verify(game, [p.task for p in parsed])):
            p.verdict = verdict
            if verdict.valid:
                p.task.outputs = verdict.outputs
        prompt_of: dict[int, list[int]] = {}
        for i, p in enumerate(proposals):
            if p.valid:
                prompt_of[i] = encode_prompt(self.tokenizer, self.fmt.student_prompt(p.task))
                if not self._fits(prompt_of[i], s.student_max_tokens):
                    # a task no student can be shown (a huge input or output) is as useless as a broken one
                    p.verdict = dataclasses.replace(p.verdict, valid=False, reason="too_long", detail=(
                        f"student prompt of {len(prompt_of[i])} tokens + {s.student_max_tokens} answer tokens "
                        f"exceed the model's context of {s.context}"))
                elif s.refuse_trivial and (fault := get_kind(p.task_type).trivial_fault(p.task)):
                    p.verdict = dataclasses.replace(p.verdict, valid=False, reason="trivial", detail=fault)

        # (4) each matched student answers every valid task with n rollouts
        jobs = [(i, student) for i, p in enumerate(proposals) if p.valid for student in students_of[p.teacher]]
        game.attempts = self._answer(game, jobs, prompt_of, adapters, s.rollouts, seed, step, first_index=0)
        if s.resample_rollouts:
            # (4b) dynamic sampling: a group whose rewards are all equal teaches nothing; answer again
            alike = [(i, student) for (i, student), rewards in group_rewards(game.attempts).items()
                     if proposals[i].valid and len(set(rewards)) == 1]
            game.resampled = len(alike)
            game.attempts += self._answer(game, alike, prompt_of, adapters, s.resample_rollouts, seed, step,
                                          first_index=len(jobs))
        if s.solvable_by == "population":
            # (4c) a task its matched students never solved: can another student solve it?
            students = sorted({m.student for m in matches})
            solved = {a.proposal for a in game.attempts if a.correct}
            checks = [(i, other) for i, p in enumerate(proposals) if p.valid and i not in solved
                      for other in students if other not in students_of[p.teacher]]
            game.checked = len(checks)
            game.attempts += self._answer(game, checks, prompt_of, adapters, s.rollouts, seed, step,
                                          first_index=len(jobs) + game.resampled, check=True)
        # such a task is invalid after all: its teacher gets the invalid reward, and no
        # student learns from answers it judged
        game.attempts = [a for a in game.attempts if proposals[a.proposal].valid]
        _score(game, s.invalid_task_reward, s.solved_task_reward, s.unsolved_task_reward)
        if s.blind_task_cap is not None:
            _cap_blind(game, s.blind_task_cap)
        if s.novelty_window > 0:
            _share(game, buffer, s.novelty_window, s.novelty_penalty, s.invalid_task_reward)
        if s.demonstrations:
            game.demonstrations = self._demonstrate(game, prompt_of, adapters)
        return game

    def _demonstrate(self, game: StepGame, prompt_of: dict[int, list[int]],
                     adapters: dict[str, AdapterRef]) -> list[Attempt]:
        """For each (valid task, matched student) group no rollout solved (a solve rate of 0 in
        `Proposal.rhos`), the task's known answer as that student's completion (the kind's
        `corpus_answer`, in the format's `answer_completion`, then the stop token), judged right.
        One longer than a student may write is left out: the student could never have answered it."""
        shown = []
        for i, p in enumerate(game.proposals):
            unsolved = [student for student, rho in p.rhos.items() if rho == 0] if p.valid else []
            if not unsolved:
                continue
            answer = get_kind(p.task.type).corpus_answer(p.task)
            text = self.fmt.answer_completion(p.task, answer)
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + self.stop_ids[:1]
            if len(ids) > self.settings.student_max_tokens:
                continue
            for student in unsolved:
                sample = Sample(token_ids=ids, text=text, logprobs=[0.0] * len(ids), finish_reason="stop")
                shown.append(Attempt(student, i, prompt_of[i], sample, adapters[student], answer,
                                     correct=True, reward=student_reward(True, True)))
        return shown

    def _answer(self, game: StepGame, jobs: list[tuple[int, str]], prompt_of: dict[int, list[int]],
                adapters: dict[str, AdapterRef], n: int, seed: int, step: int, *, first_index: int,
                check: bool = False) -> list[Attempt]:
        """`n` rollouts of each (task, student) in `jobs`, judged; request j's sampling seed is
        the step's student seed `first_index + j`. A task whose program answered differently
        when judged gets that verdict (its attempts are dropped by the caller). `check`: the
        students were not matched with the tasks' teachers (`Attempt.check`)."""
        s, proposals = self.settings, game.proposals
        requests = [
            GenerationRequest(prompt_ids=prompt_of[i], adapter=adapters[student], n=n, temperature=s.temperature,
                              top_p=s.top_p, max_tokens=s.student_max_tokens,
                              seed=derive_seed(seed, STUDENT, step, first_index + j), stop_token_ids=self.stop_ids)
            for j, (i, student) in enumerate(jobs)
        ]
        attempts = []
        for (i, student), result in zip(jobs, self.engine.generate(requests, progress=True) if requests else []):
            for sample in result.samples:
                answer = self.fmt.parse_answer(sample.text, proposals[i].task_type)
                attempts.append(Attempt(student, i, prompt_of[i], sample, adapters[student], answer, check=check))
        to_judge = [a for a in attempts if a.answer is not None]
        judged = []
        for a in to_judge:
            record = copy.copy(proposals[a.proposal].task)
            record.answer = a.answer
            judged.append(record)
        for a, verdict in zip(to_judge, self._verify(game, judged)):
            a.correct = bool(verdict.correct)
            if not verdict.valid:  # its program answered differently when judged than when validated
                proposals[a.proposal].verdict = verdict
        return attempts

    def _fits(self, prompt_ids: list[int], max_tokens: int) -> bool:
        context = self.settings.context
        return context is None or len(prompt_ids) + max_tokens <= context

    def _verify(self, game: StepGame, records: list[TaskRecord]) -> list[VerifyResult]:
        if not records:
            return []
        start = time.perf_counter()
        verdicts = self.sandbox.verify(records)
        game.verify_s += time.perf_counter() - start
        game.verified += len(records)
        return verdicts


def group_rewards(attempts: list[Attempt]) -> dict[tuple[int, str], list[float]]:
    """Each (task, student) group's student rewards, as _score gives them."""
    groups: dict[tuple[int, str], list[float]] = defaultdict(list)
    for a in attempts:
        groups[(a.proposal, a.student)].append(student_reward(a.answer is not None, a.correct))
    return groups


def _score(game: StepGame, invalid_task_reward: float, solved_task_reward: float | None,
           unsolved_task_reward: float) -> None:
    """Solve rates per (task, student), then teacher and student rewards (docs/design.md § What the sources say).

    A checking student's solve rate (`Attempt.check`) only decides whether a task is
    solvable; its teacher is paid by the matched students' solve rates."""
    by_pair: dict[tuple[int, str, bool], list[bool]] = defaultdict(list)
    for a in game.attempts:
        a.reward = student_reward(a.answer is not None, a.correct)
        by_pair[(a.proposal, a.student, a.check)].append(bool(a.correct))
    for (i, student, check), correct in by_pair.items():
        (game.proposals[i].checks if check else game.proposals[i].rhos)[student] = solve_rate(correct)
    for p in game.proposals:
        if p.valid:
            p.reward = float(np.mean([teacher_reward(True, rho, solvable=p.solvable, solved=solved_task_reward,
                                                     unsolved=unsolved_task_reward)
                                      for rho in p.rhos.values()])) \
                if p.rhos else 0.0
        else:
            p.reward = teacher_reward(False, None, invalid=invalid_task_reward)


def _cap_blind(game: StepGame, cap: float) -> None:
    """A valid task whose program never reads its input (popula.complexity.ignores_input) pays
    its teacher at most `cap`. Its students keep their rewards: the probe and HumanEval hold
    constant functions too, so what is taken away is only the teacher's reason to pose them.
    The league still rates the outcome, as with sharing."""
    for p in game.proposals:
        if p.valid and ignores_input(p.task.program):
            p.reward = capped_teacher_reward(p.reward, cap)


def _share(game: StepGame, buffer: TaskBuffer, window: int, penalty: float = 0.0,
           floor: float = INVALID_TASK_REWARD) -> None:
    """Fitness sharing (popula.novelty): a valid task's reward divided by its niche count, less
    `penalty` per other member, never below `floor`.

    The niche is counted over every teacher's valid tasks of the type in this step, so in a
    population the teachers also compete with each other for new forms; the league still
    rates the undivided outcome (a repeat that beats the student is still a win).
    """
    for task_type in {p.task_type for p in game.proposals}:
        mine = [p for p in game.proposals if p.valid and p.task_type == task_type]
        recent = [r.program for r in buffer.newest(task_type, window)]
        for p, niche in zip(mine, niche_counts([p.task.program for p in mine], recent)):
            p.niche = niche
            p.reward = shared_teacher_reward(p.reward, niche, penalty=penalty, floor=floor)


def match_results(game: StepGame, match: Match) -> list[TaskResult]:
    """What the league rates for one match: each of the teacher's tasks, valid or not."""
    return [
        TaskResult(valid=p.valid, rho=p.rhos.get(match.student) if p.valid else None, solvable=p.solvable)
        for p in game.proposals
        if p.teacher == match.teacher and (not p.valid or match.student in p.rhos)
    ]

