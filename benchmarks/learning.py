"""Does the population learn a better curriculum than single-agent self-play?

    python3 benchmarks/learning.py [--seeds 0 1 2] [--steps N] [--heldout 300] [--samples 4]
                                   [--trend N] [--humaneval JSONL] [--no-greedy] [--jobs 2] [--out DIR] [--docs DIR]
                                   [--population-config YAML] [--single-config YAML] [--set KEY=VALUE ...]
                                   [--reuse-single EARLIER_OUT]

For every seed it runs `configs/tiny-cpu.yaml` (4 teachers + 4 students) and
`configs/single-agent.yaml` (one adapter that proposes and solves) from the same base, each
as its own `popula run` process (`--jobs` at a time, the cores shared among them; a run
already finished or interrupted in OUT is resumed, not restarted). Then it scores, with
`popula eval`, every student alive at the end of each population run, the single agent's
adapter and the bare base on one held-out set of generated tasks. The population is reported
as PopuLoRA reports it: the mean of its live students, with its weakest beside it (and its
strongest, and the one its TrueSkill rating would pick), never a hand-picked best.
Differences between models are measured task by task on the shared held-out set
(`popula.eval.paired`; the population's mean scores each task by its students' mean): the
mean per-task difference, its standard error over tasks and its spread over seeds. With
`--humaneval FILE` every model is also scored on HumanEval (converted to code_f tasks by
scripts/convert_benchmark.py; one greedy sample, 256 tokens). Every model is also scored greedy
on the held-out set (one answer at T=0, `--no-greedy` to skip): a gain at T>0 that the greedy
score does not share is the model sharpening towards the answer the base already ranked first,
not solving more.

The held-out tasks come from the generator's held-out namespace at `--heldout-seed`, a stream
that neither the tiny base's corpus nor any run's seed tasks draw from. Every model is scored
with the same generation settings (samples, temperature, max tokens), printed with the result.
With `--trend N` every run also scores its live students every N steps while it trains
(`heldout.every`, popula.eval.heldout), on a smaller held-out set of its own (`--trend-tasks`
x `--trend-samples` from `--trend-seed`): the table and `heldout_trend.png` show when the gain is
made. Choose settings on that set, and report on `--heldout-seed`'s, which no decision touched.

An ablation changes the population alone: `--reuse-single EARLIER_OUT` takes the single agent's
runs and scores (and the base's) from an earlier output on the same held-out set instead of
training and scoring them again, and `benchmarks/compare_learning.py OUT EARLIER_OUT --labels
population --pick mean` gives the ablation's paired difference against the full population.

Writes OUT/<label>-s<seed>/ (the runs, with <label>-s<seed>.log beside them), OUT/heldout.jsonl,
OUT/scores/ (one `popula eval --json` report per model), and to DOCS (default OUT/docs):
README.md (pass@1 and pass@k, mean and spread over seeds, per task type), PNG plots of every
training curve with population and single agent on the same axes (mean over seeds),
learning.json, and what keeps the study comparable once its runs are gone: scores/ (a copy of
every report) and live_students.json (each run's live students, best-rated first), which
`benchmarks/compare_learning.py` reads in place of OUT. Prints the table and, as its last line,
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.eval.paired import PairedDifference, mean_report, paired_difference, per_task_pass_at_k  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.records import write_jsonl  # noqa: E402
from popula.run.metrics import read_metrics  # noqa: E402
from popula.run.rundir import best_student, live_students  # noqa: E402
from popula.config import load_config  # noqa: E402
from popula.tasks.generator import HELDOUT_NAMESPACE, generate_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUNS = {"population": ROOT / "configs" / "tiny-cpu.yaml", "single": ROOT / "configs" / "single-agent.yaml"}  # the defaults
SERIES = {
    "valid_rate": "teacher valid rate", "solve_rate": "student solve rate",
    "teacher_reward_mean": "teacher reward (mean)", "ast_depth": "AST depth of valid tasks",
    "cyclomatic": "cyclomatic complexity", "loc": "lines of code", "n_vars": "distinct variables",
    "reference_depth": "AST depth of the references drawn", "invalid_ast_depth": "AST depth of rejected programs",
    "distinct_forms": "distinct program forms among valid tasks",
    "student_entropy": "student entropy (answer tokens' mean -log p)",
}
WINDOW = 20  # steps averaged for the "first" and "last" figures


@dataclass
class Job:
    """One subprocess: a training run or one model's held-out evaluation."""

    name: str
    argv: list[str]
    log: Path  # stderr, and stdout unless `stdout` is given
    stdout: Path | None = None  # an evaluation's JSON report


