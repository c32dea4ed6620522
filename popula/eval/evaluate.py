"""Held-out evaluation: generate answers to task records, judge them in the sandbox, report pass@k.

    report = evaluate(engine, tokenizer, records, adapter=ref, settings=EvalSettings(samples=4))
    report.overall.pass_at_1, report.by_type["code_f"].pass_at_k

The pieces are separate so each can be used (and tested) alone:
- `pass_at_k(n, c, k)`: the unbiased estimator of Chen et al. (2021): the chance that at
  least one of k samples drawn without replacement from n, c of them correct, is correct.
- `prepare_tasks`: computes missing outputs in the sandbox and drops invalid tasks (counted),
  so a third-party benchmark converted without outputs still works.
- `judge`: turns answer strings (None = malformed) into correct/incorrect via the sandbox.
- `summarize`: per-task counts -> pass@1 and pass@k per task type and overall.
- `evaluate`: the whole loop on an engine that is already loaded (what the run loop and
  benchmarks/learning.py call, sharing their engine and sandbox); `evaluate_adapters`, the
  same for several adapters in one generate call (`popula eval RUN_DIR`'s population report).
- `popula.apps.targets` (`resolve_target`, `evaluate_target`): what `popula eval
  RUN_DIR|MODEL` needs on top: which base, engine and adapter a run directory or a model
  spec means. It sits above the run's builders; this package sits below the run loop.

Sampling settings and their defaults: `popula.eval.settings.EvalSettings`.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

from popula.adapters import AdapterRef

from popula.engines.base import Engine, GenerationRequest
from popula.errors import PopulaError
from popula.eval.passk import pass_at_k
from popula.eval.settings import EvalSettings
from popula.kinds import task_types
from popula.records import TaskRecord
from popula.sandbox import SandboxPool
from popula.seeds import EVAL, derive_seed
from popula.tasks.encoding import encode_prompt
from popula.tasks.prompts import prompt_format, stop_token_ids

DEFAULT_MAX_TOKENS = {"compact": 128, "instruct": 1024}  # when no run config says otherwise
_MIN_ANSWER_TOKENS = 8  # a prompt that leaves less room than this in the context is not attempted


# ---------------------------------------------------------------------------------------------
# Scoring


@dataclass
class TaskScore:
    """One task's outcome over its samples: `answered` were well-formed, `correct` were right."""

    id: str
    type: str
    samples: int
    answered: int
    correct: int
    attempted: bool = True  # False: the prompt did not fit the model's context


@dataclass
class GroupScore:
    """Mean pass@1 and pass@k over a group of tasks, and the share of well-formed answers."""

    tasks: int
    pass_at_1: float
    pass_at_k: float
    answered_rate: float


@dataclass
class Measurement:
    """How tasks were measured: the model and engine, the sampling, the task file. What one
    model's report and a population's share (`EvalReport`, `popula.eval.population.PopulationReport`)."""

    model: str
    engine: str
    samples: int
    k: int
    temperature: float
    top_p: float
    max_tokens: int
    tasks_file: str | None
    tasks_in_file: int
    skipped: dict[str, int]  # invalid tasks (by sandbox reason) that were not evaluated
    not_attempted: int  # valid tasks whose prompt did not fit the context (scored as failures)

    def measurement(self) -> dict[str, Any]:
        """These fields alone, by name."""
        return {f.name: getattr(self, f.name) for f in fields(Measurement)}


@dataclass(kw_only=True)
class EvalReport(Measurement):
    """What `popula eval --json` prints: one object, stable keys."""

    adapter: str | None
    overall: GroupScore
    by_type: dict[str, GroupScore]
    wall_s: float = 0.0  # outputs, generation and judging, not model loading
    per_task: list[TaskScore] = field(default_factory=list)
    # every task's raw answers and their verdicts ({id, type, answers, correct}), in task order:
    # what `popula eval --answers` writes; not part of the report's JSON
    answers: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["answers"]
        return {"model": data.pop("model"), "adapter": data.pop("adapter"), **data}


def summarize(scores: Sequence[TaskScore], k: int) -> tuple[GroupScore, dict[str, GroupScore]]:
    """pass@1 and pass@k averaged over tasks, overall and per task type (types present only)."""

    def group(items: Sequence[TaskScore]) -> GroupScore:
        if not items:
            return GroupScore(0, 0.0, 0.0, 0.0)
        p1 = sum(pass_at_k(s.samples, s.correct, 1) for s in items) / len(items)
        pk = sum(pass_at_k(s.samples, s.correct, k) for s in items) / len(items)
        answered = sum(s.answered for s in items) / sum(s.samples for s in items)
        return GroupScore(len(items), p1, pk, answered)

    by_type = {t: group([s for s in scores if s.type == t]) for t in task_types() if any(s.type == t for s in scores)}
    return group(scores), by_type


