"""The learning ladder at full size: do one student and one teacher learn on the tiny base?

    python3 benchmarks/learning_ladder.py [--config configs/tiny-cpu.yaml] [--steps 12]
                                          [--tasks 24] [--proposals 36] [--rungs ...]
                                          [--heldout FILE.jsonl] [--set KEY=VALUE ...]

Rung `student`: a fresh student adapter trained on a fixed set of generated tasks with the
student reward; its solve rate on those tasks per step. Rung `teacher`: a fresh teacher
adapter proposing against the bare base as its student, trained with the teacher reward;
its valid rate per step. Rung `transfer`: a fresh student trained on `--tasks` new generated
tasks at every step (the generator's own distribution as its curriculum, a namespace no
base corpus or held-out set uses); its solve rate on each step's unseen tasks. All use the
config's learner, generation and LoRA settings and the run's own parts (`popula.apps.ladder`).

With `--heldout` (e.g. `popula tasks --n 300 --seed 987654`), each student rung's trained
adapter and the bare base are scored on those tasks with the settings `benchmarks/learning.py`
uses (4 samples, T=0.8, 96 tokens): the transfer rung's gain there is the most a curriculum
of generated tasks can give this base in that many steps.

Prints a table and, as its last line, one JSON object. A rung that does not climb says the
gradient path, not the curriculum, is what to fix.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from popula.exits import run_script  # noqa: E402
from popula.openmp import configure_waits  # noqa: E402

configure_waits()  # before torch loads

import numpy as np  # noqa: E402

from popula.config import load_config  # noqa: E402
from popula.eval.settings import EvalSettings  # noqa: E402
from popula.eval.paired import paired_difference  # noqa: E402
from popula.eval.plots import pass_at_1_with_error  # noqa: E402
from popula.model.base import resolve_base_model  # noqa: E402
from popula.run.parts.builders import build_engine, build_sandbox, runtime_of  # noqa: E402
from popula.apps.ladder import Ladder  # noqa: E402
from popula.apps.targets import evaluate_target  # noqa: E402
from popula.tasks.generator import generate_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "tiny-cpu.yaml")
    parser.add_argument("--steps", type=int, default=12, help="updates per rung")
    parser.add_argument("--tasks", type=int, default=24, help="fixed tasks of the student rung")
    parser.add_argument("--proposals", type=int, default=36, help="teacher proposals per step")
    parser.add_argument("--rungs", nargs="+", default=["student", "teacher"], choices=["student", "teacher", "transfer"])
    parser.add_argument("--heldout", type=Path, help="score each student rung's adapter and the bare base on these tasks")
    parser.add_argument("--seed", type=int, default=4242)
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    args = parser.parse_args()

    cfg = load_config(args.config, args.overrides)
    base = resolve_base_model(cfg.base_model)
    figures: dict[str, dict] = {}
    reports: dict[str, dict] = {}  # held-out `--per-task` report, by model, for paired comparisons
    if args.heldout and any(r != "teacher" for r in args.rungs):
        figures["base"] = {"heldout": _heldout(cfg.base_model, args.heldout, None, reports, "base")}
    for rung_name in args.rungs:
        def progress(step: int, rate: float, rung_name: str = rung_name) -> None:
            print(f"{rung_name} rung: step {step}/{args.steps} rate {rate:.3f}", file=sys.stderr, flush=True)

        start = time.monotonic()
        runtime = runtime_of(cfg)
        engine = build_engine(cfg, base, runtime, max_adapters=2)
        try:
            with build_sandbox(cfg) as sandbox, tempfile.TemporaryDirectory() as work:
                ladder = Ladder(cfg, base, Path(work), engine=engine, sandbox=sandbox, runtime=runtime)
                if rung_name == "student":
                    tasks = generate_tasks(args.tasks, args.seed, namespace="ladder")
                    rung = ladder.student_rung(tasks, args.steps, progress)
                elif rung_name == "transfer":
                    stream = generate_tasks(args.tasks * (args.steps + 1), args.seed, namespace="ladder-transfer")
                    rung = ladder.student_rung(lambda step: stream[step * args.tasks:(step + 1) * args.tasks],
                                               args.steps, progress)
                else:
                    refs = generate_tasks(60, args.seed + 1, namespace="ladder-refs")
                    rung = ladder.teacher_rung(refs, args.steps, args.proposals, np.random.default_rng(args.seed),
                                               progress)
                heldout = (_heldout(cfg.base_model, args.heldout, str(rung.adapter.path), reports, rung_name)
                           if args.heldout and rung_name != "teacher" else None)
        finally:
            engine.close()
        curve = [*rung.per_step, rung.final]
        figures[rung_name] = {"figure": rung.name, "curve": [round(x, 4) for x in curve],
                              "first3": statistics.fmean(curve[:3]), "last3": statistics.fmean(curve[-3:]),
                              "seconds": round(time.monotonic() - start, 1)}
        if heldout is not None:
            gain = paired_difference([reports[rung_name]], [reports["base"]])
            figures[rung_name]["heldout"] = {**heldout, "gain": gain.mean, "gain_se": gain.task_se,
                                             "better_tasks": gain.better_tasks, "worse_tasks": gain.worse_tasks}
    print(f"config {args.config} {' '.join(args.overrides)}: lr {cfg.learner.lr}, rollouts {cfg.generation.rollouts}")
    for name, f in figures.items():
        if "curve" in f:
            print(f"{f['figure']:<26} first 3 {f['first3']:.3f}  last 3 {f['last3']:.3f}  "
                  f"curve {' '.join(f'{x:.2f}' for x in f['curve'])}  ({f['seconds']:.0f} s)")
    for name, f in figures.items():
        if "heldout" in f:
            h = f["heldout"]
            gain = f"  gain over base {h['gain']:+.3f} (paired se {h['gain_se']:.3f})" if "gain" in h else ""
            print(f"held-out, {name:<10} pass@1 {h['pass_at_1']:.3f} (se {h['se']:.3f})  pass@{HELDOUT.samples} "
                  f"{h['pass_at_k']:.3f}{gain}  on {h['tasks']} tasks ({args.heldout})")
    print(json.dumps({"lr": cfg.learner.lr, "overrides": args.overrides, **figures}))


HELDOUT = EvalSettings(samples=4, temperature=0.8, max_tokens=96)  # as benchmarks/learning.py scores every model


def _heldout(base_model: str, tasks: Path, adapter: str | None, reports: dict[str, dict], label: str) -> dict:
    """pass@1 (with its standard error over tasks) and pass@k of the base, or of the base with
    `adapter`; the report goes to `reports[label]` for paired comparisons (`popula.eval.paired`)."""
    report = reports[label] = evaluate_target(base_model, tasks, adapter=adapter, settings=HELDOUT).to_json()
    pass1, se = pass_at_1_with_error(report, "overall")
    return {"pass_at_1": pass1, "pass_at_k": report["overall"]["pass_at_k"], "tasks": len(report["per_task"]), "se": se}


if __name__ == "__main__":
    run_script(main)
