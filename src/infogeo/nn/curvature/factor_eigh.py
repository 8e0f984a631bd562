r"""The eigendecomposition of a Kronecker factor or a gradient statistic, whatever its spectrum.

A factor often has exactly zero rows and columns: inputs that are always zero (blank pixels), units a
ReLU never turns on, output gradients of classes absent from the batches.  Their coordinate vectors
are eigenvectors with eigenvalue 0, so only the rest of the matrix is decomposed (a smaller problem;
and the null space gets an exact basis instead of one that rounding picks, so a step in that basis
moves nothing there).  LAPACK's float32 divide-and-conquer ``syevd`` can also fail to converge on
matrices with many (nearly) repeated eigenvalues (measured: a 513 × 513 factor with 306 zero rows);
such a decomposition is retried in float64 and rounded back.
"""
from __future__ import annotations

from typing import Tuple

import torch

__all__ = ["factor_eigh"]


def _eigh(F: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    try:
        return torch.linalg.eigh(F)
    except RuntimeError:   # torch.linalg.LinAlgError: no convergence (float32 on a degenerate spectrum)
        if F.dtype == torch.float64:
            raise
        lam, U = torch.linalg.eigh(F.double())
        return lam.to(F.dtype), U.to(F.dtype)


def factor_eigh(F: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""``(λ, U)`` with :math:`F = U\operatorname{diag}(λ)U^T`, eigenvalues ascending, of a symmetric matrix
    ``F`` (module docstring: zero rows deflated, float64 when float32 does not converge)."""
    live = F.abs().amax(dim=1) > 0
    n_live = int(live.sum())
    if n_live == F.shape[0]:
        return _eigh(F)
    n = F.shape[0]
    lam, U = F.new_zeros(n), F.new_zeros(n, n)
    dead = torch.nonzero(~live).squeeze(1)
    U[dead, torch.arange(n - n_live, device=F.device)] = 1   # the null space: coordinate vectors, first
    if n_live:
        idx = torch.nonzero(live).squeeze(1)
        lam_s, U_s = _eigh(F[idx][:, idx])
        lam[n - n_live:] = lam_s
        U[idx.unsqueeze(1), torch.arange(n - n_live, n, device=F.device)] = U_s
    order = torch.argsort(lam, stable=True)   # ascending, as eigh gives them (a live eigenvalue may round below 0)
    return lam[order], U[:, order]
