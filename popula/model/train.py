"""Supervised cold-start training for a fixed number of steps, on CPU.

Examples are tokenised as prompt + completion + `<|end|>` and packed back to back into
rows of `seq_len + 1` tokens (no padding is wasted). Completion tokens carry loss weight 1;
prompt tokens a smaller weight, because they are programs too and teach the model the
language, but the answers are what it must get right. The learning rate warms up and
then follows a cosine over the *steps*, so the amount of training -- and with it the
model's quality -- is the recipe's, whatever the machine's speed or load. An optional time
limit stops a build early, and says so loudly: such a model is not the recipe's.
Where the CPU multiplies bf16 natively the matrix products run under bf16 autocast
(weights, optimiser and loss stay fp32): the same steps, sooner.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, TextIO

import torch
from tqdm import tqdm

from popula.model.corpus import Example


@dataclass
class TrainStats:
    steps: int
    tokens: int
    seconds: float
    final_loss: float
    stopped_early: bool = False  # the time limit ended training before the recipe's steps


class PackedBatches:
    """Turns a stream of examples into (ids, weights) batches of packed rows."""

    def __init__(self, next_example: Callable[[], Example], tokenizer, seq_len: int, rows: int, prompt_weight: float) -> None:
        self.next_example = next_example
        self.tok = tokenizer
        self.seq_len = seq_len
        self.rows = rows
        self.prompt_weight = prompt_weight
        self.eos = tokenizer.eos_token_id
        self.ids: list[int] = []
        self.weights: list[float] = []
        self.skipped = 0

    def _add_example(self) -> None:
        ex = self.next_example()
        prompt = self.tok(ex.prompt, add_special_tokens=False)["input_ids"]
        completion = self.tok(ex.completion, add_special_tokens=False)["input_ids"] + [self.eos]
        if len(prompt) + len(completion) > self.seq_len:
            self.skipped += 1  # would be cut mid-example: generation never sees such a context
            return
        # a weight belongs to the token as a prediction target
        self.ids += prompt + completion
        self.weights += [self.prompt_weight] * len(prompt) + [1.0] * len(completion)

    def peek(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch without consuming it (the model is compiled on its shape)."""
        need = self.rows * (self.seq_len + 1)
        while len(self.ids) < need:
            self._add_example()
        ids = torch.tensor(self.ids[:need]).view(self.rows, self.seq_len + 1)
        weights = torch.tensor(self.weights[:need]).view(self.rows, self.seq_len + 1)
        return ids, weights

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids, weights = self.peek()
        del self.ids[: ids.numel()], self.weights[: ids.numel()]
        return ids, weights


