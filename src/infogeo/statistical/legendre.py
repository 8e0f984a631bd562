r"""Legendre inversion of an exponential family: the natural parameter of given mean parameters.

The moment map :math:`\theta \mapsto \eta = \nabla\psi(\theta)` of a minimal
exponential family is a bijection from the natural domain onto the interior of
the convex hull of the sufficient statistics (Amari 1998; Amari & Nagaoka 2000).
Its inverse solves :math:`\nabla\psi(\theta) = \eta`, the stationarity
condition of the convex function :math:`\psi(\theta) - \eta^T\theta`, whose
Hessian is the Fisher matrix.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import backend as B

__all__ = ["newton_legendre", "legendre_primitive"]


def newton_legendre(psi: Callable, eta: np.ndarray, theta0: np.ndarray,
                    in_domain: Callable[[Any], bool], tol: float = 1e-13, max_iter: int = 200) -> np.ndarray:
    r"""Solve :math:`\nabla\psi(\theta) = \eta` by damped Newton on the convex
    :math:`\psi(\theta) - \eta^T\theta` (backtracking keeps iterates in the domain)."""
    theta = np.array(theta0, dtype=float)

    def obj(th):
        return float(B.to_numpy(psi(th))) - float(eta @ th)

    f = obj(theta)
    for _ in range(max_iter):
        g = B.to_numpy(B.grad(psi, theta)) - eta
        if np.linalg.norm(g) <= tol * (1.0 + np.linalg.norm(eta)):
            return theta
        H = B.to_numpy(B.hessian(psi, theta))
        try:
            step = -np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            break  # psi flattens out: eta lies outside the moment space
        if not np.all(np.isfinite(step)):
            break
        t = 1.0
        while t > 1e-12:
            cand = theta + t * step
            if in_domain(cand):
                f_new = obj(cand)
                # Armijo on the convex objective; the second clause accepts
                # steps that are flat only up to rounding near the solution
                if np.isfinite(f_new) and (f_new <= f + 1e-4 * t * float(g @ step)
                                           or abs(f_new - f) <= 1e-15 * (1 + abs(f))):
                    break
            t *= 0.5
        else:
            break
        theta, f = cand, f_new
    with np.errstate(all="ignore"):
        g = B.to_numpy(B.grad(psi, theta)) - eta
    if np.all(np.isfinite(g)) and np.linalg.norm(g) <= 1e-8 * (1.0 + np.linalg.norm(eta)):
        return theta
    raise ValueError(f"mean parameters {eta} are not attained by any natural parameter "
                     f"(Legendre inversion stalled with moment error {np.linalg.norm(g):.3g}); "
                     "expected a point in the interior of the convex hull of the sufficient statistics")


def legendre_primitive(family: Any):
    """``eta -> theta(eta)`` as an autograd primitive: Newton forward, :math:`F^{-1}` backward.

    The Jacobian of the inverse moment map is :math:`(\\nabla^2\\psi)^{-1}` (Legendre duality),
    symmetric, so the vector-Jacobian product is a solve with the Fisher matrix;
    written with backend ops it is itself differentiable (Hessians of KL in the
    mean chart work).
    """
    from autograd.extend import defvjp, primitive

    @primitive
    def theta_of_eta(eta):
        return newton_legendre(family.log_partition, np.asarray(eta, dtype=float),
                               family._natural_start(np.asarray(eta, dtype=float)),
                               family.in_natural_domain)

    defvjp(theta_of_eta, lambda theta, eta: lambda g: B.solve(family.fisher_natural(theta), g))
    return theta_of_eta
