r"""The positions a loss ignores, read off its gradient at the outputs (the optimizers' hooks see no targets).

A class-index loss with ``ignore_index`` (masked language modelling, padding) gives the ignored positions a
gradient of exactly zero, :math:`\partial L/\partial z_{nt} = 0`.  A position the loss does not ignore has a
non-zero gradient, unless the likelihood is saturated there (:math:`p = \text{onehot}` to the last bit), where
its Fisher is zero too (the Hessian of a categorical or Bernoulli likelihood vanishes where its gradient does,
:attr:`~.base.OutputMetric.flat_means_ignored`).  So for those metrics a zero gradient row marks a position
the curvature leaves out, as the targets' ``ignore_index`` would.  Metrics whose curvature does not vanish with
the gradient (a squared error at an exact fit) are left as they are.  A class-weighted cross-entropy needs the
targets themselves (each position's weight is its class's): the gradient gives them too, its one negative entry.
"""
from __future__ import annotations

from typing import Optional

import torch

from .base import OutputMetric
from .losses import LossOutput
from .weighted import WeightedOutput

__all__ = ["ignoring_flat", "empirical_scale", "one_scale"]


def _base(metric: OutputMetric) -> OutputMetric:
    return metric.base if isinstance(metric, WeightedOutput) else metric


def ignoring_flat(metric: OutputMetric, z: torch.Tensor, grad: torch.Tensor) -> Optional[OutputMetric]:
    """``metric`` bound to outputs ``z`` with the positions where the loss gradient ``grad`` is zero weighted 0,
    or ``None`` where every position has a gradient and nothing else is to be read (then the metric stands as
    bound without targets).  A torch loss's weights are those its targets would give (the mean over the positions
    it keeps); with class weights, the targets themselves are read off the gradient (below); another metric keeps
    its weights and gets 0 at the ignored positions."""
    if not _base(metric).flat_means_ignored or grad.dim() < 2 or grad.shape != z.shape:
        return None
    kept = grad.detach().ne(0).any(-1)
    if not bool(kept.any()):   # no gradient at all: no loss to read
        return None
    if isinstance(metric, LossOutput):
        if metric.elements != "one":
            return None
        if metric.class_weight is not None:
            # class-index losses without smoothing (torch refuses class weights with it): the gradient
            # w_y (p - e_y) / W is negative at the target class alone, so that class is its smallest entry
            ignore = -100 if metric.ignore_index is None else metric.ignore_index
            return metric.bind(z, torch.where(kept, grad.detach().argmin(-1), ignore))
        if bool(kept.all()) or metric.ignore_index is None:
            return None
        return metric.bind(z, kept=kept)
    if bool(kept.all()):
        return None
    return WeightedOutput(metric.bind(z), kept.to(z.dtype))


def empirical_scale(metric: OutputMetric, z: torch.Tensor) -> torch.Tensor:
    r"""The factor that turns the loss gradient :math:`N\,\partial L/\partial z_{nt} = w_{nt}\nabla\ell_{nt}` of a
    torch loss into the empirical Fisher's column :math:`\sqrt{w_{nt}}\,\nabla\ell_{nt}` of its output metric
    (:class:`~.losses.LossOutput`, bound to ``z``): :math:`w^{-1/2}` where :math:`w > 0`, 0 elsewhere, shaped to
    broadcast over ``z``; 1 for other metrics, whose loss the hooks take to be the one given."""
    w = getattr(metric, "weight", None) if isinstance(metric, LossOutput) else None
    if w is None:
        return torch.ones((), dtype=z.dtype, device=z.device)
    w = torch.as_tensor(w, dtype=z.dtype, device=z.device)
    scale = torch.where(w > 0, w.clamp_min(torch.finfo(z.dtype).tiny).rsqrt(), torch.zeros_like(w))
    return scale.unsqueeze(-1) if scale.dim() else scale


def one_scale(scale: torch.Tensor) -> bool:
    """Whether the non-zero entries of an :func:`empirical_scale` are one number (the examples a loss keeps weigh
    the same, unless it has class weights): then the user's backward can carry the empirical Fisher's one column to
    every layer."""
    nonzero = scale.reshape(-1)[scale.reshape(-1) != 0]
    return nonzero.numel() == 0 or bool((nonzero == nonzero[0]).all())
