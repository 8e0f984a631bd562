r"""Metrics by pullback: :math:`G_x = J(x)^T\, G_z(f(x))\, J(x)` (Amari 1998; Schraudolph 2002).

The same code serves a 2-D map under autograd (Rosenbrock as Gauss-Newton)
and a network under torch: only the map and the output metric change.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

import numpy as np

from .. import backend as B
from ..backend import tree as _tree
from ..divergences import Divergence
from .linearization import Linearization, LinearizationCache
from .metric import DENSE_MAX_DIM, Metric

#: the most Jacobian entries (outputs x inputs) a pullback metric forms for a dense solve
DENSE_MAX_JACOBIAN = 1_000_000


class DivergenceMetric(Metric):
    r"""The metric induced by a dissimilarity: :math:`G(w) = \nabla^2_u\rho(u, w)|_{u=w}`."""

    def __init__(self, divergence: Divergence, dim: Optional[int] = None):
        super().__init__(dim)
        self.divergence = divergence

    def matrix(self, x):
        return self.divergence.hessian_at_diagonal(x)

    def mv(self, x, v):
        return self.divergence.hvp_at_diagonal(x, v)

    def __repr__(self) -> str:
        return f"DivergenceMetric({self.divergence!r}, dim={self.dim})"


def metric_from_divergence(rho: Union[Divergence, Callable[[Any, Any], Any]],
                           dim: Optional[int] = None) -> DivergenceMetric:
    r"""Metric of a dissimilarity ``rho(u, w)``: its Hessian in ``u`` at ``u = w``.

    ``metric_from_divergence(lambda u, w: 0.5 * sum((u - w)**2))`` is the identity;
    ``metric_from_divergence(Bregman(phi))`` is :math:`\nabla^2\phi`.
    """
    return DivergenceMetric(Divergence.from_function(rho), dim)


def pullback(f: Callable[[Any], Any], rho: Union[Divergence, Callable]) -> Divergence:
    r"""The pulled-back dissimilarity :math:`(f^*\rho)(u, w) = \rho(f(u), f(w))`."""
    rho = Divergence.from_function(rho)
    return Divergence.from_function(lambda u, w: rho(f(u), f(w)))


class PullbackMetric(Metric):
    r"""Pullback of an output-space metric through a map :math:`f`.

    .. math:: G(x) = J_f(x)^T\, G_z(f(x))\, J_f(x)

    Parameters
    ----------
    map : callable
        :math:`f`, from points (shape ``(n,)``) to outputs (shape ``(m,)``),
        written with :mod:`infogeo.backend` functions so that it is
        differentiable under the active backend.
    output_metric : Metric or Divergence or callable
        :math:`G_z` on outputs; a divergence ``rho(z, z')`` is turned into its
        metric (its Hessian on the diagonal).
    dim : int, optional
        Dimension :math:`n` of the input space (checked on use).

    Notes
    -----
    :meth:`mv` never forms :math:`J`: a Jacobian-vector product pushes
    :math:`v` to output space, the output metric acts there, and a
    vector-Jacobian product pulls the result back (Schraudolph 2002).  Both
    products come from one :class:`~infogeo.geometry.linearization.Linearization`
    of the map, kept while the point is unchanged (:meth:`linearize`), so the
    iterations of a conjugate-gradient ``sharp`` need no new forward pass.
    :meth:`matrix` forms :math:`J` densely, on request or for small problems.

    **Dense or matrix-free** (:meth:`dense_at`, used by ``solve``/``sharp``): forming
    :math:`J^T G_z J` takes :math:`\min(n, m)` Jacobian products, :math:`m^2 n` operations and
    :math:`m^2 + mn` numbers in memory for :math:`n` inputs and :math:`m` outputs, while conjugate
    gradient needs one Jacobian-vector and one vector-Jacobian product per iteration.  The dense
    route is taken only when the output metric has a matrix (a matrix-free one such as a
    categorical Fisher metric on logits is never asked for one unless the user calls
    :meth:`matrix`), :math:`n \le 2000`, :math:`m \le 2000` and :math:`mn \le 10^6`
    (``DENSE_MAX_DIM`` and ``DENSE_MAX_JACOBIAN``); otherwise, e.g. 14,370 outputs of 650
    inputs, conjugate gradient on :meth:`mv`.
    """

    def __init__(self, map: Callable[[Any], Any], output_metric: Union[Metric, Divergence, Callable],
                 dim: Optional[int] = None):
        super().__init__(dim)
        if not isinstance(output_metric, Metric):
            output_metric = metric_from_divergence(output_metric)
        self.map = map
        self.output_metric = output_metric
        self._linearizations = LinearizationCache()

    @property
    def has_matrix(self) -> bool:  # type: ignore[override]
        """Whether :meth:`matrix` can be formed at all: the output metric has one."""
        return self.output_metric.has_matrix

    def dense_at(self, x: Any) -> bool:
        """The size rule of the class notes: dense only for small inputs *and* outputs."""
        if not self.has_matrix or isinstance(x, dict):
            return False
        n = int(np.prod(getattr(x, "shape", ())[-1:] or (1,)))
        m = int(np.prod(tuple(getattr(self.linearize(x).outputs, "shape", ())) or (1,)))
        return n <= DENSE_MAX_DIM and m <= DENSE_MAX_DIM and m * n <= DENSE_MAX_JACOBIAN

    def linearize(self, x: Any) -> Linearization:
        """The map linearised at ``x`` (outputs, ``jvp``, ``vjp``), reused while ``x`` is unchanged."""
        return self._linearizations.get(self.map, x)

    def clear_cache(self) -> None:
        """Drop the cached linearisation (and the graph it holds)."""
        self._linearizations.clear()

    def _output_mv(self, z: Any, u: Any) -> Any:
        """The output metric's product :math:`G_z u` (subclasses rescale it)."""
        return self.output_metric.mv(z, u)

    def _check_output(self, z):
        m = self.output_metric.dim
        shape = tuple(getattr(z, "shape", ()))
        if m is not None and shape != (m,):
            raise ValueError(f"the map's output has shape {shape}, but the output metric "
                             f"expects shape ({m},)")

    def _check_input(self, x: Any, v: Any = None) -> None:
        """The point has the map's input size ``dim`` (where known: given, or the manifold's) and the
        vector the point's shape: a longer vector was cut to the map's inputs without a word."""
        xs = _tree.tree_shape(x)
        if self.dim is not None and not isinstance(x, dict) and xs[-1:] != (self.dim,):
            raise ValueError(f"the point has shape {xs}, but the map of this pullback metric takes "
                             f"{self.dim} inputs")
        if v is not None and _tree.tree_shape(v) != xs:
            raise ValueError(f"the vector has shape {_tree.tree_shape(v)}, but the point (the map's input) "
                             f"has shape {xs}")

    def matrix(self, x):
        self._check_input(x)
        z = self.map(x)
        self._check_output(z)
        J = B.jacobian(self.map, x)
        J = B.reshape(J, (z.shape[0], -1))
        return B.matmul(B.transpose(J), B.matmul(self.output_metric.matrix(z), J))

    def mv(self, x, v):
        r""":math:`J^T G_z J v` from the cached linearisation at ``x``."""
        self._check_input(x, v)
        lin = self.linearize(x)
        z = lin.outputs
        self._check_output(z)
        return lin.vjp(self._output_mv(z, lin.jvp(v)))

    def __repr__(self) -> str:
        return f"PullbackMetric(map={getattr(self.map, '__name__', self.map)!r}, output_metric={self.output_metric!r})"
