"""league.json: complete round trips, atomic writes, loud errors for torn or corrupt files."""

import json
import threading

import numpy as np
import pytest

from popula.errors import PopulaError
from popula.league import League, LeagueConfig, TaskResult
from popula.league.store import write_json_atomic


def _played_league() -> League:
    league = League(LeagueConfig(weighting="hard", hard_k=3.0))
    for i in range(3):
        league.add_member(f"t{i}", "teacher")
        league.add_member(f"s{i}", "student")
    rng = np.random.default_rng(0)
    for step in range(4):
        for m in league.match(rng):
            league.record_match(step, m.teacher, m.student, [TaskResult(True, rng.choice([0.0, 0.25, 1.0]))] * 3)
        league.end_step(step)
    league.replace("t0", "t3", ["t1", "t2"], "crossover", step=3)
    return league


def test_save_then_load_restores_every_member_match_and_setting(tmp_path):
    league = _played_league()
    path = tmp_path / "league.json"
    league.save(path)
    loaded = League.load(path)
    assert loaded.to_dict() == league.to_dict()
    assert loaded.config.weighting == "hard" and loaded.step == 3
    assert not loaded.member("t0").alive and loaded.member("t3").parents == ["t1", "t2"]
    assert len(loaded.matches) == len(league.matches) == 12
    # The restored league keeps playing exactly as the original would.
    rng_a, rng_b = np.random.default_rng(9), np.random.default_rng(9)
    assert loaded.match(rng_a) == league.match(rng_b)


def test_the_file_says_what_it_is(tmp_path):
    path = tmp_path / "league.json"
    _played_league().save(path)
    data = json.loads(path.read_text())
    assert (data["format"], data["version"]) == ("popula-league", 1)
    assert {m["name"] for m in data["members"]} == {"t0", "t1", "t2", "t3", "s0", "s1", "s2"}


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path):
    path = tmp_path / "league.json"
    league = _played_league()
    league.save(path)
    before = path.read_bytes()
    # json streams to the temp file, then hits an unserialisable value: a write failing midway.
    with pytest.raises(TypeError):
        write_json_atomic(path, {"members": list(range(100_000)), "z": object()})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["league.json"]  # no temp file left behind


def test_readers_never_see_a_half_written_file(tmp_path):
    path = tmp_path / "league.json"
    league = _played_league()
    league.save(path)
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            league.save(path)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(30):
            assert League.load(path).step == 3
    finally:
        stop.set()
        thread.join()


def test_a_torn_file_is_reported_with_its_name_and_position_not_reset(tmp_path):
    path = tmp_path / "league.json"
    _played_league().save(path)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(PopulaError, match=r"league\.json: line 1, column \d+: not valid JSON.*torn or corrupt"):
        League.load(path)
    assert path.read_text() == text[: len(text) // 2]  # left as found, for inspection


def test_a_bad_field_is_named_by_its_path(tmp_path):
    path = tmp_path / "league.json"
    _played_league().save(path)
    data = json.loads(path.read_text())
    data["members"][2]["sigma"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(PopulaError, match=r"league\.json: not a valid league file: members\.2\.sigma"):
        League.load(path)


def test_a_dangling_member_reference_is_corruption(tmp_path):
    path = tmp_path / "league.json"
    _played_league().save(path)
    data = json.loads(path.read_text())
    data["matches"][5]["student"] = "ghost"
    path.write_text(json.dumps(data))
    with pytest.raises(PopulaError, match=r"matches\.5: refers to unknown member 'ghost'"):
        League.load(path)


def test_a_file_of_another_kind_is_refused(tmp_path):
    path = tmp_path / "league.json"
    path.write_text(json.dumps({"step": 3, "members": []}))
    with pytest.raises(PopulaError, match="format"):
        League.load(path)


def test_a_missing_file_is_reported(tmp_path):
    with pytest.raises(PopulaError, match="no such file"):
        League.load(tmp_path / "league.json")
