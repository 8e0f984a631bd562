r"""Observations of an exponential family: log-density, score, likelihood and sampling.

For :math:`p_\theta(x) = h(x)\exp(\theta^T t(x) - \psi(\theta))` (Amari & Nagaoka 2000, Ch. 2):

* :math:`\log p_\theta(x) = \theta^T t(x) - \psi(\theta) + \log h(x)`;
* the score in natural coordinates is :math:`t(x) - \eta` with :math:`\eta = \nabla\psi(\theta)`, and in
  any other chart :math:`J^T(t(x) - \eta)` with :math:`J = \partial\theta/\partial x`.

Distributions may be batched: a point of shape ``(..., dim)`` against observations with a
leading sample axis ``(n, ...)`` gives log-densities ``(..., n)``, scores ``(..., n, dim)`` and
samples ``(..., n, ...)``, every distribution against every observation.  The statistics
:math:`t(x)` and :math:`\log h(x)` are computed once per call, for all distributions.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .. import backend as B
from ..geometry import points as _points
from ..geometry.charts import per_point
from ._inputs import check_event_shape, check_fits, check_samples, statistics_of

__all__ = ["Observations", "log_gamma_variates", "simplex_from_logs"]


class Observations:
    """Mixin of :class:`~infogeo.statistical.ExponentialFamily`: what a family says about observations.

    Uses the family's ``_as_point``, ``_natural``, ``log_partition``, ``moments``,
    ``sufficient_statistics``, ``log_base_measure`` and ``_sampler``.
    """

    def _single(self, p: Any, what: str):
        if len((p := self._as_point(p)).shape) != 1:
            raise ValueError(f"{what} takes one distribution (shape ({self.dim},)), got shape {tuple(p.shape)}")
        return p

    #: shape of one observation (``None``: not declared; the family's ``t(x)`` reads the rows)
    event_shape: Optional[tuple] = None

    def _statistics(self, x: Any):
        a = check_samples(x, self.name)
        check_event_shape(a, self.event_shape, self.name)
        return statistics_of(self, a)  # (t(x), log h(x)) of checked observations, one row each

    def log_prob(self, p: Any, x: Any):
        r""":math:`\log p(x) = \theta^T t(x) - \psi(\theta) + \log h(x)`.

        ``x`` has a leading sample axis of length ``n``; the result has shape ``(n,)`` for one
        distribution and ``(..., n)`` for a batch ``p`` of shape ``(..., dim)``.
        """
        theta = self._natural(self._as_point(p))
        t, log_h = self._statistics(x)
        log_h = B.array(log_h, like=theta) if B.is_torch(theta) else log_h
        if len(theta.shape) == 1:
            return B.matmul(t, theta) - self.log_partition(theta) + log_h
        psi = per_point(self.log_partition, theta, vectorized=self._vectorized)
        return B.einsum("...k,nk->...n", theta, B.array(t, like=theta)) - psi[..., None] + log_h

    def score(self, p: Any, x: Any):
        r"""Scores :math:`\nabla_x \log p(x)` in the current chart: ``(n, dim)``, or ``(..., n, dim)`` for a batch.

        In natural coordinates :math:`t(x) - \eta`; in another chart pulled
        back by the chart Jacobian, :math:`J^T(t(x) - \eta)`.
        """
        p = self._as_point(p)
        theta = self._natural(p)
        t = self._statistics(x)[0]
        diff = B.array(t, like=theta) - per_point(self.moments, theta, vectorized=self._vectorized)[..., None, :]
        if self.chart != "natural":
            diff = B.matmul(diff, per_point(lambda z: B.jacobian(self._natural, z), p,
                                             empty=(self.dim, self.dim)))
        # natural parameters or moments of an extreme point (a mean of 1e300) overflow: an error, not NaN
        return _points.finite_result(diff, f"the score of {self.name}", p)

    def log_likelihood(self, p: Any, x: Any):
        """Mean log-likelihood of a batch of observations (the sum divided by n); shape ``(...)`` for a batch ``p``."""
        return B.mean(self.log_prob(p, x), axis=-1)

    def fit(self, data: Any, weights: Any = None):
        r"""The maximum-likelihood point for the observations ``data`` (leading sample axis), in the current chart.

        For an exponential family the likelihood equations are moment matching:
        :math:`\hat\eta = \frac1n\sum_i t(x_i)` (weighted: :math:`\sum_i w_it(x_i)/\sum_i w_i`),
        mapped from the mean chart (Amari & Nagaoka 2000, Sec. 2.8).  Raises ``ValueError`` when the
        estimate does not exist (:math:`\hat\eta` on the boundary of the moment space: a Bernoulli
        sample of all zeros, fewer Gaussian observations than dimensions).
        """
        from ..geometry.statistics import _weights   # the Fréchet mean's check: real, (n,), finite, >= 0
        t = np.asarray(B.to_numpy(self._statistics(data)[0]), dtype=float)
        eta = t.mean(axis=0) if weights is None else _weights(weights, len(t), t) @ t
        try:
            return self.from_chart(eta, "mean")
        except ValueError as exc:
            raise ValueError(f"the maximum-likelihood estimate of {self.name} does not exist for these "
                             f"observations: the mean of their sufficient statistics is not a point of the moment "
                             f"space ({exc})") from None

    def sample(self, p: Any, n: int, rng: Optional[np.random.Generator] = None):
        """``n`` observations drawn from the distribution ``p`` (seeded by ``rng``).

        For a batch ``p`` of shape ``(..., dim)`` the samples have shape ``(..., n, ...)``: the
        distributions are drawn one after the other (in C order) from the one generator, so a
        batch gives exactly the samples of the loop over its points.  ``n = 0`` gives an empty array.
        """
        p = self._as_point(p)
        n = _points.positive_int(n, "the number of samples n", minimum=0)
        check_fits(n * int(np.prod(p.shape[:-1], dtype=float)) * int(np.prod(self.event_shape or (1,), dtype=float)),
                   f"{n} samples of {self.name}")
        rng = _points.random_generator(rng)
        if len(p.shape) == 1:
            return self._sample(p, n, rng)
        lead = tuple(p.shape[:-1])
        draws = [np.asarray(self._sample(p[idx], n, rng)) for idx in np.ndindex(*lead)]
        if not draws:   # an empty batch of distributions: no draws to read the observations' shape from
            if self.event_shape is None:
                raise ValueError(f"sample: p is an empty batch of distributions (shape {tuple(p.shape)}) and "
                                 f"{self.name} declares no event_shape to shape no observations by")
            return np.empty(lead + (n,) + tuple(self.event_shape))
        return np.stack(draws).reshape(lead + draws[0].shape)

    def _sample(self, p: Any, n: int, rng: np.random.Generator):
        if self._sampler is None:
            raise NotImplementedError(f"{self.name} has no sampler; pass sampler= to ExponentialFamily")
        return self._sampler(B.to_numpy(self._natural(p)), n, rng)

    def fisher_monte_carlo(self, p: Any, n: int, rng: Optional[np.random.Generator] = None):
        r"""Monte Carlo Fisher at one distribution: the sample covariance of the score, current chart."""
        p = self._single(p, "fisher_monte_carlo")
        s = B.to_numpy(self.score(p, self.sample(p, n, rng)))
        return s.T @ s / len(s)


def log_gamma_variates(shape: Any, size: Any, rng: np.random.Generator) -> np.ndarray:
    r"""Logarithms of Gamma(``shape``, 1) variates, exact for concentrations far below 1.

    A Gamma(:math:`a`) variate with :math:`a \ll 1` underflows to 0 (at :math:`a = 10^{-3}` most of
    them do); its logarithm does not.  With :math:`G \sim \Gamma(a + 1)` and :math:`U` uniform on
    :math:`(0, 1]`, :math:`G\,U^{1/a} \sim \Gamma(a)` (Marsaglia & Tsang 2000), so
    :math:`\log G + \log(U)/a` is the log-variate.  ``size`` is the leading sample shape; the
    result has shape ``size + shape.shape``.
    """
    a = np.asarray(shape, dtype=float)
    size = tuple(np.atleast_1d(size).astype(int)) + a.shape
    return np.log(rng.standard_gamma(a + 1.0, size=size)) + np.log1p(-rng.random(size)) / a


def simplex_from_logs(log_g: np.ndarray) -> np.ndarray:
    r"""Points :math:`g / \sum g` of the open simplex (last axis) from :math:`\log g`, never an exact 0 or 1.

    Normalised in log space; a coordinate below the smallest positive float (the true value is
    positive) is raised to it and the row renormalised, so the family's own ``log_prob`` accepts
    every sample.  With two coordinates each is at most the float just below 1.
    """
    x = np.exp(log_g - np.logaddexp.reduce(log_g, axis=-1, keepdims=True))
    x = np.maximum(x, np.finfo(float).smallest_subnormal)
    x = x / x.sum(axis=-1, keepdims=True)
    if x.shape[-1] == 2:       # (x, 1 - x) with x < 1, so that log(1 - x) is finite too
        x = np.minimum(x, np.nextafter(1.0, 0.0))
    return x
