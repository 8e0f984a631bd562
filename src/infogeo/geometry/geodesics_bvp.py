r"""``log`` and ``exp`` by Chebyshev collocation of the geodesic equation, the metric evaluated in batches.

The geodesic :math:`\gamma` from ``x`` to ``y`` solves
:math:`\ddot\gamma^k = -\Gamma^k_{ij}(\gamma)\dot\gamma^i\dot\gamma^j`,
:math:`\gamma(0) = x`, :math:`\gamma(1) = y`.  It is sought as the polynomial
interpolating its values at the Chebyshev–Lobatto nodes
:math:`t_n = (1 - \cos(\pi n/N))/2`; derivatives are the Chebyshev
differentiation matrix applied to the nodal values, so the equation holds at
every interior node (spectral collocation; Trefethen, *Spectral Methods in
MATLAB*, 2000, Ch. 6 and 13).  A smooth geodesic is an analytic curve and the
error falls geometrically in :math:`N`; :math:`N` doubles until the
interpolant's trailing Chebyshev coefficients are below the tolerance.
``exp`` solves the initial-value problem the same way: :math:`\gamma(0) = x`
and :math:`\dot\gamma(0) = v` fixed, the end node free, starting from the
straight line :math:`x + tv`.

What makes this cheap is that the metric is needed at all nodes *at once*:
one reverse pass of :math:`x \mapsto G(x)` over a batch that repeats the nodes
once per entry :math:`(l, j)` of the cotangent gives every derivative
:math:`\partial_i G_{lj}` at every node, hence all Christoffel symbols; the
same pass also carries the nodes moved by a small step in each coordinate,
whose differences give :math:`\partial\Gamma/\partial x` for Newton's Jacobian
(:math:`\partial\Gamma/\partial\dot\gamma` is exact).  A metric that
declares ``batches_points`` (e.g. a Fisher metric whose closed form is
vectorised over a leading axis) is called on the ``(m, d)`` array of points;
any other metric function on a ``(d, m)`` array (each coordinate a row).  The
batched values are checked against single-point calls before they are used, and
metrics that do not vectorise either way are left to the shooting solver of :mod:`infogeo.geometry.geodesics`.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

import numpy as np
import scipy.linalg as sl

from .. import backend as B
from ..budget import Budget

logger = logging.getLogger(__name__)

__all__ = ["batched_matrix", "exp", "log"]

#: collocation degrees tried in turn (each solve starts from the previous one's interpolant)
DEGREES = (16, 32, 64, 128)
#: relative step of the finite differences of the Christoffel symbols in Newton's Jacobian
FD_STEP = 1e-7


def _cheb(N: int):
    """Nodes ``t`` in [0, 1] (increasing) and the first-derivative matrix ``D`` in ``t``."""
    j = np.arange(N + 1)
    xi = np.cos(np.pi * j / N)
    c = np.where((j == 0) | (j == N), 2.0, 1.0) * (-1.0) ** j
    dX = xi[:, None] - xi[None, :]
    D = np.outer(c, 1.0 / c) / (dX + np.eye(N + 1))
    D -= np.diag(D.sum(axis=1))
    return (1.0 - xi) / 2.0, -2.0 * D   # t = (1 - xi)/2, so d/dt = -2 d/dxi


def _cheb_coefficients(values: np.ndarray) -> np.ndarray:
    """Chebyshev coefficients of the interpolant of ``values`` (shape ``(N + 1, d)``) at the Lobatto nodes."""
    N = len(values) - 1
    ext = np.concatenate([values, values[-2:0:-1]], axis=0)
    c = np.real(np.fft.fft(ext, axis=0))[:N + 1] / N
    c[0] /= 2
    c[N] /= 2
    return c


def _cheb_eval(coef: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The Chebyshev series ``coef`` (shape ``(N + 1, d)``) at times ``t`` in [0, 1]."""
    xi = 1.0 - 2.0 * t
    return np.polynomial.chebyshev.chebval(xi, coef).T


def batched_matrix(metric, like) -> Optional[Callable[[np.ndarray], np.ndarray]]:
    """A function ``XT (d, m) -> G (d, d, m)`` evaluating the metric at m points in one call, or ``None``.

    A metric that declares ``batches_points`` (a closed form over a leading
    batch axis) is called on the points as rows, ``(m, d) -> (m, d, d)``.
    Otherwise ``metric.matrix`` is called on an array whose rows are the
    coordinates, so a function written for one point with ``x[0], x[1], ...``
    and elementwise operations evaluates every column at once.  Either form is
    accepted only if it reproduces single-point calls at distinct test points.
    (Metrics that batch over a leading axis by looping gain nothing here: every
    node costs a call.)
    """
    if B.is_torch(like):
        return None
    d = int(np.asarray(like).shape[-1])
    rng = np.random.default_rng(0)
    probe = np.asarray(like, dtype=float)[:, None] * (1.0 + 1e-3 * rng.standard_normal((d, 3)))
    try:
        single = np.stack([np.asarray(metric.matrix(probe[:, k]), dtype=float) for k in range(3)], axis=-1)
    except Exception:  # noqa: BLE001  (the shooting solver reports the metric's own error)
        return None
    if getattr(metric, "batches_points", False):
        def form(XT):
            return B.transpose(metric.matrix(B.transpose(XT)), (1, 2, 0))
    else:  # a function written for one point, called with the coordinates as rows
        form = getattr(metric, "point_function", metric.matrix)
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(B.to_numpy(form(probe)), dtype=float)
    except Exception:  # noqa: BLE001  (a metric written for one point that does not vectorise)
        return None
    if out.shape == single.shape and np.allclose(out, single, rtol=1e-12, atol=0.0):
        return form
    return None


