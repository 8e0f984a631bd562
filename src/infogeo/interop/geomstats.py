r"""geomstats adapters: points of its information-geometry spaces to and from infogeo points.

geomstats (``geomstats.information_geometry``) and infogeo parametrise the same
families differently; these functions convert so that results can be compared
side by side.  Each infogeo family is paired with one geomstats space:

=====================================  ===================================  ==================================
infogeo family                         geomstats space                      geomstats point
=====================================  ===================================  ==================================
``UnivariateGaussian``                 ``UnivariateNormalDistributions``    :math:`(\mu, \sigma)`
``DiagonalGaussian(d)``                ``DiagonalNormalDistributions(d)``   :math:`(\mu, \sigma_1^2 \dots \sigma_d^2)`
``ZeroMeanGaussian(d)``                ``CenteredNormalDistributions(d)``   :math:`\Sigma` (a ``d x d`` matrix)
``Categorical(k)``, ``Bernoulli``      ``CategoricalDistributions(k-1)``    all ``k`` probabilities
contributed ``beta``                   ``BetaDistributions``                :math:`(\alpha, \beta)`
contributed ``dirichlet``              ``DirichletDistributions(k)``        the concentration
contributed ``gamma``                  ``GammaDistributions``               :math:`(k, k/r)` (shape, mean)
contributed ``poisson``                ``PoissonDistributions``             :math:`\lambda`
contributed ``exponential``            ``ExponentialDistributions``         the rate :math:`\lambda`
contributed ``multinomial``            ``MultinomialDistributions(k-1, n)``  all ``k`` probabilities
=====================================  ===================================  ==================================

Contributed families (``ig.load_manifold``) are recognised by their class name
and read through their named parameters (``M.parameters``, ``M.point``).

geomstats computes Beta, Dirichlet and Gamma geodesics numerically: ``log`` with
scipy's collocation BVP solver at residual tolerance ``1e-3`` by default, which
leaves distances off by about ``5e-6``.  :func:`geomstats_space` tightens that
solver (and the ``exp`` integrator) by default; :func:`tighten_geodesic_solvers`
does it for a space you already have.

geomstats is imported on first use, so ``import infogeo.interop.geomstats``
works without it.
"""
from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import numpy as np

from .. import backend as B
from ..statistical import Categorical, DiagonalGaussian, UnivariateGaussian, ZeroMeanGaussian

logger = logging.getLogger(__name__)

__all__ = ["geomstats_space", "to_geomstats", "from_geomstats", "infogeo_manifold",
           "tighten_geodesic_solvers", "supported_families"]

#: scipy ``solve_bvp`` residual tolerance used by :func:`geomstats_space` (geomstats' default is 1e-3)
DEFAULT_TOL = 1e-10


def _gs(module: str):
    """``geomstats.information_geometry.<module>``, imported on first use with a clear error."""
    try:
        return importlib.import_module(f"geomstats.information_geometry.{module}")
    except ImportError as exc:
        raise ImportError("infogeo.interop.geomstats needs geomstats: pip install 'infogeo[interop]'") from exc


def _np(a: Any) -> np.ndarray:
    return np.array(B.to_numpy(a), dtype=float)


@dataclass(frozen=True)
class _Pairing:
    """One infogeo family and its geomstats space, with the point maps both ways."""

    family: str                                  # how users know it
    gs_class: str                                # geomstats class name
    matches: Callable[[Any], bool]               # infogeo manifold -> is it this family?
    space: Callable[[Any], Any]                  # infogeo manifold -> geomstats space
    to_gs: Callable[[Any, Any], np.ndarray]      # (M, x) -> geomstats point
    from_gs: Callable[[Any, np.ndarray], Any]    # (M, y) -> infogeo point in M's chart
    manifold: Callable[[Any], Any]               # geomstats space -> infogeo manifold


def _contributed(name: str) -> Callable[[Any], bool]:
    return lambda M: type(M).__name__ == name


def _load(name: str, **kwargs: Any):
    from ..contrib import load_manifold
    return load_manifold(name, **kwargs)


def _gamma_to_gs(M, x):
    p = M.parameters(x)
    return np.array([p["shape"], p["shape"] / p["rate"]])


