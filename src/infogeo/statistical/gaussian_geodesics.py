r"""Fisher–Rao geodesics of the full-covariance Gaussian family (Eriksen 1987; Calvo & Oller 1991).

The geodesic equations of :math:`N(\mu, \Sigma)` with the Fisher metric (Skovgaard 1984) are
:math:`\mu'' = \Sigma'\Sigma^{-1}\mu'`,
:math:`\Sigma'' = \Sigma'\Sigma^{-1}\Sigma' - \mu'\mu'^T`.  Eriksen (1987)
solves them in closed form from the start :math:`(0, I)` with velocity
:math:`(\delta, B)`:

.. math:: e^{tA},\quad A = \begin{pmatrix} -B & \delta & 0\\ \delta^T & 0 & -\delta^T\\
          0 & -\delta & B\end{pmatrix},\qquad
          \Sigma(t) = \Delta(t)^{-1},\ \mu(t) = \Delta(t)^{-1}\delta(t),

with :math:`\Delta, \delta` the top-left block and top-middle column of
:math:`e^{tA}`.  :math:`A` is symmetric, so :math:`e^{tA}` and its Fréchet
derivatives come from one symmetric eigendecomposition (Daleckii–Krein
formula), for all directions at once.  A general start
:math:`(\mu_0, \Sigma_0 = LL^T)` is reduced to :math:`(0, I)` by the affine map
:math:`x \mapsto L^{-1}(x - \mu_0)`, an isometry.

* ``exp`` for a long velocity is computed by *scaling and squaring along the
  geodesic*: :math:`n` steps of length :math:`1/n` of the closed form, each
  from the frame of the point reached (the geodesic flow is a one-parameter
  group), so every matrix exponential stays well conditioned.
* ``log`` solves the boundary problem by Newton's method on the mismatch
  measured in the target's own frame, with the exact Jacobian for moderate
  velocities and a finite-difference Jacobian of the sub-stepped map for long
  ones, with continuation from closer targets when Newton stalls.  Equal
  means (the affine-invariant SPD geodesic) and equal covariances (a univariate
  half-plane geodesic along the mean difference) are solved in closed form.
* ``dist`` is the length :math:`\sqrt{|\delta|^2 + \tfrac12\|B\|_F^2}` of that geodesic.
* ``dist_bounds`` (closed-form certified bounds, batched on either backend) lives in
  :mod:`~infogeo.statistical.gaussian_bounds` and is re-exported here.

Every solve runs under a :class:`~infogeo.budget.Budget`.  Plain numpy on points given as
:math:`(\mu, \Sigma)`: ``exp`` on batches (leading axes), the others on one pair.
"""
from __future__ import annotations

import logging
import math
from typing import Optional, Tuple

import numpy as np

from ..budget import Budget, as_budget
from . import _spaces
from .gaussian_bounds import dist_bounds

logger = logging.getLogger(__name__)

__all__ = ["GaussianShootingError", "exp", "log", "dist", "dist_bounds", "DEFAULT_BUDGET"]

#: default budget of one ``log``/``dist``: Newton iterations (over all continuation stages) and wall time
DEFAULT_BUDGET = Budget(max_iter=2000, max_time=30.0)
# longest Fisher–Rao step taken by one closed-form matrix exponential (loses about exp(2.8 _STEP) ulps)
_STEP = 2.0


class GaussianShootingError(RuntimeError):
    """Newton shooting for the full-Gaussian geodesic boundary problem did not converge."""


def _sym_basis(d: int) -> np.ndarray:
    """Symmetric basis matrices of the upper-triangle (row-major) coordinates, shape ``(m, d, d)``."""
    iu = np.triu_indices(d)
    E = np.zeros((len(iu[0]), d, d))
    E[np.arange(len(iu[0])), iu[0], iu[1]] = 1.0
    E[np.arange(len(iu[0])), iu[1], iu[0]] = 1.0
    return E