@dataclass(frozen=True)
class Target:
    """One model scored on the held-out tasks: the bare base, or an adapter of one run."""

    label: str  # "base", or the RUNS label of the run
    seed: int | None  # the run's seed; None for the bare base
    spec: str  # what `popula eval` takes: a run directory or the base model
    adapter: str | None = None

    @property
    def file_name(self) -> str:
        return "base.json" if self.seed is None else f"{self.label}-s{self.seed}-{self.adapter}.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: each config's run.steps)")
    parser.add_argument("--out", type=Path, default=Path("runs/learning-benchmark"))
    parser.add_argument("--docs", type=Path, default=None, help="where README, plots and JSON go (default OUT/docs)")
    parser.add_argument("--heldout", type=int, default=300, help="held-out tasks (>= 300 for a result)")
    parser.add_argument("--heldout-seed", type=int, default=987_654, help="never a training seed")
    parser.add_argument("--samples", type=int, default=4, help="answers per held-out task (pass@1 and pass@k)")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, default=96, help="answer tokens for every scored model")
    parser.add_argument("--trend", type=int, default=0, metavar="N",
                        help="also score each run's live students every N steps while it trains, on a held-out "
                             "set of its own (--trend-tasks from --trend-seed); 0: only at the end (default)")
    parser.add_argument("--trend-tasks", type=int, default=100, help="held-out tasks of the in-run probe")
    parser.add_argument("--trend-samples", type=int, default=2, help="answers per task of the in-run probe")
    parser.add_argument("--trend-seed", type=int, default=987_654,
                        help="the probe's held-out seed: the set settings are chosen on; report on another "
                             "(--heldout-seed) that no decision has touched")
    parser.add_argument("--humaneval", type=Path, default=None, metavar="JSONL",
                        help="also score every model on this HumanEval file (e.g. ../shared/data/HumanEval.jsonl.gz), "
                             "converted to code_f tasks, one greedy sample each")
    parser.add_argument("--humaneval-max-tokens", type=int, default=256)
    parser.add_argument("--greedy", action=argparse.BooleanOptionalAction, default=True,
                        help="also score every model greedy on the held-out set (one answer at T=0), so a gain "
                             "from sharpening is told from one from solving more (default: on)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="runs (and evaluations) at once; small models leave cores idle, so 2 on 2 cores "
                             "finish sooner than one after another (default: min(2, cores))")
    parser.add_argument("--population-config", type=Path, default=RUNS["population"],
                        help="the population's config (default configs/tiny-cpu.yaml; configs/smollm2-cpu.yaml for "
                             "SmolLM2-135M)")
    parser.add_argument("--single-config", type=Path, default=RUNS["single"],
                        help="the single agent's config, the population's with one adapter (default "
                             "configs/single-agent.yaml; configs/smollm2-single.yaml beside configs/smollm2-cpu.yaml)")
    parser.add_argument("--reuse-single", type=Path, default=None, metavar="DIR",
                        help="take the single agent's runs and scores from an earlier learning.py output on the "
                             "same held-out set, neither trained nor scored again: an ablation of the population "
                             "alone (compare the two folders with benchmarks/compare_learning.py --pick mean)")
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                        help="config override applied to every run (e.g. base_model=DIR)")
    args = parser.parse_args()
    if args.heldout_seed in args.seeds:
        parser.error("--heldout-seed must differ from every training seed")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.trend < 0:
        parser.error("--trend must be >= 0")
    if args.humaneval is not None and not args.humaneval.is_file():
        parser.error(f"no HumanEval file {args.humaneval}")
    for path in (args.population_config, args.single_config):
        if not path.is_file():
            parser.error(f"no config file {path}")
    RUNS.update(population=args.population_config.resolve(), single=args.single_config.resolve())

    args.out.mkdir(parents=True, exist_ok=True)
    docs = args.docs or args.out / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    heldout = args.out / "heldout.jsonl"
    if not heldout.exists():
        tasks = generate_tasks(args.heldout, args.heldout_seed, namespace=HELDOUT_NAMESPACE)
        write_jsonl(heldout, [t.to_json() for t in tasks])

    run_dirs = {(label, seed): args.out / f"{label}-s{seed}" for seed in args.seeds for label in RUNS}
    if args.reuse_single is not None:
        run_dirs.update(_reuse_single(args, heldout))
    run_all([_train_job(args, label, seed, d) for (label, seed), d in run_dirs.items()
             if not (label == "single" and args.reuse_single)], args.jobs)
    curves = {label: [read_metrics(run_dirs[label, seed] / "metrics.jsonl") for seed in args.seeds] for label in RUNS}

    base_model = _base_model(run_dirs[next(iter(run_dirs))])
    targets = [Target("base", None, base_model)]
    for (label, seed), d in run_dirs.items():
        names = [m.name for m in live_students(d)] if label == "population" else [best_student(d)]
        targets += [Target(label, seed, str(d), name) for name in names]
    scores_dir = args.out / "scores"
    scores_dir.mkdir(exist_ok=True)
    evals = {t: scores_dir / t.file_name for t in targets}
    run_all([_eval_job(args, heldout, t, path) for t, path in evals.items() if not _complete(path)], args.jobs)
    reports = {t: json.loads(path.read_text()) for t, path in evals.items()}

    summary = _summarize(args, reports, run_dirs, curves)
    if args.greedy:
        summary["greedy"] = _greedy(args, heldout, targets, summary, scores_dir)
    if args.humaneval is not None:
        summary["humaneval"] = _humaneval(args, targets, summary, scores_dir)
    (docs / "learning.json").write_text(json.dumps(summary, indent=1) + "\n")
    publish_scores(scores_dir, run_dirs, docs)
    table = format_table(summary)
    _plot(curves, docs)
    _plot_trend(summary, docs)
    (docs / "README.md").write_text(_readme(args, table, sys.argv))
    print(table)
    print(json.dumps(summary))


