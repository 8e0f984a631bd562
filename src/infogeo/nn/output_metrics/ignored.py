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

import warnings
import weakref
from typing import Any, Optional, cast

import torch

from .base import OutputMetric
from .likelihoods import CategoricalFisher
from .losses import LossOutput
from .weighted import WeightedOutput

__all__ = ["KeptPositions", "bound_from_gradient", "empirical_scale", "one_scale", "class_axis_second", "not_softmax",
           "warn_unlike_the_metric"]


def _base(metric: OutputMetric) -> OutputMetric:
    return metric.base if isinstance(metric, WeightedOutput) else metric


def bound_from_gradient(metric: OutputMetric, z: torch.Tensor, grad: torch.Tensor) -> Optional[OutputMetric]:
    """``metric`` bound to outputs ``z`` with the positions where the loss gradient ``grad`` is zero weighted 0,
    or ``None`` where every position has a gradient and nothing else is to be read (then the metric stands as
    bound without targets).  A torch loss's weights are those its targets would give (the mean over the positions
    it keeps); with class weights, the targets themselves are read off the gradient (below); another metric keeps
    its weights and gets 0 at the ignored positions."""
    if not _base(metric).flat_means_ignored or grad.dim() < 2 or grad.shape != z.shape:
        return None
    kept = grad.detach().ne(0).any(-1)
    if not bool(kept.any()):   # no gradient at all: the loss keeps no position (a rank whose batch is all padding)
        return WeightedOutput(metric.base.bind(z) if isinstance(metric, WeightedOutput) else metric.bind(z),
                              kept.to(z.dtype))
    if isinstance(metric, LossOutput):
        if metric.elements != "one":   # an elementwise loss (BCE) masked by hand: the mean over the kept positions
            if bool(kept.all()):
                return None
            w = kept.to(z.dtype) * (kept.numel() / float(kept.sum()) if metric.reduction == "mean" else 1.0)
            return WeightedOutput(metric.bind(z), w)
        if metric.class_weight is not None:
            # class-index losses without smoothing (torch refuses class weights with it): the gradient
            # w_y (p - e_y) / W is negative at the target class alone, so that class is its smallest entry
            ignore = -100 if metric.ignore_index is None else metric.ignore_index
            y = torch.where(kept, grad.detach().argmin(-1), ignore)
            _check_index_targets(metric, z, grad.detach(), kept, y)
            return metric.bind(z, y)
        if bool(kept.all()) or metric.ignore_index is None:
            return None
        return metric.bind(z, kept=kept)
    if bool(kept.all()):
        return None
    return WeightedOutput(metric.bind(z), kept.to(z.dtype))


class KeptPositions:
    """The positions the loss of the user's last backward kept, read off its gradient (:func:`bound_from_gradient`),
    for a curvature built by a forward of its own on that batch (``dense``, ``cg``: no hooks see its targets)."""

    def __init__(self, metric: OutputMetric):
        self._metric, self._bound = metric, cast(Any, None)   # a bound metric, an error, or None

    def read(self, z: torch.Tensor, grad: torch.Tensor) -> None:
        """Called with the outputs and the loss gradient at them; an error is kept for the step to raise."""
        try:
            self._bound = bound_from_gradient(self._metric, z.detach(), grad.detach())
        except ValueError as exc:
            self._bound = exc

    def metric(self, default: OutputMetric) -> OutputMetric:
        """The metric bound to the kept positions (``default`` where every position was kept)."""
        if isinstance(self._bound, Exception):
            raise self._bound
        return default if self._bound is None else self._bound


def _check_index_targets(metric: LossOutput, z: torch.Tensor, g: torch.Tensor, kept: torch.Tensor,
                         y: torch.Tensor) -> None:
    r"""Refuse a class-weighted cross-entropy whose targets were probabilities: soft ones leave several negative
    entries in a row of the gradient; one-hot ones give the rows of class-index targets, but torch's mean divides
    them by the number of positions, not by the weights' sum :math:`W` the class weights of index targets give.
    The divisor is read from the row of largest gradient, :math:`w_y(1-p_y)/(-g_y)`."""
    if class_axis_second(metric, g):   # the classes on axis 1: no class can be read off the last axis
        raise ValueError(f"the class-weighted cross-entropy takes its classes on axis 1 of the outputs {tuple(g.shape)} "
                         f"(torch's (N, C, ...) layout) but the categorical metric on the last axis: permute the "
                         f"outputs in output_fn (output_fn=lambda z: z.movedim(1, -1))")
    rows, k = g[kept], y[kept]
    soft = bool(((rows < 0).sum(-1) > 1).any())   # none: a confident row (p_y rounds to 1)
    if not soft:   # index targets: g_c / p_c = w_y / Z at every other class; soft ones vary (loosely: float32's loss)
        p = torch.softmax(z.detach()[kept].to(g.dtype), -1)
        other = torch.ones_like(rows, dtype=torch.bool).scatter_(-1, k.unsqueeze(-1), False) & (p > 1e-6)
        r = torch.where(other, rows / p.clamp_min(1e-6), torch.nan)
        top, low = r.nan_to_num(-torch.inf).amax(-1), r.nan_to_num(torch.inf).amin(-1)
        both = other.sum(-1) >= 2
        soft = bool(((top - low)[both] > 1e-3 * top.abs()[both]).any())
    if not soft and metric.reduction == "mean":
        w = cast(torch.Tensor, metric.class_weight).to(g)[k]
        W, P = float(w.sum()), float(kept.numel())
        i = int(rows.abs().amax(-1).argmax())
        p_y = torch.softmax(z.detach()[kept][i].to(g.dtype), -1)[k[i]]
        divisor = float(w[i] * (1 - p_y) / -rows[i, k[i]])
        soft = abs(divisor - P) < 1e-3 * P and abs(divisor - W) > 1e-3 * W
    if soft:
        raise ValueError("a cross-entropy with class weights on probability targets (soft labels, or one-hot "
                         "floats, which torch divides by the number of positions): its curvature takes class-index "
                         "targets (as in ParameterSpace); pass class indices, or drop weight= for probability targets")


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