# ---------------------------------------------------------------------------------------------
# Sandbox steps


def prepare_tasks(records: Sequence[TaskRecord], sandbox: SandboxPool) -> tuple[list[TaskRecord], Counter[str]]:
    """Tasks ready to pose: outputs filled by the sandbox where missing, invalid ones dropped.

    Returns (ready tasks, count of dropped tasks by rejection reason). Answers in the file
    are ignored (eval judges the model's answers, not the file's). Records that already
    carry outputs are trusted, as `popula verify` does.
    """
    tasks = [_without_answer(r) for r in records]
    todo = [t for t in tasks if not t.outputs]
    skipped: Counter[str] = Counter()
    dropped: set[int] = set()
    if todo:
        for task, verdict in zip(todo, sandbox.verify(todo)):
            if verdict.valid:
                task.outputs = list(verdict.outputs)
            else:
                skipped[verdict.reason or "invalid"] += 1
                dropped.add(id(task))
    return [t for t in tasks if id(t) not in dropped], skipped


def _without_answer(record: TaskRecord) -> TaskRecord:
    clone = copy.copy(record)
    clone.answer = None
    clone.outputs = list(record.outputs)
    return clone


def judge(tasks: Sequence[TaskRecord], answers: Sequence[Sequence[str | None]], sandbox: SandboxPool) -> list[list[bool]]:
    """correct[i][j]: is answer j to task i right? A None (malformed) answer is wrong, unjudged."""
    jobs: list[tuple[int, int]] = []
    records: list[TaskRecord] = []
    for i, (task, task_answers) in enumerate(zip(tasks, answers, strict=True)):
        for j, answer in enumerate(task_answers):
            if answer is not None:
                record = copy.copy(task)
                record.answer = answer
                records.append(record)
                jobs.append((i, j))
    correct = [[False] * len(a) for a in answers]
    if records:
        for (i, j), verdict in zip(jobs, sandbox.verify(records)):
            correct[i][j] = bool(verdict.correct)
    return correct


# ---------------------------------------------------------------------------------------------
# Generation


