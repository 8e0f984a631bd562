r"""Curvature representations: one protocol for every representation of the metric at a point.

Every representation :math:`C` of the metric at a point (dense, implicit, diagonal,
block-diagonal, K-FAC, ...) is a :class:`Curvature`: a
:class:`~infogeo.geometry.metric.Metric` defined at that one point, with the metric
protocol's signatures, on ``{name: tensor}`` components (or the vector types):

* ``mv(x, v)`` — :math:`Cv` (``x`` the point, ``None`` for the curvature's own: a curvature is
  the metric frozen where it was built, the same matrix at every ``x``);
* ``solve(x, b, damping=λ)`` — :math:`(C + \lambda I)^{-1} b`;
* ``sharp(covector, damping=λ)`` / ``flat(vector)`` / ``inner(u, v)`` — the musical isomorphisms;
* ``diagonal()`` — :math:`\operatorname{diag} C`;
* ``to_dense()`` / ``matrix(x)`` — the matrix, in :class:`~infogeo.nn._params.ParamLayout` order;
* ``ema(new, decay)`` — :math:`\beta C + (1-\beta) C_\text{new}`; ``is_finite()``; ``precompute()``;

so a curvature can be handed to any solver that takes a ``metric=`` (a fixed preconditioner).
The operator forms are shorter: ``C @ v`` and ``C.inverse(damping) @ b`` (components, flat
vectors or matrices in layout order), with the algebra ``C1 + C2``, ``c * C``,
``to_scipy()``, and the estimators of :mod:`.operators` (Hutchinson and
Hutch++ traces and diagonals, top eigenvalues by Lanczos).

Block-structured representations are :class:`~.blockwise.BlockCurvature` objects.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from ...geometry.metric import Metric
from ...geometry.points import check_real, positive_int, tensor_number
from ...geometry.vectors import Covector, TangentVector
from ...linalg import conjugate_gradient
from .._deprecated import ONE_ARGUMENT, one_argument
from .._params import ParamLayout, Params, all_finite
from . import operators

Vector = Union[Params, TangentVector]


def _check_damping(damping: float) -> float:
    """``damping`` as a float, if it is a real number, finite (an infinite one would make every solve zero)
    and >= 0."""
    damping = tensor_number(damping, "damping")
    if isinstance(damping, bool) or not isinstance(damping, numbers.Real):
        raise TypeError(f"damping must be a real number, got {type(damping).__name__} {damping!r}")
    value = float(damping)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"damping must be >= 0 and finite, got {damping!r}")
    return value


class Curvature(Metric):
    """Base class of curvature representations at a fixed point (see the module docstring).

    Subclasses implement ``_mv`` (and ``_solve``, ``diagonal``, ``to_dense`` where they
    have closed forms); the public methods check their arguments and convert the
    vector types.
    """

    has_matrix = False

    def __init__(self, layout: ParamLayout, point: Optional[Params] = None):
        super().__init__(layout.size)
        self.layout = layout
        self.point = point

    # ------------------------------------------------------------ protocol
    def _components(self, v: Any, cls: type, what: str) -> Params:
        if isinstance(v, (TangentVector, Covector)):
            if not isinstance(v, cls):
                raise TypeError(f"{what} takes a {cls.__name__} or components, got a {type(v).__name__}")
            v = v.components
        self.layout.check(v, what)
        return v

    def _check_point(self, x: Any) -> None:
        """``x`` is ``None`` (this curvature's point) or a point of its parameter layout."""
        if x is not None:
            if not isinstance(x, dict):
                raise TypeError(f"x must be a point {{name: tensor}} or None, got {type(x).__name__}")
            self.layout.check(x, "the point x")

    def mv(self, x: Any, v: Any = ONE_ARGUMENT) -> Params:
        r""":math:`Cv` as components ``{name: tensor}`` (the metric protocol's ``mv(x, v)``).

        ``x``: a point (``None``: the curvature's own).  The curvature is the metric frozen at the point
        it was built at, so the product is the same at every ``x`` (the way a preconditioner is reused
        between refreshes); ``v``: components or a :class:`TangentVector`.
        Computed in the curvature's own precision (float32 statistics of a half-precision model) and
        returned in the vector's.  (The one-argument form ``mv(v)`` of infogeo 0.1 still works, with a
        ``FutureWarning``; it will be removed.)
        """
        if v is ONE_ARGUMENT:
            x, v = None, one_argument(type(self).__name__, "mv", x, "C @ v or C.mv(None, v)")
        self._check_point(x)
        v = self._components(v, TangentVector, "the vector")
        return self._in_own_precision(self._mv, v)

    def solve(self, x: Any, b: Any = ONE_ARGUMENT, damping: float = 0.0) -> Params:
        r""":math:`(C + \lambda I)^{-1} b` (the metric protocol's ``solve(x, b, damping)``).

        ``x``: a point (``None``: the curvature's own; the curvature is frozen there, see :meth:`mv`);
        ``b``: components or a :class:`Covector`.
        A right-hand side holding NaN or inf is refused (its solve would be all NaN); the solve runs in
        the curvature's own precision and returns the right-hand side's.  (The form ``solve(b, damping=)``
        of infogeo 0.1 still works, with a ``FutureWarning``; it will be removed.)
        """
        if b is ONE_ARGUMENT:
            x, b = None, one_argument(type(self).__name__, "solve", x, "C.inverse(damping) @ b or C.solve(None, b, damping)")
        self._check_point(x)
        w = self._components(b, Covector, "the right-hand side")
        damping = _check_damping(damping)
        if not all_finite(w.values()):
            bad = [n for n, t in w.items() if not bool(torch.isfinite(t).all())]
            raise ValueError(f"the right-hand side of solve holds NaN or inf (in {bad[:3]}); nothing to solve")
        return self._in_own_precision(lambda y: self._solve(y, damping), w)

    def inverse(self, damping: float = 0.0) -> "Inverse":
        r"""The operator :math:`(C + \lambda I)^{-1}` at this point: ``C.inverse(damping) @ b``."""
        return Inverse(self, _check_damping(damping))

    def _in_own_precision(self, op, v: Params) -> Params:
        """``op(v)`` with ``v`` in the curvature's working precision (at least float32), the result cast back to
        ``v``'s dtype."""
        dt = self._reference().dtype
        if dt.is_floating_point:
            dt = torch.promote_types(dt, torch.float32)
        given = {n: t.dtype for n, t in v.items()}
        if not dt.is_floating_point or all(d == dt for d in given.values()):
            return op(v)
        out = op({n: t.to(dt) for n, t in v.items()})
        return {n: t.to(given[n]) for n, t in out.items()}

    def sharp(self, w: Covector, damping: float = 0.0) -> TangentVector:
        r"""The vector :math:`(C + \lambda I)^{-1} w` of a covector (natural gradient for :math:`w = d\mathcal L`)."""
        if not isinstance(w, Covector):
            raise TypeError(f"sharp takes a Covector, got {type(w).__name__}")
        return TangentVector(w.base, self.solve(None, w, damping), w.chart)

    def flat(self, v: TangentVector) -> Covector:
        r"""The covector :math:`Cv = \langle v, \cdot\rangle_C` of a vector."""
        if not isinstance(v, TangentVector):
            raise TypeError(f"flat takes a TangentVector, got {type(v).__name__}")
        return Covector(v.base, self.mv(None, v), v.chart)

    def inner(self, u: TangentVector, v: TangentVector) -> torch.Tensor:
        r""":math:`u^T C v`."""
        return self.flat(u)(v)

    def diagonal(self) -> Params:
        r""":math:`\operatorname{diag} C` as ``{name: tensor}``."""
        raise NotImplementedError(f"{type(self).__name__} has no diagonal")

    def to_dense(self) -> torch.Tensor:
        """The matrix, shape ``(P, P)``, in the layout order of ``model.named_parameters()``."""
        raise NotImplementedError(f"{type(self).__name__} has no dense form")

    def matrix(self, x: Any = None) -> torch.Tensor:
        """``to_dense()`` (the :class:`~infogeo.geometry.metric.Metric` name; the point is fixed)."""
        return self.to_dense()

    def ema(self, new: "Curvature", decay: float) -> "Curvature":
        r"""Exponential moving average :math:`\beta\,C + (1-\beta)\,C_\text{new}` (:math:`\beta` = ``decay``)."""
        decay = self.mixing(new, decay)
        return LinearCombination([(decay, self), (1.0 - decay, new)])

    def pooled(self, new: "Curvature", n: int, m: int) -> "Curvature":
        """The statistics of the union of this batch of ``n`` examples and ``new``'s of ``m`` (micro-batches)."""
        n, m = self.pool_sizes(new, n, m)
        return self.ema(new, n / (n + m))

    def mixing(self, new: Any, decay: Any) -> float:
        """``decay`` as a weight in [0, 1] for averaging with ``new``, a curvature on the same parameters (else a
        clear error: the averages of :meth:`ema` and :meth:`pooled` take nothing else)."""
        if not isinstance(new, Curvature):
            raise TypeError(f"a curvature is averaged with another curvature, got {type(new).__name__}")
        if new.layout != self.layout:
            raise ValueError("cannot combine curvatures of different parameter layouts")
        decay = check_real("decay", decay)
        if decay > 1:
            raise ValueError(f"decay must lie in [0, 1], got {decay!r}")
        return decay

    def pool_sizes(self, new: Any, n: Any, m: Any) -> Tuple[int, int]:
        """The example counts of :meth:`pooled` (integers >= 1; ``new`` checked by :meth:`mixing`)."""
        self.mixing(new, 0.5)
        return positive_int(n, "n (this batch's examples)"), positive_int(m, "m (the other batch's examples)")

    def is_finite(self) -> bool:
        """Whether the representation holds no NaN or inf (for an operator: one product with a random vector)."""
        ref = self._reference()
        g = torch.Generator(device=ref.device).manual_seed(0)
        probe = torch.randn(self.layout.size, dtype=ref.dtype, device=ref.device, generator=g)
        return bool(torch.isfinite(self.layout.flatten(self._mv(self.layout.unflatten(probe)))).all())

    def precompute(self, damping: Optional[float] = None) -> "Curvature":
        """Factorise now (eigendecompositions, damped inverses at ``damping``, ...), so that later solves are cheap."""
        return self

    def same_structure(self, other: "Curvature") -> bool:
        """Whether :meth:`ema` can average ``other`` into this one statistic by statistic."""
        return False

    def minus_outer(self, g: Params) -> "Curvature":
        r""":math:`C - gg^T` (the gradient covariance from the empirical Fisher)."""
        raise NotImplementedError(f"{type(self).__name__} cannot represent C - g g^T; use 'dense', 'diag', "
                                  "'block' or 'implicit'")

    def damped(self, damping: float) -> "Curvature":
        r""":math:`C + \lambda I`."""
        return self + ScaledIdentity(self.layout, _check_damping(damping), self.point, self._reference())

    def _mv(self, v: Params) -> Params:
        raise NotImplementedError

    def _solve(self, w: Params, damping: float) -> Params:
        x, self.info = conjugate_gradient(self._mv, w, damping=damping, return_info=True)
        return x

    def _reference(self) -> torch.Tensor:
        """A tensor with the dtype and device of this curvature."""
        if self.point:
            return next(iter(self.point.values()))
        return torch.zeros((), dtype=torch.get_default_dtype())

    # ------------------------------------------------------------ operator algebra
    def __matmul__(self, v: Union[torch.Tensor, Params]) -> Union[torch.Tensor, Params]:
        """``C @ v`` for a flat vector ``(P,)`` or matrix ``(P, k)`` in layout order (or components)."""
        if isinstance(v, (dict, TangentVector)):
            return self.mv(None, v)
        return _on_flat(self.layout, self._mv, v, "C @ v")

    def __add__(self, other: "Curvature") -> "Curvature":
        if not isinstance(other, Curvature):
            return NotImplemented
        return LinearCombination([(1.0, self), (1.0, other)])

    def __sub__(self, other: "Curvature") -> "Curvature":
        if not isinstance(other, Curvature):
            return NotImplemented
        return LinearCombination([(1.0, self), (-1.0, other)])

    def __mul__(self, c: Any) -> "Curvature":
        if not isinstance(c, numbers.Real):
            return NotImplemented
        return LinearCombination([(float(c), self)])

    __rmul__ = __mul__

    def __neg__(self) -> "Curvature":
        return -1.0 * self

    def to_scipy(self) -> Any:
        """A :class:`scipy.sparse.linalg.LinearOperator` of :math:`C` in the flat layout order (float64, CPU)."""
        return operators.to_scipy(self)

    def estimate_trace(self, samples: int = 30, method: str = "hutch++",
                       generator: Optional[torch.Generator] = None) -> "operators.Estimate":
        """Randomised :math:`\\operatorname{tr} C` (see :func:`.operators.hutchinson_trace`, :func:`.operators.hutchpp_trace`)."""
        if method == "hutch++":
            return operators.hutchpp_trace(self, samples, generator=generator)
        if method == "hutchinson":
            return operators.hutchinson_trace(self, samples, generator=generator)
        raise ValueError(f"unknown trace estimator {method!r}; expected 'hutch++' or 'hutchinson'")

    def estimate_diagonal(self, samples: int = 30, generator: Optional[torch.Generator] = None) -> Params:
        """Randomised :math:`\\operatorname{diag} C` (see :func:`.operators.hutchinson_diagonal`)."""
        return self.layout.unflatten(operators.hutchinson_diagonal(self, samples, generator=generator).value)

    def top_eigenvalues(self, k: int = 1, **options: Any) -> torch.Tensor:
        """The ``k`` largest eigenvalues by Lanczos (see :func:`.operators.top_eigenvalues`)."""
        return operators.top_eigenvalues(self, k, **options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.layout!r})"


