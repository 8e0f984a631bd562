r"""Checks, at each step, of how a training loop drives the preconditioner: mistakes that would go on silently.

Each raises a ``ValueError`` saying what to do instead.  The preconditioner runs them with this rank's own work
before the step's one agreement (:func:`~.agreement.agree_step`), so under ``torch.distributed`` an error on one
rank stops every rank at the same step, and nothing has changed when it is raised.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

__all__ = ["check_unscaled"]

def check_unscaled(scaler: Any) -> None:
    """Refuse gradients that a ``torch.amp.GradScaler`` given as ``grad_scaler`` still multiplies by its scale: no
    ``scaler.unscale_(optimizer)`` since its last ``update()``, for any optimizer.  The trust region would be
    measured on gradients some :math:`2^{16}` times too large, and the steps made as much too small.

    Read from the scaler's state per optimizer, a private layout of torch's (``_per_optimizer_states``, each entry's
    ``"stage"`` an ``OptState``): where it is not the one known, nothing is checked."""
    enabled = getattr(scaler, "is_enabled", None)
    if scaler is None or not callable(enabled) or not enabled() or getattr(scaler, "_scale", 0) is None:   # unused
        return
    states = getattr(scaler, "_per_optimizer_states", None)
    unscaled = getattr(getattr(getattr(getattr(torch, "amp", None), "grad_scaler", None), "OptState", None),
                       "UNSCALED", None)
    if not isinstance(states, defaultdict) or unscaled is None or \
            not all(isinstance(s, dict) and isinstance(s.get("stage"), type(unscaled)) for s in states.values()):
        return
    if not any(s["stage"] is unscaled for s in states.values()):
        raise ValueError(
            f"the gradients are still multiplied by the GradScaler's scale ({float(scaler.get_scale()):g}): call "
            f"scaler.unscale_(optimizer) after the backward and before Preconditioner.step(), then "
            f"scaler.step(optimizer) (with NaturalGradient: scaler.step(opt), which unscales first); on the scaled "
            f"gradients the trust region would make the steps as many times too small")
