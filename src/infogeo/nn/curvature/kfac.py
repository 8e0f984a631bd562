r"""K-FAC: a Kronecker-factored block :math:`G_\ell \otimes A_\ell` per Linear and Conv2d layer (seed 004, Eqs. 24–38).

For a layer with (bias-augmented) inputs :math:`\bar a` and output pseudo-gradients
:math:`b_{kn} = \partial z^\top s_{kn} / \partial(\text{layer output})`, the exact block
:math:`\frac1N\sum_n (\sum_k b_{kn}b_{kn}^T) \otimes \bar a_n\bar a_n^T` is approximated by

.. math:: A = \frac1{NT}\sum_{n,t}\bar a_{nt}\bar a_{nt}^T,\qquad
          G = \frac1N\sum_{k,n,t} b_{knt} b_{knt}^T,

where :math:`t` runs over the :math:`T` positions a layer is applied at (sequence
positions, or the spatial patches of a convolution — the "expand" convention).
It is exact for a single Linear layer under the Euclidean output metric.  Layers
K-FAC cannot factor (LayerNorm, Embedding, grouped convolutions, custom modules)
get a diagonal block instead, so a network of any architecture has a K-FAC
curvature (mixed representation).
"""
from __future__ import annotations

from typing import List

import torch

from . import _backprop as bp
from .base import BlockCurvature, KronBlock
from .diagonal import diag_blocks


def kron_block(space, layer: bp.Layer) -> KronBlock:
    """The factors :math:`A, G` of one Linear/Conv2d layer from its recorded inputs and output gradients."""
    a, b, T = bp.layer_ab(layer)            # (N, T, in), (K, N, T, out)
    N = space.batch_size
    a = a.reshape(-1, a.shape[-1])
    cols = []
    if "weight" in layer.params:
        cols.append(a)
    if "bias" in layer.params:
        cols.append(torch.ones(a.shape[0], 1, dtype=a.dtype, device=a.device))
    abar = torch.cat(cols, dim=1) if len(cols) > 1 else cols[0]
    A = abar.T @ abar / abar.shape[0]
    bf = b.reshape(-1, b.shape[-1])
    G = bf.T @ bf / N
    return KronBlock(layer.params.get("weight"), layer.params.get("bias"), tuple(layer.module.weight.shape), A, G)


class KFAC(BlockCurvature):
    r"""Kronecker-factored curvature, diagonal where a layer cannot be factored.

    Build with ``space.curvature("kfac", method=...)``.  ``solve`` applies the exact
    inverse of :math:`G\otimes A + \lambda I` per block from eigendecompositions of the
    factors (computed once, reused for any damping).
    """

    @classmethod
    def build(cls, space, factor_fn, chunk_elements: int = bp.CHUNK_ELEMENTS) -> "KFAC":
        _, S, layers = bp.capture(space, factor_fn)
        blocks: list = []
        other: List[bp.Layer] = []
        for layer in layers:
            if layer.kind in ("linear", "conv2d"):
                blocks.append(kron_block(space, layer))
            else:
                other.append(layer)
        blocks += diag_blocks(space, other, S, chunk_elements)
        return cls(space.layout, blocks, space.point)
