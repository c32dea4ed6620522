"""One frozen `nn.Linear` with many LoRA adapters, applied per batch ROW in one batched op.

Why this shape: a population serves (and trains) many adapters on one base. Looping over
adapters would run the base once per adapter, or at least launch one small matmul per
adapter per module; instead every row carries a slot index, the layer gathers each row's
A and B and applies them with two `bmm`s. Rows routed to the zero slot (the bare base)
get exact zeros, so a mixed batch of adapters and bare-base rows is one forward pass.

Storage, chosen so training and inference are both fast:
- every slot's A (r x in) and B (out x r) is its OWN `nn.Parameter`, so the learner can give
  each adapter its own optimiser (AdamW over `MultiLoRAModel.slot_parameters(slot)`);
- with autograd on, the layer stacks the slot Parameters on the fly each forward (a copy of
  n_slots*r*(in+out) numbers, negligible next to the base matmul) and gradients flow back to
  each slot's Parameters through `torch.stack` + indexing;
- with autograd off (generation), the per-row gathered weights are computed once per
  routing and reused by every decode step until the routing or any slot weight changes
  (checked through the Parameters' in-place version counters), so a decode step costs two
  `bmm`s per module and no gather.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class SlotRouting:
    """The row -> slot map for the next forward, shared by every layer of one model.

    `rows` holds, per batch row, a slot index in [0, n_slots]; index n_slots is the zero
    slot (bare base). None means "no LoRA at all" and lets every layer skip the LoRA math.
    `epoch` changes with every new routing so layers know to drop their gathered weights.
    """

    def __init__(self, n_slots: int) -> None:
        self.n_slots = n_slots
        self.rows: torch.Tensor | None = None
        self.epoch = 0

    def set(self, rows: torch.Tensor | None) -> None:
        self.rows = rows
        self.epoch += 1


class MultiLoRALinear(nn.Module):
    """A frozen linear layer plus `n_slots` LoRA adapters of rank <= `rank`, routed per row.

    Output for row i routed to slot s: base(x_i) + scaling[s] * (x_i @ A_s^T) @ B_s^T,
    exactly PEFT's LoRA forward with dropout 0. An adapter of lower rank than `rank` is
    stored zero-padded (padded rows of A and columns of B stay zero, and so do their
    gradients), with its own scaling alpha / r.
    """

    def __init__(self, base: nn.Linear, *, n_slots: int, rank: int, routing: SlotRouting) -> None:
        super().__init__()
        if n_slots < 1 or rank < 1:
            raise ValueError(f"n_slots and rank must be >= 1, got {n_slots}, {rank}")
        self.base = base
        self.base.requires_grad_(False)
        self.in_features = base.in_features
        self.out_features = base.out_features
        self.n_slots = n_slots
        self.rank = rank
        self.routing = routing
        dev, dt = base.weight.device, base.weight.dtype
        self.lora_A = nn.ParameterList(
            nn.Parameter(torch.zeros(rank, self.in_features, device=dev, dtype=dt)) for _ in range(n_slots)
        )
        self.lora_B = nn.ParameterList(
            nn.Parameter(torch.zeros(self.out_features, rank, device=dev, dtype=dt)) for _ in range(n_slots)
        )
        # One scaling per slot plus the zero slot (always 0): alpha / r of the adapter loaded there.
        self.register_buffer("scaling", torch.zeros(n_slots + 1, device=dev, dtype=dt), persistent=False)
        self._cache_key: tuple | None = None
        self._cache: tuple[torch.Tensor, torch.Tensor] | None = None

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, slots={self.n_slots}, rank={self.rank}"

    # -- weights of one slot ------------------------------------------------------------

    @torch.no_grad()
    def set_slot(self, slot: int, a: torch.Tensor, b: torch.Tensor, scaling: float) -> None:
        """Copy an adapter's A (r x in) and B (out x r) into `slot`, zero-padding to `rank`."""
        r = a.shape[0]
        if a.shape != (r, self.in_features) or b.shape != (self.out_features, r) or r > self.rank:
            raise ValueError(
                f"LoRA shapes A{tuple(a.shape)} B{tuple(b.shape)} do not fit a layer of "
                f"in={self.in_features} out={self.out_features} rank<={self.rank}"
            )
        pa, pb = self.lora_A[slot], self.lora_B[slot]
        pa.zero_()
        pb.zero_()
        pa[:r].copy_(a)
        pb[:, :r].copy_(b)
        self.scaling[slot] = scaling

    @torch.no_grad()
    def clear_slot(self, slot: int) -> None:
        self.lora_A[slot].zero_()
        self.lora_B[slot].zero_()
        self.scaling[slot] = 0.0

    # -- forward -------------------------------------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        rows = self.routing.rows
        if rows is None:
            return out
        if x.dim() < 2 or x.shape[0] != rows.shape[0]:
            raise ValueError(f"routing has {rows.shape[0]} rows but the input batch has shape {tuple(x.shape)}")
        a_t, b_t = self._row_weights(rows, x.dtype)
        n = x.shape[0]
        h = torch.bmm(x.reshape(n, -1, self.in_features), a_t)
        return torch.baddbmm(out.reshape(n, -1, self.out_features), h, b_t).view(out.shape)

    def _row_weights(self, rows: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-row A^T (n, in, r) and scaled B^T (n, r, out); cached when no grad is needed."""
        needs_grad = torch.is_grad_enabled() and any(p.requires_grad for p in self.lora_A)
        if needs_grad:
            self._cache = None
            return self._gather(rows, dtype)
        key = (self.routing.epoch, dtype, *(p._version for p in self.lora_A), *(p._version for p in self.lora_B),
               self.scaling._version)
        if self._cache is None or self._cache_key != key:
            with torch.no_grad():
                a_t, b_t = self._gather(rows, dtype)
            self._cache = (a_t.contiguous(), b_t.contiguous())
            self._cache_key = key
        return self._cache

    def _gather(self, rows: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        zero_a = self.lora_A[0].new_zeros(1, self.rank, self.in_features)
        zero_b = self.lora_B[0].new_zeros(1, self.out_features, self.rank)
        a_all = torch.cat([torch.stack(list(self.lora_A)), zero_a])  # (S+1, r, in)
        b_all = torch.cat([torch.stack(list(self.lora_B)), zero_b])  # (S+1, out, r)
        scale = self.scaling[rows].view(-1, 1, 1)
        a_t = a_all[rows].transpose(1, 2).to(dtype)  # (n, in, r)
        b_t = (b_all[rows].transpose(1, 2) * scale).to(dtype)  # (n, r, out)
        return a_t, b_t


def peft_init_(a: torch.Tensor, b: torch.Tensor, generator: torch.Generator) -> None:
    """PEFT's default LoRA init: A kaiming-uniform (a=sqrt(5)), B zeros, so a new adapter is the base."""
    with torch.no_grad():
        nn.init.kaiming_uniform_(a, a=math.sqrt(5), generator=generator)
        b.zero_()
