r"""Block-diagonal curvature: the exact dense block :math:`\frac1N\sum_{k,n}\mathcal Dw_{kn}\mathcal Dw_{kn}^T` per layer.

Cross-layer terms are dropped; within a layer nothing is approximated.  Layers
with more than ``max_block_size`` parameters get a diagonal block instead.
Per-example pseudo-gradients are formed in bounded chunks.
"""
from __future__ import annotations

from typing import List

import torch

from . import _backprop as bp, _reducers as red, _rows as rows
from .base import BlockCurvature
from .blocks import DenseBlock
from .diagonal import diag_blocks


class BlockDiagonal(BlockCurvature):
    """Dense block per layer (module owning parameters); diagonal for large layers."""

    @classmethod
    def build(cls, space, factor_fn, max_block_size: int = 4096,
              chunk_elements: int = rows.CHUNK_ELEMENTS, per_position: bool = True) -> "BlockDiagonal":
        _, cols, layers = bp.capture(space, factor_fn, per_position=per_position)
        with bp.without_autocast():
            return cls(space.layout, _dense_blocks(space, layers, cols, max_block_size, chunk_elements), space.point)


def _dense_blocks(space, layers: List[bp.Layer], cols: bp.Columns, max_block_size: int,
                  chunk_elements: int) -> list:
    """A dense block per layer of at most ``max_block_size`` parameters, exact diagonals for the others."""
    N = space.batch_size
    blocks: list = []
    big: List[bp.Layer] = []
    for layer in layers:
        P = sum(space.layout.numels[n] for n in layer.names)
        if P > max_block_size:
            big.append(layer)
            continue
        M = None
        for chunk in rows.row_grads(layer, space, cols, chunk_elements):
            g = torch.cat([chunk[n].reshape(chunk[n].shape[0], -1) for n in layer.names], dim=1)
            M = red.gram(g) if M is None else M.add_(red.gram(g))
        blocks.append(DenseBlock(layer.names, [space.layout.shapes[n] for n in layer.names], M / N))
    return blocks + diag_blocks(space, big, cols, chunk_elements)
