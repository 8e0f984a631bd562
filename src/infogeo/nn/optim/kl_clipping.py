r"""KL clipping: the trust region of a natural-gradient step (Ba et al. 2017).

The step :math:`-\eta\delta` along :math:`\delta = (C+\lambda I)^{-1}g` changes the model's predictions
by a KL divergence of about :math:`\tfrac12\eta^2\delta^T(C+\lambda I)\delta \approx \tfrac12\eta^2\delta^Tg`.
With per-group learning rates :math:`\eta_\ell` the direction is scaled by

.. math:: \nu = \min\Big(1, \sqrt{\kappa \big/ \textstyle\sum_\ell \eta_\ell^2\, \delta_\ell^T g_\ell}\Big)

so that this predicted change is at most :math:`\kappa` (``kl_clip``).
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Dict, Optional, Sequence, Union

import torch

from .settings import check_learning_rate

__all__ = ["learning_rates", "scale", "check_lr"]

LearningRate = Union[None, float, Callable[[], float], torch.optim.Optimizer]


def check_lr(lr: LearningRate, kl_clip: Optional[float]) -> None:
    """Warn when a trust region is asked for with no learning rate to measure the step by."""
    if lr is None and kl_clip is not None:
        warnings.warn("Preconditioner: kl_clip is set but no lr was given, so the trust region assumes a "
                      "learning rate of 1; pass lr= (a number, a function, or the optimizer that takes the "
                      "steps) for a trust region on the actual step", UserWarning, stacklevel=3)


def check_covers(lr: LearningRate, names: Sequence[str], params: Sequence[torch.Tensor]) -> None:
    """A ``ValueError`` when ``lr`` is an optimizer that does not hold every one of the preconditioned ``params``
    (named ``names``): the trust region needs each one's learning rate, and the optimizer gives none for the rest."""
    lacking = _not_held(lr, params)
    missing = [n for n, p in zip(names, params) if id(p) in lacking]
    if missing:
        raise ValueError(f"lr= is an optimizer ({type(lr).__name__}) that does not hold {len(missing)} of the "
                         f"{len(params)} preconditioned parameters ({', '.join(repr(n) for n in missing[:3])}"
                         f"{', ...' if len(missing) > 3 else ''}), whose learning rates the trust region needs: "
                         "pass params= with the parameters that optimizer steps (one Preconditioner per optimizer), "
                         "or a number or function as lr=")


def _not_held(lr: LearningRate, params: Sequence[torch.Tensor]) -> set:
    """The ids of ``params`` that ``lr``, an optimizer, holds in none of its groups (none for a number or function)."""
    if not isinstance(lr, torch.optim.Optimizer):
        return set()
    held = {id(p) for g in lr.param_groups for p in g["params"]}
    return {id(p) for p in params if id(p) not in held}


def learning_rates(lr: LearningRate, params: Sequence[torch.Tensor]) -> Dict[int, float]:
    """The learning rate of each parameter (by ``id``), checked finite and positive: an optimizer's groups
    (read now, so that a scheduler is followed), a function's value, a number, or 1 for ``None``."""
    if isinstance(lr, torch.optim.Optimizer):
        rates: Dict[int, float] = {}
        for g in lr.param_groups:   # checked once per group
            r = check_learning_rate(g["lr"], "a parameter group's lr")
            rates.update((id(p), r) for p in g["params"])
        if _not_held(lr, params):   # its groups changed after construction (check_covers)
            raise ValueError(f"lr= is an optimizer ({type(lr).__name__}) that no longer holds every preconditioned "
                             "parameter")
        return rates
    value = 1.0 if lr is None else check_learning_rate(lr() if callable(lr) else lr, "lr")
    return {id(p): value for p in params}


def scale(kl_clip: Optional[float], lrs: Dict[int, float], params: Dict[str, Any],
          grads: Dict[str, torch.Tensor], delta: Dict[str, torch.Tensor]) -> float:
    r"""The factor :math:`\nu` (module docstring) for the named ``params``; 1 without ``kl_clip``."""
    if kl_clip is None:
        return 1.0
    # relative to the largest rate L (kl = L^2 s): a rate whose square overflows still gives nu, which is then tiny
    L = max((lrs[id(p)] for p in params.values()), default=0.0)
    if L == 0:
        return 1.0
    s = float(sum((lrs[id(p)] / L) ** 2 * torch.dot(delta[n].reshape(-1), grads[n].reshape(-1))
                  for n, p in params.items()))
    return math.sqrt(kl_clip / s) / L if s > kl_clip / L / L else 1.0
