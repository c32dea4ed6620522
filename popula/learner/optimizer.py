"""`PopulationOptimizer`: every adapter's AdamW and gradient clip, stepped as one.

Why: each adapter keeps its own AdamW state (moments, step count) and its own norm clip,
but stepping one optimiser per adapter launches every kernel once per adapter over tensors
that are tiny (LoRA A and B), and on a GPU the learn phase becomes launch-bound. Here the
whole population goes through one foreach norm, one foreach scale and one foreach AdamW.
Each number is what the adapter's own optimiser would compute: AdamW is element-wise and
keeps a step count per tensor, so its bias corrections stay per adapter, and each
adapter's clip uses the norm of its own gradients alone.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn


class PopulationOptimizer:
    """One AdamW over the parameters of every slot; state is per tensor, so per adapter.

    A parameter with no gradient is not stepped (AdamW skips it), so an adapter without
    rollouts this step, or one whose update was skipped, keeps its weights and moments.
    `reset`/`forget` drop one adapter's moments (a new adapter in a slot must not inherit
    the last one's); `state_of` and `reset(state=...)` exchange one adapter's state in the
    format of `torch.optim.AdamW.state_dict()` over its parameters, which checkpoints hold.
    """

    def __init__(self, params: Sequence[nn.Parameter], *, lr: float, weight_decay: float) -> None:
        self.lr, self.weight_decay = lr, weight_decay
        self._adamw = self._adamw_over(params)

    def _adamw_over(self, params: Sequence[nn.Parameter]) -> torch.optim.AdamW:
        # foreach: one kernel per moment update for all the tensors in the list.
        return torch.optim.AdamW(list(params), lr=self.lr, weight_decay=self.weight_decay, foreach=True)

    def reset(self, params: Sequence[nn.Parameter], state: Mapping[str, Any] | None = None) -> None:
        """Fresh moments for these parameters (one adapter's), or the given AdamW state_dict."""
        self.forget(params)
        if state is None:
            return
        own = self._adamw_over(params)
        own.load_state_dict(copy.deepcopy(dict(state)))  # casts the moments to each parameter's device
        for p in params:
            if p in own.state:
                self._adamw.state[p] = own.state[p]

    def forget(self, params: Sequence[nn.Parameter]) -> None:
        """Drop these parameters' moments and step counts."""
        for p in params:
            self._adamw.state.pop(p, None)

    def state_of(self, params: Sequence[nn.Parameter]) -> dict[str, Any]:
        """A deep copy of these parameters' state, as an AdamW over them alone would save it."""
        own = self._adamw_over(params)
        own.state.update({p: self._adamw.state[p] for p in params if p in self._adamw.state})
        return copy.deepcopy(own.state_dict())

    @torch.no_grad()
    def clip_grad_norms(self, groups: Mapping[str, Sequence[nn.Parameter]], max_norm: float | None) -> dict[str, float]:
        """Each group's gradient norm (2-norm over its tensors), then its gradients scaled to at most
        `max_norm` (None: not scaled), as `torch.nn.utils.clip_grad_norm_` does group by group.

        The per-tensor norms are one foreach call; groups of equal size (the adapters of one
        learner) get their totals and clip coefficients as one (groups, tensors) reduction."""
        grads = {name: [p.grad for p in params if p.grad is not None] for name, params in groups.items()}
        flat = [g for gs in grads.values() for g in gs]
        if not flat:
            return {name: 0.0 for name in groups}
        sizes = [len(gs) for gs in grads.values()]
        norms = torch.stack(torch._foreach_norm(flat, 2))
        if min(sizes) == max(sizes):
            totals = torch.linalg.vector_norm(norms.view(len(sizes), sizes[0]), 2, dim=1)
        else:
            totals = torch.stack([torch.linalg.vector_norm(part, 2) for part in norms.split(sizes)])
        if max_norm is not None:
            coef = torch.clamp(max_norm / (totals + 1e-6), max=1.0)
            for i, gs in enumerate(grads.values()):  # one launch per group: a list of scalars is one per tensor on CUDA
                if gs:
                    torch._foreach_mul_(gs, coef[i])
        return dict(zip(grads, totals.tolist()))  # one device sync for every group

    def step(self, lr: float | None = None) -> None:
        """One AdamW update of every parameter that has a gradient, at rate `lr` (None: the
        rate it was built with). The rate is this step's alone: the next step names its own."""
        for group in self._adamw.param_groups:
            group["lr"] = self.lr if lr is None else lr
        self._adamw.step()