_PAIRINGS: List[_Pairing] = [
    # UnivariateGaussian subclasses DiagonalGaussian: it must come first
    _Pairing("UnivariateGaussian", "UnivariateNormalDistributions",
             lambda M: isinstance(M, UnivariateGaussian),
             lambda M: _gs("normal").UnivariateNormalDistributions(),
             lambda M, x: np.array([float(_np(M.mean(x))[0]), float(np.sqrt(_np(M.cov(x))[0, 0]))]),
             lambda M, y: M.point(mean=[y[0]], std=[y[1]]),
             lambda S: UnivariateGaussian()),
    _Pairing("DiagonalGaussian", "DiagonalNormalDistributions",
             lambda M: isinstance(M, DiagonalGaussian),
             lambda M: _gs("normal").DiagonalNormalDistributions(M.d),
             lambda M, x: np.concatenate([_np(M.mean(x)), np.diag(_np(M.cov(x)))]),
             lambda M, y: M.point(mean=y[:M.d], var=y[M.d:]),
             lambda S: DiagonalGaussian(S.sample_dim)),
    _Pairing("ZeroMeanGaussian", "CenteredNormalDistributions",
             lambda M: isinstance(M, ZeroMeanGaussian),
             lambda M: _gs("normal").CenteredNormalDistributions(M.d),
             lambda M, x: _np(M.cov(x)),
             lambda M, y: M.point(cov=y),
             lambda S: ZeroMeanGaussian(S.sample_dim)),
    _Pairing("Categorical", "CategoricalDistributions",
             lambda M: isinstance(M, Categorical),
             lambda M: _gs("categorical").CategoricalDistributions(M.k - 1),
             lambda M, x: _np(M.probs(x)),
             lambda M, y: M.point(probs=y),
             lambda S: Categorical(S.dim + 1)),
    _Pairing("beta", "BetaDistributions", _contributed("Beta"),
             lambda M: _gs("beta").BetaDistributions(),
             lambda M, x: np.array([M.parameters(x)["alpha"], M.parameters(x)["beta"]]),
             lambda M, y: M.point(alpha=y[0], beta=y[1]),
             lambda S: _load("beta")),
    _Pairing("dirichlet", "DirichletDistributions", _contributed("Dirichlet"),
             lambda M: _gs("dirichlet").DirichletDistributions(M.k),
             lambda M, x: M.parameters(x)["concentration"],
             lambda M, y: M.point(concentration=y),
             lambda S: _load("dirichlet", k=S.dim)),
    _Pairing("gamma", "GammaDistributions", _contributed("Gamma"),
             lambda M: _gs("gamma").GammaDistributions(),
             _gamma_to_gs,
             lambda M, y: M.point(shape=y[0], rate=y[0] / y[1]),
             lambda S: _load("gamma")),
    _Pairing("poisson", "PoissonDistributions", _contributed("Poisson"),
             lambda M: _gs("poisson").PoissonDistributions(),
             lambda M, x: np.array([M.parameters(x)["rate"]]),
             lambda M, y: M.point(rate=float(np.reshape(y, -1)[0])),
             lambda S: _load("poisson")),
    _Pairing("exponential", "ExponentialDistributions", _contributed("Exponential"),
             lambda M: _gs("exponential").ExponentialDistributions(),
             lambda M, x: np.array([M.parameters(x)["rate"]]),
             lambda M, y: M.point(rate=float(np.reshape(y, -1)[0])),
             lambda S: _load("exponential")),
    _Pairing("multinomial", "MultinomialDistributions", _contributed("Multinomial"),
             lambda M: _gs("multinomial").MultinomialDistributions(M.k - 1, M.n),
             lambda M, x: M.parameters(x)["probs"],
             lambda M, y: M.point(probs=y),
             lambda S: _load("multinomial", k=S.dim + 1, n=int(S.n_draws))),
]


def supported_families() -> List[str]:
    """Names of the infogeo families that have a geomstats counterpart."""
    return [p.family for p in _PAIRINGS]


def _pairing(M: Any) -> _Pairing:
    for p in _PAIRINGS:
        if p.matches(M):
            return p
    raise NotImplementedError(f"no geomstats counterpart for {getattr(M, 'name', type(M).__name__)}; "
                              f"supported: {supported_families()}")


