r"""Block-diagonal curvature: the exact dense block :math:`\frac1N\sum_{k,n}\mathcal Dw_{kn}\mathcal Dw_{kn}^T` per layer.

Cross-layer terms are dropped; within a layer nothing is approximated.  Layers
with more than ``max_block_size`` parameters get a diagonal block instead, and so do
the parameters taken through the whole network (:mod:`.layers.network`).
Per-example pseudo-gradients are formed in bounded chunks.
"""
from __future__ import annotations

from typing import List

import torch

from . import _backprop as bp, _reducers as red
from .blockwise import BlockCurvature
from .blocks import DenseBlock
from .diagonal import diag_blocks
from .layers.base import CHUNK_ELEMENTS
from .layers.network import network_rows


class BlockDiagonal(BlockCurvature):
    """Dense block per layer (module owning parameters); diagonal for large layers."""

    @classmethod
    def build(cls, space, factor_fn, max_block_size: int = 4096,
              chunk_elements: int = CHUNK_ELEMENTS, per_position: bool = True) -> "BlockDiagonal":
        cap = bp.capture(space, factor_fn, per_position=per_position)
        with bp.without_autocast():
            return cls(space.layout, _dense_blocks(space, cap, max_block_size, chunk_elements), space.point)


def _dense_blocks(space, cap: bp.Capture, max_block_size: int, chunk_elements: int) -> list:
    """A dense block per layer of at most ``max_block_size`` parameters, exact diagonals for the others."""
    blocks: list = []
    big: List[bp.Layer] = []
    for layer in cap.layers:
        if sum(space.layout.numels[n] for n in layer.names) > max_block_size:
            big.append(layer)
        else:
            blocks.append(_dense(space, layer.names, layer.rule.rows(layer, space, cap.cols, chunk_elements)))
    big_network = []
    for group in cap.network:
        if sum(space.layout.numels[n] for n in group) > max_block_size:
            big_network.append(group)
        else:
            blocks.append(_dense(space, group, network_rows(space, group, cap.cols, chunk_elements)))
    return blocks + diag_blocks(space, big, big_network, cap.cols, chunk_elements, cap.unused)


def _dense(space, names: List[str], chunks) -> DenseBlock:
    r""":math:`\frac1N\sum_r g_r g_r^T` over chunks of the per-row pseudo-gradients of ``names``."""
    M = None
    for chunk in chunks:
        g = torch.cat([chunk[n].reshape(chunk[n].shape[0], -1) for n in names], dim=1)
        M = red.gram(g) if M is None else M.add_(red.gram(g))
    return DenseBlock(names, [space.layout.shapes[n] for n in names], M / space.batch_size)
