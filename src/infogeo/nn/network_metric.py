r"""The pullback metric of a network's parameter space, matrix-free.

For a batch :math:`x_1..x_N` and a metric :math:`G_z` on outputs,

.. math:: G(w) = \frac1N \sum_{n=1}^N J_n^T\, G_z(z_n)\, J_n,\qquad J_n = \partial f(w, x_n)/\partial w,

evaluated without forming :math:`J`: a Jacobian-vector product :math:`Jv`, the output
metric, and a vector-Jacobian product (Schraudolph 2002; Martens 2010), both on one
cached :class:`~infogeo.geometry.linearization.Linearization` of the network.
It is the Gauss-Newton matrix for a Euclidean :math:`G_z` and the network's Fisher
information for a likelihood's Fisher metric (Amari 1998; Martens 2020).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union

import torch

from ..geometry.linearization import Linearization, composite_attention
from ..geometry.pullback import PullbackMetric
from ..geometry.vectors import Covector, TangentVector
from ..linalg import conjugate_gradient
from ._deprecated import ONE_ARGUMENT, one_argument
from ._params import Params
from .output_metrics import OutputMetric

if TYPE_CHECKING:  # pragma: no cover
    from .curvature.implicit import Implicit
    from .space import ParameterSpace

__all__ = ["NetworkMetric"]


class NetworkMetric(PullbackMetric):
    r"""The pullback metric :math:`\frac1N\sum_n J_n^T G_z J_n` of a :class:`~infogeo.nn.space.ParameterSpace`.

    A metric *field*: it is defined at every point (parameter dict) :math:`w`.  It follows
    the :class:`~infogeo.geometry.metric.Metric` protocol that the solvers use,

    * ``mv(x, v)`` — :math:`G(x)v` on components (``{name: tensor}``);
    * ``solve(x, b, damping)`` — :math:`(G(x) + \lambda I)^{-1} b` by truncated conjugate
      gradient (``cg_max_iter`` iterations of the space);
    * ``sharp(covector, damping=)``, ``flat(vector)``, ``inner(u, v)`` — at the vectors' base point;
    * ``matrix(x)`` — the dense matrix (small networks),

    where ``x=None`` stands for the base point of a vector or covector argument and for the
    space's current point otherwise.  :meth:`at` gives the metric at one point as a curvature object
    (:class:`~infogeo.nn.curvature.implicit.Implicit`, with the operator algebra and
    estimators of :mod:`infogeo.nn.curvature.operators`).
    """

    has_matrix = False

    def __init__(self, space: "ParameterSpace", output: Optional[OutputMetric] = None):
        super().__init__(space.function, output if output is not None else space.output_metric,
                         dim=space.layout.size)
        self.space = space

    # ---------------------------------------------------------- the map
    def linearize(self, x: Optional[Params] = None) -> Linearization:
        r"""The network linearised at ``x`` (default: the current point), reused while nothing changed.

        Successive products at one point (the iterations of a CG solve, or repeated
        ``mv``) then cost two backward passes each and no forward pass.  The cache key
        holds the point's tensors, the data and the model's buffers themselves (so
        their ids cannot be recycled) and their version counters (bumped by every
        in-place update, e.g. an optimizer step on the model's parameters).
        """
        sp = self.space
        x = sp.point if x is None else x
        key = [x[n] for n in sp.names] + sp._state()[0][len(sp.names):]
        return self._linearizations.get(sp.function, x, key=key, build=lambda: sp.linearize(x))

    @property
    def cache(self) -> bool:  # noqa: D401
        """Whether the linearisation is kept between products (default True)."""
        return self._linearizations.enabled

    @cache.setter
    def cache(self, value: bool) -> None:
        self._linearizations.enabled = bool(value)
        if not value:
            self._linearizations.clear()

    def _output_mv(self, z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return self.output_metric.mv(z, u) / self.space.batch_size

    def _check_output(self, z: Any) -> None:  # checked once, when the space was built
        return None

    # ---------------------------------------------------------- protocol
    def _point(self, x: Optional[Params], v: Any) -> Params:
        """The point of a product: ``x``, else the base of a vector or covector, else the current point."""
        if x is not None:
            return self.space._as_point(x)   # checked (NaN gave NaN products with no sign)
        return v.base if isinstance(v, (TangentVector, Covector)) else self.space.point

    def mv(self, x: Optional[Params], v: Any = ONE_ARGUMENT) -> Params:
        r""":math:`G(x) v` as components ``{name: tensor}`` (the metric protocol).

        ``x``: a point ``{name: tensor}``, or ``None`` for the base point of ``v`` when it is a
        :class:`~infogeo.geometry.vectors.TangentVector` and the space's current point otherwise.
        (The one-argument form ``mv(v)`` of infogeo 0.1 still works, with a ``FutureWarning``.)
        """
        if v is ONE_ARGUMENT:
            x, v = None, one_argument("NetworkMetric", "mv", x, "mv(None, v), or metric.at() @ v")
        x = self._point(x, v)
        if isinstance(v, TangentVector):
            v = v.components
        self.space.layout.check(v, "the tangent vector")
        with torch.enable_grad():
            return super().mv(x, v)

    def matrix(self, x: Optional[Params] = None) -> torch.Tensor:
        """Dense :math:`G(x)`, shape ``(P, P)`` in :class:`~infogeo.nn._params.ParamLayout` order (``jacrev``)."""
        sp = self.space
        x = sp.point if x is None else sp._as_point(x)   # a given point checked: finite, this space's shapes
        prim = {n: x[n].detach() for n in sp.names}

        def outputs(p):
            z = sp.function(p)
            return z, z.detach()
        # z from the very forward pass J is taken in: a random forward (active dropout) then gives the
        # metric of one sampled network, as every other representation does.  Grad enabled (the optimizer's
        # step runs under no_grad): some kernels (a float32 LSTM's) take an inference path there that has no
        # backward, though jacrev asks for one
        with torch.enable_grad(), composite_attention():  # the fused attention kernels have no vmap rule
            J, z = torch.func.jacrev(outputs, has_aux=True)(prim)
        Jm = torch.cat([J[n].reshape(tuple(z.shape) + (-1,)) for n in sp.names], dim=-1)  # (N, ..., m, P)
        GJ = self.output_metric.mv(z.unsqueeze(0), Jm.movedim(-1, 0)).movedim(0, -1)
        m, P = z.shape[-1], Jm.shape[-1]
        return torch.einsum("rmp,rmq->pq", Jm.reshape(-1, m, P), GJ.reshape(-1, m, P)) / sp.batch_size

    def solve(self, x: Optional[Params], b: Any = ONE_ARGUMENT, damping: float = 0.0,
              max_iter: Optional[int] = None) -> Params:
        r""":math:`(G(x) + \lambda I)^{-1} b` by truncated conjugate gradient (the metric protocol).

        ``x``: a point, or ``None`` for the base point of a :class:`~infogeo.geometry.vectors.Covector`
        ``b`` and the space's current point otherwise.  (The form ``solve(b, damping=)`` of infogeo 0.1
        still works, with a ``FutureWarning``.)
        """
        if b is ONE_ARGUMENT:
            x, b = None, one_argument("NetworkMetric", "solve", x, "solve(None, b, damping)")
        x = self._point(x, b)
        if isinstance(b, Covector):
            b = b.components
        damping = float(damping)
        if not damping >= 0:
            raise ValueError(f"damping must be >= 0, got {damping}")
        self.space.layout.check(b, "the right-hand side")
        return conjugate_gradient(lambda v: self.mv(x, v), b, damping=damping,
                                  max_iter=max_iter or self.space.cg_max_iter, rtol=self.space.cg_rtol)

    def at(self, x: Optional[Params] = None) -> "Implicit":
        """The metric at ``x`` (default: the current point) as an :class:`~infogeo.nn.curvature.implicit.Implicit` curvature."""
        from .curvature.implicit import Implicit
        sp = self.space
        return Implicit(sp.layout, self, sp.point if x is None else x, max_iter=sp.cg_max_iter, rtol=sp.cg_rtol)

    # ---------------------------------------------------------- operators (at the current point)
    def to_scipy(self) -> Any:
        """A ``scipy.sparse.linalg.LinearOperator`` of :math:`G` at the current point (flat layout order)."""
        return self.at().to_scipy()

    def __matmul__(self, v: Union[torch.Tensor, Params]) -> Union[torch.Tensor, Params]:
        return self.at() @ v

    def __add__(self, other: Any) -> Any:
        return self.at() + other

    __radd__ = __add__

    def __mul__(self, c: Union[int, float]) -> Any:
        return self.at() * c

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return f"NetworkMetric({self.output_metric!r}, {self.space.layout!r})"
