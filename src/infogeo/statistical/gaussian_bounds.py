r"""Certified closed-form bounds on the Fisher–Rao distance of full-covariance Gaussians.

The distance between :math:`N(\mu_0, \Sigma_0)` and :math:`N(\mu_1, \Sigma_1)` has no
closed form for :math:`d \ge 2` (its geodesic is a boundary problem, solved by
shooting in :mod:`~infogeo.statistical.gaussian_geodesics`), but it is bracketed
in closed form:

* **lower** (Calvo & Oller 1990): :math:`N(\mu, \Sigma) \mapsto \bar S =
  \begin{pmatrix}\Sigma + \mu\mu^T & \mu\\ \mu^T & 1\end{pmatrix}` embeds the family
  isometrically in SPD(d + 1) with the metric :math:`\tfrac12\mathrm{tr}(\bar S^{-1}d\bar S)^2`,
  so the ambient distance :math:`\sqrt{\tfrac12\sum_i\log^2\lambda_i(\bar S_0^{-1}\bar S_1)}`
  bounds it from below (exact for equal means);
* **upper**: the smaller of :math:`\sqrt{J}`, :math:`J = \mathrm{KL}(p\|q) + \mathrm{KL}(q\|p)`
  the Jeffreys divergence, which is the energy of the segment in natural parameters and so
  bounds its length (Cauchy–Schwarz; Nielsen 2023), and the lengths of the two-leg paths
  that change the covariance at a fixed mean and the mean at a fixed covariance, each leg a
  closed form (Pinele et al. 2020; exact when the means or the covariances are equal).

Everything is computed from the factors :math:`\Sigma_i = L_iL_i^T`: with
:math:`M = L_0^{-1}L_1`, :math:`m = L_0^{-1}(\mu_1 - \mu_0)`,
:math:`z = L_1^{-1}(\mu_1 - \mu_0)` and :math:`s_i` the singular values of :math:`M`,

.. math:: \text{lower} = \sqrt{2\textstyle\sum_i\log^2\sigma_i(F)},\quad
          F = \begin{pmatrix}M & m\\ 0 & 1\end{pmatrix},\qquad
          J = \tfrac12\big(\textstyle\sum_i(s_i - s_i^{-1})^2 + |m|^2 + |z|^2\big),

and the two-leg length :math:`\sqrt{2\sum_i\log^2 s_i} + \sqrt2\operatorname{arccosh}
(1 + \delta^2/4)`, :math:`\delta^2 = \min(|m|^2, |z|^2)` (evaluated as
:math:`2\sqrt2\operatorname{arcsinh}(\delta/2\sqrt2)`, accurate for small :math:`\delta`).  Singular values of factors keep small eigenvalues of the
covariance ratio accurate, each taken from the factor or from its inverse (whichever resolves it), in the
log domain: covariance ratios down to 1e-300 keep both bounds to rounding; the sum :math:`\sum(s_i - s_i^{-1})^2` does not cancel near
equal covariances.  Nearby points (:math:`\|D\|_F \le \tfrac12`, :math:`D = L_0^{-1}(\Sigma_1 - \Sigma_0)L_0^{-T}
= MM^T - I`) take the logarithms from the power series of :math:`\log(I + D)` instead
(:func:`~infogeo.statistical._spaces.log1p_sym`): :math:`\sum_i\log^2 s_i = \tfrac14\|\log(I + D)\|_F^2`,
:math:`\sum_i(s_i - s_i^{-1})^2 = \mathrm{tr}\,D(I + D)^{-1}D`, and the lower bound from
:math:`FF^T - I = \begin{pmatrix}D + mm^T & m\\ m^T & 0\end{pmatrix}`; singular values
:math:`1 + O(10^{-10})` otherwise lose all but a few digits of their logarithms (both bounds were
2.5e-6 off, the true distance outside them).  One batched Cholesky per covariance, two triangular systems and four
batched singular-value computations on the arguments' backend (:mod:`infogeo.backend`):
batches broadcast over leading axes, torch tensors stay on their device and dtype, and
gradients flow wherever the singular values involved are distinct.  Where a bound has a
cone-like kink (its square-root terms at 0: coincident points, equal means, equal
covariances) the gradient of that term is taken as 0, an element of its subdifferential,
rather than NaN.
"""
from __future__ import annotations

import math
from typing import Any, Tuple

import numpy as np

from .. import backend as B
from ..geometry import points as _points
from . import _spaces
from ._vech import _mT

__all__ = ["dist_bounds"]


def _sqrt0(x):
    r""":math:`\sqrt{x}` for ``x >= 0`` whose derivative at 0 is 0 (an element of the subdifferential of the
    norm-like bound there) instead of NaN: coincident points, equal means or equal covariances."""
    positive = x > 0
    return B.where(positive, B.sqrt(B.where(positive, x, 1.0)), 0.0)


