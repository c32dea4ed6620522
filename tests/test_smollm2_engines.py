"""Both engines serve the real SmolLM2-135M base with LoRA adapters, and the learner trains them.

The specification, per engine: the bare base and a fresh adapter (B = 0) generate the same
greedy text; one learner step on the engine's own samples produces a new adapter version;
the engine serves that version (its output distribution moves) and the learner, fed those
samples, sees the sampler's log-probabilities (small `logprob_gap`: train and serve compute
the same policy). The torch engine runs in fp32 like the learner; vLLM on CPU in fp32 too.
"""

from __future__ import annotations

import pytest
import torch

from popula.adapters.store import AdapterStore
from conftest import plain_learner
from popula.config import LoraConfig
from popula.engines import create_engine
from popula.engines.base import GenerationRequest
from popula.tasks.encoding import encode_prompt
from popula.learner import PopulationLearner, Rollout
from popula.records import TaskRecord
from popula.tasks.prompts import InstructFormat, prompt_format, stop_token_ids

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]

RANK = 8
TASK = TaskRecord(id="t", type="code_o", program="def f(x):\n    return x * 2 + 1", inputs=["3"], outputs=["7"])


@pytest.fixture(scope="module")
def world(smollm2_base, tmp_path_factory):
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("smollm2-adapters")
    tok = AutoTokenizer.from_pretrained(str(smollm2_base))
    store = AdapterStore(root / "adapters", smollm2_base, rank=RANK, alpha=16.0, seed=1)
    lora = LoraConfig(rank=RANK, alpha=16.0)
    learner = PopulationLearner(smollm2_base, lora, plain_learner(lr=2e-3), max_adapters=2)  # one adapter per engine
    return smollm2_base, tok, store, learner, lora


@pytest.fixture(scope="module", params=["torch", "vllm"])
def engine(request, world, one_torch_thread):
    base, _, _, _, lora = world
    if request.param == "torch":
        eng = create_engine("torch", base, max_adapters=3, max_rank=RANK, seed=0, target_modules=lora.target_modules)
    else:
        pytest.importorskip("vllm")
        eng = create_engine("vllm", base, max_adapters=3, max_rank=RANK, seed=0, dtype=torch.float32,
                            max_model_len=1024, kv_cache_gib=0.5, max_num_seqs=16)
    yield request.param, eng
    eng.close()


def test_a_real_model_gets_the_instruction_format_with_its_chat_template(world):
    _, tok, _, _, _ = world
    fmt = prompt_format(tok)
    assert isinstance(fmt, InstructFormat) and fmt.direct  # a registry model: the direct style
    assert fmt.student_prompt(TASK).startswith("<|im_start|>system\n")
    assert fmt.student_prompt(TASK).endswith("<|im_start|>assistant\n<answer>")


def test_one_learner_step_and_generation_with_the_new_adapter(world, engine):
    kind, eng = engine
    base, tok, store, learner, _ = world
    fmt = prompt_format(tok)
    prompt = encode_prompt(tok, fmt.student_prompt(TASK))
    stops = stop_token_ids(tok)
    name = f"s_{kind}"
    ref = store.create(name)
    learner.add_adapter(name, store.load(ref).state_dict)

    greedy = [GenerationRequest(prompt_ids=prompt, adapter=a, temperature=0.0, max_tokens=12, stop_token_ids=stops)
              for a in (None, ref)]
    bare, fresh = eng.generate(greedy)
    assert bare.samples[0].token_ids == fresh.samples[0].token_ids  # B = 0: the adapter is the identity

    sampled = eng.generate([GenerationRequest(prompt_ids=prompt, adapter=ref, n=4, temperature=1.0, max_tokens=24,
                                              seed=5, stop_token_ids=stops)])[0].samples
    rollouts = [Rollout(adapter=name, prompt_ids=prompt, completion_ids=s.token_ids, sampler_logprobs=s.logprobs,
                        adapter_version=ref.version, group="g", advantage=1.0 if i % 2 == 0 else -1.0)
                for i, s in enumerate(sampled)]
    metrics = learner.step(rollouts)
    assert metrics["rows"] == 4 and metrics["adapters"][name]["grad_norm"] > 0
    # the sampler's log-probs are the trainer's (same weights before the update)
    assert metrics["logprob_gap"] < (1e-4 if kind == "torch" else 2e-3)

    new = store.save(name, learner.adapter_state(name))
    assert new.uid != ref.uid
    again = eng.generate([GenerationRequest(prompt_ids=prompt, adapter=new, n=1, temperature=1.0, max_tokens=24,
                                            seed=5, stop_token_ids=stops),
                          GenerationRequest(prompt_ids=prompt, adapter=ref, n=1, temperature=1.0, max_tokens=24,
                                            seed=5, stop_token_ids=stops)])
    moved, old = again[0].samples[0], again[1].samples[0]
    # same seed, same first token drawn from a different distribution: the new version is served
    assert moved.logprobs[0] != pytest.approx(old.logprobs[0], abs=1e-6) or moved.token_ids != old.token_ids
    # and the learner agrees with the engine about the new version's policy
    trained = learner.logprobs([Rollout(adapter=name, prompt_ids=prompt, completion_ids=moved.token_ids,
                                        sampler_logprobs=moved.logprobs, adapter_version=new.version, group="h",
                                        advantage=0.0)])[0]
    gap = sum(abs(a - b) for a, b in zip(trained, moved.logprobs)) / len(trained)
    assert gap < (1e-4 if kind == "torch" else 2e-3)
