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

LOG2PI = math.log(2 * math.pi)
from .gaussian import Gaussian

__all__ = ["DiagonalGaussian", "UnivariateGaussian"]


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
        x = np.asarray(x, dtype=float).reshape(-1, self.d)
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
            return B.diag_embed(B.concatenate([1.0 / var, 0.5 / (var * var)], axis=-1))
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

    def _kl(self, p, q):
        sp, sq = self._to_chart(p, "standard"), self._to_chart(q, "standard")
        d = self.d
        vp, vq, dm = sp[..., d:], sq[..., d:], sq[..., :d] - sp[..., :d]
        r = vp / vq
        return 0.5 * B.sum(r + dm * dm / vq - 1.0 - B.log(r), axis=-1)

    # ---------------------------------------------- product of half-planes (x, y) = (mu_i / sqrt2, sigma_i)
    # metric 2 (dx^2 + dy^2) / y^2; computed on the hyperboloid, where exp and log are closed forms
    def _halfplanes(self, s):
        return s[..., :self.d] / np.sqrt(2.0), B.sqrt(s[..., self.d:])

    @staticmethod
    def _hyperboloid(x, y):
        r2 = x * x + y * y
        return (r2 + 1.0) / (2 * y), (r2 - 1.0) / (2 * y), x / y

    def _geo_exp(self, s, v):
        d = self.d
        x, y = self._halfplanes(s)
        vx, vy = v[..., :d] / np.sqrt(2.0), v[..., d:] / (2 * y)
        X0, X1, X2 = self._hyperboloid(x, y)
        # push (vx, vy) to the hyperboloid's tangent space: V = J (vx, vy)
        V0 = x / y * vx + (0.5 - (x * x + 1.0) / (2 * y * y)) * vy
        V1 = x / y * vx + (0.5 - (x * x - 1.0) / (2 * y * y)) * vy
        V2 = vx / y - x / (y * y) * vy
        n = B.sqrt(vx * vx + vy * vy) / y          # Minkowski norm of V = hyperbolic speed
        xp = B.ops_of(n)
        small = n < 1e-12
        sinhc = xp.where(small, 1.0 + 0.0 * n, B.sinh(n) / xp.where(small, 1.0 + 0.0 * n, n))
        Y0, Y1, Y2 = (B.cosh(n) * X + sinhc * V for X, V in ((X0, V0), (X1, V1), (X2, V2)))
        y1 = 1.0 / (Y0 - Y1)
        return B.concatenate([np.sqrt(2.0) * Y2 * y1, y1 * y1], axis=-1)

    def _geo_log(self, s, s2):
        x, y = self._halfplanes(s)
        x2, y2 = self._halfplanes(s2)
        X, Y = self._hyperboloid(x, y), self._hyperboloid(x2, y2)
        c = X[0] * Y[0] - X[1] * Y[1] - X[2] * Y[2]                 # -<X, Y> = cosh(dist) >= 1
        P = [Yi - c * Xi for Xi, Yi in zip(X, Y)]                    # Y's component tangent at X
        nP = B.sqrt(B.maximum(-P[0] * P[0] + P[1] * P[1] + P[2] * P[2], 0.0 * c))
        dist = 2.0 * B.arcsinh(B.sqrt(((x - x2) ** 2 + (y - y2) ** 2) / (4.0 * y * y2)))
        xp = B.ops_of(nP)
        pos = nP > 0
        scale = xp.where(pos, dist / xp.where(pos, nP, 1.0 + 0.0 * nP), 0.0 * nP)
        V0, V1, V2 = (scale * Pi for Pi in P)
        # invert V = J (vx, vy): V0 - V1 = -vy / y^2 and V2 = vx / y - x vy / y^2
        vy = -(V0 - V1) * y * y
        vx = y * V2 + x * vy / y
        return B.concatenate([np.sqrt(2.0) * vx, 2 * y * vy], axis=-1)

    def _geo_dist(self, s, s2):
        d, xp = self.d, B.ops_of(s, s2)  # one dispatch per call
        var1, var2 = s[..., d:], s2[..., d:]
        dm = s[..., :d] - s2[..., :d]
        sd1, sd2 = xp.sqrt(var1), xp.sqrt(var2)
        # per factor sqrt2 arccosh(1 + a) with a = (dmu^2 / 2 + dsigma^2) / (2 s1 s2), as 2 sqrt2 arcsinh(sqrt(a / 2))
        a = (0.5 * dm * dm + (sd1 - sd2) ** 2) / (sd1 * sd2)
        delta = xp.arcsinh(0.5 * xp.sqrt(a))
        if d == 1:
            return 2.0 * np.sqrt(2.0) * xp.abs(delta[..., 0])
        return 2.0 * np.sqrt(2.0) * xp.sqrt(xp.sum(delta * delta, axis=-1))


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
