"""Specification of the per-row multi-LoRA layer: it computes exactly what PEFT computes.

Every row of a mixed batch (different adapters, bare-base rows) must give PEFT's logits for
that row's adapter, and the gradient each adapter receives from a mixed batch must equal the
gradient PEFT gives when that adapter is trained alone on its own rows.
"""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from transformers import LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from conftest import small_llama
from popula.errors import PopulaError
from popula.lora import DEFAULT_TARGET_MODULES, MultiLoRAModel, fresh_peft_state_dict, peft_key

TARGETS = list(DEFAULT_TARGET_MODULES)


def tiny_llama() -> LlamaForCausalLM:
    return small_llama(96, hidden=32, heads=4, kv_heads=2).eval()


def tiny_qwen2() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return Qwen2ForCausalLM(cfg).eval()


def random_adapter(model: torch.nn.Module, rank: int, seed: int) -> dict[str, torch.Tensor]:
    """A PEFT-format adapter with non-zero A and B, so every module changes the output."""
    g = torch.Generator().manual_seed(seed)
    shapes = {p: (m.in_features, m.out_features) for p, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and p.rsplit(".", 1)[-1] in TARGETS}
    sd = fresh_peft_state_dict(shapes, rank, g)
    for k in sd:
        if k.endswith("lora_B.weight"):
            sd[k] = torch.randn(sd[k].shape, generator=g) * 0.2
    return sd


def peft_with(base: torch.nn.Module, adapters: dict[str, tuple[dict, int, float]]) -> PeftModel:
    """A PeftModel over a copy of `base` holding each named adapter (state dict, rank, alpha)."""
    peft_model = None
    for name, (sd, rank, alpha) in adapters.items():
        cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=TARGETS, lora_dropout=0.0)
        if peft_model is None:
            peft_model = get_peft_model(copy.deepcopy(base), cfg, adapter_name=name)
        else:
            peft_model.add_adapter(name, cfg)
        result = set_peft_model_state_dict(peft_model, sd, adapter_name=name)
        assert not [k for k in result.unexpected_keys if "lora" in k]
    return peft_model


ADAPTERS = {"t1": (8, 16.0, 1), "t2": (8, 16.0, 2), "s1": (4, 4.0, 3)}  # name: rank, alpha, seed


