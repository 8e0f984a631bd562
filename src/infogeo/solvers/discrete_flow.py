r"""The exact natural-gradient flow of a stochastic relaxation over a binary exponential family.

The stochastic relaxation of :math:`f: \{-1, +1\}^n \to \mathbb{R}` over a family
:math:`p_\theta` is :math:`F(\theta) = E_\theta[f]`.  Its gradient is
:math:`\nabla_\theta F = \mathrm{Cov}_\theta(f, t)` and its natural gradient
:math:`\widetilde\nabla F = F(\theta)^{-1}\mathrm{Cov}_\theta(f, t)` (Fisher matrix
:math:`F(\theta) = \mathrm{Cov}_\theta(t)`): the coefficients of the :math:`L^2(p_\theta)`
projection of :math:`f` onto the span of the centred statistics (Malagò, Matteucci &
Pistone 2011).  When :math:`f` lies in that span, :math:`f = c^Tt + c_0`, the natural
gradient is the constant :math:`c` and the flow :math:`\dot\theta = -\widetilde\nabla F`
goes straight to the point mass on the minimum of :math:`f` (Malagò & Pistone 2015);
when it does not, the flow may end at a vertex that is only a local minimum in the model.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .result import CONVERGED, LIMIT_REACHED, OptimizeResult

__all__ = ["relaxation_natural_gradient", "natural_gradient_flow"]


def _expectations(family: Any, theta: np.ndarray, fx: np.ndarray):
    r"""``(p, E[f], Cov(f, t), natural gradient)`` at ``theta`` by enumeration.

    The natural gradient is computed as what it is, the weighted least-squares regression of
    :math:`f - E[f]` on the centred statistics with weights :math:`p(x)`, not as
    :math:`\mathrm{Cov}(t)^{-1}\mathrm{Cov}(f, t)`: near a point mass both covariances are tiny
    and the solve would lose the digits the regression keeps (exact when :math:`f` is in the span).
    """
    T = family.sufficient_statistics(family.support())
    logits = T @ theta
    p = np.exp(logits - logits.max())
    p /= p.sum()
    eta = p @ T
    D = T - eta
    value = float(p @ fx)
    r = fx - value
    sq = np.sqrt(p)
    nat = np.linalg.lstsq(D * sq[:, None], r * sq, rcond=None)[0]
    return p, value, (p * r) @ D, nat


def relaxation_natural_gradient(family: Any, theta: Any, f: Callable[[np.ndarray], Any]):
    r"""``(E_theta[f], gradient, natural gradient)`` of the relaxation, exactly, by enumeration.

    ``f`` maps a ``(N, n)`` array of outcomes to ``N`` values; ``family`` is a
    :class:`~infogeo.statistical.BinaryExponentialFamily` (or an
    :class:`~infogeo.IndependenceModel`) small enough to enumerate; ``theta`` its natural parameters.
    """
    theta = np.asarray(theta, dtype=float)
    fx = np.asarray(f(family.support()), dtype=float).reshape(-1)
    _, value, g, nat = _expectations(family, theta, fx)
    return value, g, nat


def natural_gradient_flow(family: Any, f: Callable[[np.ndarray], Any], theta0: Any, t_max: float = 20.0, *,
                          mass: float = 1.0 - 1e-6, rtol: float = 1e-8,
                          atol: float = 1e-10) -> OptimizeResult:
    r"""Integrate :math:`\dot\theta = -F(\theta)^{-1}\nabla_\theta E_\theta[f]` from ``theta0`` (exact sums).

    scipy's ``solve_ivp`` (RK45) runs until ``t_max`` or until one outcome carries
    probability ``mass`` (the flow is then at the point mass up to ``1 - mass``).

    Returns
    -------
    OptimizeResult
        ``x`` the final :math:`\theta`, ``fun`` :math:`E_\theta[f]` there, ``t`` the times and
        ``thetas`` the path (one row per time), ``mode`` the most probable outcome and
        ``mode_prob`` its probability, ``success`` whether ``mass`` was reached.
    """
    from scipy.integrate import solve_ivp

    X = family.support()
    fx = np.asarray(f(X), dtype=float).reshape(-1)
    if fx.shape != (len(X),) or not np.all(np.isfinite(fx)):
        raise ValueError(f"f must map the {len(X)} outcomes to {len(X)} finite values, got shape {fx.shape}")
    theta0 = np.asarray(theta0, dtype=float).reshape(-1)
    if theta0.shape != (family.dim,):
        raise ValueError(f"theta0 must have shape ({family.dim},), got {theta0.shape}")

    def rhs(_t, th):
        return -_expectations(family, th, fx)[3]

    def concentrated(_t, th):
        return float(_expectations(family, th, fx)[0].max()) - mass

    concentrated.terminal = True
    concentrated.direction = 1
    sol = solve_ivp(rhs, (0.0, float(t_max)), theta0, rtol=rtol, atol=atol, events=concentrated)
    theta = sol.y[:, -1]
    p, value, _, _ = _expectations(family, theta, fx)
    k = int(np.argmax(p))
    reached = bool(p[k] >= mass * (1 - 1e-12))
    return OptimizeResult(x=theta, fun=value, t=sol.t, thetas=sol.y.T, mode=X[k], mode_prob=float(p[k]),
                          nfev=int(sol.nfev), nit=len(sol.t) - 1, success=reached,
                          status=CONVERGED if reached else LIMIT_REACHED,
                          message=("one outcome carries probability >= mass" if reached else
                                   f"t_max = {t_max} reached before the flow concentrated"))
