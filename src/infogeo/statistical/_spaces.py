r"""Closed-form geodesics of symmetric positive-definite matrices with the affine-invariant metric.

:math:`\mathrm{tr}(\Sigma^{-1}d\Sigma\,\Sigma^{-1}d\Sigma)`: the zero-mean Gaussian family
carries half of it (Skovgaard 1984).  Every map broadcasts over leading axes on
either backend (:mod:`infogeo.backend`), so that gradients flow through them.
"""
from __future__ import annotations

from .. import backend as B
from ._vech import _mT

# ------------------------------------------------------------------------ SPD
def _whitened(S, T):
    r"""``(L, C)``: the Cholesky factor :math:`S = LL^T` and :math:`C = L^{-1} T L^{-T}` (symmetrised)."""
    L = B.cholesky(S)
    Li = B.inv(L)                                    # one inverse of the small factor, then two products
    C = B.matmul(Li, B.matmul(T, _mT(Li)))
    return L, 0.5 * (C + _mT(C))


def _sym_fn(C, f):
    r""":math:`U f(\Lambda) U^T` for the symmetric ``C = U Λ U^T``."""
    w, U = B.eigh(C)
    return B.einsum("...ik,...k,...jk->...ij", U, f(w), U)


def _congruence(L, M):
    """:math:`L M L^T`, symmetrised."""
    out = B.matmul(L, B.matmul(M, _mT(L)))
    return 0.5 * (out + _mT(out))


def spd_exp(S, V):
    r"""Affine-invariant exp :math:`L\exp(L^{-1} V L^{-T}) L^T` (:math:`S = LL^T`; any square root gives the same)."""
    L, C = _whitened(S, V)
    return _congruence(L, _sym_fn(C, B.exp))


def spd_log(S, T):
    r"""Affine-invariant log :math:`L\log(L^{-1} T L^{-T}) L^T`."""
    L, C = _whitened(S, T)
    return _congruence(L, _sym_fn(C, B.log))


def spd_dist(S, T):
    r"""Affine-invariant distance :math:`\sqrt{\sum_i \log^2\lambda_i(S^{-1}T)}`, shape ``(...)``."""
    lam = B.eigh(_whitened(S, T)[1])[0]
    return B.sqrt(B.sum(B.log(lam) ** 2, axis=-1))
