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
import math
import numbers
from typing import Any, Callable, Optional

import numpy as np

from .. import backend as B
from ..backend import tree as _tree
from . import points as _points
from .metric import EuclideanMetric, Metric
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
        ``domain(x) -> bool``: whether the single point ``x`` is a point of the
        manifold (default: every finite ``x``); batches are checked point by
        point.  ``domain_description`` names it in error messages.
    name : str, optional

    Notes
    -----
    Points are arrays of shape ``(..., dim)``: every operation broadcasts over
    the leading (batch) axes.  Each public operation validates its points once
    (:func:`~infogeo.geometry.points.as_coordinates`: dtype, shape, finiteness,
    then the domain); integer coordinates are promoted to float.
    """

    _point_check: Optional[Callable[[Any], None]] = None

    def __init__(self, dim: int, metric: Optional[Metric] = None, *,
                 domain: Optional[Callable[[Any], bool]] = None,
                 domain_description: str = "", name: Optional[str] = None,
                 chart: Optional[str] = None):
        self.dim = _points.positive_int(dim, "dim")
        self.metric = metric if metric is not None else EuclideanMetric(self.dim)
        if self.metric.dim is not None and self.metric.dim != self.dim:
            raise ValueError(f"metric of dimension {self.metric.dim} on a manifold of dimension {self.dim}")
        self._domain = domain
        # the domain check of _as_point, resolved once (None: every finite point is a point here)
        self._point_check = None if domain is None else self._check_declared_domain
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
    @property
    def point_key(self) -> str:
        """Which manifold and chart a point belongs to (points of another key are refused)."""
        return self.name if self.chart is None else f"{self.name} in the {self.chart} chart"

    def _as_point(self, x: Any, what: str = "point") -> Any:
        """``x`` validated as a point (or batch of points) of this manifold, integers promoted to float."""
        came_from = _points.origin(x)  # read on the caller's object, before any copy
        if came_from is not None and came_from != self.point_key:
            raise TypeError(f"the {what} is a point of {came_from}, not of {self.point_key}; convert it "
                            "explicitly (e.g. to_chart/from_chart) or pass plain coordinates")
        x = _points.coordinates(x, self.dim, what, self.name)
        self._check_domain(x)
        return x

    def _check_domain(self, x: Any) -> None:
        """Raise ``ValueError`` if a (finite, well-shaped) ``x`` lies outside the domain; batches allowed."""
        # an empty batch (0, dim) has no point outside it (the checks' min() has no identity on it)
        if self._point_check is not None and 0 not in tuple(x.shape):
            self._point_check(x)

    def _check_declared_domain(self, x: Any) -> None:
        """The ``domain`` given to the constructor, point by point."""
        rows = [x] if len(x.shape) == 1 else [x[i] for i in np.ndindex(*x.shape[:-1])]
        if not all(bool(self._domain(r)) for r in rows):
            raise ValueError(f"point is outside the domain of {self.name}"
                             + (f": expected {self._domain_description}" if self._domain_description else ""))

    def _mark(self, x: Any) -> Any:
        return _points.mark(x, self.point_key)

    def belongs(self, x: Any) -> bool:
        """Whether ``x`` is a point (or a batch of points, all of them) of this manifold."""
        try:
            self._as_point(x)
        except (ValueError, TypeError):
            return False
        return True

    def check_point(self, x: Any) -> None:
        """Raise ``ValueError`` (``TypeError`` for a wrong dtype) naming what is wrong if ``x`` is not a point here."""
        self._as_point(x)

    def point(self, coords: Any):
        """Validated point (or batch, shape ``(..., dim)``) from coordinates; numpy unless given a tensor.

        A new array: never the caller's ``coords`` object (which they may modify later)."""
        x = _points.as_coordinates(coords, self.dim, "point", self.name)
        self.check_point(x)  # the public hook: subclasses may add checks there
        return self._mark(_points.own_copy(x, coords))

    def _at(self, x: Any, components: Any, what: str) -> tuple:
        """The base point validated (a list becomes the array that later calls compare with) and the
        components; a numpy one becomes a tensor when the other is one (as ``exp`` and ``log`` do), so that
        the metric never meets a numpy point with torch components."""
        x = self._as_point(x, f"base point of the {what}")
        components = _points.as_coordinates(components, self.dim, what, self.name)
        return _points.same_backend(x, components)

    def vector(self, x: Any, components: Any) -> TangentVector:
        """A :class:`TangentVector` at ``x`` (point and shape checked)."""
        return TangentVector(*self._at(x, components, "tangent vector"), self.chart)

    def covector(self, x: Any, components: Any) -> Covector:
        """A :class:`Covector` at ``x`` (point and shape checked)."""
        return Covector(*self._at(x, components, "covector"), self.chart)

    def random_point(self, rng: Optional[np.random.Generator] = None, scale: float = 1.0):
        """A random point: Gaussian coordinates, redrawn until inside the domain."""
        rng = _points.random_generator(rng)
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
        x = self._as_point(x)
        value, g = B.value_and_grad(_scalar_valued(f), x)
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
        return _points.as_coordinates(v.components, self.dim, "tangent vector", self.name)

    def retract(self, x: Any, v: TangentVector):
        """First-order retraction; the chart's straight line :math:`x + v` by default."""
        x = self._as_point(x)
        return x + self._check_vector(x, v, "retract")

    def exp(self, x: Any, v: TangentVector):
        r"""Riemannian exponential :math:`\exp_x(v)`.

        The geodesic must stay in the manifold: a geodesic integrated numerically is checked along
        the way against the declared ``domain`` and the definiteness of the metric, a closed-form one
        at its end; either raises :class:`~infogeo.geometry.geodesics.GeodesicError` (a path that
        left and came back is refused too).
        """
        x = self._as_point(x)
        components = self._check_vector(x, v, "exp")
        _points.batch_shape(x, components, dims=(1, 1))
        x, components = _points.same_backend(x, components)
        if self._domain is not None and type(self.metric).exp is Metric.exp:
            from . import geodesics  # on demand: it loads scipy.integrate
            domain = self._domain
            end = geodesics.exp(self.metric, x, components, inside=lambda z: bool(domain(z)))
        else:
            end = self.metric.exp(x, components)
        if self._point_check is not None and not self.belongs(end):
            from .geodesics import GeodesicError
            raise GeodesicError(f"exp on {self.name}: the geodesic ends outside the domain"
                                + (f" ({self._domain_description})" if self._domain_description else "")
                                + "; take a shorter step")
        return self._mark(end)

    def _pair(self, x: Any, y: Any):
        """Two validated points (or batches) whose leading shapes broadcast."""
        x, y = self._as_point(x, "first point"), self._as_point(y, "second point")
        if type(x) is type(y) is np.ndarray and x.shape == y.shape:
            return x, y  # the common case: one backend, equal shapes (which broadcast trivially)
        _points.batch_shape(x, y, dims=(1, 1))
        return _points.same_backend(x, y)

    def log(self, x: Any, y: Any) -> TangentVector:
        r"""Riemannian logarithm: the :class:`TangentVector` :math:`v` at ``x`` with :math:`\exp_x(v) = y`."""
        x, y = self._pair(x, y)
        return TangentVector(x, self.metric.log(x, y), self.chart)

    def dist(self, x: Any, y: Any):
        """Geodesic distance, shape ``(...)`` for batches of points."""
        x, y = self._pair(x, y)
        return self.metric.dist(x, y)

    def geodesic(self, x: Any, y: Any = None, *, v: Optional[TangentVector] = None) -> Callable[[Any], Any]:
        """The geodesic from ``x`` to ``y`` (or with initial velocity ``v``) as ``t -> point``, t in [0, 1].

        For batches, ``path(t)`` has shape ``(..., dim)`` at a scalar ``t`` and
        ``(len(t), ..., dim)`` for an array of times.
        """
        x = self._as_point(x)
        if (y is None) == (v is None):
            raise ValueError("give exactly one of y (end point) or v (initial velocity)")
        if v is None:
            v = self.log(x, y)
            components = v.components
        else:
            components = self._check_vector(x, v, "geodesic")
        path = self.metric.geodesic(x, components)

        def checked_path(t: Any) -> Any:
            return path(_points.check_times(t))
        checked_path.__doc__ = path.__doc__
        return checked_path

    # ------------------------------------------------------------- statistics
    def frechet_mean(self, points: Any, weights: Any = None, **options: Any):
        r"""The weighted Fréchet mean :math:`\arg\min_x \sum_i w_i d(x, p_i)^2` of ``points`` (shape ``(n, dim)``).

        Closed forms where they exist, else Riemannian gradient descent with a budget; see
        :func:`infogeo.geometry.statistics.frechet_mean` for the options (``x0``, ``tol``, ``max_iter``,
        ``max_time``, ``method``, ``return_info``).
        """
        from . import statistics
        return statistics.frechet_mean(self, points, weights, **options)

    def transport(self, p: Any, q: Any, v: TangentVector) -> TangentVector:
        """Parallel transport of the tangent vector ``v`` at ``p`` along the geodesic to ``q``: a vector at ``q``.

        Closed forms where they exist, else the ODE of the Levi-Civita connection
        (:func:`infogeo.geometry.statistics.transport`); inner products are preserved.
        """
        from . import statistics
        return statistics.transport(self, p, q, v)


def _scalar_valued(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``f`` with its value checked to be one real number (autodiff's own errors do not name the cost)."""
    def checked(z):
        value = f(z)
        shape = tuple(getattr(value, "shape", ()))
        if isinstance(value, (str, bytes, bool)) or not (hasattr(value, "shape") or isinstance(value, numbers.Real)):
            raise TypeError(f"the cost must return a real number, got {type(value).__name__}")
        if math.prod(shape) != 1:
            raise ValueError(f"the cost must return a scalar, got an array of shape {shape}; reduce it "
                             "(e.g. with backend.sum) or use backend.jacobian for vector-valued maps")
        return value
    return checked


class Euclidean(Manifold):
    r""":math:`\mathbb{R}^n` with the Euclidean metric (change it with :meth:`with_metric`)."""

    def __init__(self, dim: int, metric: Optional[Metric] = None):
        super().__init__(dim, metric, name="Euclidean")
