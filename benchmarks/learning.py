"""Does the population learn a better curriculum than single-agent self-play?

    python3 benchmarks/learning.py [--steps N] [--out DIR] [--heldout N] [--set KEY=VALUE ...]

Runs `configs/tiny-cpu.yaml` (4 teachers + 4 students) and `configs/single-agent.yaml`
(one adapter that proposes and solves) for the same number of steps from the same base
and seed, then scores each run's best student (by conservative TrueSkill rating; the one
adapter for the baseline) on a held-out set of generated tasks that training never draws
from. Prints, per step, solve rate, valid rate and the four complexity measures of both
runs, writes comparison plots to OUT/plots/, and as its last line one JSON object:

    {"steps", "population": {per-step lists..., "heldout_pass1"}, "single": {...}}

The paper's effect at small scale would read: single-agent solve rate climbing toward 1
while complexity falls or stalls; the population's complexity rising and its best student
at least as good held out. Small runs on the tiny base are noisy: read the plots.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from popula.openmp import configure_waits  # noqa: E402

configure_waits()  # before torch loads

from popula.config import load_config  # noqa: E402
from popula.evaluate import EvalSettings, evaluate_target  # noqa: E402
from popula.run.metrics import read_metrics  # noqa: E402
from popula.run.plots import plot_runs  # noqa: E402
from popula.run.population import PopulationRun  # noqa: E402
from popula.tasks.generator import HELDOUT_NAMESPACE, generate_tasks  # noqa: E402
from popula.tasks.records import write_jsonl  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUNS = {"population": ROOT / "configs" / "tiny-cpu.yaml", "single": ROOT / "configs" / "single-agent.yaml"}
SERIES = ["solve_rate", "valid_rate", "teacher_reward_mean", "ast_depth", "cyclomatic", "loc", "n_vars"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("runs/learning-benchmark"))
    parser.add_argument("--heldout", type=int, default=60, help="held-out tasks to score best students on")
    parser.add_argument("--heldout-seed", type=int, default=12345)
    parser.add_argument("--samples", type=int, default=4, help="answers per held-out task (pass@1 estimate)")
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                        help="config override applied to both runs")
    parser.add_argument("--resume", action="store_true", help="continue runs already in OUT")
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    heldout = args.out / "heldout.jsonl"
    if not heldout.exists():
        tasks = generate_tasks(args.heldout, args.heldout_seed, namespace=HELDOUT_NAMESPACE)
        write_jsonl(heldout, [t.to_json() for t in tasks])

    figures: dict[str, dict] = {}
    for label, config in RUNS.items():
        run_dir = args.out / label
        cfg = load_config(config, [*args.overrides, f"run.steps={args.steps}"])
        resume = args.resume and (run_dir / "config.yaml").exists()
        PopulationRun(cfg, run_dir, resume=resume).train()  # a finished run resumes to no new step
        rows = read_metrics(run_dir / "metrics.jsonl")
        report = evaluate_target(str(run_dir), heldout, settings=EvalSettings(samples=args.samples), progress=True)
        figures[label] = {key: [r.get(key) for r in rows] for key in ["step", *SERIES]}
        figures[label]["heldout_pass1"] = report.overall.pass_at_1
        figures[label]["heldout_by_type"] = {t: s.pass_at_1 for t, s in report.by_type.items()}
        figures[label]["best_student"] = report.adapter

    plot_runs([args.out / label for label in RUNS], args.out / "plots")
    print_table(figures)
    print(json.dumps({"steps": args.steps, **figures}))


def print_table(figures: dict[str, dict]) -> None:
    def fmt(v: object) -> str:
        return "-" if v is None else f"{v:.2f}"

    cols = ["solve", "valid", "t_rew", "depth", "cc", "loc", "vars"]
    print(f"{'step':>4} | " + " | ".join(f"{label:^41}" for label in figures))
    print(f"{'':>4} | " + " | ".join(" ".join(f"{c:>5}" for c in cols) for _ in figures))
    steps = max(len(f["step"]) for f in figures.values())
    for i in range(steps):
        cells = []
        for f in figures.values():
            cells.append(" ".join(f"{fmt(f[k][i]) if i < len(f[k]) else '':>5}" for k in SERIES))
        print(f"{i + 1:>4} | " + " | ".join(cells))
    for label, f in figures.items():
        by_type = ", ".join(f"{t} {v:.2f}" for t, v in f["heldout_by_type"].items())
        print(f"{label}: best student {f['best_student']} held-out pass@1 {f['heldout_pass1']:.3f} ({by_type})")


if __name__ == "__main__":
    main()
