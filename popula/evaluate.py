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
  benchmarks/learning.py call, sharing their engine and sandbox).
- `resolve_target` + `evaluate_target`: what `popula eval RUN_DIR|MODEL` needs on top:
  which base, engine and adapter a run directory or a model spec means.

Sampling defaults: one sample is decoded greedily (temperature 0), so pass@1 is a
deterministic property of the weights; several samples use temperature 0.8, the value
HumanEval's pass@k numbers are usually quoted at.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from popula.engines.base import AdapterRef, Engine, GenerationRequest
from popula.errors import PopulaError
from popula.run.rundir import member_adapter
from popula.tasks.records import TASK_TYPES, TaskRecord

GREEDY_TEMPERATURE = 0.0  # default for one sample per task
SAMPLING_TEMPERATURE = 0.8  # default for several samples per task
DEFAULT_MAX_TOKENS = {"compact": 128, "instruct": 1024}  # when no run config says otherwise
_MIN_ANSWER_TOKENS = 8  # a prompt that leaves less room than this in the context is not attempted


# ---------------------------------------------------------------------------------------------
# Scoring


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k).

    Computed as a product, 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the huge
    binomials. Needs 1 <= k <= n and 0 <= c <= n.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


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
class EvalReport:
    """What `popula eval --json` prints: one object, stable keys."""

    model: str
    adapter: str | None
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
    overall: GroupScore
    by_type: dict[str, GroupScore]
    wall_s: float = 0.0  # outputs, generation and judging, not model loading
    per_task: list[TaskScore] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(scores: Sequence[TaskScore], k: int) -> tuple[GroupScore, dict[str, GroupScore]]:
    """pass@1 and pass@k averaged over tasks, overall and per task type (types present only)."""

    def group(items: Sequence[TaskScore]) -> GroupScore:
        if not items:
            return GroupScore(0, 0.0, 0.0, 0.0)
        p1 = sum(pass_at_k(s.samples, s.correct, 1) for s in items) / len(items)
        pk = sum(pass_at_k(s.samples, s.correct, k) for s in items) / len(items)
        answered = sum(s.answered for s in items) / sum(s.samples for s in items)
        return GroupScore(len(items), p1, pk, answered)

    by_type = {t: group([s for s in scores if s.type == t]) for t in TASK_TYPES if any(s.type == t for s in scores)}
    return group(scores), by_type


# ---------------------------------------------------------------------------------------------
# Sandbox steps


def prepare_tasks(records: Sequence[TaskRecord], sandbox: Any) -> tuple[list[TaskRecord], Counter[str]]:
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


