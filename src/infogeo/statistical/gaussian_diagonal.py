r"""Gaussians with diagonal covariance, and univariate Gaussians: products of hyperbolic half-planes.

Each coordinate pair :math:`(\mu_i/\sqrt2, \sigma_i)` is the Poincaré half-plane with
its metric scaled by 2 (Skovgaard 1984; Costa, Santos & Strapasson 2015); every
operation here broadcasts over batches of points on either backend.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from .. import backend as B
from ..geometry import points as _points
from ..geometry.charts import Chart
from . import _stable
from ._inputs import finite_velocity, observations_of

LOG2PI = math.log(2 * math.pi)
from .gaussian import Gaussian

__all__ = ["DiagonalGaussian", "UnivariateGaussian"]


def _quiet(f):
    """Run ``f`` without numpy's floating-point warnings: its overflowing branches are discarded by ``where``."""
    def wrapped(*args):
        with np.errstate(all="ignore"):
            return f(*args)
    wrapped.__name__, wrapped.__doc__ = f.__name__, f.__doc__
    return wrapped


class DiagonalGaussian(Gaussian):
    r"""Gaussians with diagonal covariance: points :math:`(\mu_1..\mu_d, \sigma_1^2..\sigma_d^2)`.

    A product of univariate families: natural :math:`(\mu_i/\sigma_i^2, -1/(2\sigma_i^2))`,
    mean :math:`(\mu_i, \sigma_i^2 + \mu_i^2)`, Fisher
    :math:`\mathrm{diag}(1/\sigma_i^2,\ 1/(2\sigma_i^4))` in standard coordinates.
    Each factor is the hyperbolic half-plane :math:`(\mu/\sqrt2, \sigma)` with
    its metric scaled by 2, so
    :math:`d = \big(\sum_i 2\,\operatorname{arccosh}^2(1 + \frac{(\Delta\mu_i)^2/2 + (\Delta\sigma_i)^2}{2\sigma_i\sigma_i'})\big)^{1/2}`.

    The chart ``"mean_std"`` has coordinates :math:`(\mu_i, \sigma_i)` , where the Fisher metric is :math:`\mathrm{diag}(1/\sigma_i^2,\ 2/\sigma_i^2)`:
    ``Gaussian(dim=1, covariance="diagonal").in_chart("mean_std")``.
    """

    geometry_chart = "standard"
    _vectorized = True
    _geo_vectorized = True
    _diagonal_kind = True
    _centred_fit = True

    @property

    def coordinate_names(self) -> Optional[tuple]:
        """Axis labels for the standard and ``mean_std`` charts (``None`` in the others)."""
        sub = [""] if self.d == 1 else [f"_{i + 1}" for i in range(self.d)]
        second = {"standard": r"\sigma{}^2", "mean_std": r"\sigma{}"}.get(self.chart)
        if second is None:
            return None
        return tuple(rf"$\mu{i}$" for i in sub) + tuple("$" + second.format(i) + "$" for i in sub)

    def __init__(self, dim: int = 1, covariance: Optional[str] = "diagonal", cov: Any = None,
                 chart: Optional[str] = None):
        if cov is not None:
            raise ValueError(f"{type(self).__name__} takes no fixed covariance")
        d = _points.positive_int(dim, "dim (the sample dimension)")
        self._init(d, 2 * d, chart, "DiagonalGaussian")

    def _mu_cov(self, s):
        return s[..., :self.d], B.diag_embed(s[..., self.d:])

    def _std(self, mu, S):
        S_np = np.asarray(B.to_numpy(S))
        if not np.allclose(S_np, S_np * np.eye(self.d)):
            raise ValueError("the diagonal Gaussian family needs a diagonal covariance")
        return B.concatenate([B.array(mu, like=S) if B.is_torch(S) else mu,
                              B.diagonal(S, 0, -2, -1)], axis=-1)

    def _restrict_cov(self, S):
        return np.diag(np.diag(S))

    def variance(self, p):
        """The variances :math:`\\sigma_i^2`."""
        return self.to_chart(p, "standard")[..., self.d:]

    def log_partition(self, theta):
        h, c = theta[..., :self.d], theta[..., self.d:]
        return B.sum(-h * h / (4.0 * c) - 0.5 * B.log(-2.0 * c), axis=-1) + 0.5 * self.d * LOG2PI

    def moments(self, theta):
        h, c = theta[..., :self.d], theta[..., self.d:]
        var = -0.5 / c
        mu = h * var
        return B.concatenate([mu, var + mu * mu], axis=-1)

    def sufficient_statistics(self, x):
        x = observations_of(self, x).reshape(-1, self.d)
        return np.concatenate([x, x * x], axis=1)

    def in_natural_domain(self, theta):
        return bool(np.all(B.to_numpy(theta)[..., self.d:] < 0))

    def _make_charts(self):
        d = self.d

        def check_var(var, what):
            a = _points.numpy_view(var)
            if a.size and a.min() <= 0:
                raise ValueError(f"{what} must be positive, got {a.tolist() if a.size < 50 else a.min()}")

        def check_nat(th):
            if not self.in_natural_domain(th):
                raise ValueError("point is outside the natural domain: expected negative coefficients "
                                 f"-1/(2 sigma^2) in the last {d} natural parameters")

        cat = lambda a, b: B.concatenate([a, b], axis=-1)  # noqa: E731
        std_to_nat = lambda s: cat(s[..., :d] / s[..., d:], -0.5 / s[..., d:])  # noqa: E731
        nat_to_std = lambda th: cat(-0.5 * th[..., :d] / th[..., d:], -0.5 / th[..., d:])  # noqa: E731
        m2s = lambda e: cat(e[..., :d], e[..., d:] - e[..., :d] * e[..., :d])  # noqa: E731
        s2m = lambda s: cat(s[..., :d], s[..., d:] + s[..., :d] * s[..., :d])  # noqa: E731
        # (mu, sigma): the Fisher metric is diag(1, 2) / sigma^2 there
        sd2s = lambda u: cat(u[..., :d], u[..., d:] * u[..., d:])  # noqa: E731
        s2sd = lambda s: cat(s[..., :d], B.sqrt(s[..., d:]))  # noqa: E731
        self._mean_std = (m2s, s2m)
        self._std_dev = (sd2s, s2sd)
        return {
            "standard": Chart("standard", std_to_nat, nat_to_std, lambda s: check_var(s[..., d:], "variances"),
                              "(means, positive variances)", vectorized=True),
            "mean_std": Chart("mean_std", lambda u: std_to_nat(sd2s(u)), lambda th: s2sd(nat_to_std(th)),
                              lambda u: check_var(u[..., d:], "standard deviations"),
                              "(means, positive standard deviations)", vectorized=True),
            "natural": Chart("natural", lambda th: th, lambda th: th, check_nat,
                             "(mu / sigma^2, -1 / (2 sigma^2))", vectorized=True),
            "mean": Chart("mean", lambda e: std_to_nat(m2s(e)), lambda th: s2m(nat_to_std(th)),
                          lambda e: check_var(m2s(e)[..., d:], "variances E[x^2] - E[x]^2"),
                          "(E[x], E[x^2]) with E[x^2] > E[x]^2", vectorized=True),
        }

    def _direct_map(self, source, target):
        m2s, s2m = self._mean_std
        sd2s, s2sd = self._std_dev
        return {("mean", "standard"): m2s, ("standard", "mean"): s2m,
                ("mean_std", "standard"): sd2s, ("standard", "mean_std"): s2sd}.get((source, target))

    def _fisher_closed(self, x):
        s = self._to_chart(x, "standard")
        mu, var = s[..., :self.d], s[..., self.d:]
        if self.chart == "standard":
            return B.diag_embed(B.concatenate([1.0 / var, 0.5 / var / var], axis=-1))
        if self.chart == "mean_std":
            return B.diag_embed(B.concatenate([1.0 / var, 2.0 / var], axis=-1))
        if self.chart not in ("natural", "mean"):
            return None
        # Cov(x, x^2) per coordinate: Var x = v, Cov = 2 mu v, Var x^2 = 2 v^2 + 4 mu^2 v
        a, b, c = var, 2 * mu * var, 2 * var * var + 4 * mu * mu * var
        if self.chart == "mean":
            det = a * c - b * b
            a, b, c = c / det, -b / det, a / det
        top = B.concatenate([B.diag_embed(a), B.diag_embed(b)], axis=-1)
        bot = B.concatenate([B.diag_embed(b), B.diag_embed(c)], axis=-1)
        return B.concatenate([top, bot], axis=-2)

    @_quiet
    def _kl(self, p, q):
        sp, sq = self._to_chart(p, "standard"), self._to_chart(q, "standard")
        d, xp = self.d, B.ops_of(p, q)
        vp, vq = sp[..., d:], sq[..., d:]
        # (dmu)^2 / vq as a square of halves: no overflow of the difference or of its square before the division
        w = (0.5 * sq[..., :d] - 0.5 * sp[..., :d]) / xp.sqrt(vq)
        return 0.5 * B.sum(_stable.ratio_minus_one_minus_log(vp, vq, xp) + 4.0 * w * w, axis=-1)

    # ---------------------------------------------- product of half-planes (x, y) = (mu_i / sqrt2, sigma_i)
    # metric 2 (dx^2 + dy^2) / y^2.  The closed forms below are written so that no two large numbers are
    # subtracted: the geodesic is cosh t - sin(phi) sinh t = a e^-t + b e^t with a, b >= 0 (no cosh-like
    # hyperboloid coordinates), differences of variances are formed as v2 - v1 (exact when close), and
    # lengths go through logarithms where a ratio could overflow or underflow.  Every point with
    # representable coordinates and finite answer gets it to a few ulps (tests: mpmath at 60 digits).
    @_quiet
    def _geo_exp(self, s, v):
        finite_velocity(v)   # a NaN velocity (geodesic(p, q)(nan)) took the branch "not moving" and returned s
        d, xp = self.d, B.ops_of(s, v)
        mu, var = s[..., :d], s[..., d:]
        # velocity in units of the hyperbolic speed: (a, b) = t (cos phi, sin phi)
        a = v[..., :d] / (np.sqrt(2.0) * xp.sqrt(var))
        b = v[..., d:] / (2.0 * var)
        t = xp.hypot(a, b)
        moving = t > 0
        t1 = xp.where(moving, t, 1.0 + 0.0 * t)
        sin_phi = b / t1
        log_cos = xp.log(xp.abs(a) / t1)                      # <= 0; -inf on the vertical geodesic
        # cosh t - sin(phi) sinh t = e^t (A e^-2t + B) with 2A = 1 + sin(phi), 2B = 1 - sin(phi) >= 0: the
        # smaller of the two as cos^2(phi) / (1 + |sin(phi)|), so neither is a difference of close numbers
        log_big = xp.log1p(xp.abs(sin_phi))
        log_small = 2.0 * log_cos - log_big
        up = sin_phi >= 0
        log_2a, log_2b = xp.where(up, log_big, log_small), xp.where(up, log_small, log_big)
        log_dp = xp.logaddexp(log_2a - 2.0 * t1, log_2b) - np.log(2.0)  # log(A e^-2t + B)
        var1 = var * xp.exp(-2.0 * t1 - 2.0 * log_dp)
        # mean: x + y cos(phi) sinh t / (cosh t - sin(phi) sinh t) = x + y cos(phi) (1 - e^-2t) / (2 (A e^-2t + B))
        size = xp.exp(log_cos + xp.log(-xp.expm1(-2.0 * t1)) - np.log(2.0) - log_dp)
        shift = xp.sqrt(var) * xp.where(a == 0, 0.0 * a, xp.where(a > 0, size, -size))
        mu1 = mu + np.sqrt(2.0) * shift
        return B.concatenate([xp.where(moving, mu1, mu), xp.where(moving, var1, var)], axis=-1)

    @_quiet
    def _geo_log(self, s, s2):
        d, xp = self.d, B.ops_of(s, s2)
        var, var2 = s[..., d:], s2[..., d:]
        dx, t = _halfplane_offsets(s[..., :d], var, s2[..., :d], var2, xp)
        y = xp.sqrt(var)
        # direction (cos phi, sin phi) proportional to (2 y dx, dx^2 + var2 - var), scaled by the largest length
        m = xp.maximum(xp.maximum(xp.abs(dx), y), xp.sqrt(var2))
        m = xp.where(m > 0, m, 1.0 + 0.0 * m)
        P = 2.0 * (y / m) * (dx / m)
        Q = (dx / m) * (dx / m) + ((var2 - var) / m) / m
        n = xp.hypot(P, Q)
        n = xp.where(n > 0, n, 1.0 + 0.0 * n)
        a, b = t * P / n, t * Q / n
        return B.concatenate([np.sqrt(2.0) * y * a, 2.0 * var * b], axis=-1)

    def _geo_dist(self, s, s2):
        d, xp = self.d, B.ops_of(s, s2)  # one dispatch per call
        _, t = _halfplane_offsets(s[..., :d], s[..., d:], s2[..., :d], s2[..., d:], xp)
        if d == 1:
            return np.sqrt(2.0) * t[..., 0]
        return np.sqrt(2.0) * xp.sqrt(xp.sum(t * t, axis=-1))


