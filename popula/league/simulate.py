"""A synthetic league of members with known strengths, to check the ratings and PFSP.

Match outcomes are sampled from the members' true skills through the same path the
trainer uses (task results -> ``League.record_match``): a student solves a rollout with
probability sigmoid(1.5 (skill_student - skill_teacher)), jittered per task; 10% of
proposals are invalid; 8 tasks per match, 4 rollouts per task. If the league cannot
recover the true order here, it cannot in a real run either.

``python3 -m popula.league.simulate`` prints how fast the order is recovered and how
balanced the PFSP pairs are; the last line is one JSON object of the figures.
"""

from __future__ import annotations

import json
from typing import Mapping

import numpy as np

from popula.league.league import League
from popula.league.outcomes import TaskResult
from popula.league.pfsp import Weighting
from popula.league.schema import LeagueConfig, Role

# Four teachers and four students, one skill scale, evenly spaced.
TEACHER_SKILLS: dict[str, float] = {"t0": -1.5, "t1": -0.5, "t2": 0.5, "t3": 1.5}
STUDENT_SKILLS: dict[str, float] = {"s0": -1.25, "s1": -0.25, "s2": 0.75, "s3": 1.75}
DEFAULT_SKILLS: dict[str, float] = {**TEACHER_SKILLS, **STUDENT_SKILLS}
DEFAULT_ROLES: dict[str, Role] = {**dict.fromkeys(TEACHER_SKILLS, "teacher"), **dict.fromkeys(STUDENT_SKILLS, "student")}


def simulate_league(
    skills: dict[str, float], steps: int, seed: int, weighting: Weighting = "variance", *,
    roles: Mapping[str, Role], config: LeagueConfig | None = None,
) -> League:
    """Play ``steps`` PFSP steps between the members of ``skills``, each in its ``roles`` entry
    (``config``: the league's, its weighting then ``weighting``; default TrueSkill's)."""
    rng = np.random.default_rng(seed)
    league = League((config or LeagueConfig()).model_copy(update={"weighting": weighting}))
    for name in skills:
        league.add_member(name, roles[name])
    for step in range(steps):
        for match in league.match(rng):
            solve = 1.0 / (1.0 + np.exp(-1.5 * (skills[match.student] - skills[match.teacher])))
            tasks = []
            for _ in range(8):
                if rng.random() < 0.1:
                    tasks.append(TaskResult(valid=False))
                else:
                    q = float(np.clip(solve + rng.normal(0.0, 0.2), 0.0, 1.0))
                    tasks.append(TaskResult(valid=True, rho=rng.binomial(4, q) / 4))
            league.record_match(step, match.teacher, match.student, tasks)
        league.end_step(step)
    return league


def spearman(a: list[float], b: list[float]) -> float:
    """Rank correlation (assumes no ties, true of continuous ratings)."""
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


def order_recovered(league: League, skills: dict[str, float]) -> bool:
    """Whether each role's ranking by conservative rating is exactly the true order."""
    for role in ("teacher", "student"):
        truth = sorted((m.name for m in league.alive(role)), key=lambda n: -skills[n])
        if [m.name for m in league.ranked(role)] != truth:
            return False
    return True


def main() -> None:
    seeds = range(20)
    rows = []
    for steps in (25, 50, 100):
        leagues = [simulate_league(DEFAULT_SKILLS, steps, seed, roles=DEFAULT_ROLES) for seed in seeds]
        names = list(DEFAULT_SKILLS)
        balance = [
            np.mean([r.p_teacher * (1 - r.p_teacher) for r in lg.matches if r.step >= steps // 2])
            for lg in leagues
        ]
        rows.append({
            "steps": steps,
            "exact_order": sum(order_recovered(lg, DEFAULT_SKILLS) for lg in leagues) / len(leagues),
            "spearman_all": float(np.mean([
                spearman([DEFAULT_SKILLS[n] for n in names], [lg.member(n).mu for n in names]) for lg in leagues
            ])),
            "pair_p1p_2nd_half": float(np.mean(balance)),
        })
    print(f"simulated 4T+4S league, {len(seeds)} seeds")
    print(f"{'steps':>6} {'exact order':>12} {'spearman':>9} {'mean p(1-p)':>12}")
    for r in rows:
        print(f"{r['steps']:>6} {r['exact_order']:>12.2f} {r['spearman_all']:>9.3f} {r['pair_p1p_2nd_half']:>12.4f}")
    print(json.dumps({"seeds": len(seeds), "rows": rows}))


if __name__ == "__main__":
    main()
