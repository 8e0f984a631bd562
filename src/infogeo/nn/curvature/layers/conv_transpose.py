r"""``torch.nn.ConvTranspose1d/2d/3d`` with one group: a convolution's Kronecker factors with input and output swapped.

A transposed convolution scatters each input position :math:`t` through its kernel: per spatial axis
(stride :math:`s`, padding :math:`p`, dilation :math:`d`) :math:`y_{o,\,st-p+dk} \mathrel{+}= \sum_i x_{it}W_{iok}`,
so the weight's gradient gathers,

.. math:: \partial W_{iok} = \sum_t x_{it}\,g_{o,\,st-p+dk},\qquad
          \partial W = \sum_t x_t\,u_t^T,

with :math:`x_t` the input at position :math:`t` (:math:`C_\text{in}` entries) and :math:`u_t` the output
gradient's patch read at :math:`t` with the layer's kernel, stride, dilation and (zero) padding, channel major
(:math:`C_\text{out}K` entries, :math:`K` the kernel's size): an ordinary convolution's unfold of :math:`g`, the
roles of input and output exchanged.  In the ``(out, in)`` layout of :class:`~.base.AffineRule` the matrix is
:math:`W = \text{weight.reshape}(C_\text{in}, C_\text{out}K)^T` (``transposed``), the input rows are the
:math:`x_t` and the output rows the :math:`u_t`, so K-FAC-expand's factors are
:math:`A = \frac1{NT}\sum_{n,t}x_{nt}x_{nt}^T` (:math:`C_\text{in}^2`) and
:math:`G = \frac1N\sum_{j,n,t}u_{jnt}u_{jnt}^T` (:math:`(C_\text{out}K)^2`), the input positions being the
positions of Eschenhagen et al. (2023) (``reduce``: the mean of the :math:`x_t` and the sum of the :math:`u_t`).
Under the Euclidean output metric the weight's block of a lone layer is then exact for one input position, and
for patches that do not overlap (stride equal to the kernel, no padding or dilation).  ``output_padding``
lengthens the output on the far side of each axis: the padded gradient then holds windows past the last input
position (where ``output_padding`` reaches the stride), which are dropped.

The bias gradient is :math:`\sum_s g_s` over all output positions, which the patches do not add up to (a
position is read by as many patches as kernel taps reach it: none, one or several), so the bias has a block
of its own, the exact second moment of its pseudo-gradients (:attr:`~.base.AffineRule.separate_bias`).
"""
from __future__ import annotations

import copy
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .base import AffineRule

_TRANSPOSED = (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)

#: ``(kernel, stride, dilation, padding, input size)`` per spatial axis
Geometry = Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]


def gradient_patches(geometry: Geometry, g: torch.Tensor) -> torch.Tensor:
    """The patches :math:`u_t` of an output gradient ``g`` ``(N, C_out, *out_size)`` at the input positions,
    ``(N, T_in, C_out * prod(kernel))``, channel major (the order of ``weight.reshape(C_in, -1)``'s columns)."""
    kernel, stride, dilation, padding, size = geometry
    nd = len(kernel)
    if any(padding):
        g = F.pad(g, [q for p in reversed(padding) for q in (p, p)])
    for i, (k, s, d, L) in enumerate(zip(kernel, stride, dilation, size)):
        g = g.unfold(2 + i, d * (k - 1) + 1, s)          # the window is appended as the last axis
        if d > 1:
            g = g[..., ::d]
        g = g.narrow(2 + i, 0, L)                        # windows past the input's last position: output_padding
    N, C = g.shape[0], g.shape[1]
    g = g.movedim(1, 1 + nd)                             # (N, L_1..L_nd, C, k_1..k_nd)
    return g.reshape(N, math.prod(size), C * math.prod(kernel))


class ConvTransposeRule(AffineRule):
    """A ConvTranspose1d/2d/3d layer with ``groups=1`` (its own forward, no ``output_size``) on one batched input."""

    name = "conv_transpose"
    description = ("`torch.nn.ConvTranspose1d/2d/3d`, one group, any stride, padding, dilation and output_padding: "
                   "Kronecker factors over the input positions and the output gradient's patches; the bias an "
                   "exact block of its own")
    transposed = True
    separate_bias = True
    #: the call's geometry (:meth:`bind`)
    geometry: Optional[Geometry] = None

    def matches(self, module, args, kwargs) -> bool:
        conv = next((c for c in _TRANSPOSED if isinstance(module, c)), None)
        return (conv is not None and type(module).forward is conv.forward and module.groups == 1
                and module.padding_mode == "zeros" and len(args) == 1 and not kwargs
                and args[0].is_floating_point() and args[0].dim() == 2 + len(module.kernel_size))

    def bind(self, module, args) -> "ConvTransposeRule":
        bound = copy.copy(self)
        bound.geometry = (tuple(module.kernel_size), tuple(module.stride), tuple(module.dilation),
                          tuple(module.padding), tuple(args[0].shape[2:]))
        return bound

    def inputs(self, layer) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        x = layer.inputs[0]
        return x.reshape(x.shape[0], x.shape[1], -1).transpose(1, 2), None

    def outputs(self, g: torch.Tensor) -> torch.Tensor:
        if self.geometry is None:
            raise RuntimeError("the conv_transpose rule reads output gradients once bound to a call (bind)")
        return gradient_patches(self.geometry, g)

    def bias_gradient(self, g: torch.Tensor) -> torch.Tensor:
        return g.reshape(g.shape[0], g.shape[1], -1).sum(2)
