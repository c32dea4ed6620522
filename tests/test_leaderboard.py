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


def test_a_branched_run_names_its_source_step_and_changed_settings(tmp_path, capsys):
    run_dir, _ = _run_dir(tmp_path)
    assert popula.cli.main(["leaderboard", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["branch"] is None  # a run started fresh
    origin = {"source": "/runs/u-s0", "step": 60, "changed": ["rewards.solved_task"]}
    (run_dir / "branch.json").write_text(json.dumps(origin))  # as `popula run --branch` writes it
    assert popula.cli.main(["leaderboard", str(run_dir)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        "branched from /runs/u-s0 at step 60 (changed: rewards.solved_task)"
    assert popula.cli.main(["leaderboard", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["branch"] == origin


@pytest.mark.parametrize("text", ["{not json", '["/runs/u-s0", 60]', '{"source": "/runs/u-s0"}'])
def test_a_corrupt_branch_record_exits_2_naming_the_file(tmp_path, capsys, text):
    run_dir, _ = _run_dir(tmp_path)
    (run_dir / "branch.json").write_text(text)
    assert popula.cli.main(["leaderboard", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "branch.json" in err[0], err


def test_plot_writes_a_png_of_rating_trajectories(tmp_path, capsys):
    run_dir, _ = _run_dir(tmp_path)
    out = tmp_path / "plots" / "ratings.png"
    out.parent.mkdir()  # a missing folder is refused in one line (tests/test_cli_errors.py)
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


# -- held-out scores beside ratings (runs with heldout.every) ------------------------------------


def _probed_run_dir(tmp_path):
    """A league of four students (one later replaced) and metrics.jsonl rows with two held-out probes.

    Ratings order the live students s_a > s_b > s_c; at the last probe (step 4) held-out pass@1
    orders them s_b > s_a > s_c. s_old was probed at step 2 only, then replaced by s_c.
    """
    league = League()
    league.add_member("t0", "teacher")
    for name in ("s_a", "s_b", "s_old"):
        league.add_member(name, "student")
    league.replace("s_old", "s_c", ["s_a"], "svd_perturb", step=3)
    for name, mu in (("s_a", 30.0), ("s_b", 27.0), ("s_c", 20.0)):
        league.members[name].mu, league.members[name].sigma = mu, 2.0
    league.step = 4
    league.save(tmp_path / "league.json")

    def probe(scores):
        students = {n: {"pass1": p, "passk": p} for n, p in scores.items()}
        return {"tasks": 300, "samples": 4, "students": students, "best": "s_a", "best_pass1": scores["s_a"],
                "mean_pass1": sum(scores.values()) / len(scores)}

    rows = [{"step": 0}, {"step": 2, "heldout": probe({"s_a": 0.20, "s_b": 0.21, "s_old": 0.19})}, {"step": 3},
            {"step": 4, "heldout": probe({"s_a": 0.25, "s_b": 0.30, "s_c": 0.22})}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_a_probed_run_shows_each_members_latest_heldout_pass1_and_its_step_beside_the_rating(tmp_path, capsys):
    run_dir = _probed_run_dir(tmp_path)
    assert popula.cli.main(["leaderboard", str(run_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["role", "name", "mu", "sigma", "mu-3sd", "matches", "win%", "heldout", "age", "gen",
                                "parents", "status"]
    cells = {line.split()[1]: line.split()[7] for line in lines[2:] if len(line.split()) > 7}
    assert cells["s_a"] == "0.250@4" and cells["s_b"] == "0.300@4" and cells["s_c"] == "0.220@4"
    assert cells["s_old"] == "0.190@2"  # its last probe, before it was replaced
    assert cells["t0"] == "-"  # teachers are not probed
    assert "300 tasks x 4 samples" in "\n".join(lines)
    # rating ranks a > b > c; held-out ranks b > a > c: Spearman over the three live students is 0.5
    assert lines[-1] == "rating order against held-out pass@1 (live students): Spearman +0.50 over 3 students"


def test_a_probed_runs_json_carries_the_heldout_scores_and_their_rank_correlation(tmp_path, capsys):
    run_dir = _probed_run_dir(tmp_path)
    assert popula.cli.main(["leaderboard", str(run_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in data["members"]}
    assert rows["s_b"]["heldout"] == {"step": 4, "pass1": 0.30, "passk": 0.30, "tasks": 300, "samples": 4}
    assert rows["t0"]["heldout"] is None
    assert data["heldout_spearman"] == {"value": pytest.approx(0.5), "students": 3}


def test_fewer_than_three_probed_students_give_no_rank_correlation(tmp_path, capsys):
    run_dir, _ = _run_dir(tmp_path)  # two students
    probe = {"tasks": 10, "samples": 1, "students": {"s_strong": {"pass1": 0.5, "passk": 0.5},
                                                     "s_weak": {"pass1": 0.1, "passk": 0.1}}}
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 11, "heldout": probe}) + "\n")
    assert popula.cli.main(["leaderboard", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["heldout_spearman"] is None
    assert popula.cli.main(["leaderboard", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "0.500@11" in out and "Spearman" not in out


def test_a_run_without_probes_has_no_heldout_column(tmp_path, capsys):
    run_dir, _ = _run_dir(tmp_path)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 0}) + "\n")
    assert popula.cli.main(["leaderboard", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "heldout" not in out
    assert popula.cli.main(["leaderboard", str(run_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["heldout_spearman"] is None and all(r["heldout"] is None for r in data["members"])
