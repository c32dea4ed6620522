"""Base models: the tiny base's build, cache and files, and loading bases by spec."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from popula.errors import PopulaError
from popula.kinds.code_f import simplest_program
from popula.model.base import MARKER, RESOLVERS, load_base, resolve_base_model, tiny_path
from popula.model.spec import BUILT_KINDS, PATH, kind_of
from popula.model.corpus import ExampleSampler, as_type
from popula.model.recipe import TinyRecipe
from popula.model.tokenizer import train_tokenizer
from popula.model.train import PackedBatches, compiled_forward, lr_at
from popula.records import TaskRecord
from popula.tasks.generator import generate_tasks
from popula.tasks.prompts import COMPACT_EOS, CompactFormat, prompt_format, stop_token_ids

QUICK = TinyRecipe(train_steps=150, pool_tasks=40, seq_len=256, batch_rows=2, heldout_tasks=0)


@pytest.fixture(scope="module")
def pool():
    return generate_tasks(24, seed=0, types=["code_f"], namespace="test-corpus")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A private cache with one quick tiny build in it."""
    root = tmp_path_factory.mktemp("popula-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("POPULA_CACHE", str(root))
    path = resolve_base_model("tiny", recipe=QUICK, progress=False)
    yield root, path
    mp.undo()


def test_corpus_examples_are_in_the_exact_self_play_formats(pool) -> None:
    fmt = CompactFormat()
    sampler = ExampleSampler(pool, fmt, random.Random(0), max_references=3, teacher_share=0.5)
    kinds = set()
    for _ in range(200):
        ex = sampler.sample()
        role, task_type = ex.kind.split(":")
        kinds.add(ex.kind)
        if role == "teacher":
            assert ex.prompt.startswith("## propose") and ex.prompt.endswith("### new\n")
            proposal = fmt.parse_proposal(ex.completion, task_type)
            assert proposal is not None and any(proposal.program == t.program for t in pool)
        else:
            answer = fmt.parse_answer(ex.completion, task_type)
            assert answer is not None
            shown = [t for t in pool if t.program in ex.prompt]
            if task_type == "code_o":  # the sandbox's output for the input shown
                assert any(answer in t.outputs for t in shown)
            elif task_type == "code_i":  # the input that produced the output shown
                assert any(answer in t.inputs for t in shown)
            else:
                assert any(answer == simplest_program(t) for t in pool)
    assert len(kinds) == 6


def test_student_examples_follow_the_mix_and_lean_to_short_programs(pool) -> None:
    fmt = CompactFormat()
    lines = {t.program: t.program.count("\n") + 1 for t in pool}
    mean_lines = {}
    for power in (0.0, 3.0):
        sampler = ExampleSampler(pool, fmt, random.Random(2), max_references=1, teacher_share=0.0, student_mix={"code_o": 1.0}, short_power=power)
        examples = [sampler.sample() for _ in range(300)]
        assert {ex.kind for ex in examples} == {"student:code_o"}
        shown = [next(n for p, n in lines.items() if ex.prompt.startswith(f"## output\n{p.rstrip()}\n>>> ")) for ex in examples]
        mean_lines[power] = sum(shown) / len(shown)
    assert mean_lines[3.0] < mean_lines[0.0] - 1  # one-liners dominate when the lean is steep


def test_teacher_proposals_lean_to_short_programs_as_steeply_as_the_recipe_says(pool) -> None:
    fmt = CompactFormat()
    mean_lines = {}
    for power in (0.0, 3.0):
        sampler = ExampleSampler(pool, fmt, random.Random(4), max_references=1, teacher_share=1.0, proposal_power=power)
        programs = [sampler.sample().completion.split("\n>>> ")[0] for _ in range(300)]
        mean_lines[power] = sum(p.count("\n") + 1 for p in programs) / len(programs)
    assert mean_lines[3.0] < mean_lines[0.0] - 1


def test_teacher_references_lie_within_the_recipes_depth_window_of_the_proposal() -> None:
    """So the base learns to propose at its references' depth: the buffer's weighting can steer it."""
    from popula.complexity import ast_depth

    pool = generate_tasks(200, seed=1, types=["code_f"], namespace="test-corpus")
    by_program = {t.program: ast_depth(t.program) for t in pool}
    gaps = {}
    for window in (None, 1):
        sampler = ExampleSampler(pool, CompactFormat(), random.Random(5), max_references=3, teacher_share=1.0,
                                 reference_depth_window=window)
        worst, total = 0, 0.0
        for _ in range(200):
            ex = sampler.teacher("code_o")
            target = by_program[ex.completion.split("\n>>> ")[0]]
            refs = [d for program, d in by_program.items() if f"### ref\n{program}\n>>>" in ex.prompt]
            assert refs
            worst = max(worst, *(abs(d - target) for d in refs))
            total += sum(abs(d - target) for d in refs) / len(refs)
        gaps[window] = (worst, total / 200)
    assert gaps[1][0] <= 1  # every reference within one level
    assert gaps[None][1] > 2 * gaps[1][1]  # drawn at random, they are much further off


def test_code_f_answers_for_constant_programs_are_the_constant_and_the_sandbox_accepts_them() -> None:
    from popula.sandbox import Sandbox

    tasks = generate_tasks(60, seed=3, types=["code_f"], namespace="test-corpus")
    constant = [t for t in tasks if len(set(t.outputs)) == 1]
    varying = [t for t in tasks if len(set(t.outputs)) > 1]
    assert constant and varying
    assert all(simplest_program(t) == t.program for t in varying)
    answers = [simplest_program(t) for t in constant]
    assert all(a.count("\n") == 1 and a.endswith(f"return {t.outputs[0]}") for a, t in zip(answers, constant))
    with Sandbox(workers=1) as sandbox:
        results = sandbox.verify([TaskRecord(id=t.id, type="code_f", program=t.program, inputs=t.inputs, outputs=t.outputs, message=t.message, answer=a) for t, a in zip(constant, answers)])
    assert all(r.correct for r in results)


def test_a_pool_task_viewed_as_code_o_keeps_its_input_output_pair(pool) -> None:
    task = as_type(pool[0], "code_o", 3)
    assert (task.type, task.inputs, task.outputs, task.message) == ("code_o", [pool[0].inputs[3]], [pool[0].outputs[3]], "")


def test_tokenizer_round_trips_programs_splits_digits_and_ends_with_its_eos(pool) -> None:
    tok = train_tokenizer([t.program for t in pool] * 3, vocab_size=400)
    text = pool[0].program + "\n>>> f(12345)\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.tokenize("12345") == list("12345")
    assert tok.eos_token == COMPACT_EOS and tok.pad_token_id != tok.eos_token_id


def test_packed_batches_weigh_completions_fully_and_prompts_less(pool) -> None:
    fmt = CompactFormat()
    tok = train_tokenizer([t.program for t in pool] * 3, vocab_size=400)
    sampler = ExampleSampler(pool, fmt, random.Random(1), max_references=1, teacher_share=0.0)
    batches = PackedBatches(sampler.sample, tok, seq_len=128, rows=3, prompt_weight=0.25)
    ids, weights = batches.next_batch()
    assert ids.shape == weights.shape == (3, 129)
    assert set(weights.unique().tolist()) == {0.25, 1.0}
    eos = ids == tok.eos_token_id
    assert eos.any() and bool((weights[eos] == 1.0).all())  # learning to stop matters


def test_peeking_a_batch_does_not_consume_it(pool) -> None:
    tok = train_tokenizer([t.program for t in pool] * 3, vocab_size=400)
    sampler = ExampleSampler(pool, CompactFormat(), random.Random(2), max_references=1, teacher_share=0.5)
    batches = PackedBatches(sampler.sample, tok, seq_len=64, rows=2, prompt_weight=0.1)
    peeked, _ = batches.peek()
    taken, _ = batches.next_batch()
    assert torch.equal(peeked, taken) and not torch.equal(taken, batches.next_batch()[0])


@pytest.mark.slow
def test_compiled_training_forward_gives_the_eager_logits_and_gradients() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, 64, (2, 16))
    forward = compiled_forward(model, ids)
    assert all(p.grad is None for p in model.parameters())  # the compile probe leaves no gradient behind
    forward(ids).sum().backward()
    compiled_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    eager = model(input_ids=ids).logits
    eager.sum().backward()
    assert torch.allclose(forward(ids), eager, atol=1e-5)
    assert all(torch.allclose(g, p.grad, atol=1e-5) for g, p in zip(compiled_grads, model.parameters()))


