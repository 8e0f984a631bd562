"""Independent references for the statistical families, written from the textbook densities in plain
numpy/scipy (no infogeo code): each family's natural parameters, the distribution they name, the KL
divergence in closed form from the literature, and every chart as a map to or from the natural chart.

A chart is ``("to_natural", f)`` (``x -> theta``) or ``("from_natural", g)`` (``theta -> x``, for mean
charts whose inverse has no closed form); :func:`fisher_reference` turns either into the Fisher matrix of
that chart as the Hessian of ``y -> KL(p_x || p_y)`` at ``y = x`` by central finite differences.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Tuple

import numpy as np
from scipy.special import digamma, gammaln, i0e, i1e, multigammaln


def vech(S):
    return S[np.triu_indices(S.shape[-1])]


def unvech(v, d):
    S = np.zeros((d, d))
    S[np.triu_indices(d)] = v
    return S + np.triu(S, 1).T


def gauss_kl(m1, S1, m2, S2):
    """KL(N(m1, S1) || N(m2, S2)) (textbook formula)."""
    d = len(m1)
    S2i = np.linalg.inv(S2)
    dm = m2 - m1
    return 0.5 * (np.trace(S2i @ S1) + dm @ S2i @ dm - d + np.linalg.slogdet(S2)[1] - np.linalg.slogdet(S1)[1])


@dataclass
class Reference:
    """``params(theta)`` names the distribution of natural parameters ``theta``; ``kl(P, Q)`` of two of them."""

    params: Callable
    kl: Callable
    charts: Dict[str, Tuple[str, Callable]] = field(default_factory=dict)


# --------------------------------------------------------------------------- Gaussians
def _full(d):
    w = np.where(np.triu_indices(d)[0] == np.triu_indices(d)[1], 2.0, 1.0)

    def params(th):        # theta = (Lambda mu, c), c_ii = -Lambda_ii / 2, c_ij = -Lambda_ij
        L = unvech(-th[d:] * w, d)
        S = np.linalg.inv(L)
        return S @ th[:d], S

    def nat(mu, S):
        L = np.linalg.inv(S)
        return np.concatenate([L @ mu, -vech(L) / w])

    def std(x):
        return nat(x[:d], unvech(x[d:], d))

    def mean(th):
        mu, S = params(th)
        return np.concatenate([mu, vech(S + np.outer(mu, mu))])
    return Reference(params, lambda P, Q: gauss_kl(*P, *Q),
                     {"standard": ("to_natural", std), "natural": ("to_natural", lambda x: x),
                      "mean": ("from_natural", mean)})


def _diagonal(d):
    def params(th):
        var = -0.5 / th[d:]
        return th[:d] * var, np.diag(var)

    def std(x):
        return np.concatenate([x[:d] / x[d:], -0.5 / x[d:]])
    return Reference(params, lambda P, Q: gauss_kl(*P, *Q),
                     {"standard": ("to_natural", std), "natural": ("to_natural", lambda x: x),
                      "mean": ("to_natural", lambda e: std(np.concatenate([e[:d], e[d:] - e[:d] ** 2]))),
                      "mean_std": ("to_natural", lambda u: std(np.concatenate([u[:d], u[d:] ** 2])))})


def _fixed(S0):
    L0 = np.linalg.inv(S0)
    to_nat = ("to_natural", lambda mu: L0 @ mu)
    return Reference(lambda th: (S0 @ th, S0), lambda P, Q: gauss_kl(*P, *Q),
                     {"standard": to_nat, "mean": to_nat, "natural": ("to_natural", lambda x: x)})


def _zero_mean(d):
    w = np.where(np.triu_indices(d)[0] == np.triu_indices(d)[1], 2.0, 1.0)
    to_nat = ("to_natural", lambda s: -vech(np.linalg.inv(unvech(s, d))) / w)
    return Reference(lambda th: (np.zeros(d), np.linalg.inv(unvech(-th * w, d))), lambda P, Q: gauss_kl(*P, *Q),
                     {"standard": to_nat, "mean": to_nat, "natural": ("to_natural", lambda x: x)})


# --------------------------------------------------------------------------- finite families
def _categorical_kl(p, q):
    return float(np.sum(p * np.log(p / q)))


def _categorical(k, draws=1):
    def params(th):                       # all k probabilities, class k-1 the reference
        z = np.exp(np.concatenate([th, [0.0]]))
        return z / z.sum()

    to_nat = ("to_natural", lambda p: np.log(p) - np.log(1.0 - p.sum()))
    mean = ("from_natural", lambda th: draws * params(th)[:-1])
    return Reference(params, lambda P, Q: draws * _categorical_kl(P, Q),
                     {"standard": to_nat, "mean": mean if draws > 1 else to_nat,
                      "natural": ("to_natural", lambda x: x)})


def _bernoulli():
    to_nat = ("to_natural", lambda p: np.log(p / (1.0 - p)))
    return Reference(lambda th: np.array([1.0, np.exp(-th[0])]) / (1.0 + np.exp(-th[0])),
                     lambda P, Q: _categorical_kl(P, Q),
                     {"standard": to_nat, "mean": to_nat, "natural": ("to_natural", lambda x: x)})


def _independence():
    def params(th):                       # P(x_i = +1) = e^th / (e^th + e^-th)
        return 1.0 / (1.0 + np.exp(-2.0 * th))

    def kl(a, b):
        return float(np.sum(a * np.log(a / b) + (1 - a) * np.log((1 - a) / (1 - b))))
    return Reference(params, kl, {"standard": ("to_natural", lambda m: 0.5 * np.log(m / (1 - m))),
                                  "mean": ("to_natural", lambda e: np.arctanh(e)),
                                  "natural": ("to_natural", lambda x: x)})


# --------------------------------------------------------------------------- contributed families
def _poisson():
    return Reference(lambda th: np.exp(th[0]), lambda a, b: a * np.log(a / b) - a + b,
                     {"standard": ("to_natural", np.log), "mean": ("to_natural", np.log),
                      "natural": ("to_natural", lambda x: x)})


def _exponential():
    return Reference(lambda th: -th[0], lambda a, b: np.log(a / b) + b / a - 1.0,
                     {"standard": ("to_natural", lambda lam: -lam), "mean": ("to_natural", lambda m: -1.0 / m),
                      "natural": ("to_natural", lambda x: x)})


def _dirichlet_kl(a, b):
    """KL(Dir(a) || Dir(b)); Beta is the case of two entries."""
    a0, b0 = a.sum(), b.sum()
    return float(gammaln(a0) - gammaln(a).sum() - gammaln(b0) + gammaln(b).sum()
                 + np.sum((a - b) * (digamma(a) - digamma(a0))))


def _dirichlet():
    ident = ("to_natural", lambda x: x)
    return Reference(lambda th: th, _dirichlet_kl,
                     {"standard": ident, "natural": ident,
                      "mean": ("from_natural", lambda a: digamma(a) - digamma(a.sum()))})


def _gamma():
    def kl(P, Q):                          # shape k, rate r
        (k1, r1), (k2, r2) = P, Q
        return float((k1 - k2) * digamma(k1) - gammaln(k1) + gammaln(k2) + k2 * (np.log(r1) - np.log(r2))
                     + k1 * (r2 - r1) / r1)
    return Reference(lambda th: (th[0], -th[1]), kl,
                     {"standard": ("to_natural", lambda s: np.array([s[0], -s[1]])),
                      "natural": ("to_natural", lambda x: x),
                      "mean": ("from_natural", lambda th: np.array([digamma(th[0]) - np.log(-th[1]),
                                                                   -th[0] / th[1]]))})


def _von_mises():
    def params(th):
        return np.arctan2(th[1], th[0]), np.hypot(th[0], th[1])

    def kl(P, Q):
        (m1, k1), (m2, k2) = P, Q
        a1 = i1e(k1) / i0e(k1)
        return float(a1 * (k1 - k2 * np.cos(m1 - m2)) + (np.log(i0e(k2)) + k2) - (np.log(i0e(k1)) + k1))

    def mean(th):
        m, k = params(th)
        return i1e(k) / i0e(k) * np.array([np.cos(m), np.sin(m)])
    return Reference(params, kl, {"standard": ("to_natural", lambda s: s[1] * np.array([np.cos(s[0]), np.sin(s[0])])),
                                  "natural": ("to_natural", lambda x: x), "mean": ("from_natural", mean)})


def _wishart(p):
    def params(th):                        # (nu, V)
        return 2.0 * th[0] + p + 1, np.linalg.inv(-2.0 * unvech(th[1:], p))

    def kl(P, Q):
        (n1, V1), (n2, V2) = P, Q
        ld1, ld2 = np.linalg.slogdet(V1)[1], np.linalg.slogdet(V2)[1]
        mdg = sum(digamma((n1 - i) / 2.0) for i in range(p))     # multivariate digamma at n1 / 2
        return float(0.5 * n2 * (ld2 - ld1) + 0.5 * n1 * (np.trace(np.linalg.solve(V2, V1)) - p)
                     + multigammaln(n2 / 2.0, p) - multigammaln(n1 / 2.0, p) + 0.5 * (n1 - n2) * mdg)

    def std(s):
        return np.concatenate([[(s[0] - p - 1) / 2.0], vech(-0.5 * np.linalg.inv(unvech(s[1:], p)))])

    def mean(th):
        nu, V = params(th)
        off = np.where(np.triu_indices(p)[0] == np.triu_indices(p)[1], 1.0, 2.0)
        elog = sum(digamma((nu - i) / 2.0) for i in range(p)) + p * np.log(2.0) + np.linalg.slogdet(V)[1]
        return np.concatenate([[elog], vech(nu * V) * off])
    return Reference(params, kl, {"standard": ("to_natural", std), "natural": ("to_natural", lambda x: x),
                                  "mean": ("from_natural", mean)})


REFERENCES = {
    "gauss1": lambda: _diagonal(1), "diag2": lambda: _diagonal(2), "gauss2": lambda: _full(2),
    "gauss3": lambda: _full(3), "fixed2": lambda: _fixed(np.array([[1.5, 0.4], [0.4, 0.8]])),
    "zeromean2": lambda: _zero_mean(2), "bernoulli": _bernoulli, "categorical3": lambda: _categorical(3),
    "independence2": _independence, "poisson": _poisson, "exponential": _exponential,
    "beta": _dirichlet, "dirichlet": _dirichlet, "gamma": _gamma, "von_mises": _von_mises,
    "wishart": lambda: _wishart(2), "multinomial": lambda: _categorical(3, draws=10),
}


# --------------------------------------------------------------------------- Fisher by finite differences
def _jacobian(f, x, h=1e-6):
    x = np.asarray(x, dtype=float)
    cols = []
    for i in range(len(x)):
        e = np.zeros(len(x))
        e[i] = h * max(1.0, abs(x[i]))
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * e[i]))
    return np.array(cols).T


def _hessian_second_argument(kl, x, h):
    """grad^2_y kl(x, y) at y = x by central differences (kl(x, x) = 0)."""
    n = len(x)
    H = np.zeros((n, n))
    step = h * np.maximum(1.0, np.abs(x))
    for i in range(n):
        for j in range(i, n):
            ei, ej = np.eye(n)[i] * step[i], np.eye(n)[j] * step[j]
            val = (kl(x, x + ei + ej) - kl(x, x + ei - ej) - kl(x, x - ei + ej) + kl(x, x - ei - ej))
            H[i, j] = H[j, i] = val / (4 * step[i] * step[j])
    return H


def fisher_reference(ref: Reference, chart: str, x, theta, h: float = 1e-4):
    """The Fisher matrix at the point with coordinates ``x`` in ``chart`` and natural parameters ``theta``:
    the Hessian of ``y -> KL(p_x || p_y)`` at ``y = x``.

    In a chart given by ``theta -> x`` (no closed-form inverse) the Hessian is taken in the natural chart and
    carried over by the inverse of the finite-difference Jacobian ``dx/dtheta``.
    """
    kind, f = ref.charts[chart]
    x, theta = np.asarray(x, dtype=float), np.asarray(theta, dtype=float)
    if kind == "to_natural":
        return _hessian_second_argument(lambda a, b: ref.kl(ref.params(f(a)), ref.params(f(b))), x, h)
    G = _hessian_second_argument(lambda a, b: ref.kl(ref.params(a), ref.params(b)), theta, h)
    Ji = np.linalg.inv(_jacobian(f, theta))            # d theta / d x
    return Ji.T @ G @ Ji


def coordinates_in(ref: Reference, chart: str, theta):
    """The coordinates in ``chart`` of natural parameters ``theta``, or ``None`` where only x -> theta is known."""
    kind, f = ref.charts[chart]
    return f(np.asarray(theta, dtype=float)) if kind == "from_natural" else None
