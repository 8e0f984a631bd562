r"""Checks, at each step, of how a training loop drives the preconditioner: mistakes that would go on silently.

Each raises a ``ValueError`` saying what to do instead.  The preconditioner runs them with this rank's own work
before the step's one agreement (:func:`~.agreement.agree_step`), so under ``torch.distributed`` an error on one
rank stops every rank at the same step, and nothing has changed when it is raised.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, List, Tuple

import torch

__all__ = ["check_step", "check_unfrozen", "check_unscaled", "check_tracked"]

Named = List[Tuple[str, torch.Tensor]]


def check_unfrozen(frozen: Named) -> None:
    """Refuse a parameter that had ``requires_grad=False`` when the optimizer was built (``frozen``, by name) and
    now has a gradient: unfrozen since, and left out of the curvature, it would never move (a torch optimizer
    built on ``model.parameters()`` trains it)."""
    for name, p in frozen:
        if p.requires_grad and p.grad is not None:
            raise ValueError(
                f"parameter {name!r} has a gradient, but had requires_grad=False when the optimizer was built: the "
                f"curvature covers only the parameters trainable then, so it would never move. Build the optimizer "
                f"again once the parameters it trains are unfrozen (NaturalGradient(model, ...) and "
                f"Preconditioner(model, ...) cover every parameter with requires_grad=True then); if another "
                f"optimizer trains it, build this one on the parameters it trains (NaturalGradient(params, "
                f"model=model), Preconditioner(model, params=params))")


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


def check_tracked(untracked: List[Tuple[str, Named]]) -> None:
    """Refuse a layer that this step's forward called only with autograd disabled (``untracked``: each such layer's
    path and its parameters, by name) and whose parameters have gradients all the same: they came from a pass
    the forward's hooks never saw, as ``torch.utils.checkpoint.checkpoint(..., use_reentrant=True)`` makes one
    (it runs its function under ``torch.no_grad()`` and again inside the backward), so the curvature would hold
    nothing of that layer and its step would be the gradient over the damping."""
    for path, params in untracked:
        with_grad = [n for n, p in params if p.grad is not None]
        if with_grad:
            raise ValueError(
                f"layer {path or '(the model)'!r} was called with autograd disabled in the forward pass, yet "
                f"{with_grad[0]!r} has a gradient: activation checkpointing with use_reentrant=True runs a "
                f"function so and again inside the backward, where the curvature cannot be recorded. Use "
                f"torch.utils.checkpoint.checkpoint(fn, ..., use_reentrant=False) (Hugging Face: "
                f"model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{'use_reentrant': False}}))")


def check_step(frozen: Named, scaler: Any) -> None:
    """Both checks of a step: :func:`check_unfrozen` and :func:`check_unscaled`."""
    check_unfrozen(frozen)
    check_unscaled(scaler)