def _quick_batches(pool) -> tuple[PackedBatches, torch.nn.Module]:
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = train_tokenizer([t.program for t in pool] * 3, vocab_size=400)
    sampler = ExampleSampler(pool, CompactFormat(), random.Random(3), max_references=1, teacher_share=0.0)
    batches = PackedBatches(sampler.sample, tok, seq_len=64, rows=2, prompt_weight=0.1)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
    return batches, LlamaForCausalLM(config)


def _train_quick_model(pool, *, bf16: bool) -> tuple[float, torch.nn.Module]:
    """Eight seeded steps on the same batches; returns the final (smoothed) loss and the model."""
    from popula.model.train import train

    batches, model = _quick_batches(pool)
    stats = train(model, batches, steps=8, lr=1e-2, progress=False, bf16=bf16)
    assert stats.steps == 8 and not stats.stopped_early
    return stats.final_loss, model


def test_training_runs_the_recipes_steps_whatever_the_clock_and_a_time_limit_says_it_cut_them(pool) -> None:
    from popula.model.train import train

    batches, model = _quick_batches(pool)
    first = train(model, batches, steps=5, lr=1e-2, progress=False)
    assert (first.steps, first.stopped_early) == (5, False)
    cut = train(model, batches, steps=5, lr=1e-2, time_limit=0.0, progress=False)
    assert (cut.steps, cut.stopped_early) == (0, True)


