"""How far PFSP moved each step's matching from uniform, read from a run's league.json.

    python3 benchmarks/matching_tilt.py RUN_DIR [RUN_DIR ...] [--weighting variance|hard|uniform] [--window 20]

Why: an ablation of PFSP (`league.weighting=uniform`) costs a population run per seed; whether
it can show anything depends on how much the ratings actually steer who meets whom, which the
league already records. For every step of a run with as many teachers as students, the ratings
the step was matched on are rebuilt from the members' rating history (checked against the win
probability each match recorded), and the exact distribution over plans is compared with
uniform (`popula.league.pfsp.plan_distribution`). Printed per run:
- plan TV: total variation distance between PFSP's plan distribution and uniform (0: the
  ratings change nothing; 1 - 1/n!: one plan always), mean and largest over steps, and its mean
  over each `--window` steps (the tilt changes as the ratings settle);
- meet TV: for each student, the same distance over the teacher it meets, averaged;
- free TV: the same for a teacher drawing its student by the weights alone, as if not every
  member had to play each step (the tilt the coverage rule leaves out), averaged over teachers;
- the largest plan's probability against uniform's 1/n!;
- the rebuild's largest error on a recorded win probability (should be ~0).
`--weighting` asks what another weighting would have done on the same ratings (default: the
run's own; a uniform run's own tilt is 0 by definition). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from popula.errors import PopulaError  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.league import League  # noqa: E402
from popula.league.pfsp import pfsp_probabilities, plan_distribution  # noqa: E402
from popula.league.rating import Rating  # noqa: E402


def _rating_before(league: League, name: str, step: int) -> Rating:
    """`name`'s rating when step `step` was matched: its last snapshot before it, else the prior."""
    points = [(s, mu, sigma) for s, mu, sigma in league.member(name).history if s < step]
    if not points:
        return league.system.initial()
    _, mu, sigma = points[-1]
    return Rating(mu, sigma)


def step_tilts(league: League, weighting: str) -> list[dict[str, float]]:
    """Per matched step: plan TV, mean meet TV, mean free TV, the top plan's probability, the rebuild's error."""
    by_step: dict[int, list] = {}
    for record in league.matches:
        by_step.setdefault(record.step, []).append(record)
    rows = []
    for step, records in sorted(by_step.items()):
        teachers = sorted({r.teacher for r in records})
        students = sorted({r.student for r in records})
        if len(teachers) != len(students):
            raise PopulaError(f"step {step}: {len(teachers)} teachers and {len(students)} students played; "
                              "the exact plan distribution needs as many of each")
        ratings = {n: _rating_before(league, n, step) for n in teachers + students}
        p = np.array([[league.system.win_probability(ratings[t], ratings[s]) for s in students] for t in teachers])
        error = max(abs(p[teachers.index(r.teacher), students.index(r.student)] - r.p_teacher) for r in records)
        plans, probs = plan_distribution(p, weighting, league.config.hard_k)
        n = len(teachers)
        meet = np.zeros((n, n))  # meet[i, j]: P(teacher i meets student j)
        for plan, prob in zip(plans, probs):
            meet[range(n), plan] += prob
        free = np.array([pfsp_probabilities(row, weighting, league.config.hard_k) for row in p])
        rows.append({"step": step, "n": n, "plan_tv": 0.5 * float(np.abs(probs - 1.0 / len(plans)).sum()),
                     "meet_tv": float(np.mean(0.5 * np.abs(meet - 1.0 / n).sum(axis=0))),
                     "free_tv": float(np.mean(0.5 * np.abs(free - 1.0 / n).sum(axis=1))),
                     "top_plan": float(probs.max()), "uniform_plan": 1.0 / len(plans), "rebuild_error": float(error)})
    return rows


def summarise(run_dir: Path, weighting: str | None, window: int = 20) -> dict[str, Any]:
    """One run's tilt figures over its steps."""
    path = run_dir / "league.json"
    if not path.is_file():
        raise PopulaError(f"{path}: no such file; give a `popula run` directory")
    league = League.load(path)
    if league.config.past_versions:
        raise PopulaError(f"{path}: its retired members also played (league.past_versions); the exact plan "
                          "distribution covers alive members only")
    used = weighting or league.config.weighting
    rows = step_tilts(league, used)
    if not rows:
        raise PopulaError(f"{path}: no match recorded yet")
    return {"weighting": used, "steps": len(rows), "n": rows[0]["n"],
            "plan_tv_mean": statistics.fmean(r["plan_tv"] for r in rows), "plan_tv_max": max(r["plan_tv"] for r in rows),
            "window": window, "plan_tv_by_window": [statistics.fmean(r["plan_tv"] for r in rows[i:i + window])
                                                    for i in range(0, len(rows), window)],
            "meet_tv_mean": statistics.fmean(r["meet_tv"] for r in rows),
            "free_tv_mean": statistics.fmean(r["free_tv"] for r in rows),
            "top_plan_mean": statistics.fmean(r["top_plan"] for r in rows), "uniform_plan": rows[0]["uniform_plan"],
            "rebuild_error_max": max(r["rebuild_error"] for r in rows)}


def format_table(results: dict[str, dict[str, Any]]) -> str:
    head = ["run", "weighting", "n+n", "steps", "plan TV mean / max", "plan TV by window", "meet TV mean", "free TV mean",
            "top plan (uniform)", "rebuild error"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run, f in results.items():
        by_window = " ".join(f"{x:.3f}" for x in f["plan_tv_by_window"])
        lines.append(f"| {run} | {f['weighting']} | {f['n']}+{f['n']} | {f['steps']} | {f['plan_tv_mean']:.3f} / "
                     f"{f['plan_tv_max']:.3f} | {by_window} | {f['meet_tv_mean']:.3f} | {f['free_tv_mean']:.3f} | "
                     f"{f['top_plan_mean']:.3f} ({f['uniform_plan']:.3f}) | {f['rebuild_error_max']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--weighting", choices=["variance", "hard", "uniform"], default=None,
                        help="the PFSP weighting to measure (default: each run's own)")
    parser.add_argument("--window", type=int, default=20, help="steps averaged for the plan TV by window")
    args = parser.parse_args()
    try:
        if args.window < 1:
            raise PopulaError(f"--window {args.window}: give at least 1 step")
        results = {str(run): summarise(run, args.weighting, args.window) for run in args.runs}
    except PopulaError as exc:
        sys.exit(f"matching_tilt: {exc}")
    print(format_table(results))
    print(json.dumps(results))


if __name__ == "__main__":
    run_script(main)
