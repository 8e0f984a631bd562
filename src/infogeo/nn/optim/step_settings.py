r"""The checks of :class:`~.natural_gradient.NaturalGradient`'s own arguments: its step rule and the settings that
go with it (learning rate, betas, Nesterov, the cautious mask, momentum, KL clipping, the classic K-FAC recipe).

They depend on one another and on the curvature's row of the kinds table, so they are checked together, before
anything is built; the settings passed on to the :class:`~.preconditioner.Preconditioner` are checked there
(:func:`~.settings.check_settings`).
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple, Union

import torch

from ...geometry.points import check_flag, positive_int
from .. import fsdp
from .._params import HELD_DTYPES
from .gradient_basis import UNFACTORED
from .settings import (CURVATURES, KINDS, MAX_COUNT, agrees, check_betas, check_learning_rate, positive_number,
                       step_defaults)
from .step import STEP_RULES

__all__ = ["DEFAULT_LR", "INPUT_LR_SCALE", "OUTPUT_LR_SCALE", "StepSettings", "check_step_settings"]

#: the learning rate of each step rule when none is given
DEFAULT_LR = {"graft": 1e-2, "clip": 0.1, "eigen-adam": 1e-2}
#: ``input_lr_scale`` of ``step_rule="eigen-adam"`` under the model's Fisher when none is given: the layers that read
#: the data step at this multiple of the learning rate (:class:`~.natural_gradient.NaturalGradient`)
INPUT_LR_SCALE = 3.0
#: ``output_lr_scale`` likewise: the layer that writes the model's output steps at this multiple of the learning rate
OUTPUT_LR_SCALE = 2.0


class StepSettings(NamedTuple):
    """:class:`~.natural_gradient.NaturalGradient`'s settings, checked, with their defaults filled in."""

    step_rule: str
    lr: float
    betas: Tuple[float, float]
    eps: float
    nesterov: bool
    cautious: bool
    input_lr_scale: float
    output_lr_scale: float
    state_dtype: Union[str, torch.dtype]
    momentum: float
    kl_clip: Optional[float]
    quadratic_model: bool
    adaptive_damping: bool
    damping_adaptation_period: int
    damping_factor: float


def _eigen_adam_flag(name: str, value: Any, rule: str, fisher_basis: bool, what: str, hint: str = "") -> bool:
    """A switch of ``step_rule="eigen-adam"`` alone (``nesterov``, ``cautious``): ``None`` resolves to on under the
    model's Fisher with that rule, off otherwise; ``True`` with another rule is refused by name."""
    flag = rule == "eigen-adam" and fisher_basis if value is None else check_flag(name, value)
    if flag and rule != "eigen-adam":
        raise ValueError(f"{name}=True {what} step_rule='eigen-adam', got step_rule={rule!r}{hint}")
    return bool(flag)


