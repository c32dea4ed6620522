"""The whole loop learns: engine samples, rewards, learner updates, store versions, engine again.

Two adapters on one random tiny Llama are each rewarded for emitting tokens from their
own target set. Every step samples with the torch engine from the adapters' latest store
versions, trains both adapters in one learner step, and saves new versions, exactly the
data path of `popula run`. Within a fixed number of seeded steps each adapter must emit
mostly its own targets, and the sampler/trainer log-prob gap must stay at numerical noise.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from conftest import plain_learner, small_llama
from popula.adapters.store import AdapterStore
from popula.config import LoraConfig
from popula.engines.base import GenerationRequest
from popula.engines.torch_engine import TorchEngine
from popula.learner import PopulationLearner, Rollout

VOCAB = 64
TARGETS = {"A": set(range(10, 18)), "B": set(range(30, 38))}  # 8 of 64 tokens each: 1/8 at the start
PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
ROLLOUTS = 12
STEPS = 12


def make_base(path: Path) -> Path:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["x"], trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()[:40]))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                            pad_token="<|endoftext|>").save_pretrained(path)
    small_llama(VOCAB, 32, hidden=32, heads=4, kv_heads=2, initializer_range=0.3, eos_token_id=0, bos_token_id=0,
                pad_token_id=0).save_pretrained(path)
    return path


def target_rate(engine: TorchEngine, refs: dict, name: str, targets: set[int], seed: int) -> float:
    results = engine.generate([GenerationRequest(p, adapter=refs[name], n=ROLLOUTS, max_tokens=1, seed=seed + i)
                               for i, p in enumerate(PROMPTS)])
    tokens = [s.token_ids[0] for r in results for s in r.samples]
    return sum(t in targets for t in tokens) / len(tokens)


@pytest.mark.slow
def test_two_adapters_each_learn_their_own_target_tokens_in_shared_steps(tmp_path):
    base_dir = make_base(tmp_path / "base")
    lora = LoraConfig(rank=4, alpha=8.0)
    store = AdapterStore(tmp_path / "adapters", base_dir, rank=lora.rank, alpha=lora.alpha,
                         target_modules=lora.target_modules, seed=0)
    learner = PopulationLearner(base_dir, lora, plain_learner(lr=2e-2), max_adapters=2)
    engine = TorchEngine(base_dir, max_adapters=3, max_rank=lora.rank, seed=0)
    refs = {n: store.create(n) for n in TARGETS}
    for n, ref in refs.items():
        learner.add_adapter(n, store.load(ref).state_dict)
    before = {n: target_rate(engine, refs, n, TARGETS[n], seed=999) for n in TARGETS}

    gaps = []
    for step in range(STEPS):
        requests = [GenerationRequest(p, adapter=refs[n], n=ROLLOUTS, max_tokens=1, seed=1000 * step + 10 * k + i)
                    for k, n in enumerate(TARGETS) for i, p in enumerate(PROMPTS)]
        rollouts = [
            Rollout(adapter=req.adapter.name, role="student", group=f"prompt{i}", prompt_ids=req.prompt_ids,
                    completion_ids=s.token_ids, sampler_logprobs=s.logprobs, adapter_version=req.adapter.version,
                    reward=float(s.token_ids[0] in TARGETS[req.adapter.name]))
            for i, (req, result) in enumerate(zip(requests, engine.generate(requests))) for s in result.samples
        ]
        metrics = learner.step(rollouts)
        assert metrics["skipped"] == [] and sorted(metrics["adapters"]) == ["A", "B"]
        gaps.append(metrics["logprob_gap"])
        refs = {n: store.save(n, learner.adapter_state(n)) for n in TARGETS}

    after = {n: target_rate(engine, refs, n, TARGETS[n], seed=999) for n in TARGETS}
    assert all(before[n] < 0.4 for n in TARGETS), before
    assert all(after[n] > 0.8 for n in TARGETS), after
    # Each adapter learned its own targets, not the other's.
    assert target_rate(engine, refs, "A", TARGETS["B"], seed=5) < 0.1
    # The engine always served the newest version: sampler and trainer agree.
    assert max(gaps) < 1e-4, gaps
    assert refs["A"].version == STEPS
