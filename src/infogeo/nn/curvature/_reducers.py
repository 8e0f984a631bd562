r"""Column sinks for :func:`~._backprop.capture`: what a curvature keeps of each back-propagated column.

A sink ``sink(j, g)`` receives column ``j``'s output gradient ``g`` of one layer
and accumulates a running statistic in ``layer.stat``, so that only one column's
gradients are alive at a time (as curvlinops does for K-FAC).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ._backprop import Columns, Layer

#: column-block width of :func:`gram`
GRAM_BLOCK = 256


def common_dtype(*tensors: torch.Tensor) -> Optional[torch.dtype]:
    """The dtype the floating-point ``tensors`` promote to (``None`` if there are none)."""
    dt = None
    for t in tensors:
        if t.is_floating_point():
            dt = t.dtype if dt is None else torch.promote_types(dt, t.dtype)
    return dt


def accumulation_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The precision statistics of ``tensors`` are summed in: their common dtype, at least float32.

    Under autocast a layer's output gradients are half precision while its inputs may be
    either; products of the two are formed in this dtype (float32, or float64 if any is).
    """
    return torch.promote_types(common_dtype(*tensors) or torch.float32, torch.float32)


def gram(a: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    r""":math:`a^T a` for ``a`` of shape ``(R, n)``, computing only the upper block triangle.

    The result is symmetric, so for ``n`` above :data:`GRAM_BLOCK` the columns are cut
    into equal blocks and each off-diagonal block product is done once and mirrored
    (about half the flops of one ``a.T @ a``, a BLAS ``syrk``; the smaller products
    also stay in cache).  ``out`` (``(n, n)``, may be a view) receives the result.
    Half-precision rows (autocast) are summed in float32: sums of squares overflow float16.
    """
    a = a.to(accumulation_dtype(a))
    n = a.shape[1]
    nb = -(-n // GRAM_BLOCK)
    if nb <= 1:
        if out is None:
            return a.T @ a
        out.copy_(a.T @ a)
        return out
    bs = -(-n // nb)
    if out is None:
        out = a.new_empty(n, n)
    for i in range(0, n, bs):
        ai = a[:, i:i + bs]
        for j in range(i, n, bs):
            blk = torch.mm(ai.T, a[:, j:j + bs])
            out[i:i + bs, j:j + bs] = blk
            if j != i:
                out[j:j + bs, i:i + bs] = blk.T
    return out

def square_sum(layer: Layer, cols: Optional[Columns] = None) -> Callable[[int, torch.Tensor], None]:
    r"""Sink accumulating :math:`\sum_j b_j^{\odot 2}` (shape of the layer output) into ``layer.stat``."""
    def sink(j, g):
        g = g.to(accumulation_dtype(g))
        if layer.stat is None:
            # kept by reference, squared when a second column arrives or when read:
            # with one column (one Monte Carlo sample) no squared copy coexists with
            # the other layers' gradients, which is what sets the peak memory
            layer.stat, layer.stat_unsquared = g, True
        else:
            if layer.stat_unsquared:
                layer.stat, layer.stat_unsquared = layer.stat.square(), False
            layer.stat.addcmul_(g, g)
    return sink


def squared_stat(layer: Layer) -> torch.Tensor:
    r""":math:`\sum_j b_j^{\odot 2}` as accumulated by :func:`square_sum`."""
    return layer.stat.square() if layer.stat_unsquared else layer.stat


def position_rows(layer: Layer, g: torch.Tensor) -> torch.Tensor:
    """Output gradient ``(N, ..., out)`` (a convolution: ``(N, out, ...)``) as rows ``(N T, out)``.

    A convolution's rows are the transpose of a ``(out, N T)`` copy, which moves whole runs
    of positions instead of transposing every example (the product takes either layout).
    """
    if layer.kind == "conv":
        g = g.flatten(2)
        return g.transpose(0, 1).reshape(g.shape[1], -1).T
    return g.reshape(-1, g.shape[-1])


def gram_sum(layer: Layer, cols: Columns, reduce_positions: bool = False) -> Callable[[int, torch.Tensor], None]:
    r"""Sink accumulating K-FAC's :math:`\sum_{j,n,t} b_{jnt} b_{jnt}^T` (output channels) into ``layer.stat``.

    :math:`b_{jnt}` is the layer's output gradient at its position :math:`t` for
    column :math:`j` (one output position's factor column, or one Monte Carlo
    sample at all positions).  ``reduce_positions`` sums :math:`b_{jnt}` over the
    layer's positions before the outer product (K-FAC-reduce).
    """
    def sink(j, g):
        if reduce_positions:
            b = g.flatten(2).sum(2) if layer.kind == "conv" else g.reshape(g.shape[0], -1, g.shape[-1]).sum(1)
        else:
            b = position_rows(layer, g)
        layer.stat = gram(b) if layer.stat is None else layer.stat.add_(gram(b))
    return sink
