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
from ..geometry import points as _points
from ..geometry.charts import Chart
from . import _stable
from . import gaussian_bounds as _bounds
from ._inputs import check_fits, finite_velocity, observations_of
from ._vech import _check_spd, _cov_of_t, _miller_cov_block, _outer, _Vech, _whitened_inner
from .exponential_family import ExponentialFamily

logger = logging.getLogger(__name__)

LOG2PI = math.log(2 * math.pi)

__all__ = ["Gaussian", "FullGaussian"]


def _geodesics():
    # scipy.linalg (matrix exponentials) is imported on the first full-Gaussian geodesic only
    from . import gaussian_geodesics
    return gaussian_geodesics


def _T(A):
    """Transpose over the last two axes."""
    return B.einsum("...ij->...ji", A)


def _mv(A, x):
    """Batched matrix-vector product :math:`A x` over leading axes."""
    return B.einsum("...ij,...j->...i", A, x)


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
    precision_pattern : (dim, dim) boolean array, optional
        Zeros fixed in the precision matrix (``False`` entries): a Gaussian graphical model,
        :class:`~infogeo.statistical.gaussian_graphical.GaussianGraphical`.

    Examples
    --------
    >>> G = Gaussian(dim=1)
    >>> p, q = G.point(mean=0.0, std=1.0), G.point(mean=1.0, std=2.0)
    >>> print(round(float(G.dist(p, q)), 9))     # sqrt(2) arccosh(1.375)
    1.189380931
    """

    def __new__(cls, dim: int = 1, covariance: str = "full", cov: Any = None, chart: Optional[str] = None,
                precision_pattern: Any = None):
        if cls is Gaussian and precision_pattern is not None:   # a Gaussian graphical model
            from .gaussian_graphical import GaussianGraphical
            return super().__new__(GaussianGraphical)
        if cls is Gaussian:
            from .gaussian_diagonal import DiagonalGaussian, UnivariateGaussian
            from .gaussian_special import FixedCovarianceGaussian, ZeroMeanGaussian
            d = _points.positive_int(dim, "dim (the sample dimension)")
            kinds = {"full": FullGaussian if d != 1 else UnivariateGaussian, "diagonal": DiagonalGaussian,
                     "fixed": FixedCovarianceGaussian, "zero_mean": ZeroMeanGaussian}
            if not isinstance(covariance, str) or covariance not in kinds:
                raise ValueError(f"unknown covariance {covariance!r}; expected one of {sorted(kinds)}")
            cls = kinds[covariance]
        return super().__new__(cls)

    def _init(self, d: int, dim: int, chart: Optional[str], kind: str):
        d = _points.positive_int(d, "dim (the sample dimension)")
        check_fits(d * d, f"a Gaussian family on R^{d} (its d x d covariance)")
        #: dimension of the sample space, :math:`x \in \mathbb{R}^{d}` (``.dim`` is the manifold's dimension)
        self.sample_dim = self.d = d
        self.event_shape = (d,)
        self.vh = _Vech(d)
        super().__init__(dim=dim, chart=chart, name=f"{kind}(sample_dim={d})")

    def __repr__(self) -> str:
        return (f"<{self.name}: Gaussians on R^{self.sample_dim}, a {self.dim}-dimensional statistical manifold "
                f"in the {self.chart} chart>")

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
        return self.from_chart(self._std(mu, S), "standard")

    def _parse_mean_cov(self, mean, cov, std, var):
        """``(mu, Sigma)`` of shapes ``(..., d)`` and ``(..., d, d)`` from the keyword arguments (numpy)."""
        d = self.d
        if sum(a is not None for a in (cov, std, var)) > 1:
            raise ValueError("give at most one of cov=, std=, var=")
        if mean is None:
            mu = np.zeros(d)
        else:
            mu = np.asarray(B.to_numpy(_points.as_coordinates(mean, None, "mean", self.name)), dtype=float)
            if d == 1 and (mu.ndim == 0 or mu.shape[-1] != 1):
                mu = mu[..., None]
            if mu.shape[-1:] != (d,):
                raise ValueError(f"mean must have {d} entries (shape (..., {d})), got shape {mu.shape}")
        if std is not None or var is not None:
            what = "std" if std is not None else "var"
            a = np.asarray(B.to_numpy(_points.as_coordinates(std if std is not None else var, None, what,
                                                               self.name)), dtype=float)
            per_coord = d == 1 or self._diagonal_kind
            if not per_coord:
                raise ValueError(f"{what}= is only accepted when dim == 1 (or for the diagonal family); use cov=")
            if d == 1 and (a.ndim == 0 or a.shape[-1] != 1):
                a = a[..., None]
            if a.ndim == 0 or a.shape[-1] not in (1, d):
                raise ValueError(f"{what} must have 1 or {d} entries, got shape {a.shape}")
            if a.size == 0 or a.min() <= 0:
                raise ValueError(f"{what} must be positive, got {a.tolist() if a.size < 50 else '...'}")
            var_ = np.broadcast_to(a ** 2 if std is not None else a, a.shape[:-1] + (d,))
            S = var_[..., :, None] * np.eye(d)
        elif cov is not None:
            S = np.asarray(B.to_numpy(_points.as_coordinates(cov, None, "covariance", self.name)), dtype=float)
            if d == 1 and (S.ndim < 2 or S.shape[-2:] != (1, 1)):
                S = S[..., None, None] if (S.ndim == 0 or S.shape[-1] != 1) else S[..., None]
            if S.shape[-2:] != (d, d):
                raise ValueError(f"cov must have shape ({d}, {d}), got {S.shape}")
            _check_spd(S, "covariance")
        else:
            S = self._default_cov()
        try:
            lead = np.broadcast_shapes(mu.shape[:-1], S.shape[:-2])
        except ValueError:
            raise ValueError(f"mean batch shape {mu.shape[:-1]} and covariance batch shape {S.shape[:-2]} "
                             "do not broadcast") from None
        return np.broadcast_to(mu, lead + (d,)), np.broadcast_to(S, lead + (d, d))

    _diagonal_kind = False
    #: fit from centred moments (families whose mean chart holds E[x] and E[x x^T] with a free mean)
    _centred_fit = False

    def fit(self, data: Any, weights: Any = None):
        r"""The maximum-likelihood point for the observations ``data`` (shape ``(n, d)``; ``(n,)`` when
        ``dim == 1``), in the current chart.

        Moment matching, computed from centred moments: :math:`\hat\mu = \sum_i w_ix_i` (:math:`w_i` the
        normalised weights, :math:`1/n` by default), then the residuals :math:`r_i = x_i - \hat\mu`, the
        mean corrected by :math:`\bar r = \sum_i w_ir_i` (a second pass) and
        :math:`\hat\Sigma = \sum_i w_i(r_i - \bar r)(r_i - \bar r)^T` (its diagonal for the diagonal family).
        The mean chart's :math:`E[xx^T] - \mu\mu^T` cancels: data at 1e6 with spread 1e-2 gave a variance 12x
        off, at 1e9 a false "does not exist".  Raises ``ValueError`` when the estimate does not exist (a
        singular :math:`\hat\Sigma`: fewer distinct observations than dimensions).
        """
        if not self._centred_fit:
            return super().fit(data, weights)
        from ..geometry.statistics import _weights
        self._statistics(data)                             # the shape checks and messages of every family
        x = np.asarray(B.to_numpy(data), dtype=float).reshape(-1, self.d)
        w = _weights(weights, len(x), x)
        mu = w @ x
        r = x - mu
        rbar = w @ r
        mu, r = mu + rbar, r - rbar
        S = (w[:, None] * r).T @ r
        if self._diagonal_kind:
            S = np.diag(np.diag(S))
        S = 0.5 * (S + S.T)
        try:
            _check_spd(S, "covariance")
            return self.from_chart(self._std(mu, S), "standard")
        except ValueError as exc:
            raise ValueError(f"the maximum-likelihood estimate of {self.name} does not exist for these "
                             f"observations: their weighted sample covariance is singular ({exc})") from None

    def _default_cov(self) -> np.ndarray:
        raise ValueError("give the covariance: cov= (or std=/var= when dim == 1)")

    def _check_cov_of(self, s, what="covariance"):
        S = B.to_numpy(self._mu_cov(s)[1])
        _check_spd(S, what)

    def _sample(self, p, n, rng):
        s = self._to_chart(p, "standard")
        mu, S = (B.to_numpy(a) for a in self._mu_cov(s))
        z = rng.standard_normal((n, self.d))
        return mu + z @ np.linalg.cholesky(S).T

    def random_point(self, rng=None, scale: float = 1.0):
        rng = _points.random_generator(rng)
        A = rng.standard_normal((self.d, self.d)) * 0.4
        S = A @ A.T + np.eye(self.d) * rng.uniform(0.5, 1.5)
        mu = scale * rng.standard_normal(self.d)
        return self.from_chart(self._std(mu, self._restrict_cov(S)), "standard")

    def _restrict_cov(self, S):
        return S

    def _kl(self, p, q):
        r""":math:`\tfrac12[\mathrm{tr}(\Sigma_q^{-1}\Sigma_p) - d - \log|\Sigma_q^{-1}\Sigma_p|
        + \Delta\mu^T\Sigma_q^{-1}\Delta\mu]`, batched, without cancellation.

        With :math:`\Sigma_q = LL^T` and :math:`Z = L^{-1}(\Sigma_p - \Sigma_q)L^{-T}` (symmetric; its
        eigenvalues are :math:`\lambda_i - 1` for the generalized eigenvalues :math:`\lambda_i` of
        :math:`(\Sigma_p, \Sigma_q)`) the covariance part is :math:`\mathrm{tr}(Z - \log(I + Z))
        = \sum_i (\lambda_i - 1 - \log\lambda_i) \ge 0`: by a series in :math:`Z` when
        :math:`\|Z\|_F < 1/2` (:mod:`._stable`), else as :math:`\mathrm{tr} Z - \log|\Sigma_p|/|\Sigma_q|`
        (then at least 0.08, so the subtraction loses nothing), the log-determinant from the ratios of
        the Cholesky diagonals.  The trace-minus-log-determinant form subtracts numbers of order
        :math:`d` and returned rounding noise, negative half of the time, for nearby points."""
        xp = B.ops_of(p, q)
        mp, Sp = self._mu_cov(self._to_chart(p, "standard"))
        mq, Sq = self._mu_cov(self._to_chart(q, "standard"))
        dm = 0.5 * mq - 0.5 * mp            # halves: no overflow of the difference or of its square
        lead, d = tuple(dm.shape[:-1]), self.d
        Sp, Sq = (xp.broadcast_to(S, lead + (d, d)) for S in (Sp, Sq))
        Lp, Lq = xp.cholesky(Sp), xp.cholesky(Sq)
        w = xp.solve(Lq, dm)
        Z = xp.solve(Lq, _T(xp.solve(Lq, Sp - Sq)))
        Z = 0.5 * (Z + _T(Z))               # symmetric to the last bit
        near = xp.sum(xp.sum(Z * Z, axis=-1), axis=-1) < _stable.NEAR ** 2
        Zn = xp.where(near[..., None, None], Z, 0.0 * Z)
        diag_ratio = _stable.diag_part(Lp, xp) / _stable.diag_part(Lq, xp)
        far = xp.sum(_stable.diag_part(Z, xp), axis=-1) - 2.0 * xp.sum(xp.log(diag_ratio), axis=-1)
        cov_part = xp.where(near, _stable.trace_log1p_gap_near(Zn, xp), far)
        return 0.5 * cov_part + 2.0 * xp.sum(w * w, axis=-1)


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
    Long velocities are stepped along the geodesic so that each matrix
    exponential stays well conditioned.  ``log`` solves the boundary problem by
    Newton's method (closed forms for equal means or equal covariances,
    continuation when the points are far apart) under the budget
    :attr:`budget`; ``dist`` is the length of that geodesic and
    :meth:`dist_bounds` brackets it in closed form.  Details in
    :mod:`infogeo.statistical.gaussian_geodesics`.

    Batches: the charts, ``kl`` and the metric (its matrix, ``inner``, ``sharp``,
    ``flat``) broadcast over leading axes on either backend, and so does
    :meth:`dist_bounds`; ``exp`` takes a batch in one numpy call; ``log`` and
    ``dist`` run pair by pair (a loop over the batch, in numpy), since they have
    no closed form and each pair needs its own shooting.
    """

    geometry_chart = "standard"
    _vectorized = True
    _geo_numpy_batches = frozenset({"exp"})
    _numpy_geodesics_why = {
        "exp": "Eriksen's closed form is evaluated in numpy (stepped along long geodesics)",
        "log": "it has no closed form and solves the geodesic boundary problem by Newton shooting",
        "dist": "it is the length of the geodesic found by Newton shooting, which has no closed form "
                "(dist_bounds gives closed-form bounds on either backend)"}

    _centred_fit = True

    def __init__(self, dim: int = 2, covariance: Optional[str] = "full", cov: Any = None,
                 chart: Optional[str] = None):
        if covariance not in (None, "full") or cov is not None:
            raise ValueError("FullGaussian takes no fixed covariance")
        d = int(dim)
        d = _points.positive_int(dim, "dim (the sample dimension)")
        self._init(d, d + d * (d + 1) // 2, chart, "Gaussian")

    def _mu_cov(self, s):
        return s[..., :self.d], self.vh.sym(s[..., self.d:])

    def _std(self, mu, S):
        return B.concatenate([mu, self.vh.vech(S)], axis=-1)

    def _natural_parts(self, theta):
        return theta[..., :self.d], self.vh.precision_from_natural(theta[..., self.d:])

    def log_partition(self, theta):
        h, L = self._natural_parts(theta)
        return 0.5 * B.sum(h * B.solve(L, h), axis=-1) - 0.5 * B.slogdet(L)[1] + 0.5 * self.d * LOG2PI

    def moments(self, theta):
        h, L = self._natural_parts(theta)
        S = B.inv(L)
        mu = _mv(S, h)
        return B.concatenate([mu, self.vh.vech(S + _outer(mu, mu))], axis=-1)

    def sufficient_statistics(self, x):
        x = observations_of(self, x).reshape(-1, self.d)
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
            return B.concatenate([_mv(L, mu), vh.natural_from_precision(L)], axis=-1)

        def nat_to_std(th):
            h, L = self._natural_parts(th)
            S = B.inv(L)
            return B.concatenate([_mv(S, h), vh.vech(S)], axis=-1)

        def mean_to_std(e):
            mu = e[..., :d]
            return B.concatenate([mu, e[..., d:] - vh.vech(_outer(mu, mu))], axis=-1)

        def std_to_mean(s):
            mu = s[..., :d]
            return B.concatenate([mu, s[..., d:] + vh.vech(_outer(mu, mu))], axis=-1)

        self._mean_std = (mean_to_std, std_to_mean)

        def check_nat(th):
            _check_spd(B.to_numpy(self._natural_parts(th)[1]), "precision matrix (from the natural parameters)")

        return {
            "standard": Chart("standard", std_to_nat, nat_to_std, lambda s: self._check_cov_of(s),
                              "(mean, vech of an SPD covariance)", vectorized=True),
            "natural": Chart("natural", lambda th: th, lambda th: th, check_nat,
                             "(Lambda mu, vech coefficients of -Lambda/2) with SPD precision Lambda",
                             vectorized=True),
            "mean": Chart("mean", lambda e: std_to_nat(mean_to_std(e)), lambda th: std_to_mean(nat_to_std(th)),
                          lambda e: self._check_cov_of(mean_to_std(e), "covariance E[xx^T] - mu mu^T"),
                          "(mu, vech(Sigma + mu mu^T)) with SPD Sigma", vectorized=True),
        }

    def _direct_map(self, source, target):
        m2s, s2m = self._mean_std
        return {("mean", "standard"): m2s, ("standard", "mean"): s2m}.get((source, target))

    def _fisher_inner(self, x, u, v):
        """The Fisher inner product of tangent components ``u, v`` at ``x`` in the standard chart, whitened by the
        covariance's Cholesky factor (:func:`~._vech._whitened_inner`); ``None`` in another chart."""
        if self.chart != "standard":
            return None
        d = self.d
        return _whitened_inner(self.vh.sym(x[..., d:]), self.vh.sym(u[..., d:]), self.vh.sym(v[..., d:]),
                               u[..., :d], v[..., :d])

    def _fisher_closed(self, x):
        mu, S = self._mu_cov(self._to_chart(x, "standard"))
        if self.chart == "standard":
            Si = B.inv(S)
            d, m, lead = self.d, self.vh.m, tuple(x.shape[:-1])
            top = B.concatenate([Si, B.zeros(lead + (d, m), like=x)], axis=-1)
            bot = B.concatenate([B.zeros(lead + (m, d), like=x), _miller_cov_block(Si, self.vh)], axis=-1)
            return B.concatenate([top, bot], axis=-2)
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
        finite_velocity(v)
        mu0, S0 = self._mu_cov_np(s)
        dS = B.to_numpy(self.vh.sym(B.array(v[..., self.d:])))
        mu1, S1 = _geodesics().exp(mu0, S0, v[..., :self.d], dS)
        _check_spd(S1, "covariance at the end of the geodesic")
        return np.concatenate([mu1, self.vh.vech(S1)], axis=-1)

    def _geo_log(self, s, s2):
        dmu, dS = _geodesics().log(*self._mu_cov_np(s), *self._mu_cov_np(s2), budget=self.budget)
        return np.concatenate([dmu, self.vh.vech(dS)])

    def _geo_dist(self, s, s2):
        return _geodesics().dist(*self._mu_cov_np(s), *self._mu_cov_np(s2), budget=self.budget)

    #: budget of the geodesic shooting (``None``: ``gaussian_geodesics.DEFAULT_BUDGET``)
    budget = None

    def dist_bounds(self, p: Any, q: Any) -> tuple:
        """Certified ``(lower, upper)`` bounds on ``dist(p, q)`` in closed form (no shooting).

        Points or batches whose leading shapes broadcast, on either backend: the bounds have the
        batch shape, on the points' backend (device, dtype) and differentiable; plain floats for
        one numpy pair.  See :func:`infogeo.statistical.gaussian_bounds.dist_bounds`.
        """
        p, q = self._pair(p, q)
        g = self.geometry_chart
        return _bounds.dist_bounds(*self._mu_cov(self._to_chart(p, g)), *self._mu_cov(self._to_chart(q, g)))
