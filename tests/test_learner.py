"""Specification of the population learner: one pass trains every adapter as if it were alone.

Each adapter's gradient from a mixed batch (any adapters, any microbatching) must equal the
gradient PEFT gives when that adapter is trained alone on its own rows with the same
objective; adapters have separate optimiser states; a non-finite loss skips exactly the
adapter it belongs to; the whole learner round-trips through its state dict.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from peft import LoraConfig as PeftLoraConfig
from peft import get_peft_model, set_peft_model_state_dict
from transformers import LlamaForCausalLM

from conftest import plain_learner, small_llama
from popula.config import LearnerConfig, LoraConfig
from popula.errors import PopulaError
from popula.learner import NonFiniteUpdateWarning, PopulationLearner, Rollout
from popula.learner.learner import avoid_cudnn_attention
from popula.lora import DEFAULT_TARGET_MODULES, fresh_peft_state_dict

VOCAB = 96
RANK, ALPHA = 8, 16.0
LORA = LoraConfig(rank=RANK, alpha=ALPHA)


def tiny_llama() -> LlamaForCausalLM:
    return small_llama(VOCAB, hidden=32, heads=4, kv_heads=2).eval()


def trained_looking_adapter(base: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """PEFT-format weights with B off zero, so each adapter computes a different function."""
    g = torch.Generator().manual_seed(seed)
    shapes = {p: (m.in_features, m.out_features) for p, m in base.named_modules()
              if isinstance(m, torch.nn.Linear) and p.rsplit(".", 1)[-1] in DEFAULT_TARGET_MODULES}
    sd = fresh_peft_state_dict(shapes, RANK, g)
    return {k: torch.randn(v.shape, generator=g) * 0.1 if "lora_B" in k else v for k, v in sd.items()}


def random_rollouts(names: list[str], n: int, seed: int) -> list[Rollout]:
    """Rollouts of varied prompt and completion lengths, spread over `names`, with sampler
    log-probs made up so that some ratios fall outside the clip range."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = int(torch.randint(2, 12, (1,), generator=g))
        c = int(torch.randint(1, 7, (1,), generator=g))
        out.append(Rollout(
            adapter=names[i % len(names)], role="student", group=f"task{i // (2 * len(names))}",
            prompt_ids=torch.randint(0, VOCAB, (p,), generator=g).tolist(),
            completion_ids=torch.randint(0, VOCAB, (c,), generator=g).tolist(),
            sampler_logprobs=(-4.6 + 0.5 * torch.randn(c, generator=g)).tolist(),
            adapter_version=0, reward=float(torch.randint(0, 2, (1,), generator=g)),
            temperature=[1.0, 0.7][i % 2],
        ))
    return out


