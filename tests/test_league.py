"""The League API: members, rated matches, steps, evolution replacements, rankings."""

import numpy as np
import pytest

from popula.errors import PopulaError
from popula.league import League, LeagueConfig, TaskResult
from popula.league.simulate import DEFAULT_ROLES, DEFAULT_SKILLS, order_recovered, simulate_league, spearman

WIN_T = TaskResult(True, 0.25)  # teacher point
WIN_S = TaskResult(True, 1.0)  # student point
UNSOLVED = TaskResult(True, 0.0)  # zero floor


def _pair() -> League:
    league = League()
    league.add_member("t0", "teacher")
    league.add_member("s0", "student")
    return league


def test_new_members_start_at_the_environment_prior_in_one_rating_space():
    league = _pair()
    t, s = league.member("t0"), league.member("s0")
    assert (t.mu, t.sigma) == (s.mu, s.sigma) == (25.0, 25.0 / 3.0)
    assert league.win_probability("t0", "s0") == pytest.approx(0.5)


def test_a_teacher_win_moves_ratings_apart_in_the_teachers_favour():
    league = _pair()
    record = league.record_match(0, "t0", "s0", [WIN_T, WIN_T, WIN_S])
    assert record.result == "teacher" and record.p_teacher == pytest.approx(0.5)
    assert league.member("t0").mu > 25.0 > league.member("s0").mu
    assert league.member("t0").sigma < 25.0 / 3.0
    assert league.win_probability("t0", "s0") > 0.5


def test_invalid_tasks_lose_the_match_for_the_teacher():
    league = _pair()
    league.record_match(0, "t0", "s0", [TaskResult(False)] * 3 + [WIN_T])
    assert league.member("s0").mu > league.member("t0").mu


def test_a_match_of_unsolved_tasks_leaves_ratings_untouched():
    league = _pair()
    record = league.record_match(0, "t0", "s0", [UNSOLVED] * 4)
    assert record.result == "none"
    assert (league.member("t0").mu, league.member("t0").sigma) == (25.0, 25.0 / 3.0)
    assert league.stats("t0").matches == 1 and league.stats("t0").win_rate is None


def test_stats_count_wins_draws_and_losses_from_each_members_side():
    league = _pair()
    league.record_match(0, "t0", "s0", [WIN_T])
    league.record_match(0, "t0", "s0", [WIN_S])
    league.record_match(0, "t0", "s0", [TaskResult(True, 0.5)])
    t, s = league.stats("t0"), league.stats("s0")
    assert (t.matches, t.wins, t.draws, t.losses) == (3, 1, 1, 1)
    assert (s.wins, s.losses) == (1, 1)
    assert t.win_rate == pytest.approx(0.5)


def test_matches_must_pair_a_teacher_with_a_student():
    league = _pair()
    league.add_member("t1", "teacher")
    with pytest.raises(ValueError, match="teacher vs student"):
        league.record_match(0, "t0", "t1", [WIN_T])
    with pytest.raises(PopulaError, match="no member named 'nobody'"):
        league.record_match(0, "t0", "nobody", [WIN_T])


def test_end_step_records_history_and_closes_the_step():
    league = _pair()
    league.record_match(0, "t0", "s0", [WIN_T])
    league.end_step(0)
    league.end_step(1)
    history = league.member("t0").history
    assert [h[0] for h in history] == [0, 1]
    assert history[0][1] == league.member("t0").mu
    with pytest.raises(ValueError, match="closed"):
        league.record_match(1, "t0", "s0", [WIN_T])
    with pytest.raises(ValueError):
        league.end_step(1)


def test_names_are_never_reused():
    league = _pair()
    with pytest.raises(PopulaError, match="never reused"):
        league.add_member("t0", "student")
    league.add_member("t1", "teacher")
    with pytest.raises(PopulaError, match="never reused"):
        league.replace("t1", "t0", ["t0"], "perturb", step=3)


def test_replace_retires_the_old_member_and_seeds_the_child_from_its_parents():
    league = League(LeagueConfig(sigma_widen=2.0))
    for name, mu in [("a", 30.0), ("b", 20.0), ("weak", 10.0)]:
        league.add_member(name, "teacher")
        league.members[name].mu, league.members[name].sigma = mu, 1.0
    league.members["a"].generation = 2
    child = league.replace("weak", "c", ["a", "b"], "crossover", step=7)

    old = league.member("weak")
    assert not old.alive and old.replaced_by == "c" and old.replaced_at_step == 7
    assert child.role == "teacher" and child.alive and child.born_step == 7
    assert child.parents == ["a", "b"] and child.operator == "crossover" and child.generation == 3
    assert child.mu == pytest.approx(25.0)
    # mixture of the parents (sd 1 each, means 5 apart) widened by 2: sqrt(1 + 25 + 4)
    assert child.sigma == pytest.approx(np.sqrt(30.0))
    assert child.history == [(7, child.mu, child.sigma)]
    assert [m.name for m in league.alive("teacher")] == ["a", "b", "c"]
    with pytest.raises(PopulaError, match="already replaced"):
        league.replace("weak", "d", ["a"], "perturb", step=8)


def test_a_child_is_never_more_uncertain_than_a_newcomer():
    league = _pair()
    league.add_member("t1", "teacher")
    child = league.replace("t1", "t2", ["t0"], "perturb", step=0, sigma_widen=100.0)
    assert child.sigma == pytest.approx(25.0 / 3.0)


def test_ranked_orders_by_conservative_rating_and_skips_the_retired_by_default():
    league = League()
    for name, mu, sigma in [("sure", 26.0, 1.0), ("lucky", 30.0, 5.0), ("weak", 20.0, 1.0)]:
        league.add_member(name, "student")
        league.members[name].mu, league.members[name].sigma = mu, sigma
    # conservative: sure 23, lucky 15, weak 17
    assert [m.name for m in league.ranked("student")] == ["sure", "weak", "lucky"]
    league.replace("weak", "kid", ["sure"], "perturb", step=1, sigma_widen=1.0)  # 26 - 3*sqrt(2)
    assert [m.name for m in league.ranked("student")] == ["sure", "kid", "lucky"]
    assert "weak" in [m.name for m in league.ranked("student", include_retired=True)]
    assert league.ranked("teacher") == []


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("weighting", ["variance", "hard"])
def test_a_simulated_league_recovers_the_true_ranking(seed, weighting):
    # Members of known strength; outcomes sampled from it (see popula.league.simulate).
    league = simulate_league(DEFAULT_SKILLS, steps=150, seed=seed, weighting=weighting, roles=DEFAULT_ROLES)
    assert order_recovered(league, DEFAULT_SKILLS)  # exact order within each role
    assert not order_recovered(league, {n: -s for n, s in DEFAULT_SKILLS.items()})
    names = list(DEFAULT_SKILLS)
    assert spearman([DEFAULT_SKILLS[n] for n in names], [league.member(n).mu for n in names]) > 0.85
    # Ratings have settled: every member is known to within a couple of points.
    assert all(m.sigma < 2.0 for m in league.members.values())


def test_a_simulated_league_is_reproducible_from_its_seed():
    a = simulate_league(DEFAULT_SKILLS, steps=20, seed=5, roles=DEFAULT_ROLES)
    b = simulate_league(DEFAULT_SKILLS, steps=20, seed=5, roles=DEFAULT_ROLES)
    assert a.to_dict() == b.to_dict()