@pytest.mark.parametrize("kernel", ["grouped", "gather"])
@pytest.mark.parametrize("make_base", [tiny_llama, tiny_qwen2], ids=["llama", "qwen2"])
def test_each_row_of_a_mixed_batch_matches_peft_with_that_rows_adapter(make_base, kernel):
    base = make_base()
    sds = {n: random_adapter(base, r, s) for n, (r, _, s) in ADAPTERS.items()}
    peft_model = peft_with(base, {n: (sds[n], r, a) for n, (r, a, _) in ADAPTERS.items()}).eval()
    mm = MultiLoRAModel(copy.deepcopy(base), rank=8, alpha=16.0, n_slots=4, kernel=kernel).eval()
    slot_of = {"t1": 0, "t2": 3, "s1": 1}
    for n, (_, alpha, _) in ADAPTERS.items():
        mm.load_slot(slot_of[n], sds[n], alpha=alpha)

    row_adapters = ["t1", None, "s1", "t2", "t1", None, "t2"]
    ids = torch.randint(0, 96, (len(row_adapters), 11), generator=torch.Generator().manual_seed(5))
    with torch.no_grad(), mm.route([slot_of[n] if n else -1 for n in row_adapters]):
        logits = mm(input_ids=ids).logits
        logits_again = mm(input_ids=ids).logits  # second pass uses the cached per-row weights
    torch.testing.assert_close(logits_again, logits)

    with torch.no_grad():
        for name in [None, *ADAPTERS]:
            rows = [i for i, n in enumerate(row_adapters) if n == name]
            if name is None:
                with peft_model.disable_adapter():
                    ref = peft_model(input_ids=ids[rows]).logits
            else:
                peft_model.set_adapter(name)
                ref = peft_model(input_ids=ids[rows]).logits
            torch.testing.assert_close(logits[rows], ref, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(logits[0], logits[3], atol=1e-3)  # adapters really differ


@pytest.mark.parametrize("kernel", ["grouped", "gather"])
@pytest.mark.parametrize("make_base", [tiny_llama, tiny_qwen2], ids=["llama", "qwen2"])
def test_gradient_to_each_adapter_equals_peft_training_it_alone_on_its_rows(make_base, kernel):
    base = make_base()
    sds = {n: random_adapter(base, r, s) for n, (r, _, s) in ADAPTERS.items()}
    mm = MultiLoRAModel(copy.deepcopy(base), rank=8, alpha=16.0, n_slots=3, kernel=kernel)
    slot_of = {"t1": 2, "t2": 0, "s1": 1}
    for n, (_, alpha, _) in ADAPTERS.items():
        mm.load_slot(slot_of[n], sds[n], alpha=alpha)

    row_adapters = ["t2", "t1", None, "s1", "t1", "t2", "s1"]
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(0, 96, (len(row_adapters), 9), generator=g)
    mask = torch.ones_like(ids)
    mask[2, :3] = 0  # a left-padded row
    mask[5, :2] = 0

    def loss_fn(model, rows):
        logits = model(input_ids=ids[rows], attention_mask=mask[rows]).logits[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, 96), ids[rows][:, 1:].reshape(-1),
                                                reduction="none")
        return (nll * mask[rows][:, 1:].reshape(-1)).sum()

    with mm.route([slot_of[n] if n else -1 for n in row_adapters]):
        loss_fn(mm, list(range(len(row_adapters)))).backward()
    assert all(p.grad is None for p in mm.base_model.parameters() if not p.requires_grad)

    for name, (rank, alpha, _) in ADAPTERS.items():
        peft_model = peft_with(base, {name: (sds[name], rank, alpha)})
        loss_fn(peft_model, [i for i, n in enumerate(row_adapters) if n == name]).backward()
        peft_grads = {k: p.grad for k, p in peft_model.named_parameters() if p.grad is not None}
        assert len(peft_grads) == 2 * len(mm.lora_layers)
        for path, layer in mm.lora_layers.items():
            ga = layer.lora_A[slot_of[name]].grad
            gb = layer.lora_B[slot_of[name]].grad
            ref_a = peft_grads[f"base_model.model.{path}.lora_A.{name}.weight"]
            ref_b = peft_grads[f"base_model.model.{path}.lora_B.{name}.weight"]
            # Equal up to fp32 rounding: the two sum in different orders (grouped matmul over
            # mixed rows vs PEFT on one adapter's rows), so near-zero entries differ by ~1e-6
            # of the gradient's scale; a wrong row or slot would be off by the scale itself.
            for got, ref in ((ga[:rank], ref_a), (gb[:, :rank], ref_b)):
                torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5 * ref.abs().max().item())
            assert not ga[rank:].any() and not gb[:, rank:].any()  # zero padding stays zero


