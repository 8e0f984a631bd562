"""Statistics of points on a manifold: Fréchet means, parallel transport, clustering and tangent PCA.

Every :class:`~infogeo.Manifold` with ``exp`` and ``log`` (every statistical
family, the full Gaussian included) has :meth:`~infogeo.Manifold.frechet_mean`
and :meth:`~infogeo.Manifold.transport`; this package adds estimators with
scikit-learn's conventions on top of them.
"""
from ..geometry.statistics import frechet_mean, register_mean, register_transport, transport
from .kmeans import KMeans
from .pca import TangentPCA

__all__ = ["KMeans", "TangentPCA", "NotFittedError", "frechet_mean", "transport", "register_mean", "register_transport"]


def __getattr__(name: str):
    # NotFittedError is scikit-learn's, imported on first use (see ._fitted)
    if name == "NotFittedError":
        from ._fitted import not_fitted_error
        return not_fitted_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
