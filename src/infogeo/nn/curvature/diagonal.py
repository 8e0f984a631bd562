r"""Diagonal curvature: exact, Monte Carlo or empirical.

.. math:: \hat G_{ii} = \frac1N\sum_{n}\sum_t\sum_k (\mathcal D w_{knt})_i^2,\qquad
          \mathcal Dw_{knt} = J_{nt}^T s_{knt}

for outputs ``(N, *middle, C)`` with positions :math:`t`, where :math:`s_{knt}` are
the square-root columns of the per-position output metric (exact; the
back-propagated square root of Dangel, Kunstner & Hennig 2020, "BackPACK"), the
loss gradient (empirical Fisher), or, for Monte Carlo, :math:`S` samples scaled by
:math:`1/\sqrt S` back-propagated at all positions at once (unbiased because the
samples are independent with mean zero at each position; Martens, Sutskever &
Swersky 2012).  For a Linear layer without extra axes,
:math:`(\mathcal D W_{kn})_{oi}^2 = b_{kno}^2 a_{ni}^2`, so the diagonal is
:math:`\frac1N\sum_n(\sum_k b_{kn}^2)(a_n^2)^T` — one matrix product, no
per-example gradients.  Memory is :math:`O(\text{parameters})` plus one batch
of activations; other layers use bounded per-example chunks.
"""
from __future__ import annotations

from typing import Dict, List

import torch

from . import _backprop as bp, _reducers as red, _rows as rows
from .base import BlockCurvature
from .blocks import DiagBlock


#: squared inputs formed at once: at most this many elements or a quarter of the result, whichever is larger
SQUARE_CHUNK_ELEMENTS = 1 << 16


def squared_product(b2: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    r""":math:`b_2^T (a \odot a)` for ``b2`` ``(N, out)`` and ``a`` ``(N, in)``, squaring ``a`` in row chunks.

    The square of a wide input (e.g. the data) is never whole in memory; it would be
    as large as the result itself when the batch is as large as the layer's output.
    """
    limit = max(SQUARE_CHUNK_ELEMENTS, b2.shape[1] * a.shape[1] // 4)
    step = max(1, limit // max(a.shape[1], 1))
    # autocast: a layer's input may be half precision while b2 was summed in float32
    dt = red.accumulation_dtype(b2, a)
    b2 = b2.to(dt)
    out = None
    for s in range(0, a.shape[0], step):
        a2 = a[s:s + step].to(dt).square()
        if out is None:
            out = torch.mm(b2[s:s + step].T, a2)
        else:
            out.addmm_(b2[s:s + step].T, a2)
    return out


def is_plain_linear(layer: bp.Layer) -> bool:
    r"""A Linear layer applied once to ``(N, in)`` inputs: its diagonal needs only :math:`\sum_k b_k^2`."""
    return layer.kind == "linear" and layer.inputs[0].dim() == 2


def diag_reducer(layer: bp.Layer, cols: bp.Columns):
    r"""Column sink for :func:`~._backprop.capture`: plain Linear layers keep only :math:`\sum_j b_j^2`."""
    return red.square_sum(layer) if is_plain_linear(layer) else None


def diag_blocks(space, layers: List[bp.Layer], cols: bp.Columns,
                chunk_elements: int = rows.CHUNK_ELEMENTS) -> List[DiagBlock]:
    """One :class:`DiagBlock` per layer (and one for all whole-network fallback parameters)."""
    N = space.batch_size
    blocks = []
    global_names: List[str] = []
    # last layer first, releasing each layer's recorded tensors once used: the wide
    # early layers are then reduced while little else is still held
    for layer in reversed(layers):
        if layer.kind == "global":
            global_names = layer.names + global_names
            continue
        if is_plain_linear(layer):
            blocks.append(_linear_diag(layer, N))
        else:
            blocks.append(_mean_of_squares(rows.row_grads(layer, space, cols, chunk_elements), N))
        layer.stat = layer.grad_out = None
        layer.inputs = ()
    blocks.reverse()
    if global_names:
        blocks.append(_mean_of_squares(rows.global_row_grads(space, global_names, cols, chunk_elements), N))
    return blocks


def _linear_diag(layer: bp.Layer, N: int) -> DiagBlock:
    r"""Diagonal of a plain Linear layer from :math:`\sum_k b_k^{\odot 2}` and its inputs."""
    # the sum over columns k comes first, O(N out): accumulated during the backward passes when possible
    b2 = red.squared_stat(layer) if layer.stat is not None else layer.grad_out.square().sum(0)
    layer.stat = layer.grad_out = None   # released before the (out, in) result is allocated
    d = {}
    if "weight" in layer.params:
        d[layer.params["weight"]] = squared_product(b2, layer.inputs[0]).div_(N)
    if "bias" in layer.params:
        d[layer.params["bias"]] = b2.sum(0).div_(N)
    return DiagBlock(d)


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
    ``solve(w, damping)`` divides by :math:`\operatorname{diag}(G) + \lambda`.
    """

    @classmethod
    def build(cls, space, factor_fn, chunk_elements: int = rows.CHUNK_ELEMENTS, per_position: bool = True
              ) -> "Diagonal":
        _, cols, layers = bp.capture(space, factor_fn, diag_reducer, per_position)
        with bp.without_autocast():
            return cls(space.layout, diag_blocks(space, layers, cols, chunk_elements), space.point)
