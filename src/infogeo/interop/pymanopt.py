r"""pymanopt adapters, both ways.

:func:`as_pymanopt` presents an infogeo :class:`~infogeo.Manifold` — a chart with
any metric :math:`G(x)` (Fisher, pullback, closed form) — as a
:class:`pymanopt.manifolds.manifold.Manifold`, so pymanopt's solvers run on it:

* inner product :math:`\langle u, v\rangle_x = u^T G(x) v`;
* Riemannian gradient :math:`G(x)^{-1}\nabla f` — the metric's ``sharp`` of the
  Euclidean gradient (a covector in the chart);
* Riemannian Hessian of the Levi-Civita connection in the chart (the Christoffel
  contraction is formed from derivatives of metric-vector products, never the
  full :math:`\Gamma` tensor),

  .. math:: \operatorname{Hess} f(x)[v] = G(x)^{-1}\big(\nabla^2 f(x)\,v
            - \Gamma^k_{\,ij}(x)\,v^j\,\partial_k f(x)\big)_i ,

  the chart Hessian corrected by the Christoffel symbols of :math:`G`;
* retraction, exponential and logarithm maps and distance from the infogeo manifold.

:func:`from_pymanopt` goes the other way: a pymanopt manifold (Sphere, Stiefel,
SPD, Product ...) becomes an infogeo manifold whose points are the flattened
embedded arrays.  infogeo's ``differential`` gives the Euclidean gradient as a
covector; the wrapped metric's ``sharp`` is pymanopt's
``euclidean_to_riemannian_gradient`` and moves use pymanopt's retraction, so
every infogeo solver runs unchanged.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, List, Optional

import numpy as np

from .. import backend as B
from ..geometry.manifold import Manifold
from ..geometry.metric import Metric
from ..geometry.points import random_generator
from ..geometry.vectors import Covector, TangentVector

try:  # pymanopt is an optional dependency (extra "interop")
    import pymanopt
    from pymanopt.manifolds.manifold import Manifold as _PmManifold
except ImportError as _exc:  # pragma: no cover - exercised only without pymanopt
    raise ImportError("infogeo.interop.pymanopt needs pymanopt: pip install 'infogeo[interop]'") from _exc

logger = logging.getLogger(__name__)

__all__ = ["as_pymanopt", "from_pymanopt", "problem", "InfogeoAsPymanopt", "PymanoptAsInfogeo"]


def _np(a: Any) -> np.ndarray:
    return np.asarray(B.to_numpy(a), dtype=float)


# --------------------------------------------------------------------------- infogeo -> pymanopt
class InfogeoAsPymanopt(_PmManifold):
    """A pymanopt manifold backed by an infogeo manifold (see the module docstring).

    Parameters
    ----------
    manifold : infogeo.Manifold
        Points are numpy arrays of shape ``(manifold.dim,)`` in its chart.
    retraction : {"chart", "exp"}
        ``"chart"`` uses the infogeo manifold's retraction (the straight line in
        the chart unless it defines another) and falls back to the exponential
        map when the line leaves the domain; ``"exp"`` always follows geodesics.
    typical_dist : float, optional
        Scale used by pymanopt's trust-region solver for its initial radius
        (default :math:`\\sqrt{\\dim}`).
    """

    def __init__(self, manifold: Manifold, *, retraction: str = "chart",
                 typical_dist: Optional[float] = None):
        if not isinstance(manifold, Manifold):
            raise TypeError(f"as_pymanopt needs an infogeo Manifold, got {type(manifold).__name__}")
        if retraction not in ("chart", "exp"):
            raise ValueError(f"retraction must be 'chart' or 'exp', got {retraction!r}")
        super().__init__(f"infogeo:{manifold.name}", manifold.dim)
        self.manifold = manifold
        self._retraction = retraction
        self._typical_dist = typical_dist

    # pymanopt passes plain numpy arrays; infogeo computes on backend arrays
    def _x(self, point):
        return B.array(np.asarray(point, dtype=float))

    def _vec(self, point, v) -> TangentVector:
        return TangentVector(point, B.array(np.asarray(v, dtype=float)), self.manifold.chart)

    @property
    def typical_dist(self) -> float:
        return self._typical_dist if self._typical_dist is not None else math.sqrt(self.manifold.dim)

    def inner_product(self, point, tangent_vector_a, tangent_vector_b):
        x = self._x(point)
        G_b = self.manifold.metric.mv(x, B.array(np.asarray(tangent_vector_b, dtype=float)))
        return float(np.dot(np.asarray(tangent_vector_a, dtype=float), _np(G_b)))

    def norm(self, point, tangent_vector):
        return math.sqrt(max(self.inner_product(point, tangent_vector, tangent_vector), 0.0))

    def projection(self, point, vector):
        # a chart is an open subset of R^n: every vector is tangent
        return np.asarray(vector, dtype=float)

    to_tangent_space = projection

    def euclidean_to_riemannian_gradient(self, point, euclidean_gradient):
        x = self._x(point)
        df = Covector(x, B.array(np.asarray(euclidean_gradient, dtype=float)), self.manifold.chart)
        return _np(self.manifold.metric.sharp(df).components)

    def euclidean_to_riemannian_hessian(self, point, euclidean_gradient, euclidean_hessian, tangent_vector):
        x = self._x(point)
        metric = self.manifold.metric
        v = B.array(np.asarray(tangent_vector, dtype=float))
        g = np.asarray(euclidean_gradient, dtype=float)
        # the Christoffel term c_i = Gamma^k_ij v^j g_k without forming Gamma: with w = G^-1 g,
        # c = 1/2 (grad_x <w, G(x) v> + (D_v G) w - (D_w G) v), three metric-vector-product derivatives
        w = metric.solve(x, B.array(g))
        t1 = B.grad(lambda y: B.dot(w, metric.mv(y, v)), x)
        t2 = B.jvp(lambda y: metric.mv(y, w), x, v)[1]
        t3 = B.jvp(lambda y: metric.mv(y, v), x, w)[1]
        correction = 0.5 * (_np(t1) + _np(t2) - _np(t3))
        rhs = Covector(x, B.array(np.asarray(euclidean_hessian, dtype=float) - correction), self.manifold.chart)
        return _np(metric.sharp(rhs).components)

    def retraction(self, point, tangent_vector):
        x = self._x(point)
        v = self._vec(x, tangent_vector)
        if self._retraction == "chart":
            y = self.manifold.retract(x, v)
            if self.manifold.belongs(y):
                return _np(y)
            logger.debug("chart retraction left the domain of %s; following the geodesic", self.manifold.name)
        return _np(self.manifold.exp(x, v))

    def exp(self, point, tangent_vector):
        x = self._x(point)
        return _np(self.manifold.exp(x, self._vec(x, tangent_vector)))

    def log(self, point_a, point_b):
        return _np(self.manifold.log(self._x(point_a), self._x(point_b)).components)

    def dist(self, point_a, point_b):
        return float(_np(self.manifold.dist(self._x(point_a), self._x(point_b))))

    def random_point(self):
        # pymanopt draws from numpy's global generator; do the same so np.random.seed applies
        return _np(self.manifold.random_point(np.random.default_rng(np.random.randint(2**31))))

    def random_tangent_vector(self, point):
        v = np.random.randn(self.manifold.dim)
        return v / self.norm(point, v)

    def zero_vector(self, point):
        return np.zeros(self.manifold.dim)

    def transport(self, point_a, point_b, tangent_vector_a):
        # every tangent space of a chart is R^n; the identity on components is a vector transport
        return np.asarray(tangent_vector_a, dtype=float)

    def pair_mean(self, point_a, point_b):
        x = self._x(point_a)
        return _np(self.manifold.geodesic(x, self._x(point_b))(0.5))


def as_pymanopt(manifold: Manifold, *, retraction: str = "chart",
                typical_dist: Optional[float] = None) -> InfogeoAsPymanopt:
    """Wrap an infogeo manifold (with its metric) as a pymanopt manifold.

    Examples
    --------
    >>> pm = as_pymanopt(M)                                  # doctest: +SKIP
    >>> @pymanopt.function.autograd(pm)                      # doctest: +SKIP
    ... def cost(x): return ...
    >>> pymanopt.optimizers.TrustRegions().run(pymanopt.Problem(pm, cost))  # doctest: +SKIP
    """
    return InfogeoAsPymanopt(manifold, retraction=retraction, typical_dist=typical_dist)


def problem(manifold: Any, cost: Callable[[Any], Any]) -> "pymanopt.Problem":
    """A :class:`pymanopt.Problem` for an infogeo cost, differentiated by pymanopt's autograd backend.

    ``manifold`` is an infogeo manifold (wrapped with :func:`as_pymanopt`) or
    already a pymanopt manifold; ``cost`` takes one point array and is written
    with :mod:`infogeo.backend` (or ``autograd.numpy``) functions.
    """
    pm = manifold if isinstance(manifold, _PmManifold) else as_pymanopt(manifold)
    if not callable(cost):
        raise TypeError("cost must be callable")
    return pymanopt.Problem(pm, pymanopt.function.autograd(pm)(cost))


# --------------------------------------------------------------------------- pymanopt -> infogeo
class _Layout:
    """Flatten pymanopt points (arrays, or nested lists for products) into one vector and back."""

    def __init__(self, sample: Any):
        self.shapes: List[Any] = []
        self.nested = isinstance(sample, (list, tuple))
        self._collect(sample)
        self.size = int(sum(int(np.prod(s)) for s in self._leaves(self.shapes)))

    def _collect(self, sample):
        self.shapes = self._shape_tree(sample)

    def _shape_tree(self, a):
        if isinstance(a, (list, tuple)):
            return [self._shape_tree(b) for b in a]
        return tuple(np.shape(a))

    def _leaves(self, tree):
        if isinstance(tree, list):
            for t in tree:
                yield from self._leaves(t)
        else:
            yield tree

    def flatten(self, a) -> np.ndarray:
        def leaves(b):
            if isinstance(b, (list, tuple)):
                for c in b:
                    yield from leaves(c)
            else:
                yield np.ravel(np.asarray(b, dtype=float))
        return np.concatenate(list(leaves(a)))

    def unflatten(self, flat) -> Any:
        flat = np.asarray(flat, dtype=float)
        pos = 0

        def build(tree):
            nonlocal pos
            if isinstance(tree, list):
                return [build(t) for t in tree]
            n = int(np.prod(tree))
            out = flat[pos:pos + n].reshape(tree)
            pos += n
            return out
        return build(self.shapes)


class _PymanoptMetric(Metric):
    r"""The metric of a pymanopt manifold on flattened embedded coordinates.

    ``sharp`` of a Euclidean differential is pymanopt's
    ``euclidean_to_riemannian_gradient``; ``inner`` is pymanopt's inner product.
    ``mv`` (the flat of a tangent vector, as an ambient covector) is built from
    inner products with the coordinate vectors, so it costs one inner product
    per ambient coordinate — use it for small problems only.
    """

    has_matrix = False

    def __init__(self, pm: _PmManifold, layout: _Layout):
        super().__init__(layout.size)
        self.pm, self.layout = pm, layout

    def solve(self, x, b, damping: float = 0.0):
        if damping:
            raise ValueError("damping is not defined for a wrapped pymanopt metric")
        u = self.layout.unflatten
        return B.array(self.layout.flatten(self.pm.euclidean_to_riemannian_gradient(u(_np(x)), u(_np(b)))))

    def inner(self, u: TangentVector, v: TangentVector):
        for a in (u, v):
            if not isinstance(a, TangentVector):
                raise TypeError(f"inner takes TangentVectors, got {type(a).__name__}")
        un = self.layout.unflatten
        return float(self.pm.inner_product(un(_np(u.base)), un(_np(u.components)), un(_np(v.components))))

    def mv(self, x, v):
        un = self.layout.unflatten
        p, vv = un(_np(x)), un(_np(v))
        eye = np.eye(self.layout.size)
        return B.array(np.array([self.pm.inner_product(p, vv, un(e)) for e in eye]))

    def exp(self, x, v):
        un = self.layout.unflatten
        return B.array(self.layout.flatten(self.pm.exp(un(_np(x)), un(_np(v)))))

    def log(self, x, y):
        un = self.layout.unflatten
        return B.array(self.layout.flatten(self.pm.log(un(_np(x)), un(_np(y)))))

    def dist(self, x, y):
        un = self.layout.unflatten
        return float(self.pm.dist(un(_np(x)), un(_np(y))))

    def geodesic(self, x, v):
        def path(t):
            t_arr = np.asarray(t, dtype=float)
            pts = [_np(self.exp(x, float(ti) * v)) for ti in np.atleast_1d(t_arr)]
            return B.array(pts[0] if t_arr.ndim == 0 else np.stack(pts))
        return path

    def christoffel(self, x):
        raise NotImplementedError("a wrapped pymanopt manifold has no chart Christoffel symbols")


class PymanoptAsInfogeo(Manifold):
    """An infogeo manifold backed by a pymanopt manifold.

    Points are the pymanopt points flattened into one vector of length
    ``ambient_dim`` (a product's factors concatenated); :meth:`unflatten` and
    :meth:`flatten` convert.  ``dim`` is the ambient size (infogeo's chart
    dimension), ``intrinsic_dim`` pymanopt's manifold dimension.

    Parameters
    ----------
    pm : pymanopt.manifolds.manifold.Manifold
    atol : float
        Tolerance of :meth:`check_point`: a point must be a fixed point of
        retraction by the zero vector up to ``atol`` (catches points off a
        sphere, non-orthonormal frames ...).
    """

    def __init__(self, pm: _PmManifold, *, atol: float = 1e-6):
        if not isinstance(pm, _PmManifold):
            raise TypeError(f"from_pymanopt needs a pymanopt manifold, got {type(pm).__name__}")
        self.pm = pm
        self.layout = _Layout(pm.random_point())
        self.intrinsic_dim = int(pm.dim)
        self.atol = float(atol)
        super().__init__(self.layout.size, _PymanoptMetric(pm, self.layout), name=f"pymanopt:{pm}")
        # every validation of a point (point, check_point, belongs, the solvers' checks) asks pymanopt
        self._point_check = self._check_on_manifold

    # ------------------------------------------------------------ points
    def flatten(self, point: Any):
        """A pymanopt point (array or list of arrays) as an infogeo point."""
        return B.array(self.layout.flatten(point))

    def unflatten(self, x: Any) -> Any:
        """An infogeo point (or tangent components) as a pymanopt point."""
        return self.layout.unflatten(_np(x))

    def _check_on_manifold(self, x: Any) -> None:
        """Raise ``ValueError`` if the (finite, well-shaped) ``x`` is not a point of the pymanopt manifold."""
        p = self.unflatten(x)
        back = self.layout.flatten(self.pm.retraction(p, self.pm.zero_vector(p)))
        err = float(np.max(np.abs(back - _np(x))))
        if not err <= self.atol:
            raise ValueError(f"point is not on {self.pm} (retraction by the zero vector moves it by {err:.3g}; "
                             f"expected a point such as {type(self.pm).__name__}.random_point() returns)")

    def random_point(self, rng: Optional[np.random.Generator] = None, scale: float = 1.0):
        if rng is not None:  # pymanopt samples from numpy's global generator
            np.random.seed(random_generator(rng).integers(2**31))
        return self.flatten(self.pm.random_point())

    def projection(self, x: Any, v: Any):
        """Project ambient components onto the tangent space at ``x``."""
        return B.array(self.layout.flatten(self.pm.projection(self.unflatten(x), self.unflatten(v))))

    # ------------------------------------------------------------ moving
    def retract(self, x: Any, v: TangentVector):
        self._check_vector(x, v, "retract")
        return B.array(self.layout.flatten(self.pm.retraction(self.unflatten(x), self.unflatten(v.components))))


def from_pymanopt(manifold: _PmManifold, *, atol: float = 1e-6) -> PymanoptAsInfogeo:
    """Wrap a pymanopt manifold as an infogeo manifold (see :class:`PymanoptAsInfogeo`).

    Examples
    --------
    >>> S = from_pymanopt(pymanopt.manifolds.Sphere(50))   # doctest: +SKIP
    >>> ig.solvers.GradientDescent(line_search="armijo").minimize(S, lambda x: -x @ A @ x, x0)  # doctest: +SKIP
    """
    return PymanoptAsInfogeo(manifold, atol=atol)
