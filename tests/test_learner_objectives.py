"""The learner's objectives, branch by branch: advantages, the clipped token loss, KL, packing."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from conftest import plain_learner
from popula.learner import (
    EmaBaseline,
    Rollout,
    clipped_token_loss,
    compute_advantages,
    group_advantages,
    k3_kl,
    pack_rows,
    passk_advantages,
    token_entropy,
    token_logprobs,
)


def rollout(adapter: str, role: str, group: str, reward: float | None, advantage: float | None = None) -> Rollout:
    return Rollout(adapter=adapter, role=role, group=group, prompt_ids=[1], completion_ids=[2],
                   sampler_logprobs=[-1.0], adapter_version=0, reward=reward, advantage=advantage)


# -- advantages ---------------------------------------------------------------------------------

def test_grpo_centres_on_the_group_mean_and_divides_by_its_std():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0], normalize_std=True)
    std = math.sqrt(4 * 0.25 / 3)  # unbiased std of [1, 0, 0, 1]
    assert adv == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std], rel=1e-5)


def test_dr_grpo_only_centres():
    assert group_advantages([1.0, 0.0, 0.0, 0.0], normalize_std=False) == pytest.approx([0.75, -0.25, -0.25, -0.25])


@pytest.mark.parametrize("rewards", [[1.0], [0.0, 0.0, 0.0], [1.0, 1.0]])
def test_a_group_with_nothing_to_compare_gets_zero_advantage(rewards):
    for normalize in (True, False):
        assert group_advantages(rewards, normalize_std=normalize) == [0.0] * len(rewards)


def _passk_by_enumeration(rewards: list[float], k: int) -> list[float]:
    """The definition, by brute force: score every k-subset by its best reward."""
    subsets = list(itertools.combinations(range(len(rewards)), k))
    best = {s: max(rewards[i] for i in s) for s in subsets}
    mean = sum(best.values()) / len(best)
    std = math.sqrt(sum((b - mean) ** 2 for b in best.values()) / len(best))
    if std == 0:  # every subset holds the group's best
        return [0.0] * len(rewards)
    return [sum(best[s] - mean for s in subsets if i in s) / sum(i in s for s in subsets) / std
            for i in range(len(rewards))]


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_passk_advantages_equal_the_best_of_k_over_every_subset(k):
    rng = random.Random(k)
    for _ in range(20):
        rewards = [rng.choice([0.0, 0.25, 1.0, 1.0]) for _ in range(8)]
        if len(set(rewards)) == 1:
            continue
        assert passk_advantages(rewards, k) == pytest.approx(_passk_by_enumeration(rewards, k), rel=1e-9)


def test_passk_matches_the_pass_at_k_papers_closed_form_for_right_or_wrong_answers():
    n, k, wrong = 8, 4, 6  # 2 of 8 right
    mean = 1 - math.comb(wrong, k) / math.comb(n, k)
    std = math.sqrt(mean * (1 - mean))
    right_adv = (1 - mean) / std
    wrong_adv = (1 - math.comb(wrong - 1, k - 1) / math.comb(n - 1, k - 1) - mean) / std
    assert passk_advantages([1.0, 1.0] + [0.0] * wrong, k) == pytest.approx([right_adv] * 2 + [wrong_adv] * wrong)


def test_passk_barely_punishes_the_last_wrong_answer_of_an_easy_task():
    """Where GRPO pushes a single wrong answer among seven right ones far down (it sharpens the
    student onto its usual answer), best-of-4 gives it nothing: every 4-subset holds a right one."""
    easy = [1.0] * 7 + [0.0]
    assert group_advantages(easy, normalize_std=True)[-1] < -2.0
    assert passk_advantages(easy, 4) == [0.0] * 8
    hard = passk_advantages([1.0] + [0.0] * 7, 4)  # the rare right answer still pulls the student
    assert hard[0] == pytest.approx(1.0) and hard[1:] == pytest.approx([-1 / 7] * 7)
    assert sum(hard) == pytest.approx(0.0)  # a baseline, like GRPO's: no drift of the mean log-prob


def test_passk_caps_k_at_the_group_and_gives_flat_groups_nothing():
    assert passk_advantages([1.0, 0.0], 4) == pytest.approx(_passk_by_enumeration([1.0, 0.0], 2))
    assert passk_advantages([0.5] * 8, 4) == [0.0] * 8
    assert passk_advantages([1.0], 4) == [0.0]


def test_the_passk_option_reaches_students_and_leaves_teachers_alone():
    rollouts = [rollout("S0", "student", "t1", r) for r in (1.0, 0.0, 0.0, 0.0)] + \
               [rollout("T0", "teacher", "code_o", r) for r in (-1.0, 0.5, 0.0)]
    adv = compute_advantages(rollouts, plain_learner(advantage="passk", pass_k=2), EmaBaseline(0.9))
    assert adv[:4] == pytest.approx(passk_advantages([1.0, 0.0, 0.0, 0.0], 2))
    assert adv[4:] == pytest.approx(group_advantages([-1.0, 0.5, 0.0], normalize_std=True))


def test_student_groups_never_span_adapters_or_roles():
    rollouts = [rollout("S0", "student", "t1", 1.0), rollout("S0", "student", "t1", 0.0),
                rollout("S1", "student", "t1", 1.0), rollout("S1", "student", "t1", 1.0),
                rollout("A", "teacher", "t1", 0.0), rollout("A", "student", "t1", 1.0)]
    adv = compute_advantages(rollouts, plain_learner(advantage="dr_grpo"), EmaBaseline(0.9))
    # S0's pair is compared within itself; S1's equal pair has nothing to learn; the single
    # agent's teacher and student rollouts with the same group name stay apart (groups of one).
    assert adv == pytest.approx([0.5, -0.5, 0.0, 0.0, 0.0, 0.0])


def test_teacher_rewards_are_normalised_per_task_type_with_the_batch_baseline():
    rollouts = [rollout("T0", "teacher", "code_o", r) for r in (-1.0, 0.5, 0.0)] + \
               [rollout("T0", "teacher", "code_f", r) for r in (0.2, 0.4)]
    adv = compute_advantages(rollouts, plain_learner(), EmaBaseline(0.9))
    assert adv[:3] == pytest.approx(group_advantages([-1.0, 0.5, 0.0], normalize_std=True))
    assert adv[3:] == pytest.approx(group_advantages([0.2, 0.4], normalize_std=True))
    unnormalised = compute_advantages(rollouts, plain_learner(teacher_normalize_std=False), EmaBaseline(0.9))
    assert unnormalised[3:] == pytest.approx([-0.1, 0.1])


def test_the_population_baseline_compares_a_teachers_task_with_every_teachers_tasks_of_that_type():
    rollouts = [rollout("T0", "teacher", "code_o", -1.0), rollout("T0", "teacher", "code_o", 0.5),
                rollout("T1", "teacher", "code_o", 0.5), rollout("T1", "teacher", "code_o", 0.7),
                rollout("T1", "teacher", "code_f", 0.2), rollout("S0", "student", "code_o", 1.0),
                rollout("S0", "student", "code_o", 0.0)]
    adv = compute_advantages(rollouts, plain_learner(teacher_baseline="population"), EmaBaseline(0.9))
    assert adv[:4] == pytest.approx(group_advantages([-1.0, 0.5, 0.5, 0.7], normalize_std=True))
    assert adv[4] == 0.0  # the only code_f task of the step: nothing to compare it with
    assert adv[5:] == pytest.approx(group_advantages([1.0, 0.0], normalize_std=True))  # students: unchanged
    # Per adapter, T1's 0.5 is the worse of its pair (pushed down); against all teachers it is above average.
    per_adapter = compute_advantages(rollouts, plain_learner(), EmaBaseline(0.9))
    assert per_adapter[2] < 0 < adv[2]


def test_the_ema_baseline_starts_at_the_batch_mean_then_remembers_past_steps():
    cfg = plain_learner(teacher_baseline="ema", teacher_baseline_momentum=0.5, teacher_normalize_std=False)
    ema = EmaBaseline(cfg.teacher_baseline_momentum)
    first = compute_advantages([rollout("T0", "teacher", "code_i", r) for r in (0.0, 1.0)], cfg, ema)
    assert first == pytest.approx([-0.5, 0.5])
    # One proposal alone still gets a signal: its reward against the running mean (0.5).
    second = compute_advantages([rollout("T0", "teacher", "code_i", 1.0)], cfg, ema)
    assert second == pytest.approx([0.5])
    assert ema.stats["T0\x1fteacher\x1fcode_i"][0] == pytest.approx(0.75)
    restored = EmaBaseline(0.0)
    restored.load_state_dict(ema.state_dict())
    assert restored.stats == ema.stats and restored.momentum == 0.5


def test_a_given_advantage_wins_over_the_reward():
    adv = compute_advantages([rollout("S0", "student", "g", 1.0, advantage=-3.0),
                              rollout("S0", "student", "g", 0.0)], plain_learner(), EmaBaseline(0.9))
    assert adv == [-3.0, 0.0]


# -- the token loss -------------------------------------------------------------------------------

def test_on_policy_the_loss_is_minus_advantage_and_its_gradient_is_reinforce():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 0.5])
    tl = clipped_token_loss(logp, logp.detach(), adv, clip_low=0.2, clip_high=0.2)
    assert torch.allclose(tl.loss, -adv)
    tl.loss.sum().backward()
    assert torch.allclose(logp.grad, -adv)  # d/dlogp of -ratio*A at ratio 1
    assert not tl.clipped.any() and tl.kl is None


@pytest.mark.parametrize("log_ratio, adv, clipped", [
    (math.log(1.5), 1.0, True),    # good token already made more likely than the clip allows
    (math.log(0.5), 1.0, False),   # good token made less likely: always pushed back up
    (math.log(0.5), -1.0, True),   # bad token already made less likely than the clip allows
    (math.log(1.5), -1.0, False),  # bad token made more likely: always pushed back down
])
def test_ppo_clipping_stops_the_gradient_only_where_the_update_went_far_enough(log_ratio, adv, clipped):
    logp = torch.tensor([-1.0 + log_ratio], requires_grad=True)
    tl = clipped_token_loss(logp, torch.tensor([-1.0]), torch.tensor([adv]), clip_low=0.2, clip_high=0.2)
    tl.loss.sum().backward()
    assert bool(tl.clipped[0]) is clipped
    if clipped:
        assert logp.grad.item() == 0.0
        assert tl.loss.item() == pytest.approx(-adv * (1.2 if adv > 0 else 0.8))
    else:
        assert logp.grad.item() == pytest.approx(-adv * math.exp(log_ratio))


def test_clip_higher_widens_only_the_upper_bound():
    logp = torch.tensor([-1.0 + math.log(1.25)])
    args = (torch.tensor([-1.0]), torch.tensor([1.0]))
    assert clipped_token_loss(logp, *args, clip_low=0.2, clip_high=0.2).clipped.item()
    assert not clipped_token_loss(logp, *args, clip_low=0.2, clip_high=0.28).clipped.item()


# -- truncated importance sampling (the default: learner.is_cap) ---------------------------------

def test_with_a_matching_sampler_truncated_is_gives_the_plain_on_policy_gradient():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 0.5])
    tl = clipped_token_loss(logp, logp.detach(), adv, clip_low=0.2, clip_high=0.2, is_cap=2.0)
    tl.loss.sum().backward()
    assert torch.equal(logp.grad, -adv) and not tl.truncated.any() and not tl.clipped.any()


@pytest.mark.parametrize("gap", [0.3, -0.3])
def test_a_samplers_numeric_gap_is_importance_weighted_not_clipped_away(gap):
    """A sampler that rated a token e^0.3 less likely (bf16 kernels) than the learner does: with the
    ratio to the sampler the clip reads that gap as an update gone too far and drops the token's
    gradient; truncated IS keeps the gradient, weighted by p_learner / p_sampler."""
    logp = torch.tensor([-1.0], requires_grad=True)
    sampler = logp.detach() - gap
    adv = torch.tensor([1.0 if gap > 0 else -1.0])
    to_sampler = clipped_token_loss(logp, sampler, adv, clip_low=0.2, clip_high=0.2)
    assert to_sampler.clipped.item()
    tl = clipped_token_loss(logp, sampler, adv, clip_low=0.2, clip_high=0.2, is_cap=2.0)
    tl.loss.sum().backward()
    assert not tl.clipped.item() and not tl.truncated.item()
    assert logp.grad.item() == pytest.approx(-adv.item() * math.exp(gap))


def test_importance_weights_are_truncated_at_the_cap():
    logp = torch.tensor([-1.0, -1.0], requires_grad=True)
    sampler = torch.tensor([-3.0, -1.5])  # weights e^2 = 7.4 and e^0.5 = 1.6
    tl = clipped_token_loss(logp, sampler, torch.tensor([1.0, 1.0]), clip_low=0.2, clip_high=0.2, is_cap=2.0)
    tl.loss.sum().backward()
    assert tl.truncated.tolist() == [True, False]
    assert logp.grad.tolist() == pytest.approx([-2.0, -math.exp(0.5)])


def test_under_truncated_is_later_epochs_clip_against_the_first_epochs_logprobs():
    before = torch.tensor([-1.0])
    moved = torch.tensor([-1.0 + math.log(1.5)], requires_grad=True)  # an earlier epoch raised it 1.5x
    tl = clipped_token_loss(moved, before, torch.tensor([1.0]), clip_low=0.2, clip_high=0.2, is_cap=2.0,
                            old_logp=before)
    tl.loss.sum().backward()
    assert tl.clipped.item() and moved.grad.item() == 0.0


def test_k3_kl_is_zero_at_the_base_positive_elsewhere_and_added_with_its_coefficient():
    logp = torch.tensor([-1.0, -1.0, -3.0])
    base = torch.tensor([-1.0, -2.0, -1.0])
    kl = k3_kl(logp, base)
    assert kl[0] == 0.0 and (kl[1:] > 0).all()
    assert kl[1].item() == pytest.approx(math.exp(-1) + 1 - 1)
    adv = torch.zeros(3)
    tl = clipped_token_loss(logp, logp, adv, clip_low=0.2, clip_high=0.2, base_logp=base, kl_coef=0.1)
    assert torch.allclose(tl.loss, 0.1 * kl) and torch.allclose(tl.kl, kl)


def test_the_entropy_bonus_is_subtracted_with_its_coefficient_and_a_zero_one_adds_nothing():
    logp, adv = torch.tensor([-1.0, -2.0]), torch.tensor([0.5, -0.5])
    entropy = torch.tensor([0.3, 1.2])
    plain = clipped_token_loss(logp, logp, adv, clip_low=0.2, clip_high=0.2)
    bonus = clipped_token_loss(logp, logp, adv, clip_low=0.2, clip_high=0.2, entropy=entropy, entropy_coef=0.1)
    off = clipped_token_loss(logp, logp, adv, clip_low=0.2, clip_high=0.2, entropy=entropy, entropy_coef=0.0)
    assert torch.allclose(bonus.loss, plain.loss - 0.1 * entropy) and torch.equal(off.loss, plain.loss)


def test_token_entropy_is_the_tempered_distributions():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    assert token_entropy(logits, 1.0)[1].item() == pytest.approx(math.log(3))  # uniform
    p = torch.softmax(logits[0] / 0.5, -1)
    assert token_entropy(logits, 0.5)[0].item() == pytest.approx(-(p * p.log()).sum().item(), rel=1e-5)


def test_token_logprobs_use_the_samplers_temperature():
    logits = torch.tensor([[2.0, 0.0, -1.0]])
    target = torch.tensor([0])
    for t in (1.0, 0.5, 2.0):
        expected = torch.log_softmax(logits / t, -1)[0, 0]
        assert token_logprobs(logits, target, t).item() == pytest.approx(expected.item(), rel=1e-5)


# -- packing --------------------------------------------------------------------------------------

def test_packing_respects_the_token_budget_and_covers_every_row_once():
    lengths = [5, 17, 3, 9, 9, 12, 1, 30]
    batches = pack_rows(lengths, 36)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) * max(lengths[i] for i in b) <= 36 or len(b) == 1
    assert [7] in batches  # 30 tokens: alone
    assert pack_rows(lengths, 10_000) == [sorted(range(8), key=lambda i: (-lengths[i], i))]


def test_a_row_longer_than_the_budget_gets_a_microbatch_of_its_own():
    assert pack_rows([50, 4, 4], 16) == [[0], [1, 2]]
