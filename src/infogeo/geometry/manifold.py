r"""Manifolds: a set of points in a chart, with a metric.

A :class:`Manifold` is an open subset of :math:`\mathbb{R}^n` (the chart)
with a Riemannian metric.  It turns functions into covectors
(:meth:`Manifold.differential`), covectors into vectors through its metric
(:meth:`Manifold.gradient`), and moves points along vectors
(:meth:`Manifold.retract`, :meth:`Manifold.exp`).  ``with_metric`` keeps the
points and changes the geometry — the step from gradient descent to natural
gradient or Gauss-Newton.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import numpy as np

from .. import backend as B
from ..backend import tree as _tree
from .metric import EuclideanMetric, Metric, check_components
from .vectors import Covector, TangentVector


class Manifold:
    """An open subset of :math:`\\mathbb{R}^{dim}` with a Riemannian metric.

    Parameters
    ----------
    dim : int
        Dimension of the chart.
    metric : Metric, optional
        Defaults to the Euclidean metric.
    domain : callable, optional
        ``domain(x) -> bool``: whether ``x`` is a point of the manifold (default:
        every finite ``x``).  ``domain_description`` names it in error messages.
    name : str, optional
    """

    def __init__(self, dim: int, metric: Optional[Metric] = None, *,
                 domain: Optional[Callable[[Any], bool]] = None,
                 domain_description: str = "", name: Optional[str] = None,
                 chart: Optional[str] = None):
        if int(dim) != dim or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self.dim = int(dim)
        self.metric = metric if metric is not None else EuclideanMetric(self.dim)
        if self.metric.dim is not None and self.metric.dim != self.dim:
            raise ValueError(f"metric of dimension {self.metric.dim} on a manifold of dimension {self.dim}")
        self._domain = domain
        self._domain_description = domain_description
        self.name = name or type(self).__name__
        self.chart = chart

    def __repr__(self) -> str:
        return f"{self.name}(dim={self.dim}, metric={self.metric!r})"

    # ------------------------------------------------------------ geometry
    def with_metric(self, metric: Metric) -> "Manifold":
        """The same points with another metric (a shallow copy; ``self`` is unchanged)."""
        if not isinstance(metric, Metric):
            raise TypeError(f"with_metric needs a Metric, got {type(metric).__name__}")
        if metric.dim is None:
            metric = copy.copy(metric)  # fix the dimension on a copy: the caller's object is left alone
            metric.dim = self.dim
        new = copy.copy(self)
        new.metric = metric
        if metric.dim != self.dim:
            raise ValueError(f"metric of dimension {metric.dim} on a manifold of dimension {self.dim}")
        return new

    # -------------------------------------------------------------- points
    def belongs(self, x: Any) -> bool:
        """Whether ``x`` is a point of this manifold (shape, finiteness, domain)."""
        try:
            self.check_point(x)
        except ValueError:
            return False
        return True

    def check_point(self, x: Any) -> None:
        """Raise ``ValueError`` naming what is wrong if ``x`` is not a point here."""
        shape = tuple(getattr(x, "shape", ()))
        if shape != (self.dim,):
            raise ValueError(f"a point of {self.name} must have shape ({self.dim},), got {shape}")
        if not _tree.tree_all_finite(x):
            raise ValueError(f"point of {self.name} contains NaN or inf")
        if self._domain is not None and not bool(self._domain(x)):
            raise ValueError(f"point is outside the domain of {self.name}"
                             + (f": expected {self._domain_description}" if self._domain_description else ""))

    def point(self, coords: Any):
        """Validated point from coordinates (array of the active backend unless already one)."""
        x = coords if hasattr(coords, "shape") and not isinstance(coords, (list, tuple)) else B.array(coords)
        self.check_point(x)
        return x

    def vector(self, x: Any, components: Any) -> TangentVector:
        """A :class:`TangentVector` at ``x`` (shape checked)."""
        check_components(components, self.dim, "tangent vector")
        return TangentVector(x, components, self.chart)

    def covector(self, x: Any, components: Any) -> Covector:
        """A :class:`Covector` at ``x`` (shape checked)."""
        check_components(components, self.dim, "covector")
        return Covector(x, components, self.chart)

    def random_point(self, rng: Optional[np.random.Generator] = None, scale: float = 1.0):
        """A random point: Gaussian coordinates, redrawn until inside the domain."""
        rng = np.random.default_rng(rng)
        for _ in range(1000):
            x = B.array(scale * rng.standard_normal(self.dim))
            if self.belongs(x):
                return x
        raise RuntimeError(f"could not draw a random point of {self.name}; override random_point")

    # ------------------------------------------------------- calculus
    def differential(self, f: Callable[[Any], Any], x: Any) -> Covector:
        """The differential :math:`df_x` of a scalar function: a :class:`Covector` (autodiff)."""
        return self.value_and_differential(f, x)[1]

    def value_and_differential(self, f: Callable[[Any], Any], x: Any):
        """``(f(x), df_x)`` from one forward and one backward pass."""
        self.check_point(x)
        value, g = B.value_and_grad(f, x)
        if not np.isfinite(B.to_numpy(value)).all():
            raise ValueError(f"the cost is {float(B.to_numpy(value))} at this point (NaN/inf)")
        if not _tree.tree_all_finite(g):
            raise ValueError("the differential of the cost contains NaN or inf at this point")
        return value, Covector(x, g, self.chart)

    def gradient(self, f: Callable[[Any], Any], x: Any, damping: float = 0.0) -> TangentVector:
        r"""Riemannian gradient :math:`\operatorname{grad} f(x) = (df_x)^\sharp`."""
        return self.metric.sharp(self.differential(f, x), damping=damping)

    # ------------------------------------------------------------- moving
    def _check_vector(self, x: Any, v: Any, what: str) -> None:
        if isinstance(v, Covector):
            raise TypeError(f"{what} needs a TangentVector, got a Covector; "
                            "convert it with metric.sharp(covector)")
        if not isinstance(v, TangentVector):
            raise TypeError(f"{what} needs a TangentVector, got {type(v).__name__}")
        if not _tree.tree_equal(v.base, x):
            raise ValueError(f"{what}: the vector is attached to another base point")
        check_components(v.components, self.dim, "tangent vector")

    def retract(self, x: Any, v: TangentVector):
        """First-order retraction; the chart's straight line :math:`x + v` by default."""
        self._check_vector(x, v, "retract")
        return x + v.components

    def exp(self, x: Any, v: TangentVector):
        r"""Riemannian exponential :math:`\exp_x(v)`."""
        self._check_vector(x, v, "exp")
        return self.metric.exp(x, v.components)

    def log(self, x: Any, y: Any) -> TangentVector:
        r"""Riemannian logarithm: the :class:`TangentVector` :math:`v` at ``x`` with :math:`\exp_x(v) = y`."""
        self.check_point(x)
        self.check_point(y)
        return TangentVector(x, self.metric.log(x, y), self.chart)

    def dist(self, x: Any, y: Any):
        """Geodesic distance."""
        self.check_point(x)
        self.check_point(y)
        return self.metric.dist(x, y)

    def geodesic(self, x: Any, y: Any = None, *, v: Optional[TangentVector] = None) -> Callable[[Any], Any]:
        """The geodesic from ``x`` to ``y`` (or with initial velocity ``v``) as ``t -> point``, t in [0, 1]."""
        self.check_point(x)
        if (y is None) == (v is None):
            raise ValueError("give exactly one of y (end point) or v (initial velocity)")
        if v is None:
            v = self.log(x, y)
        else:
            self._check_vector(x, v, "geodesic")
        return self.metric.geodesic(x, v.components)


class Euclidean(Manifold):
    r""":math:`\mathbb{R}^n` with the Euclidean metric (change it with :meth:`with_metric`)."""

    def __init__(self, dim: int, metric: Optional[Metric] = None):
        super().__init__(dim, metric, name="Euclidean")
