"""Specification of the learner's shared-prompt packing and its log-probs without full logits.

Rollouts of one prompt and adapter (a student's GRPO group) go as one packed sequence, the
prompt once and each completion behind it under a block attention mask; log-probs come from
hidden states through the LM head a chunk at a time. Against the path before them (one
left-padded row per rollout, full logits), row by row, every log-prob and every adapter's
gradient must agree to float rounding, whatever the microbatching, temperatures or KL.
"""

from __future__ import annotations

import copy

import pytest
import torch

from conftest import plain_learner
from popula.config import LearnerConfig
from popula.learner import PopulationLearner, Rollout
from popula.learner.objective import selected_logprobs, token_entropy, token_logprobs
from popula.learner.packing import pack_prompts, packed_length
from tests.test_learner import LORA, VOCAB, tiny_llama, trained_looking_adapter

NAMES = ["T0", "S0", "S1"]
BEFORE = {"share_prompts": False, "logit_chunk": None}
PATHS = {"packed, chunked": {"share_prompts": True, "logit_chunk": 5},
         "packed, full logits": {"share_prompts": True, "logit_chunk": None},
         "rows, chunked": {"share_prompts": False, "logit_chunk": 3}}


def group_rollouts(seed: int, tasks: int = 3, n: int = 4) -> list[Rollout]:
    """GRPO-like groups: per adapter and task one prompt and n completions of 1-6 tokens, some of
    them identical (a confident policy repeats itself), temperatures varying within a group."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for task in range(tasks):
        for name in NAMES:
            prompt = torch.randint(0, VOCAB, (int(torch.randint(2, 12, (1,), generator=g)),), generator=g).tolist()
            completions = [torch.randint(0, VOCAB, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist()
                           for _ in range(n - 1)]
            completions.append(list(completions[0]))
            for j, completion in enumerate(completions):
                out.append(Rollout(adapter=name, role="teacher" if name == "T0" else "student", group=f"task{task}",
                                   prompt_ids=prompt, completion_ids=completion,
                                   sampler_logprobs=(-4.6 + 0.5 * torch.randn(len(completion), generator=g)).tolist(),
                                   adapter_version=0, reward=float(j % 2), temperature=[1.0, 0.7][(task + j) % 2]))
    return out


def learner(cfg: LearnerConfig, base: torch.nn.Module | None = None, **paths) -> PopulationLearner:
    base = base if base is not None else tiny_llama()
    out = PopulationLearner(copy.deepcopy(base), LORA, cfg.model_copy(update=paths), max_adapters=len(NAMES))
    for seed, name in enumerate(NAMES):
        out.add_adapter(name, trained_looking_adapter(base, seed))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("cfg", [LearnerConfig(max_tokens_per_microbatch=24, kl_coef=0.5, student_kl_coef=0.05),
                                 plain_learner(max_tokens_per_microbatch=10_000),
                                 plain_learner(max_tokens_per_microbatch=24, student_entropy_coef=0.1)],
                         ids=["small-microbatches-kl", "one", "entropy-bonus"])
def test_row_by_row_logprobs_and_every_gradient_equal_the_path_of_one_row_per_rollout(path, cfg):
    rollouts = group_rollouts(seed=1, n=5)  # 24 tokens a microbatch: a group's rows then span two packs
    before, now = learner(cfg, **BEFORE), learner(cfg, **PATHS[path])
    for k, (want, got) in enumerate(zip(before.logprobs(rollouts), now.logprobs(rollouts))):
        assert len(got) == len(rollouts[k].completion_ids)
        assert got == pytest.approx(want, abs=2e-6), f"rollout {k}"
    want_grads, got_grads = before.gradients(rollouts), now.gradients(rollouts)
    assert sorted(got_grads) == sorted(NAMES)
    for name in NAMES:
        for key, g in got_grads[name].items():
            assert torch.allclose(g, want_grads[name][key], atol=1e-7, rtol=1e-4), f"{name} {key}"
        assert any(g.abs().max() > 0 for g in got_grads[name].values())


def test_a_step_reports_the_same_figures_and_runs_each_prompt_once_per_pack():
    rollouts = group_rollouts(seed=2, tasks=2, n=6)
    cfg = plain_learner(kl_coef=0.5)
    before, now = learner(cfg, **BEFORE), learner(cfg)
    assert now.share_prompts and now.logit_chunk  # the defaults are the new paths
    got, want = now.step(rollouts), before.step(rollouts)
    for name in NAMES:
        for figure in ("loss", "logprob_gap", "kl", "entropy", "grad_norm"):
            assert got["adapters"][name][figure] == pytest.approx(want["adapters"][name][figure], rel=1e-4, abs=1e-7)
        assert got["adapters"][name]["tokens"] == want["adapters"][name]["tokens"]
    prompts = {(r.adapter, tuple(r.prompt_ids)) for r in rollouts}
    per_forward = sum(len(p) for _, p in prompts)
    assert now.prompt_tokens == 2 * per_forward  # the base's forward for the KL, then the training one
    assert before.prompt_tokens == 2 * sum(len(r.prompt_ids) for r in rollouts)


def test_identical_completions_with_opposite_advantages_cancel_exactly():
    """One and the same completion read by both rows: their gradients meet in one number."""
    prompt, completion = [3, 14, 15, 92, 65], [35, 89, 79]
    rollouts = [Rollout(adapter="S0", prompt_ids=prompt, completion_ids=completion, sampler_logprobs=[-1.0] * 3,
                        adapter_version=0, advantage=a, group="g") for a in (0.75, -0.75)]
    rollouts.append(Rollout(adapter="S0", prompt_ids=prompt, completion_ids=[1, 2], sampler_logprobs=[-1.0] * 2,
                            adapter_version=0, advantage=0.0, group="g"))
    trainer = learner(plain_learner())
    for r, own in zip(rollouts, trainer.logprobs(rollouts)):
        r.sampler_logprobs = own  # on-policy: ratio 1, no clipping, gradient A * grad logp
    grads = trainer.gradients(rollouts)["S0"]
    assert all(torch.count_nonzero(g) == 0 for g in grads.values())


def test_eager_attention_takes_the_packed_mask_as_an_additive_one():
    base = tiny_llama()
    base.config._attn_implementation = "eager"
    rollouts = group_rollouts(seed=3, tasks=1)
    before = learner(plain_learner(), base, **BEFORE)
    now = learner(plain_learner(), base)
    assert now.share_prompts and now.model.base_model.config._attn_implementation == "eager"
    for want, got in zip(before.logprobs(rollouts), now.logprobs(rollouts)):
        assert got == pytest.approx(want, abs=2e-6)


def test_an_attention_without_custom_masks_trains_one_row_per_rollout():
    base = tiny_llama()
    base.config._attn_implementation = "flash_attention_2"  # takes no 4D mask; never run here
    assert not learner(plain_learner(), base).share_prompts


def test_selected_logprobs_equal_full_logits_in_value_and_gradient_for_any_chunk():
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=True).requires_grad_(False)
    hidden = torch.randn(23, 16, generator=g, requires_grad=True)
    targets, temperature = torch.randint(0, 50, (23,), generator=g), 0.5 + torch.rand(23, generator=g)
    upstream = torch.randn(23, generator=g)
    want = token_logprobs(head(hidden), targets, temperature)
    (want_grad,) = torch.autograd.grad((want * upstream).sum(), hidden)
    for chunk in (1, 4, 23, 100):
        got = selected_logprobs(hidden, head, targets, temperature, chunk)
        (got_grad,) = torch.autograd.grad((got * upstream).sum(), hidden)
        assert torch.allclose(got, want, atol=1e-6) and torch.allclose(got_grad, want_grad, atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(selected_logprobs(hidden, head, targets, temperature, 7), want, atol=1e-6)
    with pytest.raises(ValueError, match="frozen"):
        selected_logprobs(hidden, head.requires_grad_(True), targets, temperature, 4)


def test_selected_entropies_equal_full_logits_in_value_and_gradient_for_any_chunk():
    g = torch.Generator().manual_seed(1)
    head = torch.nn.Linear(16, 50, bias=True).requires_grad_(False)
    hidden = torch.randn(23, 16, generator=g, requires_grad=True)
    targets, temperature = torch.randint(0, 50, (23,), generator=g), 0.5 + torch.rand(23, generator=g)
    up_logp, up_entropy = torch.randn(23, generator=g), torch.randn(23, generator=g)
    logits = head(hidden)
    want_logp, want_entropy = token_logprobs(logits, targets, temperature), token_entropy(logits, temperature)
    (want_grad,) = torch.autograd.grad((want_logp * up_logp + want_entropy * up_entropy).sum(), hidden)
    for chunk in (1, 4, 23, 100):
        logp, entropy = selected_logprobs(hidden, head, targets, temperature, chunk, entropy=True)
        (got_grad,) = torch.autograd.grad((logp * up_logp + entropy * up_entropy).sum(), hidden)
        assert torch.allclose(logp, want_logp, atol=1e-6) and torch.allclose(entropy, want_entropy, atol=1e-5)
        assert torch.allclose(got_grad, want_grad, atol=1e-5)


def test_pack_prompts_shares_a_key_within_the_budget_and_counts_repeats_once():
    keys = ["a", "a", "b", "a", "a"]
    completions = [[1, 2, 3], [4, 5, 6], [7], [1, 2, 3], [8, 9, 9, 9]]
    assert packed_length(4, completions[:2] + [completions[3]]) == 4 + 2 + 2  # the repeat adds nothing
    assert pack_prompts(keys, [4] * 5, completions, 10) == [[0, 1, 3], [2], [4]]
    assert pack_prompts(keys, [4] * 5, completions, 100) == [[0, 1, 3, 4], [2]]
    assert pack_prompts(keys, [4] * 5, completions, 1) == [[0], [1], [2], [3], [4]]  # alone when over budget
