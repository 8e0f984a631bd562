r"""Shampoo's and SOAP's metric: Kronecker factors of the mini-batch gradients (not of the model's Fisher).

Every other kind represents the network's pullback metric (the model's Fisher / GGN), built from the
output metric's columns.  This one is built from the loss gradients alone.  A parameter tensor is laid
out as a matrix :math:`\bar W` (its first axis by the rest: a Linear weight as it is, a convolution kernel
``(out, in·kh·kw)`` as K-FAC lays it out); with :math:`\bar G_t` the mini-batch gradient of step
:math:`t` in that layout, Shampoo (Gupta, Koren & Singer 2018, "Shampoo: Preconditioned stochastic tensor
optimization") keeps the factors

.. math:: L = \operatorname{avg}_t \bar G_t\bar G_t^T,\qquad R = \operatorname{avg}_t \bar G_t^T\bar G_t

(here an exponential average, as the optimizers average every kind's statistics; Gupta et al. sum them)
and steps along :math:`L^{-1/4}\bar G R^{-1/4}`: steepest descent under the metric
:math:`L^{1/4}\otimes R^{1/4}`, a Kronecker-factored stand-in for full-matrix AdaGrad's
:math:`(\sum_t g_tg_t^T)^{1/2}`.  Vectors (biases, norms) get its diagonal,
:math:`\operatorname{diag}(\operatorname{avg}_t g_t^{\odot 2})^{1/2}` (AdaGrad's and RMSProp's).  A side wider
than ``max_factor_dim``, or whose dense factor would exceed ``max_factor_bytes``, keeps the diagonal of its
factor (as K-FAC's vocabulary-sized sides do).

The damping is relative to each statistic's scale: a factor :math:`F` of side :math:`d` becomes
:math:`F + \lambda\,\tfrac{\operatorname{tr}F}{d} I` before its root, so the direction is, like Shampoo's,
unchanged when the loss is multiplied by a constant (an absolute :math:`\epsilon` would tie it to the
gradients' scale):

.. math:: (C + \lambda)^{-1}\,\mathrm{vec}(\bar G) :=
          \mathrm{vec}\big((L + \lambda\mu_L I)^{-1/4}\,\bar G\,(R + \lambda\mu_R I)^{-1/4}\big),\qquad
          \mu_F = \operatorname{tr}F/\dim F,

exact at :math:`\lambda = 0`; the roots are taken in the factors' eigenbasis, which is what
:class:`~.eigenbasis.EigenbasisKronBlock` solves in.  That eigenbasis is SOAP's (Vyas et al. 2025, "SOAP: Improving
and stabilizing Shampoo using Adam"): ``NaturalGradient(model, curvature="soap")`` (the same statistics,
with ``step_rule="eigen-adam"``) runs Adam in it.

``space.curvature("shampoo", "empirical")`` builds the statistics of one batch from the gradient of its
loss; the optimizers build them from the gradients in ``.grad`` (any loss), renewed every step.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import torch

from ...linalg import NotPositiveDefiniteError
from .._params import ParamLayout, Params, working
from ._reducers import accumulation_dtype, gram
from .blocks import Block, DiagBlock
from .blockwise import BlockCurvature
from .kfac import MAX_FACTOR_BYTES, MAX_FACTOR_DIM, check_factor_limits, dense_side
from .eigenbasis import EigenbasisKronBlock
from .kron import _factor_diagonal


def relative_shift(F: torch.Tensor, damping: float) -> float:
    r""":math:`\lambda\,\operatorname{tr}F/\dim F` for a factor stored whole or as its diagonal
    (:math:`\lambda` if that mean is 0)."""
    mean = float(working(_factor_diagonal(F)).mean())
    return damping * mean if mean > 0 and math.isfinite(mean) else damping


class RootKronBlock(EigenbasisKronBlock):
    r"""Shampoo's block :math:`L^{1/4}\otimes R^{1/4}` of one matrix-shaped parameter (``G`` holds :math:`L`,
    ``A`` holds :math:`R`); damped as the module docstring says, in the factors' eigenbasis."""

    kind = "shampoo"

    def _root_scales(self, shift_a: float, shift_g: float) -> torch.Tensor:
        la, _, lg, _ = self.eig()
        return (lg + shift_g).pow(0.25).unsqueeze(1) * (la + shift_a).pow(0.25).unsqueeze(0)

    def scales(self, damping):
        return self._root_scales(relative_shift(self.A, damping), relative_shift(self.G, damping))

    def mv(self, v):
        return self.mv_scaled(v, self._root_scales(0.0, 0.0))

    def diagonal(self):
        return self.diagonal_scaled(self._root_scales(0.0, 0.0))

    def dense(self, layout):
        return self.dense_scaled(layout, self._root_scales(0.0, 0.0))