def lr_at(fraction: float, peak: float, warmup: float = 0.05, floor: float = 0.05) -> float:
    """Warm up linearly, then cosine down to `floor * peak`, over the fraction of steps done."""
    if fraction < warmup:
        return peak * max(fraction / warmup, 0.02)
    progress = min(1.0, (fraction - warmup) / (1 - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX).

    Elsewhere oneDNN emulates bf16 through fp32 conversions, slower than plain fp32.
    """
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private, so probed
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def compiled_forward(model: torch.nn.Module, example: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """`model`'s logits through `torch.compile`, or eager if compiling fails here.

    Packed batches all have one shape, so the model compiles once and then trains faster
    (docs/results/design-figures.md § Compiling the tiny base): fused kernels matter when the matrices are this small.
    A machine without a working C++ toolchain falls back to eager with a warning.
    """
    compiled = torch.compile(model)
    try:
        compiled(input_ids=example).logits.sum().backward()
    except Exception as exc:  # inductor raises many kinds: a missing compiler, an unsupported op
        warnings.warn(f"torch.compile failed ({type(exc).__name__}: {exc}); training eagerly", stacklevel=2)
        model.zero_grad(set_to_none=True)
        return lambda ids: model(input_ids=ids).logits
    model.zero_grad(set_to_none=True)
    return lambda ids: compiled(input_ids=ids).logits


class LineProgress:
    """The pretrain bar for a log file or a pipe: one plain line per tenth of the steps, or
    after `every_s` seconds without one, whichever comes first.

    tqdm redraws with a carriage return again and again; a terminal shows one line, but a log
    keeps every redraw (thousands per build). Here a 5000-step build logs 11 lines (more only
    if a tenth takes over `every_s`), with the numbers the bar shows. Same methods as the
    tqdm bar that `train` uses.
    """

    def __init__(self, total: int, parts: int = 10, every_s: float = 60.0, file: TextIO | None = None,
                 label: str = "pretrain") -> None:
        self.total, self.parts, self.every_s, self.file, self.label = total, parts, every_s, file or sys.stderr, label
        self.n = 0
        self.postfix = ""
        self._part = 0  # a line is due when n reaches part / parts of the total (0: the first update)
        self._last_at = time.monotonic()
        self._printed = -1

    def update(self, amount: int) -> None:
        self.n += amount
        if self.n * self.parts >= self._part * self.total or time.monotonic() - self._last_at >= self.every_s:
            self._line()
            self._part = self.n * self.parts // max(self.total, 1) + 1

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def close(self) -> None:
        if self.n != self._printed:
            self._line()

    def _line(self) -> None:
        self._printed, self._last_at = self.n, time.monotonic()
        percent = 100 * self.n / self.total if self.total else 100.0
        print(f"{self.label}: {percent:3.0f}% {self.n}/{self.total} steps {self.postfix}".rstrip(), file=self.file, flush=True)


def progress_bar(total: int, *, enabled: bool, file: TextIO | None = None, label: str = "pretrain") -> Any:
    """A tqdm bar on a terminal; elsewhere (a log, a pipe, CI) `LineProgress`. `label` names the work."""
    out = file or sys.stderr
    if enabled and not out.isatty():
        return LineProgress(total, file=out, label=label)
    return tqdm(total=total, unit="step", desc=label, disable=not enabled, file=out, mininterval=1.0)


def train(
    model: torch.nn.Module,
    batches: PackedBatches,
    *,
    steps: int,
    lr: float,
    time_limit: float | None = None,
    progress: bool = True,
    compile: bool = False,
    bf16: bool = False,
    label: str = "pretrain",
) -> TrainStats:
    """Train for `steps` optimiser steps, or until `time_limit` seconds pass, whichever is first.

    The learning-rate schedule runs over `steps`, so a time limit cuts it short before the
    annealing is done: the caller must say so (`TrainStats.stopped_early`). `bf16` runs
    the forward (and so the backward) under bf16 autocast.
    """
    start = time.monotonic()
    model.train()
    forward = (lambda ids: model(input_ids=ids).logits)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
    if compile:
        if progress:
            print("popula pretrain: compiling the model (torch.compile)")
        ids, _ = batches.peek()
        with autocast:
            forward = compiled_forward(model, ids[:, :-1])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    done = tokens = 0
    ema = float("nan")
    stopped_early = False
    bar = progress_bar(steps, enabled=progress, label=label)
    while done < steps:
        if time_limit is not None and time.monotonic() - start >= time_limit:
            stopped_early = True
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(done / steps, lr)
        ids, weights = batches.next_batch()
        with autocast:
            logits = forward(ids[:, :-1])
        losses = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), ids[:, 1:].reshape(-1), reduction="none")
        w = weights[:, 1:].reshape(-1)
        loss = (losses * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done += 1
        tokens += ids.numel()
        ema = loss.item() if math.isnan(ema) else 0.95 * ema + 0.05 * loss.item()
        bar.set_postfix_str(f"loss {ema:.3f} tok/s {tokens / max(time.monotonic() - start, 1e-9):.0f}", refresh=False)
        bar.update(1)
    bar.close()
    model.eval()
    return TrainStats(steps=done, tokens=tokens, seconds=time.monotonic() - start, final_loss=ema,
                      stopped_early=stopped_early)