def _frob_sq(A):
    """Squared Frobenius norm over the last two axes."""
    return B.sum(B.sum(A * A, axis=-1), axis=-1)


def _log_svdvals(F, G):
    r"""Logarithms of the singular values of ``F``, descending, given ``G = F^{-1}``.

    A computed singular value :math:`\sigma_i` of ``F`` has an absolute error of about
    :math:`\epsilon\sigma_1`, so at a covariance ratio of 1e-40 or beyond the small ones are noise or 0
    (a lower bound of inf).  ``1 / svdvals(G)`` is accurate at the other end; each :math:`\sigma_i` is
    taken from the side it is relatively accurate on (from ``F`` where :math:`\sigma_i^2 \ge
    \sigma_1\sigma_n`), in the log domain so that neither end overflows.
    """
    sf, sg = B.svdvals(F), B.svdvals(G)
    log_f = B.log(B.where(sf > 0, sf, 1.0))
    n = tuple(sg.shape)[-1]
    log_g = -B.log(sg[..., list(range(n - 1, -1, -1))])   # a list index reverses on either backend
    return B.where((sf > 0) & (2 * log_f >= log_f[..., :1] + log_g[..., -1:]), log_f, log_g)


def _rounding_slack(L0, L1, d: int, like):
    r"""Relative widening :math:`2(d + 1)^2\epsilon(\kappa_0 + \kappa_1)` of the bounds for rounding,
    :math:`\kappa_i = (s_{\max}/s_{\min})^2` the condition of :math:`\Sigma_i` from its factor.

    The computed factor is exact for :math:`\Sigma + \Delta` with :math:`|\Delta| \le \gamma_{d+1}|L||L^T|`
    (Higham 2002, Thm 10.3), so :math:`\|L^{-1}\Delta L^{-T}\|_2 \le (d + 1)d\,\epsilon\kappa/2`; that moves each
    log-eigenvalue of the ratio (and the near form's :math:`D`, relatively) by at most as much; the triangular
    solves add errors of the same order."""
    try:
        eps = float(np.finfo(like.dtype).eps)
    except (TypeError, ValueError):                    # a torch dtype
        import torch
        eps = float(torch.finfo(like.dtype).eps)

    def cond(L):
        s = B.svdvals(L)
        return (s[..., 0] / s[..., -1]) ** 2
    return 2.0 * (d + 1) ** 2 * eps * (cond(L0) + cond(L1))


def _factor(xp, S, what: str):
    """Lower Cholesky factor of a batch of covariances, or a ValueError naming the failing argument."""
    try:
        return xp.cholesky(S)
    except (np.linalg.LinAlgError, xp.LinAlgError):
        raise ValueError(f"{what} is not symmetric positive definite (its Cholesky factorisation failed); "
                         "expected SPD covariances") from None


def _checked_batch(mu0, S0, mu1, S1) -> Tuple[int, tuple]:
    """``(d, batch shape)`` of the four arguments, or a ValueError saying which one is wrong."""
    d = tuple(mu0.shape)[-1] if len(mu0.shape) else None
    named = (("mu0", mu0, 1), ("S0", S0, 2), ("mu1", mu1, 1), ("S1", S1, 2))
    for what, a, core in named:
        shape = tuple(a.shape)
        if d is None or len(shape) < core or shape[len(shape) - core:] != (d,) * core:
            raise ValueError(f"dist_bounds: {what} must have shape (..., {'d, d' if core == 2 else 'd'}) with "
                             f"the sample dimension d = {d} of mu0, got {shape}")
        if not _points.all_finite(a):
            raise ValueError(f"dist_bounds: {what} contains NaN or inf")
    return d, _points.batch_shape(mu0, S0, mu1, S1, dims=(1, 2, 1, 2))


