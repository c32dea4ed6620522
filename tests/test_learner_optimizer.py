"""The population's one optimiser step computes what each adapter's own AdamW and clip would."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from popula.learner.optimizer import PopulationOptimizer

LR, WD = 1e-2, 0.01


def adapter_params(seed: int, n: int = 6) -> list[nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [nn.Parameter(torch.randn(4, 3 + i, generator=g)) for i in range(n)]


def give_grads(params: list[nn.Parameter], seed: int, scale: float) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * scale


def reference_step(params: list[nn.Parameter], optim: torch.optim.AdamW, max_norm: float | None) -> float:
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm is not None else float("inf")))
    optim.step()
    return norm


@pytest.mark.parametrize("max_norm", [0.5, None])
def test_one_step_for_all_adapters_equals_each_adapters_own_adamw_and_clip(max_norm):
    names = ["A", "B", "C"]
    mine = {n: adapter_params(i) for i, n in enumerate(names)}
    theirs = {n: adapter_params(i) for i, n in enumerate(names)}
    population = PopulationOptimizer([p for ps in mine.values() for p in ps], lr=LR, weight_decay=WD)
    own = {n: torch.optim.AdamW(theirs[n], lr=LR, weight_decay=WD, foreach=True) for n in names}
    for step in range(4):
        # C sits out step 1 (no gradient: no update, no step count); A's gradients are large (clipped).
        active = [n for n in names if not (n == "C" and step == 1)]
        for i, n in enumerate(active):
            give_grads(mine[n], 10 * step + i, scale=5.0 if n == "A" else 0.05)
            give_grads(theirs[n], 10 * step + i, scale=5.0 if n == "A" else 0.05)
        norms = population.clip_grad_norms({n: mine[n] for n in active}, max_norm)
        population.step()
        for n in active:
            assert norms[n] == reference_step(theirs[n], own[n], max_norm)
        for ps in (*mine.values(), *theirs.values()):
            for p in ps:
                p.grad = None
    for n in names:
        assert all(torch.equal(a, b) for a, b in zip(mine[n], theirs[n])), n
        state, reference = population.state_of(mine[n]), own[n].state_dict()
        assert state["param_groups"] == reference["param_groups"]
        for k, entry in reference["state"].items():
            assert {key: torch.equal(v, state["state"][k][key]) for key, v in entry.items()} == \
                {key: True for key in entry}
    assert population.state_of(mine["C"])["state"][0]["step"] == 3


def test_an_adapters_state_round_trips_and_reset_forgets_the_last_one():
    params = adapter_params(0)
    population = PopulationOptimizer(params, lr=LR, weight_decay=WD)
    give_grads(params, 1, 0.1)
    population.step()
    saved = population.state_of(params)
    population.reset(params)  # a new adapter in the slot: no moments
    assert population.state_of(params)["state"] == {}
    population.reset(params, saved)  # e.g. a resume, or a child inheriting moments
    restored = population.state_of(params)
    assert all(torch.equal(restored["state"][0][k], saved["state"][0][k]) for k in saved["state"][0])
    # the format is torch's own: an AdamW over the same tensors loads it
    torch.optim.AdamW(adapter_params(0), lr=LR).load_state_dict(saved)


def test_the_population_steps_with_as_many_adamw_kernels_as_one_adapter():
    def foreach_ops(n_adapters: int) -> int:
        groups = {str(i): adapter_params(i) for i in range(n_adapters)}
        population = PopulationOptimizer([p for ps in groups.values() for p in ps], lr=LR, weight_decay=WD)
        for i, ps in enumerate(groups.values()):
            give_grads(ps, i, 0.1)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            population.step()
        return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::_foreach"))

    assert foreach_ops(8) == foreach_ops(1) > 0
