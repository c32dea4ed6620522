"""Specification of the pure-PyTorch multi-LoRA engine.

A mixed batch (several adapters and the bare base, ragged prompts, n > 1) must produce, row
by row, what PEFT produces with that row's adapter; sampling is seeded per request; stop
tokens, length limits, batching limits and adapter slots behave as documented; a bad
adapter is refused by name and the engine keeps serving the others.
"""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from popula.adapters.store import AdapterStore
from popula.engines import create_engine, kv_cache
from popula.engines.base import GenerationRequest
from popula.engines.torch_engine import TorchEngine, sample_next
from popula.errors import PopulaError

VOCAB = 320


def make_base(path: Path) -> Path:
    """A 2-layer random Llama with a small byte-level BPE tokenizer, saved in HF format."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["def f(x):\n    return x + 1\n", "assert f(2) == 3"] * 20, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                            pad_token="<|endoftext|>").save_pretrained(path)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      eos_token_id=0, bos_token_id=0, pad_token_id=0)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:
    return make_base(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def store(base_dir, tmp_path_factory) -> AdapterStore:
    """Two trained-looking adapters, t0 and s0 (B moved off zero so they change the output)."""
    s = AdapterStore(tmp_path_factory.mktemp("adapters"), base_dir, rank=4, alpha=8.0, seed=0)
    for k, name in enumerate(["t0", "s0"]):
        sd = dict(s.load(s.create(name)).state_dict)
        g = torch.Generator().manual_seed(k)
        s.save(name, {key: torch.randn(v.shape, generator=g) * 0.5 if "lora_B" in key else v for key, v in sd.items()})
    return s


@pytest.fixture(scope="module")
def engine(base_dir) -> TorchEngine:
    return TorchEngine(base_dir, max_adapters=4, max_rank=8, seed=0)


def peft_reference(base_dir: Path, ref, prompt: list[int], tokens: list[int], temperature: float) -> list[float]:
    """PEFT (no cache, no padding, batch of one): log_softmax(logits / T) of each given token."""
    model = LlamaForCausalLM.from_pretrained(base_dir).eval()
    if ref is not None:
        model = PeftModel.from_pretrained(model, str(ref.path)).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1]
    logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return [logp[i, t].item() for i, t in enumerate(tokens)], logits.argmax(-1).tolist()


PROMPTS = [[5, 17, 33, 2, 9], [40, 41], [7, 8, 9, 10, 11, 12, 13, 14], [100, 3, 250]]


def test_every_row_of_a_mixed_batch_matches_peft_with_its_own_adapter(engine, store, base_dir):
    refs = [store.latest("t0"), None, store.latest("s0"), store.latest("t0")]
    requests = [GenerationRequest(p, adapter=r, n=2, temperature=t, max_tokens=10, seed=i)
                for i, (p, r, t) in enumerate(zip(PROMPTS, refs, [0.0, 1.0, 0.7, 1.3]))]
    results = engine.generate(requests)
    assert [len(r.samples) for r in results] == [2, 2, 2, 2]
    for req, res in zip(requests, results):
        for sample in res.samples:
            ref_logprobs, ref_argmax = peft_reference(base_dir, req.adapter, req.prompt_ids, sample.token_ids,
                                                      req.temperature)
            assert sample.logprobs == pytest.approx(ref_logprobs, abs=2e-4)
            if req.temperature == 0:
                assert sample.token_ids == ref_argmax[:len(sample.token_ids)]
            assert len(sample.token_ids) == len(sample.logprobs) <= 10
            assert sample.finish_reason in ("stop", "length")
    assert results[0].samples[0].token_ids == results[0].samples[1].token_ids  # greedy
    assert results[3].samples[0].token_ids != results[3].samples[1].token_ids  # two draws


def test_a_seeded_request_samples_the_same_alone_or_in_any_batch(engine, store):
    alone = engine.generate([GenerationRequest(PROMPTS[0], adapter=store.latest("s0"), n=3, max_tokens=12, seed=7)])
    mixed = engine.generate([
        GenerationRequest(PROMPTS[2], adapter=store.latest("t0"), n=5, max_tokens=6, seed=1),
        GenerationRequest(PROMPTS[0], adapter=store.latest("s0"), n=3, max_tokens=12, seed=7),
        GenerationRequest(PROMPTS[1], n=2, max_tokens=20),
    ])
    assert [s.token_ids for s in mixed[1].samples] == [s.token_ids for s in alone[0].samples]
    other_seed = engine.generate([GenerationRequest(PROMPTS[0], adapter=store.latest("s0"), n=3, max_tokens=12, seed=8)])
    assert [s.token_ids for s in other_seed[0].samples] != [s.token_ids for s in alone[0].samples]


def test_unseeded_requests_are_reproducible_from_the_engine_seed(base_dir):
    reqs = [GenerationRequest(PROMPTS[1], n=2, max_tokens=8)]
    first = [TorchEngine(base_dir, max_adapters=1, seed=3).generate(reqs) for _ in range(2)]
    assert first[0][0].samples == first[1][0].samples
    assert TorchEngine(base_dir, max_adapters=1, seed=4).generate(reqs)[0].samples != first[0][0].samples


def test_stop_tokens_end_a_sample_and_are_kept_in_ids_but_not_in_text(engine):
    free = engine.generate([GenerationRequest(PROMPTS[2], temperature=0.0, max_tokens=12)])[0].samples[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 12
    stop_at = free.token_ids[4]
    cut = engine.generate([GenerationRequest(PROMPTS[2], temperature=0.0, max_tokens=12,
                                             stop_token_ids=[stop_at])])[0].samples[0]
    first = free.token_ids.index(stop_at)
    assert cut.finish_reason == "stop" and cut.token_ids == free.token_ids[:first + 1]
    assert cut.logprobs == pytest.approx(free.logprobs[:first + 1], abs=1e-5)
    assert cut.text == engine.tokenizer.decode(free.token_ids[:first], skip_special_tokens=True)


def test_sampler_draws_from_the_tempered_top_p_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(4000, 1)
    u = torch.rand(4000, generator=torch.Generator().manual_seed(0))
    tokens, logp = sample_next(logits, torch.ones(4000), torch.full((4000,), 0.75), u)
    freq = torch.bincount(tokens, minlength=4).float() / 4000
    assert freq[2:].sum() == 0  # 0.5 + 0.3 already cover top_p = 0.75
    assert freq[0].item() == pytest.approx(0.5 / 0.8, abs=0.03)
    assert logp[tokens == 0][0].item() == pytest.approx(math.log(0.5), abs=1e-6)  # reported: before top-p
    hot, hot_lp = sample_next(logits, torch.full((4000,), 2.0), torch.ones(4000), u)
    expected = torch.softmax(logits[0] / 2.0, -1)
    assert torch.bincount(hot, minlength=4).float().div(4000) == pytest.approx(expected.tolist(), abs=0.03)
    assert hot_lp[0].item() == pytest.approx(expected[hot[0]].log().item(), abs=1e-6)


def test_batch_size_limit_and_adapter_slots_do_not_change_results(base_dir, store):
    requests = [GenerationRequest(p, adapter=r, n=2, max_tokens=7, seed=i) for i, (p, r) in
                enumerate(zip(PROMPTS, [store.latest("t0"), store.latest("s0"), None, store.latest("s0")]))]
    wide = TorchEngine(base_dir, max_adapters=4, max_batch_size=64).generate(requests)
    narrow_engine = TorchEngine(base_dir, max_adapters=1, max_batch_size=3)  # two waves, three chunks
    narrow = narrow_engine.generate(requests)
    for a, b in zip(wide, narrow):
        assert [s.token_ids for s in a.samples] == [s.token_ids for s in b.samples]
        for sa, sb in zip(a.samples, b.samples):
            assert sa.logprobs == pytest.approx(sb.logprobs, abs=1e-4)
    assert narrow_engine.loaded_adapters() == [store.latest("s0").uid]


def test_a_shared_prompt_is_prefilled_once_and_every_row_draws_what_it_drew_prefilling_it_alone(base_dir, store):
    """Rows of one prompt and adapter prefill it once and branch; token for token the samples
    are those of the path where every row prefilled its own copy."""
    t0, s0 = store.latest("t0"), store.latest("s0")
    requests = [GenerationRequest(PROMPTS[2], adapter=s0, n=6, temperature=1.0, max_tokens=12, seed=1),
                GenerationRequest(PROMPTS[0], adapter=t0, n=4, temperature=0.7, top_p=0.9, max_tokens=9, seed=2),
                GenerationRequest(PROMPTS[2], adapter=t0, n=3, temperature=1.3, max_tokens=10),  # other adapter
                GenerationRequest(PROMPTS[2], adapter=s0, n=2, temperature=1.0, max_tokens=5),  # same as the first
                GenerationRequest(PROMPTS[1], n=5, temperature=0.0, max_tokens=8, seed=3),  # bare base, greedy
                GenerationRequest(PROMPTS[3], adapter=s0, n=1, max_tokens=11, seed=4)]
    shared = TorchEngine(base_dir, max_adapters=4, max_rank=8, seed=5, max_batch_size=8)
    own = TorchEngine(base_dir, max_adapters=4, max_rank=8, seed=5, max_batch_size=8, share_prefill=False)
    got, want = shared.generate(requests), own.generate(requests)
    for i, (a, b) in enumerate(zip(got, want)):
        assert [s.token_ids for s in a.samples] == [s.token_ids for s in b.samples], f"request {i}"
        for sa, sb in zip(a.samples, b.samples):
            assert sa.logprobs == pytest.approx(sb.logprobs, abs=1e-5)
            assert sa.finish_reason == sb.finish_reason
    assert own.prompt_tokens == sum(len(r.prompt_ids) * r.n for r in requests)
    assert shared.prompt_tokens < own.prompt_tokens / 2
    assert any(len({tuple(s.token_ids) for s in r.samples}) > 1 for r in got)  # the branches drew apart


def test_prompts_of_unequal_length_prefill_without_padding_and_draw_what_the_padded_prefill_drew(base_dir, store):
    """Prompts run in buckets of about their own length, not padded to the chunk's longest: the
    prefill computes fewer positions, and every row draws the tokens it drew before."""
    t0, s0 = store.latest("t0"), store.latest("s0")
    lengths = [3, 40, 7, 38, 21, 40, 12]
    requests = [GenerationRequest([(7 * k + 3 * i) % 300 + 1 for i in range(n)], adapter=(t0, s0, None)[k % 3],
                                  n=1 + k % 3, temperature=1.0, max_tokens=10, seed=k)
                for k, n in enumerate(lengths)]

    def prefilled_positions(engine: TorchEngine) -> tuple[list, int]:
        seen = []
        hook = engine.model.base_model.register_forward_pre_hook(
            lambda module, args, kwargs: seen.append(kwargs["input_ids"].shape) if kwargs["input_ids"].shape[1] > 1
            else None, with_kwargs=True)
        try:
            return engine.generate(requests), sum(b * t for b, t in seen)
        finally:
            hook.remove()

    ragged, ragged_positions = prefilled_positions(TorchEngine(base_dir, max_adapters=4, max_rank=8))
    padded, padded_positions = prefilled_positions(TorchEngine(base_dir, max_adapters=4, max_rank=8,
                                                               ragged_prefill=False))
    for i, (a, b) in enumerate(zip(ragged, padded)):
        assert [s.token_ids for s in a.samples] == [s.token_ids for s in b.samples], f"request {i}"
        for sa, sb in zip(a.samples, b.samples):
            assert sa.logprobs == pytest.approx(sb.logprobs, abs=1e-5)
    assert padded_positions == len(lengths) * max(lengths)
    assert ragged_positions <= 1.1 * sum(lengths) < padded_positions


def test_length_buckets_are_shortest_first_and_waste_at_most_the_slack():
    lengths = [300, 12, 280, 15, 290, 14, 100, 299]
    groups = kv_cache.buckets(lengths, slack=0.1)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    flat = [lengths[i] for g in groups for i in g]
    assert flat == sorted(lengths)
    for g in groups:
        own = [lengths[i] for i in g]
        assert max(own) * len(own) <= 1.1 * sum(own)
    assert len(groups) == 3  # 12-15, 100 alone, 280-300
    assert kv_cache.buckets([]) == []


def test_a_new_version_is_served_with_its_own_weights_never_the_cached_ones(base_dir, tmp_path):
    store = AdapterStore(tmp_path / "adapters", base_dir, rank=4, alpha=8.0)
    v0 = store.create("s1")
    engine = TorchEngine(base_dir, max_adapters=2)
    req = lambda ref: [GenerationRequest(PROMPTS[0], adapter=ref, temperature=0.0, max_tokens=6)]
    base_out = engine.generate(req(None))[0].samples[0]
    assert engine.generate(req(v0))[0].samples[0].logprobs == pytest.approx(base_out.logprobs, abs=1e-5)
    sd = store.load(v0).state_dict
    v1 = store.save("s1", {k: v + 0.7 if "lora_B" in k else v for k, v in sd.items()})
    out = engine.generate(req(v1))[0].samples[0]
    ref_logprobs, _ = peft_reference(base_dir, v1, PROMPTS[0], out.token_ids, 0.0)
    assert out.logprobs == pytest.approx(ref_logprobs, abs=2e-4)
    assert out.logprobs != pytest.approx(base_out.logprobs, abs=1e-3)
    assert set(engine.loaded_adapters()) == {v0.uid, v1.uid}


def test_a_bad_adapter_is_refused_by_name_and_the_others_keep_being_served(base_dir, store, tmp_path):
    engine = create_engine("torch", base_dir, max_adapters=2, max_rank=8)
    good = store.latest("t0")
    before = engine.generate([GenerationRequest(PROMPTS[0], adapter=good, temperature=0.0, max_tokens=5)])
    broken_store = AdapterStore(tmp_path / "broken", base_dir, rank=4)
    broken = broken_store.create("broken")
    (broken.path / "adapter_model.safetensors").write_bytes(b"garbage")
    too_big = AdapterStore(tmp_path / "big", base_dir, rank=16).create("big")
    for bad, match in [(broken, "'broken v0 .*corrupt"), (too_big, "'big v0 .*field r is 16")]:
        with pytest.raises(PopulaError, match=match):
            engine.generate([GenerationRequest(PROMPTS[0], adapter=good, max_tokens=5),
                             GenerationRequest(PROMPTS[1], adapter=bad, max_tokens=5)])
    after = engine.generate([GenerationRequest(PROMPTS[0], adapter=good, temperature=0.0, max_tokens=5)])
    assert after[0].samples == before[0].samples
    assert engine.loaded_adapters() == [good.uid]


def test_bad_requests_are_refused_naming_the_request(engine):
    with pytest.raises(PopulaError, match="request 1: prompt_ids is empty"):
        engine.generate([GenerationRequest([1, 2], max_tokens=5), GenerationRequest([], max_tokens=5)])
    with pytest.raises(PopulaError, match="request 0: .*top_p"):
        engine.generate([GenerationRequest([1], top_p=0.0, max_tokens=5)])
    with pytest.raises(PopulaError, match="request 0: .*128 positions"):
        engine.generate([GenerationRequest([1] * 100, max_tokens=50)])
    with pytest.raises(PopulaError, match="unknown engine 'tensorflow'"):
        create_engine("tensorflow", "x", max_adapters=1, max_rank=1)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_reports_samples_on_a_terminal_without_changing_them(engine, monkeypatch):
    reqs = [GenerationRequest(PROMPTS[3], n=3, max_tokens=4, seed=11)]
    quiet = engine.generate(reqs)
    monkeypatch.setattr(sys, "stderr", Terminal())
    shown = engine.generate(reqs, progress=True)
    assert shown[0].samples == quiet[0].samples
    assert "3/3" in sys.stderr.getvalue()


def test_progress_bar_stays_out_of_a_log_file(engine, capsys):
    engine.generate([GenerationRequest(PROMPTS[3], n=3, max_tokens=4, seed=11)], progress=True)
    assert "generate (torch)" not in capsys.readouterr().err  # stderr is not a terminal here
