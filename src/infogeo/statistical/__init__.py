"""Statistical manifolds: exponential families with the Fisher–Rao metric.

Every family is an :class:`~infogeo.geometry.manifold.Manifold` whose points are
flat coordinate arrays in one chart (``"natural"``, ``"mean"``, ``"standard"``);
its metric is a :class:`FisherMetric`.  See :mod:`.exponential_family` for the
machinery, :mod:`.discrete` and :mod:`.gaussian` for the families.
"""
from .discrete import Bernoulli, Categorical, FiniteFamily, IndependenceModel
from .exponential_family import Chart, ClosedGeodesics, ExponentialFamily, FisherMetric
from .gaussian import (DiagonalGaussian, FixedCovarianceGaussian, FullGaussian, Gaussian,
                       GaussianShootingError, UnivariateGaussian, ZeroMeanGaussian)

__all__ = ["Chart", "ClosedGeodesics", "ExponentialFamily", "FisherMetric", "FiniteFamily", "Bernoulli", "Categorical",
           "IndependenceModel", "Gaussian", "UnivariateGaussian", "DiagonalGaussian", "FullGaussian",
           "FixedCovarianceGaussian", "ZeroMeanGaussian", "GaussianShootingError"]