def tighten_geodesic_solvers(space: Any, tol: float = DEFAULT_TOL, n_nodes: int = 200,
                             max_nodes: int = 100_000, rtol: float = 1e-12) -> Any:
    """Tighten geomstats' numerical geodesic solvers on ``space`` (in place) and return it.

    geomstats' Beta, Dirichlet and Gamma metrics solve ``log`` as a boundary
    value problem with :func:`scipy.integrate.solve_bvp` (``LogODESolver``,
    residual tolerance ``1e-3``, 1000 initial nodes) and ``exp`` with
    :func:`scipy.integrate.solve_ivp` (LSODA, scipy's default ``rtol = 1e-3``).
    This replaces them by the same solvers with residual tolerance ``tol``
    (fewer initial nodes: the solver refines the mesh itself up to
    ``max_nodes``) and ``rtol = atol = rtol``.  Spaces whose geodesics are
    closed-form are returned unchanged.

    Parameters
    ----------
    space : geomstats space, equipped with its metric
    tol : float
        ``solve_bvp`` residual tolerance.
    n_nodes, max_nodes : int
        Initial and maximal mesh sizes of the BVP solver.
    rtol : float
        Relative and absolute tolerance of the ``exp`` integrator.
    """
    metric = getattr(space, "metric", None)
    if metric is None or not hasattr(metric, "log_solver") or not hasattr(metric, "exp_solver"):
        return space
    from geomstats.numerics.bvp import ScipySolveBVP
    from geomstats.numerics.geodesic import ExpODESolver, LogODESolver
    from geomstats.numerics.ivp import ScipySolveIVP

    if not (0 < tol < 1 and 0 < rtol < 1):
        raise ValueError(f"tolerances must lie in (0, 1), got tol={tol}, rtol={rtol}")
    metric.log_solver = LogODESolver(space, n_nodes=int(n_nodes),
                                     integrator=ScipySolveBVP(tol=tol, max_nodes=int(max_nodes)))
    metric.exp_solver = ExpODESolver(space, integrator=ScipySolveIVP(method="LSODA", rtol=rtol, atol=rtol))
    return space


def geomstats_space(M: Any, tol: Optional[float] = DEFAULT_TOL) -> Any:
    """The geomstats space (equipped with its Fisher–Rao metric) of the family of ``M``.

    Parameters
    ----------
    M : infogeo statistical manifold
        One of :func:`supported_families` (any chart).
    tol : float or None
        Residual tolerance for geomstats' numerical ``log`` (Beta, Dirichlet,
        Gamma; see :func:`tighten_geodesic_solvers`); ``None`` keeps geomstats'
        defaults.

    Raises
    ------
    NotImplementedError
        If geomstats has no space for this family.
    """
    space = _pairing(M).space(M)
    return space if tol is None else tighten_geodesic_solvers(space, tol=tol)


def to_geomstats(M: Any, x: Any) -> np.ndarray:
    """The geomstats point of the distribution that ``x`` (a point of ``M``, in ``M``'s chart) is.

    A batch of points (leading axis) gives a stacked batch of geomstats points.
    """
    pairing = _pairing(M)
    arr = _np(x)
    if arr.ndim == 2:
        return np.stack([pairing.to_gs(M, B.array(row)) for row in arr])
    M.check_point(x)
    return np.asarray(pairing.to_gs(M, x), dtype=float)


def from_geomstats(M: Any, y: Any):
    """The point of ``M`` (in its current chart) of the distribution with geomstats coordinates ``y``.

    Raises ``ValueError`` (from ``M.point``) if ``y`` is not a valid point, e.g.
    a non-positive standard deviation or probabilities off the simplex.
    """
    pairing = _pairing(M)
    y = np.array(B.to_numpy(y), dtype=float)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"geomstats point must be finite, got {y.tolist()}")
    return pairing.from_gs(M, y)


def infogeo_manifold(space: Any):
    """The infogeo family (in its standard chart) matching a geomstats information-geometry space."""
    name = type(space).__name__
    for p in _PAIRINGS:
        if p.gs_class == name:
            return p.manifold(space)
    raise NotImplementedError(f"no infogeo family for the geomstats space {name}; "
                              f"supported: {sorted(p.gs_class for p in _PAIRINGS)}")