def peft_alone_gradient(base: torch.nn.Module, adapter: dict[str, torch.Tensor], rollouts: list[Rollout],
                        advantages: list[float], cfg: LearnerConfig) -> dict[str, torch.Tensor]:
    """The reference: PEFT with only this adapter, one unpadded row at a time, PPO-clip loss per
    token (and k3 KL to the adapter-disabled model), summed and divided by the adapter's tokens."""
    model = get_peft_model(copy.deepcopy(base), PeftLoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0,
                                                                target_modules=list(DEFAULT_TARGET_MODULES)))
    set_peft_model_state_dict(model, adapter)
    n_tokens = sum(len(r.completion_ids) for r in rollouts)
    total = 0.0
    for r, adv in zip(rollouts, advantages):
        ids = torch.tensor([r.prompt_ids + r.completion_ids])
        m = len(r.completion_ids)
        targets = ids[0, -m:]

        def logp_of(logits: torch.Tensor, m: int = m, t: float = r.temperature,
                    targets: torch.Tensor = targets) -> torch.Tensor:
            logits = logits[0, -m - 1:-1] / t
            return torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]

        logp = logp_of(model(input_ids=ids).logits)
        sampler = torch.tensor(r.sampler_logprobs)
        weight = 1.0
        if cfg.is_cap is not None:  # truncated IS: weighted by p_learner / p_sampler, the ratio to the learner
            weight = torch.exp(logp.detach() - sampler).clamp(max=cfg.is_cap)
            sampler = logp.detach()
        ratio = torch.exp(logp - sampler)
        low, high = 1 - cfg.clip_eps, 1 + (cfg.clip_eps_high or cfg.clip_eps)
        per_token = -weight * torch.minimum(ratio * adv, ratio.clamp(low, high) * adv)
        if cfg.kl_coef:
            with torch.no_grad(), model.disable_adapter():
                base_logp = logp_of(model(input_ids=ids).logits)
            per_token = per_token + cfg.kl_coef * (torch.exp(base_logp - logp) - (base_logp - logp) - 1)
        total = total + per_token.sum()
    (total / n_tokens).backward()
    return {k.replace(".default", ""): p.grad for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
@pytest.mark.parametrize("cfg, kernel", [
    (plain_learner(max_tokens_per_microbatch=40), "gather"),
    (plain_learner(max_tokens_per_microbatch=40), "grouped"),
    (plain_learner(max_tokens_per_microbatch=10_000, advantage="dr_grpo", clip_eps=0.1, clip_eps_high=0.3), None),
    (plain_learner(max_tokens_per_microbatch=64, kl_coef=0.5), None),
    (plain_learner(max_tokens_per_microbatch=64, kl_coef=0.5, is_cap=2.0), None),
], ids=["small-microbatches-gather", "small-microbatches-grouped", "one-microbatch-dr-grpo-clip-higher", "with-kl",
        "truncated-is"])
def test_each_adapters_gradient_in_a_mixed_batch_equals_peft_training_it_alone(cfg, kernel):
    base = tiny_llama()
    names = ["T0", "S0", "S1"]
    adapters = {n: trained_looking_adapter(base, seed) for seed, n in enumerate(names)}
    learner = PopulationLearner(copy.deepcopy(base), LORA, cfg, max_adapters=4, kernel=kernel)
    for n in names:
        learner.add_adapter(n, adapters[n])
    rollouts = random_rollouts(names, 15, seed=3)
    # Advantages are given, so the check is about the loss and its gradient alone.
    for i, r in enumerate(rollouts):
        r.advantage = [1.0, -0.5, 0.25, -2.0, 0.0][i % 5]
    grads = learner.gradients(rollouts)

    assert sorted(grads) == sorted(names)
    for n in names:
        own = [r for r in rollouts if r.adapter == n]
        ref = peft_alone_gradient(base, adapters[n], own, [r.advantage for r in own], cfg)
        assert sorted(ref) == sorted(grads[n])
        for key, g in grads[n].items():
            assert torch.allclose(g, ref[key], atol=1e-6, rtol=1e-4), f"{n} {key}"
        assert any(g.abs().max() > 0 for g in grads[n].values())


@pytest.mark.slow
def test_gradients_do_not_change_when_other_adapters_share_the_batch():
    base = tiny_llama()
    adapters = {n: trained_looking_adapter(base, seed) for seed, n in enumerate(["A", "B", "C"])}
    learner = PopulationLearner(base, LORA, plain_learner(max_tokens_per_microbatch=48), max_adapters=3)
    for n, sd in adapters.items():
        learner.add_adapter(n, sd)
    mixed = random_rollouts(["A", "B", "C"], 12, seed=5)
    alone = [r for r in mixed if r.adapter == "A"]
    together, by_itself = learner.gradients(mixed)["A"], learner.gradients(alone)["A"]
    for key in together:
        assert torch.allclose(together[key], by_itself[key], atol=1e-7, rtol=1e-5)


def test_loss_is_the_mean_over_all_tokens_of_the_adapter_not_of_per_sequence_means():
    base = tiny_llama()
    adapter = trained_looking_adapter(base, 0)
    learner = PopulationLearner(base, LORA, plain_learner(), max_adapters=1)
    learner.add_adapter("S0", adapter)
    long, short = random_rollouts(["S0"], 2, seed=1)
    long.completion_ids, long.sampler_logprobs = [5] * 9, [0.0] * 9
    short.completion_ids, short.sampler_logprobs = [7], [0.0]
    long.advantage, short.advantage = 1.0, -1.0
    # Make the sampler log-probs the trainer's own, so every ratio is 1 and loss_t = -A.
    for r in (long, short):
        r.sampler_logprobs = [-x for x in _nll(learner, r)]
    metrics = learner.step([long, short])
    # Token-level: (9 * -1 + 1 * +1) / 10; a per-sequence mean would give (-1 + 1) / 2 = 0.
    assert metrics["adapters"]["S0"]["loss"] == pytest.approx(-0.8, abs=1e-5)
    assert metrics["adapters"]["S0"]["logprob_gap"] < 1e-5
    assert metrics["adapters"]["S0"]["clip_fraction"] == 0.0


def test_entropy_is_the_sampled_tokens_mean_negative_log_prob_over_all_of_an_adapters_tokens():
    base = tiny_llama()
    adapter = trained_looking_adapter(base, 0)
    learner = PopulationLearner(base, LORA, plain_learner(), max_adapters=2)
    for name in ("S0", "S1"):
        learner.add_adapter(name, adapter)
    rollouts = random_rollouts(["S0", "S1"], 4, seed=2)
    for r in rollouts:
        r.advantage = 0.5
        r.sampler_logprobs = [-0.25 * (i + 1) for i in range(len(r.completion_ids))]
    metrics = learner.step(rollouts)
    for name in ("S0", "S1"):
        own = [x for r in rollouts if r.adapter == name for x in r.sampler_logprobs]
        assert metrics["adapters"][name]["entropy"] == pytest.approx(-sum(own) / len(own), rel=1e-6)


def _nll(learner: PopulationLearner, r: Rollout) -> list[float]:
    """-log p of each completion token under the learner's current adapter (sampled-token check)."""
    mm = learner.model
    ids = torch.tensor([r.prompt_ids + r.completion_ids])
    m = len(r.completion_ids)
    with torch.no_grad(), mm.route([learner._slot[r.adapter]]):
        logits = mm(input_ids=ids).logits[0, -m - 1:-1] / r.temperature
    return (-torch.log_softmax(logits, -1).gather(-1, ids[0, -m:, None])[:, 0]).tolist()


def weights(learner: PopulationLearner, name: str) -> dict[str, torch.Tensor]:
    return learner.adapter_state(name)


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 0.0) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=atol, rtol=0) for k in a)