def _on_flat(layout: ParamLayout, op: Callable[[Params], Params], v: Any, what: str) -> torch.Tensor:
    """``op`` on a flat vector ``(P,)`` in layout order, or on each column of a matrix ``(P, k)``."""
    if not isinstance(v, torch.Tensor) or v.dim() not in (1, 2) or v.shape[0] != layout.size:
        raise ValueError(f"{what} needs a tensor of shape ({layout.size},) or ({layout.size}, k), "
                         f"got {getattr(v, 'shape', type(v).__name__)}")
    cols = [v] if v.dim() == 1 else [v[:, j] for j in range(v.shape[1])]
    out = [layout.flatten(op(layout.unflatten(c))) for c in cols]
    return out[0] if v.dim() == 1 else torch.stack(out, dim=1)


class Inverse:
    r"""The operator :math:`(C + \lambda I)^{-1}` of a curvature (``C.inverse(damping)``): ``@`` solves."""

    def __init__(self, curvature: Curvature, damping: float):
        self.curvature, self.damping = curvature, damping

    def __matmul__(self, b: Union[torch.Tensor, Params, Covector]) -> Union[torch.Tensor, Params]:
        C = self.curvature
        if isinstance(b, (dict, Covector)):
            return C.solve(None, b, self.damping)
        return _on_flat(C.layout, lambda c: C.solve(None, c, self.damping), b, "C.inverse(damping) @ b")

    def __repr__(self) -> str:
        return f"Inverse({self.curvature!r}, damping={self.damping})"


