r"""Geodesics of any metric given as a function of the point.

Closed forms are an optimisation; everything here needs only
``metric.matrix(x)`` and autodiff, so every manifold has geodesics.

* Christoffel symbols
  :math:`\Gamma^k_{ij} = \tfrac12 G^{kl}(\partial_i G_{lj} + \partial_j G_{li} - \partial_l G_{ij})`.
* The geodesic equation :math:`\ddot x^k = -\Gamma^k_{ij}\dot x^i \dot x^j`,
  evaluated without the full :math:`\Gamma` tensor as
  :math:`\ddot x = -G^{-1}\big((\partial_{\dot x} G)\dot x - \tfrac12 \nabla_x(\dot x^T G \dot x)\big)`.
* ``exp`` integrates it with an adaptive 8th-order Runge–Kutta method (DOP853).
* ``log`` solves the boundary problem :math:`\exp_x(v) = y` by Newton shooting,
  the Jacobian :math:`\partial \exp_x(v)/\partial v` coming from the
  variational (Jacobi) equations integrated alongside the geodesic.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.integrate import solve_ivp

from .. import backend as B

RTOL = 1e-12
ATOL = 1e-12


class GeodesicError(RuntimeError):
    """The geodesic boundary problem could not be solved (no convergence, or the path left the domain)."""


def christoffel(metric, x):
    r"""Christoffel symbols of the second kind, ``Gamma[k, i, j]``."""
    G = metric.matrix(x)
    dG = B.jacobian(metric.matrix, x)  # dG[l, j, i] = d_i G_lj
    first = 0.5 * (B.einsum("lji->lij", dG) + dG - B.einsum("ijl->lij", dG))
    return B.einsum("kl,lij->kij", B.inv(G), first)


def acceleration(metric, x, v):
    r""":math:`\ddot x = -\Gamma(x)[v, v]` for a geodesic through ``x`` with velocity ``v``.

    One Jacobian of :math:`x \mapsto G(x)v` gives both terms:
    :math:`K_{li} = \partial_i (G v)_l`, so
    :math:`\ddot x = -G^{-1}(K v - \tfrac12 K^T v)`.
    """
    K = B.jacobian(lambda y: B.matmul(metric.matrix(y), v), x)
    return -B.solve(metric.matrix(x), B.matmul(K, v) - 0.5 * B.matmul(B.transpose(K), v))


def _rhs(metric, like, d):
    def f(_t, s):
        s_b = B.array(s, like=like)
        a = acceleration(metric, s_b[:d], s_b[d:])
        return np.concatenate([s[d:], B.to_numpy(a)])
    return f


def _integrate(metric, x, v, t_eval=None, t_end=1.0, dense=False, rtol=None):
    d = x.shape[-1]
    s0 = np.concatenate([B.to_numpy(x), B.to_numpy(v)])
    rtol = RTOL if rtol is None else rtol
    sol = solve_ivp(_rhs(metric, x, d), (0.0, t_end), s0, method="DOP853", rtol=rtol, atol=rtol,
                    t_eval=t_eval, dense_output=dense)
    if not sol.success or not np.all(np.isfinite(sol.y)):
        raise GeodesicError(f"geodesic integration failed: {sol.message}")
    return sol


def exp(metric, x, v, t: float = 1.0, rtol: float | None = None):
    """:math:`\\exp_x(t v)` by integrating the geodesic equation (result in ``x``'s backend)."""
    d = x.shape[-1]
    sol = _integrate(metric, x, v, t_end=t, rtol=rtol)
    return B.array(sol.y[:d, -1], like=x)


def geodesic(metric, x, v) -> Callable[[Any], Any]:
    """The geodesic ``t -> exp_x(t v)``; accepts a scalar or an array of times in [0, 1]."""
    d = x.shape[-1]
    sol = _integrate(metric, x, v, dense=True)

    def path(t):
        t_arr = np.asarray(t, dtype=float)
        if np.any(t_arr < 0) or np.any(t_arr > 1):
            raise ValueError("geodesic times must lie in [0, 1]")
        pts = sol.sol(np.atleast_1d(t_arr))[:d].T
        return B.array(pts[0] if t_arr.ndim == 0 else pts, like=x)
    return path


def _shooting_jacobian(metric, x, v, rtol: float = 1e-7):
    """``d exp_x(v) / dv`` from the variational (Jacobi) equations.

    Newton only needs an approximate Jacobian, so this integrates at a loose
    tolerance; the end point itself always comes from the accurate :func:`exp`.
    """
    d = x.shape[-1]

    def field(s):
        return B.concatenate([s[d:], acceleration(metric, s[:d], s[d:])])

    def f(_t, y):
        s_b = B.array(y[: 2 * d], like=x)
        A = B.to_numpy(B.jacobian(field, s_b))
        Phi = y[2 * d:].reshape(2 * d, d)
        return np.concatenate([y[d: 2 * d],
                               B.to_numpy(acceleration(metric, s_b[:d], s_b[d:])),
                               (A @ Phi).ravel()])

    # Phi = d(state)/dv, starting at [0; I]
    y0 = np.concatenate([B.to_numpy(x), B.to_numpy(v), np.vstack([np.zeros((d, d)), np.eye(d)]).ravel()])
    sol = solve_ivp(f, (0.0, 1.0), y0, method="DOP853", rtol=rtol, atol=rtol)
    if not sol.success or not np.all(np.isfinite(sol.y[:, -1])):
        raise GeodesicError(f"geodesic integration failed: {sol.message}")
    return sol.y[2 * d:, -1].reshape(2 * d, d)[:d]


def log(metric, x, y, tol: float = 1e-11, max_iter: int = 60, v0=None):
    r"""Initial velocity ``v`` with :math:`\exp_x(v) = y`, by shooting.

    A quasi-Newton iteration on the end-point error :math:`\exp_x(v) - y`:
    the Jacobian comes from the variational equations at the start (and again
    whenever progress stalls) and is kept current by Broyden updates in
    between; a step that does not reduce the error is halved.  Starts from
    the chart difference ``y - x`` (or ``v0``) and stops when the error is
    below ``tol * (1 + |y|)``.
    """
    x_np, y_np = B.to_numpy(x), B.to_numpy(y)
    v = (y_np - x_np) if v0 is None else B.to_numpy(v0)
    scale = 1.0 + np.linalg.norm(y_np)

    def residual(v_, rtol=None):
        try:
            return B.to_numpy(exp(metric, x, B.array(v_, like=x), rtol=rtol)) - y_np
        except (GeodesicError, ValueError, FloatingPointError, np.linalg.LinAlgError):
            return None

    # inexact Newton: integrate only as accurately as the current error needs
    def accuracy(err):
        return float(np.clip(1e-3 * err / scale, RTOL, 1e-6))

    r = residual(v, 1e-6)
    if r is None:
        raise GeodesicError("geodesic shooting: the initial guess leaves the domain of the metric")
    J = _shooting_jacobian(metric, x, B.array(v, like=x))
    fresh, precise = True, False
    for _ in range(max_iter):
        err = np.linalg.norm(r)
        if err <= 1e3 * tol * scale and accuracy(err) > RTOL:
            r = residual(v)  # confirm at full accuracy
            err = np.linalg.norm(r)
        if err <= tol * scale:
            return B.array(v, like=x)
        step = -np.linalg.solve(J, r)
        t = 1.0
        while t > 1e-4:
            r_new = residual(v + t * step, RTOL if precise else accuracy(err))
            if r_new is not None and np.linalg.norm(r_new) < err:
                break
            t *= 0.5
        else:
            if fresh:
                if precise:
                    break
                # A stall at a fresh Jacobian can be integration noise: the kept
                # residual came from a looser solve.  Retry once at full accuracy.
                precise, r_full = True, residual(v)
                if r_full is None:
                    break
                r = r_full
                continue
            J, fresh = _shooting_jacobian(metric, x, B.array(v, like=x)), True
            continue
        s_ = t * step
        J = J + np.outer((r_new - r) - J @ s_, s_) / (s_ @ s_)   # Broyden's update
        v, r, fresh = v + s_, r_new, False
    if np.linalg.norm(r) <= 1e3 * tol * scale:
        return B.array(v, like=x)
    raise GeodesicError(f"geodesic shooting did not converge (end-point error {np.linalg.norm(r):.3g}); "
                        "the points may be too far apart or not joined by a unique geodesic")
