"""`popula leaderboard RUN_DIR [--json] [--plot FILE.png]`: the league's standings.

When the run probes held-out tasks (`heldout.every`, popula/eval/heldout.py), each member's
latest held-out pass@1 from metrics.jsonl stands beside its rating, with the rank correlation
of conservative rating and held-out pass@1 among the live students that have one. A run
made by `popula run --branch` says which run and step it started from.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from popula.cli.help import add_command
from popula.cli.paths import check_out_folder
from popula.errors import PopulaError
from popula.league import League
from popula.eval.correlation import rank_correlation
from popula.run.branch import read_branch
from popula.run.metrics import latest_heldout

MIN_FOR_SPEARMAN = 3  # students with a held-out score; with two the correlation is only ever +1 or -1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "leaderboard",
        examples=['popula leaderboard runs/first', 'popula leaderboard runs/first --json --plot ratings.png'],
        help="show teachers and students ranked by conservative TrueSkill rating",
        description=(
            "Read RUN_DIR/league.json and print, per role, every member that ever played "
            "(also those replaced by evolution) sorted by conservative rating mu - 3 sigma, "
            "with matches, win rate and lineage. A run with held-out probes (heldout.every) also "
            "shows each student's latest held-out pass@1 from metrics.jsonl and the step it was "
            "measured at, and the Spearman rank correlation of conservative rating and held-out "
            "pass@1 among live students (3 or more). A branched run (popula run --branch) names the run and "
            "step it started from and the settings it changed. Safe on a run that is still going: the "
            "trainer replaces league.json atomically."
        ),
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--plot", type=Path, metavar="FILE.png",
                        help="also draw rating trajectories per member with role mean and sd bands")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    if not args.run_dir.is_dir():
        raise PopulaError(f"{args.run_dir}: no such run directory")
    if args.plot:
        if args.plot.is_dir():
            raise PopulaError(f"--plot {args.plot} is a folder; give a file name, e.g. {args.plot / 'ratings.png'}")
        check_out_folder(args.plot.parent, "--plot")  # created when missing, as before
    league = League.load(args.run_dir / "league.json")
    rows = standings(league, latest_heldout(args.run_dir))
    spearman = heldout_spearman(rows)
    origin = read_branch(args.run_dir)
    if args.json:
        print(json.dumps({"step": league.step, "members": rows, "heldout_spearman": spearman, "branch": origin}))
    else:
        print(format_table(rows, league.step, spearman))
        if origin is not None:
            print(branch_line(origin))
    if args.plot:
        # deferred: matplotlib loads only when a plot is asked for
        from popula.league.plot import plot_ratings

        path = plot_ratings(league, args.plot)
        if not args.json:
            print(f"plot: {path}")
    return 0


def heldout_spearman(rows: list[dict]) -> dict | None:
    """Rank correlation of conservative rating and latest held-out pass@1 over live students that have one.

    None with fewer than MIN_FOR_SPEARMAN such students; `value` None when it is undefined
    (all ratings or all scores equal).
    """
    scored = [r for r in rows if r["role"] == "student" and r["alive"] and r.get("heldout")
              and r["heldout"]["pass1"] is not None]
    if len(scored) < MIN_FOR_SPEARMAN:
        return None
    value = rank_correlation([r["conservative"] for r in scored], [r["heldout"]["pass1"] for r in scored])
    return {"value": value, "students": len(scored)}


def standings(league, heldout: dict[str, dict] | None = None) -> list[dict]:
    """One row per member ever, teachers then students, best conservative rating first.

    `heldout` (from `latest_heldout`) adds each member's latest probe as "heldout" (None
    where it has none).
    """
    rows = []
    for role in ("teacher", "student"):
        for m in league.ranked(role, include_retired=True):
            st = league.stats(m.name)
            rows.append({
                "role": m.role, "name": m.name, "mu": m.mu, "sigma": m.sigma,
                "conservative": m.conservative, "matches": st.matches, "wins": st.wins,
                "draws": st.draws, "losses": st.losses, "win_rate": st.win_rate,
                "generation": m.generation, "parents": m.parents, "operator": m.operator,
                "born_step": m.born_step, "alive": m.alive, "replaced_by": m.replaced_by,
                "replaced_at_step": m.replaced_at_step,
                "age": _age(m, league.step), "early_rewards": [list(e) for e in m.early_rewards],
                "heldout": (heldout or {}).get(m.name),
            })
    return rows


def _age(member, step: int | None) -> int | None:
    """Steps a member trained: to the last closed step if alive, to its replacement if not."""
    end = member.replaced_at_step if not member.alive else step
    return None if end is None else end - member.born_step


def branch_line(origin: dict) -> str:
    """One line naming the run and step a branched run started from, and what it changed."""
    changed = ", ".join(origin["changed"]) or "nothing"
    return f"branched from {origin['source']} at step {origin['step']} (changed: {changed})"


def format_table(rows: list[dict], step: int | None, spearman: dict | None = None) -> str:
    """The table; a `heldout` column (pass1@step) after win% when any member has a held-out score."""
    with_heldout = any(r.get("heldout") for r in rows)
    header = ["role", "name", "mu", "sigma", "mu-3sd", "matches", "win%", "age", "gen", "parents", "status"]
    if with_heldout:
        header.insert(7, "heldout")
    body = []
    for r in rows:
        status = "alive" if r["alive"] else f"replaced by {r['replaced_by']} @{r['replaced_at_step']}"
        parents = "+".join(r["parents"]) or "-"
        if r["operator"]:
            parents += f" ({r['operator']})"
        cells = [
            r["role"], r["name"], f"{r['mu']:.2f}", f"{r['sigma']:.2f}", f"{r['conservative']:.2f}",
            str(r["matches"]), "-" if r["win_rate"] is None else f"{100 * r['win_rate']:.0f}",
            "-" if r["age"] is None else str(r["age"]), str(r["generation"]), parents, status,
        ]
        if with_heldout:
            probe = r.get("heldout")
            cells.insert(7, "-" if not probe or probe["pass1"] is None else f"{probe['pass1']:.3f}@{probe['step']}")
        body.append(cells)
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
    numeric = {2, 3, 4, 5, 6, 7, 8, 9} if with_heldout else {2, 3, 4, 5, 6, 7, 8}

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [f"league after step {step}" if step is not None else "league (no step closed yet)", line(header)]
    previous_role = None
    for row in body:
        if previous_role is not None and row[0] != previous_role:
            out.append("")
        out.append(line(row))
        previous_role = row[0]
    if with_heldout:
        probes = [r["heldout"] for r in rows if r.get("heldout")]
        out += ["", f"heldout: latest held-out pass@1 @ the step it was measured at "
                    f"({probes[0]['tasks']} tasks x {probes[0]['samples']} samples, metrics.jsonl)"]
        if spearman is not None:
            value = "undefined (all equal)" if spearman["value"] is None else f"{spearman['value']:+.2f}"
            out.append(f"rating order against held-out pass@1 (live students): Spearman {value} "
                       f"over {spearman['students']} students")
    return "\n".join(out)
