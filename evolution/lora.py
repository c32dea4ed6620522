"""The LoRA state dict convention every operator works on (PEFT's).

A PEFT adapter stores, per adapted linear layer ("module"), two tensors:

    <prefix>.lora_A[.<adapter>].weight   shape (r, in)
    <prefix>.lora_B[.<adapter>].weight   shape (out, r)

(saved files have no ``.<adapter>`` part; a live PeftModel's state dict has it). A
module is named by its prefix.
and the layer computes ``W x + scale * B A x`` with ``scale = lora_alpha / r`` (or
``lora_alpha / sqrt(r)`` for rsLoRA). Every operator in this package acts on the product
``B A``: parent and child share one adapter config, so ``scale`` multiplies parent and
child deltas alike and cancels out of every operation (an interpolation of
``scale*dW1`` and ``scale*dW2`` is ``scale`` times the interpolation of ``dW1`` and
``dW2``). Only absolute distances carry the factor, hence the optional ``scale`` below.

Keys that are not LoRA factors (e.g. ``modules_to_save`` copies) are passed through from
the first parent unchanged: the operators have no meaning for them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from evolution.errors import EvolutionError

StateDict = dict[str, torch.Tensor]

_LORA_KEY = re.compile(r"^(?P<prefix>.+)\.lora_(?P<factor>[AB])(?P<adapter>\.[^.]+)?\.weight$")


@dataclass(frozen=True)
class LoraModule:
    """One adapted layer: its name (the key prefix) and the keys of its two factors."""

    name: str
    a_key: str
    b_key: str


def lora_modules(state: Mapping[str, torch.Tensor]) -> list[LoraModule]:
    """The LoRA modules of a state dict, in the order their A keys appear.

    Raises EvolutionError when a module lacks one factor, a factor is not 2-D, or the
    A and B ranks disagree: the operators would silently produce garbage otherwise.
    """
    a_keys: dict[str, str] = {}
    b_keys: dict[str, str] = {}
    for key in state:
        match = _LORA_KEY.match(key)
        if match is None:
            continue
        name = match["prefix"]
        keys = a_keys if match["factor"] == "A" else b_keys
        if name in keys:
            raise EvolutionError(
                f"{name}: several LoRA adapters in one state dict ({keys[name]!r} and {key!r}); "
                "pass one adapter's tensors"
            )
        keys[name] = key
    if a_keys.keys() != b_keys.keys():
        missing = sorted(set(a_keys) ^ set(b_keys))
        raise EvolutionError(f"LoRA modules with only one of lora_A/lora_B: {missing[:5]}")
    modules = []
    for name, a_key in a_keys.items():
        module = LoraModule(name, a_key, b_keys[name])
        a, b = state[module.a_key], state[module.b_key]
        if a.dim() != 2 or b.dim() != 2:
            raise EvolutionError(
                f"{name}: LoRA factors must be 2-D, got A {tuple(a.shape)} and B {tuple(b.shape)}"
            )
        if a.shape[0] != b.shape[1]:
            raise EvolutionError(
                f"{name}: rank mismatch, A is {tuple(a.shape)} (r, in) but B is {tuple(b.shape)} (out, r)"
            )
        modules.append(module)
    return modules


def group_modules(state: Mapping[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{module name: (A, B)} for every LoRA module; the tensors are the state dict's own."""
    return {m.name: (state[m.a_key], state[m.b_key]) for m in lora_modules(state)}


