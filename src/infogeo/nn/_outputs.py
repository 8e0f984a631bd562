r"""The output side of a :class:`~infogeo.nn.space.ParameterSpace`: its network's outputs :math:`z` on the batch.

The model called with given parameter values, on copies of the running statistics it would update; the outputs'
shape found by a forward on the ``meta`` device where the model allows; the batch and the targets checked against
the outputs when the space is built; and the columns in output space whose pullback is a curvature
(:meth:`~infogeo.nn.space.ParameterSpace.factors`).  The parameter side, the manifold, is :mod:`infogeo.nn.space`.
"""
from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

import torch

from ..geometry.points import positive_int
from ._layers import batch_statistics_layers
from ._params import Params
from .curvature import _backprop as _bp, kinds
from .output_metrics import OutputMetric

if TYPE_CHECKING:  # pragma: no cover
    from .space import ParameterSpace

logger = logging.getLogger(__name__)

__all__ = ["with_statistics_copies", "probe_outputs", "bind_output_metric", "factor_columns"]


def with_statistics_copies(model: torch.nn.Module, params: Params) -> Params:
    """``params`` and copies of the running statistics of ``model``'s BatchNorm layers in training mode, which a
    call would otherwise update in place."""
    stateful = {f"{path}.{b}" if path else b: t.clone()
                for path, m in batch_statistics_layers(model).items() if m.track_running_stats
                for b, t in m.named_buffers(recurse=False) if t is not None}
    return {**params, **stateful} if stateful else params


def probe_outputs(space: "ParameterSpace") -> torch.Tensor:
    """Outputs of the right shape and dtype, cheaply: a ``meta``-device forward, else the real one."""
    meta = {n: torch.empty_like(t, device="meta")
            for n, t in list(space.model.named_parameters()) + list(space.model.named_buffers())}
    try:
        with torch.no_grad():
            z = space.evaluate(space.batch.map(lambda a: a.to("meta")), meta)
        if isinstance(z, torch.Tensor) and z.is_meta:
            return z
    except Exception:  # data-dependent code, tensors held outside parameters and buffers, ...
        logger.debug("meta-device forward failed; probing the outputs with the real forward pass")
    return space.outputs


def bind_output_metric(space: "ParameterSpace", metric: OutputMetric,
                       targets: Optional[torch.Tensor]) -> Tuple[OutputMetric, int]:
    """``metric`` bound to the outputs and ``targets`` (:meth:`~infogeo.nn.output_metrics.OutputMetric.bind`), and
    the batch size, once the batch's devices and length and the targets are checked against the outputs (those an
    optimizer's forward recorded, else :func:`probe_outputs`)."""
    for a in space.batch.tensors():
        if a.device != space.device:
            raise ValueError(f"data on {a.device} but the model's parameters on {space.device}; "
                             f"move them to one device")
    recorded = _bp.recorded_outputs()
    z = probe_outputs(space) if recorded is None else recorded.detach()
    metric.check(z)
    n = int(z.shape[0])
    for a in space.batch.tensors():
        if a.dim() and a.shape[0] != n:
            raise ValueError(f"data tensors must share the batch axis: outputs have {n} "
                             f"examples but an input has shape {tuple(a.shape)}")
    if targets is not None:
        metric.check_targets(z, targets)
    return metric.bind(z, targets), n


def factor_columns(metric: OutputMetric, z: Any, method: str, samples: int,
                   targets: Callable[[], torch.Tensor], generator: Optional[torch.Generator]) -> torch.Tensor:
    """:meth:`~infogeo.nn.space.ParameterSpace.factors` of the bound output ``metric``; ``targets()`` gives the
    batch's targets, asked for by the empirical Fisher only."""
    if not (isinstance(z, torch.Tensor) and z.is_floating_point()):
        got = f"a {z.dtype} tensor" if isinstance(z, torch.Tensor) else type(z).__name__
        raise TypeError(f"factors takes the outputs z, a floating tensor of shape (N, ..., m) such as "
                        f"space.outputs, got {got}")
    if z.dim() < 2:
        raise ValueError(f"factors takes the outputs z of shape (N, ..., m), with a batch axis, got shape "
                         f"{tuple(z.shape)}")
    z = z.detach()
    method = kinds.method(method)
    if method == "exact":
        return metric.sqrt(z)
    if method == "mc":
        samples = positive_int(samples, "samples")
        return metric.sample(z, samples, generator) / math.sqrt(samples)
    if method == "empirical":
        return metric.empirical_factor(z, targets())
    raise AssertionError(method)  # pragma: no cover
