r"""Column sinks for :func:`~._backprop.capture`: what a curvature keeps of each back-propagated column.

A sink ``sink(j, g)`` receives column ``j``'s output gradient ``g`` of one layer
and accumulates a running statistic in ``layer.stat``, so that only one column's
gradients are alive at a time (as curvlinops does for K-FAC).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

import torch

if TYPE_CHECKING:  # pragma: no cover
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
    also stay in cache).  That pays on the CPU only: on an accelerator the blocks' launches and
    Python cost more than the flops they save (a K-FAC refresh of a 3072-1024-1024-1024-100 MLP
    on 2048 rows ran 146 small products, CPU-bound at 5x the GPU's own time), so there it is one product.
    ``out`` (``(n, n)``, may be a view) receives the result.
    Half-precision rows (autocast) are summed in float32: sums of squares overflow float16.
    """
    a = a.to(accumulation_dtype(a))
    n = a.shape[1]
    nb = -(-n // GRAM_BLOCK) if a.device.type == "cpu" else 1
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

def square_sum(layer: "Layer", cols: Optional["Columns"] = None) -> Callable[[int, torch.Tensor], None]:
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


def squared_stat(layer: "Layer") -> torch.Tensor:
    r""":math:`\sum_j b_j^{\odot 2}` as accumulated by :func:`square_sum`."""
    return layer.stat.square() if layer.stat_unsquared else layer.stat


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
    dt = accumulation_dtype(b2, a)
    b2 = b2.to(dt)
    out = torch.zeros(b2.shape[1], a.shape[1], dtype=dt, device=b2.device)
    for s in range(0, a.shape[0], step):
        out.addmm_(b2[s:s + step].T, a[s:s + step].to(dt).square())
    return out
