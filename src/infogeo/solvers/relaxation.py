r"""Stochastic relaxation: minimise :math:`F(p) = E_p[f]` over Gaussian search distributions (seed 003).

For a black-box :math:`f` on :math:`\mathbb{R}^d`, relax :math:`\min_x f(x)` to
:math:`\min_p E_p[f]` over :math:`p = N(\mu, \Sigma)` and follow the natural
gradient of :math:`F`.  For an exponential family
:math:`\nabla_\theta F = \mathrm{Cov}_p(f, t) = E_p[f\,(t - \eta)]`, and the natural
gradient in the mean chart is that same vector (Eq. 23); pushed to the standard
chart :math:`(\mu, \Sigma)` it is

.. math:: \widetilde\nabla_\mu F = E_p[f(x)\,(x - \mu)],\qquad
          \widetilde\nabla_\Sigma F = E_p[f(x)\,((x - \mu)(x - \mu)^T - \Sigma)],

estimated by Monte Carlo (:func:`mc_natural_gradient`).  :class:`StochasticRelaxation`
replaces :math:`f` by rank-based utilities (invariance under monotone
transformations of :math:`f`, as in NES / CMA-ES) and moves :math:`\Sigma`
along the affine-invariant exponential map (the geodesics of the zero-mean
Fisher metric), which keeps it positive definite; this is the exponential
natural evolution strategy (xNES) family.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np

from .. import backend as B
from .base import Solver, _ensure_console_handler, logger
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


def _utilities(lam: int) -> np.ndarray:
    """Rank-based utilities (best first), summing to zero: the NES fitness shaping."""
    raw = np.maximum(0.0, math.log(lam / 2 + 1) - np.log(np.arange(1, lam + 1)))
    return raw / raw.sum() - 1.0 / lam


class StochasticRelaxation(Solver):
    r"""Minimise a black-box :math:`f: \mathbb{R}^d \to \mathbb{R}` by natural gradient on :math:`N(\mu, \Sigma)`.

    Each iteration draws :math:`\lambda` points :math:`x_i = \mu + A z_i`
    (:math:`\Sigma = AA^T`), ranks them, and takes the Monte Carlo natural
    gradient step of the ranked utilities :math:`u_i` in the coordinates
    normalised at the current distribution (where the Fisher metric is
    :math:`(\delta\mu^T\delta\mu + \tfrac12\mathrm{tr}\,\delta\Sigma^2)`):

    .. math:: \mu \leftarrow \mu + \eta_\mu A\sum_i u_i z_i,\qquad
              A \leftarrow A\exp\big(\tfrac{\eta_\Sigma}{2}\sum_i u_i (z_iz_i^T - I)\big).

    Parameters
    ----------
    sigma0 : float
        Initial standard deviation (:math:`\Sigma_0 = \sigma_0^2 I`).
    population : int, optional
        :math:`\lambda`; default :math:`4 + \lfloor 3\log d\rfloor`.
    lr_mean, lr_cov : float, optional
        :math:`\eta_\mu` (default 1) and :math:`\eta_\Sigma` (default
        :math:`0.6(3 + \log d)/(d\sqrt d)`).
    max_evals : int
        Budget of function evaluations.
    f_target : float, optional
        Stop once the best value found is :math:`\le` ``f_target``.
    seed : int or Generator
        All randomness comes from this (runs are reproducible).
    **kwargs
        ``max_iter``, ``verbose``, ``callback`` as for every solver.

    Notes
    -----
    ``minimize(f, x0)`` takes the function and the initial mean; the result's
    ``x`` is the best point found, ``fun`` its value, ``nfev`` the evaluations
    used, ``mean`` and ``cov`` the final search distribution.
    """

    name = "StochasticRelaxation"

    def __init__(self, sigma0: float = 1.0, *, population: Optional[int] = None,
                 lr_mean: float = 1.0, lr_cov: Optional[float] = None, max_evals: int = 100_000,
                 f_target: Optional[float] = None, seed: Any = None, min_sigma: float = 1e-14,
                 **kwargs: Any):
        kwargs.setdefault("max_iter", 10**9)
        super().__init__(**kwargs)
        if not sigma0 > 0:
            raise ValueError(f"sigma0 must be > 0, got {sigma0}")
        if population is not None and population < 2:
            raise ValueError(f"population must be >= 2, got {population}")
        self.sigma0, self.population, self.lr_mean, self.lr_cov = float(sigma0), population, lr_mean, lr_cov
        self.max_evals, self.f_target, self.seed, self.min_sigma = int(max_evals), f_target, seed, min_sigma

    def minimize(self, f: Callable[[np.ndarray], Any], x0: Any, **_: Any) -> OptimizeResult:  # type: ignore[override]
        rng = np.random.default_rng(self.seed)
        mu = np.array(B.to_numpy(B.array(x0)), dtype=float).reshape(-1)
        d = mu.size
        lam = self.population or 4 + int(3 * math.log(d))
        eta_mu = self.lr_mean
        eta_A = self.lr_cov if self.lr_cov is not None else 0.6 * (3 + math.log(d)) / (d * math.sqrt(d))
        u = _utilities(lam)
        A = self.sigma0 * np.eye(d)
        best_x, best_f = mu.copy(), float(np.asarray(f(mu[None, :])).reshape(-1)[0])
        nfev, k, history = 1, 0, []
        message, success = "maximum number of evaluations reached", False
        if self.verbose:
            _ensure_console_handler()
            logger.info("%s: d=%d, population %d", self.name, d, lam)
        while nfev + lam <= self.max_evals and k < self.max_iter:
            k += 1
            Z = rng.standard_normal((lam, d))
            X = mu + Z @ A.T
            fx = np.asarray(f(X), dtype=float).reshape(-1)
            nfev += lam
            if not np.all(np.isfinite(fx)):
                raise ValueError("the objective returned NaN or inf at a sampled point")
            order = np.argsort(fx)
            if fx[order[0]] < best_f:
                best_f, best_x = float(fx[order[0]]), X[order[0]].copy()
            Zs = Z[order]
            # natural gradient of E[u] at (0, I) in normalised coordinates
            g_mu = u @ Zs
            g_M = (Zs.T * u) @ Zs - u.sum() * np.eye(d)
            mu = mu + eta_mu * A @ g_mu
            w, U = np.linalg.eigh(0.5 * eta_A * 0.5 * (g_M + g_M.T))
            A = A @ ((U * np.exp(w)) @ U.T)
            sigma = float(np.sqrt(np.abs(np.linalg.det(A)) ** (2.0 / d)))
            entry = {"iter": k, "x": mu.copy(), "fun": float(fx[order[0]]), "best": best_f,
                     "nfev": nfev, "sigma": sigma}
            history.append(entry)
            if self.verbose and (k % 100 == 0):
                logger.info("%6d  evals %7d  best %+.6e  sigma %.3e", k, nfev, best_f, sigma)
            if self.callback is not None and self.callback(entry):
                message = "stopped by the callback"
                break
            if self.f_target is not None and best_f <= self.f_target:
                success, message = True, f"reached f_target {self.f_target:g}"
                break
            if sigma < self.min_sigma:
                success, message = True, f"search distribution collapsed (sigma {sigma:.3g})"
                break
        return OptimizeResult(x=best_x, fun=best_f, nit=k, nfev=nfev, success=success, message=message,
                              history=history, mean=mu, cov=A @ A.T, grad_norm=float("nan"))
