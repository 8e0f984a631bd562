r"""Half-vectorisation of symmetric matrices and the Gaussian moment blocks built on it.

:math:`\mathrm{vech}\,\Sigma` is the upper triangle of :math:`\Sigma` read row by row
(``numpy.triu_indices``).  :func:`_miller_cov_block` is the covariance block of the
Fisher metric in standard coordinates (Skovgaard 1984), :func:`_cov_of_t` the
covariance of the sufficient statistics :math:`(x, \mathrm{vech}\,xx^T)` (Isserlis' theorem).
"""
from __future__ import annotations

import numpy as np

from .. import backend as B

__all__ = ["_Vech", "_check_spd", "_miller_cov_block", "_cov_of_t", "_mT", "_outer", "_whitened_inner"]


class _Vech:
    """Upper-triangle (row-major) coordinates of symmetric ``d x d`` matrices."""

    def __init__(self, d: int):
        self.d = d
        self.iu = np.triu_indices(d)
        self.m = len(self.iu[0])
        E = np.zeros((self.m, d, d))
        for a, (i, j) in enumerate(zip(*self.iu)):
            E[a, i, j] = E[a, j, i] = 1.0
        self.E = E                                           # symmetric basis
        self.w = np.where(self.iu[0] == self.iu[1], 2.0, 1.0)  # natural-coordinate weights

    def sym(self, v):
        """Symmetric matrix whose upper triangle is ``v`` (batched: ``(..., m) -> (..., d, d)``)."""
        return B.einsum("...a,aij->...ij", v, B.array(self.E, like=v))

    def vech(self, M):
        return M[..., self.iu[0], self.iu[1]]

    def precision_from_natural(self, c):
        return -self.sym(c * B.array(self.w, like=c))

    def natural_from_precision(self, L):
        return -self.vech(L) / B.array(self.w, like=L)


def _check_spd(S: np.ndarray, what: str) -> None:
    """Raise ``ValueError`` unless ``S`` (shape ``(..., d, d)``) is symmetric positive definite."""
    S = np.asarray(S, dtype=float)
    St = np.swapaxes(S, -1, -2)
    if not np.allclose(S, St, rtol=1e-10, atol=1e-12):
        raise ValueError(f"{what} must be symmetric, got {S.tolist() if S.size < 50 else '...'}")
    try:
        np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        lam = np.linalg.eigvalsh(0.5 * (S + St)).min()
        raise ValueError(f"{what} is not symmetric positive definite (smallest eigenvalue {lam:.3g}); "
                         f"expected an SPD matrix") from None


def _mT(A):
    """The transpose of the last two axes (a batch of matrices), either backend."""
    return B.einsum("...ij->...ji", A)


def _outer(a, b):
    """Batched outer product :math:`a b^T` over the last axis."""
    return a[..., :, None] * b[..., None, :]


def _miller_cov_block(Si, vh: _Vech):
    r""":math:`\tfrac12\mathrm{tr}(\Sigma^{-1}E_a\Sigma^{-1}E_b)` for the vech basis; ``Si`` of shape ``(..., d, d)``.

    With :math:`E_a = (e_ie_j^T + e_je_i^T)/w_a` (:math:`w_a = 2` on the diagonal, 1 off it) the trace is
    :math:`2(S_{ik}S_{jl} + S_{il}S_{jk})/(w_aw_b)` for :math:`S = \Sigma^{-1}`: Isserlis' block of
    :func:`_cov_of_t` at :math:`S`, divided by :math:`w_aw_b` (no four-operand contraction).
    """
    w = B.array(vh.w, like=Si)
    return _cov_of_t(None, Si, vh, with_mean=False) / (w[:, None] * w[None, :])


def _whitened_inner(S, U, V, u=None, v=None):
    r""":math:`\tfrac12\mathrm{tr}(\Sigma^{-1}U\Sigma^{-1}V) + u^T\Sigma^{-1}v` (the Fisher inner product of a Gaussian's
    covariance directions ``U, V`` and mean directions ``u, v``; batched), from :math:`\Sigma = LL^T`:
    :math:`\tfrac12\langle L^{-1}UL^{-T}, L^{-1}VL^{-T}\rangle_F + (L^{-1}u)^T(L^{-1}v)`.  Accurate to the condition
    number :math:`\kappa` of :math:`\Sigma`, where the dense Fisher matrix (:func:`_miller_cov_block`, of condition
    :math:`\kappa^2`) loses every digit of its small eigenvalues once :math:`\kappa^2\epsilon` nears 1."""
    L = B.cholesky(S)

    def white(M):   # L^-1 M L^-T for a symmetric M
        return B.solve(L, _mT(B.solve(L, M)))
    out = 0.5 * B.einsum("...ij,...ij->...", white(U), white(V))
    if u is not None:
        out = out + B.einsum("...ik,...ik->...", B.solve(L, u[..., None]), B.solve(L, v[..., None]))
    return out


def _cov_of_t(mu, S, vh: _Vech, with_mean: bool = True):
    r""":math:`\mathrm{Cov}[(x, \mathrm{vech}\,xx^T)]` for :math:`x \sim N(\mu, \Sigma)` (Isserlis), batched.

    ``mu`` of shape ``(..., d)``, ``S`` of shape ``(..., d, d)``; the result is ``(..., d + m, d + m)``
    (``(..., m, m)`` without the mean).
    """
    i, j = vh.iu
    ic, ir, jc, jr = i[:, None], i[None, :], j[:, None], j[None, :]
    Sik, Sjl = S[..., ic, ir], S[..., jc, jr]        # [a, b] = S[i_a, i_b], S[j_a, j_b]
    Sil, Sjk = S[..., ic, jr], S[..., jc, ir]        # S[i_a, j_b], S[j_a, i_b]
    quad = Sik * Sjl + Sil * Sjk
    if not with_mean:
        return quad
    mi, mj = mu[..., i], mu[..., j]
    quad = quad + _outer(mi, mi) * Sjl + _outer(mi, mj) * Sjk + _outer(mj, mi) * Sil + _outer(mj, mj) * Sik
    # Cov(x_r, x_k x_l) = mu_k S_rl + mu_l S_rk
    cross = S[..., :, j] * mi[..., None, :] + S[..., :, i] * mj[..., None, :]
    top = B.concatenate([S, cross], axis=-1)
    bottom = B.concatenate([_mT(cross), quad], axis=-1)
    return B.concatenate([top, bottom], axis=-2)