def make_learner(names: list[str], cfg: LearnerConfig | None = None) -> PopulationLearner:
    cfg = cfg or plain_learner(lr=1e-2)
    base = tiny_llama()
    adapters = {n: trained_looking_adapter(base, seed) for seed, n in enumerate(names)}
    learner = PopulationLearner(base, LORA, cfg, max_adapters=4)
    for n, sd in adapters.items():
        learner.add_adapter(n, sd)
    return learner


@pytest.mark.slow
def test_each_adapter_updates_as_if_trained_alone_with_its_own_optimiser():
    mixed = random_rollouts(["A", "B"], 12, seed=2)
    together = make_learner(["A", "B"])
    alone = make_learner(["A", "B"])
    for _ in range(3):  # several steps, so AdamW moments matter
        together.step(mixed)
        alone.step([r for r in mixed if r.adapter == "A"])
    assert same(weights(together, "A"), weights(alone, "A"), atol=1e-6)
    # B had no rollouts in `alone`: untouched weights, untouched optimiser (no moments, no step).
    assert same(weights(alone, "B"), make_learner(["A", "B"]).adapter_state("B"))
    assert alone.optimizer_state("B")["state"] == {}
    assert together.optimizer_state("B")["state"][0]["step"] == 3
    moments_a, moments_b = (together.optimizer_state(n)["state"][0]["exp_avg"] for n in ("A", "B"))
    assert not torch.equal(moments_a, moments_b)


