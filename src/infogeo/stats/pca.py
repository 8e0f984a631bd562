r"""Tangent PCA: principal components of the log-maps at the Fréchet mean (Fletcher et al. 2004).

The points are mapped to the tangent space at their Fréchet mean :math:`\bar x`
by :math:`v_i = \log_{\bar x} x_i`, written in an orthonormal frame of the
metric :math:`G(\bar x) = LL^T` (coordinates :math:`y_i = L^Tv_i`, so that
Euclidean lengths of :math:`y` are Riemannian lengths of :math:`v`), and
analysed by an SVD.  The principal directions, as tangent vectors in the chart,
are orthonormal for the metric at the mean.  At the Fréchet mean
:math:`\sum_i v_i = 0`, so the tangent data are already centred.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .. import backend as B
from ..geometry import points as _points
from ._fitted import check_fitted
from ..geometry.vectors import TangentVector

__all__ = ["TangentPCA"]


class TangentPCA:
    """Principal component analysis in the tangent space at the Fréchet mean (scikit-learn conventions).

    Parameters
    ----------
    M : Manifold
        With ``exp``, ``log`` and a metric matrix.
    n_components : int, optional
        Number of components kept (default: all, ``M.dim``).
    mean_options : dict, optional
        Passed to :meth:`~infogeo.Manifold.frechet_mean`.

    Attributes
    ----------
    mean_ : array (dim,)
        The Fréchet mean (the base point).
    components_ : array (n_components, dim)
        Principal directions as tangent vectors at ``mean_`` (chart components), orthonormal for the
        metric there, by decreasing variance.
    explained_variance_ : array (n_components,)
        Variance along each direction (squared Riemannian length, divided by n - 1 as in scikit-learn).
    explained_variance_ratio_ : array (n_components,)
    singular_values_ : array (n_components,)
    """

    def __init__(self, M: Any, n_components: Optional[int] = None, *, mean_options: Optional[dict] = None):
        self.M = M
        if n_components is not None:
            n_components = _points.positive_int(n_components, "n_components")
            if n_components > M.dim:
                raise ValueError(f"n_components must be <= dim = {M.dim}, got {n_components}")
        self.n_components = n_components
        self.mean_options = dict(mean_options or {})

    def fit(self, X: Any, y: Any = None) -> "TangentPCA":
        """Fit on the points ``X`` (shape ``(n, dim)``, n >= 2)."""
        X = self._points(X)
        if X.shape[0] < 2:
            raise ValueError("TangentPCA needs at least 2 points")
        self.mean_ = np.asarray(B.to_numpy(self.M.frechet_mean(X, **self.mean_options)), dtype=float)
        G = np.asarray(B.to_numpy(self.M.metric.matrix(B.array(self.mean_))), dtype=float)
        self._L = np.linalg.cholesky(0.5 * (G + G.T))
        Y = self._frame(X)
        _, s, Vt = np.linalg.svd(Y, full_matrices=False)
        k = self.n_components or self.M.dim
        k = min(k, len(s))
        var = s ** 2 / (X.shape[0] - 1)
        self._basis = Vt[:k]                                        # orthonormal rows, frame coordinates
        self.components_ = np.linalg.solve(self._L.T, Vt[:k].T).T  # L^{-T} u: G-orthonormal tangent vectors
        self.singular_values_ = s[:k]
        self.explained_variance_ = var[:k]
        self.explained_variance_ratio_ = var[:k] / var.sum() if var.sum() > 0 else np.zeros(k)
        self.n_components_ = k
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Coordinates ``(n, n_components)`` of :math:`\\log_{\\bar x} x` along the principal directions."""
        self._check_fitted()
        return self._frame(self._points(X)) @ self._basis.T

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        return self.fit(X).transform(X)

    def inverse_transform(self, Z: Any):
        """The points :math:`\\exp_{\\bar x}(\\sum_j z_j c_j)` for coordinates ``Z`` of shape ``(n, n_components)``."""
        self._check_fitted()
        Z = np.asarray(B.to_numpy(Z), dtype=float)
        if Z.ndim != 2 or Z.shape[1] != self.n_components_:
            raise ValueError(f"Z must have shape (n, {self.n_components_}), got {Z.shape}")
        V = Z @ self.components_
        base = np.broadcast_to(self.mean_, V.shape).copy()
        return self.M.exp(base, TangentVector(base, V, self.M.chart))

    def tangent_vector(self, j: int) -> TangentVector:
        """The ``j``-th principal direction as a :class:`TangentVector` at the mean."""
        self._check_fitted()
        return TangentVector(self.mean_, self.components_[j].copy(), self.M.chart)

    # ------------------------------------------------------------ internals
    def _points(self, X: Any):
        X = self.M._as_point(X, "points")
        if len(X.shape) != 2:
            raise ValueError(f"X must have shape (n, {self.M.dim}), got {tuple(X.shape)}")
        return np.asarray(B.to_numpy(X), dtype=float)

    def _frame(self, X: np.ndarray) -> np.ndarray:
        base = np.broadcast_to(self.mean_, X.shape)
        V = np.asarray(B.to_numpy(self.M.metric.log(base.copy(), X)), dtype=float)
        return V @ self._L                                          # y = L^T v, as rows

    def _check_fitted(self) -> None:
        check_fitted(self, "components_")
