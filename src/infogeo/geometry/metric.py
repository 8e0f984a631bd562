r"""Riemannian metrics and the musical isomorphism.

A metric :math:`G(x)` is an inner product :math:`\langle u, v\rangle_x = u^T G(x) v`
on each tangent space.  It converts between vectors and covectors:

.. math::

    v^\flat = G(x)\,v \quad(\text{flat}),\qquad
    \omega^\sharp = G(x)^{-1}\omega \quad(\text{sharp}),

so the Riemannian gradient of :math:`f` is :math:`(df)^\sharp`.

Metrics are made directly (:class:`EuclideanMetric`, :class:`MatrixMetric`), by
pullback (:class:`~infogeo.geometry.pullback.PullbackMetric`) or from a
dissimilarity (:func:`~infogeo.geometry.pullback.metric_from_divergence`).  A
subclass implements :meth:`Metric.matrix` and/or :meth:`Metric.mv`; everything
else (``inner``, ``flat``, ``sharp``, geodesics) follows, and closed forms
override where known.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import numpy as np

from .. import backend as B
from ..backend import tree as _tree
from ..linalg import NotPositiveDefiniteError, conjugate_gradient
from . import points as _points
from .points import batch_shape, check_real, per_point
from .vectors import Covector, TangentVector

# dense solves up to this dimension, conjugate gradient beyond
DENSE_MAX_DIM = 2000
# most conjugate-gradient iterations of a matrix-free solve
CG_MAX_ITER = 100_000


def _linalg_errors() -> tuple:
    errs: list = [np.linalg.LinAlgError]
    torch = __import__("sys").modules.get("torch")
    if torch is not None:
        errs.append(torch.linalg.LinAlgError)
    return tuple(errs)


def _size(x: Any, dim: Optional[int]) -> int:
    """The dimension of a point's chart: ``dim`` when declared, else the last axis of ``x``."""
    if dim is not None:
        return int(dim)
    shape = tuple(getattr(x, "shape", ()))
    return int(shape[-1]) if shape else 1


def check_components(components: Any, dim: Optional[int], what: str) -> Any:
    """``components`` validated as :func:`~infogeo.geometry.points.as_coordinates` does.

    ``TypeError`` for a non-array, complex or boolean entries; ``ValueError`` for the wrong shape
    (a 0-d array included) or NaN/inf.  Returns the float array to compute with (a list converted,
    half precision upcast); a ``{name: tensor}`` dict is only checked for finiteness.
    """
    if isinstance(components, dict):
        if not _tree.tree_all_finite(components):
            raise ValueError(f"{what} contains NaN or inf")
        return components
    out = _points.as_coordinates(components, dim, what)
    if not tuple(getattr(out, "shape", ())):
        raise ValueError(f"a {what} must be an array of shape (..., dim), got a 0-d value {components!r}")
    return out


def _point_dim(x: Any, dim: Optional[int]) -> Optional[int]:
    """The size a vector at ``x`` must have: ``dim`` when declared, else the last axis of ``x``."""
    if dim is not None:
        return dim
    shape = tuple(getattr(x, "shape", ()))
    return int(shape[-1]) if shape else None


def _check_symmetric(G: Any, owner: str) -> None:
    """``ValueError`` unless ``G`` is symmetric up to rounding (relative to its norm).

    The tolerance is the square root of the dtype's epsilon times the norm: a product such as
    ``J.T @ J`` is symmetric only up to rounding, a genuinely non-symmetric matrix is far off.
    """
    try:
        g = _points.numpy_view(G)
    except RuntimeError:  # a tensor traced by torch.func has no values to read; its plain call is checked
        return
    if g.ndim < 2 or g.shape[-1] != g.shape[-2]:
        raise ValueError(f"{owner}: the metric matrix must be square, shape (..., dim, dim), got shape {g.shape}")
    if g.dtype.kind != "f":
        return  # complex/int entries are refused elsewhere; nothing to measure here
    gap = np.abs(g - np.swapaxes(g, -1, -2)).max(initial=0.0)
    scale = np.abs(g).max(initial=0.0)
    if gap > np.sqrt(np.finfo(g.dtype).eps) * scale:
        raise ValueError(f"{owner}: the metric matrix is not symmetric (largest |G - G^T| entry {gap:.3g}, "
                         f"largest |G| entry {scale:.3g}); a metric is a symmetric positive definite matrix")


