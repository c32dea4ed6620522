"""Mutations: one parent adapter in, one child out.

Each is a pure function ``(parent, strength, seed) -> child`` (seed: int or a CPU
torch.Generator), reproducible for a given seed, with ``strength = 0`` returning the
parent bit-for-bit (each perturbation enters as an exactly-zero term). All preserve
keys, shapes, dtypes and devices and give rank <= r (the child still has r columns).
The docstrings say what else each one preserves, measured on the module's delta B A.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from evolution.batching import ModuleSet, as_generator, rand, randn, stack_small
from evolution.errors import EvolutionError
from evolution.lora import StateDict
from evolution.lowrank import gram, row_gram, spectrum_transform, tilt_transform

Seed = int | torch.Generator


def _check_strength(strength: float, upper: float | None = None) -> float:
    strength = float(strength)
    if not strength >= 0 or (upper is not None and strength > upper):
        bound = f"in [0, {upper}]" if upper is not None else ">= 0"
        raise EvolutionError(f"strength must be {bound}, got {strength}")
    return strength


def gaussian(parent: Mapping[str, torch.Tensor], strength: float, seed: Seed = 0) -> StateDict:
    """Add i.i.d. noise of std ``strength * RMS(tensor)`` to each factor of each module.

    Scaling by each tensor's own RMS makes one strength mean the same relative change for
    A (O(1/sqrt(in)) after Kaiming init) and B (zero at init, small after training): a
    zero B stays zero. Preserves: shapes; the norm, in expectation, up to a factor
    sqrt(1 + strength^2). Changes: singular values and both subspaces, isotropically.
    """
    strength = _check_strength(strength)
    g = as_generator(seed)
    modules = ModuleSet([parent])
    new = []
    for a, b in modules.factors(0):
        pair = []
        for x in (a, b):
            noise = randn(x.shape, g, x)
            noise.mul_(strength * x.square().mean().sqrt())
            pair.append(noise.add_(x))
        new.append((pair[0], pair[1]))
    return modules.child(new)


def _rescale_spectrum(parent: Mapping[str, torch.Tensor], draw: Callable[[int, int], torch.Tensor]) -> StateDict:
    """Child whose modules' singular values are multiplied by ``draw(n_modules, r)``; A kept."""
    modules = ModuleSet([parent])
    factors = modules.factors(0)
    new: list = [None] * len(factors)
    for idx in modules.rank_groups():
        gb = stack_small([gram(factors[i][1]) for i in idx])
        ga = stack_small([row_gram(factors[i][0]) for i in idx])
        transform = spectrum_transform(gb, ga, draw(len(idx), gb.shape[-1]).to(gb.device))
        for j, i in enumerate(idx):
            a, b = factors[i]
            out = b @ transform[j].to(b)
            new[i] = (a.clone(), out.add_(b))
    return modules.child(new)


def sv_perturb(parent: Mapping[str, torch.Tensor], strength: float, seed: Seed = 0) -> StateDict:
    """Multiply each singular value of each module's B A by ``exp(strength * N(0, 1))``.

    Done through QR of the factors (from r x r Grams) and the SVD of the r x r core
    (lowrank.py), never a full-size SVD; only B changes. Preserves exactly: A, both
    singular subspaces and their pairing, rank. Changes: the spectrum (log-normally,
    median factor 1), hence the norm. The multiplicative form keeps signs and never
    revives a zero singular value.
    """
    strength = _check_strength(strength)
    g = as_generator(seed)
    return _rescale_spectrum(parent, lambda n, r: torch.exp(strength * torch.randn(n, r, generator=g)))


def mask(parent: Mapping[str, torch.Tensor], strength: float, seed: Seed = 0) -> StateDict:
    """Drop each rank component of each module's B A with probability ``strength``.

    Components are those of the SVD basis, not the factor basis: B[:, i] A[i, :] terms
    are not orthogonal and depend on an arbitrary r x r change of basis, so dropping one
    changes the delta by an unpredictable amount; SVD components are orthogonal, so the
    delta loses exactly the energy ``sum of dropped s_i^2``. Only B changes.
    Preserves exactly: A, the kept components (singular values and vectors).
    Changes: rank (down by the number dropped), norm (down).
    """
    strength = _check_strength(strength, upper=1.0)
    g = as_generator(seed)
    return _rescale_spectrum(parent, lambda n, r: (rand((n, r), g) >= strength).double())


