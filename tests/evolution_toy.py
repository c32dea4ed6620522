"""A small real learning problem for the retention tests: a 3-layer tanh network whose
frozen base weights are adapted by rank-4 LoRA factors in PEFT's layout, trained by Adam
on a regression stream towards a teacher network (base + fixed low-rank deltas).

Reward = 1 - MSE(adapter) / MSE(bare base) on a fixed held-out set: 0 for the bare base,
1 for a perfect student, so retention levels are plain ratios.
"""

from __future__ import annotations

import math

import torch

DIMS = (24, 32, 32, 16)  # in -> hidden -> hidden -> out
RANK = 4
NAMES = ("model.layers.0.mlp.up_proj", "model.layers.1.mlp.up_proj", "model.layers.2.mlp.down_proj")


class ToyProblem:
    def __init__(self, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.base = [torch.randn(o, i, generator=g) / math.sqrt(i) for i, o in zip(DIMS[:-1], DIMS[1:])]
        self.teacher = [
            w + 0.8 * (torch.randn(w.shape[0], RANK, generator=g) @ torch.randn(RANK, w.shape[1], generator=g)) / math.sqrt(w.shape[1] * RANK)
            for w in self.base
        ]
        self.eval_x = torch.randn(512, DIMS[0], generator=g)
        self.eval_y = self._forward(self.teacher, self.eval_x)
        self.base_mse = float((self._forward(self.base, self.eval_x) - self.eval_y).square().mean())

    @staticmethod
    def _forward(weights: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        for i, w in enumerate(weights):
            x = x @ w.T
            if i < len(weights) - 1:
                x = torch.tanh(x)
        return x

    def weights(self, adapter: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return [w + adapter[f"{n}.lora_B.weight"] @ adapter[f"{n}.lora_A.weight"] for w, n in zip(self.base, NAMES)]

    def init_adapter(self, seed: int) -> dict[str, torch.Tensor]:
        """PEFT's initialisation: A Kaiming-uniform (bound 1/sqrt(in)), B zero."""
        g = torch.Generator().manual_seed(seed)
        adapter = {}
        for w, n in zip(self.base, NAMES):
            bound = 1 / math.sqrt(w.shape[1])
            adapter[f"{n}.lora_A.weight"] = (torch.rand(RANK, w.shape[1], generator=g) * 2 - 1) * bound
            adapter[f"{n}.lora_B.weight"] = torch.zeros(w.shape[0], RANK)
        return adapter

    def reward(self, adapter) -> float:
        with torch.no_grad():
            mse = float((self._forward(self.weights(adapter), self.eval_x) - self.eval_y).square().mean())
        return 1 - mse / self.base_mse

    def trainer(self, lr: float = 1e-2, batch: int = 64, seed: int = 1):
        """An `update(adapter, step)` with its own Adam state, started fresh (the
        'reset' optimiser policy) on the first adapter it sees."""
        g = torch.Generator().manual_seed(seed)
        state: dict = {}

        def update(adapter: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
            if state.get("adapter") is not adapter:
                adapter = {k: v.detach().clone().requires_grad_(True) for k, v in adapter.items()}
                state["adapter"] = adapter
                state["opt"] = torch.optim.Adam(list(adapter.values()), lr=lr)
            x = torch.randn(batch, DIMS[0], generator=g)
            loss = (self._forward(self.weights(adapter), x) - self._forward(self.teacher, x)).square().mean()
            state["opt"].zero_grad()
            loss.backward()
            state["opt"].step()
            return adapter

        return update

    def train(self, adapter: dict[str, torch.Tensor], steps: int, seed: int = 1, lr: float = 1e-2) -> dict[str, torch.Tensor]:
        update = self.trainer(lr=lr, seed=seed)
        for i in range(steps):
            adapter = update(adapter, i)
        return {k: v.detach().clone() for k, v in adapter.items()}
