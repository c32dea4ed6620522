"""PFSP matchmaking: weights over TrueSkill win probabilities, coverage, reproducibility."""

from collections import Counter

import numpy as np
import pytest

from popula.league import League, LeagueConfig, TaskResult
from popula.league.pfsp import pfsp_probabilities, plan_distribution, plan_matches


def test_variance_weighting_prefers_balanced_opponents():
    probs = pfsp_probabilities([0.5, 0.8, 0.99])
    assert probs.sum() == pytest.approx(1.0)
    assert probs[0] > probs[1] > probs[2]
    # p(1-p), normalised once over all candidates.
    raw = np.array([0.25, 0.16, 0.99 * 0.01])
    assert probs == pytest.approx(raw / raw.sum())


def test_hard_weighting_prefers_opponents_the_chooser_loses_to():
    probs = pfsp_probabilities([0.1, 0.5, 0.9], weighting="hard", k=2.0)
    raw = np.array([0.81, 0.25, 0.01])
    assert probs == pytest.approx(raw / raw.sum())


def test_uniform_weighting_ignores_the_ratings():
    assert pfsp_probabilities([0.01, 0.5, 0.99], weighting="uniform") == pytest.approx([1 / 3] * 3)


def test_weights_that_sum_to_zero_fall_back_to_uniform():
    assert pfsp_probabilities([1.0, 1.0, 0.0]) == pytest.approx([1 / 3] * 3)
    assert pfsp_probabilities([1.0, 1.0], weighting="hard") == pytest.approx([0.5, 0.5])


def test_unknown_weighting_is_rejected():
    with pytest.raises(ValueError, match="weighting"):
        pfsp_probabilities([0.5], weighting="soft")


def _league(n_teachers: int, n_students: int, **config) -> League:
    league = League(LeagueConfig(**config))
    for i in range(n_teachers):
        league.add_member(f"t{i}", "teacher")
    for i in range(n_students):
        league.add_member(f"s{i}", "student")
    return league


@pytest.mark.parametrize(("n_teachers", "n_students"), [(4, 4), (6, 2), (2, 5), (1, 3), (3, 1)])
def test_every_alive_member_plays_every_step(n_teachers, n_students):
    league = _league(n_teachers, n_students)
    rng = np.random.default_rng(0)
    for _ in range(20):
        matches = league.match(rng)
        assert {m.teacher for m in matches} == {f"t{i}" for i in range(n_teachers)}
        assert {m.student for m in matches} == {f"s{i}" for i in range(n_students)}
        assert len(matches) == max(n_teachers, n_students)


def test_students_are_spread_evenly_when_teachers_outnumber_them():
    league = _league(6, 2)
    loads = Counter(m.student for m in league.match(np.random.default_rng(3)))
    assert sorted(loads.values()) == [3, 3]


def test_matching_is_reproducible_from_the_seed():
    league = _league(4, 4)
    first = [league.match(np.random.default_rng(42)) for _ in range(3)]
    again = [league.match(np.random.default_rng(42)) for _ in range(3)]
    assert first == again
    seeds = {tuple(league.match(np.random.default_rng(s))) for s in range(10)}
    assert len(seeds) > 1


def test_near_balanced_pairs_are_matched_more_often():
    # t0 is as strong as s0 and far stronger than s1.
    league = _league(1, 2)
    league.members["t0"].mu, league.members["t0"].sigma = 30.0, 1.0
    league.members["s0"].mu, league.members["s0"].sigma = 30.0, 1.0
    league.members["s1"].mu, league.members["s1"].sigma = 15.0, 1.0
    rng = np.random.default_rng(0)
    # One teacher, two students: the teacher's own draw is the PFSP choice.
    first_picks = Counter(plan_matches(rng, ["t0"], ["s0", "s1"], league.win_probability)[0][1] for _ in range(400))
    assert first_picks["s0"] > 0.9 * 400


