r"""``torch.nn.Linear``: :math:`z = Wa + b` at every position of its input (the last axis is the features)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .base import AffineRule


class LinearRule(AffineRule):
    """A Linear layer (or a subclass that keeps its forward) called on one floating-point tensor."""

    name = "linear"
    rows_are_inputs = True
    rows_are_positions = True
    description = "`torch.nn.Linear`: Kronecker factors; positions of (N, ..., in) inputs shared (Eschenhagen et al. 2023)"

    def matches(self, module, args, kwargs) -> bool:
        return (isinstance(module, torch.nn.Linear) and type(module).forward is torch.nn.Linear.forward
                and len(args) == 1 and not kwargs and args[0].is_floating_point())

    def inputs(self, layer) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        a = layer.inputs[0]
        return a.reshape(a.shape[0], -1, a.shape[-1]), None

    def outputs(self, g: torch.Tensor) -> torch.Tensor:
        return g.reshape(g.shape[0], -1, g.shape[-1])

    def single_position(self, layer) -> bool:
        return layer.inputs[0].dim() == 2
