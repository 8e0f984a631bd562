r"""The exact natural-gradient flow of a stochastic relaxation over a binary exponential family.

The stochastic relaxation of :math:`f: \{-1, +1\}^n \to \mathbb{R}` over a family
:math:`p_\theta` is :math:`F(\theta) = E_\theta[f]`.  Its gradient is
:math:`\nabla_\theta F = \mathrm{Cov}_\theta(f, t)` and its natural gradient
:math:`\widetilde\nabla F = F(\theta)^{-1}\mathrm{Cov}_\theta(f, t)` (Fisher matrix
:math:`F(\theta) = \mathrm{Cov}_\theta(t)`): the coefficients of the :math:`L^2(p_\theta)`
projection of :math:`f` onto the span of the statistics and the constants (Malagò, Matteucci &
Pistone 2011).  When :math:`f` lies in that span, :math:`f = c^Tt + c_0`, the natural
gradient is the constant :math:`c` and the flow :math:`\dot\theta = -\widetilde\nabla F`
goes straight to the point mass on the minimum of :math:`f` (Malagò & Pistone 2015);
when it does not, the flow may end at a vertex that is only a local minimum in the model.

Numerics.  Near a point mass the weights :math:`p_\theta(x)` of the projection span hundreds of
orders of magnitude.  An SVD least-squares solve (or :math:`\mathrm{Cov}(t)^{-1}\mathrm{Cov}(f, t)`)
then drops the light outcomes as rounding noise: the computed vector field turns wrong and
jumps between solutions, and an adaptive integrator shrinks its step without end.  The
projection here is a *stiff* weighted least-squares problem solved the way that stays accurate:
Householder QR with column pivoting on the rows sorted by decreasing weight (Powell & Reid 1969;
Cox & Higham 1998), uncentred with a column of ones so that nothing cancels.  The flow is
integrated step by step (RK45 with error control) under an iteration budget that does not
depend on the clock, and stops once one outcome carries probability :math:`1 - \mathrm{tol}`
(the gap :math:`1 - \max_x p_\theta(x)` is computed from log-weights, so ``tol`` may be tiny).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .result import CONVERGED, LIMIT_REACHED, OptimizeResult

__all__ = ["relaxation_natural_gradient", "natural_gradient_flow"]


def _support_statistics(family: Any):
    X = family.support()
    return X, np.asarray(family.sufficient_statistics(X), dtype=float).reshape(len(X), -1)


def _expectations(T: np.ndarray, theta: np.ndarray, fx: np.ndarray):
    r"""``(log p, E[f], Cov(f, t), natural gradient)`` at ``theta`` from the enumerated statistics ``T``."""
    from scipy.linalg import qr, solve_triangular

    logits = T @ theta
    log_p = logits - np.logaddexp.reduce(logits)
    p = np.exp(log_p)
    value = float(p @ fx)
    grad = p @ ((fx - value)[:, None] * (T - p @ T))
    order = np.argsort(-log_p, kind="stable")          # heaviest rows first (Powell & Reid 1969)
    w = np.exp(0.5 * log_p[order])
    A = np.concatenate([np.ones((len(T), 1)), T[order]], axis=1) * w[:, None]
    Q, R, piv = qr(A, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.sum(diag > diag[0] * 1e-300)) if diag.size and diag[0] > 0 else 0
    z = np.zeros(A.shape[1])
    z[:rank] = solve_triangular(R[:rank, :rank], (Q.T @ (fx[order] * w))[:rank])
    coef = np.empty_like(z)
    coef[piv] = z
    return log_p, value, grad, coef[1:]


def relaxation_natural_gradient(family: Any, theta: Any, f: Callable[[np.ndarray], Any]):
    r"""``(E_theta[f], gradient, natural gradient)`` of the relaxation, exactly, by enumeration.

    ``f`` maps a ``(N, n)`` array of outcomes to ``N`` values; ``family`` is a
    :class:`~infogeo.statistical.BinaryExponentialFamily` (or an
    :class:`~infogeo.IndependenceModel`) small enough to enumerate; ``theta`` its natural parameters.
    """
    X, T = _support_statistics(family)
    theta = np.asarray(theta, dtype=float).reshape(-1)
    if theta.shape != (T.shape[1],):
        raise ValueError(f"theta must have shape ({T.shape[1]},), got {theta.shape}")
    _, value, g, nat = _expectations(T, theta, _values(f, X))
    return value, g, nat


def _values(f: Callable, X: np.ndarray) -> np.ndarray:
    if not callable(f):
        raise TypeError("f must be callable: an (N, n) array of outcomes to N values")
    fx = np.asarray(f(X.copy()), dtype=float).reshape(-1)
    if fx.shape != (len(X),) or not np.all(np.isfinite(fx)):
        raise ValueError(f"f must map the {len(X)} outcomes to {len(X)} finite values, got shape {fx.shape}")
    return fx


def natural_gradient_flow(family: Any, f: Callable[[np.ndarray], Any], theta0: Any, t_max: float = 100.0, *,
                          tol: float = 1e-8, max_steps: int = 10_000, max_step: float = np.inf,
                          rtol: float = 1e-8, atol: float = 1e-10) -> OptimizeResult:
    r"""Integrate :math:`\dot\theta = -F(\theta)^{-1}\nabla_\theta E_\theta[f]` from ``theta0`` (exact sums).

    Steps of scipy's RK45 (adaptive, error-controlled) until one outcome carries probability
    at least ``1 - tol`` (the flow is at a point mass up to ``tol``), until time ``t_max``, or
    after ``max_steps`` steps, whichever comes first.  ``max_step`` bounds the step in time (for a
    finely drawn path: the flow of an ``f`` in the span is a straight line, crossed in a few steps).

    Returns
    -------
    OptimizeResult
        ``x`` the final :math:`\theta`, ``fun`` :math:`E_\theta[f]` there, ``gap``
        :math:`E_\theta[f] - \min f`, ``t`` the times and ``thetas`` the path (one row per step),
        ``mode`` the most probable outcome, ``mode_prob`` its probability and ``at_minimum``
        whether it minimises ``f``; ``success`` is true when the flow reached a point mass
        (at the minimum or not: read ``at_minimum``).
    """
    from scipy.integrate import RK45

    X, T = _support_statistics(family)
    fx = _values(f, X)
    theta0 = np.asarray(theta0, dtype=float).reshape(-1)
    if theta0.shape != (T.shape[1],) or not np.all(np.isfinite(theta0)):
        raise ValueError(f"theta0 must be a finite vector of shape ({T.shape[1]},), got {theta0.shape}")
    if not (0 < tol < 1):
        raise ValueError(f"tol must be in (0, 1), got {tol!r}")
    if isinstance(t_max, bool) or not (0 < float(t_max) <= np.inf):   # a negative time runs the flow uphill
        raise ValueError(f"t_max must be a positive time, got {t_max!r}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    log_tol = np.log(tol)

    def concentrated(theta) -> bool:
        log_p = _expectations(T, theta, fx)[0]
        rest = np.delete(log_p, np.argmax(log_p))
        return bool(rest.size == 0 or np.logaddexp.reduce(rest) <= log_tol)   # log(1 - max p) <= log(tol)

    solver = RK45(lambda _t, th: -_expectations(T, th, fx)[3], 0.0, theta0, float(t_max), rtol=rtol, atol=atol,
                   max_step=max_step)
    ts, path = [0.0], [theta0.copy()]
    done, steps = concentrated(theta0), 0
    while not done and solver.status == "running" and steps < max_steps:
        message = solver.step()
        steps += 1
        if solver.status == "failed":
            raise RuntimeError(f"natural_gradient_flow: the integrator failed at t = {solver.t:.6g}: {message}")
        ts.append(solver.t)
        path.append(solver.y.copy())
        done = concentrated(solver.y)
    theta = path[-1]
    log_p, value, _, _ = _expectations(T, theta, fx)
    k = int(np.argmax(log_p))
    if done:
        msg = f"one outcome carries probability >= 1 - tol (tol = {tol:g})"
    elif steps >= max_steps:
        msg = f"max_steps = {max_steps} steps taken before the flow concentrated"
    else:
        msg = f"t_max = {t_max} reached before the flow concentrated"
    return OptimizeResult(x=theta, fun=value, gap=value - float(fx.min()), t=np.array(ts), thetas=np.array(path),
                          mode=X[k], mode_prob=float(np.exp(log_p[k])), at_minimum=bool(fx[k] == fx.min()),
                          nfev=int(solver.nfev), nit=steps, success=done,
                          status=CONVERGED if done else LIMIT_REACHED, message=msg)