def ungroup_modules(
    modules: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    template: Mapping[str, torch.Tensor] | None = None,
) -> StateDict:
    """The inverse of `group_modules`.

    With a template (the state dict the modules came from) the result has the template's
    key names and order and its non-LoRA entries; each factor is cast to the template's
    dtype and device. Without one, keys follow PEFT's saved form ``<name>.lora_A.weight``.
    """
    if template is None:
        out: StateDict = {}
        for name, (a, b) in modules.items():
            out[f"{name}.lora_A.weight"] = a
            out[f"{name}.lora_B.weight"] = b
        return out
    layout = {m.name: m for m in lora_modules(template)}
    if layout.keys() != modules.keys():
        raise EvolutionError(
            f"modules do not match the template: {sorted(set(layout) ^ set(modules))[:5]}"
        )
    out = {}
    for key, value in template.items():
        out[key] = value
    for name, (a, b) in modules.items():
        m = layout[name]
        out[m.a_key] = a.to(dtype=template[m.a_key].dtype, device=template[m.a_key].device)
        out[m.b_key] = b.to(dtype=template[m.b_key].dtype, device=template[m.b_key].device)
    return out


def check_compatible(states: list[Mapping[str, torch.Tensor]]) -> list[LoraModule]:
    """The shared module layout of several parents; EvolutionError if they differ.

    Crossovers combine module by module, so parents must adapt the same modules with the
    same shapes (same base, target modules and rank).
    """
    modules = lora_modules(states[0])
    for i, other in enumerate(states[1:], start=2):
        for m in modules:
            for key in (m.a_key, m.b_key):
                if key not in other:
                    raise EvolutionError(f"parent {i} lacks key {key!r} that parent 1 has")
                if other[key].shape != states[0][key].shape:
                    raise EvolutionError(
                        f"{key}: parent {i} has shape {tuple(other[key].shape)}, "
                        f"parent 1 has {tuple(states[0][key].shape)}"
                    )
        if len(lora_modules(other)) != len(modules):
            raise EvolutionError(f"parent {i} has LoRA modules that parent 1 lacks")
    if not modules:
        raise EvolutionError("state dict has no LoRA modules (no '*.lora_A.weight' keys)")
    return modules


def delta_weight(a: torch.Tensor, b: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """The full-size update ``scale * B A`` of one module (for tests and small layers)."""
    return scale * (b.to(torch.float64) @ a.to(torch.float64))


def delta_distance(
    first: Mapping[str, torch.Tensor], second: Mapping[str, torch.Tensor], scale: float = 1.0
) -> float:
    """Frobenius distance between two adapters' full deltas, summed over modules.

    Computed from r x r Gram matrices, never materialising an out x in delta:
    ``||B1A1 - B2A2||^2 = tr(B1'B1 A1A1') - 2 tr(B1'B2 A2A1') + tr(B2'B2 A2A2')``.
    """
    total = 0.0
    for m in check_compatible([first, second]):
        a1, b1 = first[m.a_key].double(), first[m.b_key].double()
        a2, b2 = second[m.a_key].double().to(a1.device), second[m.b_key].double().to(a1.device)
        sq = (
            torch.trace((b1.T @ b1) @ (a1 @ a1.T))
            - 2 * torch.trace((b1.T @ b2) @ (a2 @ a1.T))
            + torch.trace((b2.T @ b2) @ (a2 @ a2.T))
        )
        total += max(float(sq), 0.0)
    return abs(scale) * total**0.5


def delta_norm(state: Mapping[str, torch.Tensor], scale: float = 1.0) -> float:
    """Frobenius norm of an adapter's full delta over all modules (low-rank computation)."""
    total = 0.0
    for m in lora_modules(state):
        a, b = state[m.a_key].double(), state[m.b_key].double()
        total += float(torch.trace((b.T @ b) @ (a @ a.T)))
    return abs(scale) * max(total, 0.0) ** 0.5


def load_lora(path: str | Path) -> StateDict:
    """Read an ``adapter_model.safetensors`` file (PEFT's saved form) onto the CPU."""
    path = Path(path)
    if not path.is_file():
        raise EvolutionError(f"{path}: no such adapter file")
    state = load_file(str(path))
    lora_modules(state)
    return state


def save_lora(state: Mapping[str, torch.Tensor], path: str | Path) -> None:
    """Write a state dict as safetensors (contiguous CPU copies, as the format requires)."""
    save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(path))
