"""Per-module full-size work, all-module batched small algebra.

Every operator splits into (1) products with the full-size factors (Grams ``B^T B``,
``A A^T`` and the child's factors ``B @ T``), done module by module directly on the
parents' tensors, so the only full-size allocations are the child's own tensors; and
(2) r x r algebra (eigh, SVD, Cayley), batched over all modules of one rank whatever
their in/out sizes. Stacking full-size factors instead costs a copy of every parent and,
on a CPU, page faults on hundreds of MB of fresh memory: measured 2-3x slower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from evolution.lora import LoraModule, StateDict, check_compatible


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else (fp32, bf16, fp16) is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def as_generator(seed: int | torch.Generator) -> torch.Generator:
    """A CPU generator from a seed, or the caller's own generator (used as is)."""
    if isinstance(seed, torch.Generator):
        return seed
    generator = torch.Generator()
    generator.manual_seed(int(seed))
    return generator


def randn(shape: Sequence[int], generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Standard normals drawn in float32 on the CPU generator, then cast and moved to
    `like`: the same numbers on any device (float64 normals also cost 4x float32 ones)."""
    return torch.randn(tuple(shape), generator=generator).to(dtype=like.dtype, device=like.device)


def rand(shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
    """Uniform [0, 1) draws (float32) on the CPU generator."""
    return torch.rand(tuple(shape), generator=generator)


class ModuleSet:
    """The parents' modules, their factors in compute dtype, and the child's assembly.

    ``factors(p)[i]`` is parent p's (A, B) of module i, converted to the compute dtype
    (no copy for float32/float64 adapters). ``child(new)`` returns a state dict with
    parent 1's keys, order, dtypes and devices, taking module i's factors from new[i].
    """

    def __init__(self, parents: Sequence[Mapping[str, torch.Tensor]]):
        self.parents = list(parents)
        self.modules: list[LoraModule] = check_compatible(self.parents)
        self._factors: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def factors(self, parent: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if parent not in self._factors:
            self._factors[parent] = self._convert(parent)
        return self._factors[parent]

    def _convert(self, parent: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        state = self.parents[parent]
        first = self.parents[0]
        out = []
        for m in self.modules:
            a, b = first[m.a_key], first[m.b_key]
            work = compute_dtype(a.dtype)
            # detach: parents may be live trainable parameters; children carry no graph.
            out.append((
                state[m.a_key].detach().to(dtype=work, device=a.device),
                state[m.b_key].detach().to(dtype=work, device=b.device),
            ))
        return out

    def rank_groups(self) -> list[list[int]]:
        """Module indices bucketed by rank, first-appearance order (r x r algebra batches)."""
        buckets: dict[int, list[int]] = {}
        for i, m in enumerate(self.modules):
            buckets.setdefault(self.parents[0][m.a_key].shape[0], []).append(i)
        return list(buckets.values())

    def child(self, new: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> StateDict:
        first = self.parents[0]
        lora = {m.a_key: (i, 0) for i, m in enumerate(self.modules)} | {
            m.b_key: (i, 1) for i, m in enumerate(self.modules)
        }
        out: StateDict = {}
        for key, value in first.items():
            if key not in lora:
                out[key] = value.detach().clone()
                continue
            i, which = lora[key]
            tensor = new[i][which]
            out[key] = tensor.to(value.dtype) if tensor.dtype != value.dtype else tensor
        return out


def stack_small(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack small (r x r) per-module tensors onto the first one's device."""
    device = tensors[0].device
    return torch.stack([t.to(device) for t in tensors])
