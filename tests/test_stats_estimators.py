"""ig.stats: geodesic k-means and tangent PCA (scikit-learn conventions), against scikit-learn on flat spaces."""
import numpy as np
import pytest

import infogeo as ig

B = ig.backend
sklearn = pytest.importorskip("sklearn")
from sklearn.cluster import KMeans as SKKMeans  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402


def _blobs(rng, k=3, n=20, dim=2, spread=0.3):
    centres = rng.normal(0, 4, (k, dim))
    return np.concatenate([c + spread * rng.standard_normal((n, dim)) for c in centres])


def test_kmeans_on_euclidean_space_matches_scikit_learn():
    rng = np.random.default_rng(0)
    X = _blobs(rng, k=3, spread=1.5)
    init = X[[0, 25, 50]]
    ours = ig.stats.KMeans(ig.Euclidean(2), 3, init=init, tol=0).fit(X)
    theirs = SKKMeans(3, init=init, n_init=1, tol=0, algorithm="lloyd").fit(X)
    np.testing.assert_array_equal(ours.labels_, theirs.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, theirs.cluster_centers_, rtol=1e-10)
    np.testing.assert_allclose(ours.inertia_, theirs.inertia_, rtol=1e-10)
    np.testing.assert_array_equal(ours.predict(X[:7]), theirs.predict(X[:7]))
    np.testing.assert_allclose(ours.transform(X[:5]), theirs.transform(X[:5]), rtol=1e-10)
    np.testing.assert_allclose(ours.score(X), theirs.score(X), rtol=1e-10)


def test_kmeans_plus_plus_finds_separated_clusters_of_gaussians():
    G = ig.Gaussian(1)
    rng = np.random.default_rng(1)
    groups = [(-3.0, 0.2), (0.0, 3.0), (4.0, 0.5)]
    X = np.concatenate([np.stack([m + 0.1 * rng.standard_normal(8), s * np.exp(0.1 * rng.standard_normal(8))],
                                 axis=1) for m, s in groups])
    km = ig.stats.KMeans(G, 3, seed=0, n_init=3)
    labels = km.fit_predict(X)
    truth = np.repeat(np.arange(3), 8)
    # the same partition up to renaming
    assert len({(a, b) for a, b in zip(labels, truth)}) == 3
    # each centre is the Fréchet mean of its cluster, and the inertia is the sum of squared distances
    for j in range(3):
        np.testing.assert_allclose(km.cluster_centers_[j], G.frechet_mean(X[labels == j]), rtol=1e-6)
    d = np.asarray(G.dist(X, km.cluster_centers_[labels]))
    np.testing.assert_allclose(km.inertia_, np.sum(d ** 2), rtol=1e-10)
    # the best of three seedings is no worse than the first of them alone (same generator, same first draw)
    assert km.inertia_ <= ig.stats.KMeans(G, 3, seed=0, n_init=1).fit(X).inertia_ + 1e-12


def test_kmeans_errors():
    G = ig.Gaussian(1)
    with pytest.raises(ValueError, match="n_samples"):
        ig.stats.KMeans(G, 3).fit(np.array([[0.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(ig.stats.NotFittedError, match="not fitted"):
        ig.stats.KMeans(G, 2).predict(np.array([[0.0, 1.0]]))
    # scikit-learn's error where it is installed (a ValueError and an AttributeError either way)
    sklearn_exceptions = pytest.importorskip("sklearn.exceptions")
    assert ig.stats.NotFittedError is sklearn_exceptions.NotFittedError
    assert issubclass(ig.stats.NotFittedError, (ValueError, AttributeError))
    with pytest.raises(sklearn_exceptions.NotFittedError):
        ig.stats.TangentPCA(G).transform(np.array([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="init"):
        ig.stats.KMeans(G, 2, init="random")
    with pytest.raises(ValueError, match="outside|positive|variance"):
        ig.stats.KMeans(G, 1).fit(np.array([[0.0, -1.0]]))


def test_tangent_pca_on_euclidean_space_matches_scikit_learn():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((40, 3)) @ np.diag([3.0, 1.0, 0.2]) + 1.0
    ours = ig.stats.TangentPCA(ig.Euclidean(3)).fit(X)
    theirs = PCA().fit(X)
    np.testing.assert_allclose(ours.explained_variance_, theirs.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(np.abs(ours.components_), np.abs(theirs.components_), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(np.abs(ours.transform(X)), np.abs(theirs.transform(X)), rtol=1e-8, atol=1e-10)


def test_tangent_pca_of_gaussians_is_metric_orthonormal_and_invertible():
    G = ig.Gaussian(2)
    rng = np.random.default_rng(3)
    X = np.stack([G.random_point(rng) for _ in range(6)])
    pca = ig.stats.TangentPCA(G).fit(X)
    Gm = np.asarray(B.to_numpy(G.metric.matrix(pca.mean_)))
    np.testing.assert_allclose(pca.components_ @ Gm @ pca.components_.T, np.eye(G.dim), atol=1e-10)
    assert np.all(np.diff(pca.explained_variance_) <= 1e-12)
    np.testing.assert_allclose(pca.explained_variance_ratio_.sum(), 1.0, rtol=1e-12)
    Z = pca.transform(X)
    # the coordinates are Riemannian lengths: |z| = dist(mean, x)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), np.asarray(G.dist(np.broadcast_to(pca.mean_, X.shape).copy(),
                                                                          X)), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(pca.inverse_transform(Z)), X, rtol=1e-7, atol=1e-9)
    one = ig.stats.TangentPCA(G, n_components=1).fit(X)
    assert one.components_.shape == (1, G.dim)
    with pytest.raises(ValueError, match="n_components"):
        ig.stats.TangentPCA(G, n_components=G.dim + 1)


@pytest.mark.parametrize("kwargs, error", [
    (dict(seed=-1.0), TypeError), (dict(seed="a"), TypeError), (dict(seed=float("nan")), TypeError),
    (dict(seed=-1), ValueError), (dict(mean_options={"bogus": 1}), ValueError),
    (dict(mean_options=[("tol", 1.0)]), TypeError), (dict(tol="a"), TypeError), (dict(M=None), TypeError)])
def test_kmeans_settings_are_checked_at_construction(kwargs, error):
    """Found by an independent fault-battery sweep: a bad seed or option failed in fit with numpy's or
    frechet_mean's message, KMeans(None, 2) was accepted."""
    M = kwargs.pop("M", ig.Gaussian(1))
    with pytest.raises(error, match="seed|mean_options|tol|Manifold"):
        ig.stats.KMeans(M, 2, **kwargs)


@pytest.mark.parametrize("kwargs, error", [(dict(max_iter="a"), TypeError), (dict(max_time="a"), TypeError),
                                           (dict(max_time=float("nan")), ValueError)])
def test_a_budget_of_the_wrong_type_is_refused(kwargs, error):
    from infogeo.budget import Budget
    with pytest.raises(error, match="max_iter|max_time"):
        Budget(**kwargs)
