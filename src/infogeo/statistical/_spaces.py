r"""Closed-form geodesics of symmetric positive-definite matrices with the affine-invariant metric.

:math:`\mathrm{tr}(\Sigma^{-1}d\Sigma\,\Sigma^{-1}d\Sigma)`: the zero-mean Gaussian family
carries half of it (Skovgaard 1984).  Every map broadcasts over leading axes on
either backend (:mod:`infogeo.backend`), so that gradients flow through them.

Accuracy.  Everything depends on the eigenvalues :math:`\lambda_i` of the ratio
:math:`C = L^{-1}TL^{-T}` (:math:`S = LL^T`) through :math:`\log\lambda_i`.  Forming :math:`C` and
taking its eigenvalues resolves them only to :math:`\epsilon\lambda_{\max}`: for ratios of condition
:math:`\kappa` the small ones are noise (a negative one gave NaN at :math:`\kappa \approx 10^{16}`,
covariances of condition 1e8), and near :math:`C = I` the logarithm of :math:`1 + O(\epsilon)` loses
everything below :math:`\epsilon / |\lambda - 1|` in relative terms.  Hence two forms:

* **near** (:math:`\|D\|_F \le \tfrac12`, :math:`D = C - I = L^{-1}(T - S)L^{-T}`, the difference taken of
  the stored matrices, which is exact up to one rounding): :math:`\log C = \log(I + D)` by its power series
  :math:`\sum_{k\ge1}(-1)^{k+1}D^k/k`, 52 terms (truncation below :math:`2^{-52}/53` relative for
  :math:`\|D\|_2 \le \tfrac12`), matrix products only, so differentiable also at :math:`D = 0`;
* **far**: :math:`C = MM^T`, :math:`M = L^{-1}L_T`, and :math:`C^{-1} = N^TN`, :math:`N = M^{-1} = L_T^{-1}L`;
  each eigenpair is taken from the decomposition that resolves it (:math:`C`'s where
  :math:`\lambda_i^2 \ge \lambda_{\max}\lambda_{\min}`, else :math:`C^{-1}`'s), so that the logarithms of
  small eigenvalues keep their relative accuracy.
"""
from __future__ import annotations

import numpy as np

from .. import backend as B
from ._vech import _mT

#: terms of the power series of log(I + D); see the module docstring
_LOG1P_TERMS = 52


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


def _eye_like(D):
    n = tuple(D.shape)[-1]
    return B.broadcast_to(B.eye(n, like=D), tuple(D.shape))


def decided(mask):
    """``True`` where every entry of the boolean batch ``mask`` is true, ``False`` where none is, else ``None``
    (also where its values cannot be read, a batch traced by a torch.func transform): a branch that no entry takes
    need not be computed."""
    try:
        values = np.asarray(B.to_numpy(mask))
    except Exception:   # noqa: BLE001 - a traced batch: both branches are computed
        return None
    return True if values.all() else False if not values.any() else None


def log1p_sym(D, where=None):
    r""":math:`\log(I + D)` for symmetric ``D`` with :math:`\|D\|_2 \le \tfrac12`, by its power series.

    Horner form of :math:`D\sum_{j\ge0}(-D)^j/(j+1)`, :data:`_LOG1P_TERMS` terms: the truncation error is at
    most :math:`\|D\|_2^{K+1}/((K+1)(1 - \|D\|_2)) \le 2^{-K}/(K+1)` relative to :math:`\|D\|_2`.  Batched,
    either backend, differentiable everywhere (products only).  ``where`` (a batch mask): only those entries are
    wanted, the others' ``D`` replaced by 0 (all zeros at no cost where no entry is wanted).
    """
    if where is not None:
        if decided(where) is False:
            return 0.0 * D
        D = B.where(where[..., None, None], D, 0.0 * D)
    eye = _eye_like(D)
    P = eye / _LOG1P_TERMS
    for j in range(_LOG1P_TERMS - 2, -1, -1):
        P = eye / (j + 1) - B.matmul(D, P)
    out = B.matmul(D, P)
    return 0.5 * (out + _mT(out))


def _solve_congruence(L, A):
    r""":math:`L^{-1} A L^{-T}`, symmetrised."""
    X = B.solve(L, _mT(B.solve(L, A)))
    return 0.5 * (X + _mT(X))


