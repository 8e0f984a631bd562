r"""The Fisher–Rao metric of an exponential family, and closed-form geodesics.

In natural coordinates the Fisher metric is :math:`G = \nabla^2\psi(\theta)`; in a
chart with :math:`\theta = \theta(x)` it is :math:`G(x) = J^T\nabla^2\psi(\theta(x))J`,
:math:`J = \partial\theta/\partial x` (Amari 1998; Amari & Nagaoka 2000, Ch. 2-3).
A family that knows its geodesics in closed form in one chart (its
``geometry_chart``) provides ``_geo_exp``, ``_geo_log`` and ``_geo_dist`` there;
:class:`FisherMetric` moves points and vectors of any other chart to that chart
and back.  Without closed forms the generic ODE geodesics of
:class:`~infogeo.geometry.metric.Metric` apply.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from .. import backend as B
from ..geometry import points as _points
from ..geometry.charts import per_point
from ..backend import tree as _tree
from ..geometry.metric import Metric, check_components
from ..geometry.vectors import TangentVector

__all__ = ["ClosedGeodesics", "FisherMetric"]

#: :meth:`FisherMetric._route`'s answer when the closed form is reached through the geometry chart
_BY_CHART = object()


@dataclass
class ClosedGeodesics:
    r"""Closed-form Fisher–Rao geodesics of a family, in one of its charts.

    :class:`FisherMetric` converts points and tangent vectors of any other chart
    to chart ``chart`` (vectors by the chart Jacobian) and back.

    Attributes
    ----------
    chart : str
        The chart the maps are written in (e.g. ``"standard"``).
    exp : callable
        ``exp(x, v) -> y``: the end point of the geodesic from ``x`` with initial velocity ``v``.
    log : callable
        ``log(x, y) -> v``: the initial velocity of the geodesic from ``x`` to ``y``.
    dist : callable, optional
        ``dist(x, y)``; defaults to the Fisher norm of ``log(x, y)``.
    vectorized : bool
        ``True`` when the maps take batches of points, shape ``(..., dim)``, and
        arrays of any backend (written with :mod:`infogeo.backend` functions).
        Otherwise they receive plain numpy arrays of single points, and torch
        tensors are refused rather than converted.
    """

    chart: str
    exp: Callable[[Any, Any], Any]
    log: Callable[[Any, Any], Any]
    dist: Optional[Callable[[Any, Any], Any]] = None
    vectorized: bool = False


def _same_shape(a: Any, b: Any):
    """``a`` and ``b`` broadcast to their common shape ``(..., dim)`` (unchanged when equal)."""
    if tuple(a.shape) == tuple(b.shape):
        return a, b
    shape = tuple(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
    return B.broadcast_to(a, shape), B.broadcast_to(b, shape)


class FisherMetric(Metric):
    r"""The Fisher–Rao metric of an exponential family in the family's current chart.

    Families override :meth:`ExponentialFamily.fisher` with closed forms and
    provide closed-form geodesics; without them the generic autodiff/ODE
    geodesics of :class:`~infogeo.geometry.metric.Metric` apply.  Every
    operation takes points of shape ``(..., dim)``.
    """

    def __init__(self, family: Any):
        super().__init__(family.dim)
        self.family = family
        # resolved once per chart (a family builds its metric when its chart is set): closed forms that
        # batch and are written in the current chart are called directly, with no per-call dispatch
        self._direct = family.geometry_chart == family.chart and bool(family._geo_vectorized)

    def matrix(self, x):
        return self.family.fisher(x)

    def inner(self, u, v):
        r""":math:`\langle u, v\rangle_x`; by the family's own form where it has one (a Gaussian's, whitened by the
        covariance's Cholesky factor: the dense matrix squares the covariance's condition number and, from
        :math:`\kappa \approx 10^8` on, comes out indefinite), else :math:`u^TG(x)v`."""
        own = getattr(self.family, "_fisher_inner", None)
        if own is not None and isinstance(u, TangentVector) and isinstance(v, TangentVector) \
                and not isinstance(u.components, dict) and not isinstance(v.components, dict) \
                and {u.chart, v.chart} <= {None, self.family.chart} and _tree.tree_equal(u.base, v.base):
            x = self.family._as_point(u.base)
            out = own(x, check_components(u.components, self.dim, "tangent vector"),
                      check_components(v.components, self.dim, "tangent vector"))
            if out is not None:   # an extreme point (a covariance of 1e-300) overflows: an error, not inf
                return _points.finite_result(out, f"the Fisher inner product of {self.family.name}", x)
        return super().inner(u, v)

    @property
    def batches_points(self) -> bool:
        """Whether :meth:`matrix` takes a batch ``(..., dim)`` in one call (a closed form declared vectorised)."""
        chart = self.family._charts[self.family.chart]
        return chart.fisher is not None and bool(chart.vectorized)

    def _closed(self) -> bool:
        return self.family.geometry_chart is not None

    def _batched_generic(self, x: Any, *others: Any, op: str = "") -> bool:
        """Whether this call must be looped point by point (a batch on a closed form ``op`` that does not batch)."""
        fam = self.family
        batches = fam._geo_vectorized or op in fam._geo_numpy_batches
        return not batches and any(len(a.shape) > 1 for a in (x,) + others)

    def _hook(self, name: str, *arrays: Any, like: Any = None):
        """Call the family's closed form ``name`` (``"exp"``, ``"log"``, ``"dist"``) on geometry-chart arrays.

        A numpy-only closed form's array result is returned in the backend of ``like``.
        """
        fam = self.family
        fn = getattr(fam, f"_geo_{name}")
        if fam._geo_vectorized:
            return fn(*arrays)
        if any(B.is_torch(a) for a in arrays):
            why = fam._numpy_geodesics_why.get(name, "its geodesic maps are not declared vectorized "
                                               "(ClosedGeodesics(vectorized=False)) and take numpy arrays")
            raise TypeError(f"the {name} of {fam.name} is computed in numpy only: {why}; pass numpy arrays "
                            "(torch tensors are not converted silently, which would cut their gradients)")
        out = fn(*(np.asarray(B.to_numpy(a), dtype=float) for a in arrays))
        if name == "dist":
            return float(out)
        out = np.asarray(out, dtype=float)
        return out if like is None else B.array(out, like=like)

    def _route(self, name: str, x: Any, y: Any) -> Any:
        """``name`` (exp, log, dist) by the closed form when it is written in this chart and batches, point by
        point for a batch it does not take, or generically without one; :data:`_BY_CHART` otherwise."""
        if self._direct:
            return getattr(self.family, f"_geo_{name}")(x, y)
        if self._batched_generic(x, y, op=name if name == "exp" else ""):
            return per_point(getattr(self, name), x, y, empty=() if name == "dist" else tuple(x.shape[-1:]))
        if not self._closed():
            return getattr(super(), name)(x, y)
        return _BY_CHART

    def exp(self, x, v):
        """The end point of the geodesic, refused (``ValueError``) when it is not a valid point in floating point:
        a long step overflows (``cosh``, ``exp``) or rounds onto the boundary (a variance of 0)."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # the end point is checked instead
            try:
                y = self._exp(x, v)
            except RuntimeError as exc:   # the generic geodesic ODE stopped, at the boundary of the domain
                from ..geometry.geodesics import GeodesicError   # (loaded already if that is what was raised)
                if not isinstance(exc, GeodesicError):
                    raise
                raise self._invalid_end(self.family.chart, exc) from None
            return self._valid_end(y)

    def _exp(self, x, v):
        if (out := self._route("exp", x, v)) is not _BY_CHART:
            return out
        x, v = _same_shape(x, v)  # one shape for the chart Jacobian (a closed form that batches in numpy)
        fam, g = self.family, self.family.geometry_chart
        if g == fam.chart:
            return self._hook("exp", x, v, like=x)
        here = getattr(fam, "_exp_in_chart", None)   # as log's (:meth:`log`)
        if here is not None and (out := here(x, v)) is not None:
            return out
        xg, vg = B.jvp(lambda z: fam._to_chart(z, g), x, v)
        # checked in the geometry chart too: the map back would fail on an invalid point with a bare LinAlgError
        yg = self._valid_end(self._hook("exp", xg, vg, like=x), g)
        try:
            return fam._from_chart(yg, g)
        except np.linalg.LinAlgError as exc:  # representable in the geometry chart, singular in this one
            raise self._invalid_end(fam.chart, exc) from None

    def _valid_end(self, y, chart: Optional[str] = None):
        fam = self.family
        chart = chart or fam.chart
        try:
            if not _points.all_finite(y):
                raise ValueError("it is not finite")
            if chart != fam.chart:
                fam._chart_check(chart, y)
            else:
                fam._check_domain(y)
        except ValueError as exc:
            raise self._invalid_end(chart, exc) from None
        return y

    def _invalid_end(self, chart: str, why: Any) -> ValueError:
        return ValueError(f"exp on {self.family.name} ({chart} chart): the end point of the geodesic is not a valid "
                          f"point in floating point ({why}); expected a shorter step")

    def log(self, x, y):
        if (out := self._route("log", x, y)) is not _BY_CHART:
            return out
        fam, g = self.family, self.family.geometry_chart
        # a family may compute the log in its current chart where the geometry chart loses accuracy (categorical
        # logits: the differences of nearby probabilities round)
        here = getattr(fam, "_log_in_chart", None)
        if here is not None and fam.chart != g and (out := here(x, y)) is not None:
            return out
        if g != fam.chart:
            # the velocity is pushed back at each base point: one base point per pair (a jvp at one point
            # with a batch of tangents mixed the batch up)
            x, y = _same_shape(x, y)
        xg, yg = fam._to_chart(x, g), fam._to_chart(y, g)
        if g != fam.chart:  # a valid point may round onto the boundary there (logits of 40: p = 1): NaN velocities
            for z in (xg, yg):
                try:
                    fam._chart_check(g, z)
                except ValueError as exc:
                    raise ValueError(f"log on {fam.name}: its geodesics are computed in the {g} chart, where a point "
                                     f"of the {fam.chart} chart rounds onto the boundary ({exc}); expected points "
                                     "farther from the boundary") from None
        vg = self._hook("log", xg, yg, like=x)
        if g == fam.chart:
            return vg
        return B.jvp(lambda z: fam._from_chart(z, g), xg, vg)[1]

    def dist(self, x, y):
        if (out := self._route("dist", x, y)) is not _BY_CHART:
            return out
        fam, g = self.family, self.family.geometry_chart
        # a family may compute the distance in its current chart where the geometry chart loses accuracy
        # (categorical logits: the mean chart's probabilities round the last class to 0)
        here = getattr(fam, "_dist_in_chart", None)
        if here is not None and fam.chart != g and (out := here(x, y)) is not None:
            return out
        return self._hook("dist", fam._to_chart(x, g), fam._to_chart(y, g))

    def geodesic(self, x, v):
        if not self._closed() and not self._batched_generic(x, v):
            return super().geodesic(x, v)

        def path(t):
            t_arr = np.asarray(t, dtype=float)
            if np.any(t_arr < 0) or np.any(t_arr > 1):
                raise ValueError("geodesic times must lie in [0, 1]")
            if t_arr.ndim == 0:
                return self.exp(x, float(t_arr) * v)
            return B.stack([self.exp(x, float(ti) * v) for ti in t_arr])
        return path

    def __repr__(self) -> str:
        return f"FisherMetric({self.family.name}, chart={self.family.chart!r})"
