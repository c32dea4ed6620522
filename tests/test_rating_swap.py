"""The rating system swaps by configuration: a test-only Elo (`tests/elo_rating.py`), registered
with one entry of `RATING_SYSTEMS`, rates the league, its PFSP, its rankings, evolution's
children, league.json and `popula leaderboard`, with no other module changed; and the league
reads a rating only through the `RatingSystem` interface (only `trueskill_rating.py` knows TrueSkill).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import popula.cli
from elo_rating import START, EloRating
from popula.config import load_config
from popula.errors import PopulaError
from popula.league import League, LeagueConfig, TaskResult
from popula.league.systems import RATING_SYSTEMS
from popula.league.simulate import DEFAULT_ROLES, DEFAULT_SKILLS, simulate_league, spearman

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def elo(monkeypatch):
    monkeypatch.setitem(RATING_SYSTEMS, "elo", EloRating)  # the one registration line
    monkeypatch.setattr(popula.cli, "COMMANDS", ["leaderboard"])


def test_the_config_names_the_system_and_refuses_an_unregistered_one(elo):
    assert load_config(None).league.rating == "trueskill"
    assert load_config(None, ["league.rating=elo"]).league.rating == "elo"
    with pytest.raises(PopulaError, match=r"league\.rating.*elo, trueskill"):
        load_config(None, ["league.rating=glicko"])


def test_an_elo_league_rates_ranks_and_recovers_the_true_order(elo):
    league = League(LeagueConfig(rating="elo"))
    league.add_member("t0", "teacher")
    league.add_member("s0", "student")
    assert (league.member("t0").mu, league.win_probability("t0", "s0")) == (START, 0.5)
    league.record_match(0, "t0", "s0", [TaskResult(True, 0.25)] * 3)
    assert league.member("t0").mu == START + 16 and league.member("s0").mu == START - 16
    assert league.member("t0").conservative == START + 16  # Elo's score, not mu - 3 sigma

    config = LeagueConfig(rating="elo")
    leagues = [simulate_league(DEFAULT_SKILLS, 60, seed, roles=DEFAULT_ROLES, config=config) for seed in range(4)]
    names = list(DEFAULT_SKILLS)
    rho = np.mean([spearman([DEFAULT_SKILLS[n] for n in names], [lg.member(n).mu for n in names]) for lg in leagues])
    assert rho > 0.8, rho
    best = leagues[0].ranked("student")[0]
    assert best.conservative == max(m.conservative for m in leagues[0].alive("student"))


def test_an_elo_league_evolves_saves_loads_and_shows_on_the_leaderboard(elo, tmp_path, capsys):
    league = League(LeagueConfig(rating="elo"))
    for name, role in [("t0", "teacher"), ("t1", "teacher"), ("s0", "student")]:
        league.add_member(name, role)
    league.record_match(0, "t0", "s0", [TaskResult(True, 0.25)])
    league.end_step(0)
    child = league.replace("t1", "t2", ["t0"], "perturb", step=0)
    assert child.mu == league.member("t0").mu and child.conservative == child.mu
    league.save(tmp_path / "league.json")
    again = League.load(tmp_path / "league.json")
    assert again.config.rating == "elo" and again.member("t2").conservative == child.conservative
    assert popula.cli.main(["leaderboard", str(tmp_path), "--json"]) == 0
    import json
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["members"]}
    assert rows["t0"]["conservative"] == rows["t0"]["mu"] == START + 16


def test_only_the_trueskill_module_knows_trueskill():
    users = []
    for package in ("popula", "evolution", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(n.split(".")[0] == "trueskill" for n in names):
                    users.append(str(path.relative_to(ROOT)))
    assert users == ["popula/league/trueskill_rating.py"]