def test_a_step_at_a_given_rate_is_the_step_of_a_learner_built_at_that_rate():
    """A schedule's rate (`step(lr=...)`) is this step's alone: the next step without one is at `learner.lr`."""
    rollouts = random_rollouts(["A", "B"], 8, seed=4)
    scheduled, built_at_it = make_learner(["A", "B"]), make_learner(["A", "B"], plain_learner(lr=3e-3))
    plain = make_learner(["A", "B"])
    scheduled.step(rollouts, lr=3e-3)
    built_at_it.step(rollouts)
    plain.step(rollouts)
    assert same(weights(scheduled, "A"), weights(built_at_it, "A"), atol=1e-7)
    assert not same(weights(scheduled, "A"), weights(plain, "A"), atol=1e-5)
    scheduled.step(rollouts)
    built_at_it.step(rollouts, lr=1e-2)
    assert same(weights(scheduled, "B"), weights(built_at_it, "B"), atol=1e-7)


def _with_rewards(rollouts: list[Rollout], rewards: dict[str, list[float]]) -> list[Rollout]:
    """The rollouts with each group's rewards replaced, in order, by `rewards[group]`."""
    seen: dict[str, int] = {}
    out = []
    for r in rollouts:
        k = seen.get(r.group, 0)
        seen[r.group] = k + 1
        out.append(dataclasses.replace(r, reward=rewards[r.group][k]) if r.group in rewards else r)
    return out


def test_rows_without_a_gradient_are_not_run_and_leave_every_update_as_it_was():
    """A row with advantage 0 and no KL (a group whose rollouts all scored alike) adds exactly
    zero to every gradient: the learner runs no forward for it, and every adapter's update,
    loss, entropy and optimiser state equals a backward over all rows; the sampler/learner gap
    and the clip and truncation shares are measured over the rows run."""
    rollouts = random_rollouts(["A", "B"], 16, seed=3)
    groups = sorted({r.group for r in rollouts})
    # Groups are per adapter, rows alternate A, B. Step 1: every group has signal;
    # step 2: only A's two rows of the first group do; step 3: no row has.
    first = _with_rewards(rollouts, {g: [1.0, 0.0, 0.0, 1.0] for g in groups})
    second = _with_rewards(rollouts, {g: [1.0, 1.0, 1.0, 1.0] for g in groups[1:]} | {groups[0]: [1.0, 0.0, 0.0, 0.0]})
    third = _with_rewards(rollouts, {g: [0.0, 0.0, 0.0, 0.0] for g in groups})
    fast, full = make_learner(["A", "B"]), make_learner(["A", "B"])
    full._signal_rows = lambda rows: list(range(len(rows.ids)))  # the reference: a backward over every row
    runs = [(fast.step(batch), full.step(batch)) for batch in (first, second, third)]
    assert [got["signal_rows"] for got, _ in runs] == [16, 2, 0]  # step 2: A's two rows in the first group
    assert all(got["rows"] == want["rows"] == 16 for got, want in runs)
    got, want = runs[1]
    assert got["adapters"]["B"]["logprob_gap"] is None and want["adapters"]["B"]["logprob_gap"] > 0
    assert runs[2][0]["logprob_gap_max"] is None
    for got, want in runs:
        for name in ("A", "B"):
            for key in ("loss", "entropy", "grad_norm", "tokens"):
                assert got["adapters"][name][key] == pytest.approx(want["adapters"][name][key], rel=1e-6, abs=1e-7)
    for name in ("A", "B"):  # equal to rounding: the rows run are batched differently
        assert same(weights(fast, name), weights(full, name), atol=1e-6)
        # a zero gradient in steps 2-3, yet AdamW stepped B (its moments carry it), as it did before
        assert fast.optimizer_state(name)["state"][0]["step"] == full.optimizer_state(name)["state"][0]["step"] == 3