def publish_scores(scores_dir: Path, run_dirs: dict[tuple[str, int], Path], docs: Path) -> None:
    """Every score report copied to DOCS/scores, and each run's live students, best-rated first, to
    DOCS/live_students.json.

    Why: run folders are large and machines are wiped, but a published study must stay comparable
    task by task; `benchmarks/compare_learning.py` reads a DOCS folder as it reads OUT.
    """
    published = docs / "scores"
    published.mkdir(exist_ok=True)
    for path in sorted(scores_dir.glob("*.json")):
        shutil.copyfile(path, published / path.name)
    live = {d.name: [m.name for m in live_students(d)] for d in run_dirs.values()}
    (docs / "live_students.json").write_text(json.dumps(live, indent=1) + "\n")


def _reuse_single(args: argparse.Namespace, heldout: Path) -> dict[tuple[str, int], Path]:
    """The earlier output's single-agent runs, its scores of them and of the base copied into OUT/scores.

    Refused unless it scored the very held-out tasks this benchmark does, with the same sampling,
    on the base model this benchmark's population trains: a paired difference over different
    tasks or bases would mix the models' quality with the tasks' difficulty. HumanEval scores
    and greedy scores made with another token limit are left behind, so they are scored again.
    """
    source = args.reuse_single
    if not (source / "heldout.jsonl").is_file() or (source / "heldout.jsonl").read_bytes() != heldout.read_bytes():
        raise SystemExit(f"--reuse-single {source}: its heldout.jsonl is missing or differs from {heldout} "
                         "(use the same --heldout and --heldout-seed)")
    try:
        base = json.loads((source / "scores" / "base.json").read_text())
    except (OSError, ValueError):
        raise SystemExit(f"--reuse-single {source}: no readable scores/base.json (finish that benchmark first)") from None
    configured = load_config(RUNS["population"], args.overrides).base_model
    if base.get("model") != configured:
        raise SystemExit(f"--reuse-single {source}: its runs are of base model {base.get('model')!r}, this "
                         f"population's is {configured!r}")
    measured = {key: base.get(key) for key in ("samples", "temperature", "max_tokens")}
    if measured != {"samples": args.samples, "temperature": args.temperature, "max_tokens": args.max_tokens}:
        raise SystemExit(f"--reuse-single {source}: it scored with {measured}; pass the same --samples, "
                         "--temperature and --max-tokens")
    runs = {("single", seed): source / f"single-s{seed}" for seed in args.seeds}
    for run_dir in runs.values():
        if not (run_dir / "league.json").is_file():
            raise SystemExit(f"--reuse-single {source}: no finished single-agent run {run_dir}")
    scores = args.out / "scores"
    scores.mkdir(exist_ok=True)
    tokens = {"humaneval-": args.humaneval_max_tokens, "greedy-": args.max_tokens}
    for path in (source / "scores").glob("*.json"):
        prefix = next((p for p in tokens if path.name.startswith(p)), "")
        reusable = path.name.removeprefix(prefix)
        if (reusable == "base.json" or reusable.startswith("single-")) and not (scores / path.name).exists() \
                and (not prefix or _max_tokens(path) == tokens[prefix]):
            shutil.copyfile(path, scores / path.name)
    return runs


