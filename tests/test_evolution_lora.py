"""The LoRA state dict convention: PEFT keys grouped into modules and back, unchanged."""

import pytest
import torch

from evolution import (
    EvolutionError,
    delta_distance,
    delta_norm,
    group_modules,
    load_lora,
    lora_modules,
    save_lora,
    ungroup_modules,
)


def peft_state(adapter_suffix: str = "", dtype=torch.float32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    state = {}
    for layer in range(2):
        for name, (out, inp) in {"self_attn.q_proj": (12, 10), "mlp.down_proj": (10, 20)}.items():
            prefix = f"base_model.model.model.layers.{layer}.{name}"
            state[f"{prefix}.lora_A{adapter_suffix}.weight"] = torch.randn(3, inp, generator=g).to(dtype)
            state[f"{prefix}.lora_B{adapter_suffix}.weight"] = torch.randn(out, 3, generator=g).to(dtype)
    return state


def test_modules_are_named_by_their_key_prefix_in_key_order():
    names = [m.name for m in lora_modules(peft_state())]
    assert names == [
        "base_model.model.model.layers.0.self_attn.q_proj",
        "base_model.model.model.layers.0.mlp.down_proj",
        "base_model.model.model.layers.1.self_attn.q_proj",
        "base_model.model.model.layers.1.mlp.down_proj",
    ]


def test_group_then_ungroup_restores_keys_order_dtypes_and_tensors():
    state = peft_state(dtype=torch.bfloat16)
    state["base_model.model.lm_head.modules_to_save.weight"] = torch.ones(2, 2)
    groups = group_modules(state)
    a, b = groups["base_model.model.model.layers.1.mlp.down_proj"]
    assert a.shape == (3, 20) and b.shape == (10, 3)
    back = ungroup_modules({k: (a.float(), b.float()) for k, (a, b) in groups.items()}, template=state)
    assert list(back) == list(state)
    for key in state:
        assert back[key].dtype == state[key].dtype
        assert torch.equal(back[key], state[key])


def test_ungroup_without_template_writes_peft_saved_keys():
    groups = group_modules(peft_state(".default"))
    back = ungroup_modules(groups)
    assert "base_model.model.model.layers.0.self_attn.q_proj.default.lora_A.weight" not in back
    assert all(k.endswith((".lora_A.weight", ".lora_B.weight")) for k in back)
    assert len(back) == 8


def test_in_memory_peft_keys_with_adapter_name_are_recognised():
    modules = lora_modules(peft_state(".default"))
    assert len(modules) == 4
    assert modules[0].a_key.endswith("q_proj.lora_A.default.weight")


def test_a_module_missing_its_b_factor_is_rejected_by_name():
    state = peft_state()
    del state["base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"]
    with pytest.raises(EvolutionError, match="layers.0.mlp.down_proj"):
        lora_modules(state)


def test_a_rank_mismatch_between_a_and_b_is_rejected():
    state = peft_state()
    state["base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"] = torch.zeros(10, 4)
    with pytest.raises(EvolutionError, match="rank mismatch"):
        lora_modules(state)


def test_delta_distance_and_norm_match_the_full_size_computation():
    first, second = peft_state(), {k: v * 0.5 + 0.1 for k, v in peft_state().items()}
    full_sq, norm_sq = 0.0, 0.0
    for (a1, b1), (a2, b2) in zip(group_modules(first).values(), group_modules(second).values()):
        full_sq += float((b1.double() @ a1.double() - b2.double() @ a2.double()).square().sum())
        norm_sq += float((b1.double() @ a1.double()).square().sum())
    assert delta_distance(first, second) == pytest.approx(full_sq**0.5, rel=1e-9)
    assert delta_distance(first, second, scale=2.0) == pytest.approx(2 * full_sq**0.5, rel=1e-9)
    assert delta_norm(first) == pytest.approx(norm_sq**0.5, rel=1e-9)


def test_save_and_load_round_trip_through_safetensors(tmp_path):
    state = peft_state()
    save_lora(state, tmp_path / "adapter_model.safetensors")
    loaded = load_lora(tmp_path / "adapter_model.safetensors")
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)


def test_loading_a_missing_file_names_it(tmp_path):
    with pytest.raises(EvolutionError, match="nope.safetensors"):
        load_lora(tmp_path / "nope.safetensors")


def test_a_state_dict_holding_two_adapters_is_rejected():
    state = peft_state(".default") | peft_state(".other")
    with pytest.raises(EvolutionError, match="several LoRA adapters"):
        lora_modules(state)
