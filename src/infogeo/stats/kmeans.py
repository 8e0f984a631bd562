r"""Geodesic k-means: Lloyd's algorithm with geodesic distances and Fréchet means.

Assignment to the nearest centre in the Riemannian distance, then each centre
moved to the Fréchet mean of its points, until the assignment is stable or the
centres move less than ``tol`` (relative); the objective (inertia, the sum of
squared distances to the centres) does not increase (Lloyd 1982; on manifolds
e.g. Pennec 2006).  Initialisation by k-means++ with squared geodesic
distances (Arthur & Vassilvitskii 2007).
"""
from __future__ import annotations

import logging
import math
from typing import Any, Optional

import numpy as np

from .. import backend as B
from ..geometry import points as _points
from ..geometry.manifold import Manifold
from ._fitted import check_fitted

logger = logging.getLogger(__name__)

__all__ = ["KMeans"]


def _pairwise_sq_dist(M: Any, X: Any, C: Any) -> np.ndarray:
    """Squared distances ``(n, k)`` between the rows of ``X`` and of ``C`` (numpy)."""
    n, k = X.shape[0], C.shape[0]
    Xb = B.broadcast_to(X[:, None, :], (n, k, M.dim))
    Cb = B.broadcast_to(C[None, :, :], (n, k, M.dim))
    D = np.asarray(B.to_numpy(M.metric.dist(Xb, Cb)), dtype=float).reshape(n, k)
    return D * D


def _check_seed(seed: Any) -> Any:
    """``seed`` if numpy takes it for a generator (checked here, not at the first ``fit``)."""
    _points.random_generator(seed, "seed")
    return seed