def test_uniform_matching_picks_lopsided_and_balanced_pairs_alike():
    # The ablation's control: same league as above, but the ratings no longer steer the draw.
    league = _league(1, 2, weighting="uniform")
    league.members["t0"].mu, league.members["t0"].sigma = 30.0, 1.0
    league.members["s0"].mu, league.members["s0"].sigma = 30.0, 1.0
    league.members["s1"].mu, league.members["s1"].sigma = 15.0, 1.0
    rng = np.random.default_rng(0)
    first_picks = Counter(plan_matches(rng, ["t0"], ["s0", "s1"], league.win_probability, "uniform")[0][1]
                          for _ in range(400))
    assert 0.4 * 400 < first_picks["s0"] < 0.6 * 400


def _retire(league: League, old: str, child: str, parent: str) -> None:
    league.replace(old, child, [parent], "perturb", step=0)


def test_past_versions_play_only_when_the_config_allows_it():
    for allowed in (False, True):
        league = _league(1, 3, past_versions=allowed)
        _retire(league, "s0", "s0b", "s0")  # s0 is the past version of alive s0b
        _retire(league, "s2", "s2b", "s1")  # s2 left no descendant: a dead end
        rng = np.random.default_rng(0)
        opponents = {m.student for _ in range(100) for m in league.match(rng)}
        assert "s2" not in opponents
        assert ("s0" in opponents) == allowed
        assert league.lineage_past_versions("student") == ["s0"]


def test_a_replaced_member_cannot_be_rated_unless_past_versions_are_on():
    league = _league(1, 2)
    _retire(league, "s0", "s0b", "s1")
    with pytest.raises(ValueError, match="replaced"):
        league.record_match(0, "t0", "s0", [TaskResult(True, 1.0)])


def test_whole_plans_concentrate_on_balanced_pairs_for_every_member():
    # Three "levels": t_i and s_i are equally strong, levels are 10 rating points apart.
    # The all-balanced plan has the largest product of pair weights; the swap chain finds
    # it far more often than independent draws would (each of which can leave the last
    # teacher a lopsided pair).
    league = _league(3, 3)
    for i in range(3):
        for role in "ts":
            league.members[f"{role}{i}"].mu, league.members[f"{role}{i}"].sigma = 10.0 + 10 * i, 1.0
    rng = np.random.default_rng(0)
    plans = Counter(tuple(sorted((m.teacher, m.student) for m in league.match(rng))) for _ in range(300))
    balanced = (("t0", "s0"), ("t1", "s1"), ("t2", "s2"))
    assert plans[balanced] > 0.8 * 300


def test_plan_distribution_is_what_the_matching_draws():
    # Skewed ratings, as many teachers as students: the chain's plan frequencies match the
    # exact distribution (product of pair weights over the 3! plans).
    league = _league(3, 3)
    for name, mu in {"t0": 30.0, "t1": 22.0, "t2": 15.0, "s0": 28.0, "s1": 20.0, "s2": 10.0}.items():
        league.members[name].mu, league.members[name].sigma = mu, 2.0
    teachers, students = ["t0", "t1", "t2"], ["s0", "s1", "s2"]
    p = np.array([[league.win_probability(t, s) for s in students] for t in teachers])
    plans, probs = plan_distribution(p)
    assert probs.sum() == pytest.approx(1.0) and len(plans) == 6
    rng = np.random.default_rng(0)
    draws = Counter(tuple(students.index(s) for _, s in sorted((m.teacher, m.student) for m in league.match(rng)))
                    for _ in range(1500))
    for plan, prob in zip(plans, probs):
        assert draws[plan] / 1500 == pytest.approx(prob, abs=0.04)


def test_uniform_plan_distribution_is_flat():
    _, probs = plan_distribution(np.array([[0.9, 0.1], [0.5, 0.2]]), weighting="uniform")
    assert probs == pytest.approx([0.5, 0.5])


def test_plan_distribution_refuses_unequal_role_counts_and_more_plans_than_it_lists():
    with pytest.raises(ValueError, match="as many teachers as students"):
        plan_distribution(np.full((2, 3), 0.5))
    with pytest.raises(ValueError, match="at most 8 a role"):
        plan_distribution(np.full((9, 9), 0.5))
