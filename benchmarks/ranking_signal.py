"""Can anything the run could measure rank a population's students the way held-out tasks do?

    python3 benchmarks/ranking_signal.py RUN_DIR [RUN_DIR ...] --heldout FILE.jsonl
        [--samples 4] [--exam-tasks 100] [--exam-samples 2] [--exam-seed 4242] [--out DIR]

The league picks and evolves students by TrueSkill rating, learned from matches against
teachers. Whether that ordering means anything is a measurable question: order the live
students of each run by a signal, then compare with their order by pass@1 on held-out tasks
(Spearman's rank correlation, ties at their mean rank). Signals compared:

- `rating`: the conservative TrueSkill rating in the run's league.json;
- `exam`: pass@1 on a small fixed set of generated tasks (`--exam-tasks` x `--exam-samples`
  from the held-out stream at `--exam-seed`), what a run could score its students on every
  few steps (`heldout.every`);
- `split half`: the held-out set's own ordering on a random half of its tasks against the
  other half (mean over 200 splits): how well the held-out figure can rank these students at
  all, the ceiling of any signal.

Also per run: the strongest minus the weakest student's held-out pass@1, paired over tasks,
with its standard error: how far apart the students are next to the noise of measuring them.
Every model is scored with `popula eval RUN --per-task` (cached in OUT as JSON; a rerun reuses
them). Prints the table and, as its last line, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.eval.paired import per_task_pass1  # noqa: E402
from popula.eval.correlation import rank_correlation  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.records import write_jsonl  # noqa: E402
from popula.tasks.generator import HELDOUT_NAMESPACE, generate_tasks  # noqa: E402

SPLITS = 200


def score(run_dir: Path, tasks: Path, samples: int, out: Path, args: argparse.Namespace) -> dict:
    """`popula eval RUN_DIR --json --per-task` of every live student (cached in `out`)."""
    if not out.exists():
        report = subprocess.run([sys.executable, "-m", "popula", "eval", str(run_dir), "--tasks", str(tasks),
                                 "--samples", str(samples), "--temperature", str(args.temperature),
                                 "--max-tokens", str(args.max_tokens), "--json", "--per-task"],
                                check=True, capture_output=True, text=True).stdout
        out.write_text(report)
    return json.loads(out.read_text())


def split_half(per_task: dict[str, dict[str, float]], rng: random.Random) -> float | None:
    """Mean rank correlation of the students' pass@1 on one half of the tasks against the other half."""
    names = sorted(per_task)
    ids = sorted(per_task[names[0]])
    values = []
    for _ in range(SPLITS):
        rng.shuffle(ids)
        a, b = ids[: len(ids) // 2], ids[len(ids) // 2:]
        rho = rank_correlation([statistics.fmean(per_task[n][t] for t in a) for n in names],
                               [statistics.fmean(per_task[n][t] for t in b) for n in names])
        if rho is not None:
            values.append(rho)
    return statistics.fmean(values) if values else None


def measure(run_dir: Path, heldout: dict, exam: dict) -> dict:
    """One run's students: each signal's rank correlation with held-out pass@1, and their spread."""
    per_task = {m["member"]: per_task_pass1(m) for m in heldout["members"]}
    names = sorted(per_task)
    held = {n: statistics.fmean(per_task[n].values()) for n in names}
    rating = {m["member"]: m["rating"]["conservative"] for m in heldout["members"]}
    on_exam = {m["member"]: m["overall"]["pass_at_1"] for m in exam["members"]}
    weakest, strongest = min(names, key=held.get), max(names, key=held.get)
    diff = [per_task[strongest][t] - per_task[weakest][t] for t in per_task[strongest]]
    return {
        "run": str(run_dir), "students": {n: {"heldout": held[n], "exam": on_exam[n], "rating": rating[n]} for n in names},
        "rating": rank_correlation([rating[n] for n in names], [held[n] for n in names]),
        "exam": rank_correlation([on_exam[n] for n in names], [held[n] for n in names]),
        "split_half": split_half(per_task, random.Random(0)),
        "spread": {"strongest_minus_weakest": statistics.fmean(diff),
                   "se": statistics.stdev(diff) / len(diff) ** 0.5},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR")
    parser.add_argument("--heldout", type=Path, required=True, help="held-out task file (benchmarks/learning.py's)")
    parser.add_argument("--samples", type=int, default=4, help="held-out samples per task")
    parser.add_argument("--exam-tasks", type=int, default=100)
    parser.add_argument("--exam-samples", type=int, default=2)
    parser.add_argument("--exam-seed", type=int, default=4242, help="a held-out-stream seed apart from --heldout's")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, default=Path("runs/ranking-signal"))
    args = parser.parse_args()
    for run in args.runs:
        if not (run / "league.json").is_file():
            parser.error(f"{run}: not a run directory (no league.json)")
    if not args.heldout.is_file():
        parser.error(f"no held-out file {args.heldout}")
    args.out.mkdir(parents=True, exist_ok=True)
    exam_file = args.out / f"exam-{args.exam_tasks}-s{args.exam_seed}.jsonl"
    if not exam_file.exists():
        write_jsonl(exam_file, [t.to_json() for t in generate_tasks(args.exam_tasks, args.exam_seed,
                                                                    namespace=HELDOUT_NAMESPACE)])
    rows = []
    for k, run in enumerate(args.runs):
        heldout = score(run, args.heldout, args.samples, args.out / f"heldout-{k}-{run.name}.json", args)
        exam = score(run, exam_file, args.exam_samples, args.out / f"exam-{k}-{run.name}.json", args)
        rows.append(measure(run, heldout, exam))

    def cell(v: float | None) -> str:
        return "-" if v is None else f"{v:+.2f}"

    print(f"Spearman with held-out pass@1 ({args.heldout.name}, {args.samples} samples) among each run's live students")
    print(f"exam: {args.exam_tasks} tasks x {args.exam_samples} samples, held-out stream seed {args.exam_seed}\n")
    print("| run | students | rating | exam | split half (ceiling) | strongest - weakest (se) |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        s = r["spread"]
        print(f"| {r['run']} | {len(r['students'])} | {cell(r['rating'])} | {cell(r['exam'])} | {cell(r['split_half'])} "
              f"| {s['strongest_minus_weakest']:+.3f} ({s['se']:.3f}) |")
    means = {key: statistics.fmean(v) if (v := [r[key] for r in rows if r[key] is not None]) else None
             for key in ("rating", "exam", "split_half")}
    print(f"| mean | | {cell(means['rating'])} | {cell(means['exam'])} | {cell(means['split_half'])} | |")
    print(json.dumps({"runs": rows, "mean": means, "exam": {"tasks": args.exam_tasks, "samples": args.exam_samples,
                                                            "seed": args.exam_seed}}))


if __name__ == "__main__":
    run_script(main)
