r"""An output metric with a weight per position: :math:`G_{z_{nt}} = w_{nt}\, G^{\text{base}}_{z_{nt}}`.

Weights carry the reduction of a loss (``"mean"`` over all positions versus the
convention's mean over examples) and positions that the loss ignores
(:math:`w_{nt} = 0`).  Every view scales consistently:

* ``mv``, ``matrix`` by :math:`w`; ``sqrt`` and ``sample`` columns by :math:`\sqrt w`;
* ``position_loss`` and ``loss_grad`` by :math:`w` (the batch loss is
  :math:`\frac1N\sum_{n,t} w_{nt}\,\ell(z_{nt}, y_{nt})`);
* ``empirical_factor`` by :math:`\sqrt w`, so that the empirical Fisher is, like the
  Gauss-Newton matrix, linear in the weights.
"""
from __future__ import annotations

from typing import Optional, Union

import torch

from .base import OutputMetric

__all__ = ["WeightedOutput"]

Weight = Union[float, torch.Tensor]


class WeightedOutput(OutputMetric):
    r"""``base`` scaled by a weight per position.

    Parameters
    ----------
    base : OutputMetric
        The metric of one position.
    weight : float or tensor
        :math:`w \ge 0`, a number or a tensor of shape ``(N, *middle)`` (the outputs' shape
        without the last axis).
    ignore_index : int, optional
        Class-index targets equal to it are replaced by 0 before they reach ``base``
        (their weight must be 0).
    """

    def __init__(self, base: OutputMetric, weight: Weight = 1.0, ignore_index: Optional[int] = None):
        super().__init__(base.dim)
        if isinstance(weight, torch.Tensor):
            if bool((weight < 0).any()) or not bool(torch.isfinite(weight).all()):
                raise ValueError("position weights must be finite and >= 0")
        elif not (float(weight) >= 0):
            raise ValueError(f"the weight must be >= 0, got {weight}")
        self.base, self.weight, self.ignore_index = base, weight, ignore_index
        self.name = f"weighted {base.name}"

    # weights broadcast over the last axis (and any leading axes such as factor columns)
    def _w(self, like: torch.Tensor, power: float = 1.0) -> Weight:
        w = self.weight
        if isinstance(w, torch.Tensor):
            w = w.to(like) if power == 1.0 else w.to(like) ** power
            return w.unsqueeze(-1)
        return float(w) ** power

    def check(self, z: torch.Tensor) -> None:
        self.base.check(z)
        if isinstance(self.weight, torch.Tensor) and tuple(self.weight.shape) != tuple(z.shape[:-1]):
            raise ValueError(f"position weights of shape {tuple(self.weight.shape)} do not fit outputs of shape "
                             f"{tuple(z.shape)}")

    def _targets(self, targets: torch.Tensor) -> torch.Tensor:
        if self.ignore_index is None or targets.is_floating_point():
            return targets
        return torch.where(targets == self.ignore_index, torch.zeros_like(targets), targets)

    def mv(self, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self._w(v) * self.base.mv(z, v)

    def matrix(self, z: torch.Tensor) -> torch.Tensor:
        M = self.base.matrix(z)
        w = self._w(M)
        return w.unsqueeze(-1) * M if isinstance(w, torch.Tensor) else w * M

    def sqrt(self, z: torch.Tensor) -> torch.Tensor:
        return self._w(z, 0.5) * self.base.sqrt(z)

    def sample(self, z: torch.Tensor, samples: int = 1, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return self._w(z, 0.5) * self.base.sample(z, samples, generator)

    def check_targets(self, z: torch.Tensor, targets: torch.Tensor) -> None:
        self.base.check_targets(z, self._targets(targets))

    def position_loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        ell = self.base.position_loss(z, self._targets(targets))
        w = self.weight.to(ell) if isinstance(self.weight, torch.Tensor) else self.weight
        return w * ell

    def loss_grad(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self._w(z) * self.base.loss_grad(z, self._targets(targets))

    def empirical_factor(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return (self._w(z, 0.5) * self.base.loss_grad(z, self._targets(targets))).unsqueeze(0)

    def __repr__(self) -> str:
        w = f"tensor{tuple(self.weight.shape)}" if isinstance(self.weight, torch.Tensor) else f"{self.weight:g}"
        return f"WeightedOutput({self.base!r}, weight={w})"
