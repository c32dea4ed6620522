"""The replacement plan: who is replaced, by whose child, made how (the league rates the child)."""

import json

import pytest
import torch

from evolution import (
    DEFAULT_MIX,
    OPERATORS,
    EvolutionConfig,
    EvolutionError,
    child_name,
    make_child,
    plan_replacements,
)

# (mu, sigma) per member; the plan ranks by the score the league passes, mu - 3 sigma.
MU_SIGMA = {
    "teacher": {"T0": (25.0, 8.3), "T1": (30.0, 2.0), "T2": (20.0, 1.0), "T3": (28.0, 3.0)},
    "student": {"S0": (24.0, 2.0), "S1": (27.0, 1.0), "S2": (26.0, 1.5), "S3": (35.0, 6.0)},
}
RATINGS = {role: {n: mu - 3 * sigma for n, (mu, sigma) in members.items()} for role, members in MU_SIGMA.items()}


def test_nothing_is_planned_off_schedule_or_at_step_zero():
    config = EvolutionConfig(every=5)
    assert plan_replacements(0, RATINGS, config) == []
    assert plan_replacements(7, RATINGS, config) == []
    assert plan_replacements(10, RATINGS, config) != []


def test_the_bottom_m_of_each_role_by_conservative_rating_are_replaced():
    plan = plan_replacements(10, RATINGS, EvolutionConfig(every=10, replace_bottom=2))
    replaced = {(r.role, r.old) for r in plan}
    # Conservative: T0 0.1, T2 17, T3 19, T1 24; S3 17, S0 18, S2 21.5, S1 24.
    assert replaced == {("teacher", "T0"), ("teacher", "T2"), ("student", "S3"), ("student", "S0")}


def test_only_members_that_trained_min_age_steps_are_replaced_and_the_young_still_breed():
    config = EvolutionConfig(every=10, replace_bottom=1, min_age=20, operator_mix={"gaussian": 1.0})
    ages = {"T0": 5, "T1": 40, "T2": 40, "T3": 40, "S0": 40, "S1": 40, "S2": 40, "S3": 19}
    replaced = {r.role: r.old for r in plan_replacements(40, RATINGS, config, ages)}
    # T0 (weakest) and S3 (weakest) are too young: the weakest *ready* members go instead.
    assert replaced == {"teacher": "T2", "student": "S0"}
    nobody_ready = {name: 3 for role in RATINGS.values() for name in role}
    assert plan_replacements(40, RATINGS, config, nobody_ready) == []
    everyone_young_but_parents = plan_replacements(40, RATINGS, EvolutionConfig(every=10, min_age=20), ages)
    assert all(r.old != "T0" for r in everyone_young_but_parents)


def test_parents_are_survivors_and_crossovers_get_two_distinct_ones():
    config = EvolutionConfig(every=1, replace_bottom=2, operator_mix={"interpolate": 1.0})
    for step in range(1, 30):
        for r in plan_replacements(step, RATINGS, config):
            assert len(r.parents) == 2 and r.parents[0] != r.parents[1]
            assert r.old not in r.parents
            bottom = sorted(RATINGS[r.role], key=lambda n: RATINGS[r.role][n])[:2]
            assert not set(r.parents) & set(bottom)


def test_a_tournament_of_all_survivors_always_picks_the_best():
    config = EvolutionConfig(every=1, tournament_size=10, operator_mix={"sv_perturb": 1.0})
    for step in range(1, 10):
        parents = {r.role: r.parents for r in plan_replacements(step, RATINGS, config)}
        assert parents == {"teacher": ("T1",), "student": ("S1",)}


def test_rating_weighted_selection_prefers_higher_ratings():
    config = EvolutionConfig(every=1, selection="weighted", temperature=2.0, operator_mix={"gaussian": 1.0})
    picks = [plan_replacements(s, {"teacher": RATINGS["teacher"]}, config)[0].parents[0] for s in range(1, 400)]
    assert picks.count("T1") > picks.count("T3") > picks.count("T2") > 0


