"""`popula leaderboard RUN_DIR [--json] [--plot FILE.png]`: the league's standings."""

from __future__ import annotations

import argparse
from pathlib import Path

from popula.errors import PopulaError
from popula.league import League


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "leaderboard",
        help="show teachers and students ranked by conservative TrueSkill rating",
        description=(
            "Read RUN_DIR/league.json and print, per role, every member that ever played "
            "(also those replaced by evolution) sorted by conservative rating mu - 3 sigma, "
            "with matches, win rate and lineage. Safe on a run that is still going: the "
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
    league = League.load(args.run_dir / "league.json")
    rows = standings(league)
    if args.json:
        print(json.dumps({"step": league.step, "members": rows}))
    else:
        print(format_table(rows, league.step))
    if args.plot:
        # deferred: matplotlib loads only when a plot is asked for
        from popula.league.plot import plot_ratings

        path = plot_ratings(league, args.plot)
        if not args.json:
            print(f"plot: {path}")
    return 0


def standings(league) -> list[dict]:
    """One row per member ever, teachers then students, best conservative rating first."""
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
            })
    return rows


def _age(member, step: int | None) -> int | None:
    """Steps a member trained: to the last closed step if alive, to its replacement if not."""
    end = member.replaced_at_step if not member.alive else step
    return None if end is None else end - member.born_step


def format_table(rows: list[dict], step: int | None) -> str:
    header = ["role", "name", "mu", "sigma", "mu-3sd", "matches", "win%", "age", "gen", "parents", "status"]
    body = []
    for r in rows:
        status = "alive" if r["alive"] else f"replaced by {r['replaced_by']} @{r['replaced_at_step']}"
        parents = "+".join(r["parents"]) or "-"
        if r["operator"]:
            parents += f" ({r['operator']})"
        body.append([
            r["role"], r["name"], f"{r['mu']:.2f}", f"{r['sigma']:.2f}", f"{r['conservative']:.2f}",
            str(r["matches"]), "-" if r["win_rate"] is None else f"{100 * r['win_rate']:.0f}",
            "-" if r["age"] is None else str(r["age"]), str(r["generation"]), parents, status,
        ])
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
    numeric = {2, 3, 4, 5, 6, 7, 8}

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [f"league after step {step}" if step is not None else "league (no step closed yet)", line(header)]
    previous_role = None
    for row in body:
        if previous_role is not None and row[0] != previous_role:
            out.append("")
        out.append(line(row))
        previous_role = row[0]
    return "\n".join(out)
