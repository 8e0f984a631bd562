r"""Matrix-free curvature: products by jvp → :math:`G_z` → vjp, solves by truncated CG (Martens 2010)."""
from __future__ import annotations

from typing import Any, Optional

import torch

from ...geometry.points import positive_int
from ...linalg import conjugate_gradient
from .._params import ParamLayout, Params
from .base import Curvature

#: to_dense / diagonal of an implicit curvature take one product per parameter; refuse beyond this
MAX_DENSE_DIM = 20_000


class Implicit(Curvature):
    r"""The pullback metric as an operator: ``mv`` is ``NetworkMetric.mv`` (never forms :math:`J`).

    ``solve(x, w, damping)`` runs conjugate gradient on :math:`C + \lambda I` for at most
    ``max_iter`` iterations (truncated CG, Martens 2010).  ``diagonal`` and ``to_dense``
    take one product per parameter (small networks, tests).
    """

    def __init__(self, layout: ParamLayout, metric: Any, point: Optional[Params] = None, max_iter: int = 100,
                 rtol: float = 1e-10, outer: Optional[Params] = None):
        super().__init__(layout, point)
        self.metric, self.max_iter, self.rtol, self.outer = metric, positive_int(max_iter, "max_iter"), float(rtol), outer
        self.info = None

    @classmethod
    def build(cls, space: Any, metric: Any, max_iter: Optional[int] = None, rtol: Optional[float] = None,
              **ignored: Any) -> "Implicit":
        """The operator of ``metric`` (a network metric of ``space``) at the space's point; CG truncated at
        ``max_iter`` iterations or relative residual ``rtol`` (default: the space's).  It keeps a copy of the
        point (the model's parameters are views, changed in place by an optimizer step): frozen there, as the
        other representations are."""
        point = {n: t.detach().clone() for n, t in space.point.items()}
        return cls(space.layout, metric, point, max_iter=space.cg_max_iter if max_iter is None else max_iter,
                   rtol=space.cg_rtol if rtol is None else rtol)

    def _mv(self, v):
        # products in the network's precision; CG itself (see solve) in at least float32
        own = {n: t.to(self.point[n].dtype) for n, t in v.items()} if self.point else v
        out = {n: t.to(v[n].dtype) for n, t in self.metric.mv(self.point, own).items()}
        if self.outer is not None:  # C - g g^T (gradient covariance)
            c = sum((self.outer[n] * v[n]).sum() for n in self.layout.names)
            out = {n: out[n] - c * self.outer[n] for n in self.layout.names}
        return out

    def pooled(self, new: Curvature, n: int, m: int) -> Curvature:
        """Micro-batches: the products of both batches weighted by their sizes, solved by the same truncated CG
        (a :class:`~.base.LinearCombination` would solve to convergence)."""
        n, m = self.pool_sizes(new, n, m)
        if not isinstance(new, Implicit) or self.outer is not None or new.outer is not None:
            return super().pooled(new, n, m)
        return Implicit(self.layout, _Pooled([(n / (n + m), self.metric), (m / (n + m), new.metric)]), self.point,
                        max_iter=self.max_iter, rtol=self.rtol)

    def _solve(self, w, damping):
        x, self.info = conjugate_gradient(self._mv, w, damping=damping, max_iter=self.max_iter, rtol=self.rtol,
                                          return_info=True)
        return x

    def _basis_products(self):
        P = self.layout.size
        if P > MAX_DENSE_DIM:
            raise ValueError(f"an implicit curvature of {P} parameters is too large to densify "
                             f"(limit {MAX_DENSE_DIM}); use kind='diag' or 'dense'")
        ref = next(iter(self.point.values()))
        cols = []
        for i in range(P):
            e = torch.zeros(P, dtype=ref.dtype, device=ref.device)
            e[i] = 1
            cols.append(self.layout.flatten(self._mv(self.layout.unflatten(e))))
        return torch.stack(cols, dim=1)

    def to_dense(self) -> torch.Tensor:
        return self._basis_products()

    def diagonal(self) -> Params:
        return self.layout.unflatten(torch.diagonal(self._basis_products()))

    def minus_outer(self, g: Params) -> "Implicit":
        if self.outer is not None:
            raise ValueError("this curvature already subtracts an outer product")
        return Implicit(self.layout, self.metric, self.point, self.max_iter, self.rtol, outer=g)


class _Pooled:
    """The metric of the union of batches: the weighted sum of their metrics' products at one point."""

    def __init__(self, terms):
        self.terms = [(c, t) for c0, m in terms for c, t in ((c0 * ci, mi) for ci, mi in
                                                             (m.terms if isinstance(m, _Pooled) else [(1.0, m)]))]

    def mv(self, point, v):
        out: Optional[Params] = None
        for c, metric in self.terms:
            mv = metric.mv(point, v)
            out = {k: c * t for k, t in mv.items()} if out is None else {k: out[k] + c * t for k, t in mv.items()}
        return out
