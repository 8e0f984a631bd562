"""Network function spaces on torch: parameter spaces, output metrics, curvature, natural gradient.

>>> space = ig.nn.ParameterSpace(model, output_metric="categorical", data=X)   # doctest: +SKIP
>>> C = space.curvature("kfac")                                                   # doctest: +SKIP
>>> opt = ig.nn.NaturalGradient(model.parameters(), lr=1e-2, curvature="kfac", model=model)  # doctest: +SKIP
"""
from . import curvature, output_metrics
from ._params import ParamLayout
from .curvature import BlockDiagonal, Curvature, Dense, Diagonal, Implicit, KFAC
from .output_metrics import (BernoulliFisher, CategoricalFisher, DivergenceOutput, EuclideanOutput, FactorOutput,
                             GaussianFisher, HessianOutput, HeteroscedasticGaussianFisher, OutputMetric,
                             SampledOutput, output_metric)
from .network_metric import NetworkMetric
from .space import ParameterSpace

__all__ = ["ParameterSpace", "NetworkMetric", "ParamLayout", "OutputMetric", "EuclideanOutput", "GaussianFisher",
           "CategoricalFisher", "BernoulliFisher", "HeteroscedasticGaussianFisher", "DivergenceOutput",
           "HessianOutput", "SampledOutput", "FactorOutput", "output_metric", "curvature", "output_metrics",
           "Curvature", "Implicit", "Dense", "Diagonal", "KFAC", "BlockDiagonal", "NaturalGradient"]


def __getattr__(name):
    if name == "NaturalGradient":
        from .optim import NaturalGradient
        return NaturalGradient
    raise AttributeError(f"module 'infogeo.nn' has no attribute {name!r}")
