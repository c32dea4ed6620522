"""The learning ladder at full size: do one student and one teacher learn on the tiny base?

    python3 benchmarks/learning_ladder.py [--config configs/tiny-cpu.yaml] [--steps 12]
                                          [--tasks 24] [--proposals 36] [--set KEY=VALUE ...]

Rung 1: a fresh student adapter trained on a fixed set of generated tasks with the
student reward; its solve rate on those tasks per step. Rung 2: a fresh teacher adapter
proposing against the bare base as its student, trained with the teacher reward; its valid
rate per step. Both use the config's learner, generation and LoRA settings and the run's
own parts (`popula.run.ladder`). Prints a table and, as its last line, one JSON object.
A rung that does not climb says the gradient path, not the curriculum, is what to fix.
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
from popula.openmp import configure_waits  # noqa: E402

configure_waits()  # before torch loads

import numpy as np  # noqa: E402

from popula.config import load_config  # noqa: E402
from popula.model.base import resolve_base_model  # noqa: E402
from popula.run.builders import build_engine, build_sandbox, runtime_of  # noqa: E402
from popula.run.ladder import Ladder  # noqa: E402
from popula.tasks.generator import generate_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "tiny-cpu.yaml")
    parser.add_argument("--steps", type=int, default=12, help="updates per rung")
    parser.add_argument("--tasks", type=int, default=24, help="fixed tasks of the student rung")
    parser.add_argument("--proposals", type=int, default=36, help="teacher proposals per step")
    parser.add_argument("--rungs", nargs="+", default=["student", "teacher"], choices=["student", "teacher"])
    parser.add_argument("--seed", type=int, default=4242)
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    args = parser.parse_args()

    cfg = load_config(args.config, args.overrides)
    base = resolve_base_model(cfg.base_model)
    figures: dict[str, dict] = {}
    for rung_name in args.rungs:
        start = time.monotonic()
        runtime = runtime_of(cfg)
        engine = build_engine(cfg, base, runtime, max_adapters=2)
        try:
            with build_sandbox(cfg) as sandbox, tempfile.TemporaryDirectory() as work:
                ladder = Ladder(cfg, base, Path(work), engine=engine, sandbox=sandbox, runtime=runtime)
                if rung_name == "student":
                    tasks = generate_tasks(args.tasks, args.seed, namespace="ladder")
                    rung = ladder.student_rung(tasks, args.steps)
                else:
                    refs = generate_tasks(60, args.seed + 1, namespace="ladder-refs")
                    rung = ladder.teacher_rung(refs, args.steps, args.proposals, np.random.default_rng(args.seed))
        finally:
            engine.close()
        curve = [*rung.per_step, rung.final]
        figures[rung_name] = {"figure": rung.name, "curve": [round(x, 4) for x in curve],
                              "first3": statistics.fmean(curve[:3]), "last3": statistics.fmean(curve[-3:]),
                              "seconds": round(time.monotonic() - start, 1)}
    print(f"config {args.config} {' '.join(args.overrides)}: lr {cfg.learner.lr}, rollouts {cfg.generation.rollouts}")
    for name, f in figures.items():
        print(f"{f['figure']:<20} first 3 {f['first3']:.3f}  last 3 {f['last3']:.3f}  "
              f"curve {' '.join(f'{x:.2f}' for x in f['curve'])}  ({f['seconds']:.0f} s)")
    print(json.dumps({"lr": cfg.learner.lr, "overrides": args.overrides, **figures}))


if __name__ == "__main__":
    main()
