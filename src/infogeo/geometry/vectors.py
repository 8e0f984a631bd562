r"""Tangent vectors and covectors at a point.

A tangent vector :math:`v \in T_xM` is a velocity; a covector
:math:`\omega \in T_x^*M` is a linear function on velocities, such as the
differential :math:`df_x` that backprop returns.  In coordinates both are lists
of numbers, but they transform differently under a change of chart (vectors by
the Jacobian, covectors by its transpose), so they are different types here:

* ``v + w`` and ``a * v`` are allowed between vectors of the same type at the
  same base point (and in the same chart);
* ``omega(v)`` pairs a covector with a vector and gives a number;
* mixing a vector with a covector, or with a point, raises :class:`TypeError`.
  Only a metric converts between them: ``metric.sharp(omega)`` and
  ``metric.flat(v)``.

Components are a backend array, or a ``{name: tensor}`` dict for network
parameter spaces.
"""
from __future__ import annotations

import numbers
from typing import Any, Optional

from ..backend import tree as _tree


def _is_scalar(a: Any) -> bool:
    if isinstance(a, numbers.Number):
        return True
    shape = getattr(a, "shape", None)
    return shape is not None and tuple(shape) == ()


class _AtPoint:
    """Shared algebra of elements of the tangent or cotangent space at ``base``."""

    __slots__ = ("base", "components", "chart")
    __array_ufunc__ = None  # numpy must defer to us (and so get a TypeError), not broadcast
    _kind = "element"
    _hint = ""

    def __init__(self, base: Any, components: Any, chart: Optional[str] = None):
        if isinstance(components, _AtPoint):
            raise TypeError(
                f"components of a {type(self).__name__} must be an array, got a "
                f"{type(components).__name__}; use metric.sharp / metric.flat to convert")
        self.base = base
        # a copy: the caller's array, changed later, must not change this vector (nor this one it)
        self.components = _tree.tree_copy(components)
        self.chart = chart

    # ----------------------------------------------------------- checks
    def _check_partner(self, other: Any, op: str) -> None:
        if isinstance(other, _AtPoint) and type(other) is not type(self):
            raise TypeError(
                f"cannot {op} a {type(other).__name__} and a {type(self).__name__}: "
                f"vectors and covectors live in different spaces. {self._hint}")
        if not isinstance(other, _AtPoint):
            raise TypeError(
                f"cannot {op} a {type(self).__name__} and a {type(other).__name__} "
                f"(a point or a raw array). A point moves along a vector with "
                f"manifold.retract(x, v) or manifold.exp(x, v); wrap raw components with "
                f"{type(self).__name__}(base, components).")
        if self.chart is not None and other.chart is not None and self.chart != other.chart:
            raise ValueError(f"cannot {op} elements expressed in charts {self.chart!r} and {other.chart!r}")
        if not _tree.tree_equal(self.base, other.base):
            raise ValueError(
                f"cannot {op} {type(self).__name__}s at different base points: they live in "
                f"different tangent spaces; transport one first")

    def _new(self, components: Any):
        # components computed here are new arrays: no copy needed
        new = object.__new__(type(self))
        new.base, new.components, new.chart = self.base, components, self.chart
        return new

    # ----------------------------------------------------------- algebra
    def __add__(self, other: Any):
        self._check_partner(other, "add")
        return self._new(_tree.tree_map(lambda a, b: a + b, self.components, other.components))

    def __sub__(self, other: Any):
        self._check_partner(other, "subtract")
        return self._new(_tree.tree_map(lambda a, b: a - b, self.components, other.components))

    def __radd__(self, other: Any):
        if isinstance(other, numbers.Number) and other == 0:  # lets sum() work
            return self
        self._check_partner(other, "add")
        return NotImplemented  # pragma: no cover

    def __rsub__(self, other: Any):
        self._check_partner(other, "subtract")
        return NotImplemented  # pragma: no cover

    def __neg__(self):
        return self._new(_tree.tree_map(lambda a: -a, self.components))

    def __mul__(self, scalar: Any):
        if not _is_scalar(scalar):
            raise TypeError(
                f"a {type(self).__name__} can only be scaled by a scalar, got "
                f"{type(scalar).__name__} of shape {getattr(scalar, 'shape', None)}")
        return self._new(_tree.tree_map(lambda a: a * scalar, self.components))

    __rmul__ = __mul__

    def __truediv__(self, scalar: Any):
        if not _is_scalar(scalar):
            raise TypeError(f"a {type(self).__name__} can only be divided by a scalar")
        if isinstance(scalar, numbers.Number) and scalar == 0:
            raise ZeroDivisionError(f"cannot divide a {type(self).__name__} by zero")
        return self._new(_tree.tree_map(lambda a: a / scalar, self.components))

    def __repr__(self) -> str:
        chart = f", chart={self.chart!r}" if self.chart else ""
        return f"{type(self).__name__}(base={self.base!r}, components={self.components!r}{chart})"

    @property
    def shape(self):
        return _tree.tree_shape(self.components)


class TangentVector(_AtPoint):
    """A vector in the tangent space :math:`T_xM` (a velocity), in a chart's coordinates."""

    __slots__ = ()
    _hint = "Use metric.flat(vector) to get the covector <vector, .>."


class Covector(_AtPoint):
    r"""A covector in :math:`T_x^*M`: a linear function on tangent vectors.

    ``omega(v)`` returns :math:`\omega(v) = \sum_i \omega_i v^i`.
    """

    __slots__ = ()
    _hint = "Use metric.sharp(covector) to get the vector it represents."

    def __call__(self, v: TangentVector):
        if not isinstance(v, TangentVector):
            raise TypeError(
                f"a Covector acts on a TangentVector, got {type(v).__name__}"
                + (" (pair covectors through a metric: metric.inner(sharp(a), sharp(b)))"
                   if isinstance(v, Covector) else ""))
        if self.chart is not None and v.chart is not None and self.chart != v.chart:
            raise ValueError(f"covector in chart {self.chart!r} applied to a vector in chart {v.chart!r}")
        if not _tree.tree_equal(self.base, v.base):
            raise ValueError("a covector can only be applied to a vector at the same base point")
        if isinstance(self.components, dict):
            return _tree.tree_vdot(self.components, v.components)
        # array components of shape (..., dim): one pairing per base point of a batch
        return (self.components * v.components).sum(-1)