def _vech(M: np.ndarray) -> np.ndarray:
    return M[np.triu_indices(M.shape[-1])]


def _eriksen(x: np.ndarray, Bm: np.ndarray) -> np.ndarray:
    d = x.shape[-1]
    A = np.zeros(x.shape[:-1] + (2 * d + 1, 2 * d + 1))
    A[..., :d, :d], A[..., :d, d], A[..., d, :d] = -Bm, x, x
    A[..., d, d + 1:], A[..., d + 1:, d], A[..., d + 1:, d + 1:] = -x, -x, Bm
    return A


def _speed(x: np.ndarray, Bm: np.ndarray) -> float:
    """Fisher–Rao norm of the velocity ``(x, Bm)`` at ``(0, I)``."""
    return float(np.sqrt(x @ x + 0.5 * np.sum(Bm * Bm)))


# batched helpers; a single point (the shooting's many calls) takes the plain 2-D operations
def _mT(A: np.ndarray) -> np.ndarray:
    return A.T if A.ndim == 2 else np.swapaxes(A, -1, -2)


def _mv(A: np.ndarray, x: np.ndarray) -> np.ndarray:  # matrix-vector products
    return A @ x if x.ndim == 1 and A.ndim == 2 else (A @ x[..., None])[..., 0]


def _solve_v(A: np.ndarray, b: np.ndarray) -> np.ndarray:  # solves for vectors b
    return np.linalg.solve(A, b) if b.ndim == 1 and A.ndim == 2 else np.linalg.solve(A, b[..., None])[..., 0]


def _closed_step(x, Bm, t):
    """Point and velocity at time ``t`` of the geodesic from (0, I) with velocity (x, Bm); batched."""
    d = x.shape[-1]
    lam, V = np.linalg.eigh(_eriksen(x, Bm))
    el = np.exp(t * lam)[..., None, :]
    E = (V * el) @ _mT(V)
    AE = (V * (lam[..., None, :] * el)) @ _mT(V)
    S, delta = np.linalg.inv(E[..., :d, :d]), E[..., :d, d]
    S = 0.5 * (S + _mT(S))
    dS = -S @ AE[..., :d, :d] @ S
    return _mv(S, delta), S, _mv(dS, delta) + _mv(S, AE[..., :d, d]), 0.5 * (dS + _mT(dS))


def _flow_in_steps(x: np.ndarray, Bm: np.ndarray, n: int) -> Tuple[np.ndarray, np.ndarray]:
    """End point (mu, L) after ``n`` closed-form steps of time ``1/n``, each from the frame reached; batched."""
    eye = np.eye(x.shape[-1])
    mu, L = np.zeros_like(x), (eye if Bm.ndim == 2 else np.broadcast_to(eye, Bm.shape))
    for k in range(n):
        m1, S1, dm1, dS1 = _closed_step(x, Bm, 1.0 / n)
        L1 = np.linalg.cholesky(S1)
        mu, L = mu + _mv(L, m1), L @ L1
        # a factor with an exact 0 on its diagonal (a covariance that underflowed) or a non-finite entry stays
        # so in every later step: the end is not a covariance, known now rather than after the remaining
        # steps (a vector of length 1e8 took hours)
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(L)) and np.all(np.diagonal(L, axis1=-2, axis2=-1))):
            raise ValueError(f"the end of the geodesic is not representable in floating point: its covariance "
                             f"underflows or overflows after {k + 1} of its {n} steps; take a shorter step")
        if k < n - 1:
            # velocity in the frame of the point reached (the next step is again of time 1/n)
            x, Bm = _solve_v(L1, dm1), _mT(np.linalg.solve(L1, _mT(np.linalg.solve(L1, dS1))))
            Bm = 0.5 * (Bm + _mT(Bm))
    return mu, L