def check_step_settings(model: torch.nn.Module, curvature: str, damping: float, options: Dict[str, Any], *,
                        lr: Optional[float], step_rule: Optional[str], betas: Optional[Tuple[float, float]],
                        eps: float, nesterov: Optional[bool], unfactored: str, state_dtype: Any, momentum: float,
                        cautious: Optional[bool], input_lr_scale: Optional[float],
                        output_lr_scale: Optional[float],
                        kl_clip: Union[float, None, str], quadratic_model: bool, adaptive_damping: bool,
                        damping_adaptation_period: int, damping_factor: float) -> StepSettings:
    """Raise a ``ValueError`` or ``TypeError`` naming the first argument that is out of range or does not go with
    the others; else the settings, defaults filled in.  ``options`` (the preconditioner's) take what
    ``step_rule="eigen-adam"`` needs of the curvature (e.g. K-FAC's eigenbases as its factorisation)."""
    quadratic_model = check_flag("quadratic_model", quadratic_model)
    adaptive_damping = check_flag("adaptive_damping", adaptive_damping)
    row = KINDS.get(CURVATURES.get(str(curvature).lower()) or "")
    sharded = any(fsdp.is_dtensor(p) for p in model.parameters())
    rule, betas = step_defaults(curvature, step_rule, betas, options,
                                classic=quadratic_model or adaptive_damping, sharded=sharded)
    if rule not in STEP_RULES:
        raise ValueError(f"unknown step_rule {step_rule!r}; expected one of {STEP_RULES}")
    if rule != "clip" and (quadratic_model or adaptive_damping):
        raise ValueError("quadratic_model and adaptive_damping are defined on the exact step: pass "
                         "step_rule='clip' (or leave step_rule unset)")
    lr = check_learning_rate(DEFAULT_LR[rule] if lr is None else lr)
    if unfactored not in UNFACTORED:
        raise ValueError(f"unfactored must be one of {UNFACTORED}, got {unfactored!r}")
    momentum = positive_number("momentum", momentum, inclusive=True, maximum=1.0)
    if quadratic_model and momentum:
        raise ValueError("quadratic_model=True chooses the momentum itself; pass momentum=0")
    if rule != "clip" and momentum:
        raise ValueError(f"step_rule={rule!r} averages with betas[0]; momentum belongs to step_rule='clip'")
    # by default under the model's Fisher; SOAP (curvature="soap") is Adam's moment, as published
    fisher_basis = row is not None and row.statistics == "metric"
    nesterov = _eigen_adam_flag("nesterov", nesterov, rule, fisher_basis, "is NAdam's first moment of",
                                " (its heavy-ball momentum is momentum=)" if rule == "clip" else "")
    cautious = _eigen_adam_flag("cautious", cautious, rule, fisher_basis,
                                "masks the coordinates in the eigenbasis of")
    scales = []
    for name, value, default, which in (("input_lr_scale", input_lr_scale, INPUT_LR_SCALE, "the layers that read the data"),
                                        ("output_lr_scale", output_lr_scale, OUTPUT_LR_SCALE,
                                         "the layer that writes the output")):
        if value is None:
            value = default if rule == "eigen-adam" and fisher_basis else 1.0
        value = positive_number(name, value)
        if value != 1.0 and rule != "eigen-adam":
            raise ValueError(f"{name} scales the learning rate of step_rule='eigen-adam' in {which}, got "
                             f"step_rule={rule!r}")
        scales.append(value)
    if rule == "eigen-adam":
        if row is None or row.eigenbasis is None:
            known = [k.name for k in KINDS.values() if k.eigenbasis is not None]
            raise ValueError(f"step_rule='eigen-adam' works in the Kronecker eigenbasis of a curvature's factors: "
                             f"pass curvature= one of {known}, got {curvature!r}")
        for key, value in row.eigenbasis.items():   # K-FAC: eigenbases as its factorisation, the factors alone
            if not agrees(options.setdefault(key, value), value):
                raise ValueError(f"step_rule='eigen-adam' needs {key}={value!r} with curvature={curvature!r} "
                                 f"(what the rule uses), got {key}={options[key]!r}")
    if not (state_dtype == "auto" if isinstance(state_dtype, str) else state_dtype in HELD_DTYPES):
        raise ValueError(f"state_dtype must be 'auto' or one of {HELD_DTYPES}, got {state_dtype!r}")
    if rule != "eigen-adam" and state_dtype != "auto":
        raise ValueError(f"state_dtype is the dtype step_rule='eigen-adam' holds its state in; got "
                         f"step_rule={rule!r}")
    if isinstance(kl_clip, str):
        if kl_clip != "auto":
            raise ValueError(f"kl_clip must be a positive number, None or 'auto', got {kl_clip!r}")
        # a KL radius only under the model's Fisher (not under the gradients' statistics)
        kl_clip = 1e-3 if rule == "clip" and (row is None or row.statistics == "metric") else None
    elif kl_clip is not None:
        if rule != "clip":
            raise ValueError(f"kl_clip bounds the length of step_rule='clip'; step_rule={rule!r} takes Adam's "
                             "length (leave kl_clip='auto' or pass step_rule='clip')")
        positive_number("kl_clip", kl_clip)
    b1, b2 = check_betas(betas)
    eps = positive_number("eps", eps)
    period = positive_int(damping_adaptation_period, "damping_adaptation_period", maximum=MAX_COUNT)
    factor = positive_number("damping_factor", damping_factor, maximum=1.0)
    positive_number("damping", damping)
    return StepSettings(rule, lr, (b1, b2), eps, bool(nesterov), bool(cautious), scales[0], scales[1], state_dtype,
                        momentum, kl_clip, bool(quadratic_model), bool(adaptive_damping), period, factor)
