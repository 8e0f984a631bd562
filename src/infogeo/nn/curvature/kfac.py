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
from .base import BlockCurvature
from .blocks import KronBlock
from .diagonal import diag_blocks


def kron_block(space, layer: bp.Layer, inverse: str = "eigen") -> KronBlock:
    """The factors :math:`A, G` of one Linear/Conv2d layer from its recorded inputs and output gradients."""
    N = space.batch_size
    if layer.kind == "linear":
        a = layer.inputs[0]
        a = a.reshape(-1, a.shape[-1])                       # (N T, in), a view: no patch copy
    else:
        a = bp.conv_patches(layer)
        a = a.reshape(-1, a.shape[-1])                       # (N L, C_in kh kw)
    rows, n_in = a.shape
    if "weight" in layer.params and "bias" in layer.params:
        # A of the bias-augmented input [a, 1], filled blockwise instead of concatenating a copy of a
        A = torch.empty(n_in + 1, n_in + 1, dtype=a.dtype, device=a.device)
        bp.gram(a, out=A[:n_in, :n_in])
        s = a.sum(0)
        A[:n_in, n_in] = s
        A[n_in, :n_in] = s
        A[n_in, n_in] = rows
        A.div_(rows)
    elif "weight" in layer.params:
        A = bp.gram(a).div_(rows)
    else:
        A = torch.ones(1, 1, dtype=a.dtype, device=a.device)
    if layer.stat is not None:
        G = layer.stat.div_(N)
    else:
        _, b, _ = bp.layer_ab(layer)                        # (K, N, T, out)
        bf = b.reshape(-1, b.shape[-1])
        G = bp.gram(bf).div_(N)
    return KronBlock(layer.params.get("weight"), layer.params.get("bias"), tuple(layer.module.weight.shape), A, G,
                     inverse)


def kfac_reducer(layer: bp.Layer):
    r"""Column sink for :func:`~._backprop.capture`: factorable layers keep only :math:`\sum_k b_k b_k^T`."""
    return bp.gram_sum(layer) if layer.kind in ("linear", "conv2d") else None


class KFAC(BlockCurvature):
    r"""Kronecker-factored curvature, diagonal where a layer cannot be factored.

    Build with ``space.curvature("kfac", method=..., inverse="eigen" | "tikhonov")``.
    ``solve`` applies, per block, the exact inverse of :math:`G\otimes A + \lambda I`
    (``"eigen"``) or the factored-Tikhonov approximation
    :math:`(G + \tfrac{\sqrt\lambda}{\pi}I)^{-1}\otimes(A + \pi\sqrt\lambda I)^{-1}` (``"tikhonov"``),
    both from eigendecompositions of the factors (computed once, reused for any damping).
    """

    @classmethod
    def build(cls, space, factor_fn, chunk_elements: int = bp.CHUNK_ELEMENTS, inverse: str = "eigen") -> "KFAC":
        if inverse not in KronBlock.INVERSES:
            raise ValueError(f"unknown K-FAC inverse {inverse!r}; expected one of {KronBlock.INVERSES}")
        _, S, layers = bp.capture(space, factor_fn, kfac_reducer)
        blocks: list = []
        other: List[bp.Layer] = []
        for layer in layers:
            if layer.kind in ("linear", "conv2d"):
                blocks.append(kron_block(space, layer, inverse))
            else:
                other.append(layer)
        blocks += diag_blocks(space, other, S, chunk_elements)
        return cls(space.layout, blocks, space.point)
