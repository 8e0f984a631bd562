r"""Stochastic relaxation: minimise :math:`F(p) = E_p[f]` over Gaussian search distributions (Ollivier et al. 2017).

For a black-box :math:`f` on :math:`\mathbb{R}^d`, relax :math:`\min_x f(x)` to
:math:`\min_p E_p[f]` over :math:`p = N(\mu, \Sigma)` and follow the natural
gradient of :math:`F`.  For an exponential family
:math:`\nabla_\theta F = \mathrm{Cov}_p(f, t) = E_p[f\,(t - \eta)]`, and the natural
gradient in the mean chart is that same vector (Eq. 23); pushed to the standard
chart :math:`(\mu, \Sigma)` it is

.. math:: \widetilde\nabla_\mu F = E_p[f(x)\,(x - \mu)],\qquad
          \widetilde\nabla_\Sigma F = E_p[f(x)\,((x - \mu)(x - \mu)^T - \Sigma)],

estimated by Monte Carlo (:func:`mc_natural_gradient`).  :class:`StochasticRelaxation`
replaces :math:`f` by rank-based quantile utilities (the IGO framework of
Ollivier et al. 2017: invariance under monotone transformations of :math:`f`)
and follows their Monte Carlo natural gradient in the chart :math:`(\mu, \Sigma)`,
where it is exact -- the rank-:math:`\mu` update of CMA-ES -- with
evolution paths, step-size control and optional IPOP/BIPOP restarts
(:class:`~infogeo.solvers.IGOSearch`, :func:`~infogeo.solvers.igo_minimize`).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from .. import backend as B
from .base import Solver, _ensure_console_handler
from .igo_restarts import igo_minimize
from .result import OptimizeResult

__all__ = ["StochasticRelaxation", "mc_natural_gradient"]


def mc_natural_gradient(family, p: Any, f: Callable[[np.ndarray], np.ndarray], n: int,
                        rng: Optional[np.random.Generator] = None, baseline: bool = True):
    r"""Monte Carlo natural gradient of :math:`E_p[f]` in the family's current chart.

    :math:`\widetilde\nabla F = J\,\widehat{\mathrm{Cov}}(f, t)`, where
    :math:`\mathrm{Cov}(f, t)` is the natural gradient in the mean chart (Eqs. 16, 23)
    and :math:`J` pushes it from the mean chart to the current one.  Works for any
    family with a sampler.  ``baseline`` subtracts the sample mean of :math:`f`
    (variance reduction; the estimate stays consistent).
    """
    X = family.sample(p, n, rng)
    fx = np.asarray(f(X), dtype=float).reshape(-1)
    t = B.to_numpy(family.sufficient_statistics(X))
    centred = fx - fx.mean() if baseline else fx
    g_mean = centred @ (t - t.mean(0)) / (len(fx) - 1) if baseline else centred @ (t - B.to_numpy(family.to_mean(p))) / len(fx)
    M = family.in_chart("mean")
    J = B.to_numpy(M.chart_jacobian(family.to_mean(p), family.chart))
    return J @ g_mean


class StochasticRelaxation(Solver):
    r"""Minimise a black-box :math:`f: \mathbb{R}^d \to \mathbb{R}` by natural gradient on :math:`N(\mu, \Sigma)`.

    Each iteration draws :math:`\lambda` points from :math:`N(m, \sigma^2C)`, ranks
    them, and takes the Monte Carlo natural-gradient step of the weighted
    log-likelihood of the ranked points under the Fisher metric (the IGO step,
    exact in the chart :math:`(\mu, \Sigma)`):

    .. math:: m \leftarrow m + c_m\sum_i w_i (x_{i:\lambda} - m),\qquad
              \Sigma \leftarrow \Sigma + c_\mu\sum_i w_i\big((x_{i:\lambda} - m)(x_{i:\lambda} - m)^T - \Sigma\big),

    plus the rank-one update along the evolution path and cumulative step-size
    adaptation: the CMA-ES of Hansen's tutorial (2016) with its default
    constants (the step-size cumulation rate as in the ``cma`` package), and
    orthogonal sampling of each population (Wang, Emmerich & Bäck 2019).  This class is the ``minimize`` face of
    :class:`~infogeo.solvers.IGOSearch` (which also offers ask/tell) and of its
    restart strategies (:func:`~infogeo.solvers.igo_minimize`).

    Parameters
    ----------
    sigma0 : float
        Initial step size (:math:`\Sigma_0 = \sigma_0^2 I`).
    population : int, optional
        :math:`\lambda` of the first run; default :math:`4 + \lfloor 3\log d\rfloor`.
    lr_mean : float
        Mean learning rate :math:`c_m` (default 1).
    lr_cov : float, optional
        Rank-:math:`\mu` learning rate :math:`c_\mu` (default: the published one).
    covariance : {"full", "diagonal"}
        Full covariance, or diagonal (separable; dimensions in the hundreds).
    sampling : {"orthogonal", "independent"}
        The standard normal vectors of a population: orthogonal within blocks of :math:`d`
        (default; Wang, Emmerich & Bäck 2019) or i.i.d. (see :class:`~infogeo.solvers.IGOSearch`).
    restarts : int
        Restarts with a growing population after a run stops (default 0).
    restart_strategy : {"ipop", "bipop"}
    max_evals : int
        Budget of function evaluations over all runs (never exceeded).
    f_target : float, optional
        Stop once the best value found is :math:`\le` ``f_target``.
    seed : int or Generator
        All randomness comes from this (runs are reproducible).
    min_sigma : float
        ``tolx``: a run stops when the search distribution is narrower than this in every coordinate.
    precision_pattern : (d, d) boolean array, optional
        Search in the Gaussian graphical model with these free precision entries (zeros elsewhere):
        fewer covariance parameters when the function's interactions are sparse (banded, blocks).
    **kwargs
        ``max_iter``, ``verbose``, ``callback`` as for every solver.

    Notes
    -----
    ``minimize(f, x0)`` takes the function (a batch ``(lambda, d)`` to ``(lambda,)``)
    and the initial mean; the result's ``x`` is the best point found, ``fun`` its
    value, ``nfev`` the evaluations used, ``message`` why it stopped, ``mean`` and
    ``cov`` the final search distribution.  NaN and infinite values rank last.
    """

    name = "StochasticRelaxation"

    def __init__(self, sigma0: float = 1.0, *, population: Optional[int] = None,
                 lr_mean: float = 1.0, lr_cov: Optional[float] = None, covariance: str = "full",
                 sampling: str = "orthogonal", restarts: int = 0, restart_strategy: str = "ipop", max_evals: int = 100_000,
                 f_target: Optional[float] = None, seed: Any = None, min_sigma: float = 1e-11,
                 precision_pattern: Any = None, **kwargs: Any):
        kwargs.setdefault("max_iter", 10**9)
        super().__init__(**kwargs)
        if not sigma0 > 0:
            raise ValueError(f"sigma0 must be > 0, got {sigma0}")
        if population is not None and population < 2:
            raise ValueError(f"population must be >= 2, got {population}")
        if int(max_evals) != max_evals or max_evals < 1:
            raise ValueError(f"max_evals must be a positive integer, got {max_evals}")
        self.sigma0, self.population, self.lr_mean, self.lr_cov = float(sigma0), population, lr_mean, lr_cov
        self.covariance, self.restarts, self.restart_strategy = covariance, restarts, restart_strategy
        self.sampling = sampling
        self.max_evals, self.f_target, self.seed, self.min_sigma = int(max_evals), f_target, seed, min_sigma
        self.precision_pattern = precision_pattern

    def minimize(self, f: Callable[[np.ndarray], Any], x0: Any, *,  # type: ignore[override]
                 callback: Optional[Callable[[dict], Any]] = None) -> OptimizeResult:
        """Minimise ``f`` (a batch ``(popsize, d) -> (popsize,)``) from the mean ``x0``; ``callback``: as for every
        solver (each iteration's history entry; a true return stops the search), in place of the constructor's."""
        if self.verbose:
            _ensure_console_handler()
        return igo_minimize(f, x0, self.sigma0, restarts=self.restarts, restart_strategy=self.restart_strategy,
                            popsize=self.population, covariance=self.covariance, max_evals=self.max_evals,
                            f_target=self.f_target, seed=self.seed, callback=callback or self.callback,
                            max_iter=self.max_iter, verbose=self.verbose, c_m=self.lr_mean, c_mu=self.lr_cov,
                            tolx=self.min_sigma, sampling=self.sampling,
                            **({} if self.precision_pattern is None else {"precision_pattern": self.precision_pattern}))