def test_a_role_with_one_survivor_gets_mutations_only():
    ratings = {"teacher": {"T0": 17.0, "T1": 27.0}}
    config = EvolutionConfig(every=1, operator_mix={"interpolate": 5.0, "rotate": 1.0})
    assert {plan_replacements(s, ratings, config)[0].operator for s in range(1, 50)} == {"rotate"}
    with pytest.raises(EvolutionError, match="add a mutation"):
        plan_replacements(1, ratings, EvolutionConfig(every=1, operator_mix={"splice": 1.0}))


def test_operators_follow_the_configured_mix():
    config = EvolutionConfig(every=1, operator_mix={"rotate": 3.0, "slot_swap": 1.0, "mask": 0.0})
    ops = [r.operator for s in range(1, 200) for r in plan_replacements(s, RATINGS, config)]
    assert set(ops) == {"rotate", "slot_swap"}
    assert 2.0 < ops.count("rotate") / ops.count("slot_swap") < 4.5


def test_plans_are_reproducible_and_depend_on_the_seed():
    plans = [plan_replacements(20, RATINGS, EvolutionConfig(every=10, seed=s)) for s in (1, 1, 2)]
    assert plans[0] == plans[1]
    assert [r.seed for r in plans[0]] != [r.seed for r in plans[2]]


def test_children_get_new_names_and_the_operators_default_strength():
    config = EvolutionConfig(every=10, operator_mix={"interpolate": 1.0}, tournament_size=3)
    plan = plan_replacements(40, RATINGS, config)
    teacher = next(r for r in plan if r.role == "teacher")
    assert teacher.child == "T0-s40" and teacher.child not in RATINGS["teacher"]
    assert teacher.strength == OPERATORS["interpolate"].default_strength


def test_child_names_never_pile_up_suffixes():
    assert child_name("T2", 40) == "T2-s40"
    assert child_name("T2-s40", 80) == "T2-s80"


def test_configured_strengths_override_defaults():
    config = EvolutionConfig(every=1, operator_mix={"rotate": 1.0}, strengths={"rotate": 0.05})
    assert all(r.strength == 0.05 for r in plan_replacements(1, RATINGS, config))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"every": 0}, "every"),
        ({"replace_bottom": -1}, "replace_bottom"),
        ({"selection": "roulette"}, "selection"),
        ({"operator_mix": {"average_factors": 1.0}}, "average_factors"),
        ({"operator_mix": {"rotate": 0.0}}, "operator_mix"),
        ({"min_age": -1}, "min_age"),
        ({"optimizer_state": "keep"}, "optimizer_state"),
    ],
)
def test_bad_config_is_rejected_naming_the_field(kwargs, field):
    with pytest.raises(EvolutionError, match=field):
        EvolutionConfig(**kwargs)


def test_replacing_every_member_of_a_role_is_refused():
    with pytest.raises(EvolutionError, match="replace_bottom"):
        plan_replacements(10, RATINGS, EvolutionConfig(every=10, replace_bottom=4))


def test_default_mix_leaves_out_the_operator_that_failed_retention():
    assert "mask" not in DEFAULT_MIX and set(DEFAULT_MIX) <= set(OPERATORS)


def test_make_child_applies_the_planned_operator_and_the_plan_round_trips_as_json():
    config = EvolutionConfig(every=10, operator_mix={"splice": 1.0})
    replacement = plan_replacements(10, RATINGS, config)[0]
    g = torch.Generator().manual_seed(0)
    states = {
        name: {"m.lora_A.weight": torch.randn(2, 8, generator=g), "m.lora_B.weight": torch.randn(6, 2, generator=g)}
        for name in RATINGS[replacement.role]
    }
    child = make_child(replacement, states)
    again = OPERATORS["splice"].apply([states[p] for p in replacement.parents], replacement.strength, replacement.seed)
    assert all(torch.equal(child[k], again[k]) for k in child)
    assert json.loads(json.dumps(replacement.to_dict()))["operator"] == "splice"
    with pytest.raises(EvolutionError, match="needs parent state dicts"):
        make_child(replacement, {})


def test_optimizer_state_is_reset_by_default_or_inherited_from_the_first_parent():
    reset = plan_replacements(10, RATINGS, EvolutionConfig(every=10))[0]
    assert reset.optimizer_state == "reset" and reset.inherit_optimizer_from is None
    inherit = plan_replacements(10, RATINGS, EvolutionConfig(every=10, optimizer_state="inherit"))[0]
    assert inherit.inherit_optimizer_from == inherit.parents[0]
