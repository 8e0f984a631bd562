r"""Statistics on a Riemannian manifold with exp and log: Fréchet means and parallel transport.

**Fréchet mean** (Fréchet 1948; Karcher 1977).  The weighted mean of points
:math:`p_1..p_n` is the minimiser of

.. math:: F(x) = \tfrac12\sum_i w_i\, d(x, p_i)^2,\qquad
          \operatorname{grad} F(x) = -\sum_i w_i \log_x p_i

(:math:`\sum_i w_i = 1`), found by Riemannian gradient descent with step
:math:`x \leftarrow \exp_x\big(t\sum_i w_i\log_x p_i\big)`: :math:`t = 1` first (exact on
flat spaces; convergent on Hadamard manifolds, Afsari, Tron & Vidal 2013), then the
inverse curvature of the cost along the previous step (a Barzilai–Borwein step, which
step 1 overshoots in negative curvature), halved while the cost rises.  It stops when
:math:`\|\operatorname{grad} F\|_x \le \mathrm{tol}\cdot s`, :math:`s` the
root-mean-square distance of the points to the start (scale-free).  Closed
forms are used where they exist: one point, two points (the geodesic at
:math:`t = w_2/(w_1 + w_2)`), and families registered with
:func:`register_mean` (flat families: the weighted average in flat coordinates).

**Parallel transport** along the geodesic from :math:`p` to :math:`q`
(do Carmo 1992, Ch. 2): the field :math:`V(t)` with
:math:`\dot V^k + \Gamma^k_{ij}(\gamma)\dot\gamma^iV^j = 0`.  It preserves
inner products.  Generic: the geodesic and the field are integrated together
(DOP853) from :math:`\dot\gamma(0) = \log_p q`, the connection terms
contracted with the velocities through two JVPs and one VJP of the metric per step (autodiff, the
symbols themselves are never formed; :func:`infogeo.geometry.geodesics.christoffel` gives them for
inspection); closed forms registered with :func:`register_transport` replace it.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .. import backend as B
from ..budget import Budget, BudgetExceededError, as_budget
from . import points as _points
from .metric import EuclideanMetric
from .vectors import TangentVector

logger = logging.getLogger(__name__)

__all__ = ["frechet_mean", "transport", "register_mean", "register_transport", "TRANSPORT_BUDGET"]

#: closed-form parallel transports: manifold class -> (chart the map is written in, map(M, p, q, v) -> w)
_TRANSPORTS: Dict[type, Tuple[str, Callable]] = {}
#: closed-form Fréchet means: manifold class -> (chart, map(M, points (n, dim), weights (n,)) -> mean)
_MEANS: Dict[type, Tuple[str, Callable]] = {}

#: budget of one ODE transport: right-hand-side evaluations and wall time
TRANSPORT_BUDGET = Budget(max_iter=50_000, max_time=60.0)
#: relative tolerance of the ODE transport
TRANSPORT_RTOL = 1e-11


def register_transport(cls: type, chart: str, fn: Callable) -> None:
    """Declare the closed-form parallel transport ``fn(M, p, q, v) -> w`` of manifolds of class ``cls``.

    ``M`` is the manifold; ``p``, ``q`` and ``v`` are coordinates in chart ``chart`` (points ``(..., dim)``, the vector at
    ``p``); ``w`` is the transported vector at ``q``.  Written with :mod:`infogeo.backend` functions
    so that batches and torch tensors pass through.  Subclasses inherit the registration.
    """
    _TRANSPORTS[cls] = (chart, fn)


def register_mean(cls: type, chart: str, fn: Callable) -> None:
    """Declare the closed-form weighted Fréchet mean ``fn(M, points, weights) -> mean`` of class ``cls``.

    ``points`` has shape ``(n, dim)`` in chart ``chart``, ``weights`` shape ``(n,)`` summing to 1.
    """
    _MEANS[cls] = (chart, fn)


def _lookup(table: Dict[type, Tuple[str, Callable]], M: Any) -> Optional[Tuple[str, Callable]]:
    for cls in type(M).__mro__:
        if cls in table:
            chart, fn = table[cls]
            if chart is None or chart in getattr(M, "charts", (chart,)):
                return chart, fn
    return None


def _in_chart(M: Any, x: Any, chart: Optional[str]):
    return x if chart is None or chart == getattr(M, "chart", None) else M._to_chart(x, chart)


def _from_chart(M: Any, y: Any, chart: Optional[str]):
    return y if chart is None or chart == getattr(M, "chart", None) else M._from_chart(y, chart)


# ---------------------------------------------------------------- transport
def transport(M: Any, p: Any, q: Any, v: TangentVector) -> TangentVector:
    r"""Parallel transport of ``v`` (a tangent vector at ``p``) along the geodesic from ``p`` to ``q``.

    Points and vectors may carry leading batch axes that broadcast.  Closed forms (flat metrics,
    registered families) work on either backend; the generic ODE runs in numpy, pair by pair, and
    returns the result in the backend of ``q``.
    """
    p, q = M._pair(p, q)
    w = _transported(M, p, q, M._check_vector(p, v, "transport"))
    # the closed forms of extreme points (a mean of 1e300) overflow: an error, not NaN components
    _points.finite_result(w.components, f"the transport of a vector of {M.name} to q", q)
    return w


def _transported(M: Any, p: Any, q: Any, comps: Any) -> TangentVector:
    """:func:`transport` of checked points and components."""
    lead = _points.batch_shape(p, q, comps, dims=(1, 1, 1))
    p, q, comps = (B.broadcast_to(a, lead + (M.dim,)) if tuple(a.shape[:-1]) != lead else a
                   for a in _points.same_backend(p, q, comps))
    if isinstance(M.metric, EuclideanMetric):
        return TangentVector(q, comps + 0.0 * q, M.chart)   # constant metric: the identity (a fresh array)
    closed = _lookup(_TRANSPORTS, M)
    if closed is not None:
        chart, fn = closed
        if chart is None or chart == M.chart:
            return TangentVector(q, fn(M, p, q, comps), M.chart)
        pg, vg = B.jvp(lambda z: M._to_chart(z, chart), p, comps)
        qg = M._to_chart(q, chart)
        wg = fn(M, pg, qg, vg)
        return TangentVector(q, B.jvp(lambda z: M._from_chart(z, chart), qg, wg)[1], M.chart)
    if 0 in lead:   # an empty batch: nothing to transport
        return TangentVector(q, comps + 0.0 * q, M.chart)
    if lead:
        out = [_transport_ode(M, p[i], q[i], comps[i]) for i in np.ndindex(*lead)]
        return TangentVector(q, B.reshape(B.stack(out), lead + (M.dim,)), M.chart)
    return TangentVector(q, _transport_ode(M, p, q, comps), M.chart)


def _transport_ode(M: Any, p: Any, q: Any, v: Any):
    """One transport by integrating the geodesic and the parallel field together (numpy)."""
    from scipy.integrate import solve_ivp

    from .geodesics import GeodesicError

    metric = M.metric
    pn = np.asarray(B.to_numpy(p), dtype=float)
    qn = np.asarray(B.to_numpy(q), dtype=float)
    vn = np.asarray(B.to_numpy(v), dtype=float)
    d = len(pn)
    u = np.asarray(B.to_numpy(M.metric.log(B.array(pn), B.array(qn))), dtype=float)
    if not np.any(u):
        return B.array(vn, like=q)
    budget = as_budget(getattr(metric, "budget", None), TRANSPORT_BUDGET).start(
        "parallel transport (ODE)", f"|log_p q| = {np.linalg.norm(u):.3g} in coordinates",
        "a larger Budget(max_iter=..., max_time=...) as metric.budget, or closer points")

    def rhs(_t, y):
        budget.tick()
        x, xd, V = (B.array(a) for a in (y[:d], y[d:2 * d], y[2 * d:]))
        acc, turn = _connection(metric, x, xd, V)
        out = np.concatenate([y[d:2 * d], -acc, -turn])
        if not np.all(np.isfinite(out)):
            raise GeodesicError("parallel transport: the geodesic left the domain of the metric")
        return out

    with np.errstate(all="ignore"):
        sol = solve_ivp(rhs, (0.0, 1.0), np.concatenate([pn, u, vn]), method="DOP853",
                        rtol=TRANSPORT_RTOL, atol=TRANSPORT_RTOL * (1.0 + np.abs(np.concatenate([pn, u, vn]))))
    if not sol.success:
        raise GeodesicError(f"parallel transport: integration failed ({sol.message})")
    end = sol.y[:, -1]
    miss = np.linalg.norm(end[:d] - qn) / (1.0 + np.linalg.norm(qn))
    if miss > 1e-6:
        raise GeodesicError(f"parallel transport: the integrated geodesic ends {miss:.3g} (relative) away from q")
    return B.array(end[2 * d:], like=q)


def _connection(metric: Any, x: Any, u: Any, w: Any):
    r""":math:`\Gamma(x)[u, u]` and :math:`\Gamma(x)[u, w]` (numpy) from two JVPs and one VJP of the metric.

    :math:`\Gamma[u, w] = \tfrac12 G^{-1}\big(\partial G[u]\,w + \partial G[w]\,u - \nabla_x(u^TG(x)w)\big)`
    (the Christoffel symbols of the second kind contracted, never formed).
    """
    G, pull = B.vjp(metric.matrix, x)
    dGu = B.jvp(metric.matrix, x, u)[1]
    dGw = B.jvp(metric.matrix, x, w)[1]
    un, wn = np.asarray(B.to_numpy(u), dtype=float), np.asarray(B.to_numpy(w), dtype=float)
    g_uu = np.asarray(B.to_numpy(pull(B.array(np.outer(un, un)))), dtype=float)
    g_uw = np.asarray(B.to_numpy(pull(B.array(np.outer(un, wn)))), dtype=float)
    Gn, dGu, dGw = (np.asarray(B.to_numpy(a), dtype=float) for a in (G, dGu, dGw))
    rhs = np.stack([dGu @ un - 0.5 * g_uu, 0.5 * (dGu @ wn + dGw @ un - g_uw)], axis=1)
    out = np.linalg.solve(Gn, rhs)
    return out[:, 0], out[:, 1]


# ---------------------------------------------------------------- Fréchet mean
def _weights(weights: Any, n: int, like: Any):
    """The weights normalised to sum 1: ``TypeError`` unless real numbers, ``ValueError`` unless ``(n,)``,
    finite and non-negative with a positive sum (a complex weight's imaginary part, or an ``(n, 1)``
    column, would otherwise be dropped or flattened silently)."""
    if weights is None:
        return np.full(n, 1.0 / n)
    if isinstance(weights, (str, bytes)):
        raise TypeError(f"weights must be an array of {n} real numbers, got {type(weights).__name__} {weights!r}")
    try:
        w = np.asarray(B.to_numpy(weights) if B.is_torch(weights) else weights)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"weights must be an array of {n} real numbers, got {type(weights).__name__}") from exc
    if w.dtype.kind not in "iuf":
        raise TypeError(f"weights must be real numbers, got dtype {w.dtype}")
    w = w.astype(float)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not w.max(initial=0.0) > 0:
        raise ValueError(f"weights must be {n} finite non-negative numbers (shape ({n},), one per point) with a "
                         f"positive sum, got {w.tolist() if w.size < 20 else f'shape {w.shape}'}")
    w = w / w.max()   # first: the sum of weights near the largest float would overflow
    return w / w.sum()


def _sq_norms(M: Any, x: Any, V: Any):
    """Squared metric norms of the rows of ``V`` (tangent vectors at ``x``), numpy ``(n,)``."""
    xb = B.broadcast_to(x, tuple(V.shape))
    return np.asarray(B.to_numpy(B.sum(V * M.metric.mv(xb, V), axis=-1)), dtype=float)


def frechet_mean(M: Any, points: Any, weights: Any = None, *, x0: Any = None, method: str = "auto",
                 tol: float = 1e-10, max_iter: int = 100, max_time: Optional[float] = 60.0,
                 return_info: bool = False):
    r"""The weighted Fréchet (Karcher) mean of ``points`` on ``M`` (see the module notes).

    Parameters
    ----------
    M : Manifold
        With ``exp`` and ``log``.
    points : array, shape (n, dim) or (..., n, dim)
        The points (leading axes: several sets, one mean each).
    weights : array, shape (n,), optional
        Non-negative, normalised here; equal by default.
    x0 : point, optional
        Start of the gradient descent (default: the weighted average of the coordinates when it is a
        point of ``M``, else the heaviest point).
    method : {"auto", "gradient"}
        ``"auto"`` uses a closed form where one exists; ``"gradient"`` always iterates.
    tol : float
        Stop when :math:`\|\operatorname{grad}F\|_x \le` ``tol`` times the RMS distance of the points to the
        start.
    max_iter, max_time
        Budget of the descent; when it runs out a :class:`~infogeo.budget.BudgetExceededError` is raised
        (with ``return_info=True`` the result reports ``success=False`` instead).
    return_info : bool
        Also return a :class:`~infogeo.solvers.OptimizeResult` (``x``, ``fun`` = the weighted mean squared
        distance, ``grad_norm``, ``nit``, ``success``, ``message``).

    Returns
    -------
    mean : point of ``M``, shape ``(dim,)`` (or ``(..., dim)``), in the points' backend
    """
    # a NaN, negative or zero tol never stops the descent (it only ran into the budget)
    tol = _points.check_real("tol", tol, positive=True)
    if method not in ("auto", "gradient"):
        raise ValueError(f"method must be 'auto' or 'gradient', got {method!r}")
    X = M._as_point(points, "points")
    if len(X.shape) < 2:
        raise ValueError(f"points must have shape (n, {M.dim}) (one point per row), got shape {tuple(X.shape)}")
    if 0 in tuple(X.shape[:-1]):
        raise ValueError(f"the Fréchet mean of no points is undefined: points has shape {tuple(X.shape)}")
    if len(X.shape) > 2:
        if x0 is not None:
            raise ValueError("x0 is for one set of points (shape (n, dim))")
        lead = tuple(X.shape[:-2])
        runs = [frechet_mean(M, X[i], weights, method=method, tol=tol, max_iter=max_iter, max_time=max_time,
                             return_info=True) for i in np.ndindex(*lead)]
        means = B.reshape(B.stack([r[0] for r in runs]), lead + (M.dim,))
        return (M._mark(means), [r[1] for r in runs]) if return_info else M._mark(means)
    n = X.shape[0]
    w = _weights(weights, n, X)
    x, info = _frechet_mean(M, X, w, x0, method, tol, max_iter, max_time)
    x = M._mark(x)
    if not info.success and not return_info:
        raise BudgetExceededError(f"Fréchet mean on {M.name}: {info.message}; try a larger max_iter/max_time "
                                  "or a looser tol (or return_info=True to get the last iterate)")
    return (x, info) if return_info else x


def _next_step(M, x, x_new, s, g_new, g, t):
    r"""The next step length: the inverse curvature of :math:`F` along the last step (Barzilai & Borwein 1988).

    The step :math:`s` from :math:`x` ends at :math:`x'` with velocity :math:`s' = -\log_{x'}x` (the
    parallel transport of :math:`s`), so :math:`\langle s, Hs\rangle \approx \langle s, g\rangle_x -
    \langle s', g'\rangle_{x'}` (:math:`g = -\operatorname{grad}F`) without any transport.  Flat spaces give 1;
    negative curvature (Gaussians) more than 1, which step 1 would overshoot.  Clipped to [1e-3, 10].
    """
    try:
        s_back = -M.metric.log(x_new, x)
    except (ValueError, ArithmeticError, np.linalg.LinAlgError, RuntimeError):
        return min(1.0, 2.0 * t)
    ss = float(_sq_norms(M, x, s[None])[0])
    curv = (float(B.sum(s * M.metric.mv(x, g))) - float(B.sum(s_back * M.metric.mv(x_new, g_new)))) / ss
    if not (math.isfinite(curv) and curv > 0):
        return min(1.0, 2.0 * t)
    return min(10.0, max(1e-3, 1.0 / curv))


def _frechet_mean(M, X, w, x0, method, tol, max_iter, max_time):
    from ..solvers.result import CONVERGED, FAILED, LIMIT_REACHED, OptimizeResult

    def result(x, fun, gnorm, nit, status, message):
        if fun is None:   # a closed form: the weighted mean squared distance, for the record
            fun = float(w @ np.asarray(B.to_numpy(M.metric.dist(B.broadcast_to(x, tuple(X.shape)), X)),
                                       dtype=float) ** 2)
        return x, OptimizeResult(x=x, fun=fun, grad_norm=gnorm, nit=nit, nfev=nit, success=status == CONVERGED,
                                 status=status, message=message)

    n = X.shape[0]
    wb = B.array(w, like=X)
    if method == "auto":
        if n == 1 or np.count_nonzero(w) == 1:
            return result(X[int(np.argmax(w))] + 0.0, 0.0, 0.0, 0, CONVERGED, "closed form (one point)")
        if isinstance(M.metric, EuclideanMetric):
            return result(B.sum(wb[:, None] * X, axis=0), None, 0.0, 0, CONVERGED, "closed form (flat)")
        closed = _lookup(_MEANS, M)
        if closed is not None:
            chart, fn = closed
            mean = _from_chart(M, fn(M, _in_chart(M, X, chart), wb), chart)
            return result(mean, None, 0.0, 0, CONVERGED, "closed form")
        if n == 2:   # the point of the geodesic at t = w_2 / (w_1 + w_2)
            v = M.metric.log(X[0], X[1])
            return result(M.metric.exp(X[0], float(w[1]) * v), None, 0.0, 0, CONVERGED,
                          "closed form (two points: the geodesic)")
    if x0 is not None:
        x = M._as_point(x0, "x0")
        if len(x.shape) != 1:
            raise ValueError(f"x0 must be one point, shape ({M.dim},), got {tuple(x.shape)}")
        x = _points.same_backend(x, X)[0]
    else:
        avg = B.sum(wb[:, None] * X, axis=0)
        x = avg if M.belongs(avg) else X[int(np.argmax(w))]
    budget = Budget(max_iter=max_iter, max_time=max_time).start("Fréchet mean")
    V = M.metric.log(B.broadcast_to(x, tuple(X.shape)), X)
    d2 = _sq_norms(M, x, V)
    cost = 0.5 * float(w @ d2)
    scale = math.sqrt(float(w @ d2))
    if scale == 0.0:
        return result(x, 0.0, 0.0, 0, CONVERGED, "all points coincide")
    nit, t = 0, 1.0
    while True:
        g = B.sum(wb[:, None] * V, axis=0)          # minus the Riemannian gradient
        gnorm = math.sqrt(max(float(_sq_norms(M, x, g[None])[0]), 0.0))
        if gnorm <= tol * scale:
            return result(x, 2 * cost, gnorm, nit, CONVERGED,
                          f"converged: |grad| = {gnorm:.3g} <= tol * scale = {tol * scale:.3g}")
        try:
            budget.tick()
        except BudgetExceededError as exc:
            return result(x, 2 * cost, gnorm, nit, LIMIT_REACHED, str(exc))
        while True:
            try:
                cand = M.metric.exp(x, t * g)
                V_c = M.metric.log(B.broadcast_to(cand, tuple(X.shape)), X)
                d2_c = _sq_norms(M, cand, V_c)
                cost_c = 0.5 * float(w @ d2_c)
            except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
                logger.debug("Fréchet mean: step %.3g failed (%s); halving", t, exc)
                cost_c = math.inf
            if cost_c <= cost + 1e-12 * abs(cost) or t < 1e-10:
                break
            t *= 0.5
        if not math.isfinite(cost_c):
            return result(x, 2 * cost, gnorm, nit, FAILED, "no step decreased the cost (the exp map failed)")
        t = _next_step(M, x, cand, t * g, B.sum(wb[:, None] * V_c, axis=0), g, t)
        x, V, cost, nit = cand, V_c, cost_c, nit + 1
        logger.debug("Fréchet mean: iteration %d, cost %.6g, |grad| %.3g", nit, cost, gnorm)