def _unit_flow(x: np.ndarray, Bm: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """End point (mu, L) with Sigma = L L^T of the geodesic from (0, I) with velocity (x, Bm).

    Steps of Fisher–Rao length <= ``_STEP``; the frame is carried as the factor L (never re-factorised), so
    covariances with eigenvalues far apart keep their accuracy.  A batch (leading axes) is computed in groups
    of equal step counts, so that each velocity takes exactly the steps it takes alone.
    """
    with np.errstate(over="ignore"):
        speed = np.sqrt(np.sum(x * x, axis=-1) + 0.5 * np.sum(Bm * Bm, axis=(-2, -1)))
    if not np.all(np.isfinite(speed)):
        # a length that overflows has no step count (was a raw OverflowError) and no representable end point
        raise ValueError("the tangent vector's Fisher-Rao length overflows (inf): the end of the geodesic is not "
                         "representable; take a shorter step")
    if x.ndim == 1:
        return _flow_in_steps(x, Bm, max(1, math.ceil(_speed(x, Bm) / _STEP)))
    steps = np.maximum(1, np.ceil(speed / _STEP)).astype(int)
    d, lead = x.shape[-1], x.shape[:-1]
    x, Bm, steps = x.reshape(-1, d), Bm.reshape(-1, d, d), steps.reshape(-1)
    mu, L = np.empty_like(x), np.empty_like(Bm)
    for n in np.unique(steps):
        rows = steps == n
        mu[rows], L[rows] = _flow_in_steps(x[rows], Bm[rows], int(n))
    return mu.reshape(lead + (d,)), L.reshape(lead + (d, d))


def _frame(S0: np.ndarray, dmu: np.ndarray, dS: np.ndarray):
    L = np.linalg.cholesky(S0)
    x = _solve_v(L, dmu)
    Bm = _mT(np.linalg.solve(L, _mT(np.linalg.solve(L, dS))))
    return L, x, 0.5 * (Bm + _mT(Bm))


def exp(mu0: np.ndarray, S0: np.ndarray, dmu: np.ndarray, dS: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    r"""End point :math:`(\mu_1, \Sigma_1)` of the geodesic from :math:`(\mu_0, \Sigma_0)` with
    velocity :math:`(\dot\mu, \dot\Sigma)` (``dS`` a symmetric matrix); batched over leading axes
    (``mu0``, ``dmu`` of shape ``(..., d)``, ``S0``, ``dS`` of shape ``(..., d, d)``, broadcasting)."""
    L, x, Bm = _frame(S0, dmu, dS)
    lead, d = np.broadcast_shapes(x.shape[:-1], Bm.shape[:-2]), x.shape[-1]
    mu1, L1 = _unit_flow(np.broadcast_to(x, lead + (d,)), np.broadcast_to(Bm, lead + (d, d)))
    F = L @ L1
    return mu0 + _mv(L, mu1), F @ _mT(F)


# ------------------------------------------------------------------ shooting
class _Unit:
    """The boundary problem from (0, I) to (mu_t, S_t), unknowns v = (x, vech B)."""

    def __init__(self, mu_t: np.ndarray, F_t: np.ndarray, upper: float):
        self.d = d = len(mu_t)
        # the minimal geodesic has speed dist <= upper bound: trial velocities far beyond are dropped
        self.max_speed = 4.0 * upper + 1.0
        self.E = _sym_basis(d)
        # the target covariance is held as a factor F_t F_t^T (never formed: its small eigenvalues would be
        # lost to rounding, and its Cholesky factorisation fail, for ill-conditioned covariances)
        self.mu_t, self.Lt = mu_t, F_t
        n = d + len(self.E)
        # the Eriksen matrix is linear in v: its derivative in each unknown
        dx = np.zeros((n, d))
        dx[np.arange(d), np.arange(d)] = 1.0
        dB = np.concatenate([np.zeros((d, d, d)), self.E])
        self.dA = _eriksen(dx, dB)

    def split(self, v):
        return v[:self.d], np.einsum("a,aij->ij", v[self.d:], self.E)

    def mismatch(self, mu, L):
        """End-point error in the target's frame: zero iff (mu, L L^T) is the target, scale-free."""
        r_mu = np.linalg.solve(self.Lt, mu - self.mu_t)
        M = np.linalg.solve(self.Lt, L)
        R = M @ M.T - np.eye(self.d)
        return np.concatenate([r_mu, _vech(0.5 * (R + R.T))])

    def residual(self, v):
        if _speed(*self.split(v)) > self.max_speed:
            return None
        try:
            with np.errstate(all="ignore"):
                r = self.mismatch(*_unit_flow(*self.split(v)))
        except (np.linalg.LinAlgError, ValueError, OverflowError):
            return None
        return r if np.all(np.isfinite(r)) else None

    def jacobian(self, v):
        x, Bm = self.split(v)
        # the direct closed form loses about exp(2.8 |v|) ulps: good enough for a Newton Jacobian up to |v| ~ 10
        if _speed(x, Bm) > 10.0:
            return self._fd_jacobian(v)
        d = self.d
        lam, V = np.linalg.eigh(_eriksen(x, Bm))
        el = np.exp(lam)
        dl = lam[:, None] - lam[None, :]
        small = np.abs(dl) < 1e-9
        # divided differences of exp (Daleckii–Krein), stable for close eigenvalues
        Phi = np.where(small, np.exp(0.5 * (lam[:, None] + lam[None, :])) * (1 + dl ** 2 / 24),
                       el[None, :] * np.expm1(np.where(small, 1.0, dl)) / np.where(small, 1.0, dl))
        Ex = (V * el) @ V.T
        S = np.linalg.inv(Ex[:d, :d])
        delta = Ex[:d, d]
        M = Phi[None] * (V.T @ self.dA @ V)
        dE = V[:d + 1] @ M @ V[:d + 1].T
        dS = -(S @ dE[:, :d, :d] @ S)
        dmu = dS @ delta + dE[:, :d, d] @ S.T
        # through the target frame: L_t^{-1} dmu and L_t^{-1} dS L_t^{-T}
        Li = np.linalg.inv(self.Lt)
        r_mu = dmu @ Li.T
        R = Li @ dS @ Li.T
        iu = np.triu_indices(d)
        return np.concatenate([r_mu, R[:, iu[0], iu[1]]], axis=1).T

    def _fd_jacobian(self, v):
        r0 = self.residual(v)
        if r0 is None:
            raise np.linalg.LinAlgError("residual undefined")
        cols = []
        for j in range(len(v)):
            h = 1e-7 * (1.0 + abs(v[j]))
            e = np.zeros(len(v))
            e[j] = h
            r1 = self.residual(v + e)
            if r1 is None:
                raise np.linalg.LinAlgError("residual undefined")
            cols.append((r1 - r0) / h)
        return np.array(cols).T

    def newton(self, v, goal_mu, goal_F, tol, budget: Budget):
        """Newton with backtracking towards an intermediate target (mean, covariance factor); returns
        (v, converged)."""
        saved = (self.mu_t, self.Lt)
        self.mu_t, self.Lt = goal_mu, goal_F
        try:
            r = self.residual(v)
            if r is None:
                return v, False
            while True:
                err = np.linalg.norm(r)
                if err <= tol:
                    return v, True
                budget.tick()
                try:
                    step = -np.linalg.solve(self.jacobian(v), r)
                except np.linalg.LinAlgError:
                    return v, False
                t = 1.0
                while True:
                    r_new = self.residual(v + t * step)
                    if r_new is not None and np.linalg.norm(r_new) < (1 - 1e-4 * t) * err:
                        break
                    t *= 0.5
                    if t < 1e-6:
                        # rounding floor of far-apart targets: accept a stall that is already accurate
                        return v, err <= max(1e3 * tol, 1e-9)
                v, r = v + t * step, r_new
        finally:
            self.mu_t, self.Lt = saved


class _Target:
    r"""The second point seen from the first one's frame (:math:`x \mapsto L_0^{-1}(x - \mu_0)`).

    ``mu`` the whitened mean difference, ``F`` the factor :math:`M = L_0^{-1}L_1` of the whitened covariance
    :math:`S_t = MM^T` (lower triangular), ``log_w, U`` its eigendecomposition :math:`S_t = U e^{\log w}U^T` in
    the relatively accurate forms of :mod:`~infogeo.statistical._spaces` (the power series of
    :math:`\log(I + D)`, :math:`D = L_0^{-1}(\Sigma_1 - \Sigma_0)L_0^{-T}`, for nearby covariances; pairs from
    :math:`MM^T` and its inverse otherwise), ``D`` that difference and ``upper`` the certified upper bound.
    """

    def __init__(self, mu0, S0, mu1, S1):
        L, D, near, M, N = _spaces.ratio_parts(S0, S1)
        self.L, self.D, self.F = L, D, M
        self.mu = np.linalg.solve(L, mu1 - mu0)
        if near:
            w, self.U = np.linalg.eigh(D)
            self.log_w = np.log1p(w)
            self.log_S = _spaces.log1p_sym(D)
        else:
            self.log_w, self.U = _spaces.log_eig_far(M, N)
            self.log_S = (self.U * self.log_w) @ self.U.T
            self.log_S = 0.5 * (self.log_S + self.log_S.T)
        self.lower, self.upper = dist_bounds(mu0, S0, mu1, S1)

    def goal_factor(self, s: float) -> np.ndarray:
        """A factor of the intermediate covariance ``S_t^s`` (``F`` itself at ``s = 1``)."""
        return self.F if s == 1.0 else self.U * np.exp(0.5 * s * self.log_w)


def _closed_special_case(t: _Target):
    """(x, B) from (0, I) to the target in closed form when the means or the covariances are equal."""
    d, mu_t = len(t.mu), t.mu
    if np.max(np.abs(t.D)) <= 1e-14:
        m = math.hypot(*mu_t)                                # a norm without overflow of the squares
        if m == 0.0:
            return np.zeros(d), np.zeros((d, d))
        # univariate half-plane geodesic (mu / sqrt2, sigma) from (0, 1) to (m / sqrt2, 1), in the totally
        # geodesic surface {mu in span(u), Sigma = I + (s^2 - 1) u u^T}: a semicircle centred at (c, 0)
        # acosh(1 + m^2/4) = 2 asinh(c): no square of m, which overflows for means 1e155 apart
        u, c = mu_t / m, m / (2 * math.sqrt(2))
        D, R = 2 * math.asinh(c), math.hypot(1.0, c)
        return math.sqrt(2) * D / R * u, 2 * D * (c / R) * np.outer(u, u)
    if not np.any(mu_t):
        return np.zeros(d), t.log_S
    return None


def _unit_log(t: _Target, budget: Budget, tol: float = 1e-13):
    """Velocity (x, B) at (0, I) reaching the target: closed forms, else Newton with continuation."""
    special = _closed_special_case(t)
    if special is not None:
        return special
    prob = _Unit(t.mu, t.F, t.upper)
    mu_t, logS = t.mu, t.log_S
    # continuation path from (0, I): (s mu_t, S_t^s); start of each stage scaled from the previous one
    s_done, v_done, ds = 0.0, None, 1.0
    while s_done < 1.0:
        s = min(1.0, s_done + ds)
        goal = (s * mu_t, t.goal_factor(s))
        guess = np.concatenate([s * mu_t, _vech(s * logS)]) if v_done is None else v_done * (s / s_done)
        v, ok = prob.newton(guess, *goal, tol if s == 1.0 else 1e-8, budget)
        if ok:
            s_done, v_done, ds = s, v, 2 * ds
        else:
            ds *= 0.25
            logger.debug("Gaussian shooting: continuation step reduced to %.3g at %.3g", ds, s_done)
            if ds < 1e-6:
                raise GaussianShootingError(
                    f"geodesic shooting between the two Gaussians did not converge (Mahalanobis mean "
                    f"difference {math.hypot(*mu_t):.3g}, log-eigenvalues of the covariance ratio in "
                    f"[{t.log_w.min():.3g}, {t.log_w.max():.3g}]); continuation stalled at {s_done:.3g}; "
                    "dist_bounds gives certified bounds")
    return prob.split(v_done)


def _start(budget: Optional[Budget], t: _Target) -> Budget:
    return as_budget(budget, DEFAULT_BUDGET).start(
        "full-Gaussian geodesic shooting",
        f"Mahalanobis mean difference {math.hypot(*t.mu):.3g}, covariance ratio eigenvalues "
        f"in [{math.exp(t.log_w.min()):.3g}, {math.exp(t.log_w.max()):.3g}]",
        "a larger Budget(max_iter=..., max_time=...) via budget=, or dist_bounds for certified bounds")


def _checked(t: _Target, x, Bm):
    """The velocity, after checking its length against the certified bounds: a length outside them is a
    shooting that converged to a wrong geodesic in floating point (ill-conditioned covariances)."""
    length = _speed(x, Bm)
    # the bounds are widened for their own rounding; the shooting's length is off by about its accepted
    # residual (down to 1e-13, at most 1e-9 at a rounding floor, see _Unit.newton): a gross error (a wrong
    # geodesic, 12% short at condition 1e10 before) is what this catches
    slack = 1e-6 * t.upper + 1e-9
    if not (t.lower - slack <= length <= t.upper + slack):
        raise ValueError(
            f"the Fisher-Rao distance between these Gaussians cannot be computed accurately in floating point: "
            f"the shooting's geodesic has length {length:.10g}, outside the certified bounds "
            f"[{t.lower:.10g}, {t.upper:.10g}] (covariance ratio eigenvalues in [{math.exp(t.log_w.min()):.3g}, "
            f"{math.exp(t.log_w.max()):.3g}]); dist_bounds gives the certified bounds")
    return x, Bm


def log(mu0: np.ndarray, S0: np.ndarray, mu1: np.ndarray, S1: np.ndarray,
        budget: Optional[Budget] = None) -> Tuple[np.ndarray, np.ndarray]:
    r"""Initial velocity :math:`(\dot\mu, \dot\Sigma)` of the geodesic from :math:`(\mu_0, \Sigma_0)`
    to :math:`(\mu_1, \Sigma_1)`.

    Raises
    ------
    GaussianShootingError
        If the shooting does not converge.
    ValueError
        If the geodesic found has a length outside the certified bounds of :func:`dist_bounds` (a
        covariance ratio too ill-conditioned for the shooting in floating point).
    """
    t = _Target(mu0, S0, mu1, S1)
    x, Bm = _checked(t, *_unit_log(t, _start(budget, t)))
    return t.L @ x, t.L @ Bm @ t.L.T


def dist(mu0: np.ndarray, S0: np.ndarray, mu1: np.ndarray, S1: np.ndarray,
         budget: Optional[Budget] = None) -> float:
    r"""Fisher–Rao distance between :math:`N(\mu_0, \Sigma_0)` and :math:`N(\mu_1, \Sigma_1)`: the length
    :math:`\sqrt{|x|^2 + \tfrac12\|B\|_F^2}` of the shot velocity.  Equal means give
    :math:`\sqrt{\tfrac12\sum_i\log^2\lambda_i(\Sigma_0^{-1}\Sigma_1)}` with relatively accurate logarithms
    (:mod:`~infogeo.statistical._spaces`); raises like :func:`log`."""
    t = _Target(mu0, S0, mu1, S1)
    x, Bm = _unit_log(t, _start(budget, t))
    if not np.any(t.mu):
        return float(math.sqrt(0.5 * float(np.sum(t.log_w ** 2))))
    return _speed(*_checked(t, x, Bm))