def _max_tokens(report: Path) -> int | None:
    try:
        return json.loads(report.read_text()).get("max_tokens")
    except (OSError, ValueError):
        return None


def _train_job(args: argparse.Namespace, label: str, seed: int, run_dir: Path) -> Job:
    argv = [sys.executable, "-m", "popula", "run", str(RUNS[label]), "--out", str(run_dir), "--seed", str(seed)]
    argv += ["--steps", str(args.steps)] if args.steps else []
    argv += [f"--set={s}" for s in [*args.overrides, *_trend_settings(args)]]
    argv += ["--resume"] if (run_dir / "config.yaml").exists() else []  # a finished run resumes to no new step
    return Job(f"train {run_dir.name}", argv, run_dir.parent / f"{run_dir.name}.log")


def _trend_settings(args: argparse.Namespace) -> list[str]:
    """The runs' held-out probe: its own set, the benchmark's sampling settings (none without --trend)."""
    if not args.trend:
        return []
    return [f"heldout.every={args.trend}", f"heldout.tasks={args.trend_tasks}", f"heldout.seed={args.trend_seed}",
            f"heldout.samples={args.trend_samples}", f"heldout.temperature={args.temperature}",
            f"heldout.max_tokens={args.max_tokens}"]


def _trend(rows: list[dict]) -> dict[int, dict]:
    """Step -> the probe's figures at that step (probed steps only): its set, and the live students' pass@1."""
    return {r["step"]: r["heldout"] for r in rows if "heldout" in r}


def _trend_summary(runs: list[list[dict]]) -> dict | None:
    """The held-out probe over the steps every seed probed: the mean and the weakest live student's pass@1."""
    trends = [_trend(rows) for rows in runs]
    steps = sorted(set.intersection(*(set(t) for t in trends))) if trends else []
    if not steps:
        return None
    first = trends[0][steps[0]]

    def pass1(t: dict) -> list[float]:
        return [s["pass1"] for s in t["students"].values()]

    return {"steps": steps, "tasks": first["tasks"], "samples": first["samples"],
            "mean_pass1": [[statistics.fmean(pass1(t[s])) for t in trends] for s in steps],
            "weakest_pass1": [[min(pass1(t[s])) for t in trends] for s in steps]}


def _trend_set(trend: dict) -> str:
    return f"the runs' own probe: {trend['tasks']} held-out tasks x {trend['samples']} samples"


def _eval_job(args: argparse.Namespace, heldout: Path, target: Target, out: Path, *, samples: int | None = None,
              temperature: float | None = None, max_tokens: int | None = None) -> Job:
    """`popula eval` of one target on a task file; the benchmark's sampling settings unless told."""
    argv = [sys.executable, "-m", "popula", "eval", target.spec, "--tasks", str(heldout),
            "--samples", str(samples or args.samples),
            "--temperature", str(args.temperature if temperature is None else temperature),
            "--max-tokens", str(max_tokens or args.max_tokens), "--json", "--per-task"]
    argv += ["--adapter", target.adapter] if target.adapter else []
    return Job(f"eval {out.stem}", argv, out.with_suffix(".log"), stdout=out)


def _complete(path: Path) -> bool:
    """A finished report with per-task counts (the paired comparisons need them)."""
    try:
        return "per_task" in json.loads(path.read_text())
    except (OSError, ValueError):
        return False