def _random_directions(factors: list, side_index: int, g: torch.Generator) -> list[torch.Tensor]:
    """Per module, r random Gaussian directions in the side's ambient space, as rows (r x d).

    Rows, so that no transposed copy of a factor is ever made (matmul reads transposes
    for free). One Gaussian block is drawn per (r, d) shape and each module gets it with
    its own random permutation of the d coordinates: a permutation of i.i.d. Gaussian
    entries is again i.i.d. Gaussian, and a permutation costs a quarter of fresh normals
    (18.5M normals were ~40% of this operator's time on a 1.5B-sized adapter).
    """
    blocks: dict[tuple, torch.Tensor] = {}
    out = []
    for f in factors:
        x = f[side_index]
        shape = (f[1].shape[-1], x.shape[side_index ^ 1])
        key = (shape, x.dtype, x.device)
        if key not in blocks:
            blocks[key] = randn(shape, g, x)
        perm = torch.randperm(shape[1], generator=g).to(x.device)
        out.append(blocks[key].index_select(1, perm))
    return out


def rotate(parent: Mapping[str, torch.Tensor], strength: float, seed: Seed = 0, side: str = "both") -> StateDict:
    """Tilt each module's left (column space of B) and/or right (row space of A) subspace.

    The rotation is an orthogonal matrix of the ambient out- (or in-) space, a Cayley
    transform close to identity that mixes the r current directions with r random
    orthogonal ones; each direction turns by about ``strength`` radians, so B A becomes
    ``G B A H^T``. Preserves: singular values (so the delta's norm and rank) and the
    Frobenius norms of A and B, to float rounding. Changes: the subspaces. (Rotating A
    by R and B by R^T, an r x r change of basis, would leave B A unchanged: not a
    mutation at all.) ``side`` is "left", "right" or "both".
    """
    strength = _check_strength(strength)
    if side not in ("left", "right", "both"):
        raise EvolutionError(f"side must be 'left', 'right' or 'both', got {side!r}")
    g = as_generator(seed)
    modules = ModuleSet([parent])
    factors = modules.factors(0)
    new = [[a, b] for a, b in factors]
    for side_index in [i for i, wanted in ((1, side != "right"), (0, side != "left")) if wanted]:
        noise = _random_directions(factors, side_index, g)
        for idx in modules.rank_groups():
            r = noise[idx[0]].shape[0]
            # Cayley(K) ~ I + 2K: entries N(0, 1) * strength / (2 sqrt r) turn each unit
            # direction by ~strength radians.
            coupling = torch.randn(len(idx), r, r, generator=g).double() * (strength / (2 * r**0.5))
            # Grams of the columns X (B, or A^T) and Z (noise^T). X^T X is float64 (its small
            # directions matter); Gaussian Z is well conditioned, float32 suffices there.
            if side_index == 1:
                gxx = [gram(factors[i][1]) for i in idx]
                gxz = [(noise[i] @ factors[i][1]).mT.double() for i in idx]
            else:
                gxx = [row_gram(factors[i][0]) for i in idx]
                gxz = [(factors[i][0] @ noise[i].mT).double() for i in idx]
            gzz = [(noise[i] @ noise[i].mT).double() for i in idx]
            w = tilt_transform(stack_small(gxx), stack_small(gxz), stack_small(gzz), coupling)
            for j, i in enumerate(idx):
                x, z = factors[i][side_index], noise[i]
                wx, wz = w[j, :r].to(x), w[j, r:].to(x)
                if side_index == 1:  # B' = B + B wx + Z wz
                    tilted = (x @ wx).addmm_(z.mT, wz)
                else:  # A'^T = A^T + A^T wx + Z wz
                    tilted = (wx.mT @ x).addmm_(wz.mT, z)
                new[i][side_index] = tilted.add_(x)
                noise[i] = None  # free as we go
    # A side left alone is still the parent's own tensor: the child gets a copy.
    return modules.child(
        [(a.clone() if a is f[0] else a, b.clone() if b is f[1] else b) for (a, b), f in zip(new, factors)]
    )