class _Christoffel:
    """Christoffel symbols at batches of nodes from one reverse pass of the batched metric."""

    def __init__(self, gfun: Callable, d: int, budget: Budget):
        self.gfun, self.d, self.budget = gfun, d, budget
        # cotangent picking entry (l, j) of G in copy number l*d + j of the nodes
        self.basis = np.eye(d * d).reshape(d * d, d, d)

    def __call__(self, X: np.ndarray) -> tuple:
        """``Gamma`` (shape ``(m, d, d, d)``, ``Gamma[n, k, i, j]``) at the nodes ``X`` (shape ``(m, d)``)."""
        self.budget.tick()
        d, m = self.d, len(X)
        rep = np.tile(X.T, (1, d * d))                               # (d, d*d*m): copy c holds all nodes
        G, pull = B.vjp(self.gfun, rep)
        G = np.moveaxis(np.asarray(G, dtype=float)[:, :, :m], -1, 0)  # (m, d, d)
        cot = np.repeat(self.basis.transpose(1, 2, 0), m, axis=2)     # (d, d, d*d*m)
        dG = np.asarray(pull(cot), dtype=float).reshape(d, d, d, m)   # dG[i, l, j, n] = d_i G_lj
        dG = dG.transpose(3, 1, 2, 0)                                # [n, l, j, i]
        first = 0.5 * (dG.transpose(0, 1, 3, 2) + dG - dG.transpose(0, 3, 1, 2))   # [n, l, i, j]
        with np.errstate(all="ignore"):
            Gam = np.linalg.solve(G, first.reshape(m, d, d * d)).reshape(m, d, d, d)
        if not np.all(np.isfinite(Gam)):
            raise FloatingPointError("the metric is singular or undefined at a collocation node")
        return Gam


def _acceleration(Gam: np.ndarray, V: np.ndarray) -> np.ndarray:
    r""":math:`-\Gamma^k_{ij} v^i v^j` at every node."""
    return -np.einsum("nkij,ni,nj->nk", Gam, V, V)


def _jacobian(Gam, Gam_moved, h, V, D, D2, d, initial):
    """Newton's Jacobian of the residual in the free nodal values (interior ones; with ``initial``,
    also the end value, and the residual leads with the velocity condition ``(D X)_0 - v``)."""
    n_int = len(V)
    free = slice(1, n_int + 2 if initial else n_int + 1)
    a0 = _acceleration(Gam, V)
    Ax = np.stack([(_acceleration(Gam_moved[i], V) - a0) / h for i in range(d)], axis=-1)
    Av = -2.0 * np.einsum("nkij,nj->nki", Gam, V)
    J = np.kron(D2[1:-1, free], np.eye(d))
    for n in range(n_int):
        J[n * d:(n + 1) * d, n * d:(n + 1) * d] -= Ax[n]
        J[n * d:(n + 1) * d] -= np.kron(D[1 + n, free], Av[n])
    if initial:
        J = np.vstack([np.kron(D[:1, free], np.eye(d)), J])
    return sl.lu_factor(J)


