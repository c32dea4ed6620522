"""One policy for sampling and training: every adapter is served with its own weights.

The learner trains on the sampler's tokens and log-probabilities. If the engine served a
row with another adapter's weights, that member would learn from samples it did not draw
(and `logprob_gap` would show it). The cases that once broke this: many distinct adapters
in one call, prompts of different lengths, rows finishing at different steps so that the
batch is compacted several times.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from popula.adapters.store import AdapterStore
from conftest import plain_learner
from popula.config import LoraConfig
from popula.engines.base import GenerationRequest
from popula.engines.torch_engine import TorchEngine
from popula.learner import PopulationLearner, Rollout
from tests.test_torch_engine import make_base

N_ADAPTERS = 6
PROMPTS = [[5, 17, 33, 2, 9], [40, 41], [7, 8, 9, 10, 11, 12, 13, 14], [100, 3, 250], [60] * 11, [1, 2, 3, 4, 5, 6]]
MAX_TOKENS = [3, 20, 7, 14, 5, 11]  # rows end at different steps: the batch is compacted again and again
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = make_base(tmp_path_factory.mktemp("base"))
    store = AdapterStore(tmp_path_factory.mktemp("adapters"), base, rank=4, alpha=8.0, seed=0)
    refs = []
    for k in range(N_ADAPTERS):
        name = f"A{k}"
        sd = dict(store.load(store.create(name)).state_dict)
        g = torch.Generator().manual_seed(100 + k)
        refs.append(store.save(name, {key: torch.randn(v.shape, generator=g) * 0.4 if "lora_B" in key else v
                                      for key, v in sd.items()}))
    return base, store, refs


def _requests(refs) -> list[GenerationRequest]:
    return [GenerationRequest(prompt_ids=PROMPTS[i % len(PROMPTS)], adapter=refs[i % len(refs)], n=3, temperature=1.0,
                              max_tokens=MAX_TOKENS[i % len(MAX_TOKENS)], seed=1000 + i)
            for i in range(2 * len(refs))]


@pytest.mark.slow
def test_a_mixed_batch_serves_every_adapter_exactly_as_an_engine_holding_only_that_adapter(setup):
    base, _, refs = setup
    requests = _requests(refs)
    mixed = TorchEngine(base, max_adapters=N_ADAPTERS, max_rank=8).generate(requests)
    for i, (request, result) in enumerate(zip(requests, mixed)):
        alone = TorchEngine(base, max_adapters=1, max_rank=8).generate([request])[0]
        for got, want in zip(result.samples, alone.samples):
            assert got.token_ids == want.token_ids, f"request {i} ({request.adapter.name}) drew other tokens"
            assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs)) <= 1e-5, \
                f"request {i} ({request.adapter.name}) was served with other weights"


def test_the_learner_recomputes_the_samplers_logprobs_for_every_adapter(setup):
    base, store, refs = setup
    requests = _requests(refs)
    results = TorchEngine(base, max_adapters=N_ADAPTERS, max_rank=8).generate(requests)
    learner = PopulationLearner(base, LoraConfig(rank=4, alpha=8.0, target_modules=TARGETS),
                                plain_learner(lr=1e-3), max_adapters=N_ADAPTERS)
    for ref in refs:
        learner.add_adapter(ref.name, store.load(ref).state_dict)
    rollouts = [Rollout(adapter=req.adapter.name, role="student", task_type="code_o", group=f"g{i}",
                        prompt_ids=list(req.prompt_ids), completion_ids=s.token_ids, sampler_logprobs=s.logprobs,
                        adapter_version=req.adapter.version, reward=float(j % 2), temperature=1.0)
                for i, (req, res) in enumerate(zip(requests, results)) for j, s in enumerate(res.samples)]
    metrics = learner.step(rollouts)
    assert set(metrics["adapters"]) == {r.name for r in refs}
    assert metrics["logprob_gap_max"] == max(a["logprob_gap"] for a in metrics["adapters"].values())
    assert metrics["logprob_gap_max"] <= 1e-4
