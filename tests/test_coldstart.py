"""The cold start of a pretrained model: a LoRA warm-up on generated tasks, merged and cached.

Built here on the session's quick tiny base (the same code path as SmolLM2, minutes faster);
the SmolLM2 figures are in docs/results/smollm2/.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import torch
from safetensors.torch import load_file

from popula.errors import PopulaError
from popula.model import registry
from popula.model.base import resolve_base_model
from popula.model.coldstart import ColdStartRecipe, build_coldstart, coldstart_path, ensure_coldstart
from popula.model.recipe import corpus_digest
from popula.model.registry import is_coldstart_spec
from popula.tasks.prompts import declared_format

QUICK = ColdStartRecipe(steps=3, rows=2, seq_len=256, lr=5e-3, rank=4, alpha=8, pool_tasks=20,
                        target_modules=("q_proj", "v_proj"))


@pytest.fixture(scope="module")
def cold(quick_base, tmp_path_factory):
    out = tmp_path_factory.mktemp("coldstart") / "model"
    info = build_coldstart(quick_base, out, QUICK, source="tiny", progress=False)
    return out, info


def test_a_cold_start_writes_a_complete_model_directory_recording_its_recipe_and_training(cold):
    out, info = cold
    assert registry.model_problem(out) is None
    marker = json.loads((out / registry.MODEL_MARKER).read_text())
    assert marker == json.loads(json.dumps(info))
    assert marker["coldstart"]["recipe"]["steps"] == 3 and marker["coldstart"]["steps"] == 3
    assert marker["coldstart"]["tokens"] == 3 * 2 * 257
    assert marker["source"]["coldstart_of"] == "tiny"
    assert declared_format(out) == "compact", "it declares the format it was warmed up in"


def test_the_warm_up_is_merged_into_the_targeted_weights_and_leaves_the_others_alone(quick_base, cold):
    out, _ = cold
    before = load_file(str(quick_base / "model.safetensors"))
    after = load_file(str(out / "model.safetensors"))
    assert not any("lora" in k for k in after), "a merged model has no LoRA tensors left"
    changed = {k for k in before if k in after and not torch.equal(before[k], after[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed)


def test_a_cached_cold_start_is_reused_without_fetching_its_base(quick_base, tmp_path, monkeypatch):
    monkeypatch.setenv("POPULA_CACHE", str(tmp_path / "cache"))
    path = coldstart_path("smollm2-135m", QUICK)
    build_coldstart(quick_base, path, QUICK, source="smollm2-135m", progress=False)
    assert ensure_coldstart("smollm2-135m+coldstart", QUICK, progress=False) == path
    assert not registry.model_path("smollm2-135m").exists(), "the base was not fetched again"


def test_only_registry_models_have_a_coldstart_spec():
    assert is_coldstart_spec("smollm2-135m+coldstart")
    assert not is_coldstart_spec("tiny+coldstart") and not is_coldstart_spec("smollm2-135m")
    with pytest.raises(PopulaError, match="NAME\\+coldstart"):
        resolve_base_model("nosuch+coldstart")


def test_a_field_added_to_the_recipe_keeps_existing_cache_names_at_its_default():
    default = ColdStartRecipe()
    before_the_field = {k: v for k, v in asdict(default).items() if k != "proposal_power"}
    assert default.key() == corpus_digest(before_the_field, default.student_mix())
    assert ColdStartRecipe(proposal_power=0.0).key() != default.key()


def test_a_cold_start_without_the_short_lean_builds_and_records_it(quick_base, tmp_path):
    recipe = ColdStartRecipe(**{**asdict(QUICK), "proposal_power": 0.0})
    build_coldstart(quick_base, tmp_path / "model", recipe, source="tiny", progress=False)
    marker = json.loads((tmp_path / "model" / registry.MODEL_MARKER).read_text())
    assert marker["coldstart"]["recipe"]["proposal_power"] == 0.0