def _total(terms: Iterable[torch.Tensor]) -> torch.Tensor:
    """The sum of a non-empty sequence of tensors."""
    it = iter(terms)
    out = next(it)
    for t in it:
        out = out + t
    return out


class LinearCombination(Curvature):
    r""":math:`\sum_i c_i C_i` for curvatures on one layout (``C1 + C2``, ``c * C``, ``ema``).

    ``solve`` runs conjugate gradient on the products (the sum of positive
    semi-definite terms with :math:`c_i \ge 0` is positive semi-definite).
    """

    def __init__(self, terms: Sequence[Tuple[float, Curvature]]):
        flat: List[Tuple[float, Curvature]] = []
        for c, C in terms:
            if isinstance(C, LinearCombination):
                flat += [(c * ci, Ci) for ci, Ci in C.terms]
            else:
                flat.append((float(c), C))
        layout = flat[0][1].layout
        if any(C.layout != layout for _, C in flat):
            raise ValueError("cannot combine curvatures of different parameter layouts")
        super().__init__(layout, flat[0][1].point)
        self.terms: List[Tuple[float, Curvature]] = flat

    def _mv(self, v):
        out = None
        for c, C in self.terms:
            Cv = C._mv(v)
            out = {n: c * Cv[n] for n in self.layout.names} if out is None else \
                {n: out[n] + c * Cv[n] for n in self.layout.names}
        return out

    def diagonal(self) -> Params:
        ds = [(c, C.diagonal()) for c, C in self.terms]
        return {n: _total(c * d[n] for c, d in ds) for n in self.layout.names}

    def to_dense(self) -> torch.Tensor:
        return _total(c * C.to_dense() for c, C in self.terms)

    def is_finite(self) -> bool:
        return all(C.is_finite() for _, C in self.terms)

    def precompute(self, damping: Optional[float] = None) -> "LinearCombination":
        for _, C in self.terms:
            C.precompute(damping)
        return self

    def _reference(self):
        return self.terms[0][1]._reference()

    def __repr__(self):
        return " + ".join(f"{c:g}*{C!r}" for c, C in self.terms)


class ScaledIdentity(Curvature):
    r""":math:`cI` on a layout (for damping: ``C + c * I``)."""

    def __init__(self, layout: ParamLayout, c: float = 1.0, point: Optional[Params] = None,
                 like: Optional[torch.Tensor] = None):
        super().__init__(layout, point)
        self.c = float(c)
        self._like = like

    def _mv(self, v):
        return {n: self.c * v[n] for n in self.layout.names}

    def _solve(self, w, damping):
        return {n: w[n] / (self.c + damping) for n in self.layout.names}

    def diagonal(self) -> Params:
        ref = self._reference()
        return self.layout.unflatten(torch.full((self.layout.size,), self.c, dtype=ref.dtype, device=ref.device))

    def to_dense(self) -> torch.Tensor:
        ref = self._reference()
        return self.c * torch.eye(self.layout.size, dtype=ref.dtype, device=ref.device)

    def is_finite(self) -> bool:
        return bool(torch.isfinite(torch.tensor(self.c)))

    def _reference(self):
        return self._like if self._like is not None else super()._reference()
