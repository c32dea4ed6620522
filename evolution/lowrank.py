"""Low-rank linear algebra on products B A, never at full size.

The SVD of ``B A`` (B: out x k, A: k x in) is that of the k x k core ``Rb Ra^T``, where
``B = Qb Rb`` and ``A^T = Qa Ra`` are QR factorisations: ``B A = (Qb Uc) S (Vhc Qa^T)``.
We take the R factors from the k x k Gram matrices (``Rb^T Rb = B^T B``: Cholesky-QR, with
an eigendecomposition instead where the Gram is singular, so that rank-deficient factors
such as PEFT's zero-initialised B work) and never form Qb or Qa: each result is a small k x k transform
of the factors (``U = B @ left``, ``Vh = right @ A``). The full-size work is one Gram per
factor and one product per child factor, both BLAS-3; Householder QR of tall 8960 x 16
factors measured several times slower on CPU.

Grams and all small algebra are float64: a Gram squares the condition number, and
float64 has that accuracy to spare for float32 (or bf16) adapters. The price is that
float64 adapters get about 1e-8 relative accuracy (half of float64's digits), still
ten times finer than float32 rounding. Functions taking
Grams work on batches (n, k, k), one entry per module.
"""

from __future__ import annotations

import torch

_NULL_TOL = 1e-12
"""Gram eigenvalues below this fraction of the largest count as zero (singular values
below 1e-6 of the largest: under the resolution of float32 factors)."""


_COMPLEMENT_TOL = 1e-5
"""Directions of random Z orthogonal to col(X) with less than this fraction of Z's energy
are treated as absent (see `tilt_transform`): above float32 rounding, far below the energy
of a genuine direction (about 1/r of it)."""