class Metric:
    """Base class of Riemannian metrics on a chart of dimension ``dim``.

    Subclasses implement :meth:`matrix` (dense :math:`G(x)`) or :meth:`mv`
    (:math:`v \\mapsto G(x) v`), or both.  ``has_matrix`` says whether
    :meth:`matrix` is cheap enough for dense solves.
    """

    has_matrix: bool = True

    def __init__(self, dim: Optional[int] = None):
        self.dim = None if dim is None else _points.positive_int(dim, "dim")

    def dense_at(self, x: Any) -> bool:
        """Whether :meth:`solve` at ``x`` forms the dense matrix (else it runs conjugate gradient on :meth:`mv`).

        Dense when the metric has a matrix and at most ``DENSE_MAX_DIM`` (2000) dimensions;
        :class:`~infogeo.geometry.pullback.PullbackMetric` also weighs its output size.
        """
        return self.has_matrix and not isinstance(x, dict) and _size(x, self.dim) <= DENSE_MAX_DIM

    # ------------------------------------------------------------ matrix
    def matrix(self, x: Any):
        """Dense metric matrix :math:`G(x)`, shape ``(..., dim, dim)`` for points of shape ``(..., dim)``."""
        raise NotImplementedError(f"{type(self).__name__} has no dense matrix; use mv()")

    def mv(self, x: Any, v: Any):
        """Metric-vector product :math:`G(x) v` on raw components (broadcast over leading axes)."""
        v = check_components(v, _point_dim(x, self.dim), "vector")
        G = self.matrix(x)
        if len(G.shape) == 2 and len(getattr(v, "shape", ())) == 1:
            return B.matmul(G, v)
        return B.einsum("...ij,...j->...i", G, v)

    # --------------------------------------------------------- isomorphism
    def solve(self, x: Any, b: Any, damping: float = 0.0):
        r"""Components of :math:`(G(x) + \lambda I)^{-1} b`.

        Dense Cholesky when the matrix is available and small, conjugate gradient
        on :meth:`mv` otherwise.  Raises :class:`~infogeo.linalg.NotPositiveDefiniteError`
        if :math:`G(x) + \lambda I` is not positive definite.
        """
        damping = check_real("damping", damping)
        b = check_components(b, _point_dim(x, self.dim), "right-hand side b")
        if not isinstance(b, dict) and self.dense_at(x):
            G = self.matrix(x)
            if not _tree.tree_all_finite(G):
                raise ValueError(f"{type(self).__name__}: the metric matrix at this point contains NaN or inf")
            if damping:
                G = G + damping * B.eye(G.shape[-1], like=G)
            try:
                L = B.cholesky(G)
            except _linalg_errors() as exc:
                lam = float(np.linalg.eigvalsh(B.to_numpy(G)).min()) if _tree.tree_all_finite(G) else float("nan")
                raise NotPositiveDefiniteError(
                    f"{type(self).__name__} is not positive definite at this point "
                    f"(smallest eigenvalue {lam:.3g}); pass damping > 0 to sharp/solve") from exc
            if not _tree.tree_all_finite(L):
                raise NotPositiveDefiniteError(f"{type(self).__name__} is not positive definite at this point")
            return B.cho_solve(L, b)
        # CG's n iterations suffice in exact arithmetic only; an ill-conditioned G needs several times more
        n = sum(int(np.prod(getattr(leaf, "shape", ()))) for leaf in _tree.leaves(b))
        out, info = conjugate_gradient(lambda v: self.mv(x, v), b, damping=damping,
                                       max_iter=min(10 * max(n, 1), CG_MAX_ITER), return_info=True)
        if not info.converged:
            warnings.warn(f"{type(self).__name__}.solve: conjugate gradient stopped after {info.iterations} "
                          f"iterations at relative residual {info.residual:.3g} (the metric is ill-conditioned "
                          "here); the result is inaccurate: pass damping > 0", RuntimeWarning, stacklevel=2)
        return out

    def flat(self, v: TangentVector) -> Covector:
        r"""Vector to covector: :math:`v^\flat = \langle v, \cdot\rangle = G v`."""
        if not isinstance(v, TangentVector):
            raise TypeError(f"flat takes a TangentVector, got {type(v).__name__}"
                            + ("; did you mean sharp()?" if isinstance(v, Covector) else ""))
        comps = check_components(v.components, self.dim, "tangent vector")
        return Covector(v.base, self.mv(v.base, comps), v.chart)

    def sharp(self, w: Covector, damping: float = 0.0) -> TangentVector:
        r"""Covector to vector: the unique :math:`w^\sharp` with :math:`\langle w^\sharp, u\rangle = w(u)`.

        Parameters
        ----------
        w : Covector
            For example the differential :math:`df_x`; then ``sharp(w)`` is the
            Riemannian gradient.
        damping : float
            Tikhonov damping :math:`\lambda`: returns :math:`(G + \lambda I)^{-1} w`.
        """
        if not isinstance(w, Covector):
            raise TypeError(f"sharp takes a Covector, got {type(w).__name__}"
                            + ("; did you mean flat()?" if isinstance(w, TangentVector) else ""))
        comps = check_components(w.components, self.dim, "covector")
        return TangentVector(w.base, self.solve(w.base, comps, damping), w.chart)

    def inner(self, u: TangentVector, v: TangentVector):
        r""":math:`\langle u, v\rangle_x = u^T G(x) v`."""
        for a in (u, v):
            if not isinstance(a, TangentVector):
                raise TypeError(f"inner takes TangentVectors, got {type(a).__name__}")
        return self.flat(u)(v)

    def norm(self, v: TangentVector):
        r""":math:`\|v\|_x = \sqrt{\langle v, v\rangle_x}`."""
        return B.sqrt(self.inner(v, v))

    def damped(self, damping: float) -> "Metric":
        r"""The metric :math:`G + \lambda I` (Tikhonov damping)."""
        return DampedMetric(self, damping)

    # --------------------------------------------------------- geodesics
    def christoffel(self, x: Any):
        r"""Christoffel symbols :math:`\Gamma^k_{ij}(x)`, shape ``(dim, dim, dim)``, by autodiff."""
        from . import geodesics
        return geodesics.christoffel(self, x)

    def exp(self, x: Any, v: Any):
        """Riemannian exponential on components (generic: integrates the geodesic equation)."""
        from . import geodesics
        return geodesics.exp(self, x, v)

    def log(self, x: Any, y: Any):
        """Riemannian logarithm on components (generic: geodesic shooting, pair by pair for batches)."""
        from . import geodesics
        return per_point(lambda a, b: geodesics.log(self, a, b), x, y, empty=tuple(x.shape[-1:]))

    def geodesic(self, x: Any, v: Any):
        """The geodesic ``t -> exp_x(t v)`` for t (scalar or array) in [0, 1].

        For batches, ``path(t)`` has shape ``(..., dim)`` at a scalar ``t`` and
        ``(len(t), ..., dim)`` for an array of times.
        """
        from . import geodesics
        if len(x.shape) == 1 and len(v.shape) == 1:
            return geodesics.geodesic(self, x, v)
        lead = batch_shape(x, v, dims=(1, 1))
        xb, vb = (B.broadcast_to(a, lead + tuple(a.shape[-1:])) for a in (x, v))
        paths = [geodesics.geodesic(self, xb[i], vb[i]) for i in np.ndindex(*lead)]

        def path(t):
            def at(ti):
                return B.reshape(B.stack([p(ti) for p in paths]), tuple(xb.shape))
            t_arr = np.asarray(t, dtype=float)
            return at(float(t_arr)) if t_arr.ndim == 0 else B.stack([at(float(ti)) for ti in t_arr])
        return path

    def dist(self, x: Any, y: Any):
        """Geodesic distance (generic: the metric norm of ``log(x, y)``, pair by pair for batches)."""
        def single(a, b):
            v = self.log(a, b)
            return B.sqrt(B.sum(v * self.mv(a, v), axis=-1))
        return per_point(single, x, y, empty=())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim})"