def class_axis_second(metric: OutputMetric, grad: torch.Tensor) -> bool:
    r"""Whether the loss gradient ``grad`` at outputs of three or more axes says that the loss took the classes on
    axis 1 (torch's ``(N, C, ...)`` layout) while the categorical metric takes them on the last: a softmax
    cross-entropy's gradient :math:`w(p - \tilde y)` sums to zero over the class axis at every position (label
    smoothing and class weights included), so sums that vanish over axis 1 and not over the last axis mark
    the layout (a penalty added to the logits makes neither vanish, and is not taken for it)."""
    if not isinstance(_base(metric), CategoricalFisher) or grad.dim() < 3 or grad.shape[1] == grad.shape[-1]:
        return False
    g = grad.detach()
    scale = g.abs().sum() + torch.finfo(g.dtype).tiny
    tol = 64 * torch.finfo(g.dtype).eps * max(g.shape[1], g.shape[-1])
    last, second = g.sum(-1).abs().sum() / scale, g.sum(1).abs().sum() / scale
    return bool(second <= tol) and bool(last > 1e3 * tol)


_SAID: set = set()
#: the output shapes each owner has had read (its first batch of each)
_CHECKED: "weakref.WeakKeyDictionary[Any, set]" = weakref.WeakKeyDictionary()


def not_softmax(metric: OutputMetric, grad: torch.Tensor) -> bool:
    """Whether the loss gradient ``grad`` is not a softmax cross-entropy's although the metric is categorical: rows
    with two or more non-zero entries whose sum over the last axis does not vanish (a squared error or a binary
    cross-entropy on the outputs; a negative log-likelihood on log-probabilities has one entry per row, and its
    metric is the categorical one)."""
    if not isinstance(_base(metric), CategoricalFisher) or grad.dim() < 2 or grad.shape[-1] < 2:
        return False
    g = grad.detach().reshape(-1, grad.shape[-1])
    g = g[g.ne(0).sum(-1) >= 2]
    if g.numel() == 0:
        return False
    # relative to the entries, loosely: a loss computed in float32 on float64 outputs (Hugging Face's) sums to zero
    # to 1e-7, one in float32 on bfloat16 outputs to the rounding of bfloat16; a squared error's or binary
    # cross-entropy's rows sum to a fair part of their size
    tol = max(1e-3, 32 * torch.finfo(g.dtype).eps)
    return bool(g.sum(-1).abs().sum() / (g.abs().sum() + torch.finfo(g.dtype).tiny) > tol)


def warn_unlike_the_metric(metric: OutputMetric, grad: torch.Tensor, owner: Any = None) -> None:
    """Warn (once per output shape) where the loss gradient shows another loss than the categorical metric's: the
    classes on axis 1 (:func:`class_axis_second`), or no softmax cross-entropy at all (:func:`not_softmax`).

    With an ``owner`` (the optimizer's estimate), only its first batch of each output shape is read: once the
    model fits its targets (:math:`1 - p_y` near the rounding unit) a softmax cross-entropy's rows no longer sum to
    zero to working precision, and a later batch would be taken for another loss."""
    key = tuple(grad.shape)
    if owner is not None:
        seen = _CHECKED.setdefault(owner, set())
        if key in seen:
            return
        seen.add(key)
    if key in _SAID:
        return
    second = class_axis_second(metric, grad)
    if not second and not_softmax(metric, grad):
        _SAID.add(key)
        given = isinstance(metric, LossOutput)   # a cross-entropy the user named, not the default metric
        square = len(key) >= 3 and key[1] == key[-1]   # (N, C, T) with T = C: the classes may be on axis 1
        warnings.warn(f"the loss gradient at the outputs {key} does not sum to zero over the classes (the last axis) "
                      f"as a softmax cross-entropy's does: "
                      + ("the outputs may hold their classes on axis 1 (torch's (N, C, ...) layout, as many as the "
                         "last axis' entries): then permute them in output_fn (output_fn=lambda z: z.movedim(1, -1)) "
                         "and give the loss the same layout; else " if square else "")
                      + ("the cross-entropy given as output_metric is not the loss back-propagated" if given else
                         "the categorical metric (the default output_metric) is not this loss's curvature; pass "
                         "output_metric= your loss (nn.MSELoss(), nn.BCEWithLogitsLoss(), ...) or its metric "
                         "('euclidean', 'bernoulli')"), UserWarning, stacklevel=3)
        return
    if second:
        _SAID.add(key)
        warnings.warn(f"the loss takes its classes on axis 1 of the outputs {key} (torch's (N, C, ...) layout) but "
                      f"the categorical metric on the last axis: the curvature is of another loss; permute the "
                      f"outputs in output_fn (output_fn=lambda z: z.movedim(1, -1)) and give the loss the same "
                      f"layout", UserWarning, stacklevel=3)