def test_a_per_adapter_optimiser_step_changes_only_that_adapter_and_inference_sees_it():
    mm = MultiLoRAModel(tiny_llama(), rank=4, alpha=8.0, n_slots=2)
    mm.init_slot(0, torch.Generator().manual_seed(1))
    mm.init_slot(1, torch.Generator().manual_seed(2))
    before = {s: mm.slot_state_dict(s) for s in (0, 1)}
    ids = torch.randint(0, 96, (2, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), mm.route([0, 0]):
        logits_before = mm(input_ids=ids).logits

    opt = torch.optim.AdamW(mm.slot_parameters(0), lr=1e-2)
    with mm.route([0, 1]):
        mm(input_ids=ids).logits.square().mean().backward()
    opt.step()

    after = {s: mm.slot_state_dict(s) for s in (0, 1)}
    assert all(torch.equal(before[1][k], after[1][k]) for k in before[1])
    assert any(not torch.equal(before[0][k], after[0][k]) for k in before[0])
    with torch.no_grad(), mm.route([0, 0]):  # same routing as before: cached weights must refresh
        assert not torch.allclose(mm(input_ids=ids).logits, logits_before)


def test_fresh_adapter_is_the_base_and_all_base_routing_skips_lora_exactly():
    base = tiny_llama()
    ids = torch.randint(0, 96, (3, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = base(input_ids=ids).logits
    mm = MultiLoRAModel(copy.deepcopy(base), rank=4, alpha=8.0, n_slots=2)
    mm.init_slot(0, torch.Generator().manual_seed(0))
    with torch.no_grad():
        with mm.route([-1, -1, -1]):
            assert torch.equal(mm(input_ids=ids).logits, ref)
        with mm.route([0, -1, 0]):
            torch.testing.assert_close(mm(input_ids=ids).logits, ref)
        assert torch.equal(mm(input_ids=ids).logits, ref)  # outside a route: bare base


def test_slot_state_dict_round_trips_in_peft_key_format():
    base = tiny_qwen2()
    sd = random_adapter(base, rank=4, seed=7)
    mm = MultiLoRAModel(base, rank=8, alpha=16.0, n_slots=2)
    mm.load_slot(1, sd)
    out = mm.slot_state_dict(1)
    assert out.keys() == sd.keys() and mm.slot_rank(1) == 4
    assert all(torch.equal(out[k], sd[k]) for k in sd)
    assert peft_key("model.layers.0.self_attn.q_proj", "A") in out


def test_bad_adapters_and_targets_are_refused_with_errors_naming_them():
    base = tiny_llama()
    sd = random_adapter(base, rank=4, seed=1)
    mm = MultiLoRAModel(base, rank=4, alpha=8.0, n_slots=1)
    too_big = {k: torch.zeros(v.shape[0] * 2, v.shape[1]) if "lora_A" in k else torch.zeros(v.shape[0], 8)
               for k, v in sd.items()}
    with pytest.raises(PopulaError, match="my-adapter.*rank 8"):
        mm.load_slot(0, too_big, source="my-adapter")
    wrong_base = dict(sd)
    key = peft_key("model.layers.0.mlp.down_proj", "A")
    wrong_base[key] = torch.zeros(4, 17)
    with pytest.raises(PopulaError, match="down_proj.*different base"):
        mm.load_slot(0, wrong_base)
    with pytest.raises(PopulaError, match="lm_head"):
        mm.load_slot(0, {**sd, "base_model.model.lm_head.lora_A.weight": torch.zeros(4, 32),
                         "base_model.model.lm_head.lora_B.weight": torch.zeros(96, 4)})
    with pytest.raises(PopulaError, match="lm_head"):
        MultiLoRAModel(tiny_llama(), target_modules=["q_proj", "lm_head"])
    with pytest.raises(ValueError, match="slot indices"):
        with mm.route([0, 1]):
            pass


def test_rows_ordered_by_slot_and_shuffled_rows_give_the_same_logits():
    base = tiny_llama()
    adapters = [random_adapter(base, rank=4, seed=slot) for slot in range(3)]
    mm = MultiLoRAModel(base, rank=4, alpha=8.0, n_slots=3)
    for slot, sd in enumerate(adapters):
        mm.load_slot(slot, sd)
    ordered = [0, 0, 1, 2, 2, -1]  # the layout the torch engine builds: by slot, base rows last
    perm = [4, 1, 5, 0, 3, 2]
    ids = torch.randint(0, 96, (6, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        with mm.route(ordered):
            a = mm(input_ids=ids).logits
        with mm.route([ordered[i] for i in perm]):
            b = mm(input_ids=ids[perm]).logits
    torch.testing.assert_close(b, a[perm])


def test_fusing_sibling_projections_changes_neither_logits_nor_gradients():
    base = tiny_qwen2()
    adapters = [random_adapter(base, rank=4, seed=slot) for slot in range(2)]
    models = [MultiLoRAModel(copy.deepcopy(base), rank=4, alpha=8.0, n_slots=2, kernel="grouped",
                             fuse_siblings=fuse) for fuse in (True, False)]
    ids = torch.randint(0, 96, (4, 6), generator=torch.Generator().manual_seed(3))
    logits = []
    for mm in models:
        for slot, sd in enumerate(adapters):
            mm.load_slot(slot, sd)
        with mm.route([1, -1, 0, 1]):
            out = mm(input_ids=ids).logits
            out.square().mean().backward()
        logits.append(out.detach())
    assert models[0].lora_layers["model.layers.0.self_attn.q_proj"].siblings is not None
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-5, atol=1e-6)
    for slot in (0, 1):
        for p_fused, p_plain in zip(models[0].slot_parameters(slot), models[1].slot_parameters(slot)):
            torch.testing.assert_close(p_fused.grad, p_plain.grad, rtol=1e-5, atol=1e-7)


def test_grouped_query_attention_under_a_mask_equals_transformers_sdpa_in_values_and_gradients():
    """The wrapped base runs grouped keys and values without repeating them (popula.lora.attention);
    under a padding mask, as every popula forward has, its logits and LoRA gradients are sdpa's."""
    from popula.lora.attention import GQA_SDPA

    def logits_and_grads(implementation: str | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        mm = MultiLoRAModel(small_llama(96, hidden=64, heads=4, kv_heads=2), rank=4, n_slots=2)
        mm.init_slot(0, torch.Generator().manual_seed(1))
        if implementation is not None:
            mm.base_model.set_attn_implementation(implementation)
        ids = torch.randint(0, 96, (3, 12), generator=torch.Generator().manual_seed(2))
        mask = torch.ones(3, 12, dtype=torch.long)
        mask[0, :5] = 0  # left padding
        with mm.route([0, 0, 0]):
            logits = mm(input_ids=ids, attention_mask=mask).logits
        (logits[mask.bool()].logsumexp(-1).sum()).backward()
        return logits.detach(), [p.grad for p in mm.slot_parameters(0)]

    ours, sdpa = logits_and_grads(None), logits_and_grads("sdpa")
    assert MultiLoRAModel(small_llama(96, heads=4, kv_heads=2)).base_model.config._attn_implementation == GQA_SDPA
    assert torch.allclose(ours[0], sdpa[0], atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(ours[1], sdpa[1]))


def test_the_few_rows_head_gives_linear_logits_keeps_ties_and_leaves_training_alone():
    """A decode step's few rows go through the head weight-first (popula.lora.head); the logits are
    nn.Linear's to rounding, a tied head stays the embedding, and with autograd on (training) or
    many rows the head is nn.Linear's own computation, bit for bit."""
    from popula.lora.head import FEW_ROWS, FewRowsHead

    base = small_llama(96, hidden=64, heads=4, kv_heads=2, tie_word_embeddings=True)
    plain = base.get_output_embeddings()
    mm = MultiLoRAModel(base, rank=4, n_slots=2)
    head = mm.base_model.get_output_embeddings()
    assert isinstance(head, FewRowsHead) and head.weight is mm.base_model.get_input_embeddings().weight
    assert head.weight is plain.weight

    few = torch.randn(FEW_ROWS, 1, 64, generator=torch.Generator().manual_seed(3))
    many = torch.randn(FEW_ROWS + 1, 1, 64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.allclose(head(few), plain(few), atol=1e-5)
        assert torch.equal(head(many), plain(many))
    grad_in = few.clone().requires_grad_(True)
    assert torch.equal(head(grad_in), plain(grad_in))
