"""Does the population learn a better curriculum than single-agent self-play?

    python3 benchmarks/learning.py [--seeds 0 1 2] [--steps N] [--heldout 300] [--samples 4]
                                   [--out DIR] [--docs DIR] [--set KEY=VALUE ...] [--resume]

For every seed it runs `configs/tiny-cpu.yaml` (4 teachers + 4 students) and
`configs/single-agent.yaml` (one adapter that proposes and solves) from the same base,
then scores each run's best student (by conservative TrueSkill rating; the one adapter
for the baseline) and the bare base on one held-out set of generated tasks. The held-out
tasks come from the generator's held-out namespace at `--heldout-seed`, a stream that
neither the tiny base's corpus nor any run's seed tasks draw from. Every model is scored
with the same generation settings (samples, temperature, max tokens), printed with the
result.

Writes OUT/<label>-s<seed>/ (the runs), OUT/heldout.jsonl, and to DOCS (default OUT/docs):
README.md (the table: pass@1 and pass@k, mean and spread over seeds, per task type), PNG
plots of every training curve with population and single agent on the same axes (mean
over seeds), and learning.json. Prints the table and, as its last line, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from popula.openmp import configure_waits  # noqa: E402

configure_waits()  # before torch loads

from popula.config import load_config  # noqa: E402
from popula.eval_target import evaluate_target  # noqa: E402
from popula.evaluate import EvalSettings  # noqa: E402
from popula.records import write_jsonl  # noqa: E402
from popula.run.metrics import read_metrics  # noqa: E402
from popula.run.population import PopulationRun  # noqa: E402
from popula.tasks.generator import HELDOUT_NAMESPACE, generate_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUNS = {"population": ROOT / "configs" / "tiny-cpu.yaml", "single": ROOT / "configs" / "single-agent.yaml"}
SERIES = {
    "valid_rate": "teacher valid rate", "solve_rate": "student solve rate",
    "teacher_reward_mean": "teacher reward (mean)", "ast_depth": "AST depth of valid tasks",
    "cyclomatic": "cyclomatic complexity", "loc": "lines of code", "n_vars": "distinct variables",
}
WINDOW = 20  # steps averaged for the "first" and "last" figures


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
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                        help="config override applied to every run")
    parser.add_argument("--resume", action="store_true", help="continue runs already in OUT")
    args = parser.parse_args()
    if args.heldout_seed in args.seeds:
        parser.error("--heldout-seed must differ from every training seed")

    args.out.mkdir(parents=True, exist_ok=True)
    docs = args.docs or args.out / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    heldout = args.out / "heldout.jsonl"
    if not heldout.exists():
        tasks = generate_tasks(args.heldout, args.heldout_seed, namespace=HELDOUT_NAMESPACE)
        write_jsonl(heldout, [t.to_json() for t in tasks])
    settings = EvalSettings(samples=args.samples, temperature=args.temperature, max_tokens=args.max_tokens)

    curves: dict[str, list[list[dict]]] = {label: [] for label in RUNS}
    scores: dict[str, list[dict]] = {label: [] for label in [*RUNS, "base"]}
    base_model = None
    for seed in args.seeds:
        for label, config in RUNS.items():
            run_dir = args.out / f"{label}-s{seed}"
            overrides = [*args.overrides, f"seed={seed}"] + ([f"run.steps={args.steps}"] if args.steps else [])
            cfg = load_config(config, overrides)
            base_model = cfg.base_model
            resume = args.resume and (run_dir / "config.yaml").exists()
            PopulationRun(cfg, run_dir, resume=resume).train()  # a finished run resumes to no new step
            curves[label].append(read_metrics(run_dir / "metrics.jsonl"))
            scores[label].append(_score(evaluate_target(str(run_dir), heldout, settings=settings, progress=True)))
    scores["base"].append(_score(evaluate_target(base_model, heldout, settings=settings, progress=True)))

    summary = _summarize(args, scores, curves)
    (docs / "learning.json").write_text(json.dumps(summary, indent=1) + "\n")
    table = format_table(summary)
    _plot(curves, docs)
    (docs / "README.md").write_text(_readme(args, table, sys.argv))
    print(table)
    print(json.dumps(summary))


def _score(report) -> dict:
    return {"model": report.adapter or "bare base", "pass1": report.overall.pass_at_1,
            "passk": report.overall.pass_at_k, "answered": report.overall.answered_rate,
            "by_type": {t: s.pass_at_1 for t, s in report.by_type.items()}}


def _mean_sd(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": values}


def _window(rows: list[dict], key: str, last: bool) -> float | None:
    part = rows[-WINDOW:] if last else rows[:WINDOW]
    values = [r[key] for r in part if r.get(key) is not None]
    return statistics.fmean(values) if values else None


def _summarize(args: argparse.Namespace, scores: dict[str, list[dict]], curves: dict[str, list[list[dict]]]) -> dict:
    out: dict = {"seeds": args.seeds, "heldout": {"tasks": args.heldout, "seed": args.heldout_seed,
                                                  "samples": args.samples, "temperature": args.temperature,
                                                  "max_tokens": args.max_tokens}}
    for label, runs in scores.items():
        types = sorted({t for r in runs for t in r["by_type"]})
        out[label] = {"pass1": _mean_sd([r["pass1"] for r in runs]), "passk": _mean_sd([r["passk"] for r in runs]),
                      "by_type": {t: _mean_sd([r["by_type"].get(t, 0.0) for r in runs]) for t in types},
                      "models": [r["model"] for r in runs]}
    for label, runs in curves.items():
        out[label]["curves"] = {key: {"first": [_window(r, key, False) for r in runs],
                                      "last": [_window(r, key, True) for r in runs]} for key in SERIES}
        out[label]["logprob_gap_max"] = max((r.get("logprob_gap_max") or 0.0) for rows in runs for r in rows)
    pop, single = out["population"]["pass1"]["values"], out["single"]["pass1"]["values"]
    out["population_beats_single"] = {"seeds": sum(p > s for p, s in zip(pop, single)), "of": len(pop),
                                      "mean_diff": statistics.fmean(pop) - statistics.fmean(single)}
    return out


def format_table(summary: dict) -> str:
    h = summary["heldout"]
    lines = [f"held-out: {h['tasks']} generated tasks (seed {h['seed']}), {h['samples']} samples at T={h['temperature']}, "
             f"max {h['max_tokens']} tokens, the same for every model; seeds {summary['seeds']}",
             "", "| model | pass@1 | pass@k | code_o | code_i | code_f |", "|---|---|---|---|---|---|"]
    for label in ("base", "single", "population"):
        s = summary[label]
        cell = lambda v: f"{v['mean']:.3f} ± {v['sd']:.3f}"  # noqa: E731
        by_type = [cell(s["by_type"][t]) if t in s["by_type"] else "-" for t in ("code_o", "code_i", "code_f")]
        name = {"base": "bare base", "single": "single agent", "population": "population best student"}[label]
        lines.append(f"| {name} | {cell(s['pass1'])} | {cell(s['passk'])} | " + " | ".join(by_type) + " |")
    lines += ["", f"| curve (mean of first / last {WINDOW} steps, per seed) | population | single agent |", "|---|---|---|"]
    for key, title in SERIES.items():
        cells = []
        for label in ("population", "single"):
            c = summary[label]["curves"][key]
            cells.append(", ".join(f"{a:.2f}→{b:.2f}" if a is not None and b is not None else "-"
                                   for a, b in zip(c["first"], c["last"])))
        lines.append(f"| {title} | {cells[0]} | {cells[1]} |")
    b = summary["population_beats_single"]
    lines += ["", f"population best student above the single agent in {b['seeds']} of {b['of']} seeds "
                  f"(mean difference {b['mean_diff']:+.3f} pass@1); largest logprob_gap_max: population "
                  f"{summary['population']['logprob_gap_max']:.1e}, single {summary['single']['logprob_gap_max']:.1e}"]
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


def _readme(args: argparse.Namespace, table: str, argv: list[str]) -> str:
    return (f"# Population vs single agent vs bare base\n\nCommand:\n\n    python3 {' '.join(argv)}\n\n{table}\n\n"
            + "".join(f"![{title}]({key}.png)\n" for key, title in SERIES.items()))


if __name__ == "__main__":
    main()
