r"""Fisher–Rao geodesics of the full-covariance Gaussian family (Eriksen 1987; Skovgaard 1984).

The geodesic equations of :math:`N(\mu, \Sigma)` with the Fisher metric are
:math:`\mu'' = \Sigma'\Sigma^{-1}\mu'`,
:math:`\Sigma'' = \Sigma'\Sigma^{-1}\Sigma' - \mu'\mu'^T`.  Eriksen (1987)
solves them in closed form from the start :math:`(0, I)` with velocity
:math:`(\delta, B)`:

.. math:: e^{tA},\quad A = \begin{pmatrix} -B & \delta & 0\\ \delta^T & 0 & -\delta^T\\
          0 & -\delta & B\end{pmatrix},\qquad
          \Sigma(t) = \Delta(t)^{-1},\ \mu(t) = \Delta(t)^{-1}\delta(t),

with :math:`\Delta, \delta` the top-left block and top-middle column of
:math:`e^{tA}`.  A general start :math:`(\mu_0, \Sigma_0 = LL^T)` is reduced to
:math:`(0, I)` by the affine map :math:`x \mapsto L^{-1}(x - \mu_0)`, an
isometry.  ``log`` solves the boundary problem by Newton's method with the
exact Jacobian (Fréchet derivative of the matrix exponential), with
continuation when the points are far apart; ``dist`` is the length of that
geodesic, :math:`\sqrt{|\delta|^2 + \tfrac12\|B\|_F^2}`.

Everything here is plain numpy on one pair of points given as
:math:`(\mu, \Sigma)`; the family converts its coordinates.
"""
from __future__ import annotations

import logging
from typing import Tuple

import numpy as np
from scipy.linalg import expm, expm_frechet

logger = logging.getLogger(__name__)

__all__ = ["GaussianShootingError", "exp", "log", "dist"]


class GaussianShootingError(RuntimeError):
    """Newton shooting for the full-Gaussian geodesic boundary problem did not converge."""


def _sym_basis(d: int) -> np.ndarray:
    """Symmetric basis matrices of the upper-triangle (row-major) coordinates, shape ``(m, d, d)``."""
    iu = np.triu_indices(d)
    E = np.zeros((len(iu[0]), d, d))
    for a, (i, j) in enumerate(zip(*iu)):
        E[a, i, j] = E[a, j, i] = 1.0
    return E


def _sym(v: np.ndarray, E: np.ndarray) -> np.ndarray:
    return np.einsum("a,aij->ij", v, E)


def _vech(M: np.ndarray) -> np.ndarray:
    return M[np.triu_indices(M.shape[0])]


def _eriksen(x: np.ndarray, Bm: np.ndarray) -> np.ndarray:
    d = len(x)
    A = np.zeros((2 * d + 1, 2 * d + 1))
    A[:d, :d], A[:d, d], A[d, :d] = -Bm, x, x
    A[d, d + 1:], A[d + 1:, d], A[d + 1:, d + 1:] = -x, -x, Bm
    return A