def dist_bounds(mu0: Any, S0: Any, mu1: Any, S1: Any) -> Tuple[Any, Any]:
    r"""Certified bounds ``(lower, upper)`` on the Fisher–Rao distance of
    :math:`N(\mu_0, \Sigma_0)` and :math:`N(\mu_1, \Sigma_1)`, in closed form.

    Parameters
    ----------
    mu0, mu1 : array or tensor, shape ``(..., d)``
        Means.
    S0, S1 : array or tensor, shape ``(..., d, d)``
        SPD covariances.  The four batch shapes broadcast.

    Returns
    -------
    (lower, upper)
        Arrays of the broadcast batch shape, on the arguments' backend (torch if any is a
        tensor; same device and dtype); plain floats for a single numpy pair.

    Raises
    ------
    ValueError
        For shapes that do not fit or broadcast, NaN or inf, or a covariance that is not SPD.
    """
    xp = B.ops_of(mu0, S0, mu1, S1)
    mu0, S0, mu1, S1 = _points.same_backend(mu0, S0, mu1, S1)
    d, lead = _checked_batch(mu0, S0, mu1, S1)
    L0 = B.broadcast_to(_factor(xp, S0, "dist_bounds: S0"), lead + (d, d))
    L1 = B.broadcast_to(_factor(xp, S1, "dist_bounds: S1"), lead + (d, d))
    dmu = B.broadcast_to(mu1 - mu0, lead + (d,))
    # one solve gives M = L0^{-1} L1 and m = L0^{-1} dmu (the second point seen from the first's frame),
    # the other the inverse M^{-1} = L1^{-1} L0 and z = L1^{-1} dmu (the first seen from the second's)
    X = xp.solve(L0, B.concatenate([L1, dmu[..., None]], axis=-1))
    Y = xp.solve(L1, B.concatenate([L0, dmu[..., None]], axis=-1))
    M, m, z = X[..., :d], X[..., d], Y[..., d]
    log_s = _log_svdvals(M, Y[..., :d])
    # the embedded second point is F F^T in the first one's frame, where the first one is the identity;
    # F^{-1} is [[M^{-1}, -z], [0, 1]]
    bottom = B.concatenate([B.zeros(lead + (1, d), like=X), B.ones(lead + (1, 1), like=X)], axis=-1)
    Yneg = B.concatenate([Y[..., :d], -Y[..., d:]], axis=-1)
    lower_sq = 2.0 * B.sum(_log_svdvals(B.concatenate([X, bottom], axis=-2),
                                        B.concatenate([Yneg, bottom], axis=-2)) ** 2, axis=-1)
    m2, z2 = B.sum(m * m, axis=-1), B.sum(z * z, axis=-1)
    # s - 1/s = 2 sinh(log s), from the accurate logarithms
    cov_sq, cov_j = 2.0 * B.sum(log_s ** 2, axis=-1), B.sum((2 * B.sinh(log_s)) ** 2, axis=-1)
    # nearby points: singular values 1 + O(eps) lose their logarithms; the near form instead (module docstring)
    S0b, S1b = B.broadcast_to(S0, lead + (d, d)), B.broadcast_to(S1, lead + (d, d))
    Dx = xp.solve(L0, _mT(xp.solve(L0, S1b - S0b)))
    Dc = 0.5 * (Dx + _mT(Dx))
    top = B.concatenate([Dc + m[..., :, None] * m[..., None, :], m[..., :, None]], axis=-1)
    E = B.concatenate([top, B.concatenate([m[..., None, :], B.zeros(lead + (1, 1), like=X)], axis=-1)], axis=-2)
    near_c, near_e = _frob_sq(Dc) <= 0.25, _frob_sq(E) <= 0.25
    log_c, log_e = _spaces.log1p_sym(Dc, where=near_c), _spaces.log1p_sym(E, where=near_e)
    eye = B.broadcast_to(B.eye(d, like=X), lead + (d, d))
    Dn = B.where(near_c[..., None, None], Dc, 0.0 * Dc)
    cov_sq = B.where(near_c, 0.5 * _frob_sq(log_c), cov_sq)
    # (s - 1/s)^2 = mu^2 / (1 + mu) for s^2 = 1 + mu: the trace of D (I + D)^{-1} D
    cov_j = B.where(near_c, B.sum(B.sum(Dn * xp.solve(eye + Dn, Dn), axis=-1), axis=-1), cov_j)
    lower = _sqrt0(B.where(near_e, 0.5 * _frob_sq(log_e), lower_sq))
    # equal covariances: sqrt2 arccosh(1 + delta^2 / 4) = 2 sqrt2 arcsinh(delta / (2 sqrt2)), accurate for small delta
    legs = _sqrt0(cov_sq) + 2 * math.sqrt(2.0) * B.arcsinh(_sqrt0(B.minimum(m2, z2)) / (2 * math.sqrt(2.0)))
    jeffreys = 0.5 * (cov_j + m2 + z2)
    upper = B.minimum(legs, _sqrt0(jeffreys))
    # equal means make both exact (lower == upper in exact arithmetic): keep rounding from inverting them
    lower = B.minimum(lower, upper)
    # outward rounding: the Cholesky factors' backward errors (c d eps ||S||) move every log-eigenvalue of the
    # ratio by at most about d eps (kappa_0 + kappa_1), relative to the near form's D as well
    slack = _rounding_slack(L0, L1, d, X)
    # (a slack of 1 or more, covariances of condition ~1e15, leaves only the trivial lower bound 0)
    lower, upper = B.maximum(lower * (1.0 - slack), 0.0 * lower), upper * (1.0 + slack)
    if isinstance(lower, (np.ndarray, np.generic)) and lead == ():   # not a tensor, not an autograd trace
        return float(lower), float(upper)
    return lower, upper
