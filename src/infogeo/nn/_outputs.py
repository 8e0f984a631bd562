r"""The output side of a :class:`~infogeo.nn.space.ParameterSpace`: its network's outputs :math:`z` on the batch.

The model called with given parameter values, on copies of the running statistics it would update; the outputs'
shape found by a forward on the ``meta`` device where the model allows (kept for the next space on the same model
and inputs of the same shapes; a real forward whose outputs differ binds the metric again); the batch and the
targets checked against the outputs when the space is built; and the columns in output space whose pullback is a curvature
(:meth:`~infogeo.nn.space.ParameterSpace.factors`).  The parameter side, the manifold, is :mod:`infogeo.nn.space`.
"""
from __future__ import annotations

import logging
import math
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

import torch

from ..geometry.points import positive_int
from ._layers import batch_statistics_layers
from ._params import Params
from .curvature import _backprop as _bp, kinds
from .output_metrics import OutputMetric

if TYPE_CHECKING:  # pragma: no cover
    from .space import ParameterSpace

logger = logging.getLogger(__name__)

__all__ = ["with_statistics_copies", "probe_outputs", "bind_output_metric", "confirm_outputs", "factor_columns"]


def with_statistics_copies(model: torch.nn.Module, params: Params) -> Params:
    """``params`` and copies of the running statistics of ``model``'s BatchNorm layers in training mode, which a
    call would otherwise update in place."""
    stateful = {f"{path}.{b}" if path else b: t.clone()
                for path, m in batch_statistics_layers(model).items() if m.track_running_stats
                for b, t in m.named_buffers(recurse=False) if t is not None}
    return {**params, **stateful} if stateful else params


#: per model, the outputs of its last meta-device forwards (:func:`probe_outputs`), by what sets their shape
_PROBED: "weakref.WeakKeyDictionary[torch.nn.Module, Dict[tuple, torch.Tensor]]" = weakref.WeakKeyDictionary()
#: the meta outputs kept per model
PROBES_KEPT = 8


def _probe_key(space: "ParameterSpace") -> Optional[tuple]:
    """What the outputs' shape and dtype depend on: the parameters' and buffers' shapes and dtypes, the inputs' (and
    the other arguments' values), the training flag and ``output_fn``; ``None`` where an argument is unhashable."""
    def leaf(a: Any) -> Any:
        return ("tensor", tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else a
    model = space.model
    key = (model.training, space.output_fn,
           tuple((n, tuple(t.shape), t.dtype) for n, t in list(model.named_parameters()) + list(model.named_buffers())),
           tuple(leaf(a) for a in space.batch.args), tuple(sorted((k, leaf(v)) for k, v in space.batch.kwargs.items())))
    try:
        hash(key)
    except TypeError:   # a list or dict among the arguments: not kept
        return None
    return key


def probe_outputs(space: "ParameterSpace") -> torch.Tensor:
    """Outputs of the right shape and dtype, cheaply: a ``meta``-device forward (kept for the next space on the same
    model and inputs of the same shapes: on a small network the meta forward's dispatch costs more than the real
    one, 5.6 ms against a 3.5 ms forward of a 784-256-256-10 MLP on 512 inputs), else the real one."""
    key = _probe_key(space)
    kept = _PROBED.get(space.model, {}) if key is not None else {}
    if key in kept:
        return kept[key]
    meta = {n: torch.empty_like(t, device="meta")
            for n, t in list(space.model.named_parameters()) + list(space.model.named_buffers())}
    try:
        with torch.no_grad():
            z = space.evaluate(space.batch.map(lambda a: a.to("meta")), meta)
        if isinstance(z, torch.Tensor) and z.is_meta:
            if key is not None:
                kept = _PROBED.setdefault(space.model, {})
                if len(kept) >= PROBES_KEPT:
                    kept.pop(next(iter(kept)))
                kept[key] = z
            return z
    except Exception:  # data-dependent code, tensors held outside parameters and buffers, ...
        logger.debug("meta-device forward failed; probing the outputs with the real forward pass")
    return space.outputs


def bind_output_metric(space: "ParameterSpace", metric: OutputMetric, targets: Optional[torch.Tensor],
                       outputs: Optional[torch.Tensor] = None) -> Tuple[OutputMetric, int]:
    """``metric`` bound to the outputs and ``targets`` (:meth:`~infogeo.nn.output_metrics.OutputMetric.bind`), and
    the batch size, once the batch's devices and length and the targets are checked against the outputs (``outputs``
    where given, else those an optimizer's forward recorded, else :func:`probe_outputs`); the outputs' shape and
    dtype are noted on the space (:func:`confirm_outputs`)."""
    for a in space.batch.tensors():
        if a.device != space.device:
            raise ValueError(f"data on {a.device} but the model's parameters on {space.device}; "
                             f"move them to one device")
    recorded = _bp.recorded_outputs() if outputs is None else outputs
    z = probe_outputs(space) if recorded is None else recorded.detach()
    metric.check(z)
    space._bound_outputs = (tuple(z.shape), z.dtype) if isinstance(z, torch.Tensor) else None
    n = int(z.shape[0])
    for a in space.batch.tensors():
        if a.dim() and a.shape[0] != n:
            raise ValueError(f"data tensors must share the batch axis: outputs have {n} "
                             f"examples but an input has shape {tuple(a.shape)}")
    if targets is not None:
        metric.check_targets(z, targets)
    return metric.bind(z, targets), n


def confirm_outputs(space: "ParameterSpace", z: Any) -> None:
    """The outputs ``z`` of a real forward against those the space's output metric was bound to: where their shape
    or dtype differ (a kept meta probe, :func:`probe_outputs`, from before a change of the model its key does not
    see, such as an attribute the forward reads), the model's kept probes are dropped and the metric is bound to
    ``z`` again, with the checks of construction."""
    bound = getattr(space, "_bound_outputs", None)
    if bound is None or not isinstance(z, torch.Tensor) or (tuple(z.shape), z.dtype) == bound:
        return
    _PROBED.pop(space.model, None)
    space.output_metric, space.batch_size = bind_output_metric(space, space.unbound_metric, space.targets, z)


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
