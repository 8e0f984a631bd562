r"""Diagonal curvature: exact, Monte Carlo or empirical.

.. math:: \hat G_{ii} = \frac1N\sum_{n}\sum_t\sum_k (\mathcal D w_{knt})_i^2,\qquad
          \mathcal Dw_{knt} = J_{nt}^T s_{knt}

for outputs ``(N, *middle, C)`` with positions :math:`t`, where :math:`s_{knt}` are
the square-root columns of the per-position output metric (exact; the
back-propagated square root of Dangel, Kunstner & Hennig 2020, "BackPACK"), the
loss gradient (empirical Fisher), or, for Monte Carlo, :math:`S` samples scaled by
:math:`1/\sqrt S` back-propagated at all positions at once (unbiased because the
samples are independent with mean zero at each position; Martens, Sutskever &
Swersky 2012).  Each layer's rule (:mod:`.layers`) gives the diagonal in closed form
where one exists (a Linear layer without extra axes:
:math:`\frac1N\sum_n(\sum_k b_{kn}^{\odot 2})(a_n^{\odot 2})^T`, one matrix product, no
per-example gradients), else the squares of its per-row pseudo-gradients are summed in
bounded chunks.  Memory is :math:`O(\text{parameters})` plus one batch of activations.
"""
from __future__ import annotations

from typing import Dict, List

import torch

from . import _backprop as bp
from .blockwise import BlockCurvature
from .blocks import DiagBlock
from .layers.base import CHUNK_ELEMENTS
from .layers.network import network_rows


def diag_reducer(layer: bp.Layer, cols: bp.Columns):
    """Column sink for :func:`~._backprop.capture`: what the layer's closed-form diagonal needs, if it has one."""
    return layer.rule.diagonal_sink(layer, cols)


def diag_blocks(space, layers: List[bp.Layer], network: List[List[str]], cols: bp.Columns,
                chunk_elements: int = CHUNK_ELEMENTS) -> List[DiagBlock]:
    """One :class:`DiagBlock` per layer, and one for the parameters taken through the whole network."""
    N = space.batch_size
    blocks = []
    # last layer first, releasing each layer's recorded tensors once used: the wide
    # early layers are then reduced while little else is still held
    for layer in reversed(layers):
        d = layer.rule.diagonal(layer, N)
        blocks.append(DiagBlock(d) if d is not None else
                      _mean_of_squares(layer.rule.rows(layer, space, cols, chunk_elements), N))
        layer.stat = layer.grad_out = None
        layer.inputs = ()
    blocks.reverse()
    names = [n for group in network for n in group]
    if names:
        blocks.append(_mean_of_squares(network_rows(space, names, cols, chunk_elements), N))
    return blocks


def _mean_of_squares(chunks, N: int) -> DiagBlock:
    r""":math:`\frac1N \sum_r g_r^{\odot 2}` over chunks of per-row pseudo-gradients."""
    acc: Dict[str, torch.Tensor] = {}
    for chunk in chunks:
        for n, g in chunk.items():
            s = g.square().sum(0)
            acc[n] = acc[n].add_(s) if n in acc else s
    return DiagBlock({n: t / N for n, t in acc.items()})


class Diagonal(BlockCurvature):
    r"""Diagonal approximation :math:`\operatorname{diag}(G)` of the pullback metric.

    Build with ``space.curvature("diag", method="exact" | "mc" | "empirical")``.
    ``solve(x, w, damping)`` divides by :math:`\operatorname{diag}(G) + \lambda`.
    """

    @classmethod
    def build(cls, space, factor_fn, chunk_elements: int = CHUNK_ELEMENTS, per_position: bool = True
              ) -> "Diagonal":
        cap = bp.capture(space, factor_fn, diag_reducer, per_position)
        with bp.without_autocast():
            return cls(space.layout, diag_blocks(space, cap.layers, cap.network, cap.cols, chunk_elements),
                       space.point)
