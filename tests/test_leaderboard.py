"""`popula leaderboard RUN_DIR [--json] [--plot FILE.png]`."""

import json

import numpy as np
import pytest

import popula.cli
from popula.league import League, TaskResult


@pytest.fixture(autouse=True)
def _only_this_command(monkeypatch):
    # The real dispatcher, with only this command registered, so the test does not depend
    # on other subcommands' modules being importable.
    monkeypatch.setattr(popula.cli, "COMMANDS", ["leaderboard"])


def _run_dir(tmp_path):
    """A run dir whose league has a clear best teacher/student and one replacement."""
    league = League()
    for name in ("t_strong", "t_weak"):
        league.add_member(name, "teacher")
    for name in ("s_strong", "s_weak"):
        league.add_member(name, "student")
    rng = np.random.default_rng(0)
    beats = {("t_strong", "s_weak"): "teacher", ("t_weak", "s_strong"): "student"}
    for step in range(12):
        for m in league.match(rng):
            winner = beats.get((m.teacher, m.student), "draw")
            rho = {"teacher": 0.25, "student": 1.0, "draw": 0.5}[winner]
            league.record_match(step, m.teacher, m.student, [TaskResult(True, rho)] * 4)
        league.end_step(step)
    league.replace("t_weak", "t_child", ["t_strong"], "svd_perturb", step=11)
    league.save(tmp_path / "league.json")
    return tmp_path, league


def test_table_lists_every_member_by_role_best_conservative_rating_first(tmp_path, capsys):
    run_dir, league = _run_dir(tmp_path)
    assert popula.cli.main(["leaderboard", str(run_dir)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "league after step 11"
    assert lines[1].split() == ["role", "name", "mu", "sigma", "mu-3sd", "matches", "win%", "age", "gen", "parents", "status"]
    names = [line.split()[1] for line in lines[2:] if line.strip()]
    expected = [m.name for role in ("teacher", "student") for m in league.ranked(role, include_retired=True)]
    assert names == expected
    assert names.index("s_strong") < names.index("s_weak")
    assert "replaced by t_child @11" in out
    assert "t_strong (svd_perturb)" in out


def test_json_output_is_one_object_for_tools(tmp_path, capsys):
    run_dir, league = _run_dir(tmp_path)
    assert popula.cli.main(["leaderboard", str(run_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["step"] == 11
    rows = {r["name"]: r for r in data["members"]}
    assert set(rows) == set(league.members)
    child = rows["t_child"]
    assert child["parents"] == ["t_strong"] and child["generation"] == 1 and child["alive"]
    assert rows["t_weak"]["replaced_by"] == "t_child" and not rows["t_weak"]["alive"]
    assert rows["t_weak"]["age"] == 11 and child["age"] == 0  # steps trained: to replacement, or to now
    s = rows["s_strong"]
    assert s["conservative"] == pytest.approx(s["mu"] - 3 * s["sigma"])
    assert s["matches"] == s["wins"] + s["draws"] + s["losses"] > 0
    assert 0.0 <= s["win_rate"] <= 1.0


def test_plot_writes_a_png_of_rating_trajectories(tmp_path, capsys):
    run_dir, _ = _run_dir(tmp_path)
    out = tmp_path / "plots" / "ratings.png"
    assert popula.cli.main(["leaderboard", str(run_dir), "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {out}" in capsys.readouterr().out


def test_a_fresh_league_without_steps_still_shows_and_plots(tmp_path, capsys):
    league = League()
    league.add_member("t0", "teacher")
    league.add_member("s0", "student")
    league.save(tmp_path / "league.json")
    assert popula.cli.main(["leaderboard", str(tmp_path), "--plot", str(tmp_path / "r.png")]) == 0
    out = capsys.readouterr().out
    assert "no step closed yet" in out and (tmp_path / "r.png").exists()


def test_a_missing_run_dir_exits_2_naming_it(tmp_path, capsys):
    assert popula.cli.main(["leaderboard", str(tmp_path / "nope")]) == 2
    assert "nope: no such run directory" in capsys.readouterr().err


def test_a_run_dir_without_a_league_exits_2_naming_the_file(tmp_path, capsys):
    assert popula.cli.main(["leaderboard", str(tmp_path)]) == 2
    assert "league.json: no such file" in capsys.readouterr().err


def test_a_corrupt_league_exits_2(tmp_path, capsys):
    (tmp_path / "league.json").write_text('{"format": "popula-league", "vers')
    assert popula.cli.main(["leaderboard", str(tmp_path)]) == 2
    assert "torn or corrupt" in capsys.readouterr().err
