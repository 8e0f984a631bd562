r"""Resolve an output-metric specification (a name, an object or a divergence) to an :class:`OutputMetric`."""
from __future__ import annotations

from typing import Callable, Union

from ...divergences import Divergence
from .base import OutputMetric
from .euclidean import EuclideanOutput, GaussianFisher
from .generic import DivergenceOutput
from .likelihoods import BernoulliFisher, CategoricalFisher, HeteroscedasticGaussianFisher

__all__ = ["output_metric"]

_NAMED = {
    "categorical": CategoricalFisher, "softmax": CategoricalFisher, "cross_entropy": CategoricalFisher,
    "bernoulli": BernoulliFisher, "sigmoid": BernoulliFisher,
    "euclidean": EuclideanOutput, "gauss-newton": EuclideanOutput, "gauss_newton": EuclideanOutput,
    "mse": EuclideanOutput, "gaussian": GaussianFisher,
    "gaussian_learned": HeteroscedasticGaussianFisher, "heteroscedastic": HeteroscedasticGaussianFisher,
}


def output_metric(spec: Union[str, OutputMetric, Divergence, Callable]) -> OutputMetric:
    """Resolve a name (``"categorical"``, ``"bernoulli"``, ``"euclidean"``, ``"gaussian"``,
    ``"gaussian_learned"``), an :class:`OutputMetric`, or a divergence to an output metric."""
    if isinstance(spec, OutputMetric):
        return spec
    if isinstance(spec, str):
        key = spec.lower()
        if key not in _NAMED:
            raise ValueError(f"unknown output metric {spec!r}; expected one of {sorted(set(_NAMED))} "
                             "or an OutputMetric / Divergence object")
        return _NAMED[key]()
    if isinstance(spec, Divergence) or callable(spec):
        return DivergenceOutput(spec)
    raise TypeError(f"output_metric must be a name, an OutputMetric or a Divergence, got {type(spec).__name__}")
