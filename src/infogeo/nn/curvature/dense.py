r"""The full curvature matrix :math:`\frac1N\sum_n J_n^T G_z J_n`, by ``torch.func.jacrev`` (small networks).

A :class:`Dense` curvature is a :class:`~.base.BlockCurvature` with a single
:class:`~.blocks.DenseBlock` covering every parameter in layout order; ``solve``
is a Cholesky solve of :math:`M + \lambda I`.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from .._params import ParamLayout, Params
from .blockwise import BlockCurvature
from .blocks import DenseBlock


class Dense(BlockCurvature):
    """The dense matrix :math:`M`, shape ``(P, P)`` in layout order, as one dense block."""

    def __init__(self, layout: ParamLayout, M: torch.Tensor, point: Optional[Params] = None):
        super().__init__(layout, [DenseBlock(layout.names, [layout.shapes[n] for n in layout.names], M)], point)

    @classmethod
    def build(cls, space: Any, metric: Any, **ignored: Any) -> "Dense":
        """The dense matrix of ``metric`` (a network metric of ``space``) at the space's point."""
        M = metric.matrix()
        return cls(space.layout, M.to(torch.promote_types(M.dtype, torch.float32)), space.point)   # half: float32

    @property
    def M(self) -> torch.Tensor:
        """The matrix."""
        block = self.blocks[0]
        assert isinstance(block, DenseBlock)
        return block.M

    def to_dense(self) -> torch.Tensor:
        return self.M
