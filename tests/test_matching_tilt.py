"""benchmarks/matching_tilt.py: how far PFSP moved a run's matching from uniform, from its league alone."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from popula.errors import PopulaError
from popula.league import League, LeagueConfig, TaskResult

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("matching_tilt", ROOT / "benchmarks" / "matching_tilt.py")
tilt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tilt)


def played_run(tmp_path: Path) -> Path:
    """Six steps of a 2+2 league played as `popula run` plays it: match, record, close the
    step, and at step 3 replace S1 by a child of S0 (S1b)."""
    league = League(LeagueConfig())
    for name, role in (("T0", "teacher"), ("T1", "teacher"), ("S0", "student"), ("S1", "student")):
        league.add_member(name, role)
    rng = np.random.default_rng(0)
    for step in range(1, 7):
        for match in league.match(rng):
            strong = match.student in ("S0", "S1b")  # S0's line solves everything, S1 nothing
            league.record_match(step, match.teacher, match.student, [TaskResult(True, 1.0 if strong else 0.0)] * 3)
        league.end_step(step)
        if step == 3:
            league.replace("S1", "S1b", ["S0"], "perturb", step)
    run = tmp_path / "run"
    run.mkdir()
    league.save(run / "league.json")
    return run


def test_the_ratings_each_step_was_matched_on_are_rebuilt_exactly(tmp_path):
    figures = tilt.summarise(played_run(tmp_path), None, window=4)
    assert figures["steps"] == 6 and figures["n"] == 2 and figures["uniform_plan"] == 0.5
    assert figures["rebuild_error_max"] < 1e-12  # every recorded win probability, also the child's first match
    assert 0.0 <= figures["plan_tv_mean"] <= figures["plan_tv_max"] <= 0.5
    assert figures["free_tv_mean"] > 0.0  # S0's line wins every match: the weights are not flat
    assert len(figures["plan_tv_by_window"]) == 2  # steps 1-4 and 5-6
    assert (4 * figures["plan_tv_by_window"][0] + 2 * figures["plan_tv_by_window"][1]) / 6 == pytest.approx(
        figures["plan_tv_mean"])


def test_uniform_matching_has_no_tilt_and_another_weighting_can_be_asked(tmp_path):
    run = played_run(tmp_path)
    uniform = tilt.summarise(run, "uniform")
    assert uniform["plan_tv_max"] == pytest.approx(0.0) and uniform["free_tv_mean"] == pytest.approx(0.0)
    assert tilt.summarise(run, "hard")["weighting"] == "hard"


def test_a_folder_without_a_league_is_one_line_error(tmp_path):
    with pytest.raises(PopulaError, match="league.json: no such file"):
        tilt.summarise(tmp_path, None)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "matching_tilt.py"), str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "matching_tilt:" in done.stderr


def test_the_last_line_is_the_figures_as_json(tmp_path):
    run = played_run(tmp_path)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "matching_tilt.py"), str(run)],
                          capture_output=True, text=True, check=True)
    assert "| run | weighting |" in done.stdout
    assert json.loads(done.stdout.strip().splitlines()[-1])[str(run)]["steps"] == 6


def test_a_league_whose_retired_members_play_is_refused(tmp_path):
    League(LeagueConfig(past_versions=True)).save(tmp_path / "league.json")
    with pytest.raises(PopulaError, match="past_versions"):
        tilt.summarise(tmp_path, None)
