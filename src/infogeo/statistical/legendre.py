r"""Legendre inversion of an exponential family: the natural parameter of given mean parameters.

The moment map :math:`\theta \mapsto \eta = \nabla\psi(\theta)` of a minimal
exponential family is a bijection from the natural domain onto the interior of
the convex hull of the sufficient statistics (Amari 1998; Amari & Nagaoka 2000).
Its inverse solves :math:`\nabla\psi(\theta) = \eta`, the stationarity
condition of the convex function :math:`\psi(\theta) - \eta^T\theta`, whose
Hessian is the Fisher matrix.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from .. import backend as B
from ..budget import Budget, BudgetExceededError, as_budget

__all__ = ["newton_legendre", "legendre_primitive", "DEFAULT_BUDGET"]


#: default budget of one Legendre inversion: Newton iterations (line-search steps included) and wall time
DEFAULT_BUDGET = Budget(max_iter=500, max_time=20.0)

#: once the moment error is within tol, a Newton step below this (relative to 1 + |theta_i|, each component)
#: ends the inversion: it is taken, and the error left is about its square
STEP_TOL = 1e-8


def newton_legendre(psi: Callable, eta: np.ndarray, theta0: Any,
                    in_domain: Callable[[Any], bool], tol: float = 1e-13,
                    budget: Optional[Budget] = None, grad: Optional[Callable] = None,
                    hessian: Optional[Callable] = None) -> np.ndarray:
    r"""Solve :math:`\nabla\psi(\theta) = \eta` by damped Newton on the convex
    :math:`f(\theta) = \psi(\theta) - \eta^T\theta`.

    ``theta0`` is a start or a list of candidate starts; the start is the candidate
    inside the natural domain with the smallest :math:`f` (the best moment match in the
    sense of the dual objective).  Each Newton step is backtracked until it stays in
    the domain and satisfies Armijo's condition, so the iteration converges from any
    interior start when :math:`\eta` lies in the interior of the moment space.
    It stops when the moment error :math:`\|\nabla\psi(\theta) - \eta\|` is within ``tol`` times
    :math:`1 + \|\eta\|` *and* the Newton step is below ``STEP_TOL`` relative to :math:`1 + |\theta_i|` in
    every component (that last step is taken): the moment error alone is blind to the small components
    of :math:`\eta` (a Poisson mean of 1e-10).
    Raises ``ValueError`` when :math:`\eta` is not attained and
    :class:`~infogeo.budget.BudgetExceededError` when the budget runs out.
    ``grad`` and ``hessian`` give :math:`\nabla\psi` and :math:`\nabla^2\psi` in closed form
    (default: autodiff of ``psi``).
    """
    eta = np.asarray(eta, dtype=float)
    grad = grad or (lambda th: B.grad(psi, th))
    hessian = hessian or (lambda th: B.hessian(psi, th))
    b = as_budget(budget, DEFAULT_BUDGET).start(
        "Legendre inversion (mean to natural parameters)", f"eta = {np.array2string(eta, precision=4)}",
        "a larger Budget(max_iter=..., max_time=...) via budget=, or mean parameters farther from the "
        "boundary of the moment space")

    def obj(th):
        with np.errstate(all="ignore"):
            return float(B.to_numpy(psi(th))) - float(eta @ th)

    starts = theta0 if isinstance(theta0, (list, tuple)) else [theta0]
    scored = [(obj(th), th) for th in (np.array(t, dtype=float) for t in starts) if in_domain(th)]
    scored = [(f, th) for f, th in scored if np.isfinite(f)]
    if not scored:
        raise ValueError(f"Legendre inversion of eta = {eta}: no starting natural parameter lies in the domain")
    f, theta = min(scored, key=lambda ft: ft[0])
    norm0 = float(np.linalg.norm(theta))
    while True:
        with np.errstate(all="ignore"):
            g = B.to_numpy(grad(theta)) - eta
        if not np.all(np.isfinite(g)):
            break
        # a moment error at the level of ||eta|| is not yet convergence for the small components of eta
        # (Poisson mean 1e-10 stopped at theta = log(1.00005e-10)): stop on the Newton step, relative to theta
        small = np.linalg.norm(g) <= tol * (1.0 + np.linalg.norm(eta))
        with np.errstate(all="ignore"):
            H = B.to_numpy(hessian(theta))
        try:
            step = -np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            if small:
                return theta
            break  # psi flattens out: eta lies outside the moment space
        newton = np.all(np.isfinite(step)) and float(g @ step) < 0
        if small and (not newton or np.max(np.abs(step) / (1.0 + np.abs(theta))) <= STEP_TOL):
            return _last_step(theta, step if newton else None, lambda th: B.to_numpy(grad(th)) - eta,
                              in_domain, tol * (1.0 + np.linalg.norm(eta)))
        try:
            b.tick()
        except BudgetExceededError:
            if small:  # the moments match to rounding yet theta keeps moving: it runs off to infinity
                raise ValueError(f"mean parameters {eta} are not attained by any natural parameter: the moment "
                                 f"error is {np.linalg.norm(g):.3g} but the natural parameter keeps moving "
                                 f"(now {np.array2string(theta, precision=4)}) towards infinity; eta lies on "
                                 "the boundary of the moment space (or within rounding of it)") from None
            raise
        if not newton:
            step = -g  # Hessian not numerically positive definite here: steepest descent
        t = 1.0
        while t > 1e-14:
            cand = theta + t * step
            if in_domain(cand):
                f_new = obj(cand)
                # Armijo on the convex objective; the second clause accepts
                # steps that are flat only up to rounding near the solution
                if np.isfinite(f_new) and (f_new <= f + 1e-4 * t * float(g @ step)
                                           or abs(f_new - f) <= 1e-15 * (1 + abs(f))):
                    break
                # near the solution f is flat to rounding: accept a step that shrinks the moment error
                with np.errstate(all="ignore"):   # an overflowing moment error is a rejected step
                    g_new = B.to_numpy(grad(cand)) - eta
                    shrinks = np.linalg.norm(g_new) <= (1 - 1e-4 * t) * np.linalg.norm(g)
                if shrinks:
                    f_new = obj(cand)
                    break
            t *= 0.5
        else:
            break
        theta, f = cand, f_new
        if np.linalg.norm(theta) > 1e8 * (1.0 + norm0):
            break  # running off to infinity: eta is outside the moment space (or on its boundary)
    with np.errstate(all="ignore"):
        g = B.to_numpy(grad(theta)) - eta
    if np.all(np.isfinite(g)) and np.linalg.norm(g) <= 1e-8 * (1.0 + np.linalg.norm(eta)):
        return theta
    raise ValueError(f"mean parameters {eta} are not attained by any natural parameter "
                     f"(Legendre inversion stalled with moment error {np.linalg.norm(g):.3g}); "
                     "expected a point in the interior of the convex hull of the sufficient statistics")


def _last_step(theta: np.ndarray, step: Optional[np.ndarray], moment_error: Callable, in_domain: Callable,
               tol: float) -> np.ndarray:
    """``theta + step`` (the Newton step, below ``STEP_TOL`` relative to theta: its error is about the square
    of that) where it stays in the domain with a moment error still within ``tol``, else ``theta``."""
    if step is None:
        return theta
    cand = theta + step
    if not in_domain(cand):
        return theta
    with np.errstate(all="ignore"):
        g = moment_error(cand)
    return cand if np.all(np.isfinite(g)) and np.linalg.norm(g) <= tol else theta


def _candidate_starts(family: Any, eta: np.ndarray) -> list:
    """The family's own start and a few interior natural parameters drawn by its ``random_point``."""
    starts = [family._natural_start(eta)]
    try:
        nat = family.in_chart("natural")
        rng = np.random.default_rng(0)
        starts += [np.asarray(B.to_numpy(nat.random_point(rng)), dtype=float) for _ in range(8)]
    except (ValueError, RuntimeError, NotImplementedError, TypeError):
        pass
    return starts


def legendre_primitive(family: Any, closed_derivatives: bool = False):
    """``eta -> theta(eta)`` as an autograd primitive: Newton forward, :math:`F^{-1}` backward.

    The Jacobian of the inverse moment map is :math:`(\\nabla^2\\psi)^{-1}` (Legendre duality),
    symmetric, so the vector-Jacobian product is a solve with the Fisher matrix;
    written with backend ops it is itself differentiable (Hessians of KL in the
    mean chart work).  ``closed_derivatives``: Newton takes the family's own ``moments`` and
    ``fisher_natural`` (exact sums, say) instead of autodiff of its log-partition.
    """
    from autograd.extend import defvjp, primitive

    @primitive
    def theta_of_eta(eta):
        eta = np.asarray(eta, dtype=float)
        derivatives = {"grad": family.moments, "hessian": family.fisher_natural} if closed_derivatives else {}
        return newton_legendre(family.log_partition, eta, _candidate_starts(family, eta),
                               family.in_natural_domain, budget=getattr(family, "budget", None), **derivatives)

    defvjp(theta_of_eta, lambda theta, eta: lambda g: B.solve(family.fisher_natural(theta), g))
    return theta_of_eta
