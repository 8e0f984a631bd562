r"""Output metrics from torch losses: ``CrossEntropyLoss``, ``NLLLoss``, ``BCEWithLogitsLoss``, ``MSELoss``, ``GaussianNLLLoss``.

A torch loss :math:`\mathcal L(z, y)` is mapped to the output metric whose pullback
is the Gauss-Newton matrix of :math:`\mathcal L` (for ``NLLLoss`` and
``GaussianNLLLoss``, whose Hessians are not positive semi-definite, the Fisher
metric of the likelihood), with the loss's reduction accounted for.

Convention.  Outputs have shape ``(N, *middle, C)`` with the class (or feature)
axis *last*.  infogeo writes every loss as
:math:`\mathcal L = \frac1N\sum_n\sum_t w_{nt}\,\ell(z_{nt}, y_{nt})`: per-position
losses :math:`\ell` summed over the middle axes :math:`t` and averaged over the
:math:`N` examples, with weights :math:`w_{nt}` that reproduce the torch loss
exactly:

* ``reduction="sum"``: :math:`w = N`;
* ``reduction="mean"``: :math:`w = 1/(T\,k)`, with :math:`T` the number of positions
  per example and :math:`k` the number of loss elements per position (1 for the
  class-index losses, :math:`C` for ``MSELoss`` and ``BCEWithLogitsLoss``, the mean
  dimension for ``GaussianNLLLoss``);
* ``CrossEntropyLoss``/``NLLLoss`` with class-index targets: :math:`w_{nt}` is
  proportional to the class weight of :math:`y_{nt}` and zero where
  :math:`y_{nt}` = ``ignore_index`` (so ignored positions contribute nothing), and
  ``"mean"`` divides by the total weight of the batch as torch does.

The weights depend on the batch (and, with ignored positions or class weights, on
its targets): :class:`LossOutput` is fitted to a batch by :meth:`LossOutput.bind`,
which :class:`~infogeo.nn.space.ParameterSpace` calls with its ``targets``.
Without targets no position is taken to be ignored, unless the positions are given (``bind(z, kept=...)``):
the optimizers' hooks, which see no targets, read them off the loss gradient (:mod:`.ignored`).
"""
from __future__ import annotations

import math
from typing import Any, Optional, cast

import torch

from .base import OutputMetric
from .euclidean import EuclideanOutput
from .likelihoods import (BernoulliFisher, BernoulliProbabilityFisher, CategoricalFisher, CategoricalLogProbFisher,
                          GaussianVarianceFisher)
from .weighted import WeightedOutput

__all__ = ["LossOutput", "from_loss", "is_torch_loss", "SUPPORTED_LOSSES"]

nn, F = torch.nn, torch.nn.functional

#: torch losses with an output metric
SUPPORTED_LOSSES = ("CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss", "BCELoss", "MSELoss", "GaussianNLLLoss")

_FUNCTIONAL = {F.cross_entropy: nn.CrossEntropyLoss, F.nll_loss: nn.NLLLoss,
               F.binary_cross_entropy_with_logits: nn.BCEWithLogitsLoss, F.binary_cross_entropy: nn.BCELoss,
               F.mse_loss: nn.MSELoss,
               F.gaussian_nll_loss: nn.GaussianNLLLoss}


def is_torch_loss(obj: Any) -> bool:
    """Whether ``obj`` is a torch loss module or one of the functional losses above."""
    return isinstance(obj, nn.modules.loss._Loss) or any(obj is f for f in _FUNCTIONAL)


