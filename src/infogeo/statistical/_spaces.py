r"""Closed-form geodesics of the model spaces behind the Fisher–Rao metrics.

Plain numpy on single points; the families convert their coordinates to these
spaces and back.

* Sphere of radius :math:`r` in :math:`\mathbb{R}^k` (categorical through
  :math:`z = 2\sqrt{p}`).
* Hyperbolic plane (Poincaré half-plane :math:`(x, y),\ y > 0`, metric
  :math:`(dx^2 + dy^2)/y^2`), computed on the hyperboloid model where exp and log
  are the Minkowski analogues of the sphere's.
* Symmetric positive-definite matrices with the affine-invariant metric
  :math:`\mathrm{tr}(\Sigma^{-1}d\Sigma\,\Sigma^{-1}d\Sigma)`.
"""
from __future__ import annotations

import numpy as np

# --------------------------------------------------------------------- sphere


def sphere_exp(u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exp on the unit sphere: :math:`\\cos|w|\\,u + \\sin|w|\\,w/|w|` (``w`` tangent at ``u``)."""
    n = np.linalg.norm(w)
    if n < 1e-300:
        return u.copy()
    return np.cos(n) * u + np.sin(n) * (w / n)


def sphere_log(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Log on the unit sphere (angle times the unit tangent towards ``v``)."""
    c = float(np.clip(u @ v, -1.0, 1.0))
    p = v - c * u
    n = np.linalg.norm(p)
    if n < 1e-300:
        return np.zeros_like(u)
    # atan2 keeps full accuracy for nearby points, where arccos(c) does not
    return np.arctan2(n, c) * p / n


def sphere_dist(u: np.ndarray, v: np.ndarray) -> float:
    c = float(u @ v)
    return float(np.arctan2(np.linalg.norm(v - c * u), c))


# ------------------------------------------------------------------ hyperbolic
def _mink(a: np.ndarray, b: np.ndarray) -> float:
    return float(-a[0] * b[0] + a[1] * b[1] + a[2] * b[2])


def _to_hyperboloid(x: float, y: float) -> np.ndarray:
    r2 = x * x + y * y
    return np.array([(r2 + 1.0) / (2 * y), (r2 - 1.0) / (2 * y), x / y])


def _hyperboloid_jacobian(x: float, y: float) -> np.ndarray:
    """d(hyperboloid point)/d(x, y), shape (3, 2)."""
    return np.array([[x / y, 0.5 - (x * x + 1.0) / (2 * y * y)],
                     [x / y, 0.5 - (x * x - 1.0) / (2 * y * y)],
                     [1.0 / y, -x / (y * y)]])


def _from_hyperboloid(X: np.ndarray) -> tuple[float, float]:
    y = 1.0 / (X[0] - X[1])
    return float(X[2] * y), float(y)


def halfplane_exp(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Exp in the half-plane ``x = (x, y)``, ``v`` in half-plane coordinates."""
    X = _to_hyperboloid(*x)
    V = _hyperboloid_jacobian(*x) @ v
    n = np.sqrt(max(_mink(V, V), 0.0))
    if n < 1e-300:
        return np.array(x, dtype=float)
    Y = np.cosh(n) * X + np.sinh(n) * V / n
    return np.array(_from_hyperboloid(Y))


def halfplane_dist(x: np.ndarray, y: np.ndarray) -> float:
    r""":math:`\operatorname{arccosh}\big(1 + |x - y|^2 / (2 y_1 y_2)\big)` (stable form)."""
    d2 = (x[0] - y[0]) ** 2 + (x[1] - y[1]) ** 2
    # arccosh(1 + a) = 2 arcsinh(sqrt(a / 2)) loses nothing for nearby points
    return float(2.0 * np.arcsinh(np.sqrt(d2 / (4.0 * x[1] * y[1]))))


def halfplane_log(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    X, Y = _to_hyperboloid(*x), _to_hyperboloid(*y)
    d = halfplane_dist(x, y)
    P = Y + _mink(X, Y) * X            # component of Y tangent at X
    n = np.sqrt(max(_mink(P, P), 0.0))
    if n < 1e-300:
        return np.zeros(2)
    V = d * P / n
    J = _hyperboloid_jacobian(*x)
    # V lies in the image of J (the tangent plane): solve the 3x2 system exactly
    return np.linalg.lstsq(J, V, rcond=None)[0]


# ------------------------------------------------------------------------ SPD
def _sym_fn(S: np.ndarray, f) -> np.ndarray:
    w, U = np.linalg.eigh(S)
    return (U * f(w)) @ U.T


def spd_check_sqrt(S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``S^{1/2}`` and ``S^{-1/2}``."""
    w, U = np.linalg.eigh(S)
    return (U * np.sqrt(w)) @ U.T, (U / np.sqrt(w)) @ U.T


def spd_exp(S: np.ndarray, V: np.ndarray) -> np.ndarray:
    r""":math:`S^{1/2}\exp(S^{-1/2} V S^{-1/2}) S^{1/2}`."""
    R, Ri = spd_check_sqrt(S)
    out = R @ _sym_fn(Ri @ V @ Ri, np.exp) @ R
    return 0.5 * (out + out.T)


def spd_log(S: np.ndarray, T: np.ndarray) -> np.ndarray:
    r""":math:`S^{1/2}\log(S^{-1/2} T S^{-1/2}) S^{1/2}`."""
    R, Ri = spd_check_sqrt(S)
    out = R @ _sym_fn(Ri @ T @ Ri, np.log) @ R
    return 0.5 * (out + out.T)


def spd_dist(S: np.ndarray, T: np.ndarray) -> float:
    r"""Affine-invariant distance :math:`\sqrt{\sum_i \log^2\lambda_i(S^{-1}T)}`."""
    _, Ri = spd_check_sqrt(S)
    lam = np.linalg.eigvalsh(Ri @ T @ Ri)
    return float(np.sqrt(np.sum(np.log(lam) ** 2)))