def test_a_nan_loss_skips_only_that_adapter_and_leaves_its_weights_and_optimiser_intact():
    learner = make_learner(["good", "bad"])
    reference = make_learner(["good", "bad"])
    rollouts = random_rollouts(["good", "bad"], 10, seed=4)
    reference.step([r for r in rollouts if r.adapter == "good"])
    learner.step(rollouts)  # one clean step first, so "bad" has optimiser moments to protect
    reference.step([r for r in rollouts if r.adapter == "good"])
    bad_before, opt_before = weights(learner, "bad"), learner.optimizer_state("bad")
    for r in rollouts:
        if r.adapter == "bad":
            r.sampler_logprobs = [float("nan")] * len(r.completion_ids)

    with pytest.warns(NonFiniteUpdateWarning, match="'bad'"):
        metrics = learner.step(rollouts)

    assert metrics["skipped"] == ["bad"]
    assert metrics["adapters"]["bad"]["loss"] is None
    assert same(weights(learner, "bad"), bad_before)
    after = learner.optimizer_state("bad")
    assert after["state"][0]["step"] == opt_before["state"][0]["step"]
    assert torch.equal(after["state"][0]["exp_avg"], opt_before["state"][0]["exp_avg"])
    # "good" is updated as if "bad" had not been there at all, up to fp32 rounding (the mixed
    # batch has another shape, so sums run in another order: ~2e-6 on weights of ~0.4); a
    # leak from "bad" would move weights by about one step, lr = 1e-2.
    assert same(weights(learner, "good"), weights(reference, "good"), atol=1e-5)
    assert metrics["adapters"]["good"]["grad_norm"] is not None
    assert all(torch.isfinite(t).all() for t in weights(learner, "bad").values())


def test_an_inf_gradient_skips_the_adapter():
    learner = make_learner(["A", "B"])
    rollouts = random_rollouts(["A", "B"], 8, seed=6)
    for r in rollouts:
        if r.adapter == "B":
            r.advantage = float("inf")
    before = weights(learner, "B")
    with pytest.warns(NonFiniteUpdateWarning):
        metrics = learner.step(rollouts)
    assert metrics["skipped"] == ["B"] and same(weights(learner, "B"), before)
    assert not same(weights(learner, "A"), make_learner(["A", "B"]).adapter_state("A"))


@pytest.mark.slow
def test_with_several_epochs_ratios_to_the_sampler_move_off_one_and_get_clipped():
    learner = make_learner(["A"], plain_learner(lr=5e-2, epochs=4, clip_eps=0.05, grad_clip=None))
    rollouts = random_rollouts(["A"], 8, seed=8)
    for r in rollouts:
        r.sampler_logprobs = [-x for x in _nll(learner, r)]
    first = learner.step(rollouts)
    assert first["clip_fraction"] == 0.0 and first["logprob_gap"] < 1e-5
    second = learner.step(rollouts)  # the same samples are now off-policy
    assert second["logprob_gap"] > 1e-3 and second["clip_fraction"] > 0.0


