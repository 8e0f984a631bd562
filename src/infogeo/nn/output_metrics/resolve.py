r"""Resolve an output-metric specification (a name, an object, a divergence or a torch loss) to an :class:`OutputMetric`."""
from __future__ import annotations

from typing import Any, Union

from ...divergences import Divergence
from .base import OutputMetric
from .euclidean import EuclideanOutput, GaussianFisher
from .generic import DivergenceOutput
from .likelihoods import (BernoulliFisher, BernoulliProbabilityFisher, CategoricalFisher, CategoricalLogProbFisher,
                          HeteroscedasticGaussianFisher)
from .losses import from_loss, is_torch_loss

__all__ = ["output_metric"]

_NAMED = {
    "categorical": CategoricalFisher, "softmax": CategoricalFisher, "cross_entropy": CategoricalFisher,
    "bernoulli": BernoulliFisher, "sigmoid": BernoulliFisher, "bernoulli_probabilities": BernoulliProbabilityFisher,
    "euclidean": EuclideanOutput, "gauss-newton": EuclideanOutput, "gauss_newton": EuclideanOutput,
    "mse": EuclideanOutput, "gaussian": GaussianFisher,
    "gaussian_learned": HeteroscedasticGaussianFisher, "heteroscedastic": HeteroscedasticGaussianFisher,
    "log_probabilities": CategoricalLogProbFisher,
}


def output_metric(spec: Union[str, OutputMetric, Divergence, Any]) -> OutputMetric:
    """Resolve an output-metric specification.

    Parameters
    ----------
    spec : str, OutputMetric, Divergence or torch loss
        A name (``"categorical"``, ``"bernoulli"``, ``"bernoulli_probabilities"``, ``"euclidean"``,
        ``"gaussian"``, ``"gaussian_learned"``, ``"log_probabilities"``), an :class:`OutputMetric`
        (returned as is), a :class:`~infogeo.divergences.Divergence` (its metric, see
        :class:`DivergenceOutput`), or a torch loss (``CrossEntropyLoss``, ``NLLLoss``,
        ``BCEWithLogitsLoss``, ``BCELoss``, ``MSELoss``, ``GaussianNLLLoss``, as modules or functionals;
        see :mod:`.losses`).

    Raises
    ------
    TypeError
        For any other callable: an arbitrary function is not taken for a divergence
        silently; wrap it as ``DivergenceOutput(rho)`` if it is one.
    """
    if isinstance(spec, OutputMetric):
        return spec
    if isinstance(spec, str):
        key = spec.lower()
        if key not in _NAMED:
            raise ValueError(f"unknown output metric {spec!r}; expected one of {sorted(set(_NAMED))} "
                             "or an OutputMetric / Divergence object or a torch loss")
        return _NAMED[key]()
    if isinstance(spec, Divergence):
        return DivergenceOutput(spec)
    if is_torch_loss(spec):
        return from_loss(spec)
    if callable(spec):
        raise TypeError(f"output_metric got the callable {getattr(spec, '__name__', type(spec).__name__)!r}, which "
                        "is neither a supported torch loss (CrossEntropyLoss, NLLLoss, BCEWithLogitsLoss, BCELoss, MSELoss, "
                        "GaussianNLLLoss) nor a Divergence; if it is a divergence rho(u, w), wrap it explicitly as "
                        "ig.nn.DivergenceOutput(rho)")
    raise TypeError(f"output_metric must be a name, an OutputMetric, a Divergence or a torch loss, "
                    f"got {type(spec).__name__}")