@_quiet
def _halfplane_offsets(mu, var, mu2, var2, xp):
    r"""``(dx, t)``: the offset :math:`\Delta\mu/\sqrt2` and the unit-half-plane distance per factor.

    :math:`t = 2\,\operatorname{arcsinh} r`, :math:`r = \sqrt{\Delta x^2 + \Delta y^2} / (2\sqrt{y y'})`
    (:math:`y = \sigma`), with :math:`\Delta y = (v' - v)/(\sigma + \sigma')` (no cancellation of close
    standard deviations) and :math:`\log r` in place of :math:`r` where the ratio over- or underflows.
    """
    dx = np.sqrt(2.0) * (0.5 * mu2 - 0.5 * mu)            # (mu2 - mu) / sqrt2 without overflow of the difference
    y, y2 = xp.sqrt(var), xp.sqrt(var2)
    dy = (var2 - var) / (y + y2)
    h = xp.hypot(dx, dy)
    r = (h / (2.0 * xp.sqrt(y))) / xp.sqrt(y2)
    normal = (r < 1e300) & (r > 1e-300)
    log_r = xp.log(h) - np.log(2.0) - 0.25 * xp.log(var) - 0.25 * xp.log(var2)
    # arcsinh r = log(2 r) + O(r^-2) for large r, = r + O(r^3) for tiny r
    zero = 0.0 * var                                       # finite, unlike r and log r
    far = np.log(2.0) + xp.maximum(log_r, zero)
    t = 2.0 * xp.where(normal, xp.arcsinh(xp.where(normal, r, 1.0 + zero)),
                       xp.where(log_r > 0, far, xp.exp(xp.minimum(log_r, zero))))
    return dx, t


class UnivariateGaussian(DiagonalGaussian):
    r"""Univariate Gaussians, points :math:`(\mu, \sigma^2)`; Fisher :math:`(d\mu^2 + 2d\sigma^2)/\sigma^2`.

    :math:`d(N(\mu_1,\sigma_1^2), N(\mu_2,\sigma_2^2)) = \sqrt2\,\operatorname{arccosh}\big(1 +
    \frac{(\mu_1-\mu_2)^2/2 + (\sigma_1-\sigma_2)^2}{2\sigma_1\sigma_2}\big)`.
    """

    def __init__(self, dim: int = 1, covariance: Optional[str] = "full", cov: Any = None,
                 chart: Optional[str] = None):
        if _points.positive_int(dim, "dim (the sample dimension)") != 1:
            raise ValueError("UnivariateGaussian has dim == 1")
        super().__init__(1, "diagonal", cov, chart)
        self.name = "Gaussian(sample_dim=1)"
