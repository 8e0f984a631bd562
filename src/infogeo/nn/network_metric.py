r"""The pullback metric of a network's parameter space, matrix-free.

For a batch :math:`x_1..x_N` and a metric :math:`G_z` on outputs,

.. math:: G(w) = \frac1N \sum_{n=1}^N J_n^T\, G_z(z_n)\, J_n,

evaluated without forming :math:`J`: a Jacobian-vector product :math:`Jv`, the output
metric, and a vector-Jacobian product (Martens 2010; Schraudolph 2002), both on one
cached :class:`~infogeo.geometry.linearization.Linearization` of the network.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from ..geometry.linearization import Linearization, same_state, versions
from ..geometry.pullback import PullbackMetric
from ..linalg import conjugate_gradient
from ._params import Params
from .output_metrics import OutputMetric

if TYPE_CHECKING:  # pragma: no cover
    from .space import ParameterSpace

__all__ = ["NetworkMetric"]


class NetworkMetric(PullbackMetric):
    r"""The pullback metric :math:`\frac1N\sum_n J_n^T G_z J_n` of a :class:`~infogeo.nn.space.ParameterSpace`, matrix-free.

    ``mv(v)`` (or ``mv(x, v)``) is seed 000's ``pullback_mvp``: a forward-mode product
    :math:`Jv`, the output metric, and a reverse-mode product :math:`J^T u`.  ``sharp`` and
    ``solve`` use truncated conjugate gradient (``cg_max_iter`` iterations).
    The point ``x`` defaults to the space's current point.
    """

    has_matrix = False

    def __init__(self, space: "ParameterSpace", output: Optional[OutputMetric] = None):
        super().__init__(space.function, output if output is not None else space.output_metric,
                         dim=None)
        self.space = space
        #: reuse the linearisation (forward graph) across products at the same point
        self.cache = True
        self._cache = None

    def _split(self, args):
        if len(args) == 1:
            return self.space.point, args[0]
        if len(args) == 2:
            return args
        raise TypeError("mv takes (v) or (x, v)")

    def _linearization(self, x: Params) -> "Linearization":
        r"""The network linearised at ``x``, reused while ``x``, the data and buffers are unchanged.

        Successive products at one point (the iterations of a CG solve, or repeated
        ``mv``) then cost two backward passes each and no forward pass.  The key holds
        the tensors themselves (so their ids cannot be recycled) and their version
        counters (bumped by every in-place update, e.g. an optimizer step on the
        model's parameters).  The cache keeps one forward pass's graph alive;
        :meth:`clear_cache` releases it.
        """
        sp = self.space
        tensors = [x[n] for n in sp.names] + sp._state()[0][len(sp.names):]
        state = (tensors, versions(tensors))
        if self._cache is not None and same_state(self._cache[0], state):
            return self._cache[1]
        self._cache = None  # release the previous point's graph before the new forward pass
        lin = Linearization(sp.function, {n: x[n] for n in sp.names})
        if self.cache:
            self._cache = (state, lin)
        return lin

    def clear_cache(self) -> None:
        """Drop the cached linearisation (and the activations it holds)."""
        self._cache = None

    def mv(self, *args) -> Params:
        r""":math:`G v` for a tangent vector's components ``v`` (dict name -> tensor).

        :math:`Jv`, the output metric in closed form :math:`u = G_z Jv / N`, then
        :math:`J^Tu` (seed 000's ``pullback_mvp``), all on one cached forward graph
        (see :class:`~infogeo.geometry.linearization.Linearization`).
        """
        x, v = self._split(args)
        sp = self.space
        sp.layout.check(v, "the tangent vector")
        lin = self._linearization(x)
        with torch.enable_grad():
            Jv = lin.jvp(v)
            u = self.output_metric.mv(lin.z.detach(), Jv) / sp.batch_size
            del Jv
            return lin.vjp(u)

    def matrix(self, x: Optional[Params] = None) -> torch.Tensor:
        """Dense :math:`G`, shape ``(P, P)`` in :class:`ParamLayout` order (Jacobian by ``jacrev``)."""
        sp = self.space
        x = sp.point if x is None else x
        J = torch.func.jacrev(sp.function)({n: x[n].detach() for n in sp.names})
        z = sp.outputs
        Jm = torch.cat([J[n].reshape(tuple(z.shape) + (-1,)) for n in sp.names], dim=-1)  # (N, ..., m, P)
        GJ = self.output_metric.mv(z.unsqueeze(0), Jm.movedim(-1, 0)).movedim(0, -1)
        m, P = z.shape[-1], Jm.shape[-1]
        return torch.einsum("rmp,rmq->pq", Jm.reshape(-1, m, P), GJ.reshape(-1, m, P)) / sp.batch_size

    def solve(self, *args, damping: float = 0.0, max_iter: Optional[int] = None) -> Params:
        r"""Truncated CG for :math:`(G + \lambda I)^{-1} b`; ``solve(b, damping=..)`` or ``solve(x, b, damping)``."""
        if len(args) == 3:
            x, b, damping = args
        else:
            x, b = self._split(args)
        if damping < 0:
            raise ValueError(f"damping must be >= 0, got {damping}")
        return conjugate_gradient(lambda v: self.mv(x, v), b, damping=damping,
                                  max_iter=max_iter or self.space.cg_max_iter, rtol=self.space.cg_rtol)

    def __repr__(self):
        return f"NetworkMetric({self.output_metric!r}, {self.space.layout!r})"