class EuclideanMetric(Metric):
    """The identity metric :math:`G = I`; geodesics are straight lines."""

    def _point(self, x):
        """``x`` checked (G ignores it, but a non-point is a caller's error, not a point of R^n)."""
        return x if isinstance(x, dict) else _points.as_coordinates(x, self.dim, "point")

    def matrix(self, x):
        x = self._point(x)
        return B.eye(self.dim if self.dim is not None else x.shape[-1], like=x)

    def mv(self, x, v):
        x = self._point(x)
        # a copy: G v = v must not be the caller's array itself
        return _tree.tree_copy(check_components(v, _point_dim(x, self.dim), "vector"))

    def solve(self, x, b, damping: float = 0.0):
        damping = check_real("damping", damping)
        x = self._point(x)
        b = check_components(b, _point_dim(x, self.dim), "right-hand side b")
        return _tree.tree_map(lambda t: t / (1.0 + damping), b)

    def christoffel(self, x):
        d = x.shape[-1]
        return B.zeros((d, d, d), like=x)

    def exp(self, x, v):
        return x + v

    def log(self, x, y):
        return y - x

    def dist(self, x, y):
        return B.norm(y - x, axis=-1)

    def geodesic(self, x, v):
        def path(t):
            t_arr = np.asarray(t, dtype=float)
            if t_arr.ndim == 0:
                return x + float(t_arr) * v
            return B.stack([x + float(ti) * v for ti in t_arr])
        return path


