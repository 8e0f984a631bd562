r"""Gaussian families with the Fisher–Rao metric.

``Gaussian(dim, covariance=...)`` returns one of

=========================  =============================  ===============================================
``covariance=``            points (standard chart)        Fisher–Rao geometry (closed form)
=========================  =============================  ===============================================
``"full"``, ``dim == 1``   :math:`(\mu, \sigma^2)`         half-plane :math:`(\mu/\sqrt2, \sigma)`, scaled by :math:`\sqrt2`
``"full"``                 :math:`(\mu, \mathrm{vech}\Sigma)`  Eriksen's closed-form exp; Newton shooting for log
``"diagonal"``             :math:`(\mu, \sigma_1^2..\sigma_d^2)`  product of univariate half-planes
``"fixed"`` (``cov=``)     :math:`\mu`                     Mahalanobis (flat)
``"zero_mean"``            :math:`\mathrm{vech}\Sigma`     affine-invariant SPD metric scaled by 1/2
=========================  =============================  ===============================================

**Coordinates.**  :math:`\mathrm{vech}\Sigma` is the upper triangle of
:math:`\Sigma` read row by row (``numpy.triu_indices``), one coordinate per
free entry, so a tangent coordinate :math:`v_{ij}` (:math:`i<j`) moves both
:math:`\Sigma_{ij}` and :math:`\Sigma_{ji}`.  The family is written as a
*minimal* exponential family with :math:`t(x) = (x, \mathrm{vech}(xx^T))`;
then

* natural :math:`\theta = (h, c)` with :math:`h = \Lambda\mu`,
  :math:`\Lambda = \Sigma^{-1}`, :math:`c_{ii} = -\tfrac12\Lambda_{ii}`,
  :math:`c_{ij} = -\Lambda_{ij}` (:math:`i<j`), so that
  :math:`\theta^T t(x) = h^Tx - \tfrac12 x^T\Lambda x` exactly;
* mean :math:`\eta = (\mu, \mathrm{vech}(\Sigma + \mu\mu^T))`;
* :math:`\psi(\theta) = \tfrac12 h^T\Lambda^{-1}h - \tfrac12\log|\Lambda| + \tfrac d2\log 2\pi`.

Validity of a point is checked by a Cholesky factorisation of the covariance
(or precision) it encodes, so a point with a non-SPD covariance is rejected
with a message rather than producing NaNs.

Fisher in standard coordinates (Miller 1974):
:math:`G(\partial_a, \partial_b) = \partial_a\mu^T\Sigma^{-1}\partial_b\mu
+ \tfrac12\mathrm{tr}(\Sigma^{-1}\partial_a\Sigma\,\Sigma^{-1}\partial_b\Sigma)`;
in natural coordinates :math:`\mathrm{Cov}[t(x)]` from Isserlis' theorem; in
mean coordinates its inverse.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Optional

import numpy as np

from .. import backend as B
from . import _spaces, gaussian_geodesics
from .exponential_family import Chart, ExponentialFamily
from .gaussian_geodesics import GaussianShootingError

logger = logging.getLogger(__name__)

__all__ = ["Gaussian", "UnivariateGaussian", "DiagonalGaussian", "FullGaussian",
           "FixedCovarianceGaussian", "ZeroMeanGaussian", "GaussianShootingError"]

LOG2PI = math.log(2 * math.pi)


# ------------------------------------------------------------------ vech helpers
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
        """Symmetric matrix whose upper triangle is ``v``."""
        return B.einsum("a,aij->ij", v, B.array(self.E, like=v))

    def vech(self, M):
        return M[self.iu]

    def precision_from_natural(self, c):
        return -self.sym(c * B.array(self.w, like=c))

    def natural_from_precision(self, L):
        return -self.vech(L) / B.array(self.w, like=L)


def _check_spd(S: np.ndarray, what: str) -> None:
    if not np.allclose(S, S.T, rtol=1e-10, atol=1e-12):
        raise ValueError(f"{what} must be symmetric, got {S.tolist()}")
    try:
        np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        lam = np.linalg.eigvalsh(0.5 * (S + S.T)).min()
        raise ValueError(f"{what} is not symmetric positive definite (smallest eigenvalue {lam:.3g}); "
                         f"expected an SPD matrix") from None


def _miller_cov_block(Si, vh: _Vech):
    r""":math:`\tfrac12\mathrm{tr}(\Sigma^{-1}E_a\Sigma^{-1}E_b)` for the vech basis."""
    E = B.array(vh.E, like=Si)
    return 0.5 * B.einsum("aij,jk,bkl,li->ab", E, Si, E, Si)


def _cov_of_t(mu, S, vh: _Vech, with_mean: bool = True):
    r""":math:`\mathrm{Cov}[(x, \mathrm{vech}\,xx^T)]` for :math:`x \sim N(\mu, \Sigma)` (Isserlis)."""
    i, j = vh.iu
    Sik, Sjl = S[i][:, i], S[j][:, j]
    Sil, Sjk = S[i][:, j], S[j][:, i]
    quad = Sik * Sjl + Sil * Sjk
    if not with_mean:
        return quad
    mi, mj = mu[i], mu[j]
    quad = (quad + B.outer(mi, mi) * Sjl + B.outer(mi, mj) * Sjk
            + B.outer(mj, mi) * Sil + B.outer(mj, mj) * Sik)
    # Cov(x_r, x_k x_l) = mu_k S_rl + mu_l S_rk
    cross = S[:, j] * mi[None, :] + S[:, i] * mj[None, :]
    top = B.concatenate([S, cross], axis=1)
    bottom = B.concatenate([B.transpose(cross), quad], axis=1)
    return B.concatenate([top, bottom], axis=0)


# ---------------------------------------------------------------------- base
class Gaussian(ExponentialFamily):
    r"""Gaussian distributions :math:`N(\mu, \Sigma)` on :math:`\mathbb{R}^d` with the Fisher metric.

    Parameters
    ----------
    dim : int
        Dimension :math:`d` of the sample space.
    covariance : {"full", "diagonal", "fixed", "zero_mean"}
        Which sub-family; ``"fixed"`` needs ``cov=``.  ``"full"`` with ``dim == 1``
        is the univariate family.
    cov : array, optional
        The fixed covariance for ``covariance="fixed"``.
    chart : {"standard", "natural", "mean"}

    Examples
    --------
    >>> G = Gaussian(dim=1)
    >>> p, q = G.point(mean=0.0, std=1.0), G.point(mean=1.0, std=2.0)
    >>> round(G.dist(p, q), 9)     # sqrt(2) arccosh(1.375)
    1.189380931
    """

    def __new__(cls, dim: int = 1, covariance: str = "full", cov: Any = None, chart: Optional[str] = None):
        if cls is Gaussian:
            kinds = {"full": FullGaussian if dim != 1 else UnivariateGaussian, "diagonal": DiagonalGaussian,
                     "fixed": FixedCovarianceGaussian, "zero_mean": ZeroMeanGaussian}
            if covariance not in kinds:
                raise ValueError(f"unknown covariance {covariance!r}; expected one of {sorted(kinds)}")
            cls = kinds[covariance]
        return super().__new__(cls)

    def _init(self, d: int, dim: int, chart: Optional[str], name: str):
        if int(d) != d or d < 1:
            raise ValueError(f"dim must be a positive integer, got {d!r}")
        self.d = int(d)
        self.vh = _Vech(self.d)
        super().__init__(dim=dim, chart=chart, name=name)

    # subclasses: _mu_cov(s) and _std(mu, Sigma) on standard coordinates (backend ops)
    def mean(self, p: Any):
        r""":math:`\mu` of the point ``p`` (any chart)."""
        return self._mu_cov(self.to_chart(p, "standard"))[0]

    def cov(self, p: Any):
        r""":math:`\Sigma` of the point ``p`` (any chart)."""
        return self._mu_cov(self.to_chart(p, "standard"))[1]

    def point(self, coords: Any = None, *, mean: Any = None, cov: Any = None,
              std: Any = None, var: Any = None):
        """A validated point, from coordinates in the current chart or from ``mean=`` and ``cov=``.

        ``std=`` / ``var=`` give the standard deviation / variance when ``dim == 1``
        (and per coordinate for the diagonal family).
        """
        if coords is not None:
            if any(a is not None for a in (mean, cov, std, var)):
                raise ValueError("give coords or mean=/cov=/std=/var=, not both")
            return super().point(coords)
        mu, S = self._parse_mean_cov(mean, cov, std, var)
        x = self.from_chart(self._std(B.array(mu), B.array(S)), "standard")
        self.check_point(x)
        return x

    def _parse_mean_cov(self, mean, cov, std, var):
        d = self.d
        given = [a is not None for a in (cov, std, var)]
        if sum(given) > 1:
            raise ValueError("give at most one of cov=, std=, var=")
        mu = np.zeros(d) if mean is None else np.array(B.to_numpy(B.array(mean)), dtype=float).reshape(-1)
        if mu.shape != (d,):
            raise ValueError(f"mean must have {d} entries, got shape {mu.shape}")
        if std is not None or var is not None:
            a = np.array(B.to_numpy(B.array(std if std is not None else var)), dtype=float).reshape(-1)
            what = "std" if std is not None else "var"
            if a.size == 1 and d > 1 and not isinstance(self, DiagonalGaussian):
                raise ValueError(f"{what}= is only accepted when dim == 1 (or for the diagonal family); use cov=")
            if a.size not in (1, d):
                raise ValueError(f"{what} must have 1 or {d} entries, got {a.size}")
            if np.any(~np.isfinite(a)) or np.any(a <= 0):
                raise ValueError(f"{what} must be positive, got {a.tolist()}")
            S = np.diag(np.broadcast_to(a ** 2 if std is not None else a, (d,)).astype(float))
        elif cov is not None:
            S = np.array(B.to_numpy(B.array(cov)), dtype=float)
            if S.ndim == 0 or S.size == 1:
                S = S.reshape(1, 1)
            if S.shape != (d, d):
                raise ValueError(f"cov must have shape ({d}, {d}), got {S.shape}")
            _check_spd(S, "covariance")
        else:
            S = self._default_cov()
        return mu, S

    def _default_cov(self) -> np.ndarray:
        raise ValueError("give the covariance: cov= (or std=/var= when dim == 1)")

    def _check_cov_of(self, s, what="covariance"):
        S = B.to_numpy(self._mu_cov(s)[1])
        _check_spd(S, what)

    def sample(self, p, n, rng=None):
        self.check_point(p)
        mu, S = (B.to_numpy(a) for a in (self.mean(p), self.cov(p)))
        z = np.random.default_rng(rng).standard_normal((int(n), self.d))
        return mu + z @ np.linalg.cholesky(S).T

    def random_point(self, rng=None, scale: float = 1.0):
        rng = np.random.default_rng(rng)
        A = rng.standard_normal((self.d, self.d)) * 0.4
        S = A @ A.T + np.eye(self.d) * rng.uniform(0.5, 1.5)
        mu = scale * rng.standard_normal(self.d)
        return self.from_chart(self._std(B.array(mu), B.array(self._restrict_cov(S))), "standard")

    def _restrict_cov(self, S):
        return S

    def kl(self, p, q):
        r""":math:`\tfrac12[\mathrm{tr}(\Sigma_q^{-1}\Sigma_p) + \Delta\mu^T\Sigma_q^{-1}\Delta\mu - d
        + \log|\Sigma_q|/|\Sigma_p|]`."""
        mp, Sp = self._mu_cov(self.to_chart(p, "standard"))
        mq, Sq = self._mu_cov(self.to_chart(q, "standard"))
        dm = mq - mp
        X = B.solve(Sq, B.concatenate([Sp, B.reshape(dm, (-1, 1))], axis=1))
        return 0.5 * (B.trace(X[:, :-1]) + B.dot(dm, X[:, -1]) - self.d
                      + B.slogdet(Sq)[1] - B.slogdet(Sp)[1])


# -------------------------------------------------------------------- full
class FullGaussian(Gaussian):
    r"""Full-covariance Gaussian, points :math:`(\mu, \mathrm{vech}\Sigma)`, dimension :math:`d + d(d+1)/2`.

    Geodesics: Eriksen's closed-form solution of
    :math:`\mu'' = \Sigma'\Sigma^{-1}\mu'`, :math:`\Sigma'' = \Sigma'\Sigma^{-1}\Sigma' - \mu'\mu'^T`:
    for the start :math:`(0, I)` and velocity :math:`(\delta, B)`,

    .. math:: e^{tA},\quad A = \begin{pmatrix} -B & \delta & 0\\ \delta^T & 0 & -\delta^T\\
              0 & -\delta & B\end{pmatrix},\qquad
              \Sigma(t) = \Delta(t)^{-1},\ \mu(t) = \Delta(t)^{-1}\delta(t),

    with :math:`\Delta, \delta` the top-left block and top-middle column of
    :math:`e^{tA}`; a general start is reduced to :math:`(0, I)` by the affine
    map :math:`x \mapsto L^{-1}(x - \mu_0)`, :math:`\Sigma_0 = LL^T`, an isometry.
    ``log`` solves the boundary problem by Newton's method with the exact
    Jacobian (Fréchet derivative of the matrix exponential), with continuation
    when the points are far apart; ``dist`` is the length of that geodesic.
    """

    geometry_chart = "standard"

    def __init__(self, dim: int = 2, covariance: Optional[str] = "full", cov: Any = None,
                 chart: Optional[str] = None):
        if covariance not in (None, "full") or cov is not None:
            raise ValueError("FullGaussian takes no fixed covariance")
        d = int(dim)
        self._init(d, d + d * (d + 1) // 2, chart, f"Gaussian(dim={d})")

    def _mu_cov(self, s):
        return s[:self.d], self.vh.sym(s[self.d:])

    def _std(self, mu, S):
        return B.concatenate([mu, self.vh.vech(S)])

    def _natural_parts(self, theta):
        return theta[:self.d], self.vh.precision_from_natural(theta[self.d:])

    def log_partition(self, theta):
        h, L = self._natural_parts(theta)
        return 0.5 * B.dot(h, B.solve(L, h)) - 0.5 * B.slogdet(L)[1] + 0.5 * self.d * LOG2PI

    def moments(self, theta):
        h, L = self._natural_parts(theta)
        S = B.inv(L)
        mu = B.matmul(S, h)
        return B.concatenate([mu, self.vh.vech(S + B.outer(mu, mu))])

    def sufficient_statistics(self, x):
        x = np.asarray(B.to_numpy(x), dtype=float).reshape(-1, self.d)
        return np.concatenate([x, (x[:, :, None] * x[:, None, :])[:, self.vh.iu[0], self.vh.iu[1]]], axis=1)

    def in_natural_domain(self, theta):
        try:
            np.linalg.cholesky(B.to_numpy(self._natural_parts(theta)[1]))
        except np.linalg.LinAlgError:
            return False
        return True

    def _make_charts(self):
        d, vh = self.d, self.vh

        def std_to_nat(s):
            mu, S = self._mu_cov(s)
            L = B.inv(S)
            return B.concatenate([B.matmul(L, mu), vh.natural_from_precision(L)])

        def nat_to_std(th):
            h, L = self._natural_parts(th)
            S = B.inv(L)
            return B.concatenate([B.matmul(S, h), vh.vech(S)])

        def mean_to_std(e):
            mu = e[:d]
            return B.concatenate([mu, e[d:] - vh.vech(B.outer(mu, mu))])

        def std_to_mean(s):
            mu = s[:d]
            return B.concatenate([mu, s[d:] + vh.vech(B.outer(mu, mu))])

        self._mean_std = (mean_to_std, std_to_mean)

        def check_nat(th):
            _check_spd(B.to_numpy(self._natural_parts(th)[1]), "precision matrix (from the natural parameters)")

        return {
            "standard": Chart("standard", std_to_nat, nat_to_std, lambda s: self._check_cov_of(s),
                              "(mean, vech of an SPD covariance)"),
            "natural": Chart("natural", lambda th: th, lambda th: th, check_nat,
                             "(Lambda mu, vech coefficients of -Lambda/2) with SPD precision Lambda"),
            "mean": Chart("mean", lambda e: std_to_nat(mean_to_std(e)), lambda th: std_to_mean(nat_to_std(th)),
                          lambda e: self._check_cov_of(mean_to_std(e), "covariance E[xx^T] - mu mu^T"),
                          "(mu, vech(Sigma + mu mu^T)) with SPD Sigma"),
        }

    def _direct_map(self, source, target):
        m2s, s2m = self._mean_std
        return {("mean", "standard"): m2s, ("standard", "mean"): s2m}.get((source, target))

    def _fisher_closed(self, x):
        s = self.to_chart(x, "standard")
        mu, S = self._mu_cov(s)
        if self.chart == "standard":
            Si = B.inv(S)
            d, m = self.d, self.vh.m
            top = B.concatenate([Si, B.zeros((d, m), like=x)], axis=1)
            bot = B.concatenate([B.zeros((m, d), like=x), _miller_cov_block(Si, self.vh)], axis=1)
            return B.concatenate([top, bot], axis=0)
        C = _cov_of_t(mu, S, self.vh)
        if self.chart == "natural":
            return C
        if self.chart == "mean":
            return B.inv(C)
        return None

    def _default_cov(self):
        return np.eye(self.d)

    # ------------------------------------------------------------ geodesics
    def _mu_cov_np(self, s):
        return tuple(B.to_numpy(a) for a in self._mu_cov(B.array(s)))

    def _geo_exp(self, s, v):
        mu0, S0 = self._mu_cov_np(s)
        dS = B.to_numpy(self.vh.sym(B.array(v[self.d:])))
        mu1, S1 = gaussian_geodesics.exp(mu0, S0, v[:self.d], dS)
        _check_spd(S1, "covariance at the end of the geodesic")
        return np.concatenate([mu1, self.vh.vech(S1)])

    def _geo_log(self, s, s2):
        dmu, dS = gaussian_geodesics.log(*self._mu_cov_np(s), *self._mu_cov_np(s2))
        return np.concatenate([dmu, self.vh.vech(dS)])

    def _geo_dist(self, s, s2):
        return gaussian_geodesics.dist(*self._mu_cov_np(s), *self._mu_cov_np(s2))


# ---------------------------------------------------------------- diagonal
class DiagonalGaussian(Gaussian):
    r"""Gaussians with diagonal covariance: points :math:`(\mu_1..\mu_d, \sigma_1^2..\sigma_d^2)`.

    A product of univariate families: natural :math:`(\mu_i/\sigma_i^2, -1/(2\sigma_i^2))`,
    mean :math:`(\mu_i, \sigma_i^2 + \mu_i^2)`, Fisher
    :math:`\mathrm{diag}(1/\sigma_i^2,\ 1/(2\sigma_i^4))` in standard coordinates.
    Each factor is the hyperbolic half-plane :math:`(\mu/\sqrt2, \sigma)` with
    its metric scaled by 2, so
    :math:`d = \big(\sum_i 2\,\operatorname{arccosh}^2(1 + \frac{(\Delta\mu_i)^2/2 + (\Delta\sigma_i)^2}{2\sigma_i\sigma_i'})\big)^{1/2}`.

    The chart ``"mean_std"`` has coordinates :math:`(\mu_i, \sigma_i)` (the pictures of
    seed 003), where the Fisher metric is :math:`\mathrm{diag}(1/\sigma_i^2,\ 2/\sigma_i^2)`:
    ``Gaussian(dim=1, covariance="diagonal").in_chart("mean_std")``.
    """

    geometry_chart = "standard"

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
        d = int(dim)
        self._init(d, 2 * d, chart, f"DiagonalGaussian(dim={d})")

    def _mu_cov(self, s):
        return s[:self.d], B.diag(s[self.d:])

    def _std(self, mu, S):
        if not np.allclose(B.to_numpy(S), np.diag(np.diag(B.to_numpy(S)))):
            raise ValueError("the diagonal Gaussian family needs a diagonal covariance")
        return B.concatenate([mu, B.diagonal(S)])

    def _restrict_cov(self, S):
        return np.diag(np.diag(S))

    def variance(self, p):
        """The variances :math:`\\sigma_i^2`."""
        return self.to_chart(p, "standard")[self.d:]

    def log_partition(self, theta):
        h, c = theta[:self.d], theta[self.d:]
        return B.sum(-h * h / (4.0 * c) - 0.5 * B.log(-2.0 * c)) + 0.5 * self.d * LOG2PI

    def moments(self, theta):
        h, c = theta[:self.d], theta[self.d:]
        var = -0.5 / c
        mu = h * var
        return B.concatenate([mu, var + mu * mu])

    def sufficient_statistics(self, x):
        x = np.asarray(B.to_numpy(x), dtype=float).reshape(-1, self.d)
        return np.concatenate([x, x * x], axis=1)

    def in_natural_domain(self, theta):
        return bool(np.all(B.to_numpy(theta)[self.d:] < 0))

    def _make_charts(self):
        d = self.d

        def check_var(var, what):
            a = B.to_numpy(var)
            if np.any(a <= 0):
                raise ValueError(f"{what} must be positive, got {a.tolist()}")

        def check_nat(th):
            if not self.in_natural_domain(th):
                raise ValueError("point is outside the natural domain: expected negative coefficients "
                                 f"-1/(2 sigma^2) in the last {d} natural parameters, got "
                                 f"{B.to_numpy(th)[d:].tolist()}")

        std_to_nat = lambda s: B.concatenate([s[:d] / s[d:], -0.5 / s[d:]])  # noqa: E731
        nat_to_std = lambda th: B.concatenate([-0.5 * th[:d] / th[d:], -0.5 / th[d:]])  # noqa: E731
        m2s = lambda e: B.concatenate([e[:d], e[d:] - e[:d] * e[:d]])  # noqa: E731
        s2m = lambda s: B.concatenate([s[:d], s[d:] + s[:d] * s[:d]])  # noqa: E731
        # (mu, sigma): the chart of seed 003's pictures, where the Fisher metric is diag(1, 2) / sigma^2
        sd2s = lambda u: B.concatenate([u[:d], u[d:] * u[d:]])  # noqa: E731
        s2sd = lambda s: B.concatenate([s[:d], B.sqrt(s[d:])])  # noqa: E731
        self._mean_std = (m2s, s2m)
        self._std_dev = (sd2s, s2sd)
        return {
            "standard": Chart("standard", std_to_nat, nat_to_std, lambda s: check_var(s[d:], "variances"),
                              "(means, positive variances)"),
            "mean_std": Chart("mean_std", lambda u: std_to_nat(sd2s(u)), lambda th: s2sd(nat_to_std(th)),
                              lambda u: check_var(u[d:], "standard deviations"),
                              "(means, positive standard deviations)"),
            "natural": Chart("natural", lambda th: th, lambda th: th, check_nat,
                             "(mu / sigma^2, -1 / (2 sigma^2))"),
            "mean": Chart("mean", lambda e: std_to_nat(m2s(e)), lambda th: s2m(nat_to_std(th)),
                          lambda e: check_var(m2s(e)[d:], "variances E[x^2] - E[x]^2"),
                          "(E[x], E[x^2]) with E[x^2] > E[x]^2"),
        }

    def _direct_map(self, source, target):
        m2s, s2m = self._mean_std
        sd2s, s2sd = self._std_dev
        return {("mean", "standard"): m2s, ("standard", "mean"): s2m,
                ("mean_std", "standard"): sd2s, ("standard", "mean_std"): s2sd}.get((source, target))

    def _fisher_closed(self, x):
        s = self.to_chart(x, "standard")
        mu, var = s[:self.d], s[self.d:]
        if self.chart == "standard":
            return B.diag(B.concatenate([1.0 / var, 0.5 / (var * var)]))
        if self.chart == "mean_std":
            return B.diag(B.concatenate([1.0 / var, 2.0 / var]))
        if self.chart not in ("natural", "mean"):
            return None
        # Cov(x, x^2) per coordinate: Var x = v, Cov = 2 mu v, Var x^2 = 2 v^2 + 4 mu^2 v
        a, b, c = var, 2 * mu * var, 2 * var * var + 4 * mu * mu * var
        if self.chart == "mean":
            det = a * c - b * b
            a, b, c = c / det, -b / det, a / det
        top = B.concatenate([B.diag(a), B.diag(b)], axis=1)
        bot = B.concatenate([B.diag(b), B.diag(c)], axis=1)
        return B.concatenate([top, bot], axis=0)

    # product of half-planes, each coordinate pair (mu_i / sqrt2, sigma_i), metric scaled by 2
    def _halfplanes(self, s):
        """The factors of the standard point ``s`` as half-plane points, shape ``(d, 2)``."""
        return np.stack([s[:self.d] / np.sqrt(2), np.sqrt(s[self.d:])], axis=1)

    def _geo_exp(self, s, v):
        d, H = self.d, self._halfplanes(s)
        out = np.empty(2 * d)
        for i in range(d):
            z = _spaces.halfplane_exp(H[i], np.array([v[i] / np.sqrt(2), v[d + i] / (2 * H[i, 1])]))
            out[i], out[d + i] = np.sqrt(2) * z[0], z[1] ** 2
        return out

    def _geo_log(self, s, s2):
        d, H, H2 = self.d, self._halfplanes(s), self._halfplanes(s2)
        out = np.empty(2 * d)
        for i in range(d):
            w = _spaces.halfplane_log(H[i], H2[i])
            out[i], out[d + i] = np.sqrt(2) * w[0], 2 * H[i, 1] * w[1]
        return out

    def _geo_dist(self, s, s2):
        H, H2 = self._halfplanes(s), self._halfplanes(s2)
        return float(np.sqrt(sum(2.0 * _spaces.halfplane_dist(h, h2) ** 2 for h, h2 in zip(H, H2))))


class UnivariateGaussian(DiagonalGaussian):
    r"""Univariate Gaussians, points :math:`(\mu, \sigma^2)`; Fisher :math:`(d\mu^2 + 2d\sigma^2)/\sigma^2`.

    :math:`d(N(\mu_1,\sigma_1^2), N(\mu_2,\sigma_2^2)) = \sqrt2\,\operatorname{arccosh}\big(1 +
    \frac{(\mu_1-\mu_2)^2/2 + (\sigma_1-\sigma_2)^2}{2\sigma_1\sigma_2}\big)`.
    """

    def __init__(self, dim: int = 1, covariance: Optional[str] = "full", cov: Any = None,
                 chart: Optional[str] = None):
        if int(dim) != 1:
            raise ValueError("UnivariateGaussian has dim == 1")
        super().__init__(1, "diagonal", cov, chart)
        self.name = "Gaussian(dim=1)"


# ------------------------------------------------------------------- fixed
def _mean_is_standard_charts(to_nat, from_nat, check, description, check_nat, natural_description):
    """Charts of a family whose mean parameters are its standard coordinates (fixed covariance, zero mean)."""
    identity = lambda c: c  # noqa: E731
    return {"standard": Chart("standard", to_nat, from_nat, check, description),
            "mean": Chart("mean", to_nat, from_nat, check, description),
            "natural": Chart("natural", identity, identity, check_nat, natural_description)}


class _MeanIsStandard:
    """Mixin: the mean and standard charts coincide, so maps between them are the identity."""

    def _direct_map(self, source, target):
        return (lambda x: x) if {source, target} == {"mean", "standard"} else None


class FixedCovarianceGaussian(_MeanIsStandard, Gaussian):
    r""":math:`N(\mu, \Sigma_0)` with :math:`\Sigma_0` fixed: points :math:`\mu`.

    :math:`t(x) = x`, natural :math:`h = \Sigma_0^{-1}\mu`,
    :math:`\psi(h) = \tfrac12 h^T\Sigma_0 h`, :math:`\log h(x) = -\tfrac12 x^T\Sigma_0^{-1}x
    - \tfrac12\log|2\pi\Sigma_0|`; Fisher :math:`\Sigma_0^{-1}` in :math:`\mu` (flat;
    the distance is the Mahalanobis distance).
    """

    geometry_chart = "standard"

    def __init__(self, dim: int = 1, covariance: Optional[str] = "fixed", cov: Any = None,
                 chart: Optional[str] = None):
        if cov is None:
            raise ValueError('covariance="fixed" needs the covariance: cov=')
        S = np.array(B.to_numpy(B.array(cov)), dtype=float).reshape(int(dim), int(dim))  # a copy
        _check_spd(S, "fixed covariance")
        self.Sigma0 = S
        self.Lambda0 = np.linalg.inv(S)
        self._logdet0 = float(np.linalg.slogdet(S)[1])
        self._init(int(dim), int(dim), chart, f"FixedCovarianceGaussian(dim={int(dim)})")

    def _mu_cov(self, s):
        return s, B.array(self.Sigma0, like=s)

    def _std(self, mu, S):
        if not np.allclose(B.to_numpy(S), self.Sigma0):
            raise ValueError("this family has a fixed covariance; cov= must equal it (or be omitted)")
        return mu

    def _default_cov(self):
        return self.Sigma0

    def _restrict_cov(self, S):
        return self.Sigma0

    def log_partition(self, theta):
        return 0.5 * B.dot(theta, B.matmul(B.array(self.Sigma0, like=theta), theta))

    def moments(self, theta):
        return B.matmul(B.array(self.Sigma0, like=theta), theta)

    def sufficient_statistics(self, x):
        return np.asarray(B.to_numpy(x), dtype=float).reshape(-1, self.d)

    def log_base_measure(self, x):
        x = np.asarray(B.to_numpy(x), dtype=float).reshape(-1, self.d)
        return -0.5 * np.einsum("ni,ij,nj->n", x, self.Lambda0, x) - 0.5 * (self.d * LOG2PI + self._logdet0)

    def _make_charts(self):
        to_nat = lambda m: B.matmul(B.array(self.Lambda0, like=m), m)  # noqa: E731
        from_nat = lambda h: B.matmul(B.array(self.Sigma0, like=h), h)  # noqa: E731
        return _mean_is_standard_charts(to_nat, from_nat, None, "the mean", None, "Sigma0^{-1} mu")

    def _fisher_closed(self, x):
        return B.array(self.Sigma0 if self.chart == "natural" else self.Lambda0, like=x)

    def _geo_exp(self, m, v):
        return m + v

    def _geo_log(self, m, m2):
        return m2 - m

    def _geo_dist(self, m, m2):
        dm = m2 - m
        return float(np.sqrt(dm @ self.Lambda0 @ dm))


# ---------------------------------------------------------------- zero mean
class ZeroMeanGaussian(_MeanIsStandard, Gaussian):
    r""":math:`N(0, \Sigma)`: points :math:`\mathrm{vech}\Sigma` (standard = mean chart).

    :math:`t(x) = \mathrm{vech}(xx^T)`, natural :math:`c` (the vech coefficients
    of :math:`-\Lambda/2` as in :class:`FullGaussian`),
    :math:`\psi = -\tfrac12\log|\Lambda| + \tfrac d2\log2\pi`.  Fisher
    :math:`\tfrac12\mathrm{tr}(\Sigma^{-1}d\Sigma\,\Sigma^{-1}d\Sigma)`: half the
    affine-invariant metric, so geodesics are the affine-invariant ones and
    :math:`d = \sqrt{\tfrac12\sum_i\log^2\lambda_i(\Sigma_1^{-1}\Sigma_2)}`.
    """

    geometry_chart = "standard"

    def __init__(self, dim: int = 1, covariance: Optional[str] = "zero_mean", cov: Any = None,
                 chart: Optional[str] = None):
        if cov is not None:
            raise ValueError("ZeroMeanGaussian takes no fixed covariance (give cov= to point())")
        d = int(dim)
        self._init(d, d * (d + 1) // 2, chart, f"ZeroMeanGaussian(dim={d})")

    def _mu_cov(self, s):
        return B.zeros(self.d, like=s), self.vh.sym(s)

    def _std(self, mu, S):
        if np.any(B.to_numpy(mu) != 0):
            raise ValueError("the zero-mean Gaussian family needs mean == 0")
        return self.vh.vech(S)

    def _restrict_cov(self, S):
        return S

    def random_point(self, rng=None, scale: float = 1.0):
        rng = np.random.default_rng(rng)
        A = rng.standard_normal((self.d, self.d)) * 0.4
        return self.from_chart(B.array(self.vh.vech(A @ A.T + np.eye(self.d))), "standard")

    def log_partition(self, theta):
        return -0.5 * B.slogdet(self.vh.precision_from_natural(theta))[1] + 0.5 * self.d * LOG2PI

    def moments(self, theta):
        return self.vh.vech(B.inv(self.vh.precision_from_natural(theta)))

    def sufficient_statistics(self, x):
        x = np.asarray(B.to_numpy(x), dtype=float).reshape(-1, self.d)
        return (x[:, :, None] * x[:, None, :])[:, self.vh.iu[0], self.vh.iu[1]]

    def in_natural_domain(self, theta):
        try:
            np.linalg.cholesky(B.to_numpy(self.vh.precision_from_natural(theta)))
        except np.linalg.LinAlgError:
            return False
        return True

    def _make_charts(self):
        vh = self.vh
        to_nat = lambda s: vh.natural_from_precision(B.inv(vh.sym(s)))  # noqa: E731
        from_nat = lambda c: vh.vech(B.inv(vh.precision_from_natural(c)))  # noqa: E731
        check = lambda s: _check_spd(B.to_numpy(vh.sym(s)), "covariance")  # noqa: E731
        check_nat = lambda c: _check_spd(B.to_numpy(vh.precision_from_natural(c)),  # noqa: E731
                                         "precision matrix (from the natural parameters)")
        return _mean_is_standard_charts(to_nat, from_nat, check, "vech of an SPD covariance",
                                        check_nat, "vech coefficients of -Lambda/2")

    def _fisher_closed(self, x):
        S = self.vh.sym(self.to_chart(x, "standard"))
        if self.chart in ("standard", "mean"):
            return _miller_cov_block(B.inv(S), self.vh)
        return _cov_of_t(None, S, self.vh, with_mean=False)

    def _geo_exp(self, s, v):
        vh = self.vh
        S = B.to_numpy(vh.sym(B.array(s)))
        return vh.vech(_spaces.spd_exp(S, B.to_numpy(vh.sym(B.array(v)))))

    def _geo_log(self, s, s2):
        vh = self.vh
        return vh.vech(_spaces.spd_log(B.to_numpy(vh.sym(B.array(s))), B.to_numpy(vh.sym(B.array(s2)))))

    def _geo_dist(self, s, s2):
        vh = self.vh
        return math.sqrt(0.5) * _spaces.spd_dist(B.to_numpy(vh.sym(B.array(s))), B.to_numpy(vh.sym(B.array(s2))))
