r"""``torch.nn.Conv1d/2d/3d`` with one group: a Linear layer over the input patches (Grosse & Martens 2016)."""
from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .base import AffineRule

_CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


def conv_padding(m: Any) -> List[Tuple[int, int]]:
    """``(left, right)`` padding of each spatial axis of a convolution (``"same"`` may be asymmetric)."""
    if isinstance(m.padding, str):
        if m.padding == "valid":
            return [(0, 0)] * len(m.kernel_size)
        total = [d * (k - 1) for d, k in zip(m.dilation, m.kernel_size)]   # "same", as torch pads it
        return [(t // 2, t - t // 2) for t in total]
    return [(p, p) for p in m.padding]


def kernel_major_patches(m: Any, x: torch.Tensor) -> torch.Tensor:
    """The input patches of convolution ``m`` on ``x``, ``(N, L, prod(kernel) * C_in)``, kernel offset major.

    The input is padded as the layer pads it (zeros or its ``padding_mode``) and moved to
    channels last, then every spatial axis is cut into windows (views); the one copy reads
    runs of ``C_in`` contiguous entries, several times faster than gathering the
    channel-major order directly.  Positions are ordered like the flattened output;
    :func:`weight_order` permutes the entries to ``weight.reshape(out, -1)``'s order.
    """
    nd = len(m.kernel_size)
    pads = conv_padding(m)
    if any(p for lr in pads for p in lr):
        mode = "constant" if m.padding_mode == "zeros" else m.padding_mode
        x = F.pad(x, [p for lr in reversed(pads) for p in lr], mode=mode)
    x = x.movedim(1, -1).contiguous()                    # (N, S_1..S_nd, C)
    for i, (k, s, d) in enumerate(zip(m.kernel_size, m.stride, m.dilation)):
        x = x.unfold(1 + i, d * (k - 1) + 1, s)          # the window is appended as the last axis
        if d > 1:
            x = x[..., ::d]
    N, C = x.shape[0], x.shape[1 + nd]
    x = x.movedim(1 + nd, -1)                            # (N, L_1..L_nd, k_1..k_nd, C)
    return x.reshape(N, -1, C * math.prod(m.kernel_size))


def weight_order(m: Any, device: Any = None) -> Optional[torch.Tensor]:
    """Column ``j`` of ``weight.reshape(out, -1)`` (channel major) is column ``order[j]`` of the kernel-major
    patches; ``None`` for one input channel, where both orders agree."""
    C, K = m.weight.shape[1], math.prod(m.kernel_size)
    if C == 1:
        return None
    return torch.arange(C * K, device=device).reshape(K, C).T.flatten()


class ConvRule(AffineRule):
    """A Conv1d/2d/3d layer with ``groups=1`` (its own forward) on one ``(N, C, *spatial)`` input."""

    name = "conv"
    description = ("`torch.nn.Conv1d/2d/3d`, one group, any padding mode, stride and dilation: Kronecker "
                   "factors over the input patches (Grosse & Martens 2016)")

    def matches(self, module, args, kwargs) -> bool:
        conv = next((c for c in _CONVS if isinstance(module, c)), None)
        return (conv is not None and type(module).forward is conv.forward and module.groups == 1 and len(args) == 1
                and not kwargs and args[0].dim() == 2 + len(module.kernel_size))

    def inputs(self, layer) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        a = kernel_major_patches(layer.module, layer.inputs[0])
        return a, weight_order(layer.module, a.device)

    def outputs(self, g: torch.Tensor) -> torch.Tensor:
        return g.reshape(g.shape[0], g.shape[1], -1).transpose(1, 2)

    def position_rows(self, g: torch.Tensor) -> torch.Tensor:
        # the transpose of an (out, N T) copy: whole runs of positions move instead of every example's
        g = g.flatten(2)
        return g.transpose(0, 1).reshape(g.shape[1], -1).T

    def summed_outputs(self, g: torch.Tensor) -> torch.Tensor:
        return g.flatten(2).sum(2)