def judge(tasks: Sequence[TaskRecord], answers: Sequence[Sequence[str | None]], sandbox: Any) -> list[list[bool]]:
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


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Prompt ids as the base saw them in training: BOS (when the tokenizer has one) then the text.

    The tiny base was trained with `<|end|>` (its BOS and EOS) before every prompt; a chat
    template that already starts with the BOS text does not get a second one.
    """
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    bos = tokenizer.bos_token_id
    if bos is None or (tokenizer.bos_token and text.startswith(tokenizer.bos_token)):
        return ids
    return [bos] + ids


@dataclass(frozen=True)
class EvalSettings:
    """How answers are sampled. `temperature=None` picks greedy for 1 sample, 0.8 for more."""

    samples: int = 1
    temperature: float | None = None
    top_p: float = 1.0
    # None: DEFAULT_MAX_TOKENS of the prompt format, for a run's adapter and a bare base alike,
    # so that comparing the two compares models, not answer budgets
    max_tokens: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise PopulaError(f"--samples must be at least 1, got {self.samples}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise PopulaError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if self.temperature is not None and self.temperature < 0:
            raise PopulaError(f"--temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise PopulaError(f"--top-p must be in (0, 1], got {self.top_p}")

    @property
    def sampling_temperature(self) -> float:
        if self.temperature is not None:
            return self.temperature
        return GREEDY_TEMPERATURE if self.samples == 1 else SAMPLING_TEMPERATURE


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
             sandbox: Any, settings: EvalSettings = EvalSettings(), context: int | None = None,
             progress: bool = False, model: str = "", engine_name: str = "", tasks_file: str | None = None,
             log: Callable[[str], None] | None = None) -> EvalReport:
    """Pose every valid task to `adapter` (None: the bare base) `settings.samples` times and score it.

    `context` (the model's positions; default: what the engine reports) clips max_tokens per
    prompt so prompt + answer fits; a prompt that leaves no room is not attempted and scores
    as a failure. `progress`
    shows the engine's tqdm bar. The engine and sandbox are the caller's: nothing is closed.
    """
    from popula.tasks.prompts import prompt_format, stop_token_ids

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
    requests: list[GenerationRequest] = []
    posed: list[int] = []
    for i, task in enumerate(tasks):
        ids = encode_prompt(tokenizer, fmt.student_prompt(task))
        room = max_tokens if context is None else min(max_tokens, context - len(ids))
        if room < min(_MIN_ANSWER_TOKENS, max_tokens):
            continue
        posed.append(i)
        requests.append(GenerationRequest(prompt_ids=ids, adapter=adapter, n=settings.samples,
                                          temperature=temperature, top_p=settings.top_p, max_tokens=room,
                                          seed=(settings.seed * 1_000_003 + i) % (2**31 - 1), stop_token_ids=stops))
    not_attempted = len(tasks) - len(posed)
    if not_attempted and log is not None:
        log(f"{not_attempted} task(s) have prompts too long for the model's {context} positions; scored as failures")
    results = engine.generate(requests, progress=progress) if requests else []
    answers: list[list[str | None]] = [[None] * settings.samples for _ in tasks]
    for i, result in zip(posed, results):
        answers[i] = [fmt.parse_answer(sample.text, tasks[i].type) for sample in result.samples]
    correct = judge(tasks, answers, sandbox)
    attempted = set(posed)
    scores = [TaskScore(t.id, t.type, settings.samples, sum(a is not None for a in answers[i]), sum(correct[i]),
                        attempted=i in attempted)
              for i, t in enumerate(tasks)]
    overall, by_type = summarize(scores, settings.samples)
    return EvalReport(model=model, adapter=adapter.name if adapter is not None else None, engine=engine_name,
                      samples=settings.samples, k=settings.samples, temperature=temperature, top_p=settings.top_p,
                      max_tokens=max_tokens, tasks_file=tasks_file, tasks_in_file=len(records),
                      skipped=dict(sorted(skipped.items())), not_attempted=not_attempted, overall=overall,
                      by_type=by_type, wall_s=round(time.perf_counter() - start, 3), per_task=scores)


# ---------------------------------------------------------------------------------------------
# What `popula eval RUN_DIR|MODEL` means


@dataclass
class EvalTarget:
    """A base model, the engine to serve it, and the adapter to evaluate (None: the bare base)."""

    label: str  # what the report calls the model: the run dir or the model spec
    base_path: Path | str
    engine: str
    adapter: AdapterRef | None
    rank: int  # the adapter's LoRA rank (1 for the bare base)
    target_modules: tuple[str, ...] | None  # the adapter's target modules (None: bare base)


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / "config.yaml").is_file()


def resolve_target(spec: str, *, adapter: str | None = None, engine: str | None = None,
                   snapshot_dir: Path | None = None) -> EvalTarget:
    """Read RUN_DIR|MODEL (and --adapter) into an EvalTarget; PopulaError names what is missing.

    A run directory (has config.yaml) uses its config's base model and engine; its adapter
    is `adapter` (an adapter name, or a league member name) or else the best student by
    conservative TrueSkill rating in league.json. Anything else is a model spec (`tiny`, a
    model directory, a Hugging Face id), with `adapter` optionally a PEFT directory.

    The adapter's files are copied into `snapshot_dir` (when given) first, so a run that
    saves a newer version meanwhile cannot change or delete what is being evaluated.
    """
    from popula.model.base import resolve_base_model

    path = Path(spec).expanduser()
    if is_run_dir(path):
        from popula.config import load_config

        cfg = load_config(path / "config.yaml")
        base = resolve_base_model(cfg.base_model)
        name = adapter if adapter is not None else best_student(path)
        ref = run_adapter(path, name)
        if snapshot_dir is not None:
            ref = _snapshot(ref, snapshot_dir)
        info = _adapter_config(ref.path, ref.name)
        return EvalTarget(str(path), base, engine or cfg.engine, ref, int(info["r"]), _targets(info))
    if path.is_dir() and not (path / "config.json").is_file():
        raise PopulaError(f"{spec}: neither a run directory (no config.yaml) nor a model directory (no config.json)")
    if not path.exists() and spec.startswith(("/", ".", "~")):
        raise PopulaError(f"{spec}: no such run directory or model directory")
    base = resolve_base_model(spec)
    ref = None
    rank, targets = 1, None
    if adapter is not None:
        adapter_path = Path(adapter).expanduser()
        if not adapter_path.is_dir():
            raise PopulaError(f"--adapter {adapter}: with a model (not a run directory) the adapter must be a "
                              "PEFT directory, and this one does not exist")
        ref = AdapterRef(name=adapter_path.name, version=0, uid=1, path=adapter_path)
        if snapshot_dir is not None:
            ref = _snapshot(ref, snapshot_dir)
        info = _adapter_config(ref.path, ref.name)
        rank, targets = int(info["r"]), _targets(info)
    return EvalTarget(spec, base, engine or "torch", ref, rank, targets)


def best_student(run_dir: Path) -> str:
    """The live student with the best conservative rating (mu - 3 sigma) in RUN_DIR/league.json."""
    from popula.league import League

    ranked = League.load(run_dir / "league.json").ranked("student")
    if not ranked:
        raise PopulaError(f"{run_dir / 'league.json'}: the league has no live student to evaluate")
    return ranked[0].name


def run_adapter(run_dir: Path, name: str) -> AdapterRef:
    """The latest version of adapter `name` (or of league member `name`'s adapter) in a run dir.

    Read from RUN_DIR/adapters/store.json without opening an AdapterStore: opening one
    prunes versions, which must never happen to a run that is still going.
    """
    root = run_dir / "adapters"
    state_path = root / "store.json"
    try:
        latest = json.loads(state_path.read_text())["latest"]
    except FileNotFoundError:
        raise PopulaError(f"{state_path}: no adapter store in this run directory") from None
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise PopulaError(f"{state_path}: unreadable adapter store state ({err!r})") from None
    adapter = name if name in latest else member_adapter(run_dir, name)
    if adapter not in latest:
        raise PopulaError(f"--adapter {name}: no such adapter in {root} (known: {', '.join(sorted(latest)) or 'none'})")
    entry = latest[adapter]
    return AdapterRef(name=adapter, version=int(entry["version"]), uid=int(entry["uid"]), path=root / adapter)


def _snapshot(ref: AdapterRef, directory: Path) -> AdapterRef:
    from popula.adapters import CONFIG_FILE, WEIGHTS_FILE

    target = directory / f"{ref.name}-v{ref.version}"
    target.mkdir(parents=True, exist_ok=True)
    for fname in (CONFIG_FILE, WEIGHTS_FILE):
        try:
            shutil.copyfile(ref.path / fname, target / fname)
        except FileNotFoundError:
            raise PopulaError(f"adapter {ref.name!r} ({ref.path}): {fname} is missing") from None
    return AdapterRef(ref.name, ref.version, ref.uid, target)


def _adapter_config(path: Path, name: str) -> dict[str, Any]:
    from popula.adapters import CONFIG_FILE

    try:
        info = json.loads((path / CONFIG_FILE).read_text())
    except FileNotFoundError:
        raise PopulaError(f"adapter {name!r} ({path}): {CONFIG_FILE} is missing") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PopulaError(f"adapter {name!r} ({path}): {CONFIG_FILE} is not valid JSON ({err})") from None
    if not isinstance(info, dict) or not isinstance(info.get("r"), int) or info["r"] < 1:
        raise PopulaError(f"adapter {name!r} ({path}): {CONFIG_FILE} field r must be a positive integer")
    return info


def _targets(info: dict[str, Any]) -> tuple[str, ...]:
    targets = info.get("target_modules") or ()
    return (targets,) if isinstance(targets, str) else tuple(sorted(targets))


def evaluate_target(spec: str, tasks_path: str | Path, *, adapter: str | None = None, engine: str | None = None,
                    settings: EvalSettings = EvalSettings(), workers: int = 2,
                    progress: bool = False, log: Callable[[str], None] | None = None) -> EvalReport:
    """`popula eval` as a function: resolve RUN_DIR|MODEL, load the engine, evaluate, clean up.

    `settings.max_tokens` None means 128 for the tiny base's compact prompts and 1024 for
    instruction-tuned models, which reason first -- for a run's adapter as for a bare base,
    so that the two are scored under the same settings.
    """
    from transformers import AutoTokenizer

    from popula.config import Config, load_config
    from popula.run.workers import build_engine, build_sandbox, runtime_of
    from popula.tasks.records import read_records

    if workers < 1:
        raise PopulaError(f"--workers must be at least 1, got {workers}")
    records = read_records(tasks_path)
    with ExitStack() as stack:
        snapshots = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="popula-eval-")))
        target = resolve_target(spec, adapter=adapter, engine=engine, snapshot_dir=snapshots)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(target.base_path))
        except (OSError, ValueError) as err:
            raise PopulaError(f"base model {target.base_path}: cannot load its tokenizer ({err})") from None
        context = context_limit(target.base_path)
        # A run is evaluated on its own config's runtime; a bare model on the defaults (auto).
        cfg = load_config(Path(spec).expanduser() / "config.yaml") if is_run_dir(Path(spec).expanduser()) else Config()
        eng = build_engine(cfg, target.base_path, runtime_of(cfg), kind=target.engine, max_adapters=1,
                           max_rank=target.rank, target_modules=target.target_modules or None,
                           max_model_len=context if target.engine == "vllm" else None, seed=0)
        stack.callback(eng.close)
        sandbox = stack.enter_context(build_sandbox(cfg, workers))
        return evaluate(eng, tokenizer, records, adapter=target.adapter, sandbox=sandbox, settings=settings,
                        context=context, progress=progress, model=target.label, engine_name=target.engine,
                        tasks_file=str(tasks_path), log=log)


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