def _base_model(run_dir: Path) -> str:
    return str(yaml.safe_load((run_dir / "config.yaml").read_text())["base_model"])


def run_all(jobs: list[Job], parallel: int) -> None:
    """Run the jobs as subprocesses, `parallel` at a time, each with an equal share of the cores.

    A job's stdout goes to its `stdout` file when it has one (an evaluation's JSON report),
    everything else to its log. A failed job stops the benchmark with the log's name: its figures would be
    missing from the table.
    """
    threads = max(1, (os.cpu_count() or 1) // parallel)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    pending, running = list(jobs), []
    while pending or running:
        while pending and len(running) < parallel:
            job = pending.pop(0)
            log = job.log.open("w")
            stdout = job.stdout.open("w") if job.stdout else log
            print(f"[{time.strftime('%H:%M:%S')}] start {job.name} (log: {job.log})", flush=True)
            running.append((job, subprocess.Popen(job.argv, stdout=stdout, stderr=log, env=env, cwd=ROOT),
                            time.monotonic()))
        time.sleep(1)
        for entry in [e for e in running if e[1].poll() is not None]:
            job, proc, started = entry
            running.remove(entry)
            if proc.returncode != 0:
                for _, other, _ in running:
                    other.terminate()
                raise SystemExit(f"{job.name} failed (exit {proc.returncode}); see {job.log}")
            print(f"[{time.strftime('%H:%M:%S')}] done  {job.name} in {time.monotonic() - started:.0f} s", flush=True)


GREEDY = {"samples": 1, "temperature": 0.0}  # one answer, the model's first choice


def _score_greedy(args: argparse.Namespace, tasks: Path, targets: list[Target], scores_dir: Path, prefix: str,
                  max_tokens: int) -> dict[Target, dict]:
    """Every target scored greedy on a task file; reports kept as SCORES/<prefix><target>.json."""
    evals = {t: scores_dir / f"{prefix}{t.file_name}" for t in targets}
    run_all([_eval_job(args, tasks, t, path, max_tokens=max_tokens, **GREEDY)
             for t, path in evals.items() if not _complete(path)], args.jobs)
    return {t: json.loads(path.read_text()) for t, path in evals.items()}


def _pass1_by_model(args: argparse.Namespace, reports: dict[Target, dict], summary: dict) -> dict[str, list[float]]:
    """pass@1 per seed by the summary's models: the population's mean over its live students, and
    the very members the sampled held-out score named weakest, strongest and the rating's pick."""
    score = {(t.label, t.seed, t.adapter): r["overall"]["pass_at_1"] for t, r in reports.items()}
    out: dict[str, list[float]] = {"base": [score["base", None, None]]}
    for key in ("single", "weakest", "strongest", "rating"):
        out[key] = [score[tuple(target)] for target in summary[key]["targets"]]
    out["population"] = [statistics.fmean(v for (label, seed, _), v in score.items()
                                          if label == "population" and seed == s) for s in args.seeds]
    return {key: out[key] for key in MODELS}


def _greedy(args: argparse.Namespace, heldout: Path, targets: list[Target], summary: dict, scores_dir: Path) -> dict:
    """Every model's greedy pass@1 on the held-out set, with the population's paired differences.

    Why: a policy-gradient step first sharpens the sampling distribution, which lifts pass@1 at T>0
    towards the greedy answer without solving anything new. A gain over the base's greedy score is
    one that decoding alone does not give."""
    reports = _score_greedy(args, heldout, targets, scores_dir, "greedy-", args.max_tokens)
    base = [next(r for t, r in reports.items() if t.seed is None)] * len(args.seeds)
    population = [mean_report([r for t, r in reports.items() if (t.label, t.seed) == ("population", s)],
                              f"population-s{s}: greedy mean") for s in args.seeds]
    single = [next(r for t, r in reports.items() if [t.label, t.seed, t.adapter] == target)
              for target in summary["single"]["targets"]]
    paired = {"population mean - base": (population, base), "single - base": (single, base),
              "population mean - single": (population, single)}
    return {"max_tokens": args.max_tokens, **GREEDY, "pass1": _pass1_by_model(args, reports, summary),
            "paired": {name: paired_difference(a, b).to_json() for name, (a, b) in paired.items()}}


def _humaneval(args: argparse.Namespace, targets: list[Target], summary: dict, scores_dir: Path) -> dict:
    """Every model's HumanEval pass@1 (the file converted to code_f tasks once), greedy, per seed."""
    tasks = args.out / "humaneval.jsonl"
    if not tasks.exists():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "convert_benchmark.py"), "--format", "humaneval",
                        str(args.humaneval), str(tasks)], check=True, cwd=ROOT)
    reports = _score_greedy(args, tasks, targets, scores_dir, "humaneval-", args.humaneval_max_tokens)
    return {"tasks": sum(1 for _ in tasks.open()), "max_tokens": args.humaneval_max_tokens, **GREEDY,
            "pass1": _pass1_by_model(args, reports, summary)}


