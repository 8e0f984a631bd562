r"""Closed-form parallel transports and Fréchet means of the built-in families.

Registered with :mod:`infogeo.geometry.statistics` (which falls back on the ODE
transport and on gradient descent for the mean).  Each map is written in one
chart with :mod:`infogeo.backend` functions, so batches and torch tensors pass.

* **Flat families** (fixed-covariance Gaussian: every chart is affine in :math:`\mu`):
  transport is the identity and the mean is the weighted average.
* **Independence model and Bernoulli**: products of one-dimensional factors, flat in
  :math:`\phi = 2\arcsin\sqrt{\mu}`; the mean is the average in :math:`\phi`, and
  transport rescales each component to keep its length.
* **Zero-mean Gaussian**: the affine-invariant metric on SPD matrices (scaled by 1/2,
  which leaves its connection unchanged): :math:`\Gamma_{P\to Q}(V) = EVE^T`,
  :math:`E = (QP^{-1})^{1/2} = P^{1/2}(P^{-1/2}QP^{-1/2})^{1/2}P^{-1/2}`
  (Sra & Hosseini 2015).
* **Univariate and diagonal Gaussians**: each factor is the Poincaré half-plane
  :math:`(\mu/\sqrt2, \sigma)` scaled by 2.  On a surface parallel transport along
  a geodesic keeps the angle to the geodesic's velocity and the orientation; the
  half-plane metric is conformal, so the frame (unit tangent, its rotation by
  90°) in coordinates is orthonormal up to the factor :math:`\sqrt2/y`.
* **Categorical**: :math:`u = \sqrt p` on the unit sphere (metric scaled by 4);
  along the great circle from :math:`x` to :math:`y`,
  :math:`\Gamma(w) = w - \frac{\langle y, w\rangle}{1 + \langle x, y\rangle}(x + y)`.
"""
from __future__ import annotations

import numpy as np

from .. import backend as B
from ..geometry.statistics import register_mean, register_transport
from ._spaces import _congruence, _sym_fn, _whitened
from .discrete import Bernoulli, Categorical, IndependenceModel, _all_classes
from .gaussian_diagonal import DiagonalGaussian
from .gaussian_special import FixedCovarianceGaussian, ZeroMeanGaussian

__all__: list = []


# ------------------------------------------------------------------ flat
def _identity(M, p, q, v):
    return v + 0.0 * q


def _weighted_average(M, X, w):
    return B.sum(w[:, None] * X, axis=0)


register_transport(FixedCovarianceGaussian, None, _identity)
register_mean(FixedCovarianceGaussian, None, _weighted_average)


# ------------------------------------------------- one-dimensional factors
def _phi(m):
    return 2.0 * B.arcsin(B.sqrt(m))


def _factor_transport(M, p, q, v):
    return v * B.sqrt(q * (1 - q)) / B.sqrt(p * (1 - p))


def _factor_mean(M, X, w):
    return B.sin(0.5 * _weighted_average(M, _phi(X), w)) ** 2


for _cls, _chart in ((IndependenceModel, "standard"), (Bernoulli, "mean")):
    register_transport(_cls, _chart, _factor_transport)
    register_mean(_cls, _chart, _factor_mean)


# ------------------------------------------------------------ SPD (zero mean)
def _spd_transport_matrix(P, Q, V):
    r""":math:`EVE^T` with :math:`E = LC^{1/2}L^{-1}`, :math:`P = LL^T`, :math:`C = L^{-1}QL^{-T}`."""
    L, C = _whitened(P, Q)
    Li = B.inv(L)
    E = B.matmul(L, B.matmul(_sym_fn(C, B.sqrt), Li))
    return _congruence(E, V)


def _zero_mean_transport(M, p, q, v):
    vh = M.vh
    return vh.vech(_spd_transport_matrix(vh.sym(p), vh.sym(q), vh.sym(v)))


# ------------------------------------------------------- half-planes (diagonal)
def _halfplane_transport(x, y, x2, y2, vx, vy):
    """Transport of ``(vx, vy)`` from ``(x, y)`` to ``(x2, y2)`` on the half-plane, componentwise."""
    dx = x2 - x
    # velocities of the geodesic (a circle centred on the axis, or a vertical line) at both ends, oriented
    # from the first point to the second; unnormalised
    tx, ty = y * dx, 0.5 * (dx * dx + y2 * y2 - y * y)
    sx, sy = y2 * dx, 0.5 * (y2 * y2 - y * y - dx * dx)
    n1, n2 = B.sqrt(tx * tx + ty * ty), B.sqrt(sx * sx + sy * sy)
    xp = B.ops_of(n1)
    same = n1 == 0
    one = 1.0 + 0.0 * n1
    n1, n2 = xp.where(same, one, n1), xp.where(same, one, n2)
    tx, ty, sx, sy = tx / n1, ty / n1, sx / n2, sy / n2
    along = (vx * tx + vy * ty) * (y2 / y)           # components in the orthonormal frame, rescaled
    across = (-vx * ty + vy * tx) * (y2 / y)
    wx = along * sx - across * sy
    wy = along * sy + across * sx
    return xp.where(same, vx, wx), xp.where(same, vy, wy)


def _diagonal_transport(M, p, q, v):
    d, r2 = M.d, np.sqrt(2.0)
    x, y = p[..., :d] / r2, B.sqrt(p[..., d:])
    x2, y2 = q[..., :d] / r2, B.sqrt(q[..., d:])
    wx, wy = _halfplane_transport(x, y, x2, y2, v[..., :d] / r2, v[..., d:] / (2 * y))
    return B.concatenate([r2 * wx, 2 * y2 * wy], axis=-1)


# ---------------------------------------------------------------- sphere
def _categorical_transport(M, p, q, v):
    u, u2 = B.sqrt(_all_classes(p)), B.sqrt(_all_classes(q))
    w = B.concatenate([v, -B.sum(v, axis=-1, keepdims=True)], axis=-1) / (2 * u)
    c = B.sum(u * u2, axis=-1, keepdims=True)
    w2 = w - B.sum(u2 * w, axis=-1, keepdims=True) / (1.0 + c) * (u + u2)
    return (2 * u2 * w2)[..., :-1]


register_transport(Categorical, "mean", _categorical_transport)
register_transport(ZeroMeanGaussian, "standard", _zero_mean_transport)
register_transport(DiagonalGaussian, "standard", _diagonal_transport)
