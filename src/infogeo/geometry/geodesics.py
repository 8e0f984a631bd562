r"""Geodesics of any metric given as a function of the point.

Closed forms are an optimisation; everything here needs only
``metric.matrix(x)`` and autodiff, so every manifold has geodesics.

* Christoffel symbols
  :math:`\Gamma^k_{ij} = \tfrac12 G^{kl}(\partial_i G_{lj} + \partial_j G_{li} - \partial_l G_{ij})`
  (:func:`christoffel`, for inspection; the solvers below never form them).
* Geodesics are integrated as the Hamiltonian flow of
  :math:`H(x, p) = \tfrac12 p^T G(x)^{-1} p` (the cogeodesic flow; e.g. Lee,
  *Riemannian Manifolds*, 2018, Ch. 5):

  .. math:: \dot x = v = G(x)^{-1} p,\qquad \dot p = \tfrac12\nabla_x\big(v^T G(x) v\big)\big|_{v\ \mathrm{fixed}}.

  One right-hand side costs one evaluation of :math:`G` and *one*
  vector-Jacobian product of :math:`x \mapsto G(x)` with the cotangent
  :math:`vv^T` -- a single reverse pass, no Jacobian of the metric and no
  nested differentiation.  Integration is adaptive 8th-order Runge–Kutta
  (DOP853).  Several geodesics are integrated as one system (batched ``exp``).
  A single ``exp`` of a metric that evaluates in batches is first tried by
  collocation of the initial-value problem (:mod:`infogeo.geometry.geodesics_bvp`).
* ``log`` first tries Chebyshev collocation of the boundary problem with the
  metric evaluated at all nodes in one call (:mod:`infogeo.geometry.geodesics_bvp`;
  metric functions that vectorise over an array whose rows are the coordinates).
  Otherwise, or when the collocation fails, it solves
  :math:`\exp_x(v) = y` by a quasi-Newton method.  The Jacobian
  :math:`\partial\exp_x(v)/\partial v` comes from internal numerical
  differentiation: the geodesic and :math:`d` perturbed copies are integrated
  together with the same steps, so their differences are derivatives of the
  discrete flow (Bock 1981); Broyden updates keep it current between such
  solves.  The start is the chord corrected by the
  Christoffel term at the midpoint, :math:`v_0 = \Delta + \tfrac12\Gamma(m)[\Delta, \Delta]`;
  iterations integrate at a loose tolerance until the error is small, then at
  full accuracy, with a backtracking line search, and when Newton stalls the
  target is moved along the coordinate chord and approached by continuation.

Every solve runs under a :class:`~infogeo.budget.Budget` (right-hand-side
evaluations per integration, Newton iterations, wall time): pass ``budget=``
or set ``metric.budget``.  When it runs out a
:class:`~infogeo.budget.BudgetExceededError` names the operation and the scale.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import numpy as np
from scipy.integrate import solve_ivp

from .. import backend as B
from . import geodesics_bvp
from ..budget import Budget, BudgetExceededError, as_budget

logger = logging.getLogger(__name__)

__all__ = ["GeodesicError", "BudgetExceededError", "christoffel", "acceleration", "exp", "log", "geodesic",
           "DEFAULT_BUDGET"]

RTOL = 1e-12
ATOL = 1e-12
#: tolerance of the integrations while the shooting is still far from its target
LOOSE_RTOL = 1e-6
#: default budget of one ``log``/``exp``: Newton iterations and wall time
DEFAULT_BUDGET = Budget(max_iter=200, max_time=60.0)
#: tolerance of ``exp`` by collocation (Newton steps and trailing Chebyshev coefficients, relative)
COLLOCATION_TOL = 1e-12
#: right-hand-side evaluations allowed to one integration
MAX_EVALS = 100_000


class GeodesicError(RuntimeError):
    """The geodesic boundary problem could not be solved (no convergence, or the path left the domain)."""


def christoffel(metric, x):
    r"""Christoffel symbols of the second kind, ``Gamma[k, i, j]`` (one Jacobian of the metric)."""
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


def _budget(metric, budget: Optional[Budget]) -> Budget:
    return as_budget(budget, getattr(metric, "budget", None) or DEFAULT_BUDGET)


class _Flow:
    """The Hamiltonian geodesic field on stacked states ``(K, 2, d)`` = K copies of ``(x, p)``."""

    def __init__(self, metric, like, budget: Budget, inside: Optional[Callable[[np.ndarray], bool]] = None):
        self.metric, self.like, self.budget, self.inside = metric, like, budget, inside

    def _metric(self, x: np.ndarray, fn: Callable):
        # a metric not representable at x (a family's Fisher matrix that overflows or underflows there) ends the
        # geodesic as a NaN in it does
        try:
            return fn(self.metric.matrix, B.array(x, like=self.like))
        except ValueError as exc:
            raise GeodesicError(f"the geodesic left the domain of the metric (at x = {np.array2string(x, 4)}): "
                                f"{exc}") from exc

    def matrix(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(B.to_numpy(self._metric(x, lambda f, a: f(a))), dtype=float)

    def velocity_and_force(self, x: np.ndarray, p: np.ndarray):
        G, pull = self._metric(x, B.vjp)
        G = np.asarray(B.to_numpy(G), dtype=float)
        if self.inside is not None and not self.inside(x):
            raise GeodesicError(f"the geodesic left the domain of the manifold (at x = {np.array2string(x, 4)})")
        try:  # Cholesky: a geodesic may not cross a region where the metric is not an inner product
            L = np.linalg.cholesky(G)
        except np.linalg.LinAlgError:
            raise GeodesicError(f"the metric is not positive definite along the geodesic (at x = "
                                f"{np.array2string(x, 4)}): it left the domain of the metric") from None
        v = np.linalg.solve(L.T, np.linalg.solve(L, p))
        f = 0.5 * np.asarray(B.to_numpy(pull(B.array(np.outer(v, v), like=self.like))), dtype=float)
        return v, f

    def rhs(self, d: int):
        def f(_t, y):
            self.budget.tick()
            S = y.reshape(-1, 2, d)
            out = np.empty_like(S)
            with np.errstate(all="ignore"):
                for k in range(S.shape[0]):
                    out[k, 0], out[k, 1] = self.velocity_and_force(S[k, 0], S[k, 1])
            if not np.all(np.isfinite(out)):
                raise GeodesicError("the geodesic left the domain of the metric (NaN or inf in the metric)")
            return out.ravel()
        return f


def _integrate(flow: _Flow, X: np.ndarray, P: np.ndarray, t_end: float, rtol: float, dense: bool = False,
               radius: Optional[float] = None):
    """Integrate K geodesics with starts ``X`` and momenta ``P`` (shape ``(K, d)``) to ``t_end``.

    With ``radius``, the integration stops (``GeodesicError``) as soon as a
    geodesic moves farther than ``radius`` from its start in coordinates:
    shooting uses it to drop trial velocities that run away.
    """
    d = X.shape[1]
    y0 = np.stack([X, P], axis=1).ravel()
    if not np.all(np.isfinite(y0)):
        # an extreme start (natural parameters of 1e300) overflows its momentum G(x) v: scipy's raw
        # "initial state y0 must be finite" otherwise
        raise GeodesicError("the geodesic's initial momentum G(x) v is not finite (the point or the velocity "
                            f"is too extreme for the metric in floating point; |x| = {np.max(np.abs(X)):.3g})")
    events = None
    if radius is not None:
        def away(_t, y):
            return radius - np.max(np.abs(y.reshape(-1, 2, d)[:, 0] - X))
        away.terminal = True
        events = away
    sol = solve_ivp(flow.rhs(d), (0.0, t_end), y0, method="DOP853", rtol=rtol, atol=rtol, dense_output=dense,
                    events=events)
    if sol.status == 1:
        raise GeodesicError(f"the geodesic ran farther than {radius:.3g} from its start")
    if not sol.success or not np.all(np.isfinite(sol.y[:, -1])):
        raise GeodesicError(f"geodesic integration failed: {sol.message}")
    return sol


def _start(metric, x, budget: Optional[Budget], operation: str, scale: str, inside=None) -> tuple:
    b = _budget(metric, budget).start(operation, scale, "a larger Budget(max_iter=..., max_time=...) via "
                                                      "budget= or metric.budget, or points closer together")
    return b, _Flow(metric, x, b.share(max_iter=MAX_EVALS), inside)


def _check_nodes(gfun, nodes: np.ndarray, inside) -> None:
    """A collocated geodesic stays where the metric is positive definite (and inside the domain)."""
    G = np.moveaxis(np.asarray(gfun(nodes.T), dtype=float), -1, 0)
    if np.linalg.eigvalsh(0.5 * (G + np.swapaxes(G, -1, -2)))[:, 0].min() <= 0:
        raise GeodesicError("the metric is not positive definite along the geodesic: it left the domain of the "
                            "metric")
    if inside is not None and not all(inside(n) for n in nodes):
        raise GeodesicError("the geodesic left the domain of the manifold")


def _scale(*arrays) -> str:
    return ", ".join(f"|{n}| = {np.linalg.norm(a):.3g}" for n, a in arrays)


def exp(metric, x, v, t: float = 1.0, rtol: float | None = None, budget: Optional[Budget] = None,
        inside: Optional[Callable[[np.ndarray], bool]] = None):
    r""":math:`\exp_x(t v)` by solving the geodesic equation (result in ``x``'s backend).

    A single geodesic of a metric that evaluates in batches is found by
    Chebyshev collocation of the initial-value problem
    (:func:`infogeo.geometry.geodesics_bvp.exp`); otherwise, or if that fails,
    the geodesic equation is integrated.

    Batched: ``v`` of shape ``(K, d)`` (and ``x`` of shape ``(d,)`` or ``(K, d)``)
    integrates the K geodesics as one system and returns shape ``(K, d)``.

    The path is checked as it is followed: :class:`GeodesicError` where the metric stops being
    positive definite on it, or where it leaves ``inside`` (a predicate on one point, the
    manifold's declared domain), so an end point is never returned from a path that crossed
    either boundary and came back.
    """
    xn, vn = np.asarray(B.to_numpy(x), dtype=float), np.asarray(B.to_numpy(v), dtype=float)
    batched = vn.ndim == 2 or xn.ndim == 2
    X, V = np.broadcast_arrays(np.atleast_2d(xn), np.atleast_2d(vn))
    b, flow = _start(metric, x if xn.ndim == 1 else x[0], budget, "geodesic exp (ODE integration)",
                     _scale(("x", xn), ("v", vn)), inside)
    gfun = None if batched else geodesics_bvp.batched_matrix(metric, x)
    if gfun is not None:
        try:
            with np.errstate(all="ignore"):
                nodes = geodesics_bvp.exp(gfun, xn, t * vn, max(RTOL if rtol is None else rtol, COLLOCATION_TOL),
                                          b, flow.budget)
            _check_nodes(gfun, nodes, inside)
            return B.array(nodes[-1], like=x)
        except (FloatingPointError, np.linalg.LinAlgError, ValueError, ZeroDivisionError) as exc:
            logger.debug("collocation exp failed (%s); integrating instead", exc)
    P = np.stack([flow.matrix(X[k]) @ V[k] for k in range(len(X))])
    sol = _integrate(flow, X, P, t, RTOL if rtol is None else rtol)
    end = sol.y[:, -1].reshape(-1, 2, X.shape[1])[:, 0]
    like = x if xn.ndim == 1 else x[0]
    return B.array(end if batched else end[0], like=like)


def geodesic(metric, x, v, budget: Optional[Budget] = None) -> Callable[[Any], Any]:
    """The geodesic ``t -> exp_x(t v)``; accepts a scalar or an array of times in [0, 1]."""
    xn, vn = np.asarray(B.to_numpy(x), dtype=float), np.asarray(B.to_numpy(v), dtype=float)
    d = xn.shape[-1]
    _, flow = _start(metric, x, budget, "geodesic (ODE integration)", _scale(("x", xn), ("v", vn)))
    sol = _integrate(flow, xn[None], (flow.matrix(xn) @ vn)[None], 1.0, RTOL, dense=True)

    def path(t):
        t_arr = np.asarray(t, dtype=float)
        if np.any(t_arr < 0) or np.any(t_arr > 1):
            raise ValueError("geodesic times must lie in [0, 1]")
        pts = sol.sol(np.atleast_1d(t_arr))[:d].T
        return B.array(pts[0] if t_arr.ndim == 0 else pts, like=x)
    return path


class _Stall(Exception):
    """Newton made no progress from the current start (internal: triggers continuation)."""


class _Shooter:
    """Newton shooting from ``x``: end points and their Jacobians in the initial velocity."""

    def __init__(self, flow: _Flow, x: np.ndarray, y: np.ndarray, budget: Budget):
        self.flow, self.x, self.budget = flow, x, budget
        self.G0 = flow.matrix(x)
        self.d = len(x)
        # trial geodesics that run this far from the start in coordinates are dropped
        self.radius = 100.0 * (1.0 + np.max(np.abs(x)) + np.max(np.abs(y - x)))

    def end(self, v: np.ndarray, rtol: float) -> np.ndarray:
        sol = _integrate(self.flow, self.x[None], (self.G0 @ v)[None], 1.0, rtol, radius=self.radius)
        return sol.y[:self.d, -1]

    def end_and_jacobian(self, v: np.ndarray, rtol: float):
        """End point and ``d end / d v`` by internal numerical differentiation (d + 1 geodesics, same steps)."""
        d = self.d
        h = 1e-7 * (1.0 + np.linalg.norm(v))
        V = np.vstack([v, v + h * np.eye(d)])
        sol = _integrate(self.flow, np.repeat(self.x[None], d + 1, axis=0), V @ self.G0.T, 1.0, rtol,
                         radius=self.radius)
        ends = sol.y[:, -1].reshape(d + 1, 2, d)[:, 0]
        return ends[0], (ends[1:] - ends[0]).T / h

    def newton(self, v: np.ndarray, y: np.ndarray, tol: float) -> np.ndarray:
        """Quasi-Newton with backtracking; raises ``_Stall`` when it cannot make progress from ``v``.

        The Jacobian comes from internal numerical differentiation at the start (and again when
        a step fails) and is kept current by Broyden updates, so each iteration integrates one
        geodesic: at a loose tolerance while far from the target, at full accuracy near it.
        """
        scale = 1.0 + np.linalg.norm(y)
        try:
            e, J = self.end_and_jacobian(v, LOOSE_RTOL)
        except GeodesicError:
            raise _Stall from None
        r, exact, fresh = e - y, False, True
        while True:
            err = np.linalg.norm(r)
            if err <= tol * scale and exact:
                return v
            self.budget.tick()
            try:
                step = -np.linalg.solve(J, r)
            except np.linalg.LinAlgError:
                raise _Stall from None
            # near the target the loose integration's own error would dominate: integrate accurately,
            # from a fresh Jacobian (the chord iteration then gains about five digits per step)
            final = err <= 1e2 * LOOSE_RTOL * scale
            if final and not exact and not fresh:
                try:
                    J, fresh = self.end_and_jacobian(v, LOOSE_RTOL)[1], True
                    step = -np.linalg.solve(J, r)
                except (GeodesicError, np.linalg.LinAlgError):
                    raise _Stall from None
            t = 1.0
            while True:
                cand = v + t * step
                try:
                    r_c = self.end(cand, RTOL if final else LOOSE_RTOL) - y
                except GeodesicError:
                    r_c = None
                if r_c is not None and (np.linalg.norm(r_c) < (1.0 - 1e-4 * t) * err
                                        or (final and np.linalg.norm(r_c) <= tol * scale)):
                    break
                t *= 0.5
                if t < 1e-3:
                    break
                self.budget.tick()
            if t < 1e-3:
                if fresh:
                    raise _Stall
                try:   # the Broyden Jacobian went stale: a fresh one at the current velocity
                    e, J = self.end_and_jacobian(v, RTOL if exact else LOOSE_RTOL)
                except GeodesicError:
                    raise _Stall from None
                r, fresh = e - y, True
                continue
            s_ = cand - v
            J = J + np.outer((r_c - r) - J @ s_, s_) / (s_ @ s_)   # Broyden's update
            v, r, exact, fresh = cand, r_c, final, False


def _midpoint_guess(flow: _Flow, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    r"""Chord plus the Christoffel correction at the midpoint, :math:`\Delta + \tfrac12\Gamma(m)[\Delta,\Delta]`."""
    delta = y - x
    m = 0.5 * (x + y)
    try:
        with np.errstate(all="ignore"):
            a = np.asarray(B.to_numpy(acceleration(flow.metric, B.array(m, like=flow.like),
                                                   B.array(delta, like=flow.like))), dtype=float)
    except (GeodesicError, np.linalg.LinAlgError, ValueError, FloatingPointError):
        return delta
    v = delta - 0.5 * a
    return v if np.all(np.isfinite(v)) else delta


def log(metric, x, y, tol: float = 1e-11, v0=None, budget: Optional[Budget] = None):
    r"""Initial velocity ``v`` with :math:`\exp_x(v) = y`, by Newton shooting (see the module notes).

    Stops when the end-point error is below ``tol * (1 + |y|)``.  Raises
    :class:`GeodesicError` when no geodesic is found and
    :class:`~infogeo.budget.BudgetExceededError` when the budget runs out.
    """
    x_np, y_np = np.asarray(B.to_numpy(x), dtype=float), np.asarray(B.to_numpy(y), dtype=float)
    budget, flow = _start(metric, x, budget, "geodesic log (Newton shooting)",
                          _scale(("x", x_np), ("y", y_np), ("y - x", y_np - x_np)))
    v = _midpoint_guess(flow, x_np, y_np) if v0 is None else np.asarray(B.to_numpy(v0), dtype=float)
    gfun = geodesics_bvp.batched_matrix(metric, x)
    if gfun is not None:
        try:
            with np.errstate(all="ignore"):
                return B.array(geodesics_bvp.log(gfun, x_np, y_np, tol, budget, flow.budget, guess=v), like=x)
        except (FloatingPointError, np.linalg.LinAlgError, ValueError, ZeroDivisionError) as exc:
            logger.debug("collocation log failed (%s); shooting instead", exc)
    shooter = _Shooter(flow, x_np, y_np, budget)
    try:
        return B.array(shooter.newton(v, y_np, tol), like=x)
    except _Stall:
        pass
    # continuation: move the target along the coordinate chord and follow its geodesic
    s_done, v_done, ds = 0.0, np.zeros_like(x_np), 0.25
    while s_done < 1.0:
        s = min(1.0, s_done + ds)
        target = x_np + s * (y_np - x_np)
        guess = v_done * (s / s_done) if s_done > 0 else _midpoint_guess(flow, x_np, target)
        try:
            v_done, s_done = shooter.newton(guess, target, tol if s == 1.0 else 1e-7), s
            ds *= 2.0
        except _Stall:
            ds *= 0.25
            if ds < 1e-8:
                raise GeodesicError(
                    f"geodesic shooting did not converge ({_scale(('x', x_np), ('y', y_np))}, continuation "
                    f"stalled at {s_done:.3g} of the way); the points may not be joined by a unique "
                    "geodesic, or the chord between them leaves the domain") from None
    return B.array(v_done, like=x)

