"""Network function spaces on torch: parameter spaces, output metrics, curvature, natural gradient.

>>> space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)   # doctest: +SKIP
>>> C = space.curvature("kfac")                                                   # doctest: +SKIP
>>> opt = ig.nn.NaturalGradient(model, lr=0.1, curvature="kfac")                     # doctest: +SKIP
"""
from . import curvature, distributed, output_metrics
from ._params import ParamLayout
from .curvature import BlockDiagonal, Curvature, Dense, Diagonal, Implicit, KFAC, LinearCombination
from .output_metrics import (BernoulliFisher, CategoricalFisher, CategoricalLogProbFisher, DivergenceOutput,
                             EuclideanOutput, FactorOutput, GaussianFisher, GaussianVarianceFisher, HessianOutput,
                             HeteroscedasticGaussianFisher, LossOutput, OutputMetric, SampledOutput, WeightedOutput,
                             from_loss, output_metric)
from .network_metric import NetworkMetric
from .space import ParameterSpace

__all__ = ["ParameterSpace", "NetworkMetric", "ParamLayout", "OutputMetric", "EuclideanOutput", "GaussianFisher",
           "CategoricalFisher", "BernoulliFisher", "HeteroscedasticGaussianFisher", "DivergenceOutput",
           "HessianOutput", "SampledOutput", "FactorOutput", "output_metric", "curvature", "output_metrics",
           "distributed", "Curvature", "Implicit", "Dense", "Diagonal", "KFAC", "BlockDiagonal", "NaturalGradient",
           "Preconditioner", "LinearCombination", "CategoricalLogProbFisher", "GaussianVarianceFisher",
           "WeightedOutput", "LossOutput", "from_loss"]


def __getattr__(name):
    if name in ("NaturalGradient", "Preconditioner"):
        from . import optim
        return getattr(optim, name)
    if name == "helmholtz":  # Helmholtz machines, (natural) reweighted wake-sleep: imported on first use
        import importlib
        return importlib.import_module(f"{__name__}.helmholtz")
    raise AttributeError(f"module 'infogeo.nn' has no attribute {name!r}")
