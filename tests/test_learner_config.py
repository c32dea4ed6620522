"""The learner's config section: the measured defaults, and errors naming the key."""

import pytest

from popula.config import Config, LearnerConfig, load_config
from popula.errors import PopulaError


def test_defaults_are_an_on_policy_grpo_step_at_the_measured_rate_and_kl():
    cfg = Config().learner
    assert cfg == LearnerConfig()
    assert (cfg.epochs, cfg.advantage, cfg.lr) == (1, "grpo", 2e-3)  # docs/results/learning: 2e-4 moves nothing
    assert (cfg.kl_coef, cfg.student_kl_coef) == (0.5, 0.05)  # the teachers' KL to the base, the students'
    assert (cfg.teacher_baseline, cfg.teacher_strata) == ("population", "lines")
    assert cfg.clip_eps_high is None and cfg.grad_clip == 1.0


def test_learner_keys_are_overridable_from_the_command_line():
    cfg = load_config(None, ["learner.lr=3e-4", "learner.advantage=dr_grpo", "learner.epochs=2",
                             "learner.teacher_baseline=ema", "learner.grad_clip=null"])
    assert (cfg.learner.lr, cfg.learner.advantage, cfg.learner.epochs) == (3e-4, "dr_grpo", 2)
    assert cfg.learner.teacher_baseline == "ema" and cfg.learner.grad_clip is None


@pytest.mark.parametrize("override, key", [
    ("learner.advantage=ppo", "learner.advantage"),
    ("learner.clip_eps=1.5", "learner.clip_eps"),
    ("learner.max_tokens_per_microbatch=0", "learner.max_tokens_per_microbatch"),
    ("learner.lr=0", "learner.lr"),
    ("learner.learning_rate=0.1", "learner.learning_rate"),
])
def test_bad_learner_values_are_refused_naming_the_key(override, key):
    with pytest.raises(PopulaError, match=key.replace(".", r"\.")):
        load_config(None, [override])
