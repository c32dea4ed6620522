"""Specification of `learner.activation_checkpointing`: the same update for less memory.

With it, the learner's forward keeps only each decoder layer's input and the backward runs
the layer again (popula.learner.recompute). What is computed must not change: every
adapter's gradient and a whole step's weights equal those of the learner that keeps every
activation, on the packed and the row-per-rollout paths, over several microbatches, with a
KL term; and the model the generation engine shares is left as it was.
"""

from __future__ import annotations

import pytest
import torch

from conftest import plain_learner
from popula.config import LearnerConfig
from popula.errors import PopulaError
from popula.learner import PopulationLearner
from tests.test_learner import LORA, tiny_llama
from tests.test_learner_shared_prompts import NAMES, group_rollouts, learner

CFGS = {"small-microbatches-kl": LearnerConfig(max_tokens_per_microbatch=24, kl_coef=0.5, student_kl_coef=0.05),
        "one-microbatch": plain_learner(max_tokens_per_microbatch=10_000)}


@pytest.mark.parametrize("share_prompts", [True, False], ids=["packed", "rows"])
@pytest.mark.parametrize("cfg", list(CFGS.values()), ids=list(CFGS))
def test_every_adapters_gradient_equals_the_one_that_keeps_every_activation(cfg, share_prompts):
    rollouts = group_rollouts(seed=3, n=5)
    kept = learner(cfg, share_prompts=share_prompts)
    recomputing = learner(cfg, share_prompts=share_prompts, activation_checkpointing=True)
    want, got = kept.gradients(rollouts), recomputing.gradients(rollouts)
    assert sorted(got) == sorted(NAMES)
    for name in NAMES:
        assert any(g.abs().max() > 0 for g in got[name].values())
        for key, g in got[name].items():
            assert torch.allclose(g, want[name][key], atol=1e-8, rtol=1e-6), f"{name} {key}"


def test_two_epochs_of_steps_leave_the_same_weights_and_report_the_same_figures():
    cfg = LearnerConfig(max_tokens_per_microbatch=24, kl_coef=0.5, epochs=2)
    kept, recomputing = learner(cfg), learner(cfg, activation_checkpointing=True)
    for seed in (4, 5):
        rollouts = group_rollouts(seed=seed, n=4)
        want, got = kept.step(rollouts), recomputing.step(rollouts)
        for name in NAMES:
            for figure in ("loss", "logprob_gap", "kl", "grad_norm"):
                assert got["adapters"][name][figure] == pytest.approx(want["adapters"][name][figure], rel=1e-6, abs=1e-9)
    for name in NAMES:
        for key, w in kept.adapter_state(name).items():
            assert torch.allclose(recomputing.adapter_state(name)[key], w, atol=1e-7), f"{name} {key}"


def test_the_shared_model_generates_with_its_own_layers_after_a_step():
    """The layers are wrapped only during the learner's forward and backward: a generation
    engine sharing the model (and its KV cache) sees the plain layers."""
    trainer = learner(plain_learner(), activation_checkpointing=True)
    trainer.step(group_rollouts(seed=6, tasks=1))
    layers = trainer.model.base_model.get_decoder().layers
    assert all("forward" not in vars(layer) for layer in layers)


def test_a_model_without_a_list_of_decoder_layers_is_refused_when_the_learner_is_built():
    base = tiny_llama()
    base.get_decoder = lambda: torch.nn.Identity()  # an architecture whose decoder keeps no `layers`
    with pytest.raises(PopulaError, match="activation_checkpointing"):
        PopulationLearner(base, LORA, LearnerConfig(activation_checkpointing=True))
