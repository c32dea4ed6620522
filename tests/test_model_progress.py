"""The pretrain progress off a terminal: a plain line per 10% of the steps, not per step.

A log file or a pipe keeps every redraw of a tqdm bar, one per training step (thousands per
build); these tests train for real with stderr going to a file and count the lines.
"""

from __future__ import annotations

import io
import random
import sys

import torch

from popula.model.corpus import ExampleSampler
from popula.model.train import LineProgress, PackedBatches, progress_bar, train
from popula.model.tokenizer import train_tokenizer
from popula.tasks.generator import generate_tasks
from popula.tasks.prompts import CompactFormat


def test_a_build_logging_to_a_file_writes_a_line_per_tenth_of_its_budget_not_per_step(tmp_path, monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    pool = generate_tasks(12, seed=1, workers=1)
    tok = train_tokenizer([t.program for t in pool] * 3, vocab_size=400)
    sampler = ExampleSampler(pool, CompactFormat(), random.Random(3), max_references=1, teacher_share=0.0)
    batches = PackedBatches(sampler.sample, tok, seq_len=32, rows=1, prompt_weight=0.1)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    with open(tmp_path / "build.log", "w") as log:
        monkeypatch.setattr(sys, "stderr", log)
        stats = train(model, batches, steps=40, lr=1e-3, progress=True)
    lines = (tmp_path / "build.log").read_text().splitlines()
    assert stats.steps == 40
    assert "\r" not in "".join(lines)
    assert [line.split()[2] for line in lines] == ["1/40", *(f"{n}/40" for n in range(4, 41, 4))], lines
    assert lines[0].startswith("pretrain:   2% 1/40 steps loss ")
    assert lines[-1].startswith("pretrain: 100% 40/40 steps loss ")


def test_line_progress_prints_at_each_tenth_once_at_the_end_and_after_a_silent_minute(monkeypatch):
    out = io.StringIO()
    bar = LineProgress(1000, file=out)
    for _ in range(1000):
        bar.set_postfix_str("loss 1.0")
        bar.update(1)
    bar.close()
    done = [int(line.split()[2].split("/")[0]) for line in out.getvalue().splitlines()]
    assert done == [1, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]

    clock = [0.0]
    monkeypatch.setattr("popula.model.train.time.monotonic", lambda: clock[0])
    out = io.StringIO()
    slow = LineProgress(1000, file=out)
    slow.update(1)  # the first step prints
    clock[0] = 61.0
    slow.update(1)  # far from 10%, but a minute without a line
    slow.update(1)
    assert [line.split()[2] for line in out.getvalue().splitlines()] == ["1/1000", "2/1000"]


def test_a_terminal_keeps_the_tqdm_bar():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert not isinstance(progress_bar(10, enabled=True, file=Tty()), LineProgress)
    assert isinstance(progress_bar(10, enabled=True, file=io.StringIO()), LineProgress)


def test_line_progress_names_the_work_it_reports():
    out = io.StringIO()
    bar = LineProgress(2, file=out, label="cold start")
    bar.update(2)
    bar.close()
    assert out.getvalue().splitlines() == ["cold start: 100% 2/2 steps"]
