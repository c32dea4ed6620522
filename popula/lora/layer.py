"""One frozen `nn.Linear` with many LoRA adapters, applied per batch ROW in one batched op.

Why this shape: a population serves (and trains) many adapters on one base. Looping over
adapters would launch small matmuls per adapter per module (PEFT's mixed batches run at
0.52x of one adapter); instead every row carries a slot index and the layer applies all
adapters at once:

- kernel "grouped" (default where it works): rows are grouped by slot (a permutation
  computed once per routing and shared by all layers; none at all when the caller already
  orders rows by slot, as the torch engine does) and `torch._grouped_mm` multiplies each
  group by its own A and B in one call. It reads each adapter's weights once, not once per
  row, which is what makes 8 adapters cost about what 1 costs.
  Layers called on the same input (q/k/v, gate/up) share one A matmul and one
  block-diagonal B matmul (`SiblingGroup`).
- kernel "gather" (fallback, e.g. where `_grouped_mm` lacks a dtype/device): each row's A
  and B are gathered and applied with two `bmm`s.
Rows routed to the bare base are skipped by both (exact base output).

Storage, chosen so training and inference are both fast:
- every slot's A (r x in) and B (out x r) is its OWN `nn.Parameter`, so the learner can give
  each adapter its own optimiser (AdamW over `MultiLoRAModel.slot_parameters(slot)`);
- with autograd on, the used slots' Parameters are stacked on the fly each forward (a copy
  of U*r*(in+out) numbers, small next to the base matmul); gradients flow back through
  `torch.stack` to each slot's Parameters;
- with autograd off (generation), the stacked weights are built once per routing and reused
  by every decode step until the routing or a slot weight changes (checked through the
  Parameters' in-place version counters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

KERNELS = ("auto", "grouped", "gather")
_GROUPED_OK: dict[tuple[str, torch.dtype], bool] = {}


def grouped_mm_works(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether torch._grouped_mm runs (and is right) for this device and dtype; probed once."""
    key = (device.type, dtype)
    if key not in _GROUPED_OK:
        ok = False
        if hasattr(torch, "_grouped_mm"):
            try:
                g = torch.Generator().manual_seed(0)
                x = torch.randn(6, 16, generator=g).to(device, dtype)
                w = torch.randn(2, 16, 8, generator=g).to(device, dtype)
                offs = torch.tensor([2, 6], dtype=torch.int32, device=device)
                got = torch._grouped_mm(x, w, offs=offs)
                want = torch.cat([x[:2] @ w[0], x[2:] @ w[1]])
                ok = bool(torch.allclose(got.float(), want.float(), rtol=2e-2, atol=2e-2))
            except (RuntimeError, NotImplementedError, TypeError):
                ok = False
        _GROUPED_OK[key] = ok
    return _GROUPED_OK[key]


@dataclass
class RoutingPlan:
    """Everything layers need about one routing, computed once and shared by all of them.

    rows: slot per row (n_slots = zero slot); lora_rows: indices of non-base rows ordered by
    slot; contiguous: lora_rows == 0..m-1 (no permutation needed); used: distinct slots in
    order; offsets: cumulative row counts per used slot (what _grouped_mm takes).
    """

    rows: torch.Tensor
    lora_rows: torch.Tensor
    contiguous: bool
    used: list[int]
    offsets: torch.Tensor
    _offsets_by_len: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def m(self) -> int:
        return self.lora_rows.shape[0]

    def offsets_for(self, seq_len: int) -> torch.Tensor:
        """Group offsets when every row contributes `seq_len` flattened positions."""
        if seq_len not in self._offsets_by_len:
            self._offsets_by_len[seq_len] = (self.offsets * seq_len).to(torch.int32)
        return self._offsets_by_len[seq_len]


class SlotRouting:
    """The row -> slot map for the next forward, shared by every layer of one model.

    `plan` is None when there is no LoRA at all (no routing, or every row on the bare base):
    every layer then skips the LoRA math. `epoch` changes with every new routing so layers
    know to rebuild cached weights.
    """

    def __init__(self, n_slots: int) -> None:
        self.n_slots = n_slots
        self.plan: RoutingPlan | None = None
        self.epoch = 0

    def set(self, rows: torch.Tensor | None) -> None:
        """rows: (n,) slot per row, values in [0, n_slots] (n_slots = bare base), or None."""
        self.epoch += 1
        if rows is None or bool((rows == self.n_slots).all()):
            self.plan = None
            return
        order = torch.argsort(rows, stable=True)
        sorted_rows = rows[order]
        m = int((rows < self.n_slots).sum())
        used, counts = torch.unique_consecutive(sorted_rows[:m], return_counts=True)
        lora_rows = order[:m]
        contiguous = bool((lora_rows == torch.arange(m, device=rows.device)).all())
        self.plan = RoutingPlan(rows, lora_rows, contiguous, used.tolist(), counts.cumsum(0))


