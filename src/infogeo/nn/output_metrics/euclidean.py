r"""Euclidean output metrics: Gauss-Newton, and the Gaussian likelihood with fixed variance."""
from __future__ import annotations

import math
from typing import Optional

import torch

from .base import OutputMetric, _basis_like

__all__ = ["EuclideanOutput", "GaussianFisher"]


class EuclideanOutput(OutputMetric):
    r"""Euclidean metric :math:`G_z = cI` on outputs: the pullback is the Gauss-Newton matrix.

    As a likelihood it is the Gaussian with fixed variance :math:`1/c`:
    loss :math:`\tfrac c2\|z - t\|^2` (the constant is dropped).
    """

    name = "Euclidean output metric"

    def __init__(self, scale: float = 1.0, dim: Optional[int] = None):
        super().__init__(dim)
        if not scale > 0:
            raise ValueError(f"the Euclidean output metric needs scale > 0, got {scale}")
        self.scale = float(scale)

    def mv(self, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.scale * v

    def matrix(self, z: torch.Tensor) -> torch.Tensor:
        return self.scale * torch.eye(z.shape[-1], dtype=z.dtype, device=z.device).expand(tuple(z.shape) + (z.shape[-1],))

    def sqrt(self, z: torch.Tensor) -> torch.Tensor:
        return math.sqrt(self.scale) * _basis_like(z)

    def sample(self, z: torch.Tensor, samples: int = 1, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return math.sqrt(self.scale) * torch.randn((samples,) + tuple(z.shape), dtype=z.dtype, device=z.device,
                                                   generator=generator)

    def position_loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_targets(z, targets)
        return 0.5 * self.scale * ((z - targets) ** 2).sum(-1)

    def loss_grad(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_targets(z, targets)
        return self.scale * (z - targets)

    def __repr__(self):
        return f"EuclideanOutput(scale={self.scale})"


class GaussianFisher(EuclideanOutput):
    r"""Fisher metric of :math:`N(z, \sigma^2 I)` in its mean: :math:`G_z = I/\sigma^2`."""

    name = "Gaussian Fisher metric"

    def __init__(self, variance: float = 1.0, dim: Optional[int] = None):
        if not variance > 0:
            raise ValueError(f"the Gaussian Fisher metric needs variance > 0, got {variance}")
        super().__init__(1.0 / variance, dim)
        self.variance = float(variance)

    def __repr__(self):
        return f"GaussianFisher(variance={self.variance})"
