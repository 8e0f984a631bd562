r"""BatchNorm normalising with the batch's statistics, those statistics taken as constants.

Reached only under :func:`~.._backprop.constant_batch_statistics` (the optimizers' practice,
as K-FAC optimizers treat BatchNorm); :class:`~infogeo.nn.ParameterSpace` refuses per-example
curvatures of such a layer, whose examples are coupled.
"""
from __future__ import annotations

import torch

from ..._layers import uses_batch_statistics
from .._reducers import accumulation_dtype
from .base import CHUNK_ELEMENTS, LayerRule, Rows, chunks


class BatchNormRule(LayerRule):
    r"""Per-row pseudo-gradients of BatchNorm in training mode (batch statistics held constant).

    With :math:`\hat x = (x - \mu)/\sqrt{\sigma^2 + \epsilon}` (mean and biased variance over the
    batch and positions, as the layer computes them) the output is :math:`\gamma\hat x + \beta` per
    channel, so row :math:`r` has :math:`\sum_t b_{rt}\hat x_{nt}` for :math:`\gamma` and
    :math:`\sum_t b_{rt}` for :math:`\beta` (:math:`t` the positions).
    """

    name = "batchnorm"
    description = "BatchNorm in training mode (optimizers only): batch statistics taken as constants"

    def matches(self, module, args, kwargs) -> bool:
        return uses_batch_statistics(module) and len(args) == 1 and not kwargs and args[0].dim() >= 2

    def rows(self, layer, space, cols, chunk_elements: int = CHUNK_ELEMENTS) -> Rows:
        m = layer.module
        x, b = layer.inputs[0], layer.grad_out
        dt = accumulation_dtype(x, b)   # half-precision rows under autocast: the sums in float32
        N, C = x.shape[0], x.shape[1]
        x = x.reshape(N, C, -1).to(dt)
        dims = (0, 2)
        xhat = (x - x.mean(dims, keepdim=True)) * torch.rsqrt(x.var(dims, unbiased=False, keepdim=True) + m.eps)
        R = cols.rows
        b = b.reshape(R, C, -1).to(dt)
        for sl in chunks(R, C * x.shape[2], chunk_elements):
            n_idx = torch.arange(sl.start, sl.stop, device=x.device) % N
            out = {}
            if "weight" in layer.params:
                out[layer.params["weight"]] = (b[sl] * xhat[n_idx]).sum(2)
            if "bias" in layer.params:
                out[layer.params["bias"]] = b[sl].sum(2)
            yield out
