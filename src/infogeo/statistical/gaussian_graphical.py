r"""Gaussian graphical models: Gaussians with zeros fixed in the precision matrix (Dempster 1972).

Fixing :math:`\Lambda_{ij} = 0` for the pairs :math:`(i, j)` outside a symmetric
pattern :math:`E` (with a free diagonal) sets the matching natural parameters
of the full Gaussian to zero.  What is left is an exponential family in its
own right, of dimension :math:`d + |E|` (:math:`|E|` the free entries of the
upper triangle, diagonal included), with

* sufficient statistics :math:`t(x) = (x, (x_ix_j)_{(i, j)\in E})`;
* natural parameters :math:`\theta = (h, c_E)`, :math:`h = \Lambda\mu`,
  :math:`c_{ii} = -\tfrac12\Lambda_{ii}`, :math:`c_{ij} = -\Lambda_{ij}`, the full
  family's coordinates restricted to :math:`E`;
* mean parameters :math:`\eta = (\mu, (\Sigma + \mu\mu^T)_E)`, the full
  family's restricted to :math:`E`;
* Fisher :math:`\nabla^2\psi(\theta)` = the full family's natural-chart Fisher
  restricted to the free coordinates (a sub-family of an exponential family
  cut out by fixing natural parameters is flat in :math:`\theta`), and KL the
  full Gaussian KL of the two distributions.

Zero precision entries are conditional independences:
:math:`\Lambda_{ij} = 0 \iff x_i \perp x_j \mid x_{\text{rest}}` (Lauritzen 1996, Ch. 5).

**Charts.**  ``"standard"``: :math:`(\mu, \Lambda_E)` (the mean and the free
precision entries, upper triangle row by row), explicit to and from the
natural chart and so differentiable on either backend; ``"natural"``;
``"mean"``: its inverse map is the covariance-selection problem.

**Covariance selection.**  Given :math:`S_E` (second moments on the free
entries), the point with :math:`\Sigma_E = S_E` maximises
:math:`\log|\Lambda| - \mathrm{tr}(S\Lambda)` over precisions with the
pattern (Dempster 1972): it is the maximum-likelihood estimate of the model,
and also the maximum-entropy completion of :math:`S_E`.
:func:`covariance_selection` solves it by damped Newton on the free natural
coordinates (the negative log-likelihood is self-concordant, so the step
:math:`1/(1 + \delta)` with :math:`\delta` the Newton decrement converges
from any start; Nesterov & Nemirovskii 1994), after scaling :math:`S` to unit
diagonal.  Its Jacobian is the inverse Fisher matrix (Legendre duality), which
makes the mean chart differentiable by autograd.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from .. import backend as B
from ..budget import Budget, as_budget
from ..geometry import points as _points
from ..geometry.charts import Chart, per_point
from ._inputs import numpy_only, observations_of
from ._vech import _check_spd, _cov_of_t, _outer
from .gaussian import FullGaussian, Gaussian, _mv

__all__ = ["GaussianGraphical", "covariance_selection", "DEFAULT_BUDGET"]

#: budget of one covariance selection (Newton iterations and wall time)
DEFAULT_BUDGET = Budget(max_iter=200, max_time=30.0)


def _as_pattern(pattern: Any, d: int) -> np.ndarray:
    """A validated copy of the boolean precision pattern: shape (d, d), symmetric, diagonal free."""
    try:
        P = np.array(B.to_numpy(pattern) if B.is_torch(pattern) else pattern)
    except (TypeError, ValueError):
        raise TypeError(f"precision_pattern must be a boolean ({d}, {d}) array, got {type(pattern).__name__}") from None
    if P.dtype.kind not in "biu" or (P.dtype.kind != "b" and not np.isin(P, (0, 1)).all()):
        raise TypeError(f"precision_pattern must be a boolean ({d}, {d}) array (True: free entry, False: fixed "
                        f"zero of the precision matrix), got dtype {P.dtype}")
    if P.shape != (d, d):
        raise ValueError(f"precision_pattern must have shape ({d}, {d}), got {P.shape}")
    P = P.astype(bool)
    if not np.array_equal(P, P.T):
        bad = np.argwhere(P != P.T)[0]
        raise ValueError(f"precision_pattern must be symmetric (a precision matrix is); entry {tuple(bad)} is "
                         f"{bool(P[tuple(bad)])} but its transpose is {bool(P[tuple(bad[::-1])])}")
    if not P.diagonal().all():
        raise ValueError(f"the diagonal of precision_pattern must be free (True): a zero diagonal precision "
                         f"entry is not a Gaussian; entries {np.flatnonzero(~P.diagonal()).tolist()} are False")
    P.setflags(write=False)
    return P


class _Free:
    """Coordinates of the free upper-triangle entries of symmetric matrices with a given pattern."""

    def __init__(self, pattern: np.ndarray):
        d = pattern.shape[0]
        iu = np.triu_indices(d)
        keep = pattern[iu]
        self.d = d
        self.i, self.j = iu[0][keep], iu[1][keep]
        self.m = len(self.i)
        #: positions of the free entries in the full family's vech coordinates
        self.vech_index = np.flatnonzero(keep)
        E = np.zeros((self.m, d, d))
        E[np.arange(self.m), self.i, self.j] = 1.0
        E[np.arange(self.m), self.j, self.i] = 1.0
        self.E = E
        self.w = np.where(self.i == self.j, 2.0, 1.0)

    def sym(self, v):
        return B.einsum("...a,aij->...ij", v, B.array(self.E, like=v))

    def take(self, M):
        return M[..., self.i, self.j]

    def precision_from_natural(self, c):
        return -self.sym(c * B.array(self.w, like=c))

    def natural_from_precision(self, L):
        return -self.take(L) / B.array(self.w, like=L)


def _hessian(Sigma, free: _Free):
    r""":math:`\mathrm{Cov}[(x_ix_j)_E]` at :math:`N(0, \Sigma)` (Isserlis): the Hessian of the zero-mean log-partition."""
    i, j = free.i[:, None], free.j[:, None]
    ir, jr = free.i[None, :], free.j[None, :]
    return Sigma[..., i, ir] * Sigma[..., j, jr] + Sigma[..., i, jr] * Sigma[..., j, ir]


def covariance_selection(S: Any, pattern: Any, *, tol: float = 1e-12, budget: Optional[Budget] = None,
                         start: Any = None, return_info: bool = False):
    r"""The precision :math:`\Lambda` with zeros off ``pattern`` whose inverse matches ``S`` on the pattern.

    Solves Dempster's (1972) covariance-selection problem
    :math:`\max_\Lambda\ \log|\Lambda| - \mathrm{tr}(S\Lambda)` over SPD :math:`\Lambda` with
    :math:`\Lambda_{ij} = 0` off the pattern.  At the optimum :math:`(\Lambda^{-1})_{ij} = S_{ij}`
    on the pattern: the Gaussian maximum-likelihood estimate for a sample covariance ``S`` and
    the maximum-entropy completion of the entries ``S`` gives on the pattern (entries off the
    pattern are not read).

    Damped Newton on the free natural coordinates :math:`c_E`, with the self-concordant step
    :math:`1/(1 + \delta)` while the Newton decrement :math:`\delta` exceeds 1/4 and full steps
    after; ``S`` is first scaled to unit diagonal (the pattern is invariant under that scaling).

    Parameters
    ----------
    S : (d, d) array
        Symmetric on the pattern, positive diagonal.
    pattern : (d, d) boolean array
        Symmetric, diagonal True.
    tol : float
        Stop when the largest mismatch :math:`|(\Lambda^{-1})_{ij} - S_{ij}|/\sqrt{S_{ii}S_{jj}}` on the
        pattern is below ``tol`` (relative, scale-free).
    budget : Budget, optional
        Newton iterations and wall time (default :data:`DEFAULT_BUDGET`).
    start : (d, d) array, optional
        A precision with the pattern to start from (a warm start, e.g. the previous solution when
        ``S`` changes a little); ignored unless symmetric positive definite.  Default: the diagonal.
    return_info : bool
        Also return ``{"nit": ..., "residual": ...}``.

    Returns
    -------
    Lambda : (d, d) array
        Symmetric positive definite, exactly zero off the pattern.

    Raises
    ------
    ValueError
        When ``S`` has no positive-definite completion on the pattern (the likelihood is unbounded).
    BudgetExceededError
        When the budget runs out.
    """
    S = np.asarray(B.to_numpy(S), dtype=float)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"S must be a square (d, d) matrix, got shape {S.shape}")
    d = S.shape[0]
    P = _as_pattern(pattern, d)
    if not np.all(np.isfinite(S[P])):
        raise ValueError("S contains NaN or inf on the pattern")
    if not np.allclose(S[P], S.T[P], rtol=1e-10, atol=0):
        raise ValueError("S must be symmetric on the pattern")
    diag = np.diag(S).copy()
    if not np.all(diag > 0):
        raise ValueError(f"S must have a positive diagonal, got {diag.tolist()}")
    free = _Free(P)
    scale = 1.0 / np.sqrt(diag)
    R = S * scale[:, None] * scale[None, :]   # unit diagonal
    r = free.take(0.5 * (R + R.T))
    if np.any(np.abs(r[free.i != free.j]) >= 1.0):
        raise ValueError("S has no positive-definite completion on the pattern: an entry on a free edge has "
                         "|S_ij| >= sqrt(S_ii S_jj)")
    b = as_budget(budget, DEFAULT_BUDGET).start(
        "covariance selection (damped Newton)", f"d = {d}, {free.m} free entries",
        "a larger Budget(max_iter=..., max_time=...) via budget=, or a better-conditioned S")
    c = free.natural_from_precision(np.eye(d))
    if start is not None:
        L0 = np.asarray(B.to_numpy(start), dtype=float)
        if L0.shape == (d, d) and np.all(np.isfinite(L0)):
            L0 = L0 / scale[:, None] / scale[None, :]      # the precision of the unit-diagonal problem
            try:
                np.linalg.cholesky(free.precision_from_natural(free.natural_from_precision(L0)))
                c = free.natural_from_precision(L0)
            except np.linalg.LinAlgError:
                pass
    nit = 0
    while True:
        L = free.precision_from_natural(c)
        Sigma = np.linalg.inv(L)
        g = free.take(Sigma) - r           # gradient of psi(c) - c.r (moments minus targets)
        resid = float(np.max(np.abs(g)))
        if resid <= tol:
            break
        H = _hessian(Sigma, free)
        try:
            step = -np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            raise ValueError("covariance selection: singular Hessian (S has no positive-definite completion "
                             "on the pattern)") from None
        # Newton decrement of the self-concordant 2 (psi(c) - c.r) = -log|Lambda| - tr(R Lambda)
        delta = math.sqrt(max(2.0 * float(-g @ step), 0.0))
        t = 1.0 if delta < 0.25 else 1.0 / (1.0 + delta)
        c = c + t * step
        nit += 1
        if not np.all(np.isfinite(c)) or np.max(np.abs(c)) > 1e12:
            raise ValueError("S has no positive-definite completion on the pattern (the likelihood is unbounded: "
                             "the precision diverges)")
        b.tick()
    L = free.precision_from_natural(c) * scale[:, None] * scale[None, :]
    L = 0.5 * (L + L.T)
    L[~P] = 0.0
    return (L, {"nit": nit, "residual": resid}) if return_info else L


class GaussianGraphical(Gaussian):
    r"""Gaussians with a fixed pattern of zeros in the precision matrix (a Gaussian graphical model).

    Made by ``Gaussian(dim, precision_pattern=P)`` with ``P`` a symmetric boolean
    ``(dim, dim)`` array, ``True`` for a free precision entry (the diagonal must
    be free).  Points in the standard chart are :math:`(\mu, \Lambda_E)`, the
    mean and the free precision entries of the upper triangle, row by row; the
    dimension is :math:`d + |E|`.  See the module notes for the charts and the
    geometry.

    ``fit(data)`` is the maximum-likelihood estimate, by
    :func:`covariance_selection`; ``project(mean, cov)`` the sub-model point
    whose moments match a given Gaussian on the pattern (the
    :math:`\mathrm{KL}(N(\mu, \Sigma)\,\|\,\cdot)`-closest point of the model).
    Geodesics are the generic ones of the Fisher metric (no closed form).

    Examples
    --------
    A chain :math:`x_1 - x_2 - x_3` (:math:`x_1 \perp x_3 \mid x_2`)::

        P = np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1]], bool)
        G = ig.Gaussian(3, precision_pattern=P)
        p = G.fit(data)                 # Lambda_13 = 0 exactly
        G.cov(p), G.precision(p)
    """

    geometry_chart = None
    _vectorized = True

    def __init__(self, dim: int = 2, covariance: Optional[str] = "full", cov: Any = None,
                 chart: Optional[str] = None, precision_pattern: Any = None):
        if covariance not in (None, "full") or cov is not None:
            raise ValueError('precision_pattern= sets the family; it takes covariance="full" and no fixed cov=')
        d = _points.positive_int(dim, "dim (the sample dimension)")
        if precision_pattern is None:
            raise ValueError("GaussianGraphical needs precision_pattern= (a boolean (dim, dim) array)")
        self.precision_pattern = _as_pattern(precision_pattern, d)
        self.free = _Free(self.precision_pattern)
        self._index = np.concatenate([np.arange(d), d + self.free.vech_index])
        self.budget: Optional[Budget] = None
        self._init(d, d + self.free.m, chart, "GaussianGraphical")
        self.name = f"GaussianGraphical(sample_dim={d}, free precision entries={self.free.m})"

    # --------------------------------------------------------------- parts
    def _natural_parts(self, theta):
        return theta[..., :self.d], self.free.precision_from_natural(theta[..., self.d:])

    def _mu_cov(self, s):
        S = B.inv(self.free.sym(s[..., self.d:]))
        return s[..., :self.d], S

    def precision(self, p: Any):
        r""":math:`\Lambda = \Sigma^{-1}` of the point ``p`` (any chart): exactly zero off the pattern."""
        return self.free.sym(self.to_chart(p, "standard")[..., self.d:])

    def _std(self, mu, S):
        L = np.linalg.inv(np.asarray(B.to_numpy(S), dtype=float))
        off = np.abs(L[..., ~self.precision_pattern])
        size = np.sqrt(np.abs(np.diagonal(L, 0, -2, -1)))
        bound = 1e-8 * np.max(size[..., :, None] * size[..., None, :])
        if off.size and np.max(off) > bound:
            raise ValueError("cov= has precision entries off the pattern that are not zero (largest "
                             f"|inv(cov)_ij| = {np.max(off):.3g}); give a covariance of the model, or use "
                             "project(mean, cov) for the closest point of the model")
        return B.concatenate([B.array(np.asarray(B.to_numpy(mu), dtype=float)), B.array(self.free.take(L))],
                             axis=-1)

    def point(self, coords: Any = None, *, mean: Any = None, cov: Any = None, precision: Any = None,
              std: Any = None, var: Any = None):
        """A validated point from coordinates, or from ``mean=`` with ``cov=`` or ``precision=``.

        ``precision=`` must be SPD and zero off the pattern; ``cov=`` must have such an inverse.
        """
        if precision is None:
            return super().point(coords, mean=mean, cov=cov, std=std, var=var)
        if any(a is not None for a in (coords, cov, std, var)):
            raise ValueError("give precision= with mean= only")
        L = np.asarray(B.to_numpy(_points.as_coordinates(precision, None, "precision", self.name)), dtype=float)
        if L.shape[-2:] != (self.d, self.d):
            raise ValueError(f"precision must have shape ({self.d}, {self.d}), got {L.shape}")
        if np.any(L[..., ~self.precision_pattern] != 0):
            raise ValueError("precision has nonzero entries off the pattern; expected exact zeros there")
        _check_spd(L, "precision")
        mu = np.zeros(L.shape[:-1]) if mean is None else np.asarray(B.to_numpy(mean), dtype=float)
        lead = np.broadcast_shapes(mu.shape[:-1], L.shape[:-2])
        mu = np.broadcast_to(mu, lead + (self.d,))
        s = np.concatenate([mu, np.broadcast_to(self.free.take(L), lead + (self.free.m,))], axis=-1)
        return self.from_chart(s, "standard")

    def project(self, mean: Any, cov: Any):
        r"""The point of the model with mean ``mean`` and covariance equal to ``cov`` on the pattern.

        It minimises :math:`\mathrm{KL}(N(\mu, \Sigma)\,\|\,q)` over the model (the m-projection: moments
        match on the sufficient statistics), by :func:`covariance_selection`.
        """
        mu = np.asarray(B.to_numpy(_points.as_coordinates(mean, self.d, "mean", self.name)), dtype=float)
        S = np.asarray(B.to_numpy(_points.as_coordinates(cov, None, "covariance", self.name)), dtype=float)
        if S.shape != (self.d, self.d) or mu.shape != (self.d,):
            raise ValueError(f"project takes one mean ({self.d},) and one covariance ({self.d}, {self.d}), got "
                             f"{mu.shape} and {S.shape}")
        L = covariance_selection(S, self.precision_pattern, budget=self.budget)
        return self.from_chart(np.concatenate([mu, self.free.take(L)]), "standard")

    # --------------------------------------------------------------- family
    # the full family's formulas, on the precision rebuilt from the free entries (_natural_parts)
    log_partition = FullGaussian.log_partition
    in_natural_domain = FullGaussian.in_natural_domain

    def moments(self, theta):
        h, L = self._natural_parts(theta)
        S = B.inv(L)
        mu = _mv(S, h)
        return B.concatenate([mu, self.free.take(S + _outer(mu, mu))], axis=-1)

    def sufficient_statistics(self, x):
        x = observations_of(self, x).reshape(-1, self.d)
        return np.concatenate([x, x[:, self.free.i] * x[:, self.free.j]], axis=1)

    def fisher_natural(self, theta):
        r""":math:`\mathrm{Cov}[t(x)]`: the full family's natural-chart Fisher restricted to the free coordinates."""
        h, L = self._natural_parts(theta)
        S = B.inv(L)
        C = _cov_of_t(_mv(S, h), S, self.vh)
        idx = self._index
        return C[..., idx[:, None], idx[None, :]]

    def _fisher_closed(self, x):
        if self.chart == "natural":
            return self.fisher_natural(x)
        if self.chart == "mean":
            return B.inv(self.fisher_natural(self._natural(x)))
        return None   # standard: J^T F J by autodiff of the explicit chart map

    def random_point(self, rng=None, scale: float = 1.0):
        rng = _points.random_generator(rng)
        d = self.d
        A = np.where(self.precision_pattern, rng.uniform(-1, 1, (d, d)), 0.0)
        A = np.triu(A, 1)
        A = A + A.T
        L = A + np.diag(np.abs(A).sum(1) + rng.uniform(0.5, 1.5, d))   # diagonally dominant: SPD
        mu = scale * rng.standard_normal(d)
        return self.from_chart(np.concatenate([mu, self.free.take(L)]), "standard")

    # --------------------------------------------------------------- charts
    def _make_charts(self):
        d, free = self.d, self.free
        select = numpy_only(self._selection_primitive(), f"the mean chart of {self.name} solves covariance "
                            "selection")

        def std_to_nat(s):
            mu, L = s[..., :d], free.sym(s[..., d:])
            return B.concatenate([_mv(L, mu), free.natural_from_precision(L)], axis=-1)

        def nat_to_std(th):
            h, L = self._natural_parts(th)
            return B.concatenate([B.solve(L, h[..., None])[..., 0], free.take(L)], axis=-1)

        def mean_to_nat(e):
            mu = e[..., :d]
            c = select(e[..., d:] - free.take(_outer(mu, mu)))
            L = free.precision_from_natural(c)
            return B.concatenate([_mv(L, mu), c], axis=-1)

        def check_std(s):
            _check_spd(B.to_numpy(free.sym(s[..., d:])), "precision matrix (from the free precision entries)")

        def check_nat(th):
            _check_spd(B.to_numpy(self._natural_parts(th)[1]), "precision matrix (from the natural parameters)")

        def check_mean(e):
            mean_to_nat(B.array(np.asarray(B.to_numpy(e), dtype=float)))   # the selection raises if none exists

        return {
            "standard": Chart("standard", std_to_nat, nat_to_std, check_std,
                              "(mean, free precision entries Lambda_E of an SPD precision)", vectorized=True),
            "natural": Chart("natural", lambda th: th, lambda th: th, check_nat,
                             "(Lambda mu, -Lambda_E / w) with SPD precision Lambda zero off the pattern",
                             vectorized=True),
            "mean": Chart("mean", mean_to_nat, self.moments, check_mean,
                          "(mu, (Sigma + mu mu^T)_E) with a positive-definite completion of Sigma_E"),
        }

    def _selection_primitive(self):
        r"""``s_E -> c_E`` (zero-mean moments to natural coordinates) as an autograd primitive.

        Forward: :func:`covariance_selection`; backward: a solve with the zero-mean Fisher
        :math:`\mathrm{Cov}[t_E]` (the Jacobian of the inverse moment map, symmetric).
        """
        from autograd.extend import defvjp, primitive
        free, P = self.free, self.precision_pattern
        cache: dict = {}

        @primitive
        def select(s):
            s = np.asarray(s, dtype=float)
            key = s.tobytes()
            if key not in cache:
                cache.clear()   # one entry: a point is validated, then mapped
                cache[key] = free.natural_from_precision(
                    covariance_selection(free.sym(s), P, budget=self.budget))
            return cache[key].copy()

        def vjp(c, s):
            def back(g):
                return B.solve(_hessian(B.inv(free.precision_from_natural(c)), free), g)
            return back

        defvjp(select, vjp)

        def per(s):
            return per_point(select, s) if len(s.shape) > 1 else select(s)
        return per
