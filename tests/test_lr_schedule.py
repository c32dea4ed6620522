"""`learner.lr_decay`: the rate of each step is a function of the run's step alone, from
`learner.lr` at step 1 to `learner.lr_final` at `run.steps`, and the config refuses a decay
without an end or an end without a decay."""

import math

import pytest

from popula.config import LearnerConfig, load_config
from popula.errors import PopulaError
from popula.learner.schedule import learning_rate


def test_a_constant_rate_is_lr_at_every_step():
    cfg = LearnerConfig(lr=3e-4)
    assert {learning_rate(cfg, step, 90) for step in (1, 45, 90, 200)} == {3e-4}


def test_a_linear_decay_runs_from_lr_at_step_one_to_lr_final_at_the_last_step_and_stays_there():
    cfg = LearnerConfig(lr=4e-4, lr_decay="linear", lr_final=2e-4)
    assert learning_rate(cfg, 1, 101) == pytest.approx(4e-4)
    assert learning_rate(cfg, 51, 101) == pytest.approx(3e-4)
    assert learning_rate(cfg, 101, 101) == pytest.approx(2e-4)
    assert learning_rate(cfg, 150, 101) == pytest.approx(2e-4)  # a step past the horizon keeps the end


def test_a_cosine_decay_falls_slowly_at_both_ends_and_passes_the_mean_halfway():
    cfg = LearnerConfig(lr=4e-4, lr_decay="cosine", lr_final=2e-4)
    rates = [learning_rate(cfg, step, 101) for step in range(1, 102)]
    assert rates[0] == pytest.approx(4e-4) and rates[-1] == pytest.approx(2e-4)
    assert rates[50] == pytest.approx(3e-4)
    assert all(a >= b for a, b in zip(rates, rates[1:]))
    assert rates[0] - rates[10] < (4e-4 - 2e-4) / 10  # flatter than the line at the start
    assert math.isclose(rates[10] - 2e-4, 4e-4 - rates[90], rel_tol=1e-9)  # symmetric about halfway


def test_a_one_step_run_takes_lr():
    assert learning_rate(LearnerConfig(lr=4e-4, lr_decay="linear", lr_final=2e-4), 1, 1) == pytest.approx(4e-4)


def test_a_decay_without_an_end_is_refused_naming_the_key():
    with pytest.raises(PopulaError, match="lr_decay linear needs lr_final"):
        load_config(None, ["learner.lr_decay=linear"])


def test_an_end_without_a_decay_is_refused():
    with pytest.raises(PopulaError, match="lr_final is the end of a decay"):
        load_config(None, ["learner.lr_final=1e-4"])


def test_an_unknown_decay_is_refused():
    with pytest.raises(PopulaError, match=r"learner\.lr_decay"):
        load_config(None, ["learner.lr_decay=step", "learner.lr_final=1e-4"])
