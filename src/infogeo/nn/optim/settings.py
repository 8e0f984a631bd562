r"""The preconditioner's settings: the names it accepts, and their checks at the public boundary."""
from __future__ import annotations

from typing import Any, Iterable, List, Optional, Tuple

import torch

from .. import distributed as dd
from ..curvature import kinds

__all__ = ["CURVATURES", "FISHER", "CAPTURED", "check_settings", "positive_int", "trainable"]

#: the curvature words the optimizers accept (the kinds table, :mod:`~infogeo.nn.curvature.kinds`)
CURVATURES = kinds.ALIASES
FISHER = kinds.METHODS
#: representations built from one forward and per-column backward passes (recordable by hooks)
CAPTURED = tuple(k.name for k in kinds.KINDS.values() if k.captured)


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int, if it is a positive integer."""
    if int(value) != value or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_settings(*, damping, min_damping, max_damping, curvature, fisher, ema_decay, kl_clip, damping_increase,
                   damping_recovery, placement) -> None:
    """Raise a ValueError naming the first setting that is out of range."""
    if not damping > 0:
        raise ValueError(f"damping must be > 0 (Tikhonov damping makes the curvature invertible), got {damping}")
    if not 0 < min_damping <= damping <= max_damping:
        raise ValueError(f"need 0 < min_damping <= damping <= max_damping, got {min_damping}, {damping}, "
                         f"{max_damping}")
    if str(curvature).lower() not in CURVATURES:
        raise ValueError(f"unknown curvature {curvature!r}; expected one of {sorted(CURVATURES)}")
    if str(fisher).lower() not in FISHER:
        raise ValueError(f"unknown fisher {fisher!r}; expected one of {sorted(FISHER)}")
    if not 0 <= ema_decay < 1:
        raise ValueError(f"ema_decay must lie in [0, 1), got {ema_decay}")
    if kl_clip is not None and not kl_clip > 0:
        raise ValueError(f"kl_clip must be > 0 or None, got {kl_clip}")
    if not damping_increase > 1 or not 0 < damping_recovery <= 1:
        raise ValueError("need damping_increase > 1 and 0 < damping_recovery <= 1")
    if placement not in dd.PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; expected one of {dd.PLACEMENTS}")


def trainable(module: torch.nn.Module, params: Optional[Iterable[Any]]) -> List[Tuple[str, torch.nn.Parameter]]:
    """``(name, parameter)`` of ``module`` to precondition: ``params`` (all of them ``module``'s) or every trainable one."""
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    if params is not None:
        wanted = {id(p) for p in params}
        known = {id(p) for _, p in module.named_parameters()}
        if wanted - known:
            raise ValueError("a parameter given to the preconditioner does not belong to model")
        named = [(n, p) for n, p in named if id(p) in wanted]
    if not named:
        raise ValueError("no parameters with requires_grad=True to precondition")
    return named
