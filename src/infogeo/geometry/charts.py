r"""Charts: several coordinate systems on one manifold.

A :class:`Chart` is a coordinate system given by its maps to and from one
*reference chart* shared by all charts of the manifold (for an exponential
family, the natural parameters :math:`\theta`).  A :class:`ChartedManifold`
keeps its points in one current chart and converts between charts:

* points map with :meth:`~ChartedManifold.to_chart` / :meth:`~ChartedManifold.from_chart`;
* tangent vectors push forward by the chart Jacobian :math:`J = \partial y/\partial x`,
  covectors pull back by :math:`J^T` (Amari & Nagaoka 2000, Sec. 1.2);
* the metric in another chart is :math:`J^T G J`.

Exponential families (:mod:`infogeo.statistical`) and
:class:`~infogeo.solvers.MirrorDescent` (which differentiates in one chart and
steps in its dual) use this one mechanism.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import numpy as np

from .. import backend as B
from . import points as _points
from .points import per_point  # noqa: F401  (its home until points.py; statistical imports it here)
from .manifold import Manifold
from .vectors import Covector, TangentVector

__all__ = ["Chart", "ChartedManifold"]


@dataclass
class Chart:
    r"""A coordinate system, given by its maps to and from the reference chart.

    A prototyped family declares its usual parametrisation with one of these
    (``ExponentialFamily(..., standard_chart=Chart(...))``); ``parameters``
    then gives ``M.point(**named)`` and ``M.parameters(p)`` for free.

    Attributes
    ----------
    name : str
    to_natural, from_natural : callable
        ``x -> theta`` and ``theta -> x`` to and from the reference chart (for
        exponential families the natural parameters), written with
        :mod:`infogeo.backend` functions so that autodiff gives the chart Jacobians.
    check : callable, optional
        ``check(x)`` raises ``ValueError`` naming what is wrong if ``x`` is not
        a valid point in this chart.
    description : str
        What a valid point is (used in error messages and docs).
    parameters : mapping of str to shape, optional
        Names and shapes of the parameters whose flattened values, concatenated
        in order, are the chart's coordinates, e.g. ``{"shape": (), "rate": ()}``
        or ``{"concentration": (3,)}``.
    fisher : callable, optional
        ``fisher(x)``: the metric matrix in this chart in closed form (written
        with backend functions, so that geodesics can differentiate it).
    vectorized : bool
        Whether ``to_natural``, ``from_natural``, ``check`` and ``fisher`` accept
        batches of points, shape ``(..., dim)`` (``fisher`` then returns
        ``(..., dim, dim)``).  When ``False`` batches are processed point by point.
    """

    name: str
    to_natural: Callable[[Any], Any]
    from_natural: Callable[[Any], Any]
    check: Optional[Callable[[Any], None]] = None
    description: str = ""
    parameters: Optional[Mapping[str, Tuple[int, ...]]] = None
    fisher: Optional[Callable[[Any], Any]] = None
    vectorized: bool = False

    def parameter_sizes(self) -> Dict[str, int]:
        """Number of coordinates taken by each named parameter (``{}`` if none are declared)."""
        return {k: int(np.prod(shape, dtype=int)) for k, shape in (self.parameters or {}).items()}


def _batch_check(chart: Chart) -> Optional[Callable[[Any], None]]:
    """The validation of a point or batch in ``chart``: its ``check`` itself, or looped when not vectorised."""
    check = chart.check
    if check is None or chart.vectorized:
        return check

    def looped(x: Any) -> None:
        if len(x.shape) == 1:
            check(x)
            return
        for idx in np.ndindex(*x.shape[:-1]):
            check(x[idx])
    return looped


class ChartedManifold(Manifold):
    """A manifold whose points are coordinates in one of several :class:`Chart` s.

    Subclasses fill ``self._charts`` (a dict name -> :class:`Chart`) before
    calling :meth:`_set_chart`; ``self.chart`` names the current chart.
    """

    _charts: Dict[str, Chart]

    # ----------------------------------------------------------- chart set
    def _set_chart(self, chart: str) -> None:
        if chart not in self._charts:
            raise ValueError(f"unknown chart {chart!r} for {self.name}; expected one of {sorted(self._charts)}")
        self.chart = chart
        # the validation of points in the current chart, resolved once here rather than on every call
        check = _batch_check(self._charts[chart])
        declared = None if self._domain is None else self._check_declared_domain
        self._point_check = (check or declared) if check is None or declared is None else (
            lambda x: (declared(x), check(x)))

    @property
    def charts(self) -> tuple:
        """Names of the available charts."""
        return tuple(self._charts)

    def in_chart(self, name: str) -> "ChartedManifold":
        """The same manifold with points in chart ``name`` (a copy; ``self`` is unchanged)."""
        new = copy.copy(self)
        new._set_chart(name)
        return new

    def _key_in(self, chart: str) -> str:
        return f"{self.name} in the {chart} chart"

    @property
    def point_key(self) -> str:
        return self._key_in(self.chart)

    def _chart_check(self, chart: str, x: Any) -> None:
        check = _batch_check(self._charts[chart])
        if check is not None and 0 not in tuple(x.shape):   # an empty batch has no point outside it
            check(x)

    def _as_point_in(self, y: Any, chart: str, what: str = "point") -> Any:
        """``y`` validated as a point in chart ``chart`` (not necessarily the current one)."""
        y = _points.as_coordinates(y, self.dim, f"{what} in the {chart} chart", self.name)
        came_from = _points.origin(y)
        if came_from is not None and came_from != self._key_in(chart):
            raise TypeError(f"the {what} is a point of {came_from}, not of {self._key_in(chart)}")
        self._chart_check(chart, y)
        return y

    # ------------------------------------------------------------ point maps
    def to_chart(self, x: Any, name: str):
        """Coordinates in chart ``name`` of the point (or batch) ``x`` given in the current chart; a new array,
        never a view of ``x``."""
        self._known(name)
        given, x = x, self._as_point(x)
        y = self._to_chart(x, name)
        # charts that coincide (mean and standard charts, an identity map) give the point itself: a new array,
        # never a view that would write through to the caller's point (the caller's array keeps its record)
        return _points.mark(_points.unaliased(_points.plain(y) if y is x else y, given), self._key_in(name))

    def from_chart(self, y: Any, name: str, like: Any = None):
        """Coordinates in the current chart of the point (or batch) ``y`` given in chart ``name``; a new
        array, never a view of ``y``."""
        self._known(name)
        y = B.array(y, like=like) if like is not None and not hasattr(y, "_value") else y
        given, y = y, self._as_point_in(y, name)
        x = self._from_chart(y, name)
        return self._mark(_points.unaliased(_points.plain(x) if x is y else x, given))   # never a view of y

    def _known(self, name: str) -> None:
        if name not in self._charts:
            raise ValueError(f"unknown chart {name!r} for {self.name}; expected one of {sorted(self._charts)}")

    def _to_chart(self, x: Any, name: str):
        """:meth:`to_chart` without validation (internal; ``x`` already checked)."""
        if name == self.chart:
            return x
        direct = self._direct_map(self.chart, name)
        y = direct(x) if direct is not None else self._via_reference(x, self.chart, name)
        # charts that coincide map a point to itself: hand on a view, so that the record of the
        # caller's array (a point of this chart) does not travel into the other chart
        return _points.plain(y) if y is x else y

    def _from_chart(self, y: Any, name: str):
        """:meth:`from_chart` without validation (internal)."""
        if name == self.chart:
            return y
        direct = self._direct_map(name, self.chart)
        x = direct(y) if direct is not None else self._via_reference(y, name, self.chart)
        return _points.plain(x) if x is y else x

    def _via_reference(self, x: Any, source: str, target: str):
        src, tgt = self._charts[source], self._charts[target]
        f = lambda z: tgt.from_natural(src.to_natural(z))  # noqa: E731
        return per_point(f, x, vectorized=src.vectorized and tgt.vectorized)

    def _direct_map(self, source: str, target: str) -> Optional[Callable]:
        """A closed-form map between two charts that avoids the reference chart (optional)."""
        return None

    # ------------------------------------------------------------ vector maps
    def chart_jacobian(self, x: Any, name: str):
        r""":math:`\partial y/\partial x` of the chart change ``x -> y = to_chart(x, name)`` (autodiff).

        Shape ``(..., dim, dim)`` for a batch of points.
        """
        self._known(name)
        x = self._as_point(x)
        return self._chart_jacobian(x, name)

    def _chart_jacobian(self, x: Any, name: str):
        if name == self.chart:
            eye = B.eye(self.dim, like=x)
            return eye if len(x.shape) == 1 else B.broadcast_to(eye, tuple(x.shape) + (self.dim,))
        return per_point(lambda z: B.jacobian(lambda u: self._to_chart(u, name), z), x)

    def push_forward(self, v: TangentVector, name: str) -> TangentVector:
        r"""Express the tangent vector ``v`` in chart ``name``: :math:`J v`."""
        if not isinstance(v, TangentVector):
            raise TypeError(f"push_forward takes a TangentVector, got {type(v).__name__}"
                            + ("; covectors are pulled back (pull_back)" if isinstance(v, Covector) else ""))
        self._check_chart_label(v)
        x = self._as_point(v.base)
        J = self._chart_jacobian(x, name)
        return TangentVector(self._to_chart(x, name), B.einsum("...ij,...j->...i", J, v.components), name)

    def pull_back(self, w: Covector, x: Any = None) -> Covector:
        r"""Pull a covector back into the current chart: components :math:`J^T w`.

        ``w`` is a covector expressed in another chart (``w.chart``) at the point
        :math:`y`; the result acts on vectors in the current chart at the point
        :math:`x` with ``to_chart(x, w.chart) == y``.  Pass ``x`` when you have it
        (it is checked against ``y``); otherwise it is recovered from ``y``.
        """
        if not isinstance(w, Covector):
            raise TypeError(f"pull_back takes a Covector, got {type(w).__name__}"
                            + ("; vectors are pushed forward (push_forward)" if isinstance(w, TangentVector) else ""))
        name = w.chart
        if name is None:
            raise ValueError("pull_back needs to know the chart the covector is expressed in (w.chart)")
        if x is None:
            x = self._from_chart(self._as_point_in(w.base, name), name)
        else:
            x = self._as_point(x)
            if not np.allclose(B.to_numpy(self._to_chart(x, name)), B.to_numpy(w.base), rtol=1e-9, atol=1e-12):
                raise ValueError("pull_back: the covector is attached to another point than x")
        J = self._chart_jacobian(x, name)
        return Covector(x, B.einsum("...ji,...j->...i", J, w.components), self.chart)

    def _check_chart_label(self, v) -> None:
        if v.chart is not None and v.chart != self.chart:
            raise ValueError(f"{type(v).__name__} is expressed in chart {v.chart!r} but this manifold is "
                             f"in chart {self.chart!r}; use M.in_chart({v.chart!r})")
