"""Two `benchmarks/learning.py` output folders compared task by task: did setting A beat setting B?

    python3 benchmarks/compare_learning.py A_DIR B_DIR --seeds 0 1 2 3 4 [--labels population single]
                                           [--pick best|mean|weakest] [--decoding sampled|greedy]

Why: a change of settings is judged against the same seeds' runs of the other setting on the same
held-out tasks, not against numbers from another table. Each folder holds what learning.py writes
(`<label>-s<seed>/` runs and `scores/<label>-s<seed>-<adapter>.json` reports); a folder of bare
`popula run` directories with such a `scores/` folder works as well, and so does the docs folder a
study was published to, whose `live_students.json` stands in for the runs it no longer has. For
each label and seed the model is `--pick`: the run's best student by conservative rating (`best`,
the default: `popula.run.rundir.best_student`, as learning.py picks it), the mean of its live students
(`mean`: each task scored by their mean, as PopuLoRA reports a population and as an ablation is
judged), or its weakest live student by held-out pass@1 (`weakest`). A single agent's one
adapter is all three.
Printed for each label: pass@1 and pass@k of A minus B (`popula.eval.paired`: the mean per-task
difference, its standard error over tasks and its spread over seeds), and of each against the bare
base when `scores/base.json` is there. The two folders must have scored the same held-out tasks.
`--decoding greedy` compares the greedy scores learning.py writes beside the sampled ones
(`scores/greedy-*.json`: one answer at T=0), which tell a gain in solving from sharpening.
The last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.errors import PopulaError  # noqa: E402
from popula.eval.paired import (PairedDifference, mean_report, paired_difference, per_task_pass1,  # noqa: E402
                                per_task_pass_at_k)
from popula.eval.report import read_report  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.run.rundir import live_students  # noqa: E402

METRICS = {"pass@1": per_task_pass1, "pass@k": per_task_pass_at_k}
PICKS = {"best": "best student by rating", "mean": "live students' mean", "weakest": "weakest live student"}
DECODINGS = {"sampled": ("", ""), "greedy": ("greedy-", " --samples 1 --temperature 0")}  # -> file prefix, eval flags


def _report(out: Path, label: str, seed: int, name: str, decoding: str = "sampled") -> dict[str, Any]:
    prefix, flags = DECODINGS[decoding]
    path = out / "scores" / f"{prefix}{label}-s{seed}-{name}.json"
    if not path.exists():
        raise PopulaError(f"{path}: no report for {label}-s{seed}'s student {name!r}; score it with "
                          f"`popula eval {out / f'{label}-s{seed}'} --adapter {name}{flags} --json --per-task` "
                          f"(or run benchmarks/learning.py on {out})")
    return read_report(path)


def live_names(out: Path, label: str, seed: int) -> list[str]:
    """OUT/<label>-s<seed>'s live students, best-rated first: from the run's league, or, for a
    published study whose runs are gone, from the live_students.json learning.py wrote beside it."""
    run = out / f"{label}-s{seed}"
    if run.is_dir():
        return [m.name for m in live_students(run)]
    published = out / "live_students.json"
    try:
        return list(json.loads(published.read_text())[run.name])
    except (OSError, ValueError, KeyError, TypeError):
        raise PopulaError(f"{out}: neither a run folder {run.name}/ nor its entry in {published.name}") from None


def picked_reports(out: Path, label: str, seed: int, pick: str, decoding: str = "sampled") -> dict[str, dict[str, Any]]:
    """metric -> OUT/<label>-s<seed>'s `pick` (best, mean or weakest) as one report whose pass@1
    slot holds that metric per task (`popula.eval.paired.mean_report`), so every pick is read alike."""
    names = live_names(out, label, seed)
    if pick == "best":
        names = names[:1]
    reports = [_report(out, label, seed, name, decoding) for name in names]
    if pick == "weakest":
        reports = [min(reports, key=lambda r: statistics.fmean(per_task_pass1(r).values()))]
    return {metric: mean_report(reports, f"{label}-s{seed} {pick}", per_task) for metric, per_task in METRICS.items()}


def compare(a: Path, b: Path, seeds: list[int], labels: list[str], pick: str = "best",
            decoding: str = "sampled") -> dict[str, dict[str, PairedDifference]]:
    """label -> comparison name -> paired difference, for every metric."""
    out: dict[str, dict[str, PairedDifference]] = {}
    for label in labels:
        ra = [picked_reports(a, label, s, pick, decoding) for s in seeds]
        rb = [picked_reports(b, label, s, pick, decoding) for s in seeds]
        pairs = {"A - B": (ra, rb)}
        for name, folder, reports in (("A - base", a, ra), ("B - base", b, rb)):
            base = folder / "scores" / f"{DECODINGS[decoding][0]}base.json"
            if base.exists():
                bare = read_report(base)
                pairs[name] = (reports, [{m: mean_report([bare], "base", f) for m, f in METRICS.items()}] * len(seeds))
        out[label] = {f"{metric} {name}": paired_difference([r[metric] for r in x], [r[metric] for r in y])
                      for name, (x, y) in pairs.items() for metric in METRICS}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("a", type=Path, help="setting A: a learning.py output folder")
    parser.add_argument("b", type=Path, help="setting B: the same seeds under the other setting")
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--labels", nargs="+", default=["population", "single"],
                        help="which runs of each seed to compare (default: population single)")
    parser.add_argument("--pick", choices=PICKS, default="best",
                        help="which model stands for a run: its best-rated student (default), the mean of its "
                             "live students, or its weakest by held-out pass@1")
    parser.add_argument("--decoding", choices=DECODINGS, default="sampled",
                        help="compare the sampled scores (default) or the greedy ones learning.py writes beside them")
    args = parser.parse_args()
    try:
        result = compare(args.a, args.b, args.seeds, args.labels, args.pick, args.decoding)
    except PopulaError as e:
        print(f"compare_learning: {e}", file=sys.stderr)
        return 2
    print(f"A = {args.a}, B = {args.b}, seeds {' '.join(map(str, args.seeds))}; each run's {PICKS[args.pick]}, "
          f"{args.decoding}\n")
    for label, rows in result.items():
        print(label)
        for name, diff in rows.items():
            print(f"  {name:16s} {diff.describe()}")
    print(json.dumps({"a": str(args.a), "b": str(args.b), "seeds": args.seeds, "pick": args.pick,
                      "decoding": args.decoding,
                      "results": {label: {n: d.to_json() for n, d in rows.items()} for label, rows in result.items()}}))
    return 0


if __name__ == "__main__":
    run_script(main)