def _pass(report: dict) -> dict:
    return {"pass1": report["overall"]["pass_at_1"], "passk": report["overall"]["pass_at_k"],
            "by_type": {t: g["pass_at_1"] for t, g in report["by_type"].items()}}


def _mean_sd(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": values}


def _window(rows: list[dict], key: str, last: bool) -> float | None:
    part = rows[-WINDOW:] if last else rows[:WINDOW]
    values = [r[key] for r in part if r.get(key) is not None]
    return statistics.fmean(values) if values else None


def _mean_pass(scores: list[dict], model: str) -> dict:
    """The mean of several models' `_pass` figures (a population's live students)."""
    types = sorted({t for r in scores for t in r["by_type"]})
    return {"pass1": statistics.fmean(r["pass1"] for r in scores), "passk": statistics.fmean(r["passk"] for r in scores),
            "by_type": {t: statistics.fmean(r["by_type"].get(t, 0.0) for r in scores) for t in types}, "model": model}


MODELS = {  # summary key -> table label, in table order
    "base": "bare base", "single": "single agent",
    "population": "population: mean of the live students", "weakest": "population: weakest live student",
    "strongest": "population: strongest live student", "rating": "population: the rating's pick",
}


def _summarize(args: argparse.Namespace, reports: dict[Target, dict], run_dirs: dict[tuple[str, int], Path],
               curves: dict[str, list[list[dict]]]) -> dict:
    """The population is reported as PopuLoRA reports it: the mean of its live students, with the
    weakest beside it (and the strongest, and the one its rating would pick); never a hand-picked best."""
    bare = next(r for t, r in reports.items() if t.seed is None)
    base = _pass(bare)
    out: dict = {"seeds": args.seeds, "heldout": {"tasks": args.heldout, "seed": args.heldout_seed,
                                                  "samples": args.samples, "temperature": args.temperature,
                                                  "max_tokens": args.max_tokens}}
    picked: dict[str, list[dict]] = {key: [] for key in MODELS}
    picked["base"].append(base)
    compared: dict[str, list[dict]] = {"single": [], "population": [], "weakest": [], "population pass@k": []}
    students_above_base = []
    for (label, seed), run_dir in run_dirs.items():
        run_reports = {t.adapter: r for t, r in reports.items() if (t.label, t.seed) == (label, seed)}
        mine = {name: _pass(r) for name, r in run_reports.items()}
        if label == "single":
            best = best_student(run_dir)
            picked["single"].append({**mine[best], "model": f"{run_dir.name}/{best}", "target": [label, seed, best]})
            compared["single"].append(run_reports[best])
            continue
        ranked = sorted(mine, key=lambda n: mine[n]["pass1"])
        for key, name in (("weakest", ranked[0]), ("strongest", ranked[-1]), ("rating", best_student(run_dir))):
            picked[key].append({**mine[name], "model": f"{run_dir.name}/{name}", "target": [label, seed, name]})
        picked["population"].append(_mean_pass(list(mine.values()), f"{run_dir.name}: mean of {len(mine)}"))
        compared["population"].append(mean_report(list(run_reports.values()), f"{run_dir.name}: mean"))
        compared["population pass@k"].append(
            mean_report(list(run_reports.values()), f"{run_dir.name}: mean pass@k", per_task_pass_at_k))
        compared["weakest"].append(run_reports[ranked[0]])
        students_above_base.append(sum(s["pass1"] > base["pass1"] for s in mine.values()) / len(mine))
    for key, runs in picked.items():
        types = sorted({t for r in runs for t in r["by_type"]})
        out[key] = {"pass1": _mean_sd([r["pass1"] for r in runs]), "passk": _mean_sd([r["passk"] for r in runs]),
                    "by_type": {t: _mean_sd([r["by_type"].get(t, 0.0) for r in runs]) for t in types},
                    "models": [r.get("model", "bare base") for r in runs],
                    "targets": [r.get("target") for r in runs]}  # (run label, seed, member) of one scored model
    out["population"]["students_above_base"] = students_above_base
    for label, runs in curves.items():
        out[label]["curves"] = {key: {"first": [_window(r, key, False) for r in runs],
                                      "last": [_window(r, key, True) for r in runs]} for key in SERIES}
        out[label]["logprob_gap_max"] = max((r.get("logprob_gap_max") or 0.0) for rows in runs for r in rows)
        trend = _trend_summary(runs)
        if trend:
            out[label]["trend"] = trend
    pop, single = out["population"]["pass1"]["values"], out["single"]["pass1"]["values"]
    out["population_beats_single"] = {"seeds": sum(p > s for p, s in zip(pop, single)), "of": len(pop),
                                      "mean_diff": statistics.fmean(pop) - statistics.fmean(single)}
    bare_per_seed = [bare] * len(args.seeds)
    out["paired"] = {name: paired_difference(a, b).to_json() for name, (a, b) in {
        "population mean - single": (compared["population"], compared["single"]),
        "population weakest - single": (compared["weakest"], compared["single"]),
        "population mean - base": (compared["population"], bare_per_seed),
        "single - base": (compared["single"], bare_per_seed)}.items()}
    bare_k = [mean_report([bare], "base pass@k", per_task_pass_at_k)] * len(args.seeds)
    out["passk_paired"] = {
        "population mean - base": paired_difference(compared["population pass@k"], bare_k).to_json(),
        "population weakest - base": paired_difference(compared["weakest"], bare_per_seed, per_task_pass_at_k).to_json(),
        "single - base": paired_difference(compared["single"], bare_per_seed, per_task_pass_at_k).to_json()}
    return out


def format_table(summary: dict) -> str:
    h = summary["heldout"]
    lines = [f"held-out: {h['tasks']} generated tasks (seed {h['seed']}), {h['samples']} samples at T={h['temperature']}, "
             f"max {h['max_tokens']} tokens, the same for every model; seeds {summary['seeds']}",
             "", "| model | pass@1 | pass@k | code_o | code_i | code_f |", "|---|---|---|---|---|---|"]
    for key, name in MODELS.items():
        s = summary[key]
        cell = lambda v: f"{v['mean']:.3f} ± {v['sd']:.3f}"  # noqa: E731
        by_type = [cell(s["by_type"][t]) if t in s["by_type"] else "-" for t in ("code_o", "code_i", "code_f")]
        lines.append(f"| {name} | {cell(s['pass1'])} | {cell(s['passk'])} | " + " | ".join(by_type) + " |")
    if "greedy" in summary:
        g = summary["greedy"]
        lines += ["", f"greedy on the same held-out tasks (one answer at T=0, max {g['max_tokens']} tokens), pass@1 per "
                      "seed:", "", "| model | pass@1 |", "|---|---|"]
        lines += [f"| {MODELS[key]} | " + ", ".join(f"{v:.3f}" for v in values) + " |" for key, values in g["pass1"].items()]
        lines += [f"- greedy pass@1 {name}: {PairedDifference(**d).describe()}" for name, d in g["paired"].items()]
    if "humaneval" in summary:
        he = summary["humaneval"]
        lines += ["", f"HumanEval ({he['tasks']} problems as code_f tasks, {he['samples']} sample, T={he['temperature']}, "
                      f"max {he['max_tokens']} tokens), pass@1 per seed:", "", "| model | pass@1 |", "|---|---|"]
        lines += [f"| {MODELS[key]} | " + ", ".join(f"{v:.3f}" for v in values) + " |"
                  for key, values in he["pass1"].items()]
    lines += ["", f"| curve (mean of first / last {WINDOW} steps, per seed) | population | single agent |", "|---|---|---|"]
    for key, title in SERIES.items():
        cells = []
        for label in ("population", "single"):
            c = summary[label]["curves"][key]
            cells.append(", ".join(f"{a:.2f}→{b:.2f}" if a is not None and b is not None else "-"
                                   for a, b in zip(c["first"], c["last"])))
        lines.append(f"| {title} | {cells[0]} | {cells[1]} |")
    b = summary["population_beats_single"]
    above = ", ".join(f"{f:.0%}" for f in summary["population"]["students_above_base"])
    lines += ["", f"live population students above the bare base's pass@1, per seed: {above}"]
    lines += ["", f"population mean above the single agent in {b['seeds']} of {b['of']} seeds "
                  f"(mean difference {b['mean_diff']:+.3f} pass@1); largest logprob_gap_max: population "
                  f"{summary['population']['logprob_gap_max']:.1e}, single {summary['single']['logprob_gap_max']:.1e}"]
    if "trend" in summary["population"] and "trend" in summary["single"]:
        pop, single = summary["population"]["trend"], summary["single"]["trend"]
        lines += ["", f"held-out pass@1 while training ({_trend_set(pop)}; mean of seeds):", "",
                  "| step | population mean | population weakest | single agent |", "|---|---|---|---|"]
        by_step = dict(zip(single["steps"], single["mean_pass1"]))
        lines += [f"| {step} | {statistics.fmean(m):.3f} | {statistics.fmean(w):.3f} | "
                  + (f"{statistics.fmean(by_step[step]):.3f}" if step in by_step else "-") + " |"
                  for step, m, w in zip(pop["steps"], pop["mean_pass1"], pop["weakest_pass1"])]
    lines += ["", "paired differences on the same held-out tasks (the population mean: each task scored by its "
                  "live students' mean):"]
    lines += [f"- pass@1 {name}: {PairedDifference(**d).describe()}" for name, d in summary["paired"].items()]
    lines += [f"- pass@k {name}: {PairedDifference(**d).describe()}" for name, d in summary["passk_paired"].items()]
    return "\n".join(lines)


def _plot(curves: dict[str, list[list[dict]]], docs: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for key, title in SERIES.items():
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for label, runs in curves.items():
            for rows in runs:
                ax.plot([r["step"] for r in rows], [r.get(key) for r in rows], alpha=0.15,
                        color="C0" if label == "population" else "C1")
            steps = min(len(rows) for rows in runs)
            mean = [statistics.fmean([v for rows in runs if (v := rows[i].get(key)) is not None] or [float("nan")])
                    for i in range(steps)]
            smooth = [statistics.fmean(mean[max(0, i - 4):i + 1]) for i in range(steps)]
            ax.plot(range(1, steps + 1), smooth, lw=2, color="C0" if label == "population" else "C1",
                    label=f"{label} (mean of {len(runs)} seeds, 5-step mean)")
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(docs / f"{key}.png", dpi=100)
        plt.close(fig)


def _plot_trend(summary: dict, docs: Path) -> None:
    """held-out pass@1 over steps (the runs' probe), population mean and weakest against the single agent."""
    if not all("trend" in summary[label] for label in RUNS):
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, key, name, color, style in (("population", "mean_pass1", "population mean", "C0", "-"),
                                           ("population", "weakest_pass1", "population weakest", "C0", ":"),
                                           ("single", "mean_pass1", "single agent", "C1", "-")):
        trend = summary[label]["trend"]
        for seed_values in zip(*trend[key]):
            ax.plot(trend["steps"], seed_values, color=color, ls=style, alpha=0.25)
        ax.plot(trend["steps"], [statistics.fmean(v) for v in trend[key]], color=color, ls=style, lw=2, marker="o",
                label=f"{name} (mean of {len(trend[key][0])} seeds)")
    ax.set_xlabel("step")
    ax.set_title(f"held-out pass@1 while training ({_trend_set(summary['population']['trend'])})", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(docs / "heldout_trend.png", dpi=100)
    plt.close(fig)


def _readme(args: argparse.Namespace, table: str, argv: list[str]) -> str:
    trend = "![held-out pass@1 while training](heldout_trend.png)\n" if args.trend else ""
    return (f"# Population vs single agent vs bare base\n\nCommand:\n\n    python3 {' '.join(argv)}\n\n{table}\n\n"
            + trend + "".join(f"![{title}]({key}.png)\n" for key, title in SERIES.items()))


if __name__ == "__main__":
    run_script(main)
