r"""Gaussian families whose mean chart is their standard chart: fixed covariance and zero mean.

:math:`N(\mu, \Sigma_0)` is flat (Mahalanobis distance); :math:`N(0, \Sigma)` carries half the
affine-invariant metric on SPD matrices (Skovgaard 1984; Calvo & Oller 1991).
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from .. import backend as B
from ..geometry import points as _points
from ..geometry.charts import Chart
from . import _spaces
from ._inputs import observations_of
from ._vech import _check_spd, _cov_of_t, _miller_cov_block, _whitened_inner

LOG2PI = math.log(2 * math.pi)
from .gaussian import Gaussian

__all__ = ["FixedCovarianceGaussian", "ZeroMeanGaussian"]


# ------------------------------------------------------------------- fixed
def _mean_is_standard_charts(to_nat, from_nat, check, description, check_nat, natural_description):
    """Charts of a family whose mean parameters are its standard coordinates (fixed covariance, zero mean)."""
    identity = lambda c: c  # noqa: E731
    return {"standard": Chart("standard", to_nat, from_nat, check, description, vectorized=True),
            "mean": Chart("mean", to_nat, from_nat, check, description, vectorized=True),
            "natural": Chart("natural", identity, identity, check_nat, natural_description, vectorized=True)}


class _MeanIsStandard:
    """Mixin: the mean and standard charts coincide, so maps between them are the identity.

    Every operation of these families (charts, metric, ``kl``, ``exp``, ``log``,
    ``dist``) broadcasts over leading axes on either backend.
    """

    _vectorized = True
    _geo_vectorized = True

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
        d = _points.positive_int(dim, "dim (the sample dimension)")
        cov = _points.as_coordinates(cov, None, "fixed covariance")
        S = np.array(B.to_numpy(cov), dtype=float)  # a copy
        if S.size != d * d:
            raise ValueError(f"the fixed covariance must have shape ({d}, {d}), got {S.shape}")
        S = S.reshape(d, d)
        _check_spd(S, "fixed covariance")
        self.Sigma0 = S
        self.Lambda0 = np.linalg.inv(S)
        self._logdet0 = float(np.linalg.slogdet(S)[1])
        self._init(d, d, chart, "FixedCovarianceGaussian")

    def _mu_cov(self, s):
        return s, B.broadcast_to(B.array(self.Sigma0, like=s), tuple(s.shape[:-1]) + (self.d, self.d))

    def _std(self, mu, S):
        if not np.allclose(np.asarray(B.to_numpy(S)), self.Sigma0):
            raise ValueError("this family has a fixed covariance; cov= must equal it (or be omitted)")
        return mu

    def _default_cov(self):
        return self.Sigma0

    def _restrict_cov(self, S):
        return self.Sigma0

    def log_partition(self, theta):
        return 0.5 * B.sum(theta * self.moments(theta), axis=-1)

    def moments(self, theta):
        return B.matmul(theta, B.array(self.Sigma0, like=theta))      # Sigma0 theta (Sigma0 symmetric)

    def sufficient_statistics(self, x):
        return observations_of(self, x).reshape(-1, self.d)

    def log_base_measure(self, x):
        x = np.asarray(B.to_numpy(x), dtype=float).reshape(-1, self.d)
        return -0.5 * np.einsum("ni,ij,nj->n", x, self.Lambda0, x) - 0.5 * (self.d * LOG2PI + self._logdet0)

    def _make_charts(self):
        to_nat = lambda m: B.matmul(m, B.array(self.Lambda0, like=m))  # noqa: E731  (Lambda0 m, symmetric)
        from_nat = self.moments
        return _mean_is_standard_charts(to_nat, from_nat, None, "the mean", None, "Sigma0^{-1} mu")

    def _fisher_closed(self, x):
        G = self.Sigma0 if self.chart == "natural" else self.Lambda0    # a constant: a fresh (writable) copy
        return B.array(np.broadcast_to(G, tuple(x.shape[:-1]) + (self.d, self.d)).copy(), like=x)

    def _geo_exp(self, m, v):
        return m + v

    def _geo_log(self, m, m2):
        return m2 - m

    def _geo_dist(self, m, m2):
        dm = m2 - m
        return B.sqrt(B.sum(dm * B.matmul(dm, B.array(self.Lambda0, like=dm)), axis=-1))


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
        d = _points.positive_int(dim, "dim (the sample dimension)")
        self._init(d, d * (d + 1) // 2, chart, "ZeroMeanGaussian")

    def _mu_cov(self, s):
        return B.zeros(tuple(s.shape[:-1]) + (self.d,), like=s), self.vh.sym(s)

    def _std(self, mu, S):
        if np.any(B.to_numpy(mu) != 0):
            raise ValueError("the zero-mean Gaussian family needs mean == 0")
        return self.vh.vech(S)

    def _restrict_cov(self, S):
        return S

    def random_point(self, rng=None, scale: float = 1.0):
        rng = _points.random_generator(rng)
        A = rng.standard_normal((self.d, self.d)) * 0.4
        return self.from_chart(B.array(self.vh.vech(A @ A.T + np.eye(self.d))), "standard")

    def log_partition(self, theta):
        return -0.5 * B.slogdet(self.vh.precision_from_natural(theta))[1] + 0.5 * self.d * LOG2PI

    def moments(self, theta):
        return self.vh.vech(B.inv(self.vh.precision_from_natural(theta)))

    def sufficient_statistics(self, x):
        x = observations_of(self, x).reshape(-1, self.d)
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

    def _fisher_inner(self, x, u, v):
        """The Fisher inner product of tangent components ``u, v`` at ``x`` in the standard (= mean) chart, whitened by
        the covariance's Cholesky factor (:func:`~._vech._whitened_inner`); ``None`` in the natural chart."""
        if self.chart not in ("standard", "mean"):
            return None
        return _whitened_inner(self.vh.sym(x), self.vh.sym(u), self.vh.sym(v))

    def _fisher_closed(self, x):
        S = self.vh.sym(self._to_chart(x, "standard"))
        if self.chart in ("standard", "mean"):
            return _miller_cov_block(B.inv(S), self.vh)
        return _cov_of_t(None, S, self.vh, with_mean=False)

    # the metric is half the affine-invariant one: the same geodesics, distances scaled by sqrt(1/2)
    def _geo_exp(self, s, v):
        return self.vh.vech(_spaces.spd_exp(self.vh.sym(s), self.vh.sym(v)))

    def _geo_log(self, s, s2):
        return self.vh.vech(_spaces.spd_log(self.vh.sym(s), self.vh.sym(s2)))

    def _geo_dist(self, s, s2):
        return math.sqrt(0.5) * _spaces.spd_dist(self.vh.sym(s), self.vh.sym(s2))
