r"""Cancellation-free pieces of Kullback–Leibler divergences.

Every KL divergence here is a sum of terms :math:`\phi(r) = r - 1 - \log r \ge 0`
(for a ratio :math:`r`) or their matrix analogue :math:`\mathrm{tr}\,\phi(R)`.  Evaluated as
written, :math:`\phi` subtracts numbers of order one to leave :math:`(r - 1)^2/2`, so nearby
distributions get a divergence of rounding noise (negative half of the time).  With
:math:`z = r - 1` and :math:`w = z/(2 + z)`, :math:`\log(1 + z) = 2\,\mathrm{artanh}\,w`, so

.. math:: \phi = z - \log(1 + z) = \frac{2w^2}{1 - w} - 2w^3\Big(\frac13 + \frac{w^2}{5} + \frac{w^4}{7}
          + \cdots\Big),

a sum without cancellation for :math:`|z| < 1/2` (then :math:`|w| \le 1/3` and the series is at
most an eighth of the first term).  Farther from 1, :math:`\phi \ge 0.09` and the direct form is
accurate.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

from .. import backend as B

#: |z| below this takes the series; at or above, phi >= 0.09 and the direct form loses nothing
NEAR = 0.5


def _series(w: Any, one: Any, mul: Callable, over_one_minus_w: Callable):
    r""":math:`2w^2/(1-w) - 2w^3(1/3 + w^2/5 + \dots + w^{30}/33)` with the products ``mul`` and the
    division ``over_one_minus_w``: scalars (elementwise) and commuting symmetric matrices alike."""
    w2 = mul(w, w)
    tail = 0.0 * w
    for k in range(33, 1, -2):         # (1/3)^30 / 33 < 1e-16: the truncation is below rounding
        tail = one / k + mul(w2, tail)
    return 2.0 * over_one_minus_w(w2) - 2.0 * mul(mul(w, w2), tail)


def log1p_gap_near(z: Any, xp: Any = B):
    r""":math:`z - \log(1 + z)` elementwise, accurate to a few ulps for :math:`|z| \le 1/2` (callers mask
    larger ``z`` to 0 first and take the direct form there)."""
    w = z / (2.0 + z)
    return _series(w, 1.0, operator.mul, lambda a: a / (1.0 - w))


def trace_log1p_gap_near(Z: Any, xp: Any = B):
    r""":math:`\mathrm{tr}(Z - \log(I + Z))` for symmetric :math:`Z` of spectral norm at most :math:`1/2`
    (batched over leading axes), by the series above in :math:`W = Z(2I + Z)^{-1}`: no eigenvalues
    (whose derivative is singular where they repeat, as at :math:`Z = 0`)."""
    eye = xp.eye(Z.shape[-1], like=Z)
    W = xp.solve(2.0 * eye + Z, Z)
    F = _series(W, eye, xp.matmul, lambda A: xp.solve(eye - W, A))
    return xp.sum(diag_part(F, xp), axis=-1)


def diag_part(A: Any, xp: Any = B):
    """The diagonals over the last two axes (the axis order autograd differentiates)."""
    return xp.diagonal(A, 0, -1, -2)


def log_ratio(a: Any, b: Any, xp: Any = B):
    r""":math:`\log(a/b)` for positive ``a, b``: the ratio's log taken whole where it is a normal float
    (:math:`\log a - \log b` would lose :math:`|\log a|` ulps), by parts where it is not."""
    r = a / b
    normal = (r > 1e-300) & (r < 1e300)
    return xp.where(normal, xp.log(xp.where(normal, r, 1.0 + 0.0 * r)), xp.log(a) - xp.log(b))


def ratio_minus_one_minus_log(a: Any, b: Any, xp: Any = B, diff: Any = None):
    r""":math:`r - 1 - \log r` for :math:`r = a / b` (positive ``a, b``), accurate near :math:`r = 1` and
    for ratios that overflow (then ``inf``, as the answer).  ``diff``: :math:`a - b` where the caller
    has it more accurately than the difference of the rounded ``a`` and ``b``."""
    z = ((a - b) if diff is None else diff) / b
    near = xp.abs(z) < NEAR
    close = log1p_gap_near(xp.where(near, z, 0.0 * z), xp)
    return xp.where(near, close, a / b - 1.0 - log_ratio(a, b, xp))


def kl_terms(a: Any, b: Any, z: Any, log_r: Any, xp: Any = B):
    r""":math:`a\,\phi(b/a) = b - a - a\log(b/a) \ge 0`, the terms of :math:`\mathrm{KL}(a\,\|\,b)` between
    two probability vectors (their sum is the KL since :math:`\sum b - \sum a = 0`), given
    :math:`z = b/a - 1` and :math:`\log(b/a)` as accurately as the caller's chart allows.  Far from
    :math:`b = a` the form :math:`b - a - a\log(b/a)` stays finite where :math:`b/a` overflows, and is 0 at
    :math:`a = 0`."""
    near = xp.abs(z) < NEAR
    close = a * log1p_gap_near(xp.where(near, z, 0.0 * z), xp)
    return xp.where(near, close, b - a - a * xp.where(near, 0.0 * log_r, log_r))
