"""infogeo: geometry-first Riemannian optimization.

Manifolds, metrics (closed form, by pullback, from divergences), explicit
vectors and covectors, and solvers whose every step is
``differential -> sharp -> retract``.
"""
from . import backend, divergences, linalg, solvers, stats
from .divergences import Bregman, Divergence, SquaredEuclidean
from .geometry import (Covector, DampedMetric, DivergenceMetric, Euclidean, EuclideanMetric, Manifold,
                       MatrixMetric, Metric, PullbackMetric, TangentVector, metric_from_divergence, pullback)
from .linalg import NotPositiveDefiniteError
from .statistical import (Bernoulli, BinaryExponentialFamily, Categorical,  # statistical manifolds
                          ExponentialFamily, Gaussian, GaussianGraphical, IndependenceModel, IsingModel)

__version__ = "0.1.0"


def __getattr__(name: str):
    # viz needs matplotlib and interop needs pymanopt/geomstats: import them only on first use
    if name in ("viz", "interop"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    if name == "nn":  # torch is optional: ig.nn exists only where torch imports
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise AttributeError("infogeo.nn needs torch: pip install 'infogeo[torch]'") from exc
        import importlib
        return importlib.import_module(f"{__name__}.nn")
    if name == "load_manifold":
        from .contrib import load_manifold
        return load_manifold
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["backend", "divergences", "linalg", "solvers", "stats",
           "Manifold", "Euclidean", "Metric", "EuclideanMetric", "MatrixMetric", "DampedMetric",
           "PullbackMetric", "DivergenceMetric", "metric_from_divergence", "pullback",
           "TangentVector", "Covector", "Divergence", "SquaredEuclidean", "Bregman",
           "NotPositiveDefiniteError",
           "ExponentialFamily", "Gaussian", "GaussianGraphical", "Categorical", "Bernoulli", "IndependenceModel",
           "BinaryExponentialFamily", "IsingModel"]