def _newton(christoffel: _Christoffel, X: np.ndarray, N: int, tol: float, budget: Budget,
            v0: Optional[np.ndarray] = None) -> np.ndarray:
    """Collocation of degree ``N`` from the nodal guess ``X``; returns the converged nodal values.

    Both ends are fixed (boundary problem), or with ``v0`` the start and its
    velocity (initial-value problem: the end node is free and the velocity
    condition ``(D X)_0 = v0`` joins the equation at the interior nodes).

    Chord Newton with backtracking on the residual: the Jacobian (finite
    differences in the position, exact in the velocity) is formed at the first
    iterate and again whenever the residual stops falling fast.
    """
    d = X.shape[1]
    _, D = _cheb(N)
    D2 = D @ D
    scale = 1.0 + np.max(np.abs(X))
    h = FD_STEP * scale

    initial = v0 is not None
    free = slice(1, N + 1 if initial else N)

    def residual(X, Gam):
        R = (D2 @ X)[1:-1] - _acceleration(Gam, (D @ X)[1:-1])
        if initial:
            R = np.concatenate([(D[:1] @ X) - v0, R])
        err = float(np.max(np.abs(R)))
        if not np.isfinite(err):
            raise FloatingPointError("collocation residual is not finite")
        return R, err

    lu = None
    for _ in range(60):
        budget.tick()
        if lu is None:   # Christoffel symbols at the nodes and at the nodes moved along each axis, one pass
            inner = X[1:-1]
            moved = christoffel(np.concatenate([inner] + [inner + h * e for e in np.eye(d)]))
            moved = moved.reshape(d + 1, N - 1, d, d, d)
            R, err = residual(X, moved[0])
            lu, fresh = _jacobian(moved[0], moved[1:], h, (D @ X)[1:-1], D, D2, d, initial), True
        step = np.zeros_like(X)
        step[free] = sl.lu_solve(lu, R.ravel()).reshape(-1, d)
        t = 1.0
        while True:
            try:
                cand = X - t * step
                R_c, err_c = residual(cand, christoffel(cand[1:-1]))
            except (FloatingPointError, ValueError):   # the step left the metric's domain: a shorter one
                err_c = np.inf
            if err_c < (1.0 - 1e-4 * t) * err or (np.isfinite(err_c) and np.max(np.abs(t * step)) <= tol * scale):
                break
            t *= 0.5
            if t < 1e-3:
                break
        if t < 1e-3:
            if fresh:
                raise FloatingPointError("collocation Newton stalled")
            lu = None   # the chord Jacobian went stale
            continue
        if np.max(np.abs(t * step)) <= tol * scale:
            return cand
        X, R, fresh = cand, R_c, False
        if t < 1.0 or err_c > 0.25 * err:
            lu = None   # slow contraction: a fresh Jacobian at the new iterate
        err = err_c
    raise FloatingPointError("collocation Newton did not converge")


def _first_solve(christoffel, x, y, guess, t, N, tol, budget):
    """Collocation at the first degree from the chord bent towards ``guess``, or from the straight chord
    when the bent curve leaves the metric's domain (the metric raises ``ValueError`` there)."""
    delta = y - x

    def solve(bend):
        X = x + np.outer(t, delta) + np.outer(t * (1 - t), bend)
        X[0], X[-1] = x, y
        return _newton(christoffel, X, N, tol, budget)

    if guess is not None:
        try:
            return solve(guess - delta)
        except ValueError:
            logger.debug("the bent initial curve leaves the domain; starting from the chord")
    return solve(np.zeros_like(delta))


def _resolved(coef: np.ndarray, N: int, tol: float) -> bool:
    """Whether the interpolant's trailing Chebyshev coefficients are below the tolerance."""
    return np.max(np.abs(coef[-max(3, N // 8):])) <= tol * (1.0 + np.max(np.abs(coef)))


def exp(gfun: Callable, x: np.ndarray, v: np.ndarray, tol: float, budget: Budget,
        eval_budget: Budget) -> np.ndarray:
    """The geodesic with initial position ``x`` and velocity ``v`` at the collocation nodes (the last is
    :math:`\\exp_x(v)`), by collocation.

    The same nodes and Newton iteration as :func:`log`, with the velocity
    condition at the start in place of the end condition; the first guess is
    the straight line ``x + t v``.  Raises ``FloatingPointError`` when the
    collocation fails (the caller integrates the geodesic equation instead).
    """
    christoffel = _Christoffel(gfun, len(x), eval_budget)
    coef = None
    for N in DEGREES:
        t, _ = _cheb(N)
        X = x + np.outer(t, v) if coef is None else _cheb_eval(coef, t)
        X[0] = x
        X = _newton(christoffel, X, N, tol, budget, v0=v)
        coef = _cheb_coefficients(X)
        if _resolved(coef, N, tol):
            return X
    raise FloatingPointError("collocation did not resolve the geodesic at the largest degree")


def log(gfun: Callable, x: np.ndarray, y: np.ndarray, tol: float, budget: Budget, eval_budget: Budget,
        guess: Optional[np.ndarray] = None) -> np.ndarray:
    """Initial velocity of the geodesic from ``x`` to ``y`` by collocation (see the module notes).

    ``guess`` is an initial velocity used to bend the chord.  Raises
    ``FloatingPointError`` when the collocation fails (the caller falls back to shooting).
    """
    d = len(x)
    christoffel = _Christoffel(gfun, d, eval_budget)
    coef = None
    for N in DEGREES:
        t, _ = _cheb(N)
        if coef is None:
            X = _first_solve(christoffel, x, y, guess, t, N, tol, budget)
        else:
            X = _cheb_eval(coef, t)
            X[0], X[-1] = x, y
            X = _newton(christoffel, X, N, tol, budget)
        coef = _cheb_coefficients(X)
        if _resolved(coef, N, tol):
            _, D = _cheb(N)
            return (D @ X)[0]
    raise FloatingPointError("collocation did not resolve the geodesic at the largest degree")
