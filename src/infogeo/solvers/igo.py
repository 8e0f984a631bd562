r"""Information-geometric optimisation (IGO) on Gaussians: quantile weights and the natural-gradient step.

IGO (Ollivier, Arnold, Auger & Hansen 2017) turns the minimisation of a
black-box :math:`f` on :math:`\mathbb{R}^d` into a natural-gradient flow on a
family of search distributions :math:`p_\theta`.  The objective is replaced by
the *quantile-rewritten* utility :math:`W^f_\theta(x) = w(P_\theta[f(y) \le f(x)])`
for a non-increasing weight function :math:`w` on :math:`[0, 1]`, which makes
the flow invariant under every strictly increasing transformation of
:math:`f`.  With :math:`\lambda` samples ranked :math:`x_{1:\lambda}, \ldots,
x_{\lambda:\lambda}` (best first) the weight function becomes rank weights
:math:`w_i \approx w((i - 1/2)/\lambda)`, and the Monte Carlo natural gradient is

.. math:: \widetilde\nabla_\theta \sum_i w_i \log p_\theta(x_{i:\lambda})
          = F(\theta)^{-1} \sum_i w_i\,\nabla_\theta \log p_\theta(x_{i:\lambda}),

the natural gradient of a *weighted log-likelihood* under the Fisher metric
:math:`F`.  For the Gaussian family in the chart :math:`(\mu, \Sigma)` it has
the closed form (Akimoto, Nagata, Ono & Kobayashi 2010)

.. math:: \widetilde\nabla_\mu = \sum_i w_i (x_i - \mu),\qquad
          \widetilde\nabla_\Sigma = \sum_i w_i \big((x_i - \mu)(x_i - \mu)^T - \Sigma\big),

which is exactly the rank-:math:`\mu` update of CMA-ES.  It is exact in this
chart (and in the mean chart :math:`(\mu, \Sigma + \mu\mu^T)`, the dual
coordinates of the exponential family, where the natural gradient of
:math:`\log p` is :math:`t(x) - \eta`).  For the diagonal family
(separable CMA-ES, Ros & Hansen 2008) the step is the diagonal of the same
matrix, because the diagonal Gaussians are themselves an exponential family.

:func:`natural_gradient_log_likelihood` computes the left-hand side with the
library's own objects (scores of :class:`~infogeo.statistical.Gaussian` and
``family.metric.sharp``); :func:`rank_mu_step` is the vectorised closed form
used inside :class:`~infogeo.solvers.IGOSearch`; the tests check that the two
agree.
"""
from __future__ import annotations

import math
from typing import Any, Tuple

import numpy as np

from .. import backend as B
from ..geometry.vectors import Covector, TangentVector

__all__ = ["quantile_weights", "natural_gradient_log_likelihood", "rank_mu_step", "rank_order"]


def quantile_weights(popsize: int) -> np.ndarray:
    r"""Raw rank weights :math:`w'_i = \log\frac{\lambda + 1}{2} - \log i`, :math:`i = 1..\lambda` (best first).

    A discretisation of the quantile weight function
    :math:`w(q) \propto -\log(2q)` (positive for the better half of the
    population, negative for the worse half), as in Hansen's CMA-ES tutorial
    (2016, Eq. 49).  :class:`~infogeo.solvers.igo_parameters.StrategyParameters`
    normalises the positive and negative parts.
    """
    lam = int(popsize)
    if lam < 2:
        raise ValueError(f"popsize must be >= 2, got {popsize}")
    return math.log((lam + 1) / 2) - np.log(np.arange(1, lam + 1))


def rank_order(fx: np.ndarray) -> np.ndarray:
    """Indices that sort the objective values best first; NaN, +inf (and -inf treated as NaN) rank last.

    ``-inf`` is not taken as a best value: an objective returning ``-inf`` is
    almost always a domain error (log of zero), so it ranks with NaN.
    Ties keep the sampling order (stable sort), so the ranking is reproducible.
    """
    f = np.asarray(fx, dtype=float)
    key = np.where(np.isfinite(f) | (f == np.inf), f, np.inf)
    # among the non-finite, +inf before NaN/-inf keeps some information
    worst = np.where(np.isfinite(f), 0, np.where(f == np.inf, 1, 2))
    return np.lexsort((key, worst))


def rank_mu_step(mean: np.ndarray, cov: np.ndarray, X: np.ndarray, weights: np.ndarray
                 ) -> Tuple[np.ndarray, np.ndarray]:
    r"""Closed-form natural gradient of :math:`\sum_i w_i \log p(x_i)` at :math:`N(\mu, \Sigma)`.

    Parameters
    ----------
    mean : (d,) array
    cov : (d, d) array, or (d,) array of variances for the diagonal family
    X : (n, d) array
        The samples (in rank order when the weights are rank weights).
    weights : (n,) array

    Returns
    -------
    (delta_mu, delta_Sigma)
        :math:`\sum_i w_i (x_i - \mu)` and :math:`\sum_i w_i ((x_i - \mu)(x_i - \mu)^T - \Sigma)`
        (for ``cov`` of shape ``(d,)``: the diagonal, :math:`\sum_i w_i ((x_i - \mu)^2 - \sigma^2)`).
    """
    Y = np.asarray(X, dtype=float) - mean
    w = np.asarray(weights, dtype=float)
    cov = np.asarray(cov, dtype=float)
    if cov.ndim == 1:
        return w @ Y, w @ (Y * Y) - w.sum() * cov
    return w @ Y, (Y.T * w) @ Y - w.sum() * cov


def natural_gradient_log_likelihood(family: Any, p: Any, X: Any, weights: Any) -> TangentVector:
    r"""Natural gradient :math:`F^{-1}\sum_i w_i\nabla\log p(x_i)` computed through the statistical layer.

    The differential of the weighted log-likelihood is assembled from the
    family's scores (``family.score``, in the family's current chart) and
    turned into a tangent vector by the Fisher metric's ``sharp``.  This is
    the definition of the IGO step; it costs a dense Fisher solve, so the
    search uses :func:`rank_mu_step`, which equals it for Gaussians (tested).

    Parameters
    ----------
    family : ExponentialFamily
        For example ``Gaussian(d)`` (chart ``"standard"``: :math:`(\mu, \mathrm{vech}\Sigma)`).
    p : point of ``family``
    X : (n, d) array of samples
    weights : (n,) array

    Returns
    -------
    TangentVector
        At ``p``, components in the family's current chart.
    """
    scores = B.to_numpy(family.score(p, X))
    w = np.asarray(weights, dtype=float).reshape(-1)
    if w.shape[0] != scores.shape[0]:
        raise ValueError(f"weights must have one entry per sample ({scores.shape[0]}), got {w.shape[0]}")
    differential = Covector(p, B.array(w @ scores, like=p), family.chart)
    return family.metric.sharp(differential)