def ratio_parts(S, T):
    r"""``(L, D, near, M, N)`` for the ratio :math:`C = L^{-1}TL^{-T}`: ``D = C - I`` from the difference
    ``T - S``, ``near`` (batch mask) where :math:`\|D\|_F \le \tfrac12`, and the factors
    :math:`M = L^{-1}L_T` (:math:`C = MM^T`) and :math:`N = M^{-1}`."""
    shape = np.broadcast_shapes(tuple(S.shape), tuple(T.shape))
    S, T = B.broadcast_to(S, shape), B.broadcast_to(T, shape)
    L, LT = B.cholesky(S), B.cholesky(T)
    D = _solve_congruence(L, T - S)
    near = B.sum(B.sum(D * D, axis=-1), axis=-1) <= 0.25
    return L, D, near, B.solve(L, LT), B.solve(LT, L)


def log_eig_far(M, N):
    r"""``(log λ, U)``: the eigendecomposition :math:`MM^T = U\,\mathrm{diag}(\lambda)\,U^T`, ``N = M^{-1}``,
    each pair taken from :math:`MM^T` where :math:`\lambda_i^2 \ge \lambda_{\max}\lambda_{\min}` and from
    :math:`(MM^T)^{-1} = N^TN` otherwise (ascending order of :math:`\lambda`)."""
    C, Ci = B.matmul(M, _mT(M)), B.matmul(_mT(N), N)
    w, U = B.eigh(0.5 * (C + _mT(C)))
    wi, Ui = B.eigh(0.5 * (Ci + _mT(Ci)))
    n = tuple(w.shape)[-1]
    rev = list(range(n - 1, -1, -1))
    log_w = B.log(B.where(w > 0, w, 1.0))
    log_inv = -B.log(wi[..., rev])                    # eigenvalues of C from C^{-1}'s, ascending
    take = (w > 0) & (2 * log_w >= log_w[..., -1:] + log_inv[..., :1])
    log_lam = B.where(take, log_w, log_inv)
    U = B.where(take[..., None, :], U, Ui[..., rev])
    return log_lam, U


def _ratio_logs(S, T):
    r"""``(L, near, log(I + D) or None-like, log λ, U)`` shared by :func:`spd_log_ratio` and :func:`spd_dist`."""
    L, D, near, M, N = ratio_parts(S, T)
    n = tuple(D.shape)[-1]
    # each branch is fed a harmless input where it is not taken, so that neither NaN nor an inf gradient
    # of the other leaks through the selection
    nb = near[..., None, None]
    log_near = log1p_sym(D, where=near)
    if decided(near) is True:   # no far pair: its branch is not computed
        return L, near, log_near, 0.0 * D[..., 0], _eye_like(D)
    spread = B.eye(n, like=D) * B.array([2.0 ** (i + 1) for i in range(n)], like=D)
    log_lam, U = log_eig_far(B.where(nb, spread, M), B.where(nb, B.inv(spread), N))
    return L, near, log_near, log_lam, U


def spd_log_ratio(S, T):
    r"""``(L, log C)``: :math:`S = LL^T` and the matrix logarithm of :math:`C = L^{-1}TL^{-T}`, relatively
    accurate (near and far forms of the module docstring)."""
    L, near, log_near, log_lam, U = _ratio_logs(S, T)
    far = B.einsum("...ik,...k,...jk->...ij", U, log_lam, U)
    return L, B.where(near[..., None, None], log_near, 0.5 * (far + _mT(far)))


def spd_exp(S, V):
    r"""Affine-invariant exp :math:`L\exp(L^{-1} V L^{-T}) L^T` (:math:`S = LL^T`; any square root gives the same)."""
    L, C = _whitened(S, V)
    return _congruence(L, _sym_fn(C, B.exp))


def spd_log(S, T):
    r"""Affine-invariant log :math:`L\log(L^{-1} T L^{-T}) L^T`, with :math:`\log(L^{-1}TL^{-T})` from
    :func:`spd_log_ratio` (relatively accurate for nearby and for ill-conditioned pairs)."""
    L, logC = spd_log_ratio(S, T)
    return _congruence(L, logC)


def spd_dist(S, T):
    r"""Affine-invariant distance :math:`\sqrt{\sum_i \log^2\lambda_i(S^{-1}T)}`, shape ``(...)``: the Frobenius
    norm of the series :math:`\log(I + D)` for nearby pairs, else from the eigenvalue logarithms of
    :func:`log_eig_far` (relatively accurate for ill-conditioned ratios)."""
    _, near, log_near, log_lam, _ = _ratio_logs(S, T)
    sq = B.where(near, B.sum(B.sum(log_near * log_near, axis=-1), axis=-1), B.sum(log_lam * log_lam, axis=-1))
    positive = sq > 0
    return B.where(positive, B.sqrt(B.where(positive, sq, 1.0)), 0.0 * sq)