class RootDiagBlock(DiagBlock):
    r"""The diagonal metric :math:`\operatorname{diag}(d)^{1/2}` of parameters without Kronecker factors
    (``d`` the averaged squared gradients), solved as :math:`g / \sqrt{d + \lambda\,\bar d}`."""

    kind = "shampoo-diag"

    def with_stats(self, stats):
        return RootDiagBlock({n: stats[n] for n in self.names})

    def mv(self, v):
        return {n: self.d[n].sqrt() * v[n] for n in self.names}

    def solve(self, v, damping):
        out = {}
        for n in self.names:
            den = (working(self.d[n]) + relative_shift(self.d[n].reshape(-1), damping)).sqrt()
            if not bool((den > 0).all()):
                raise NotPositiveDefiniteError(f"the gradient statistics of {n!r} are zero; pass damping > 0")
            out[n] = v[n] / den
        return out

    def diagonal(self):
        return {n: self.d[n].sqrt() for n in self.names}

    def dense(self, layout):
        d = torch.cat([self.d[n].reshape(-1).sqrt() for n in self.names])
        return self._indices(layout, self.names, d.device), torch.diag(d)

    def minus_outer(self, g):
        raise NotImplementedError("Shampoo's metric is not a second moment: it has no C - g g^T")


def gradient_blocks(layout: ParamLayout, grads: Params, max_factor_dim: int = MAX_FACTOR_DIM,
                    max_factor_bytes: int = MAX_FACTOR_BYTES) -> List[Block]:
    r"""One block per parameter tensor: :class:`RootKronBlock` of :math:`(\bar G\bar G^T, \bar G^T\bar G)` for a
    tensor of two or more axes, else (and where neither side may be dense, :func:`~.kfac.dense_side`) its
    squares in one :class:`RootDiagBlock`."""
    blocks: List[Block] = []
    diagonal: Dict[str, torch.Tensor] = {}
    for n in layout.names:
        g = grads[n].detach()
        g = g.to(accumulation_dtype(g))
        shape = layout.shapes[n]
        out, rest = (shape[0], math.prod(shape[1:])) if len(shape) >= 2 else (0, 0)
        size = g.element_size()
        wide_g = not dense_side(out, size, max_factor_dim, max_factor_bytes)
        wide_a = not dense_side(rest, size, max_factor_dim, max_factor_bytes)
        if len(shape) < 2 or (wide_g and wide_a):
            diagonal[n] = g.square()
            continue
        M = g.reshape(out, rest)
        G = M.square().sum(1) if wide_g else gram(M.T)
        A = M.square().sum(0) if wide_a else gram(M)
        blocks.append(RootKronBlock(n, None, shape, A, G))
    if diagonal:
        blocks.append(RootDiagBlock(diagonal))
    return blocks


class Shampoo(BlockCurvature):
    r"""Shampoo's gradient statistics as a curvature (module docstring): :class:`RootKronBlock` per matrix,
    :class:`RootDiagBlock` for the rest.

    Build with ``space.curvature("shampoo", "empirical")`` (the gradient of the batch loss at the point), or
    :meth:`from_gradients` (what the optimizers do with ``.grad``).
    """

    @classmethod
    def build(cls, space, gradient: Params, max_factor_dim: int = MAX_FACTOR_DIM,
              max_factor_bytes: int = MAX_FACTOR_BYTES, **unknown: Any) -> "Shampoo":
        return cls.from_gradients(space.layout, gradient, space.point, max_factor_dim, max_factor_bytes, **unknown)

    @classmethod
    def from_gradients(cls, layout: ParamLayout, grads: Params, point: Optional[Params] = None,
                       max_factor_dim: int = MAX_FACTOR_DIM, max_factor_bytes: int = MAX_FACTOR_BYTES,
                       **unknown: Any) -> "Shampoo":
        """The statistics of one step's gradients ``grads`` (``{name: tensor}`` covering ``layout``)."""
        if unknown:
            raise ValueError(f"curvature='shampoo' takes the options max_factor_dim and max_factor_bytes only, "
                             f"got {sorted(unknown)}")
        layout.check(grads, "the gradients")
        return cls(layout, gradient_blocks(layout, grads, *check_factor_limits(max_factor_dim, max_factor_bytes)),
                   point)
