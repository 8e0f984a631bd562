r"""The eigendecomposition of a Kronecker factor or a gradient statistic, whatever its spectrum.

A factor often has exactly zero rows and columns: inputs that are always zero (blank pixels), units a
ReLU never turns on, output gradients of classes absent from the batches.  Their coordinate vectors
are eigenvectors with eigenvalue 0, so only the rest of the matrix is decomposed (a smaller problem;
and the null space gets an exact basis instead of one that rounding picks, so a step in that basis
moves nothing there).  LAPACK's float32 divide-and-conquer ``syevd`` can also fail to converge on
matrices with many (nearly) repeated eigenvalues (measured: a 513 × 513 factor with 306 zero rows);
such a decomposition is retried in float64 and rounded back.

A factor of rank r < n that has no zero rows (fewer samples than its side, or a Shampoo statistic
:math:`\bar g \bar g^T` of a few gradients) has a null space with no zero rows either; an
eigensolver returns for it whatever basis its rounding leads to, and two solvers (CPU and CUDA, two
BLAS builds) return different ones.  Adam in an eigenbasis is not invariant to that choice: the
gradients of later steps do have components there, and Adam scales each basis direction on its own.
So the null space (the eigenvalues within :math:`n\,\epsilon\,\lambda_{max}` of 0, the rank tolerance
of ``numpy.linalg.matrix_rank``) gets a basis that is a continuous function of the subspace alone:
the eigenvectors of the compression :math:`N^T D N` of the fixed diagonal :math:`D = diag(1, ..., n)`
onto it (unique while the compression's eigenvalues are distinct, as they generically are).  That second,
smaller eigendecomposition can cost as much as the first (a 513-wide input factor of rank 100); a user of
the basis that is invariant to the choice within the null space (K-FAC's exact inverse, whose scale there is
the damping; Adam that pools its second moment over the null directions) asks for ``canonical=False``.
"""
from __future__ import annotations

from typing import Tuple

import torch

from .._params import working

__all__ = ["factor_eigh", "null_dim"]


def null_dim(lam: torch.Tensor) -> int:
    r"""How many of the ascending eigenvalues ``lam`` lie within the rank tolerance :math:`n\,\epsilon\,\lambda_{max}`
    of 0 (the null space, first in :func:`factor_eigh`'s order)."""
    n = lam.shape[0]
    if n == 0:
        return 0
    return int((lam <= n * torch.finfo(lam.dtype).eps * lam.abs().max()).sum())


def _eigh(F: torch.Tensor, canonical: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    try:
        lam, U = torch.linalg.eigh(F)
    except RuntimeError:   # torch.linalg.LinAlgError: no convergence (float32 on a degenerate spectrum)
        if F.dtype == torch.float64:
            raise
        lam, U = torch.linalg.eigh(F.double())
        lam, U = lam.to(F.dtype), U.to(F.dtype)
    return (lam, _canonical_null(lam, U)) if canonical else (lam, U)


def _canonical_null(lam: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
    """``U`` with its null-space columns (the first ``k``: eigenvalues ascending) rotated to the
    eigenvectors of ``D = diag(1, ..., n)`` compressed onto that space (module docstring)."""
    n, k = lam.shape[0], null_dim(lam)
    if k < 2:
        return U
    N = U[:, :k]
    d = torch.arange(1, n + 1, dtype=U.dtype, device=U.device)
    C = N.T @ (d.unsqueeze(1) * N)
    _, V = torch.linalg.eigh((C + C.T) / 2)
    out = U.clone()   # the solver's memory layout (column-major), which callers' views may rely on
    out[:, :k] = N @ V
    return out


def factor_eigh(F: torch.Tensor, canonical: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""``(λ, U)`` with :math:`F = U\operatorname{diag}(λ)U^T`, eigenvalues ascending, of a symmetric matrix
    ``F`` (module docstring: zero rows deflated, float64 when float32 does not converge; the null space's basis
    canonical unless ``canonical=False``); a half-precision ``F`` is decomposed in float32."""
    F = working(F)
    live = F.abs().amax(dim=1) > 0
    n_live = int(live.sum())
    if n_live == F.shape[0]:
        return _eigh(F, canonical)
    n = F.shape[0]
    k = n - n_live
    lam, U = F.new_zeros(n), F.new_zeros(n, n)
    dead = torch.nonzero(~live).squeeze(1)
    U[dead, torch.arange(k, device=F.device)] = 1   # the null space: coordinate vectors, first
    if not n_live:
        return lam, U
    idx = torch.nonzero(live).squeeze(1)
    lam_s, U_s = _eigh(F.index_select(0, idx).index_select(1, idx), canonical)
    lam[k:] = lam_s
    U[idx, k:] = U_s   # the live rows of the live columns
    if bool(lam_s[0] >= 0):   # ascending already, as eigh gives them
        return lam, U
    order = torch.argsort(lam, stable=True)   # a live eigenvalue rounded below 0: before the null space's zeros
    return lam[order], U[:, order]