def _check_mean_options(options: Any) -> dict:
    """A copy of the keyword arguments for :func:`~infogeo.geometry.statistics.frechet_mean`, names checked."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"mean_options must be a dict of frechet_mean keywords, got {type(options).__name__}")
    allowed = ("x0", "method", "tol", "max_iter", "max_time")
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"mean_options has unknown keys {unknown}; frechet_mean takes {list(allowed)}")
    return dict(options)


class KMeans:
    """Geodesic k-means on a manifold ``M`` (scikit-learn's ``fit`` / ``predict`` / ``fit_predict``).

    Parameters
    ----------
    M : Manifold
        With ``dist``, ``exp`` and ``log`` (for example ``ig.Gaussian(2)``).
    k : int
        Number of clusters (``n_clusters`` in scikit-learn).
    init : "k-means++" or array (k, dim)
        Initial centres, or k-means++ seeding with squared geodesic distances.
    n_init : int
        Runs from different seedings; the one with the lowest inertia is kept.
    max_iter : int
        Lloyd iterations per run.
    tol : float
        Stop when no centre moves farther than ``tol`` times the RMS distance of the points to
        their centres.
    seed : int or Generator, optional
        Randomness of the seeding.
    mean_options : dict, optional
        Passed to :meth:`~infogeo.Manifold.frechet_mean` (``tol``, ``max_iter``...).

    Attributes
    ----------
    cluster_centers_ : array (k, dim)
    labels_ : array (n,) of int
    inertia_ : float
        Sum of squared geodesic distances of the points to their centres.
    n_iter_ : int
    """

    def __init__(self, M: Any, k: int = 8, *, init: Any = "k-means++", n_init: int = 1, max_iter: int = 100,
                 tol: float = 1e-8, seed: Any = None, mean_options: Optional[dict] = None):
        if not isinstance(M, Manifold):
            raise TypeError(f"KMeans needs a Manifold to cluster on, got {type(M).__name__}")
        self.M = M
        self.k = _points.positive_int(k, "k (the number of clusters)")
        if isinstance(init, str) and init != "k-means++":
            raise ValueError(f"init must be 'k-means++' or an array of {self.k} centres, got {init!r}")
        self.init = init
        self.n_init = _points.positive_int(n_init, "n_init")
        self.max_iter = _points.positive_int(max_iter, "max_iter")
        self.tol, self.seed = _points.check_real("tol", tol), _check_seed(seed)
        self.mean_options = _check_mean_options(mean_options)

    # ------------------------------------------------------------ sklearn API
    def fit(self, X: Any, y: Any = None) -> "KMeans":
        """Cluster the points ``X`` (shape ``(n, dim)``, points of ``M``)."""
        X = self._points(X)
        n = X.shape[0]
        if n < self.k:
            raise ValueError(f"n_samples = {n} should be >= k = {self.k}")
        rng = _points.random_generator(self.seed, "seed")
        best = None
        for _ in range(self.n_init if isinstance(self.init, str) else 1):
            run = self._lloyd(X, self._seed_centres(X, rng))
            if best is None or run[2] < best[2]:
                best = run
        self.cluster_centers_, self.labels_, self.inertia_, self.n_iter_ = best
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Index of the nearest centre of each point of ``X``."""
        self._check_fitted()
        X = self._points(X)
        return np.argmin(_pairwise_sq_dist(self.M, X, self._like(self.cluster_centers_, X)), axis=1)

    def fit_predict(self, X: Any, y: Any = None) -> np.ndarray:
        """``fit(X).labels_``."""
        return self.fit(X).labels_

    def transform(self, X: Any) -> np.ndarray:
        """Geodesic distances ``(n, k)`` of the points of ``X`` to the centres."""
        self._check_fitted()
        X = self._points(X)
        return np.sqrt(_pairwise_sq_dist(self.M, X, self._like(self.cluster_centers_, X)))

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the inertia of ``X`` with respect to the fitted centres (scikit-learn's sign)."""
        return -float(np.sum(np.min(self.transform(X) ** 2, axis=1)))

    # ------------------------------------------------------------ internals
    def _points(self, X: Any):
        X = self.M._as_point(X, "points")
        if len(X.shape) != 2:
            raise ValueError(f"X must have shape (n, {self.M.dim}), got {tuple(X.shape)}")
        return _points.plain(X)

    @staticmethod
    def _like(C: Any, X: Any):
        return B.array(B.to_numpy(C), like=X) if B.is_torch(X) != B.is_torch(C) else C

    def _check_fitted(self) -> None:
        check_fitted(self, "cluster_centers_")

    def _seed_centres(self, X: Any, rng: np.random.Generator):
        n = X.shape[0]
        if not isinstance(self.init, str):
            C = self.M._as_point(self.init, "init")
            if tuple(C.shape) != (self.k, self.M.dim):
                raise ValueError(f"init must have shape ({self.k}, {self.M.dim}), got {tuple(C.shape)}")
            return self._like(_points.plain(C), X)
        idx = [int(rng.integers(n))]
        d2 = _pairwise_sq_dist(self.M, X, X[idx[0]][None])[:, 0]
        for _ in range(1, self.k):
            total = d2.sum()
            nxt = int(rng.choice(n, p=d2 / total)) if total > 0 else int(rng.integers(n))
            idx.append(nxt)
            d2 = np.minimum(d2, _pairwise_sq_dist(self.M, X, X[nxt][None])[:, 0])
        return B.stack([X[i] for i in idx])

    def _lloyd(self, X: Any, C: Any):
        M = self.M
        labels = None
        D = _pairwise_sq_dist(M, X, C)
        for it in range(1, self.max_iter + 1):
            new = np.argmin(D, axis=1)
            stable = labels is not None and np.array_equal(new, labels)
            labels = new
            if stable:
                break
            scale = math.sqrt(float(np.mean(D[np.arange(len(labels)), labels]))) or 1.0
            centres = []
            for j in range(self.k):
                members = np.flatnonzero(labels == j)
                if members.size == 0:   # an empty cluster takes the point farthest from its centre
                    far = int(np.argmax(D[np.arange(len(labels)), labels]))
                    centres.append(X[far])
                    labels[far] = j
                    continue
                opts = {"x0": C[j], **self.mean_options} if members.size > 2 else dict(self.mean_options)
                centres.append(M.frechet_mean(X[members], **opts))
            C_new = B.stack([_points.plain(c) for c in centres])
            moved = np.asarray(B.to_numpy(M.metric.dist(C, C_new)), dtype=float)
            C = C_new
            D = _pairwise_sq_dist(M, X, C)
            logger.debug("k-means iteration %d: inertia %.6g, largest move %.3g", it,
                         float(np.sum(np.min(D, axis=1))), float(moved.max()))
            if moved.max() <= self.tol * scale:
                labels = np.argmin(D, axis=1)
                break
        inertia = float(np.sum(D[np.arange(len(labels)), labels]))
        return C, labels, inertia, it