def _unit_exp(x: np.ndarray, Bm: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """End point (mu, Sigma) of the geodesic from (0, I) with velocity (x, Bm)."""
    d = len(x)
    E = expm(_eriksen(x, Bm))
    S = np.linalg.inv(E[:d, :d])
    S = 0.5 * (S + S.T)
    return S @ E[:d, d], S


def exp(mu0: np.ndarray, S0: np.ndarray, dmu: np.ndarray, dS: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    r"""End point :math:`(\mu_1, \Sigma_1)` of the geodesic from :math:`(\mu_0, \Sigma_0)` with
    velocity :math:`(\dot\mu, \dot\Sigma)` (``dS`` a symmetric matrix)."""
    L = np.linalg.cholesky(S0)
    x = np.linalg.solve(L, dmu)
    Bm = np.linalg.solve(L, np.linalg.solve(L, dS).T).T
    mu1, S1 = _unit_exp(x, 0.5 * (Bm + Bm.T))
    S = L @ S1 @ L.T
    return mu0 + L @ mu1, 0.5 * (S + S.T)


def _unit_log(mu_t: np.ndarray, S_t: np.ndarray, tol: float = 1e-13,
              max_iter: int = 50) -> Tuple[np.ndarray, np.ndarray]:
    """Velocity (x, B) at (0, I) reaching (mu_t, S_t): Newton with continuation."""
    d = len(mu_t)
    E = _sym_basis(d)
    w, U = np.linalg.eigh(S_t)
    logS = (U * np.log(w)) @ U.T
    target = (mu_t, S_t)
    guess = np.concatenate([mu_t, _vech(logS)])
    for stages in (1, 2, 4, 8, 16, 32):
        v = guess.copy() if stages == 1 else np.concatenate([mu_t / stages, _vech(logS / stages)])
        ok = True
        for k in range(1, stages + 1):
            s = k / stages
            tgt = target if k == stages else (s * mu_t, (U * w ** s) @ U.T)
            v, ok = _newton_unit(v, *tgt, E, tol, max_iter)
            if not ok:
                break
        if ok:
            return v[:d], _sym(v[d:], E)
        logger.debug("Gaussian shooting: no convergence with %d continuation stages", stages)
    raise GaussianShootingError("geodesic shooting between the two Gaussians did not converge")


def _newton_unit(v, mu_t, S_t, E, tol, max_iter):
    d = len(mu_t)
    goal = np.concatenate([mu_t, _vech(S_t)])
    scale = 1.0 + np.linalg.norm(goal)

    def residual(v_):
        x, Bm = v_[:d], _sym(v_[d:], E)
        try:
            with np.errstate(all="ignore"):
                mu, S = _unit_exp(x, Bm)
        except (np.linalg.LinAlgError, ValueError, OverflowError):
            return None
        r = np.concatenate([mu, _vech(S)]) - goal
        return r if np.all(np.isfinite(r)) else None

    r = residual(v)
    if r is None:
        return v, False
    for _ in range(max_iter):
        err = np.linalg.norm(r)
        if err <= tol * scale:
            return v, True
        step = -np.linalg.solve(_unit_jacobian(v, E), r)
        t = 1.0
        while t > 1e-6:
            r_new = residual(v + t * step)
            if r_new is not None and np.linalg.norm(r_new) < err:
                break
            t *= 0.5
        else:
            return v, False
        v, r = v + t * step, r_new
    return v, np.linalg.norm(r) <= 1e3 * tol * scale


def _unit_jacobian(v, E):
    """Exact d(mu(1), vech Sigma(1)) / d(x, vech B) through Fréchet derivatives of expm."""
    d = E.shape[1]
    x, Bm = v[:d], _sym(v[d:], E)
    A = _eriksen(x, Bm)
    Ex = expm(A)
    S = np.linalg.inv(Ex[:d, :d])
    delta = Ex[:d, d]
    cols = []
    n = len(v)
    for j in range(n):
        e = np.zeros(n)
        e[j] = 1.0
        dA = _eriksen(e[:d], E[j - d] if j >= d else np.zeros((d, d)))
        dE = expm_frechet(A, dA, compute_expm=False)
        dS = -S @ dE[:d, :d] @ S
        dmu = dS @ delta + S @ dE[:d, d]
        cols.append(np.concatenate([dmu, _vech(dS)]))
    return np.array(cols).T


def _unit_problem(mu0, S0, mu1, S1):
    L = np.linalg.cholesky(S0)
    mu_t = np.linalg.solve(L, mu1 - mu0)
    S_t = np.linalg.solve(L, np.linalg.solve(L, S1).T).T
    return L, mu_t, 0.5 * (S_t + S_t.T)


def log(mu0: np.ndarray, S0: np.ndarray, mu1: np.ndarray, S1: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    r"""Initial velocity :math:`(\dot\mu, \dot\Sigma)` of the geodesic from :math:`(\mu_0, \Sigma_0)`
    to :math:`(\mu_1, \Sigma_1)`."""
    L, mu_t, S_t = _unit_problem(mu0, S0, mu1, S1)
    x, Bm = _unit_log(mu_t, S_t)
    return L @ x, L @ Bm @ L.T


def dist(mu0: np.ndarray, S0: np.ndarray, mu1: np.ndarray, S1: np.ndarray) -> float:
    """Fisher–Rao distance between :math:`N(\\mu_0, \\Sigma_0)` and :math:`N(\\mu_1, \\Sigma_1)`."""
    _, mu_t, S_t = _unit_problem(mu0, S0, mu1, S1)
    x, Bm = _unit_log(mu_t, S_t)
    return float(np.sqrt(x @ x + 0.5 * np.sum(Bm * Bm)))