class MultiLoRALinear(nn.Module):
    """A frozen linear layer plus `n_slots` LoRA adapters of rank <= `rank`, routed per row.

    Output for row i routed to slot s: base(x_i) + scaling[s] * (x_i @ A_s^T) @ B_s^T,
    exactly PEFT's LoRA forward with dropout 0. An adapter of lower rank than `rank` is
    stored zero-padded (padded rows of A and columns of B stay zero, and so do their
    gradients), with its own scaling.
    """

    def __init__(self, base: nn.Linear, *, n_slots: int, rank: int, routing: SlotRouting,
                 kernel: str = "auto") -> None:
        super().__init__()
        if n_slots < 1 or rank < 1:
            raise ValueError(f"n_slots and rank must be >= 1, got {n_slots}, {rank}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        self.base = base
        self.base.requires_grad_(False)
        self.in_features = base.in_features
        self.out_features = base.out_features
        self.n_slots = n_slots
        self.rank = rank
        self.routing = routing
        self.kernel = kernel
        dev, dt = base.weight.device, base.weight.dtype
        # The adapters' own weights in at least float32 whatever the base's dtype (as PEFT keeps them):
        # over a bf16 base, an AdamW step of lr 2e-3 on a weight of 0.2 is below bf16's resolution
        # there and would round away. The matmuls still run in the input's dtype (`_stack` casts).
        wdt = torch.promote_types(dt, torch.float32)
        self.lora_A = nn.ParameterList(
            nn.Parameter(torch.zeros(rank, self.in_features, device=dev, dtype=wdt)) for _ in range(n_slots)
        )
        self.lora_B = nn.ParameterList(
            nn.Parameter(torch.zeros(self.out_features, rank, device=dev, dtype=wdt)) for _ in range(n_slots)
        )
        # One scaling per slot plus the zero slot (always 0): alpha / r of the adapter loaded there.
        self.register_buffer("scaling", torch.zeros(n_slots + 1, device=dev, dtype=dt), persistent=False)
        # Plain lists of the same Parameters: ParameterList indexing is slow for per-step checks.
        self._a = list(self.lora_A)
        self._b = list(self.lora_B)
        self._cache_key: tuple | None = None
        self._cache: tuple[torch.Tensor, torch.Tensor] | None = None
        self._grouped: dict[tuple[str, torch.dtype], bool] = {}
        self.siblings: SiblingGroup | None = None  # set by MultiLoRAModel for q/k/v and gate/up

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
        base = self.base
        out = nn.functional.linear(x, base.weight, base.bias)
        plan = self.routing.plan
        if plan is None:
            return out
        n = x.shape[0]
        if x.dim() < 2 or n != plan.rows.shape[0]:
            raise ValueError(f"routing has {plan.rows.shape[0]} rows but the input batch has shape {tuple(x.shape)}")
        x3 = x.reshape(n, -1, self.in_features)
        out3 = out.reshape(n, -1, self.out_features)
        grad = torch.is_grad_enabled() and any(p.requires_grad for p in self._a)
        if self._use_grouped(x):
            if self.siblings is not None:
                delta = self.siblings.delta(self, x, x3, plan, grad)
            else:
                delta = self._grouped_delta(x3, plan, grad)
            rows = plan.lora_rows
        else:
            delta = self._gathered_delta(x3, plan, grad)
            rows = None
        if grad:
            out3 = out3 + delta if rows is None else out3.index_add(0, rows, delta)
        elif rows is None:
            out3 += delta
        elif plan.contiguous:
            out3[: plan.m] += delta
        else:
            out3.index_add_(0, rows, delta)
        return out3.view(out.shape)

    def _use_grouped(self, x: torch.Tensor) -> bool:
        if self.kernel != "auto":
            return self.kernel == "grouped"
        key = (x.device.type, x.dtype)
        if key not in self._grouped:
            self._grouped[key] = grouped_mm_works(x.device, x.dtype)
        return self._grouped[key]

    def _grouped_delta(self, x3: torch.Tensor, plan: RoutingPlan, grad: bool) -> torch.Tensor:
        """LoRA output of the non-base rows, in plan.lora_rows order: (m, T, out)."""
        a, b = self._weights(plan, grad, x3.dtype, "grouped")
        seq = x3.shape[1]
        xl = x3[: plan.m] if plan.contiguous else x3.index_select(0, plan.lora_rows)
        offs = plan.offsets_for(seq)
        h = torch._grouped_mm(xl.reshape(plan.m * seq, self.in_features), a, offs=offs)
        return torch._grouped_mm(h, b, offs=offs).view(plan.m, seq, self.out_features)

    def _gathered_delta(self, x3: torch.Tensor, plan: RoutingPlan, grad: bool) -> torch.Tensor:
        """LoRA output of every row (zeros on base rows): (n, T, out)."""
        a, b = self._weights(plan, grad, x3.dtype, "gather")
        return torch.bmm(torch.bmm(x3, a), b)

    def _weights(self, plan: RoutingPlan, grad: bool, dtype: torch.dtype, kernel: str
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """A^T and scaled B^T stacked per used slot (grouped) or per row (gather); cached without grad."""
        if grad:
            self._cache = None
            return self._stack(plan, dtype, kernel)
        key = (self.routing.epoch, dtype, kernel, [p._version for p in self._a], [p._version for p in self._b],
               self.scaling._version)
        if self._cache is None or self._cache_key != key:
            with torch.no_grad():
                a, b = self._stack(plan, dtype, kernel)
            self._cache = (a.contiguous(), b.contiguous())
            self._cache_key = key
        return self._cache

    def _stack(self, plan: RoutingPlan, dtype: torch.dtype, kernel: str) -> tuple[torch.Tensor, torch.Tensor]:
        if kernel == "grouped":
            idx = plan.used
            a = torch.stack([self._a[s] for s in idx])  # (U, r, in)
            b = torch.stack([self._b[s] for s in idx])  # (U, out, r)
            scale = self.scaling[idx]
        else:  # every slot plus the zero slot, then one entry per row
            a = torch.cat([torch.stack(self._a), self._a[0].new_zeros(1, self.rank, self.in_features)])
            b = torch.cat([torch.stack(self._b), self._b[0].new_zeros(1, self.out_features, self.rank)])
            a, b, scale = a[plan.rows], b[plan.rows], self.scaling[plan.rows]
        return a.transpose(1, 2).to(dtype), (b.transpose(1, 2) * scale.view(-1, 1, 1)).to(dtype)


class SiblingGroup:
    """Layers the model calls on the SAME input tensor (q/k/v; gate/up), fused for LoRA.

    Why: at decode time on small models each LoRA matmul costs mostly its launch. The first
    member called computes every member's LoRA output at once -- A's concatenated into one
    grouped matmul, B's as one block-diagonal grouped matmul -- and the others pick up
    their slice: a Llama decoder layer launches 8 LoRA matmuls instead of 14. Safe by
    construction: a member uses a slice only when called with the very tensor object the
    group computed for, under the same routing; otherwise it computes alone.
    """

    def __init__(self, members: list[MultiLoRALinear]) -> None:
        self.members = members
        self.splits = [m.out_features for m in members]
        self.total_out = sum(self.splits)
        self._x: torch.Tensor | None = None
        self._epoch = -1
        self._pending: dict[int, torch.Tensor] = {}
        self._cache_key: tuple | None = None
        self._cache: tuple[torch.Tensor, torch.Tensor] | None = None

    def delta(self, layer: MultiLoRALinear, x: torch.Tensor, x3: torch.Tensor, plan: RoutingPlan,
              grad: bool) -> torch.Tensor:
        """`layer`'s LoRA output for the non-base rows (m, T, out), as _grouped_delta returns it."""
        mine = self._pending.pop(id(layer), None)
        if mine is not None and self._x is x and self._epoch == layer.routing.epoch:
            if not self._pending:
                self._x = None
            return mine
        a, b = self._weights(layer, plan, grad, x3.dtype)
        seq = x3.shape[1]
        xl = x3[: plan.m] if plan.contiguous else x3.index_select(0, plan.lora_rows)
        offs = plan.offsets_for(seq)
        h = torch._grouped_mm(xl.reshape(plan.m * seq, layer.in_features), a, offs=offs)
        parts = torch._grouped_mm(h, b, offs=offs).view(plan.m, seq, self.total_out).split(self.splits, dim=-1)
        self._pending = {id(m): p for m, p in zip(self.members, parts) if m is not layer}
        self._x, self._epoch = x, layer.routing.epoch
        return parts[self.members.index(layer)]

    def _weights(self, layer: MultiLoRALinear, plan: RoutingPlan, grad: bool, dtype: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        if grad:
            self._cache = None
            return self._stack(plan, dtype)
        key = (layer.routing.epoch, dtype, *([p._version for p in m._a + m._b] for m in self.members),
               *(m.scaling._version for m in self.members))
        if self._cache is None or self._cache_key != key:
            with torch.no_grad():
                a, b = self._stack(plan, dtype)
            self._cache, self._cache_key = (a.contiguous(), b.contiguous()), key
        return self._cache

    def _stack(self, plan: RoutingPlan, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """A^T of all members side by side (U, in, sum r) and B^T block-diagonal (U, sum r, sum out)."""
        pieces = [m._stack(plan, dtype, "grouped") for m in self.members]
        a = torch.cat([p[0] for p in pieces], dim=2)
        blocks, start = [], 0
        for (_, b), width in zip(pieces, self.splits):
            blocks.append(nn.functional.pad(b, (start, self.total_out - start - width)))
            start += width
        return a, torch.cat(blocks, dim=1)


def peft_init_(a: torch.Tensor, b: torch.Tensor, generator: torch.Generator) -> None:
    """PEFT's default LoRA init: A kaiming-uniform (a=sqrt(5)), B zeros, so a new adapter is the base."""
    with torch.no_grad():
        nn.init.kaiming_uniform_(a, a=math.sqrt(5), generator=generator)
        b.zero_()