def context_limit(base_path: str | Path) -> int | None:
    """The base's positions (max_position_embeddings), None when its config does not say."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(base_path))
    except (OSError, ValueError) as err:
        raise PopulaError(f"base model {base_path}: cannot read its config ({err})") from None
    return getattr(config, "max_position_embeddings", None)


def engine_context(engine: Engine) -> int | None:
    """Prompt + completion tokens an engine can hold: vLLM's max_model_len, or the torch engine's positions."""
    limit = getattr(engine, "max_model_len", None)
    if limit is None:
        limit = getattr(getattr(engine, "config", None), "max_position_embeddings", None)
    return int(limit) if isinstance(limit, int) else None


def evaluate(engine: Engine, tokenizer: Any, records: Sequence[TaskRecord], *, adapter: AdapterRef | None,
             sandbox: SandboxPool, settings: EvalSettings = EvalSettings(), context: int | None = None,
             progress: bool = False, model: str = "", engine_name: str = "", tasks_file: str | None = None,
             log: Callable[[str], None] | None = None) -> EvalReport:
    """Pose every valid task to `adapter` (None: the bare base) `settings.samples` times and score it.

    `context` (the model's positions; default: what the engine reports) clips max_tokens per
    prompt so prompt + answer fits; a prompt that leaves no room is not attempted and scores
    as a failure. `progress`
    shows the engine's tqdm bar. The engine and sandbox are the caller's: nothing is closed.
    """
    return evaluate_adapters(engine, tokenizer, records, adapters=[adapter], sandbox=sandbox, settings=settings,
                             context=context, progress=progress, model=model, engine_name=engine_name,
                             tasks_file=tasks_file, log=log)[0]


def evaluate_adapters(engine: Engine, tokenizer: Any, records: Sequence[TaskRecord], *,
                      adapters: Sequence[AdapterRef | None], sandbox: SandboxPool,
                      settings: EvalSettings = EvalSettings(), context: int | None = None, progress: bool = False,
                      model: str = "", engine_name: str = "", tasks_file: str | None = None,
                      log: Callable[[str], None] | None = None) -> list[EvalReport]:
    """`evaluate` for several adapters at once: one report per adapter, in order, from one
    `engine.generate` call (one request per task and adapter) and one round of judging.

    Every adapter gets the same tasks, prompts, token limits and per-task seeds, so each
    report is what `evaluate` gives that adapter alone (engines seed each request on its own).
    An engine with fewer adapter slots than `adapters` serves them in waves itself.
    `wall_s` is the whole evaluation's, shared by every report.
    """
    if not adapters:
        raise ValueError("evaluate_adapters needs at least one adapter (None: the bare base)")
    start = time.perf_counter()
    context = context if context is not None else engine_context(engine)
    fmt = prompt_format(tokenizer)
    stops = stop_token_ids(tokenizer)
    tasks, skipped = prepare_tasks(records, sandbox)
    if skipped and log is not None:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(skipped.items()))
        log(f"skipped {sum(skipped.values())} invalid task(s) ({reasons})")
    temperature = settings.sampling_temperature
    max_tokens = settings.max_tokens or DEFAULT_MAX_TOKENS[fmt.name]
    posed: list[tuple[int, list[int], int, int]] = []  # (task index, prompt ids, answer room, seed)
    for i, task in enumerate(tasks):
        ids = encode_prompt(tokenizer, fmt.student_prompt(task))
        room = max_tokens if context is None else min(max_tokens, context - len(ids))
        if room < min(_MIN_ANSWER_TOKENS, max_tokens):
            continue
        posed.append((i, ids, room, derive_seed(settings.seed, EVAL, index=i)))
    not_attempted = len(tasks) - len(posed)
    if not_attempted and log is not None:
        log(f"{not_attempted} task(s) have prompts too long for the model's {context} positions; scored as failures")
    requests = [GenerationRequest(prompt_ids=ids, adapter=adapter, n=settings.samples, temperature=temperature,
                                  top_p=settings.top_p, max_tokens=room, seed=seed, stop_token_ids=stops)
                for adapter in adapters for _, ids, room, seed in posed]
    results = engine.generate(requests, progress=progress) if requests else []
    # answers[a][i]: adapter a's answers to task i (None: malformed, or not attempted); texts: as generated
    answers: list[list[list[str | None]]] = [[[None] * settings.samples for _ in tasks] for _ in adapters]
    texts: list[list[list[str]]] = [[[] for _ in tasks] for _ in adapters]
    for n, result in enumerate(results):
        a, j = divmod(n, len(posed))
        i = posed[j][0]
        answers[a][i] = [fmt.parse_answer(sample.text, tasks[i].type) for sample in result.samples]
        texts[a][i] = [sample.text for sample in result.samples]
    flat = judge(list(tasks) * len(adapters), [row for rows in answers for row in rows], sandbox)
    attempted = {i for i, *_ in posed}
    reports = []
    for a, adapter in enumerate(adapters):
        correct = flat[a * len(tasks):(a + 1) * len(tasks)]
        scores = [TaskScore(t.id, t.type, settings.samples, sum(x is not None for x in answers[a][i]),
                            sum(correct[i]), attempted=i in attempted)
                  for i, t in enumerate(tasks)]
        overall, by_type = summarize(scores, settings.samples)
        reports.append(EvalReport(
            model=model, adapter=adapter.name if adapter is not None else None, engine=engine_name,
            samples=settings.samples, k=settings.samples, temperature=temperature, top_p=settings.top_p,
            max_tokens=max_tokens, tasks_file=tasks_file, tasks_in_file=len(records),
            skipped=dict(sorted(skipped.items())), not_attempted=not_attempted, overall=overall, by_type=by_type,
            per_task=scores, answers=[{"id": t.id, "type": t.type, "answers": texts[a][i], "correct": correct[i]}
                                      for i, t in enumerate(tasks)]))
    wall = round(time.perf_counter() - start, 3)
    for report in reports:
        report.wall_s = wall
    return reports


def format_report(report: EvalReport) -> str:
    """The human table: one row per task type, then the overall row."""
    who = report.model + (f" (adapter {report.adapter})" if report.adapter else " (bare base)")
    lines = [
        f"eval {who} on {report.tasks_file or 'tasks'}: {report.samples} sample(s) per task, "
        f"temperature {report.temperature:g}, top_p {report.top_p:g}, max_tokens {report.max_tokens}",
        f"{'type':<8} {'tasks':>5} {'pass@1':>7} {f'pass@{report.k}':>7} {'answered':>8}",
    ]
    rows = list(report.by_type.items()) + [("overall", report.overall)]
    for name, g in rows:
        lines.append(f"{name:<8} {g.tasks:>5} {g.pass_at_1:>7.3f} {g.pass_at_k:>7.3f} {g.answered_rate:>8.1%}")
    if report.skipped:
        reasons = ", ".join(f"{why} {n}" for why, n in report.skipped.items())
        lines.append(f"skipped {sum(report.skipped.values())} invalid task(s): {reasons}")
    if report.not_attempted:
        lines.append(f"{report.not_attempted} task(s) not attempted (prompt longer than the context), counted as failures")
    return "\n".join(lines)