class LossOutput(WeightedOutput):
    r"""The output metric of a torch loss: ``base`` with the loss's weights per position (module docstring).

    Parameters
    ----------
    base : OutputMetric
        The per-position metric (e.g. :class:`~.likelihoods.CategoricalFisher`).
    loss : torch.nn.Module
        The torch loss it stands for.
    elements : {"one", "last", "half"}
        Loss elements per position: 1 (class-index losses), the last axis (elementwise
        losses), or half of it (``GaussianNLLLoss``: means then variances).
    ignore_index : int, optional
        Class-index targets to ignore.
    class_weight : tensor, optional
        Weight of each class (``CrossEntropyLoss(weight=)``, ``NLLLoss(weight=)``).
    """

    def __init__(self, base: OutputMetric, loss: torch.nn.Module, elements: str = "one",
                 ignore_index: Optional[int] = None, class_weight: Optional[torch.Tensor] = None):
        super().__init__(base, 1.0, ignore_index)
        self.loss_module, self.reduction, self.elements = loss, loss.reduction, elements
        self.class_weight = class_weight
        self.bound = False
        self.name = f"{base.name} of {type(loss).__name__}(reduction={loss.reduction!r})"

    def bind(self, z: torch.Tensor, targets: Optional[torch.Tensor] = None,
             kept: Optional[torch.Tensor] = None) -> "LossOutput":
        """A copy whose weights reproduce the torch loss on this batch (outputs of shape ``z.shape``); without
        targets, ``kept`` (booleans of shape ``z.shape[:-1]``) marks the positions the loss does not ignore."""
        N, T = int(z.shape[0]), math.prod(z.shape[1:-1])
        if (targets is None and kept is not None and self.elements == "one" and self.ignore_index is not None
                and self.class_weight is None):
            # the weights the class-index targets give, of which only the ignored positions are known (any class
            # but the ignored index stands for the others: without class weights, each weighs the same)
            stand = 1 if self.ignore_index == 0 and z.shape[-1] > 1 else 0
            targets = torch.where(kept, stand, self.ignore_index).to(torch.long)
        index_targets = targets is not None and not targets.is_floating_point()
        if self.class_weight is not None and not index_targets:
            # the weights are the targets' classes': unknown here (the optimizers' hooks read them off the loss
            # gradient, :mod:`.ignored`); an unbound copy says so when it is used
            return LossOutput(self.base, self.loss_module, self.elements, self.ignore_index, self.class_weight)
        if targets is not None and index_targets and self.elements == "one":
            self.base.check_targets(z, self._targets(targets))
            w = torch.ones(targets.shape, dtype=z.dtype if z.is_floating_point() else torch.float64,
                           device=targets.device)
            if self.class_weight is not None:
                w = self.class_weight.to(w)[self._targets(targets)]
            if self.ignore_index is not None:
                w = w * targets.ne(self.ignore_index).to(w)
            if self.reduction == "mean":
                total = float(w.sum())
                if not total > 0:
                    raise ValueError("every target of the batch is ignored (or has class weight 0): the mean loss "
                                     "is undefined")
                w = w * (N / total)
            else:
                w = w * N
            weight: Any = w
        else:
            k = {"one": 1, "last": int(z.shape[-1]), "half": int(z.shape[-1]) // 2}[self.elements]
            weight = 1.0 / (T * k) if self.reduction == "mean" else float(N)
        new = LossOutput(self.base, self.loss_module, self.elements, self.ignore_index, self.class_weight)
        new.weight, new.bound = weight, True
        return new

    def _w(self, like, power=1.0):
        if not self.bound and self.class_weight is not None:
            raise ValueError(f"{type(self.loss_module).__name__} with class weights needs the class-index targets "
                             "of the batch: pass targets=... to ParameterSpace, or to the optimizer's step with "
                             "inputs=... (its plain loop reads them off your loss's gradient)")
        if not self.bound:
            raise RuntimeError(f"the output metric of {type(self.loss_module).__name__} depends on the batch: "
                               "fit it with .bind(outputs, targets) (ParameterSpace does this)")
        return super()._w(like, power)

    def position_loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self._w(z)
        return super().position_loss(z, targets)

    def __repr__(self) -> str:
        return f"LossOutput({self.base!r}, {type(self.loss_module).__name__}(reduction={self.reduction!r}))"


def from_loss(loss: Any) -> LossOutput:
    """The output metric of a torch loss (a module or functional; see the module docstring).

    Raises
    ------
    TypeError
        For any other loss: its Gauss-Newton matrix is not implemented here; wrap a
        divergence explicitly with :class:`~infogeo.nn.output_metrics.DivergenceOutput`.
    ValueError
        For ``reduction="none"`` and unsupported options (``BCEWithLogitsLoss`` weights,
        class weights with label smoothing).
    """
    for f, cls in _FUNCTIONAL.items():
        if loss is f:
            loss = cls()
    name = type(loss).__name__
    if not isinstance(loss, nn.modules.loss._Loss):
        raise TypeError(f"expected a torch loss, got {name}")
    if not isinstance(loss, tuple(getattr(nn, n) for n in SUPPORTED_LOSSES)):   # before the reduction: no use
        raise TypeError(f"{name} has no output metric in infogeo (supported: {', '.join(SUPPORTED_LOSSES)}); "
                        "give an output metric by name or object, or wrap a divergence rho(u, w) explicitly as "
                        "ig.nn.DivergenceOutput(rho)")
    reduction = getattr(loss, "reduction", None)
    if reduction not in ("mean", "sum"):
        raise ValueError(f"{name}(reduction={reduction!r}): the curvature needs a scalar loss; "
                         "use reduction='mean' or 'sum'")
    if isinstance(loss, nn.CrossEntropyLoss):
        if loss.label_smoothing and loss.weight is not None:
            raise ValueError("CrossEntropyLoss with both label_smoothing and class weights is not supported; "
                             "drop one of them")
        return LossOutput(CategoricalFisher(label_smoothing=loss.label_smoothing), loss, "one",
                          loss.ignore_index, loss.weight)
    if isinstance(loss, nn.NLLLoss):
        return LossOutput(CategoricalLogProbFisher(), loss, "one", loss.ignore_index, loss.weight)
    if isinstance(loss, nn.BCEWithLogitsLoss):
        if loss.weight is not None or loss.pos_weight is not None:
            raise ValueError("BCEWithLogitsLoss with weight= or pos_weight= is not supported (the curvature would "
                             "depend on the targets elementwise); use it without them")
        return LossOutput(BernoulliFisher(), loss, "last")
    if isinstance(loss, nn.BCELoss):
        if loss.weight is not None:
            raise ValueError("BCELoss with weight= is not supported (the curvature would depend on the targets "
                             "elementwise); use it without")
        return LossOutput(BernoulliProbabilityFisher(), loss, "last")
    if isinstance(loss, nn.MSELoss):
        return LossOutput(EuclideanOutput(2.0), loss, "last")
    gauss = cast(nn.GaussianNLLLoss, loss)   # the last of the supported losses
    return LossOutput(GaussianVarianceFisher(eps=gauss.eps, full=gauss.full), loss, "half")