def test_bf16_autocast_training_tracks_fp32_training_and_keeps_fp32_weights(pool) -> None:
    fp32_loss, _ = _train_quick_model(pool, bf16=False)
    bf16_loss, model = _train_quick_model(pool, bf16=True)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # autocast, not a bf16 model
    assert bf16_loss == pytest.approx(fp32_loss, rel=0.02)


def test_bf16_is_used_only_where_the_cpu_multiplies_it_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    from popula.model import train as train_module

    for avx512_bf16, amx, expected in ((False, False, False), (True, False, True), (False, True, True)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v, raising=False)
        assert train_module.native_bf16() is expected


def test_learning_rate_warms_up_then_anneals() -> None:
    assert lr_at(0.0, 1.0) < lr_at(0.05, 1.0) == pytest.approx(1.0)
    assert lr_at(0.5, 1.0) < 1.0 and lr_at(1.0, 1.0) == pytest.approx(0.05)


@pytest.mark.slow
def test_tiny_is_built_once_in_the_cache_in_hugging_face_format(cache) -> None:
    root, path = cache
    assert path == tiny_path(QUICK) and path.parent == root
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json", MARKER):
        assert (path / name).is_file(), name
    summary = json.loads((path / MARKER).read_text())
    assert summary["steps"] > 0 and summary["prompt_format"] == "compact"
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert resolve_base_model("tiny", recipe=QUICK) == path  # reused, not rebuilt
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    assert not list(root.glob(".*tmp*"))  # the build's temporary directory is gone


def test_a_changed_recipe_or_corpus_source_means_another_cache_entry() -> None:
    assert tiny_path(QUICK) != tiny_path(TinyRecipe(train_steps=150, pool_tasks=40, seq_len=256, batch_rows=2, heldout_tasks=0, lr=1e-3))
    assert tiny_path(QUICK) != tiny_path(TinyRecipe(train_steps=151, pool_tasks=40, seq_len=256, batch_rows=2, heldout_tasks=0))
    assert tiny_path(QUICK) == tiny_path(TinyRecipe(train_steps=150, pool_tasks=40, seq_len=256, batch_rows=2, heldout_tasks=0))


@pytest.mark.slow
def test_the_tiny_base_loads_with_transformers_and_generation_stops_at_its_eos(cache) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, path = cache
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "llama"
    assert 0.2e6 < sum(p.numel() for p in model.parameters()) < 20e6
    end = tok.convert_tokens_to_ids(COMPACT_EOS)
    assert model.generation_config.eos_token_id == end == tok.eos_token_id
    assert stop_token_ids(tok) == [end]
    assert prompt_format(tok).name == "compact"

    # force the end token: generate must stop right after it, whatever the weights
    with torch.no_grad():
        bias = torch.full((model.config.vocab_size,), -1e4)
        bias[end] = 0.0
        out = model.generate(
            **tok("## output\ndef f(a):\n    return a\n>>> f(1)\n", return_tensors="pt", add_special_tokens=False),
            max_new_tokens=20,
            do_sample=False,
            eos_token_id=[end],
            logits_processor=[lambda ids, scores: scores + bias],
        )
    assert out[0, -1].item() == end and out.shape[1] <= 1 + len(tok("## output\ndef f(a):\n    return a\n>>> f(1)\n")["input_ids"])


@pytest.mark.slow
def test_load_base_by_spec_and_path(cache) -> None:
    _, path = cache
    model, tok = load_base(str(path))
    assert not model.training and tok.pad_token_id is not None


def test_every_kind_of_base_has_one_resolver() -> None:
    """A new kind of base is one entry in spec.BUILT_KINDS and one in base.RESOLVERS."""
    assert set(RESOLVERS) == set(BUILT_KINDS) | {PATH}
    specs = ("tiny", "smollm2-135m", "smollm2-135m+coldstart", "model.GGUF", "org/name", "/a/model/dir")
    assert [kind_of(spec) for spec in specs] == ["tiny", "registry", "coldstart", "gguf", PATH, PATH]


