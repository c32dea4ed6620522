"""Specification of the students' entropy coefficient: fixed, or steered towards a target entropy.

Steered, a student's coefficient grows while its answers are narrower than the target and
shrinks while they are wider, by exp(rate * (target - H) / target) a step, within [floor
(1e-4 unless configured), ceiling]; a newcomer (an evolution child) starts where the
population's coefficients are; a resume carries every coefficient.
"""

from __future__ import annotations

import math

import pytest

from popula.config import load_config
from popula.errors import PopulaError
from popula.config import ENTROPY_COEF_FLOOR
from popula.learner.entropy_control import EntropyControl


def test_without_a_target_every_student_keeps_the_configured_coefficient():
    control = EntropyControl(initial=0.01)
    control.observe("S0", entropy=0.01)
    assert control.coef("S0") == control.coef("S1") == 0.01
    assert control.state_dict() == {}


def test_a_student_narrower_than_the_target_gets_a_larger_bonus_and_a_wider_one_a_smaller():
    def after_one_step(entropy: float) -> float:
        control = EntropyControl(initial=0.01, target=0.4, rate=0.1)
        control.observe("S0", entropy)
        return control.coef("S0")

    assert after_one_step(0.2) == pytest.approx(0.01 * math.exp(0.1 * 0.5))
    assert after_one_step(0.8) == pytest.approx(0.01 * math.exp(-0.1))
    assert after_one_step(0.4) == pytest.approx(0.01)


def test_a_collapsed_student_is_pushed_harder_every_step_but_never_past_the_ceiling():
    control = EntropyControl(initial=0.01, target=0.4, rate=0.5, ceiling=0.05)
    seen = []
    for _ in range(40):
        control.observe("S0", entropy=0.0)
        seen.append(control.coef("S0"))
    assert seen == sorted(seen) and seen[0] > 0.01
    assert seen[-1] == 0.05


def test_a_student_far_above_the_target_keeps_a_floor_to_come_back_from():
    control = EntropyControl(initial=0.01, target=0.1, rate=1.0)
    control.observe("S0", entropy=5.0)
    assert control.coef("S0") == ENTROPY_COEF_FLOOR


def test_a_configured_floor_holds_a_wide_student_at_the_fixed_bonus_and_it_climbs_from_there():
    control = EntropyControl(initial=0.01, target=0.35, rate=0.2, ceiling=0.05, floor=0.01)
    for _ in range(30):
        control.observe("S0", entropy=0.6)  # wider than the target for 30 steps
    assert control.coef("S0") == 0.01
    control.observe("S0", entropy=0.0)
    assert control.coef("S0") == pytest.approx(0.01 * math.exp(0.2))


def test_the_floor_comes_from_the_config_and_may_not_exceed_the_start():
    cfg = load_config(None, ["learner.student_target_entropy=0.35", "learner.student_entropy_coef=0.01",
                             "learner.student_entropy_coef_min=0.01"]).learner
    assert cfg.student_entropy_coef_min == 0.01
    with pytest.raises(PopulaError, match="student_entropy_coef_min"):
        load_config(None, ["learner.student_target_entropy=0.35", "learner.student_entropy_coef=0.01",
                           "learner.student_entropy_coef_min=0.02"])


def test_a_newcomer_starts_at_the_geometric_mean_of_the_steered_coefficients():
    control = EntropyControl(initial=0.01, target=0.4, rate=0.1)
    assert control.coef("child") == 0.01  # nobody steered yet: the configured start
    control.load_state_dict({"S0": 0.01, "S1": 0.04})
    assert control.coef("child") == pytest.approx(0.02)
    control.forget("S1")
    assert control.coef("child") == pytest.approx(0.01)


def test_the_coefficients_round_trip_through_the_state_dict():
    control = EntropyControl(initial=0.01, target=0.4)
    control.observe("S0", entropy=0.1)
    restored = EntropyControl(initial=0.01, target=0.4)
    restored.load_state_dict(control.state_dict())
    assert restored.coef("S0") == control.coef("S0") != 0.01


def test_a_non_finite_entropy_steers_nothing():
    control = EntropyControl(initial=0.01, target=0.4)
    control.observe("S0", entropy=float("nan"))
    assert control.state_dict() == {}


def test_a_target_needs_a_starting_coefficient_no_higher_than_the_ceiling():
    with pytest.raises(PopulaError, match="student_entropy_coef"):
        load_config(None, ["learner.student_target_entropy=0.4"])
    with pytest.raises(PopulaError, match="student_entropy_coef_max"):
        load_config(None, ["learner.student_target_entropy=0.4", "learner.student_entropy_coef=0.1"])
    cfg = load_config(None, ["learner.student_target_entropy=0.4", "learner.student_entropy_coef=0.01"])
    assert cfg.learner.student_target_entropy == 0.4
