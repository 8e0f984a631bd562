"""Geometry core: vectors and covectors, metrics, pullback, manifolds, geodesics."""
from .manifold import Euclidean, Manifold
from .metric import DampedMetric, EuclideanMetric, MatrixMetric, Metric
from .pullback import DivergenceMetric, PullbackMetric, metric_from_divergence, pullback
from .vectors import Covector, TangentVector

__all__ = ["Manifold", "Euclidean", "Metric", "EuclideanMetric", "MatrixMetric", "DampedMetric",
           "PullbackMetric", "DivergenceMetric", "metric_from_divergence", "pullback",
           "TangentVector", "Covector"]
