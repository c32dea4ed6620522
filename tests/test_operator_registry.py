"""An evolution operator is one function and one `OPERATORS` entry: a test-only `halve`
(`tests/operator_halve.py`), registered here alone, is accepted by the config's
`evolution.operator_mix`, drawn by the schedule and applied and measured by
`evolution.measure_retention`, with no other module changed."""

from __future__ import annotations

import pytest
import torch

from evolution import OPERATORS, measure_retention, plan_replacements
from operator_halve import SPEC
from popula.config import load_config
from popula.errors import PopulaError


@pytest.fixture
def halve(monkeypatch):
    monkeypatch.setitem(OPERATORS, SPEC.name, SPEC)  # the one registration line


def _parent() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"m.lora_A.weight": torch.randn(2, 4, generator=g), "m.lora_B.weight": torch.randn(4, 2, generator=g)}


def test_the_config_and_the_schedule_take_the_registered_operator(halve):
    cfg = load_config(None, ["evolution.operator_mix={halve: 1.0}"])
    plans = plan_replacements(cfg.evolution.every, {"student": {"S0": 1.0, "S1": 2.0}}, cfg.evolution.build(0))
    assert plans and {p.operator for p in plans} == {"halve"}
    assert plans[0].strength == SPEC.default_strength


def test_an_unregistered_operator_is_refused(monkeypatch):
    monkeypatch.delitem(OPERATORS, "halve", raising=False)
    with pytest.raises(PopulaError, match="halve"):
        load_config(None, ["evolution.operator_mix={halve: 1.0}"]).evolution.build(0)


def test_the_retention_protocol_measures_it(halve):
    parent = _parent()
    child = OPERATORS["halve"].apply([parent], 0.5)
    assert torch.equal(child["m.lora_B.weight"], parent["m.lora_B.weight"] * 0.5)

    def evaluate(state) -> float:
        return float(state["m.lora_B.weight"].abs().sum())

    def update(state, step):
        return {k: v * 1.5 if "lora_B" in k else v for k, v in state.items()}

    result = measure_retention([parent], "halve", evaluate, update, steps=2)
    assert result.operator == "halve" and result.steps_to_recover is not None
