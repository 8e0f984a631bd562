"""Statistical manifolds: exponential families with the Fisher–Rao metric.

Every family is an :class:`~infogeo.geometry.manifold.Manifold` whose points are
flat coordinate arrays in one chart (``"natural"``, ``"mean"``, ``"standard"``);
its metric is a :class:`FisherMetric`.  See :mod:`.exponential_family` for the
machinery, :mod:`.discrete`, :mod:`.binary` and the ``gaussian*`` modules for the families.
"""
from ..geometry.charts import Chart
from .binary import BinaryExponentialFamily, IsingModel, MonteCarloEstimate
from .discrete import Bernoulli, Categorical, FiniteFamily, IndependenceModel
from .exponential_family import ExponentialFamily
from .fisher import ClosedGeodesics, FisherMetric
from .gaussian import FullGaussian, Gaussian
from .gaussian_diagonal import DiagonalGaussian, UnivariateGaussian
from .gaussian_special import FixedCovarianceGaussian, ZeroMeanGaussian
from .gaussian_graphical import GaussianGraphical
from .observations import log_gamma_variates, simplex_from_logs
from . import closed_statistics  # noqa: F401,E402  (registers the closed-form transports and means)


def __getattr__(name: str):
    # the full-Gaussian geodesics need scipy.linalg: import them on first use
    if name == "GaussianShootingError":
        from .gaussian_geodesics import GaussianShootingError
        return GaussianShootingError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["Chart", "ClosedGeodesics", "ExponentialFamily", "FisherMetric", "FiniteFamily", "Bernoulli", "Categorical",
           "IndependenceModel", "BinaryExponentialFamily", "IsingModel", "MonteCarloEstimate",
           "Gaussian", "UnivariateGaussian", "DiagonalGaussian", "FullGaussian",
           "FixedCovarianceGaussian", "ZeroMeanGaussian", "GaussianGraphical", "GaussianShootingError",
           "log_gamma_variates", "simplex_from_logs"]