def test_tokens_the_sampler_underrated_past_the_cap_are_counted_as_truncated():
    learner = make_learner(["A"], plain_learner(is_cap=2.0))
    rollouts = random_rollouts(["A"], 8, seed=8)
    for i, r in enumerate(rollouts):  # every other token: the sampler found it e^1 = 2.7x less likely than the learner does
        r.sampler_logprobs = [-x - (j % 2) for j, x in enumerate(_nll(learner, r))]
        r.reward = float(i % 2)  # each group of two has a right and a wrong answer: every row trains
    metrics = learner.step(rollouts)
    tokens = sum(len(r.completion_ids) for r in rollouts)
    assert metrics["is_truncated"] == pytest.approx(sum(len(r.completion_ids) // 2 for r in rollouts) / tokens)
    assert metrics["clip_fraction"] == 0.0


def test_state_dict_round_trip_resumes_exactly():
    rollouts = random_rollouts(["A", "B"], 10, seed=9)
    first = make_learner(["A", "B"], plain_learner(lr=1e-2, teacher_baseline="ema"))
    first.step(rollouts)
    state = copy.deepcopy(first.state_dict())
    resumed = make_learner(["Z"], plain_learner(lr=1e-2, teacher_baseline="ema"))
    resumed.load_state_dict(state)
    assert resumed.adapters == ["A", "B"]
    first.step(rollouts)
    resumed.step(rollouts)
    for n in ("A", "B"):
        assert same(weights(first, n), weights(resumed, n))


def test_replace_remove_and_add_adapters():
    learner = make_learner(["A", "B"])
    learner.step(random_rollouts(["A", "B"], 6, seed=1))
    child = {k: v * 0.5 for k, v in weights(learner, "B").items()}
    learner.replace_adapter("A", child, reset_optimizer=True)
    assert same(weights(learner, "A"), child) and learner.optimizer_state("A")["state"] == {}
    learner.replace_adapter("B", child, reset_optimizer=False)
    assert learner.optimizer_state("B")["state"][0]["step"] == 1
    learner.remove_adapter("A")
    learner.add_adapter("C")  # a fresh PEFT init: B zero, so C starts as the bare base
    assert learner.adapters == ["B", "C"]
    assert all(not v.any() for k, v in weights(learner, "C").items() if "lora_B" in k)
    with pytest.raises(PopulaError, match="'A'"):
        learner.adapter_state("A")
    with pytest.raises(PopulaError, match="'B' is already"):
        learner.add_adapter("B")


def test_bad_rollouts_are_refused_naming_them():
    learner = make_learner(["A"])
    good = random_rollouts(["A"], 1, seed=0)[0]
    cases = [
        ({"adapter": "nope"}, "'nope' is not in the learner"),
        ({"prompt_ids": []}, "prompt_ids is empty"),
        ({"sampler_logprobs": [0.0] * (len(good.completion_ids) + 1)}, "sampler log-probs"),
        ({"reward": None, "advantage": None}, "reward or an advantage"),
        ({"temperature": 0.0}, "temperature"),
    ]
    for change, message in cases:
        bad = copy.copy(good)
        for k, v in change.items():
            setattr(bad, k, v)
        with pytest.raises(PopulaError, match=message):
            learner.step([good, bad])


def test_a_full_learner_is_refused_with_advice():
    learner = PopulationLearner(tiny_llama(), LORA, plain_learner(), max_adapters=1)
    learner.add_adapter("A")
    with pytest.raises(PopulaError, match="max_adapters"):
        learner.add_adapter("B")


def test_empty_completions_train_nothing_but_are_counted_nowhere():
    learner = make_learner(["A"])
    r = random_rollouts(["A"], 1, seed=0)[0]
    r.completion_ids, r.sampler_logprobs = [], []
    metrics = learner.step([r])
    assert metrics["tokens"] == 0 and metrics["skipped"] == [] and math.isclose(0, metrics["clip_fraction"])


def test_a_gpu_learner_turns_cudnn_attention_off_before_its_first_backward():
    """Its backward returns NaN query gradients on Hopper with a mask (pytorch/pytorch#196678)."""
    was = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        PopulationLearner(tiny_llama(), LORA, plain_learner(), max_adapters=1)  # a CPU learner leaves it alone
        assert torch.backends.cuda.cudnn_sdp_enabled()
        avoid_cudnn_attention()  # what a learner on cuda calls first
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_bf16_learner_on_cuda_has_finite_gradients_for_rows_padded_to_192_tokens():
    """The shape that made cuDNN's attention backward return NaN: a mask, left-padded rows
    (their padded queries see no key) and a padded length of 64 more than a multiple of 128."""
    base = small_llama(VOCAB, 256, hidden=128, heads=2, kv_heads=2).eval().to(torch.bfloat16)
    learner = PopulationLearner(base, LORA, plain_learner(), max_adapters=1, device="cuda", dtype=torch.bfloat16)
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    learner.add_adapter("A")
    g = torch.Generator().manual_seed(0)
    rollouts = [Rollout(adapter="A", role="student", group="t", prompt_ids=torch.randint(0, VOCAB, (p,), generator=g).tolist(),
                        completion_ids=torch.randint(0, VOCAB, (32,), generator=g).tolist(), sampler_logprobs=[-4.6] * 32,
                        adapter_version=0, reward=float(i % 2), temperature=1.0)
                for i, p in enumerate([160, 100, 40, 12])]  # padded to 192
    grads = learner.gradients(rollouts)["A"]
    assert all(bool(t.isfinite().all()) for t in grads.values())


def test_over_a_bf16_base_the_adapters_train_in_float32_so_small_steps_are_kept():
    base = tiny_llama().to(torch.bfloat16)
    learner = PopulationLearner(base, LORA, plain_learner(lr=1e-4), max_adapters=1, dtype=torch.bfloat16)
    learner.add_adapter("A", trained_looking_adapter(tiny_llama(), seed=1))
    params = learner.model.slot_parameters(0)
    assert {p.dtype for p in params} == {torch.float32}
    before = [p.detach().clone() for p in params]
    metrics = learner.step(random_rollouts(["A"], 8, seed=0))
    assert metrics["skipped"] == []
    moved = torch.cat([(p.detach() != b).flatten() for p, b in zip(params, before)]).float().mean()
    assert moved > 0.9  # steps of ~1e-4 on weights of ~0.1: a bf16 weight would keep almost none of them


def learner_with(cfg: LearnerConfig) -> PopulationLearner:
    """A learner holding teacher "T" and student "S" (trained-looking adapters) under `cfg`."""
    learner = PopulationLearner(tiny_llama(), LORA, cfg, max_adapters=2)
    learner.add_adapter("T", trained_looking_adapter(tiny_llama(), seed=1))
    learner.add_adapter("S", trained_looking_adapter(tiny_llama(), seed=2))
    return learner


def teacher_and_student_rollouts(advantages: list[float]) -> list[Rollout]:
    """Eight rollouts of "T" (teacher) and "S" (student), given advantages in turn."""
    rollouts = random_rollouts(["T", "S"], 8, seed=3)
    for i, r in enumerate(rollouts):
        r.role, r.task_type = ("teacher", "code_o") if r.adapter == "T" else ("student", "")
        r.reward, r.advantage = None, advantages[i % len(advantages)]
    return rollouts


def test_a_steered_entropy_coefficient_follows_each_students_answers_and_survives_a_resume():
    """The step uses the coefficient steered so far, then steers it by this step's answers
    (sampled -log p about 4.6 here, far above a target of 1.0: the bonus shrinks); teachers get none."""
    cfg = plain_learner(student_entropy_coef=0.1, student_target_entropy=1.0, student_entropy_rate=0.1,
                        student_entropy_coef_max=0.2)
    learner = learner_with(cfg)
    rollouts = teacher_and_student_rollouts([1.0, -1.0])
    first = learner.step(rollouts)["adapters"]
    assert first["S"]["entropy_coef"] == 0.1 and first["T"]["entropy_coef"] == 0.0
    steered = 0.1 * math.exp(0.1 * (1.0 - first["S"]["entropy"]) / 1.0)
    assert learner.step(rollouts)["adapters"]["S"]["entropy_coef"] == pytest.approx(steered)

    resumed = learner_with(cfg)
    resumed.load_state_dict(learner.state_dict())
    assert resumed.entropy.coef("S") == pytest.approx(learner.entropy.coef("S"))
    learner.remove_adapter("S")
    assert learner.entropy.state_dict() == {}


def test_student_rollouts_take_the_student_kl_coefficient_and_teacher_rollouts_the_shared_one():
    rollouts = teacher_and_student_rollouts([1.0, -0.5, 0.25, -1.0])
    mixed = learner_with(plain_learner(kl_coef=0.05, student_kl_coef=0.5)).gradients(rollouts)
    shared = learner_with(plain_learner(kl_coef=0.05)).gradients(rollouts)
    strong = learner_with(plain_learner(kl_coef=0.5)).gradients(rollouts)
    for key, g in mixed["T"].items():
        torch.testing.assert_close(g, shared["T"][key])
    for key, g in mixed["S"].items():
        torch.testing.assert_close(g, strong["S"][key])
    assert any(not torch.allclose(g, shared["S"][k]) for k, g in mixed["S"].items())  # the coefficient matters


def test_the_entropy_bonus_trains_students_whose_answers_carried_no_signal_and_widens_them():
    """Groups judged all alike (advantage 0) teach nothing by policy gradient; the bonus still
    spreads a student's answers, and leaves teachers alone."""
    rollouts = teacher_and_student_rollouts([0.0])
    plain = learner_with(plain_learner()).gradients(rollouts)
    assert all(torch.count_nonzero(g) == 0 for grads in plain.values() for g in grads.values())
    weak = learner_with(plain_learner(student_entropy_coef=0.1)).gradients(rollouts)
    strong = learner_with(plain_learner(student_entropy_coef=0.2)).gradients(rollouts)
    assert all(torch.count_nonzero(g) == 0 for g in weak.get("T", {}).values())
    assert any(torch.count_nonzero(g) > 0 for g in weak["S"].values())
    for key, g in weak["S"].items():
        torch.testing.assert_close(strong["S"][key], 2 * g)  # the bonus scales with its coefficient

    learner = learner_with(plain_learner(student_entropy_coef=0.1, lr=1e-2))
    students = [r for r in rollouts if r.adapter == "S"]
    before = sum(map(sum, learner.entropies(students)))
    learner.step(rollouts)
    assert sum(map(sum, learner.entropies(students))) > before


def demonstrated(rollouts: list[Rollout], index: int) -> list[Rollout]:
    """`rollouts` with the one at `index` made a demonstration: not sampled, its log-probs made up."""
    out = [dataclasses.replace(r) for r in rollouts]
    out[index] = dataclasses.replace(out[index], demonstration=True, sampler_logprobs=[-50.0] * len(
        out[index].completion_ids))
    return out


def test_a_demonstration_is_trained_at_the_learners_own_logprobs_whatever_it_was_given():
    """A demonstration was not sampled: its ratio is to the learner's own log-probs (1 at the first
    pass), so its gradient is the one it would have had if the sampler had matched the learner."""
    rollouts = [dataclasses.replace(r, advantage=a) for r, a in
                zip(random_rollouts(["S"], 4, seed=5), [1.0, -0.5, 0.25, -1.0])]
    learner = learner_with(plain_learner())
    own = learner.logprobs(rollouts)
    matched = [dataclasses.replace(r, sampler_logprobs=lp) for r, lp in zip(rollouts, own)]
    shown = demonstrated(matched, 0)
    for cfg in (plain_learner(), plain_learner(is_cap=2.0)):
        expected = learner_with(cfg).gradients(matched)["S"]
        for key, g in learner_with(cfg).gradients(shown)["S"].items():
            torch.testing.assert_close(g, expected[key])
    report = learner_with(plain_learner()).step(shown)["adapters"]["S"]
    assert report["logprob_gap"] < 1e-5 and report["clip_fraction"] == 0.0


def test_a_demonstration_is_left_out_of_the_answers_entropy_and_its_steering():
    rollouts = teacher_and_student_rollouts([1.0, -1.0])
    student = next(i for i, r in enumerate(rollouts) if r.adapter == "S")
    shown = demonstrated(rollouts, student)
    sampled = [x for i, r in enumerate(rollouts) if r.adapter == "S" and i != student for x in r.sampler_logprobs]
    cfg = plain_learner(student_entropy_coef=0.1, student_target_entropy=1.0, student_entropy_rate=0.1,
                        student_entropy_coef_max=0.2)
    learner = learner_with(cfg)
    entropy = learner.step(shown)["adapters"]["S"]["entropy"]
    assert entropy == pytest.approx(-sum(sampled) / len(sampled), rel=1e-6)
    assert learner.entropy.coef("S") == pytest.approx(0.1 * math.exp(0.1 * (1.0 - entropy)))


def test_a_demonstration_with_a_positive_advantage_makes_its_answer_likelier():
    rollouts = [dataclasses.replace(r, advantage=a) for r, a in zip(random_rollouts(["S"], 4, seed=6),
                                                                    [1.5, -0.5, -0.5, -0.5])]
    shown = demonstrated(rollouts, 0)
    learner = learner_with(plain_learner(lr=1e-2))
    before = sum(learner.logprobs(shown[:1])[0])
    learner.step(shown)
    assert sum(learner.logprobs(shown[:1])[0]) > before