class MatrixMetric(Metric):
    """A metric given by a function of the point: ``G = MatrixMetric(lambda x: ..., dim)``.

    Example: the Poincaré half-plane ``MatrixMetric(lambda x: eye(2) / x[1]**2, dim=2)``.
    Geodesics, Christoffel symbols and distances come from autodiff of ``matrix_fn``.

    Parameters
    ----------
    matrix_fn : callable
        ``x -> G(x)`` for one point of shape ``(dim,)``.
    dim : int, optional
    vectorized : bool
        Whether ``matrix_fn`` also maps a batch ``(..., dim)`` to ``(..., dim, dim)``.  When
        ``False`` (default) batches are evaluated point by point: a function written with
        ``x[0], x[1]`` would read rows of a batch as coordinates and return a wrong matrix.
    """

    def __init__(self, matrix_fn: Callable[[Any], Any], dim: Optional[int] = None, *, vectorized: bool = False):
        super().__init__(dim)
        if not callable(matrix_fn):
            raise TypeError(f"MatrixMetric needs a function x -> G(x), got {type(matrix_fn).__name__}")
        self._matrix_fn = matrix_fn
        self.vectorized = bool(vectorized)

    @property
    def batches_points(self) -> bool:
        """Whether the function evaluates a batch of points itself (see :mod:`~infogeo.geometry.geodesics_bvp`)."""
        return self.vectorized

    @property
    def point_function(self) -> Callable[[Any], Any]:
        """``matrix_fn`` itself: called on single points, or by collocation on coordinates as rows."""
        return self._matrix_fn

    def matrix(self, x):
        G = per_point(self._matrix_fn, x, vectorized=self.vectorized)
        _check_symmetric(G, type(self).__name__)
        return G


class DampedMetric(Metric):
    r""":math:`G(x) + \lambda I` for a metric :math:`G`."""

    def __init__(self, base: Metric, damping: float):
        if not isinstance(base, Metric):
            raise TypeError(f"DampedMetric needs a Metric, got {type(base).__name__}")
        super().__init__(base.dim)
        self.base, self.damping = base, check_real("damping", damping, positive=True)
        self.has_matrix = base.has_matrix

    def dense_at(self, x: Any) -> bool:
        return self.base.dense_at(x)

    def matrix(self, x):
        G = self.base.matrix(x)
        return G + self.damping * B.eye(G.shape[-1], like=G)

    def mv(self, x, v):
        v = check_components(v, _point_dim(x, self.dim), "vector")
        return _tree.tree_map(lambda a, b: a + self.damping * b, self.base.mv(x, v), v)

    def solve(self, x, b, damping: float = 0.0):
        return self.base.solve(x, b, damping=self.damping + check_real("damping", damping))

