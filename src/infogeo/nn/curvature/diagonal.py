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

import functools
from dataclasses import dataclass
from typing import Dict, List, Sequence

import torch

from . import _backprop as bp
from .blockwise import BlockCurvature
from .blocks import DiagBlock
from .layers.base import CHUNK_ELEMENTS
from .layers.network import network_rows


def diag_reducer(layer: bp.Layer, cols: bp.Columns, space=None, chunk_elements: int = CHUNK_ELEMENTS):
    """Column sink for :func:`~._backprop.capture`: what the layer's closed-form diagonal needs, if it has one;
    else, with several columns (one per position) and ``space`` given, the squares of each column's per-row
    pseudo-gradients summed as the column arrives (:func:`squared_rows_sink`)."""
    sink = layer.rule.diagonal_sink(layer, cols)
    if sink is None and cols.count > 1 and space is not None:
        sink = squared_rows_sink(layer, space, cols.N, chunk_elements)
    return sink


class _SquaredRows(dict):
    """``layer.stat`` of :func:`squared_rows_sink`: the summed squared pseudo-gradients, by parameter name."""


@dataclass(frozen=True)
class _OneColumn:
    """The rows of a single column of ``N`` examples (what a layer rule's ``rows`` reads of the columns)."""

    rows: int


def squared_rows_sink(layer: bp.Layer, space, N: int, chunk_elements: int = CHUNK_ELEMENTS):
    r"""Sink summing :math:`(\mathcal D w_r)^{\odot 2}` over the rows of each column as it arrives.

    Kept whole, the output gradients of ``K T`` per-position columns of a weight-shared layer are
    :math:`K N T^2` times its output width (the empirical Fisher of a sequence model: 6.6 GB for
    ``(2, 128, 50257)`` logits); consumed column by column only one column's gradients and a
    parameter-sized sum are alive, memory linear in :math:`T`, the same products in the same order.
    """
    one, acc = _OneColumn(N), _SquaredRows()
    layer.stat = acc

    def sink(j: int, g: torch.Tensor) -> None:
        layer.grad_out = g.unsqueeze(0)
        try:
            for chunk in layer.rule.rows(layer, space, one, chunk_elements):
                _add_squares(acc, chunk)
        finally:
            layer.grad_out = None
    return sink


def zero_block(space, names: Sequence[str]) -> List[DiagBlock]:
    """A zero :class:`DiagBlock` for parameters no example reached (none if ``names`` is empty); plain tensors of
    the parameters' whole shapes (under FSDP2 the parameters of a layer never called stay sharded)."""
    if not names:
        return []
    return [DiagBlock({n: torch.zeros(space.point[n].shape, dtype=space.point[n].dtype,
                                      device=space.point[n].device) for n in names})]


def diag_blocks(space, layers: List[bp.Layer], network: List[List[str]], cols: bp.Columns,
                chunk_elements: int = CHUNK_ELEMENTS, unused: Sequence[str] = ()) -> List[DiagBlock]:
    """One :class:`DiagBlock` per layer, one for the parameters taken through the whole network, and a zero one
    for those no example reached (``unused``)."""
    N = space.batch_size
    blocks = []
    # last layer first, releasing each layer's recorded tensors once used: the wide
    # early layers are then reduced while little else is still held
    for layer in reversed(layers):
        if isinstance(layer.stat, _SquaredRows):   # summed column by column during the backward passes
            blocks.append(DiagBlock({n: t / N for n, t in layer.stat.items()}))
        else:
            d = layer.rule.diagonal(layer, N)
            blocks.append(DiagBlock(d) if d is not None else
                          _mean_of_squares(layer.rule.rows(layer, space, cols, chunk_elements), N))
        layer.stat = layer.grad_out = None
        layer.inputs = ()
    blocks.reverse()
    names = [n for group in network for n in group]
    if names:
        blocks.append(_mean_of_squares(network_rows(space, names, cols, chunk_elements), N))
    return blocks + zero_block(space, unused)


def _add_squares(acc: Dict[str, torch.Tensor], chunk: Dict[str, torch.Tensor]) -> None:
    """Add the squares of a chunk of per-row pseudo-gradients, summed over the rows, into ``acc``."""
    for n, g in chunk.items():
        s = g.square().sum(0)
        acc[n] = acc[n].add_(s) if n in acc else s


def _mean_of_squares(chunks, N: int) -> DiagBlock:
    r""":math:`\frac1N \sum_r g_r^{\odot 2}` over chunks of per-row pseudo-gradients."""
    acc: Dict[str, torch.Tensor] = {}
    for chunk in chunks:
        _add_squares(acc, chunk)
    return DiagBlock({n: t / N for n, t in acc.items()})


class Diagonal(BlockCurvature):
    r"""Diagonal approximation :math:`\operatorname{diag}(G)` of the pullback metric.

    Build with ``space.curvature("diag", method="exact" | "mc" | "empirical")``.
    ``solve(x, w, damping)`` divides by :math:`\operatorname{diag}(G) + \lambda`.
    """

    @classmethod
    def build(cls, space, factor_fn, chunk_elements: int = CHUNK_ELEMENTS, per_position: bool = True
              ) -> "Diagonal":
        cap = bp.capture(space, factor_fn, functools.partial(diag_reducer, space=space, chunk_elements=chunk_elements),
                         per_position)
        with bp.without_autocast():
            return cls(space.layout, diag_blocks(space, cap.layers, cap.network, cap.cols, chunk_elements,
                                                 cap.unused), space.point)
