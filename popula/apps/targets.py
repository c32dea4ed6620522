"""What `popula eval RUN_DIR|MODEL` means: which base, engine and adapter(s) a run directory or
a model spec names, and the whole command as functions: `evaluate_target` scores one model
(an adapter, or a bare base), `evaluate_population` every live student of a run in one
engine session (`popula.eval.population` summarises them).

    report = evaluate_target("runs/a", "tasks.jsonl", adapter="S1", settings=EvalSettings(samples=4))
    population = evaluate_population("runs/a", "tasks.jsonl", settings=EvalSettings(samples=4))

The evaluation itself (generate, judge, pass@k) is `popula.eval`, which the run loop also
uses; this module lives in the run package because it needs the run's builders
(`popula.run.parts.builders`), the league and the run directory, so that `popula.eval` need not
import them.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from popula.adapters import CONFIG_FILE, WEIGHTS_FILE, AdapterRef, config_targets, read_config
from popula.config import Config, RuntimeSection, load_config
from popula.errors import PopulaError
from popula.eval.evaluate import EvalReport, context_limit, evaluate, evaluate_adapters
from popula.eval.settings import EvalSettings
from popula.eval.population import MemberEval, PopulationReport, population_report
from popula.model.base import resolve_base_model
from popula.records import read_records
from popula.run.parts.builders import build_engine, build_sandbox, runtime_of
from popula.run.rundir import best_student, is_run_dir, live_students, run_adapter


@dataclass
class EvalTarget:
    """A base model, the engine to serve it, and the adapter to evaluate (None: the bare base)."""

    label: str  # what the report calls the model: the run dir or the model spec
    base_path: Path | str
    engine: str
    adapter: AdapterRef | None
    rank: int  # the adapter's LoRA rank (1 for the bare base)
    target_modules: tuple[str, ...] | None  # the adapter's target modules (None: bare base)


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
    path = Path(spec).expanduser()
    if is_run_dir(path):
        cfg = load_config(path / "config.yaml")
        base = resolve_base_model(cfg.base_model)
        name = adapter if adapter is not None else best_student(path)
        ref = run_adapter(path, name)
        if snapshot_dir is not None:
            ref = _snapshot(ref, snapshot_dir)
        info = _adapter_config(ref.path, ref.name)
        return EvalTarget(str(path), base, engine or cfg.engine, ref, int(info["r"]), config_targets(info))
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
        rank, targets = int(info["r"]), config_targets(info)
    return EvalTarget(spec, base, engine or "torch", ref, rank, targets)


def _snapshot(ref: AdapterRef, directory: Path) -> AdapterRef:
    target = directory / f"{ref.name}-v{ref.version}"
    target.mkdir(parents=True, exist_ok=True)
    for fname in (CONFIG_FILE, WEIGHTS_FILE):
        try:
            shutil.copyfile(ref.path / fname, target / fname)
        except FileNotFoundError:
            raise PopulaError(f"adapter {ref.name!r} ({ref.path}): {fname} is missing") from None
    return AdapterRef(ref.name, ref.version, ref.uid, target)


def _adapter_config(path: Path, name: str) -> dict[str, Any]:
    info = read_config(path, name)
    if not isinstance(info, dict) or not isinstance(info.get("r"), int) or info["r"] < 1:
        raise PopulaError(f"adapter {name!r} ({path}): {CONFIG_FILE} field r must be a positive integer")
    return info


def evaluate_target(spec: str, tasks_path: str | Path, *, adapter: str | None = None, engine: str | None = None,
                    settings: EvalSettings = EvalSettings(), workers: int = 2,
                    progress: bool = False, log: Callable[[str], None] | None = None) -> EvalReport:
    """`popula eval` of one model as a function: resolve RUN_DIR|MODEL, load the engine, evaluate, clean up.

    With a run directory and no `adapter`, the model is the best student by conservative
    rating (`popula eval RUN_DIR --pick rating`). `settings.max_tokens` None means 128 for
    the tiny base's compact prompts and 1024 for instruction-tuned models, which reason
    first -- for a run's adapter as for a bare base, so that the two are scored under the
    same settings.
    """
    if workers < 1:
        raise PopulaError(f"--workers must be at least 1, got {workers}")
    records = read_records(tasks_path)
    with ExitStack() as stack:
        snapshots = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="popula-eval-")))
        target = resolve_target(spec, adapter=adapter, engine=engine, snapshot_dir=snapshots)
        eng, tokenizer, sandbox, context = _session(stack, spec, target.base_path, target.engine, workers=workers,
                                                    max_adapters=1, max_rank=target.rank,
                                                    target_modules=target.target_modules)
        return evaluate(eng, tokenizer, records, adapter=target.adapter, sandbox=sandbox, settings=settings,
                        context=context, progress=progress, model=target.label, engine_name=target.engine,
                        tasks_file=str(tasks_path), log=log)


def evaluate_population(spec: str, tasks_path: str | Path, *, engine: str | None = None,
                        settings: EvalSettings = EvalSettings(), workers: int = 2, progress: bool = False,
                        log: Callable[[str], None] | None = None) -> PopulationReport:
    """`popula eval RUN_DIR`: every live student of the run, scored alike, and their summary.

    The students' adapters (latest versions, snapshotted first) are served by one engine
    with a slot each, and all (task, student) requests go in one generate call with the
    same per-task seeds, so each member's figures are what `--adapter MEMBER` gives it.
    """
    path = Path(spec).expanduser()
    if not is_run_dir(path):
        raise PopulaError(f"{spec}: not a run directory (no config.yaml); a population report needs a run's "
                          "league (for one model, give --adapter NAME)")
    if workers < 1:
        raise PopulaError(f"--workers must be at least 1, got {workers}")
    records = read_records(tasks_path)
    with ExitStack() as stack:
        snapshots = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="popula-eval-")))
        cfg = load_config(path / "config.yaml")
        base = resolve_base_model(cfg.base_model)
        kind = engine or cfg.engine
        students = live_students(path)
        refs = []
        for m in students:
            try:
                refs.append(_snapshot(run_adapter(path, m.name), snapshots))
            except PopulaError as err:
                raise PopulaError(f"live student {m.name!r} of {path / 'league.json'}: {err}") from None
        infos = [_adapter_config(ref.path, ref.name) for ref in refs]
        targets = tuple(sorted({t for info in infos for t in config_targets(info)}))
        eng, tokenizer, sandbox, context = _session(stack, spec, base, kind, workers=workers,
                                                    max_adapters=len({ref.uid for ref in refs}),
                                                    max_rank=max(int(info["r"]) for info in infos),
                                                    target_modules=targets)
        reports = evaluate_adapters(eng, tokenizer, records, adapters=refs, sandbox=sandbox, settings=settings,
                                    context=context, progress=progress, model=str(path), engine_name=kind,
                                    tasks_file=str(tasks_path), log=log)
    members = [MemberEval(m.name, m.mu, m.sigma, m.conservative, report) for m, report in zip(students, reports)]
    return population_report(members, model=str(path), engine=kind)


def _session(stack: ExitStack, spec: str, base_path: Path | str, kind: str, *, workers: int, max_adapters: int,
             max_rank: int, target_modules: tuple[str, ...] | None) -> tuple[Any, Any, Any, int | None]:
    """(engine, tokenizer, sandbox, context) for evaluating on `base_path`, closed by `stack`.

    A run is evaluated on its own config's runtime; a bare model on the defaults but in the dtype its
    device suits (auto: bf16 on a GPU that has it), not the tiny base's float32.
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(base_path))
    except (OSError, ValueError) as err:
        raise PopulaError(f"base model {base_path}: cannot load its tokenizer ({err})") from None
    context = context_limit(base_path)
    cfg = (load_config(Path(spec).expanduser() / "config.yaml") if is_run_dir(Path(spec).expanduser())
           else Config(runtime=RuntimeSection(dtype="auto")))
    eng = build_engine(cfg, base_path, runtime_of(cfg), kind=kind, max_adapters=max_adapters, max_rank=max_rank,
                       target_modules=target_modules or None, max_model_len=context,
                       seed=0)
    stack.callback(eng.close)
    sandbox = stack.enter_context(build_sandbox(cfg, workers))
    return eng, tokenizer, sandbox, context