def gram(x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
    """``X^T Y`` (``X^T X`` without y) of 2-D factors, in float64: the Gram of B's columns."""
    x64 = x.double()
    return x64.mT @ (x64 if y is None else y.double())


def row_gram(x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
    """``X Y^T`` (``X X^T`` without y) in float64: the Gram of A's rows, no transposed copy."""
    x64 = x.double()
    return x64 @ (x64 if y is None else y.double()).mT


def gram_root(g: torch.Tensor, floor: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, R+) with ``R^T R = G`` and R+ the pseudo-inverse of R, for PSD Grams (n, k, k).

    ``X R+`` is then an orthonormal basis of col(X), with exactly-zero columns for the
    directions X does not span, without ever forming it. Any such R serves every caller
    here (they use R and R+ together), so well-conditioned Grams take the Cholesky root
    (``R = L^T``), 10-15x faster than an eigendecomposition on CPU; singular or nearly
    singular ones (zero-initialised B, identical parents stacked) take the eigen root,
    where eigenvalues up to ``floor`` (n,) count as zero (by default a tiny fraction of
    the largest one).
    """
    chol, info = torch.linalg.cholesky_ex(g)
    eye = torch.eye(g.shape[-1], dtype=g.dtype, device=g.device).expand_as(g)
    chol_inv = torch.linalg.solve_triangular(chol, eye, upper=False)
    # cond(G) <= ||G||_F ||G^-1||_F = ||G||_F ||L^-1||_F^2: a cheap, safe bound.
    cond = torch.linalg.matrix_norm(g) * chol_inv.square().sum(dim=(-2, -1))
    good = (info == 0) & torch.isfinite(cond) & (cond < 1 / _NULL_TOL)
    if floor is not None:
        good &= torch.linalg.matrix_norm(g) / cond > floor  # ||G|| / cond bounds the smallest eigenvalue
    root, root_pinv = chol.mT.clone(), chol_inv.mT.clone()
    bad = (~good).nonzero().squeeze(-1)
    if bad.numel():
        root[bad], root_pinv[bad] = _eigen_root(g[bad], None if floor is None else floor[bad])
    return root, root_pinv


def _eigen_root(g: torch.Tensor, floor: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """`gram_root` through eigh: R = diag(sqrt(l)) E^T, R+ = E diag(1/sqrt(l)) on l > floor."""
    evals, evecs = torch.linalg.eigh(g)
    evals = evals.clamp_min(0)
    floor = evals.amax(dim=-1, keepdim=True) * _NULL_TOL if floor is None else floor.unsqueeze(-1)
    root = evals.sqrt()
    inv_root = torch.where(evals > floor, 1 / root.clamp_min(torch.finfo(root.dtype).tiny), torch.zeros_like(root))
    return root.unsqueeze(-1) * evecs.mT, evecs * inv_root.unsqueeze(-2)


def svd_from_grams(gb: torch.Tensor, ga: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SVD of a product B A known through its Grams ``B^T B`` and ``A A^T`` (n, k, k).

    Returns (S (n, k) descending, left (n, k, k), right (n, k, k)) with
    ``B A = (B left) diag(S) (right A)``, ``B left`` having orthonormal columns and
    ``right A`` orthonormal rows (where S > 0).
    """
    rb, rb_pinv = gram_root(gb)
    ra, ra_pinv = gram_root(ga)
    uc, s, vhc = torch.linalg.svd(rb @ ra.mT)
    return s, rb_pinv @ uc, vhc @ ra_pinv.mT


def spectrum_transform(gb: torch.Tensor, ga: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """T (n, k, k) with ``(B + B T) A = U diag(factors * S) Vh``: A is left as it is.

    With ``B A = Qb C Qa^T`` and ``C = Uc S Vhc``, left-multiplying the core by
    ``M = Uc diag(f) Uc^T`` scales its singular values by f and keeps its singular vectors;
    since ``C = Rb Ra^T``, only B changes: ``B' = B + Qb (M - I) Rb = B + B Rb+ (M - I) Rb``.
    ``factors == 1`` gives T = 0 exactly, so B comes back bit-for-bit.
    """
    rb, rb_pinv = gram_root(gb)
    ra, _ = gram_root(ga)
    uc, _, _ = torch.linalg.svd(rb @ ra.mT)
    m_minus_i = (uc * (factors.to(uc.dtype) - 1).unsqueeze(-2)) @ uc.mT
    return rb_pinv @ m_minus_i @ rb


def a_row_scale(row_gram_a: torch.Tensor) -> torch.Tensor:
    """Root-mean-square row norm of each A, from its Gram ``A A^T`` (n, k, k); shape (n,).

    Re-factorised children get A rows of this norm (orthogonal directions), matching the
    parents' A: after PEFT's Kaiming init and training, A carries most of the factor
    magnitude, and a child with a tiny A would learn slowly (B's gradient is proportional
    to A).
    """
    return row_gram_a.diagonal(dim1=-2, dim2=-1).mean(dim=-1).clamp_min(0).sqrt()


def cayley(k: torch.Tensor) -> torch.Tensor:
    """Exactly orthogonal ``(I - K)^-1 (I + K)`` for skew-symmetric K (batched).

    Close to the identity for small K (``I + 2K + O(K^2)``); K = 0 gives I exactly.
    """
    eye = torch.eye(k.shape[-1], dtype=k.dtype, device=k.device).expand_as(k)
    return torch.linalg.solve(eye - k, eye + k)


def tilt_transform(gxx: torch.Tensor, gxz: torch.Tensor, gzz: torch.Tensor, coupling: torch.Tensor) -> torch.Tensor:
    """W (n, 2r, r) with ``G X = X + [X, Z] W``: G rotates col(X) towards random directions Z.

    ``Q = [Qx, Qz]``: an orthonormal basis of col(X), then one of Z's component orthogonal
    to it. ``G = I + Q (R - I) Q^T`` with ``R = cayley([[0, -E^T], [E, 0]])`` (E = coupling)
    is orthogonal in the ambient space, the identity outside span(Q), and turns each
    direction of col(X) towards Z by about ``2 |E|`` radians: the subspace itself moves,
    and lengths and inner products of X's columns are kept. (An r x r rotation of X's
    columns would leave the subspace where it is.) Q is never formed: ``Q = [X, Z] Mq`` with
    Mq from Gram roots (block Gram-Schmidt). Directions missing from X or Z (zero Gram
    eigenvalues, e.g. Z in fewer than r dimensions orthogonal to X) are left uncoupled,
    which keeps G orthogonal.
    """
    r = gxx.shape[-1]
    coupling = coupling.to(gxx.device)
    _, px = gram_root(gxx)  # Qx = X px
    y = px @ px.mT @ gxz  # Z - X y: Z's part orthogonal to col(X)
    # Qz = (Z - X y) pz. What is left of Z after removing col(X) is judged against Z's own
    # size: when col(X) fills the space (d <= r), the remainder is rounding error (of the
    # float32 Z products), not directions.
    _, pz = gram_root(gzz - gxz.mT @ y, floor=_COMPLEMENT_TOL * gzz.diagonal(dim1=-2, dim2=-1).sum(-1))
    live_x = (px.abs().sum(dim=-2) > 0).double()
    live_z = (pz.abs().sum(dim=-2) > 0).double()
    e = coupling.double() * live_z.unsqueeze(-1) * live_x.unsqueeze(-2)
    zeros = torch.zeros_like(e)
    rot = cayley(torch.cat([torch.cat([zeros, -e.mT], -1), torch.cat([e, zeros], -1)], -2))
    rot_minus_i = rot - torch.eye(2 * r, dtype=rot.dtype, device=rot.device)
    mq = torch.cat([torch.cat([px, -y @ pz], -1), torch.cat([torch.zeros_like(px), pz], -1)], -2)
    qt_x = mq.mT @ torch.cat([gxx, gxz.mT], -2)  # Q^T X
    return mq @ rot_minus_i @ qt_x