def test_missing_or_unreadable_model_paths_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(PopulaError, match="no such model directory"):
        resolve_base_model(str(tmp_path / "nope"))
    with pytest.raises(PopulaError, match="config.json"):
        resolve_base_model(str(tmp_path))
    with pytest.raises(PopulaError, match="Hugging Face id"):
        resolve_base_model("not a model id")


def test_a_hub_id_is_passed_on_when_the_hub_can_be_reached(monkeypatch) -> None:
    monkeypatch.setattr("popula.model.hub._reachable", lambda host, port, seconds=3.0: True)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert resolve_base_model("Qwen/Qwen2.5-Coder-1.5B-Instruct") == "Qwen/Qwen2.5-Coder-1.5B-Instruct"


def test_a_hub_id_neither_cached_nor_reachable_fails_at_once(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty hub cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(PopulaError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE is set"):
        resolve_base_model("nobody/no-such-model")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("popula.model.hub._reachable", lambda host, port, seconds=3.0: False)
    with pytest.raises(PopulaError, match="cannot be reached"):
        resolve_base_model("nobody/no-such-model")
    assert time.monotonic() - started < 5


def test_a_real_model_directory_gets_instruction_prompts(tmp_path: Path) -> None:
    """A tiny random Qwen2 with a locally trained tokenizer stands in for a real model."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(["def f(x):\n    return x + 1\n"] * 10, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|im_end|>")
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    task = TaskRecord(id="o", type="code_o", program="def f(x):\n    return x + 1", inputs=["3"], outputs=["4"])
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model, loaded = load_base(str(tmp_path))
    fmt = prompt_format(loaded)
    assert fmt.name == "instruct"
    prompt = fmt.student_prompt(task)
    assert prompt.startswith("<|im_start|>user")
    ids = loaded(prompt, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=loaded.pad_token_id)
    assert out.shape[1] > ids["input_ids"].shape[1]


@pytest.mark.slow
def test_cli_pretrain_writes_a_model_and_tasks_writes_held_out_tasks(tmp_path: Path) -> None:
    from popula.records import read_records

    out = tmp_path / "tiny"
    shape = ["--hidden-size", "96", "--layers", "2", "--heads", "3", "--intermediate-size", "200"]
    done = subprocess.run([sys.executable, "-m", "popula", "pretrain", "--out", str(out), "--steps", "30", "--programs", "400", "--heldout", "12", *shape], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (out / "model.safetensors").is_file() and f"saved to {out}" in done.stdout
    assert "pretrain" in done.stderr  # the progress bar
    summary = json.loads((out / MARKER).read_text())
    assert summary["steps"] == 30 and summary["pool_tasks"] == 400 and summary["stopped_early"] is False
    built = json.loads((out / "config.json").read_text())
    assert (built["hidden_size"], built["num_hidden_layers"], built["num_attention_heads"], built["intermediate_size"]) == (96, 2, 3, 200)
    assert summary["recipe"]["hidden_size"] == 96  # the shape is part of the recipe, so of its hash
    assert summary["heldout"]["tasks"] == 12 and 0.0 <= summary["heldout"]["greedy_pass1"] <= 1.0
    sampled = summary["heldout"]["sampled"]  # the learning benchmark's settings: the "same quality" figure
    assert (sampled["samples"], sampled["temperature"], sampled["max_tokens"]) == (4, 0.8, 96)
    assert 0.0 <= sampled["pass1"] <= sampled["pass4"] <= 1.0

    tasks_file = tmp_path / "held.jsonl"
    done = subprocess.run([sys.executable, "-m", "popula", "tasks", "--n", "12", "--seed", "3", "--out", str(tasks_file)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    tasks = read_records(tasks_file)
    assert len(tasks) == 12 and all(len(t.outputs) == len(t.inputs) for t in tasks)


def test_runs_started_together_from_an_empty_cache_build_the_tiny_base_once(tmp_path, monkeypatch, capsys):
    """Two first runs (benchmarks/learning.py --jobs 2): one builds, the other waits for it."""
    import threading
    import time

    import popula.model.base as base

    monkeypatch.setenv("POPULA_CACHE", str(tmp_path))
    builds = []

    def slow_build(out: Path, recipe: TinyRecipe, progress: bool = True) -> None:
        builds.append(out)
        time.sleep(0.5)
        out.mkdir(parents=True)
        (out / MARKER).write_text("{}")

    monkeypatch.setattr(base, "build_tiny", slow_build)
    recipe = TinyRecipe(train_steps=3)
    found = []
    threads = [threading.Thread(target=lambda: found.append(resolve_base_model("tiny", recipe=recipe))) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.1)
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and found == [tiny_path(recipe)] * 2
    assert "another process is building the tiny base" in capsys.readouterr().err
